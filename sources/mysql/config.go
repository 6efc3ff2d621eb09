package mysql

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"fmt"
	"hash"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/sources/snapshot"
)

// Config keys, with Debezium's names.
const (
	KeyHostname           = "database.hostname"
	KeyPort               = "database.port"
	KeyUser               = "database.user"
	KeyPassword           = "database.password"
	KeyServerID           = "database.server.id"
	KeyTopicPrefix        = "topic.prefix"
	KeyServerName         = "database.server.name"
	KeyDatabaseInclude    = "database.include.list"
	KeyDatabaseExclude    = "database.exclude.list"
	KeyTableInclude       = "table.include.list"
	KeyTableExclude       = "table.exclude.list"
	KeyColumnInclude      = "column.include.list"
	KeyColumnExclude      = "column.exclude.list"
	KeyMaskWith           = "column.mask.with."
	KeyMaskHash           = "column.mask.hash."
	KeyMessageKeyColumns  = "message.key.columns"
	KeySnapshotMode       = "snapshot.mode"
	KeySnapshotLocking    = "snapshot.locking.mode"
	KeySnapshotFetchSize  = "snapshot.fetch.size"
	KeyHeartbeatInterval  = "heartbeat.interval.ms"
	KeyTombstones         = "tombstones.on.delete"
	KeySchemaChanges      = "include.schema.changes"
	KeyDecimalMode        = "decimal.handling.mode"
	KeyBinaryMode         = "binary.handling.mode"
	KeyTimePrecisionMode  = "time.precision.mode"
	KeyBigintUnsignedMode = "bigint.unsigned.handling.mode"
	KeySkippedOperations  = "skipped.operations"
	KeyMaxBatchSize       = "max.batch.size"
	KeyMaxQueueSize       = "max.queue.size"
	KeyConnectTimeout     = "connect.timeout.ms"
	KeyReconnectTimeout   = "reconnect.timeout.ms"
	KeyFlavor             = "database.flavor"
)

// Snapshot modes.
const (
	SnapshotInitial     = "initial"
	SnapshotInitialOnly = "initial_only"
	SnapshotNoData      = "no_data"
	SnapshotWhenNeeded  = "when_needed"
	SnapshotNever       = "never"
)

// Version is the plugin's version, also reported as source.version.
const Version = "0.1.0"

// incrChunkSize is incremental.snapshot.chunk.size's default here, larger than the shared
// default: every chunk waits for the acknowledgement of the one before it, and on MariaDB
// chunks of 16384 rows kept the incremental snapshot closer to the initial snapshot's rate
// than chunks of 4096 (BenchmarkSnapshotRates in e2e/snapshot, 1,000,000 rows).
const incrChunkSize = 16384

// Plugin returns the MySQL / MariaDB source plugin.
func Plugin() connect.Plugin {
	return connect.Plugin{
		Name:     "mysql",
		Aliases:  []string{"io.debezium.connector.mysql.MySqlConnector", "io.debezium.connector.mariadb.MariaDbConnector"},
		Kind:     connect.KindSource,
		Version:  Version,
		Doc:      "Captures row changes of MySQL and MariaDB from the binlog, after a consistent initial snapshot, as Debezium change events.",
		Config:   configDef().Merge(snapshot.ConfigDefChunk("<database>.<table>", incrChunkSize)),
		Validate: validate,
		NewSource: func(cfg connect.Config, env connect.Env) (connect.Source, error) {
			return New(cfg, env)
		},
	}
}

func ignored(name, doc string) connect.ConfigKey {
	return connect.ConfigKey{Name: name, Type: connect.TypeString, Ignored: true, Doc: doc, Group: "Ignored", Importance: connect.Low}
}

func ignoredPrefix(name, doc string) connect.ConfigKey {
	k := ignored(name, doc)
	k.Prefix = true
	return k
}

