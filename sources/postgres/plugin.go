package postgres

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/sources/snapshot"
)

// Version is the plugin's version, reported in every event's source.version.
const Version = "0.1.0"

// Config keys, with Debezium's names where Debezium has the setting.
const (
	KeyHostname          = "database.hostname"
	KeyPort              = "database.port"
	KeyUser              = "database.user"
	KeyPassword          = "database.password"
	KeyDBName            = "database.dbname"
	KeySSLMode           = "database.sslmode"
	KeySSLRootCert       = "database.sslrootcert"
	KeySSLCert           = "database.sslcert"
	KeySSLKey            = "database.sslkey"
	KeyConnectTimeout    = "database.connect.timeout.ms"
	KeyTopicPrefix       = "topic.prefix"
	KeyPluginName        = "plugin.name"
	KeySlotName          = "slot.name"
	KeySlotDropOnStop    = "slot.drop.on.stop"
	KeySlotMaxRetries    = "slot.max.retries"
	KeySlotRetryDelay    = "slot.retry.delay.ms"
	KeyPublicationName   = "publication.name"
	KeyPublicationMode   = "publication.autocreate.mode"
	KeySchemaInclude     = "schema.include.list"
	KeySchemaExclude     = "schema.exclude.list"
	KeyTableInclude      = "table.include.list"
	KeyTableExclude      = "table.exclude.list"
	KeyColumnInclude     = "column.include.list"
	KeyColumnExclude     = "column.exclude.list"
	KeyMaskWith          = "column.mask.with."
	KeyMaskHash          = "column.mask.hash."
	KeyTruncateTo        = "column.truncate.to."
	KeyMessageKeyColumns = "message.key.columns"
	KeySnapshotMode      = "snapshot.mode"
	KeySnapshotFetchSize = "snapshot.fetch.size"
	KeyHeartbeatInterval = "heartbeat.interval.ms"
	KeyHeartbeatQuery    = "heartbeat.action.query"
	KeyTombstones        = "tombstones.on.delete"
	KeyDecimalMode       = "decimal.handling.mode"
	KeyBinaryMode        = "binary.handling.mode"
	KeyTimePrecision     = "time.precision.mode"
	KeyIntervalMode      = "interval.handling.mode"
	KeyHstoreMode        = "hstore.handling.mode"
	KeyIdentityAutoset   = "replica.identity.autoset.values"
	KeySkippedOps        = "skipped.operations"
	KeyStatusInterval    = "status.update.interval.ms"
	KeyMaxBatchSize      = "max.batch.size"
	KeyMaxQueueSize      = "max.queue.size"
	KeyProtocolVersion   = "pgoutput.protocol.version"
	KeySpillDir          = "pgoutput.spill.dir"
	KeyMaxSlotLagBytes   = "incremental.snapshot.max.slot.lag.bytes"
)

// Snapshot modes.
const (
	SnapshotInitial     = "initial"
	SnapshotInitialOnly = "initial_only"
	SnapshotNoData      = "no_data"
	SnapshotWhenNeeded  = "when_needed"
	SnapshotNever       = "never"
)

// Publication autocreate modes.
const (
	PublicationAllTables = "all_tables"
	PublicationFiltered  = "filtered"
	PublicationDisabled  = "disabled"
)

// Plugin returns the PostgreSQL source plugin.
func Plugin() connect.Plugin {
	return connect.Plugin{
		Name:    "postgres",
		Aliases: []string{"io.debezium.connector.postgresql.PostgresConnector"},
		Kind:    connect.KindSource,
		Version: Version,
		Doc: "Captures row changes from PostgreSQL (10+, tested on 15) through a logical replication slot " +
			"with the built-in pgoutput plugin: an initial snapshot consistent with the stream, then " +
			"inserts, updates, deletes and truncates as Debezium change events.",
		Config:    configDef().Merge(snapshot.ConfigDef("<schema>.<table>")),
		Validate:  validate,
		NewSource: newSource,
	}
}

