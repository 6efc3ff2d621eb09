package runtime

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/wal"
)

// Runtime-level connector keys: what every connector accepts besides its plugin's own keys.
const (
	KeyName                = "name"
	KeyClass               = "connector.class"
	KeyTransforms          = "transforms"
	KeyPredicates          = "predicates"
	KeyTopics              = "topics"
	KeyTopicsRegex         = "topics.regex"
	KeyErrorsTolerance     = "errors.tolerance"
	KeyDLQTopic            = "errors.deadletterqueue.topic.name"
	KeyDLQHeaders          = "errors.deadletterqueue.context.headers.enable"
	KeyErrorsLog           = "errors.log.enable"
	KeyErrorsLogMessages   = "errors.log.include.messages"
	KeyRetryTimeout        = "errors.retry.timeout"
	KeyRetryDelayMax       = "errors.retry.delay.max.ms"
	KeyTopicPartitions     = "topic.creation.default.partitions"
	KeyTopicCreationPrefix = "topic.creation.default."
	KeyMaxPollRecords      = "consumer.override.max.poll.records"
	KeyFlushInterval       = "offset.flush.interval.ms"
)

func ignored(name, doc string) connect.ConfigKey {
	return connect.ConfigKey{Name: name, Type: connect.TypeString, Ignored: true, Doc: doc, Group: "Ignored", Importance: connect.Low}
}

func ignoredPrefix(name, doc string) connect.ConfigKey {
	k := ignored(name, doc)
	k.Prefix = true
	return k
}

// commonDef is what sources and sinks both accept.
func commonDef() connect.ConfigDef {
	return connect.ConfigDef{
		{Name: KeyName, Type: connect.TypeString, Group: "Common", Importance: connect.High,
			Doc: "The connector's name. Optional in a pipeline file; when set it must equal the connector's name."},
		{Name: KeyClass, Type: connect.TypeClass, Group: "Common", Importance: connect.High,
			Doc: "The connector class (short name or a Debezium / Kafka Connect class name). Optional in a pipeline file when class is set."},
		{Name: KeyTransforms, Type: connect.TypeList, Group: "Transforms",
			Doc: "Aliases of the single-message transforms to apply, in order; each is configured by transforms.<alias>.type and transforms.<alias>.*."},
		{Name: "transforms.", Prefix: true, Type: connect.TypeString, Group: "Transforms",
			Doc: "Settings of one transform: transforms.<alias>.type, transforms.<alias>.predicate, transforms.<alias>.negate and the transform's own keys."},
		{Name: KeyPredicates, Type: connect.TypeList, Group: "Transforms",
			Doc: "Aliases of the predicates that transforms may refer to; each is configured by predicates.<alias>.type and predicates.<alias>.*."},
		{Name: "predicates.", Prefix: true, Type: connect.TypeString, Group: "Transforms",
			Doc: "Settings of one predicate: predicates.<alias>.type and the predicate's own keys."},
		{Name: KeyErrorsTolerance, Type: connect.TypeString, Default: "none", HasDefault: true, Enum: []string{"none", "all"}, Group: "Error Handling",
			Doc: "What happens to a record that a transform or the sink rejects, or that cannot be decoded: none fails the task, all skips the record (to the dead-letter topic when one is set) and goes on."},
		{Name: KeyDLQTopic, Type: connect.TypeString, Default: "", HasDefault: true, Group: "Error Handling", Check: checkTopicName,
			Doc: "The dead-letter topic that receives rejected records when errors.tolerance=all; empty: rejected records are only counted (and logged with errors.log.enable)."},
		{Name: KeyDLQHeaders, Type: connect.TypeBoolean, Default: "true", HasDefault: true, Group: "Error Handling",
			Doc: "Add the error and the record's origin as __connect.errors.* headers to dead-letter records. Defaults to true (Kafka Connect's default is false)."},
		{Name: KeyErrorsLog, Type: connect.TypeBoolean, Default: "false", HasDefault: true, Group: "Error Handling",
			Doc: "Log every rejected record at WARN with its origin and error."},
		{Name: KeyErrorsLogMessages, Type: connect.TypeBoolean, Default: "false", HasDefault: true, Group: "Error Handling",
			Doc: "With errors.log.enable, include the record's key and value in the log line."},
		{Name: KeyRetryTimeout, Type: connect.TypeLong, Default: "-1", HasDefault: true, Check: connect.AtLeast(-1), Group: "Error Handling",
			Doc: "Milliseconds a task keeps being restarted after retriable errors without making progress before it is FAILED; -1 retries forever. Kafka Connect's default is 0; sluice's is -1 because a CDC pipeline should outlast a database restart."},
		{Name: KeyRetryDelayMax, Type: connect.TypeLong, Default: "60000", HasDefault: true, Check: connect.AtLeast(1), Group: "Error Handling",
			Doc: "The longest wait, in milliseconds, between restarts of a failing task (the wait doubles from one second up to this)."},
		ignored("tasks.max", "sluice runs one task per connector."),
		ignored("key.converter", "sluice stores keys as JSON in its log."),
		ignored("value.converter", "sluice stores values as JSON in its log."),
		ignored("header.converter", "sluice stores header values as bytes."),
		ignoredPrefix("key.converter.", "sluice stores keys as JSON in its log."),
		ignoredPrefix("value.converter.", "sluice stores values as JSON in its log."),
		ignoredPrefix("header.converter.", "sluice stores header values as bytes."),
		ignored("errors.deadletterqueue.topic.replication.factor", "the log's replication settings apply to every topic."),
		ignored("config.action.reload", "connectors are restarted through the API."),
	}
}

