package transforms

import "github.com/sluice-cdc/sluice/connect"

// Plugins returns every transform and predicate, for the registry that cmd/sluice builds.
// Each has a short name and its Kafka Connect / Debezium Java class names as aliases.
func Plugins() []connect.Plugin {
	ps := []connect.Plugin{
		unwrapPlugin(),
		filterPlugin(),
		contentRouterPlugin(),
		dropPlugin(),
		regexRouterPlugin(),
		logicalTableRouterPlugin(),
		valueToKeyPlugin(),
		insertHeaderPlugin(),
		dropHeadersPlugin(),
		outboxPlugin(),
		topicNameMatchesPlugin(),
		hasHeaderKeyPlugin(),
		recordIsTombstonePlugin(),
		expressionPredicatePlugin(),
	}
	for _, group := range [][]connect.Plugin{
		replaceFieldPlugins(),
		maskFieldPlugins(),
		insertFieldPlugins(),
		extractFieldPlugins(),
		hoistFieldPlugins(),
		castPlugins(),
		timestampConverterPlugins(),
		flattenPlugins(),
		headerFromPlugins(),
	} {
		ps = append(ps, group...)
	}
	return ps
}