func configDef() connect.ConfigDef {
	const (
		gConn   = "Connection"
		gFilter = "Filters"
		gSnap   = "Snapshot"
		gRepl   = "Replication"
		gEvents = "Events"
		gTypes  = "Data types"
		gIgn    = "Ignored"
	)
	ignored := func(name, doc string) connect.ConfigKey {
		return connect.ConfigKey{Name: name, Type: connect.TypeString, Ignored: true, Doc: doc, Group: gIgn, Importance: connect.Low}
	}
	ignoredPrefix := func(name, doc string) connect.ConfigKey {
		k := ignored(name, doc)
		k.Prefix = true
		return k
	}
	return connect.ConfigDef{
		{Name: KeyHostname, Type: connect.TypeString, Required: true, Group: gConn, Importance: connect.High,
			Doc: "Host name or address of the PostgreSQL server."},
		{Name: KeyPort, Type: connect.TypeInt, Default: "5432", HasDefault: true, Check: connect.InRange(1, 65535), Group: gConn, Importance: connect.High,
			Doc: "Port of the PostgreSQL server."},
		{Name: KeyUser, Type: connect.TypeString, Required: true, Group: gConn, Importance: connect.High,
			Doc: "Role to connect as. It needs the REPLICATION attribute, USAGE on the captured schemas and SELECT on the captured tables."},
		{Name: KeyPassword, Type: connect.TypePassword, Default: "", HasDefault: true, Group: gConn, Importance: connect.High,
			Doc: "Password of database.user."},
		{Name: KeyDBName, Type: connect.TypeString, Required: true, Group: gConn, Importance: connect.High,
			Doc: "Database to capture; a slot and a publication belong to one database."},
		{Name: KeySSLMode, Type: connect.TypeString, Default: "prefer", HasDefault: true, Group: gConn,
			Enum: []string{"disable", "allow", "prefer", "require", "verify-ca", "verify-full"},
			Doc:  "libpq sslmode of every connection."},
		{Name: KeySSLRootCert, Type: connect.TypeString, Default: "", HasDefault: true, Group: gConn,
			Doc: "File of the certificate authorities that verify the server (sslmode verify-ca / verify-full)."},
		{Name: KeySSLCert, Type: connect.TypeString, Default: "", HasDefault: true, Group: gConn,
			Doc: "File of the client certificate."},
		{Name: KeySSLKey, Type: connect.TypeString, Default: "", HasDefault: true, Group: gConn,
			Doc: "File of the client certificate's private key."},
		{Name: KeyConnectTimeout, Type: connect.TypeInt, Default: "30000", HasDefault: true, Check: connect.AtLeast(1), Group: gConn,
			Doc: "Milliseconds to wait for a connection to the server."},
		{Name: KeyTopicPrefix, Type: connect.TypeString, Required: true, Check: checkTopicPrefix, Group: gEvents, Importance: connect.High,
			Doc: "The logical name of the server: the prefix of every topic name and the name in each event's source block. Topics are <topic.prefix>.<schema>.<table>."},
		{Name: KeyPluginName, Type: connect.TypeString, Default: "pgoutput", HasDefault: true, Enum: []string{"pgoutput"}, Group: gRepl,
			Doc: "Logical decoding output plugin; sluice speaks pgoutput, which every PostgreSQL 10+ has built in."},
		{Name: KeySlotName, Type: connect.TypeString, Default: "debezium", HasDefault: true, Check: checkSlotName, Group: gRepl, Importance: connect.High,
			Doc: "Name of the logical replication slot. The slot keeps the WAL the connector has not yet stored in the log; one slot per connector."},
		{Name: KeySlotDropOnStop, Type: connect.TypeBoolean, Default: "false", HasDefault: true, Group: gRepl,
			Doc: "Drop the slot when the connector stops gracefully. The next start then finds no slot: with a stored position that is 'position lost'. For tests and throw-away setups."},
		{Name: KeySlotMaxRetries, Type: connect.TypeInt, Default: "6", HasDefault: true, Check: connect.AtLeast(0), Group: gRepl,
			Doc: "How often to retry when the slot is in use by another connection (a previous instance that has not gone yet)."},
		{Name: KeySlotRetryDelay, Type: connect.TypeLong, Default: "10000", HasDefault: true, Check: connect.AtLeast(1), Group: gRepl,
			Doc: "Milliseconds between those retries."},
		{Name: KeyPublicationName, Type: connect.TypeString, Default: "dbz_publication", HasDefault: true, Check: checkSlotName, Group: gRepl,
			Doc: "Name of the publication that selects the tables pgoutput sends."},
		{Name: KeyPublicationMode, Type: connect.TypeString, Default: PublicationAllTables, HasDefault: true, Group: gRepl,
			Enum: []string{PublicationAllTables, PublicationFiltered, PublicationDisabled},
			Doc: "all_tables: create the publication FOR ALL TABLES if missing (needs a superuser). filtered: create it, or set its table list, " +
				"for the captured tables (needs ownership of them). disabled: the publication must exist; it is checked to cover the captured tables."},
		{Name: KeySchemaInclude, Type: connect.TypeList, Default: "", HasDefault: true, Check: checkRegexList, Group: gFilter,
			Doc: "Regular expressions matching the whole name of the schemas to capture; excludes every other schema. Not with schema.exclude.list."},
		{Name: KeySchemaExclude, Type: connect.TypeList, Default: "", HasDefault: true, Check: checkRegexList, Group: gFilter,
			Doc: "Regular expressions matching the whole name of schemas not to capture. Not with schema.include.list."},
		{Name: KeyTableInclude, Type: connect.TypeList, Default: "", HasDefault: true, Check: checkRegexList, Group: gFilter,
			Doc: "Regular expressions matching <schema>.<table> of the tables to capture. Not with table.exclude.list."},
		{Name: KeyTableExclude, Type: connect.TypeList, Default: "", HasDefault: true, Check: checkRegexList, Group: gFilter,
			Doc: "Regular expressions matching <schema>.<table> of tables not to capture. Not with table.include.list."},
		{Name: KeyColumnInclude, Type: connect.TypeList, Default: "", HasDefault: true, Check: checkRegexList, Group: gFilter,
			Doc: "Regular expressions matching <schema>.<table>.<column> of the columns to keep in row images. Not with column.exclude.list."},
		{Name: KeyColumnExclude, Type: connect.TypeList, Default: "", HasDefault: true, Check: checkRegexList, Group: gFilter,
			Doc: "Regular expressions matching <schema>.<table>.<column> of columns to leave out of row images. Not with column.include.list."},
		{Name: KeyMaskWith, Prefix: true, Type: connect.TypeList, Group: gFilter,
			Doc: "column.mask.with.<n>.chars: regular expressions of <schema>.<table>.<column>; the values of those columns become n asterisks."},
		{Name: KeyMaskHash, Prefix: true, Type: connect.TypeList, Group: gFilter,
			Doc: "column.mask.hash.<algorithm>.with.salt.<salt>: regular expressions of <schema>.<table>.<column>; the values become the hex digest " +
				"(MD5, SHA-1, SHA-256, SHA-384 or SHA-512) of the salt followed by the value's text."},
		{Name: KeyTruncateTo, Prefix: true, Type: connect.TypeList, Group: gFilter,
			Doc: "column.truncate.to.<n>.chars: regular expressions of <schema>.<table>.<column>; text values longer than n characters are cut to n."},
		{Name: KeyMessageKeyColumns, Type: connect.TypeString, Default: "", HasDefault: true, Group: gEvents,
			Doc: "Record keys for tables without a primary key, or other keys: <table regex>:<column>,<column>;<table regex>:<column>... where the regex matches <schema>.<table>."},
		{Name: KeySnapshotMode, Type: connect.TypeString, Default: SnapshotInitial, HasDefault: true, Group: gSnap, Importance: connect.High,
			Enum: []string{SnapshotInitial, SnapshotInitialOnly, SnapshotNoData, SnapshotWhenNeeded, SnapshotNever},
			Doc: "initial: snapshot the tables when the connector has no stored position, then stream. initial_only: snapshot, then stop producing. " +
				"no_data (and its old name never): stream from the slot's position without a snapshot. when_needed: like initial, and also take a new " +
				"snapshot when the stored position can no longer be resumed (slot dropped or its WAL removed) instead of failing."},
		{Name: KeySnapshotFetchSize, Type: connect.TypeInt, Default: "10240", HasDefault: true, Check: connect.InRange(1, 1000000), Group: gSnap,
			Doc: "Rows per snapshot chunk: each chunk is one query of the next rows in primary-key order."},
		{Name: KeyHeartbeatInterval, Type: connect.TypeInt, Default: "0", HasDefault: true, Check: connect.AtLeast(0), Group: gRepl,
			Doc: "Milliseconds between heartbeats written into the WAL with pg_logical_emit_message (or heartbeat.action.query), so that the slot " +
				"advances even when the server's only WAL traffic is in other databases; 0 turns them off."},
		{Name: KeyHeartbeatQuery, Type: connect.TypeString, Default: "", HasDefault: true, Group: gRepl,
			Doc: "Statement to run at each heartbeat instead of pg_logical_emit_message, e.g. an UPDATE of a captured heartbeat table."},
		{Name: KeyTombstones, Type: connect.TypeBoolean, Default: "true", HasDefault: true, Group: gEvents,
			Doc: "Follow each delete event by a tombstone (same key, null value) so that compaction can drop the key."},
		{Name: KeyDecimalMode, Type: connect.TypeString, Default: "precise", HasDefault: true, Enum: []string{"precise", "string", "double"}, Group: gTypes,
			Doc: "numeric and money values: precise and string give the exact decimal text (\"1234.50\", \"NaN\", \"Infinity\"); double a JSON number."},
		{Name: KeyBinaryMode, Type: connect.TypeString, Default: "bytes", HasDefault: true, Enum: []string{"bytes", "base64", "base64-url-safe", "hex"}, Group: gTypes,
			Doc: "bytea values: bytes (rendered as base64 in JSON, as Kafka Connect does), base64, base64-url-safe or hex strings."},
		{Name: KeyTimePrecision, Type: connect.TypeString, Default: "adaptive", HasDefault: true,
			Enum: []string{"adaptive", "adaptive_time_microseconds", "connect", "isostring"}, Group: gTypes,
			Doc: "date, time and timestamp values: adaptive uses the column's precision (milliseconds up to 3 digits, else microseconds), " +
				"adaptive_time_microseconds always microseconds for time, connect always milliseconds, isostring ISO-8601 strings."},
		{Name: KeyIntervalMode, Type: connect.TypeString, Default: "numeric", HasDefault: true, Enum: []string{"numeric", "string"}, Group: gTypes,
			Doc: "interval values: numeric gives microseconds (a month counts 30.4375 days), string ISO-8601 (P1Y2M3DT4H5M6.78S)."},
		{Name: KeyHstoreMode, Type: connect.TypeString, Default: "json", HasDefault: true, Enum: []string{"json", "map"}, Group: gTypes,
			Doc: "hstore values: json gives the JSON text of the map, map a JSON object."},
		{Name: KeyIdentityAutoset, Type: connect.TypeString, Default: "", HasDefault: true, Group: gRepl,
			Doc: "REPLICA IDENTITY to set at start: <table regex>:FULL|DEFAULT|NOTHING|INDEX <index>, comma-separated. Needs ownership of the tables."},
		{Name: KeySkippedOps, Type: connect.TypeList, Default: "none", HasDefault: true, Check: checkSkippedOps, Group: gEvents,
			Doc: "Operations not to emit: any of c, u, d, t, or none. Unlike Debezium (default t) sluice emits truncates by default, so that views follow a TRUNCATE."},
		{Name: KeyStatusInterval, Type: connect.TypeInt, Default: "10000", HasDefault: true, Check: connect.InRange(100, 3600000), Group: gRepl,
			Doc: "Milliseconds between standby status updates to the server; also how often an idle connector moves its slot to the server's WAL end. " +
				"Keep it below half the server's wal_sender_timeout."},
		{Name: KeyMaxBatchSize, Type: connect.TypeInt, Default: "2048", HasDefault: true, Check: connect.InRange(1, 100000), Group: gEvents,
			Doc: "Most records one read returns; a larger transaction spans several batches."},
		{Name: KeyMaxQueueSize, Type: connect.TypeInt, Default: "8192", HasDefault: true, Check: connect.InRange(1, 1000000), Group: gEvents,
			Doc: "Most replication messages buffered between the connection and the decoder."},
		{Name: KeyProtocolVersion, Type: connect.TypeInt, Default: "2", HasDefault: true, Enum: []string{"1", "2"}, Group: gRepl,
			Doc: "pgoutput protocol version. 2 (PostgreSQL 14+) streams large transactions while they run; sluice spills them to a file in " +
				"pgoutput.spill.dir until they commit. 1 receives each transaction after its commit."},
		{Name: KeySpillDir, Type: connect.TypeString, Default: "", HasDefault: true, Group: gRepl,
			Doc: "Directory for the spill files of streamed in-progress transactions; empty is the system's temporary directory."},

		{Name: KeyMaxSlotLagBytes, Type: connect.TypeLong, Default: "0", HasDefault: true, Check: connect.AtLeast(0), Group: "Incremental snapshots",
			Doc: "Pause reading incremental snapshot chunks while the replication slot's lag (pg_current_wal_lsn() - confirmed_flush_lsn, measured every status.update.interval.ms) is above this many bytes; 0 never pauses."},

		ignored("database.server.name", "Debezium 1.x topic prefix; sluice uses topic.prefix."),
		ignored("snapshot.max.threads", "sluice snapshots one table at a time."),
		ignored("snapshot.lock.timeout.ms", "the PostgreSQL snapshot takes no table locks."),
		ignored("snapshot.locking.mode", "the PostgreSQL snapshot takes no table locks."),
		ignored("snapshot.isolation.mode", "the snapshot always reads in one REPEATABLE READ transaction."),
		ignored("poll.interval.ms", "a read returns as soon as changes are there."),
		ignored("max.queue.size.in.bytes", "max.queue.size bounds the queue."),
		ignored("include.unknown.datatypes", "values of types sluice does not know are always passed as their text form."),
		ignored("slot.stream.params", "sluice sets the pgoutput parameters itself."),
		ignored("provide.transaction.metadata", "transaction boundary events are not produced."),
		ignored("include.schema.changes", "schema changes are not produced as events."),
		ignored("event.processing.failure.handling.mode", "errors.tolerance governs failed records."),
		ignored("heartbeat.topics.prefix", "heartbeats move the stored position; no heartbeat records are written."),
		ignored("sanitize.field.names", "field names are kept as they are."),
		ignored("tasks.max", "one task captures the database."),
		ignoredPrefix("database.history.", "PostgreSQL sends the schema with the changes; there is no schema history."),
		ignoredPrefix("schema.history.internal.", "PostgreSQL sends the schema with the changes; there is no schema history."),
	}
}