func checkRegexList(v string) error {
	for _, p := range connect.SplitList(v) {
		if _, err := regexp.Compile(p); err != nil {
			return fmt.Errorf("bad regular expression %q: %v", p, err)
		}
	}
	return nil
}

func configDef() connect.ConfigDef {
	return connect.ConfigDef{
		{Name: KeyHostname, Type: connect.TypeString, Required: true, Importance: connect.High, Group: "Connection",
			Doc: "Host name or address of the MySQL / MariaDB server."},
		{Name: KeyPort, Type: connect.TypeInt, Default: "3306", HasDefault: true, Check: connect.InRange(1, 65535), Importance: connect.High, Group: "Connection",
			Doc: "TCP port of the server."},
		{Name: KeyUser, Type: connect.TypeString, Required: true, Importance: connect.High, Group: "Connection",
			Doc: "User to connect as; it needs SELECT, RELOAD (for snapshot.locking.mode=minimal), REPLICATION SLAVE and REPLICATION CLIENT (BINLOG MONITOR on MariaDB)."},
		{Name: KeyPassword, Type: connect.TypePassword, Default: "", HasDefault: true, Importance: connect.High, Group: "Connection",
			Doc: "Password of database.user."},
		{Name: KeyServerID, Type: connect.TypeLong, Required: true, Check: connect.InRange(1, 1<<32-1), Importance: connect.High, Group: "Connection",
			Doc: "Server id this connector uses as a binlog reader; it must differ from the server's own server_id and from every other replica's."},
		{Name: KeyFlavor, Type: connect.TypeString, Default: "auto", HasDefault: true, Enum: []string{"auto", "mysql", "mariadb"}, Group: "Connection",
			Doc: "Server flavor; auto detects it from the server version."},
		{Name: KeyConnectTimeout, Type: connect.TypeInt, Default: "30000", HasDefault: true, Check: connect.AtLeast(1), Group: "Connection",
			Doc: "Milliseconds to wait for a connection to the server."},
		{Name: KeyReconnectTimeout, Type: connect.TypeLong, Default: "300000", HasDefault: true, Check: connect.AtLeast(0), Group: "Connection",
			Doc: "Milliseconds the binlog reader keeps reconnecting (with exponential backoff) after losing the server before it reports the error to the runtime, which restarts the task."},
		{Name: KeyTopicPrefix, Type: connect.TypeString, Importance: connect.High, Group: "Topics", Check: checkPrefix,
			Doc: "Prefix of every topic: records of table db.t go to <topic.prefix>.db.t, schema changes to <topic.prefix>. Required (database.server.name is accepted in its place)."},
		{Name: KeyServerName, Type: connect.TypeString, Group: "Topics", Check: checkPrefix, Importance: connect.Low,
			Doc: "Former name of topic.prefix (Debezium 1.x); used when topic.prefix is absent."},
		{Name: KeyDatabaseInclude, Type: connect.TypeList, Check: checkRegexList, Group: "Filters",
			Doc: "Comma-separated regular expressions matched against whole database names; only matching databases are captured. Default: all but the system databases."},
		{Name: KeyDatabaseExclude, Type: connect.TypeList, Check: checkRegexList, Group: "Filters",
			Doc: "Comma-separated regular expressions of database names not to capture. Not together with database.include.list."},
		{Name: KeyTableInclude, Type: connect.TypeList, Check: checkRegexList, Group: "Filters",
			Doc: "Comma-separated regular expressions matched against whole <database>.<table> names; only matching tables are captured."},
		{Name: KeyTableExclude, Type: connect.TypeList, Check: checkRegexList, Group: "Filters",
			Doc: "Comma-separated regular expressions of <database>.<table> names not to capture. Not together with table.include.list."},
		{Name: KeyColumnInclude, Type: connect.TypeList, Check: checkRegexList, Group: "Filters",
			Doc: "Comma-separated regular expressions matched against whole <database>.<table>.<column> names; only matching columns appear in row images."},
		{Name: KeyColumnExclude, Type: connect.TypeList, Check: checkRegexList, Group: "Filters",
			Doc: "Comma-separated regular expressions of <database>.<table>.<column> names left out of row images. Not together with column.include.list."},
		{Name: KeyMaskWith, Prefix: true, Type: connect.TypeList, Group: "Filters",
			Doc: "column.mask.with.<N>.chars: comma-separated regular expressions of <database>.<table>.<column>; the values of matching string columns are replaced by N asterisks."},
		{Name: KeyMaskHash, Prefix: true, Type: connect.TypeList, Group: "Filters",
			Doc: "column.mask.hash.<algorithm>.with.salt.<salt>: comma-separated regular expressions of <database>.<table>.<column>; the values of matching string columns are replaced by the hex digest of salt+value (algorithm MD5, SHA-1, SHA-256, SHA-384 or SHA-512)."},
		{Name: KeyMessageKeyColumns, Type: connect.TypeString, Check: checkKeyColumns, Group: "Filters",
			Doc: "Record keys for tables without a primary key, or other keys: <table regex>:<col>,<col>;<table regex>:<col>... (the table regex matches <database>.<table>)."},
		{Name: KeySnapshotMode, Type: connect.TypeString, Default: SnapshotInitial, HasDefault: true, Importance: connect.High, Group: "Snapshot",
			Enum: []string{SnapshotInitial, SnapshotInitialOnly, SnapshotNoData, SnapshotWhenNeeded, SnapshotNever, "schema_only"},
			Doc:  "initial: snapshot the captured tables when there is no stored position, then stream; initial_only: snapshot, then stop reading; no_data (schema_only): no rows, stream from the current binlog position; when_needed: like initial, and also re-snapshot when the stored position is no longer in the binlog; never: no snapshot, stream from the oldest binlog still on the server."},
		{Name: KeySnapshotLocking, Type: connect.TypeString, Default: "minimal", HasDefault: true, Enum: []string{"minimal", "none"}, Group: "Snapshot",
			Doc: "minimal: hold a global read lock (FLUSH TABLES WITH READ LOCK) only while the snapshot reads the binlog position and the table definitions; none: take no lock (on MariaDB the position comes from the consistent snapshot itself; no DDL may run during the snapshot)."},
		{Name: KeySnapshotFetchSize, Type: connect.TypeInt, Default: "10000", HasDefault: true, Check: connect.InRange(1, 1000000), Group: "Snapshot",
			Doc: "Rows read per chunk query of a table during the snapshot (rows are read in primary-key order)."},
		{Name: KeyHeartbeatInterval, Type: connect.TypeInt, Default: "0", HasDefault: true, Check: connect.AtLeast(0), Group: "Streaming",
			Doc: "Milliseconds between heartbeats: batches without records that store the latest binlog position, so an idle or fully filtered database keeps advancing the stored position. 0 disables them (the position still advances with records)."},
		{Name: KeyTombstones, Type: connect.TypeBoolean, Default: "true", HasDefault: true, Group: "Events",
			Doc: "Emit a tombstone (same key, null value) after each delete event."},
		{Name: KeySchemaChanges, Type: connect.TypeBoolean, Default: "true", HasDefault: true, Group: "Events",
			Doc: "Emit a schema change event to the topic <topic.prefix> for each DDL statement on a captured database."},
		{Name: KeyDecimalMode, Type: connect.TypeString, Default: "precise", HasDefault: true, Enum: []string{"precise", "double", "string"}, Group: "Events",
			Doc: "DECIMAL / NUMERIC values: precise and string give the exact value as a string (\"1234.50\"), double a JSON number."},
		{Name: KeyBinaryMode, Type: connect.TypeString, Default: "bytes", HasDefault: true, Enum: []string{"bytes", "base64", "base64-url-safe", "hex"}, Group: "Events",
			Doc: "BINARY / VARBINARY / BLOB values: bytes (rendered base64 in JSON, as Kafka Connect's JSON converter does), base64, base64-url-safe or hex strings."},
		{Name: KeyTimePrecisionMode, Type: connect.TypeString, Default: "adaptive_time_microseconds", HasDefault: true, Enum: []string{"adaptive_time_microseconds", "connect"}, Group: "Events",
			Doc: "adaptive_time_microseconds: DATE as days since the epoch, TIME as microseconds, DATETIME(0-3) as epoch milliseconds and DATETIME(4-6) as epoch microseconds; connect: DATE as days, TIME as milliseconds, DATETIME as epoch milliseconds. TIMESTAMP is always an ISO-8601 string in UTC."},
		{Name: KeyBigintUnsignedMode, Type: connect.TypeString, Default: "long", HasDefault: true, Enum: []string{"long", "precise"}, Group: "Events",
			Doc: "BIGINT UNSIGNED values: long gives a JSON number (exact also beyond 2^63-1), precise a decimal string."},
		{Name: KeySkippedOperations, Type: connect.TypeList, Default: "none", HasDefault: true, Check: checkSkipped, Group: "Events",
			Doc: "Operations not to emit, comma-separated among c, u, d, t, or none. Debezium skips t (truncate) by default; sluice emits it, so that views can follow a TRUNCATE."},
		{Name: KeyMaxBatchSize, Type: connect.TypeInt, Default: "2048", HasDefault: true, Check: connect.InRange(1, 100000), Group: "Streaming",
			Doc: "Most records returned by one read (a larger transaction spans several reads)."},
		{Name: KeyMaxQueueSize, Type: connect.TypeInt, Default: "256", HasDefault: true, Check: connect.InRange(1, 100000), Group: "Streaming",
			Doc: "Binlog events decoded ahead of the reader. Each holds at most one binlog rows event (binlog_row_event_max_size, 8 KiB by default)."},
		ignoredPrefix("schema.history.internal.", "sluice keeps the schema history in its own log."),
		ignoredPrefix("database.history.", "sluice keeps the schema history in its own log."),
		ignored("include.query", "the query text is not captured; source.query is null."),
		ignored("snapshot.new.tables", "tables added to table.include.list are always snapshotted incrementally."),
		ignored("poll.interval.ms", "records are returned as soon as they are read."),
		ignored("provide.transaction.metadata", "transaction metadata topics are not produced."),
		ignored("event.deserialization.failure.handling.mode", "undecodable binlog events fail the task."),
		ignored("inconsistent.schema.handling.mode", "row images are decoded from the binlog's table map metadata."),
		ignored("binlog.buffer.size", "events are read ahead as max.queue.size says."),
		ignored("enable.time.adjuster", "two-digit years are stored as four digits by the server already."),
		ignored("connect.keep.alive", "the binlog reader always reconnects."),
		ignored("connect.keep.alive.interval.ms", "see reconnect.timeout.ms."),
		ignored("database.ssl.mode", "TLS is not supported yet; connections are plain."),
		ignored("table.ignore.builtin", "the system databases are never captured."),
		ignored("heartbeat.topics.prefix", "heartbeats advance the stored position without records."),
		ignored("heartbeat.action.query", "heartbeats advance the stored position without records."),
		ignored("gtid.source.includes", "all GTIDs are followed."),
		ignored("gtid.source.excludes", "all GTIDs are followed."),
		ignored("database.include.list.mode", "filters match as documented."),
		ignored("converters", "custom converters are not supported."),
		ignored("snapshot.delay.ms", "the snapshot starts at once."),
		ignored("schema.name.adjustment.mode", "names are kept as they are."),
		ignored("field.name.adjustment.mode", "names are kept as they are."),
		ignored("table.whitelist", "renamed table.include.list in Debezium 1.3; use that."),
		ignored("database.whitelist", "renamed database.include.list in Debezium 1.3; use that."),
	}
}