// sourceDef is what every source accepts besides commonDef.
func sourceDef() connect.ConfigDef {
	return connect.ConfigDef{
		{Name: KeyFlushInterval, Type: connect.TypeLong, Default: "1000", HasDefault: true, Check: connect.InRange(0, 3600000), Group: "Common",
			Doc: "Milliseconds between commits of the source position (each commit is followed by the source's Ack); 0 commits after every batch. Records are appended exactly once whatever the interval: after a crash the source replays at most this much, and the runtime drops what the log already holds. A Kafka Connect worker key (default 60000 there), per connector in sluice."},
		{Name: KeyTopicPartitions, Type: connect.TypeInt, Default: "-1", HasDefault: true, Check: checkPartitions, Group: "Topic Creation",
			Doc: "Partitions of the topics this connector creates; -1 uses the log's default."},
		{Name: KeyTopicCreationPrefix, Prefix: true, Type: connect.TypeString, Group: "Topic Creation",
			Doc: "Kafka topic settings (cleanup.policy, retention.ms, ...) of the topics this connector creates, e.g. topic.creation.default.cleanup.policy=compact."},
		ignored("topic.creation.groups", "every topic a connector creates uses the topic.creation.default.* settings."),
		ignoredPrefix("topic.creation.", "every topic a connector creates uses the topic.creation.default.* settings."),
		ignored("exactly.once.support", "sources always write exactly once into the log."),
		{Name: KeySignalTopic, Type: connect.TypeString, Default: "", HasDefault: true, Group: "Signals",
			Doc: "Topic of the log whose records are Debezium signals for this connector (with signal.enabled.channels including kafka): key the connector's topic.prefix, " +
				"value {\"type\": \"execute-snapshot\", \"data\": {...}}. Empty: <topic.prefix>-signal. Read from the committed offset of signal.kafka.groupId."},
		{Name: KeySignalGroup, Type: connect.TypeString, Default: "", HasDefault: true, Group: "Signals",
			Doc: "Consumer group whose offsets record the signals applied; empty: sluice-signal-<connector>."},
		{Name: KeySignalPollMillis, Type: connect.TypeLong, Default: "1000", HasDefault: true, Check: connect.InRange(10, 60000), Group: "Signals",
			Doc: "Most milliseconds a read of the signal topic waits for a signal."},
		ignored("signal.kafka.bootstrap.servers", "the signal topic is a topic of sluice's log."),
		ignoredPrefix("signal.consumer.", "the signal topic is a topic of sluice's log."),
		ignored("transaction.boundary", "each batch a source returns is appended with its position."),
		ignored("offsets.storage.topic", "source positions are kept in the log's __sluice_source_offsets topic."),
		ignoredPrefix("producer.override.", "the runtime appends to the embedded log directly."),
	}
}

// sinkDef is what every sink accepts besides commonDef.
func sinkDef() connect.ConfigDef {
	return connect.ConfigDef{
		{Name: KeyTopics, Type: connect.TypeList, Group: "Common", Importance: connect.High,
			Doc: "Topics to consume. Set this or topics.regex."},
		{Name: KeyTopicsRegex, Type: connect.TypeString, Group: "Common", Importance: connect.High, Check: checkRegex,
			Doc: "A regular expression (Go syntax, matching the whole name) of the topics to consume; topics created later are picked up. Internal topics (starting with __) match only if the expression starts with __."},
		{Name: KeyMaxPollRecords, Type: connect.TypeInt, Default: "500", HasDefault: true, Check: connect.InRange(1, 100000), Group: "Common",
			Doc: "The most records passed to one Write."},
		{Name: KeyFlushInterval, Type: connect.TypeLong, Default: "1000", HasDefault: true, Check: connect.InRange(0, 3600000), Group: "Common",
			Doc: "Milliseconds between commits of the consumer offsets while records keep coming; offsets are also committed 20 ms after the last write when nothing new arrives, and when the connector is paused, rebuilt or stopped; 0 commits after every Write. Only what Write returned is committed; a crash replays what was written since the last commit (the Elasticsearch and Redis views' version guards make replays harmless). A Kafka Connect worker key (default 60000 there), per connector in sluice."},
		ignoredPrefix("consumer.override.", "the runtime reads the embedded log directly."),
	}
}

