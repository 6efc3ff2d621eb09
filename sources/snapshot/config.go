package snapshot

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/connect"
)

// Configuration keys shared by the sources that run incremental snapshots, with Debezium's
// names where Debezium has the setting.
const (
	KeyChunkSize       = "incremental.snapshot.chunk.size"
	KeyWatermark       = "incremental.snapshot.watermark"
	KeyMaxRowsPerSec   = "incremental.snapshot.max.rows.per.second"
	KeyMaxLagMs        = "incremental.snapshot.max.lag.ms"
	KeyParallelTables  = "incremental.snapshot.parallel.tables"
	KeySignalTable     = "signal.data.collection"
	KeySignalChannels  = "signal.enabled.channels"
	KeyNotifyChannels  = "notification.enabled.channels"
	KeyNotifyTopic     = "notification.sink.topic.name"
	KeyAllowSchemaChg  = "incremental.snapshot.allow.schema.changes"
	KeyWatermarkingDbz = "incremental.snapshot.watermarking.strategy"
	KeyReadOnly        = "read.only"
)

// Watermark kinds (incremental.snapshot.watermark).
const (
	WatermarkAuto     = "auto"
	WatermarkMessage  = "message"
	WatermarkPosition = "position"
)

// Signal and notification channels.
const (
	ChannelSource = "source" // the signal table, read from the change stream
	ChannelKafka  = "kafka"  // the signal topic, read by the runtime
	ChannelSink   = "sink"   // notifications as records on notification.sink.topic.name
	ChannelLog    = "log"    // notifications as log lines
)

// Settings are the validated incremental snapshot settings of a source.
type Settings struct {
	ChunkSize      int
	Watermark      string // auto, message or position; the source decides what auto means
	MaxRowsPerSec  float64
	MaxLag         time.Duration
	Parallel       int
	SignalTable    string // schema.table / db.table; "" when there is none
	SignalChannels []string
	NotifySink     bool
	NotifyLog      bool
	NotifyTopic    string
}

// DefaultChunkSize is the rows per chunk when incremental.snapshot.chunk.size is not set and
// the source has no default of its own (ConfigDefChunk). Each chunk waits for the
// acknowledgement of the one before it (at most one chunk is read again after a crash), so
// the log's pipeline drains once per chunk: larger chunks lose less of the rate to that pause
// and hold more memory (a source holds up to about three chunks). BenchmarkSnapshotRates in
// e2e/snapshot compares sizes.
const DefaultChunkSize = 4096

// ConfigDef returns the keys of incremental snapshots, for a source plugin's definition.
// dataCollection names what a table is called in signals ("<schema>.<table>" or
// "<database>.<table>").
func ConfigDef(dataCollection string) connect.ConfigDef {
	return ConfigDefChunk(dataCollection, DefaultChunkSize)
}