func checkPrefix(v string) error {
	if strings.TrimSpace(v) == "" {
		return fmt.Errorf("must not be empty")
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return fmt.Errorf("may hold only letters, digits, '.', '_' and '-' (got %q)", v)
		}
	}
	return nil
}

func checkSkipped(v string) error {
	for _, op := range connect.SplitList(v) {
		switch strings.ToLower(op) {
		case "c", "u", "d", "t", "none":
		default:
			return fmt.Errorf("must list c, u, d, t or none (got %q)", op)
		}
	}
	return nil
}

func checkKeyColumns(v string) error {
	_, err := parseKeyColumns(v)
	return err
}

// validate checks the rules that span keys.
func validate(cfg connect.Config) []connect.FieldError {
	var errs []connect.FieldError
	if strings.TrimSpace(cfg.String(KeyTopicPrefix)) == "" && strings.TrimSpace(cfg.String(KeyServerName)) == "" {
		errs = append(errs, connect.FieldError{Key: KeyTopicPrefix, Message: "is required (the prefix of the topic names)"})
	}
	for _, pair := range [][2]string{{KeyDatabaseInclude, KeyDatabaseExclude}, {KeyTableInclude, KeyTableExclude}, {KeyColumnInclude, KeyColumnExclude}} {
		if len(cfg.List(pair[0])) > 0 && len(cfg.List(pair[1])) > 0 {
			errs = append(errs, connect.FieldError{Key: pair[1], Message: "must not be set together with " + pair[0]})
		}
	}
	for k, v := range cfg.WithPrefix(KeyMaskWith) {
		if _, err := parseMaskWith(k); err != nil {
			errs = append(errs, connect.FieldError{Key: KeyMaskWith + k, Message: err.Error()})
		} else if err := checkRegexList(v); err != nil {
			errs = append(errs, connect.FieldError{Key: KeyMaskWith + k, Message: err.Error()})
		}
	}
	errs = append(errs, snapshot.Validate(cfg)...)
	if cfg.Enum(snapshot.KeyWatermark) == snapshot.WatermarkMessage {
		errs = append(errs, connect.FieldError{Key: snapshot.KeyWatermark, Message: "must be auto or position: MySQL and MariaDB have no logical decoding messages (the watermark is the binlog position of each chunk's read)"})
	}
	for k, v := range cfg.WithPrefix(KeyMaskHash) {
		if _, _, err := parseMaskHash(k); err != nil {
			errs = append(errs, connect.FieldError{Key: KeyMaskHash + k, Message: err.Error()})
		} else if err := checkRegexList(v); err != nil {
			errs = append(errs, connect.FieldError{Key: KeyMaskHash + k, Message: err.Error()})
		}
	}
	return errs
}