// DefFor returns the full definition of a connector of the given plugin: the runtime-level keys
// of its kind, then the plugin's own keys. Validation, the REST config/validate endpoint and the
// connector's Config all use it.
func DefFor(p connect.Plugin) connect.ConfigDef {
	def := commonDef()
	switch p.Kind {
	case connect.KindSource:
		def = def.Merge(sourceDef())
	case connect.KindSink:
		def = def.Merge(sinkDef())
	}
	return def.Merge(p.Config)
}

// RuntimeDef returns the runtime-level keys of a connector kind (KindSource or KindSink).
func RuntimeDef(kind connect.Kind) connect.ConfigDef {
	return DefFor(connect.Plugin{Kind: kind})
}

func checkPartitions(v string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
	if err != nil || (n != -1 && n < 1) {
		return fmt.Errorf("must be -1 or at least 1 (got %s)", v)
	}
	return nil
}

func checkRegex(v string) error {
	if _, err := regexp.Compile("^(?:" + v + ")$"); err != nil {
		return fmt.Errorf("must be a regular expression: %v", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	return nil
}

// validName is what topic and connector names may contain (Kafka's legal topic characters).
var validName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

func checkTopicName(v string) error {
	if v == "" {
		return nil
	}
	if len(v) > 249 || !validName.MatchString(v) || v == "." || v == ".." {
		return fmt.Errorf("must be a topic name: up to 249 of A-Z a-z 0-9 . _ - (got %q)", v)
	}
	return nil
}

// CheckName validates a connector name: 1 to 200 of A-Z a-z 0-9 . _ - (it names topics and
// consumer groups).
func CheckName(name string) error {
	if name == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(name) > 200 || !validName.MatchString(name) {
		return fmt.Errorf("must be 1 to 200 of A-Z a-z 0-9 . _ - (got %q)", name)
	}
	return nil
}

// ChainBuilder builds a connector's transform chain from its configuration (the transforms,
// transforms.*, predicates and predicates.* keys): the transforms package's BuildChain. It
// returns a nil Transform when the configuration names no transforms.
type ChainBuilder func(reg *connect.Registry, config map[string]string) (connect.Transform, []connect.FieldError)

// Checked is a connector whose configuration passed validation, ready to run.
type Checked struct {
	Name   string
	Plugin connect.Plugin
	Config connect.Config
	// Chain is the connector's transform chain; nil when it has none.
	Chain connect.Transform
}

// Check validates one connector: its class, the runtime-level keys, the plugin's keys and
// cross-key rules, and its transform chain. It does no I/O and reports every problem at once,
// sorted by key. Problems with the class carry the key "connector.class".
func Check(reg *connect.Registry, build ChainBuilder, name, class string, raw map[string]string) (Checked, []connect.FieldError) {
	var errs []connect.FieldError
	if err := CheckName(name); err != nil {
		errs = append(errs, connect.FieldError{Key: KeyName, Message: err.Error()})
	}
	if class == "" {
		class = strings.TrimSpace(raw[KeyClass])
	}
	if class == "" {
		return Checked{}, append(errs, connect.FieldError{Key: KeyClass, Message: "is required (the connector class, one of " + strings.Join(reg.Names(connect.KindSource, connect.KindSink), ", ") + ")"})
	}
	p, ok := reg.Lookup(class, connect.KindSource, connect.KindSink)
	if !ok {
		msg := fmt.Sprintf("unknown connector class %q", class)
		names := reg.Names(connect.KindSource, connect.KindSink)
		if s, ok := connect.SuggestKey(class, names); ok {
			msg += fmt.Sprintf("; did you mean %q?", s)
		} else {
			msg += "; known: " + strings.Join(names, ", ")
		}
		return Checked{}, append(errs, connect.FieldError{Key: KeyClass, Message: msg})
	}
	if c := strings.TrimSpace(raw[KeyClass]); c != "" {
		if q, ok := reg.Lookup(c, connect.KindSource, connect.KindSink); !ok || q.Name != p.Name {
			errs = append(errs, connect.FieldError{Key: KeyClass, Message: fmt.Sprintf("names %q but the connector's class is %q", c, class)})
		}
	}
	def := DefFor(p)
	cfg, ferrs := def.Parse(raw)
	errs = append(errs, ferrs...)
	errs = append(errs, crossCheck(name, p, cfg, ferrs)...)
	if len(ferrs) == 0 && p.Validate != nil {
		errs = append(errs, p.Validate(cfg)...)
	}
	var chain connect.Transform
	if len(cfg.List(KeyTransforms)) > 0 || len(cfg.List(KeyPredicates)) > 0 {
		if build == nil {
			errs = append(errs, connect.FieldError{Key: KeyTransforms, Message: "transforms are not available in this build"})
		} else {
			var terrs []connect.FieldError
			chain, terrs = build(reg, raw)
			errs = append(errs, terrs...)
		}
	}
	sortFieldErrors(errs)
	if len(errs) > 0 {
		return Checked{}, errs
	}
	return Checked{Name: name, Plugin: p, Config: cfg, Chain: chain}, nil
}

// crossCheck applies the runtime's rules that span keys; keys that failed their own checks
// (bad) are left out.
func crossCheck(name string, p connect.Plugin, cfg connect.Config, bad []connect.FieldError) []connect.FieldError {
	for _, fe := range bad {
		switch fe.Key {
		case KeyName, KeyTopics, KeyTopicsRegex, KeyDLQTopic:
			return nil
		}
	}
	var errs []connect.FieldError
	if n := cfg.String(KeyName); n != "" && n != name {
		errs = append(errs, connect.FieldError{Key: KeyName, Message: fmt.Sprintf("is %q but the connector is named %q", n, name)})
	}
	if p.Kind == connect.KindSink {
		topics, regex := cfg.List(KeyTopics), cfg.String(KeyTopicsRegex)
		switch {
		case len(topics) == 0 && regex == "":
			errs = append(errs, connect.FieldError{Key: KeyTopics, Message: "is required: set topics or topics.regex"})
		case len(topics) > 0 && regex != "":
			errs = append(errs, connect.FieldError{Key: KeyTopicsRegex, Message: "must not be set together with topics"})
		}
		for _, t := range topics {
			if err := checkTopicName(t); err != nil {
				errs = append(errs, connect.FieldError{Key: KeyTopics, Message: err.Error()})
			}
		}
		if dlq := cfg.String(KeyDLQTopic); dlq != "" {
			for _, t := range topics {
				if t == dlq {
					errs = append(errs, connect.FieldError{Key: KeyDLQTopic, Message: fmt.Sprintf("must not be one of the topics the connector consumes (got %q)", dlq)})
				}
			}
			if regex != "" && regexp.MustCompile("^(?:"+regex+")$").MatchString(dlq) {
				errs = append(errs, connect.FieldError{Key: KeyDLQTopic, Message: fmt.Sprintf("must not match topics.regex (got %q)", dlq)})
			}
		}
	}
	return errs
}

func sortFieldErrors(errs []connect.FieldError) {
	for i := 1; i < len(errs); i++ {
		for j := i; j > 0 && less(errs[j], errs[j-1]); j-- {
			errs[j], errs[j-1] = errs[j-1], errs[j]
		}
	}
}

func less(a, b connect.FieldError) bool {
	if a.Key != b.Key {
		return a.Key < b.Key
	}
	return a.Message < b.Message
}

// Checker validates pipeline configurations with the runtime's definitions; it implements
// config.Checker.
type Checker struct {
	Registry *connect.Registry
	Chain    ChainBuilder
}

// CheckConnector validates one connector; see Check.
func (c Checker) CheckConnector(name, class string, config map[string]string) []connect.FieldError {
	_, errs := Check(c.Registry, c.Chain, name, class, config)
	return errs
}

// CheckTopicConfig validates Kafka-named topic settings as the log reads them.
func (c Checker) CheckTopicConfig(config map[string]string) []connect.FieldError {
	_, err := wal.ParseTopicConfig(DefaultTopicConfig(), config)
	if err == nil {
		return nil
	}
	var errs []connect.FieldError
	for _, line := range strings.Split(err.Error(), "\n") {
		key, msg, ok := strings.Cut(line, ": ")
		if !ok {
			key, msg = "", line
		}
		errs = append(errs, connect.FieldError{Key: key, Message: msg})
	}
	sortFieldErrors(errs)
	return errs
}