// ConfigDefChunk is ConfigDef with chunkSize as incremental.snapshot.chunk.size's default.
func ConfigDefChunk(dataCollection string, chunkSize int) connect.ConfigDef {
	const g = "Incremental snapshots"
	return connect.ConfigDef{
		{Name: KeyChunkSize, Type: connect.TypeInt, Default: fmt.Sprint(chunkSize), HasDefault: true, Check: connect.InRange(1, 1000000), Group: g,
			Doc: "Rows per incremental snapshot chunk (a request may ask for another size). Each chunk is one key-ordered query, held in memory until it is emitted (up to about three chunks at a time: one read ahead, one emitted, one going to the log); lower it for tables of wide rows."},
		{Name: KeyWatermark, Type: connect.TypeString, Default: WatermarkAuto, HasDefault: true, Enum: []string{WatermarkAuto, WatermarkMessage, WatermarkPosition}, Group: g,
			Doc: "How a chunk finds its place in the change stream; neither writes to a table. message: a logical decoding message after each chunk (PostgreSQL; the default there). " +
				"position: the server's current stream position (PostgreSQL: WAL insert position; MySQL/MariaDB: the binlog position of the chunk's consistent snapshot, the default there). auto picks the default."},
		{Name: KeyMaxRowsPerSec, Type: connect.TypeDouble, Default: "0", HasDefault: true, Check: nonNegative, Group: g,
			Doc: "Most rows per second an incremental snapshot reads, over all tables; 0 is unlimited."},
		{Name: KeyMaxLagMs, Type: connect.TypeLong, Default: "0", HasDefault: true, Check: connect.AtLeast(0), Group: g,
			Doc: "Pause reading chunks while the change stream is more than this many milliseconds behind the server; 0 never pauses."},
		{Name: KeyParallelTables, Type: connect.TypeInt, Default: "1", HasDefault: true, Check: connect.InRange(1, 64), Group: g,
			Doc: "Tables an incremental snapshot reads at the same time, each on its own connection. After a crash each of them reads its last chunk again."},
		{Name: KeySignalTable, Type: connect.TypeString, Default: "", HasDefault: true, Group: g,
			Doc: "Signal table (" + dataCollection + ") whose inserted rows (id, type, data) are Debezium signals: execute-snapshot, stop-snapshot, pause-snapshot, resume-snapshot. " +
				"Optional: the admin API and the signal topic need no table. Its rows are read from the change stream and are not emitted."},
		{Name: KeySignalChannels, Type: connect.TypeList, Default: ChannelSource, HasDefault: true, Check: checkChannels(ChannelSource, ChannelKafka, "jmx", "file"), Group: g,
			Doc: "Where signals come from: source (the signal table, when signal.data.collection is set) and kafka (the topic signal.kafka.topic of the log, records keyed by topic.prefix). " +
				"jmx and file are accepted and ignored. The admin API is always on."},
		{Name: KeyNotifyChannels, Type: connect.TypeList, Default: "", HasDefault: true, Check: checkChannels(ChannelSink, ChannelLog, "jmx"), Group: g,
			Doc: "Where snapshot notifications go: sink (records on notification.sink.topic.name) and log. jmx is accepted and ignored."},
		{Name: KeyNotifyTopic, Type: connect.TypeString, Default: "", HasDefault: true, Group: g,
			Doc: "Topic of the notification records (required with notification.enabled.channels=sink)."},
		{Name: KeyAllowSchemaChg, Type: connect.TypeString, Ignored: true, Group: "Ignored", Importance: connect.Low,
			Doc: "each chunk is read with the table's columns at the time."},
		{Name: KeyWatermarkingDbz, Type: connect.TypeString, Ignored: true, Group: "Ignored", Importance: connect.Low,
			Doc: "sluice never writes watermarks into the signal table; see incremental.snapshot.watermark."},
		{Name: KeyReadOnly, Type: connect.TypeString, Ignored: true, Group: "Ignored", Importance: connect.Low,
			Doc: "incremental snapshots never write to the source database's tables."},
	}
}

func nonNegative(v string) error {
	var f float64
	if _, err := fmt.Sscan(v, &f); err != nil || f < 0 {
		return fmt.Errorf("must be a number, at least 0 (got %s)", v)
	}
	return nil
}

func checkChannels(allowed ...string) func(string) error {
	return func(v string) error {
		for _, c := range connect.SplitList(v) {
			ok := false
			for _, a := range allowed {
				if strings.EqualFold(c, a) {
					ok = true
				}
			}
			if !ok {
				return fmt.Errorf("must list channels among %s (got %q)", strings.Join(allowed, ", "), c)
			}
		}
		return nil
	}
}

// Validate checks the rules that span the keys.
func Validate(cfg connect.Config) []connect.FieldError {
	var errs []connect.FieldError
	if hasChannel(cfg.List(KeyNotifyChannels), ChannelSink) && cfg.String(KeyNotifyTopic) == "" {
		errs = append(errs, connect.FieldError{Key: KeyNotifyTopic, Message: "is required with " + KeyNotifyChannels + "=sink (the topic of the notification records)"})
	}
	if t := cfg.String(KeySignalTable); t != "" && strings.Count(t, ".") != 1 {
		errs = append(errs, connect.FieldError{Key: KeySignalTable, Message: fmt.Sprintf("must name one table as <schema>.<table> (got %q)", t)})
	}
	return errs
}

func hasChannel(list []string, c string) bool {
	for _, x := range list {
		if strings.EqualFold(x, c) {
			return true
		}
	}
	return false
}

// SettingsFrom reads the settings of a validated configuration.
func SettingsFrom(cfg connect.Config) Settings {
	s := Settings{
		ChunkSize:      int(cfg.Int(KeyChunkSize)),
		Watermark:      cfg.Enum(KeyWatermark),
		MaxRowsPerSec:  cfg.Float(KeyMaxRowsPerSec),
		MaxLag:         cfg.Millis(KeyMaxLagMs),
		Parallel:       int(cfg.Int(KeyParallelTables)),
		SignalTable:    cfg.String(KeySignalTable),
		SignalChannels: cfg.List(KeySignalChannels),
		NotifyTopic:    cfg.String(KeyNotifyTopic),
	}
	ch := cfg.List(KeyNotifyChannels)
	s.NotifySink = hasChannel(ch, ChannelSink)
	s.NotifyLog = hasChannel(ch, ChannelLog)
	return s
}

// SignalTableEnabled reports whether signals are read from the signal table.
func (s Settings) SignalTableEnabled() bool {
	return s.SignalTable != "" && hasChannel(s.SignalChannels, ChannelSource)
}