func checkTopicPrefix(v string) error {
	if v == "" {
		return fmt.Errorf("must not be empty")
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return fmt.Errorf("must use only A-Z a-z 0-9 . _ - (got %q)", v)
		}
	}
	return nil
}

// checkSlotName accepts what PostgreSQL accepts as a slot name (lower-case letters, digits,
// underscores; at most 63 bytes), which is also safe to quote as a publication name.
func checkSlotName(v string) error {
	if v == "" || len(v) > 63 {
		return fmt.Errorf("must be 1..63 characters (got %q)", v)
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return fmt.Errorf("must use only a-z 0-9 _ (got %q)", v)
		}
	}
	return nil
}

func checkRegexList(v string) error {
	for _, p := range connect.SplitList(v) {
		if _, err := compileAnchored(p); err != nil {
			return fmt.Errorf("bad regular expression %q: %v", p, err)
		}
	}
	return nil
}

func checkSkippedOps(v string) error {
	for _, op := range connect.SplitList(v) {
		switch strings.ToLower(op) {
		case "c", "u", "d", "t", "none":
		default:
			return fmt.Errorf("must list c, u, d, t or none (got %q)", op)
		}
	}
	return nil
}

// compileAnchored compiles a Debezium filter expression: it must match the whole name, and
// matching ignores case.
func compileAnchored(p string) (*regexp.Regexp, error) {
	return regexp.Compile(`(?i)^(?:` + p + `)$`)
}

