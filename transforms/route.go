package transforms

import (
	"strings"
	"sync"

	"github.com/sluice-cdc/sluice/connect"
)

// topicCacheSize bounds the memo of topic renames; topics are few, so it is rarely full.
const topicCacheSize = 4096

// topicCache memoizes a pure function of the topic name, so that routing a record costs a
// map lookup instead of a regular expression match.
type topicCache struct {
	mu sync.RWMutex
	m  map[string]cachedTopic
}

type cachedTopic struct {
	topic   string
	matched bool
}

func (c *topicCache) get(topic string, compute func(string) (string, bool)) (string, bool) {
	c.mu.RLock()
	v, ok := c.m[topic]
	c.mu.RUnlock()
	if ok {
		return v.topic, v.matched
	}
	out, matched := compute(topic)
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[string]cachedTopic)
	}
	if len(c.m) < topicCacheSize {
		// copies: the memo outlives the record, whose memory (a topic taken from a value)
		// the source may write again once the batch is encoded (connect.Batch.Release)
		c.m[strings.Clone(topic)] = cachedTopic{strings.Clone(out), matched}
	}
	c.mu.Unlock()
	return out, matched
}

func regexRouterPlugin() connect.Plugin {
	return connect.Plugin{
		Name:    "route",
		Aliases: []string{"org.apache.kafka.connect.transforms.RegexRouter"},
		Kind:    connect.KindTransform,
		Doc: "Renames the topic of records whose topic matches the regular expression as a whole " +
			"(Kafka Connect's RegexRouter); others pass unchanged.",
		Config: connect.ConfigDef{
			{Name: "regex", Type: connect.TypeString, Required: true, Check: checkRegex,
				Doc: "Regular expression matched against the whole topic name."},
			{Name: "replacement", Type: connect.TypeString, Required: true,
				Doc: "The new topic; $1 or ${name} insert captured groups, \\$ a dollar sign (Java's syntax)."},
		},
		Validate: func(cfg connect.Config) []connect.FieldError {
			return checkReplacement(cfg, "regex", "replacement")
		},
		NewTransform: func(cfg connect.Config) (connect.Transform, error) {
			rp, err := newReplacer(cfg.String("regex"), cfg.String("replacement"))
			if err != nil {
				return nil, err
			}
			return &regexRouter{rp: rp}, nil
		},
	}
}

type regexRouter struct {
	rp    *replacer
	cache topicCache
}

func (t *regexRouter) Apply(r connect.Record) (connect.Record, bool, error) {
	r.Topic, _ = t.cache.get(r.Topic, t.rp.replace)
	return r, true, nil
}

// DefaultKeyFieldName is the key field ByLogicalTableRouter adds to keep keys unique.
const DefaultKeyFieldName = "__dbz__physicalTableIdentifier"

func logicalTableRouterPlugin() connect.Plugin {
	return connect.Plugin{
		Name:    "logical_table_router",
		Aliases: []string{"io.debezium.transforms.ByLogicalTableRouter"},
		Kind:    connect.KindTransform,
		Doc: "Merges the topics of several physical tables (shards) into one logical topic and adds " +
			"the physical table to the key so that keys stay unique (Debezium's ByLogicalTableRouter).",
		Config: connect.ConfigDef{
			{Name: "topic.regex", Type: connect.TypeString, Required: true, Check: checkRegex,
				Doc: "Regular expression matched against the whole topic name; other records pass unchanged."},
			{Name: "topic.replacement", Type: connect.TypeString, Required: true,
				Doc: "The logical topic; $1 or ${name} insert groups captured by topic.regex."},
			{Name: "key.enforce.uniqueness", Type: connect.TypeBoolean, Default: "true", HasDefault: true,
				Doc: "Add a field to the key naming the physical table (its original topic)."},
			{Name: "key.field.name", Type: connect.TypeString, Default: DefaultKeyFieldName, HasDefault: true,
				Doc: "The name of the key field added for uniqueness."},
			{Name: "key.field.regex", Type: connect.TypeString, HasDefault: true, Check: checkRegex,
				Doc: "With key.field.replacement: derive the key field's value from the original topic " +
					"(whole-name match) instead of using the topic itself."},
			{Name: "key.field.replacement", Type: connect.TypeString, HasDefault: true,
				Doc: "The key field's value; $1 or ${name} insert groups captured by key.field.regex."},
			{Name: "logical.table.cache.size", Type: connect.TypeInt, Default: "16", HasDefault: true, Ignored: true,
				Doc: "Accepted for compatibility; sluice memoizes up to 4096 topic names."},
			{Name: "schema.name.adjustment.mode", Type: connect.TypeString, Default: "none", HasDefault: true, Ignored: true,
				Doc: "Accepted for compatibility; sluice records carry no schema names."},
		},
		Validate: func(cfg connect.Config) []connect.FieldError {
			errs := checkReplacement(cfg, "topic.regex", "topic.replacement")
			if cfg.String("key.field.regex") != "" {
				if cfg.String("key.field.replacement") == "" {
					errs = append(errs, connect.FieldError{Key: "key.field.replacement", Message: "is required when key.field.regex is set"})
				} else {
					errs = append(errs, checkReplacement(cfg, "key.field.regex", "key.field.replacement")...)
				}
			}
			return errs
		},
		NewTransform: func(cfg connect.Config) (connect.Transform, error) {
			t := &logicalTableRouter{
				unique:   cfg.Bool("key.enforce.uniqueness"),
				keyField: cfg.String("key.field.name"),
			}
			var err error
			if t.topic, err = newReplacer(cfg.String("topic.regex"), cfg.String("topic.replacement")); err != nil {
				return nil, err
			}
			if cfg.String("key.field.regex") != "" {
				if t.keyValue, err = newReplacer(cfg.String("key.field.regex"), cfg.String("key.field.replacement")); err != nil {
					return nil, err
				}
			}
			return t, nil
		},
	}
}

type logicalTableRouter struct {
	topic    *replacer
	keyValue *replacer
	unique   bool
	keyField string
	cache    topicCache
}

func (t *logicalTableRouter) Apply(r connect.Record) (connect.Record, bool, error) {
	old := r.Topic
	topic, matched := t.cache.get(old, t.topic.replace)
	if !matched {
		return r, true, nil
	}
	r.Topic = topic
	if !t.unique {
		return r, true, nil
	}
	if key, ok := r.Key.(connect.Row); ok {
		id := old
		if t.keyValue != nil {
			id, _ = t.keyValue.replace(old)
		}
		out := make(connect.Row, len(key), len(key)+1)
		copy(out, key)
		r.Key = out.Set(t.keyField, id)
	}
	return r, true, nil
}