// parseMaskWith parses "<N>.chars".
func parseMaskWith(suffix string) (int, error) {
	n, ok := strings.CutSuffix(suffix, ".chars")
	if ok {
		if v, err := strconv.Atoi(n); err == nil && v >= 0 && v <= 1<<16 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("must be column.mask.with.<N>.chars with N a number of characters")
}

// parseMaskHash parses "<algorithm>.with.salt.<salt>".
func parseMaskHash(suffix string) (func() hash.Hash, string, error) {
	alg, salt, ok := strings.Cut(suffix, ".with.salt.")
	if !ok {
		return nil, "", fmt.Errorf("must be column.mask.hash.<algorithm>.with.salt.<salt>")
	}
	var h func() hash.Hash
	switch strings.ToUpper(strings.ReplaceAll(alg, "-", "")) {
	case "MD5":
		h = md5.New
	case "SHA1":
		h = sha1.New
	case "SHA256":
		h = sha256.New
	case "SHA384":
		h = sha512.New384
	case "SHA512":
		h = sha512.New
	default:
		return nil, "", fmt.Errorf("unknown hash algorithm %q (want MD5, SHA-1, SHA-256, SHA-384 or SHA-512)", alg)
	}
	return h, salt, nil
}

// keyColumns is one entry of message.key.columns.
type keyColumns struct {
	table   *regexp.Regexp
	columns []string
}

func parseKeyColumns(v string) ([]keyColumns, error) {
	var out []keyColumns
	for _, part := range strings.Split(v, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		i := strings.LastIndexByte(part, ':')
		if i <= 0 {
			return nil, fmt.Errorf("entry %q: want <table regex>:<column>,<column>", part)
		}
		re, err := compileFull(part[:i])
		if err != nil {
			return nil, fmt.Errorf("entry %q: %v", part, err)
		}
		cols := connect.SplitList(part[i+1:])
		if len(cols) == 0 {
			return nil, fmt.Errorf("entry %q: no columns", part)
		}
		out = append(out, keyColumns{table: re, columns: cols})
	}
	return out, nil
}

// compileFull compiles a Debezium filter expression: it must match the whole name, ignoring case.
func compileFull(expr string) (*regexp.Regexp, error) {
	return regexp.Compile("(?i)^(?:" + strings.TrimSpace(expr) + ")$")
}

// settings is the parsed configuration.
type settings struct {
	host             string
	port             int
	user, password   string
	serverID         uint32
	flavor           string // "", "mysql" or "mariadb"
	connectTimeout   time.Duration
	reconnectTimeout time.Duration
	prefix           string

	filter *filter

	snapshotMode    string
	lockingMinimal  bool
	fetchSize       int
	heartbeat       time.Duration
	tombstones      bool
	schemaChanges   bool
	decimalDouble   bool
	binaryMode      string
	timeConnect     bool
	bigintPrecise   bool
	skip            map[connect.Op]bool
	maxBatch        int
	maxQueue        int
	connectorName   string
	sourceVersion   string
	connectorFamily string
}

func parseSettings(cfg connect.Config) (*settings, error) {
	s := &settings{
		host:             cfg.String(KeyHostname),
		port:             int(cfg.Int(KeyPort)),
		user:             cfg.String(KeyUser),
		password:         cfg.String(KeyPassword),
		serverID:         uint32(cfg.Int(KeyServerID)),
		connectTimeout:   cfg.Millis(KeyConnectTimeout),
		reconnectTimeout: cfg.Millis(KeyReconnectTimeout),
		prefix:           cfg.String(KeyTopicPrefix),
		snapshotMode:     cfg.Enum(KeySnapshotMode),
		lockingMinimal:   cfg.Enum(KeySnapshotLocking) == "minimal",
		fetchSize:        int(cfg.Int(KeySnapshotFetchSize)),
		heartbeat:        cfg.Millis(KeyHeartbeatInterval),
		tombstones:       cfg.Bool(KeyTombstones),
		schemaChanges:    cfg.Bool(KeySchemaChanges),
		decimalDouble:    cfg.Enum(KeyDecimalMode) == "double",
		binaryMode:       cfg.Enum(KeyBinaryMode),
		timeConnect:      cfg.Enum(KeyTimePrecisionMode) == "connect",
		bigintPrecise:    cfg.Enum(KeyBigintUnsignedMode) == "precise",
		skip:             map[connect.Op]bool{},
		maxBatch:         int(cfg.Int(KeyMaxBatchSize)),
		maxQueue:         int(cfg.Int(KeyMaxQueueSize)),
		sourceVersion:    Version,
		connectorFamily:  "mysql",
	}
	if s.snapshotMode == "schema_only" {
		s.snapshotMode = SnapshotNoData
	}
	if s.prefix == "" {
		s.prefix = cfg.String(KeyServerName)
	}
	switch f := cfg.Enum(KeyFlavor); f {
	case "mysql", "mariadb":
		s.flavor = f
	}
	for _, op := range cfg.List(KeySkippedOperations) {
		if op = strings.ToLower(op); op != "none" {
			s.skip[connect.Op(op[0])] = true
		}
	}
	f, err := newFilter(cfg)
	if err != nil {
		return nil, err
	}
	s.filter = f
	return s, nil
}