// validate checks the rules that span keys.
func validate(cfg connect.Config) []connect.FieldError {
	var errs []connect.FieldError
	for _, pair := range [][2]string{
		{KeySchemaInclude, KeySchemaExclude},
		{KeyTableInclude, KeyTableExclude},
		{KeyColumnInclude, KeyColumnExclude},
	} {
		if len(cfg.List(pair[0])) > 0 && len(cfg.List(pair[1])) > 0 {
			errs = append(errs, connect.FieldError{Key: pair[1], Message: "must not be set together with " + pair[0]})
		}
	}
	if _, err := parseKeyColumns(cfg.String(KeyMessageKeyColumns)); err != nil {
		errs = append(errs, connect.FieldError{Key: KeyMessageKeyColumns, Message: err.Error()})
	}
	if _, err := parseIdentityAutoset(cfg.String(KeyIdentityAutoset)); err != nil {
		errs = append(errs, connect.FieldError{Key: KeyIdentityAutoset, Message: err.Error()})
	}
	_, ferrs := parseMasks(cfg)
	errs = append(errs, ferrs...)
	errs = append(errs, snapshot.Validate(cfg)...)
	ops := cfg.List(KeySkippedOps)
	if len(ops) > 1 {
		for _, op := range ops {
			if strings.EqualFold(op, "none") {
				errs = append(errs, connect.FieldError{Key: KeySkippedOps, Message: "none must stand alone (got " + strconv.Quote(strings.Join(ops, ",")) + ")"})
				break
			}
		}
	}
	sort.Slice(errs, func(i, j int) bool {
		if errs[i].Key != errs[j].Key {
			return errs[i].Key < errs[j].Key
		}
		return errs[i].Message < errs[j].Message
	})
	return errs
}
