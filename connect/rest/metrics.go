package rest

import (
	"errors"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/wal/raft"
)

// Metrics serves /metrics in Prometheus's format:
//
//   - per connector: state, records appended (sources) or written (sinks), records rejected
//     (sent to the dead-letter topic under errors.tolerance=all), task restarts;
//   - per source, from its Stats method, with Debezium's names where they overlap:
//     milliseconds_behind_source, total_number_of_events_seen, number_of_committed_transactions,
//     snapshot_running, snapshot_completed, rows_scanned{table}, connected, slot_lag_bytes
//     (Postgres), binlog_position (MySQL), ...;
//   - per sink: batch latency (a histogram), consumer lag per partition, and from its Stats
//     method retries, version_conflicts_skipped, ...;
//   - per log partition: size, log start and end offsets, high watermark, segments, compaction
//     runs and the bytes they removed (counted since the process started);
//   - with a replicated log, per partition this node replicates: its Raft role, whether it
//     serves, term, leader, commit and last index, and on the leader each follower's lag;
//   - the process and Go runtime collectors.
//
// Plugin statistics are discovered on the running task's instance: a method Stats() returning
// a struct whose exported fields are numbers, booleans, durations, maps of counts by name or
// strings. Each field becomes sluice_source_<field> or sluice_sink_<field> in snake case.
type Metrics struct {
	reg     *prometheus.Registry
	handler http.Handler
	batch   *prometheus.HistogramVec
	errs    *prometheus.CounterVec
}

// NewMetrics builds the registry; Attach adds the runtime's connectors and log.
func NewMetrics() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.batch = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_sink_batch_seconds",
		Help:    "Duration of the sink's writes of one batch.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"connector"})
	m.errs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_sink_write_errors_total",
		Help: "Sink writes that failed (and were retried or failed the task).",
	}, []string{"connector"})
	m.reg.MustRegister(m.batch, m.errs,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector())
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return m
}

// SinkBatch implements runtime.Observer.
func (m *Metrics) SinkBatch(connector string, records int, took time.Duration, err error) {
	m.batch.WithLabelValues(connector).Observe(took.Seconds())
	if err != nil {
		var we *connect.WriteError
		if !errors.As(err, &we) {
			m.errs.WithLabelValues(connector).Inc()
		}
	}
}

// Attach registers the collector of rt's connectors and log.
func (m *Metrics) Attach(rt *runtime.Runtime) {
	m.reg.MustRegister(&collector{rt: rt})
}

// Gather returns the current metrics (for tests and tools).
func (m *Metrics) Gather() (map[string]float64, error) {
	fams, err := m.reg.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			var lbl []string
			for _, l := range mt.GetLabel() {
				lbl = append(lbl, l.GetName()+"="+strconv.Quote(l.GetValue()))
			}
			key := f.GetName()
			if len(lbl) > 0 {
				key += "{" + strings.Join(lbl, ",") + "}"
			}
			switch {
			case mt.Gauge != nil:
				out[key] = mt.Gauge.GetValue()
			case mt.Counter != nil:
				out[key] = mt.Counter.GetValue()
			case mt.Histogram != nil:
				out[key+"_count"] = float64(mt.Histogram.GetSampleCount())
			}
		}
	}
	return out, nil
}

// collector reads the runtime at each scrape.
type collector struct{ rt *runtime.Runtime }

func (c *collector) Describe(chan<- *prometheus.Desc) {} // unchecked: the metrics depend on the plugins

var descs = struct {
	state, taskState, appended, written, rejected, restarts, replayed, lag      *prometheus.Desc
	partSize, partStart, partEnd, partHW, partSegments, connectors, topicsCount *prometheus.Desc
	partCompactions, partCompacted                                              *prometheus.Desc
}{
	state:           prometheus.NewDesc("sluice_connector_state", "1 for the connector's current state.", []string{"connector", "type", "state"}, nil),
	taskState:       prometheus.NewDesc("sluice_task_state", "1 for the task's current state.", []string{"connector", "task", "state"}, nil),
	appended:        prometheus.NewDesc("sluice_source_records_appended_total", "Records a source connector appended to the log.", []string{"connector"}, nil),
	written:         prometheus.NewDesc("sluice_sink_records_written_total", "Records a sink connector wrote to its view.", []string{"connector"}, nil),
	rejected:        prometheus.NewDesc("sluice_connector_rejected_records_total", "Records skipped under errors.tolerance=all (sent to the dead-letter topic when one is set).", []string{"connector"}, nil),
	restarts:        prometheus.NewDesc("sluice_task_restarts_total", "Task restarts after retriable failures.", []string{"connector"}, nil),
	replayed:        prometheus.NewDesc("sluice_source_replayed_records_skipped_total", "Records a restarted source read again that the log already held.", []string{"connector"}, nil),
	lag:             prometheus.NewDesc("sluice_sink_consumer_lag", "Records of a partition a sink connector has not written yet.", []string{"connector", "topic", "partition"}, nil),
	partSize:        prometheus.NewDesc("sluice_log_partition_size_bytes", "Bytes of a log partition's segments.", []string{"topic", "partition"}, nil),
	partStart:       prometheus.NewDesc("sluice_log_partition_start_offset", "A log partition's first offset.", []string{"topic", "partition"}, nil),
	partEnd:         prometheus.NewDesc("sluice_log_partition_end_offset", "A log partition's end offset (the next offset to be written).", []string{"topic", "partition"}, nil),
	partHW:          prometheus.NewDesc("sluice_log_partition_high_watermark", "A log partition's high watermark (readers see offsets below it).", []string{"topic", "partition"}, nil),
	partSegments:    prometheus.NewDesc("sluice_log_partition_segments", "Segments of a log partition.", []string{"topic", "partition"}, nil),
	partCompactions: prometheus.NewDesc("sluice_log_partition_compactions_total", "Compaction runs of a log partition (of a topic with cleanup.policy=compact, when it was due) since the process started.", []string{"topic", "partition"}, nil),
	partCompacted:   prometheus.NewDesc("sluice_log_partition_compacted_bytes_total", "Segment bytes the compaction runs of a log partition removed since the process started.", []string{"topic", "partition"}, nil),
	connectors:      prometheus.NewDesc("sluice_connectors", "Connectors configured.", nil, nil),
	topicsCount:     prometheus.NewDesc("sluice_log_topics", "Topics in the log.", nil, nil),
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	names := c.rt.Names()
	ch <- prometheus.MustNewConstMetric(descs.connectors, prometheus.GaugeValue, float64(len(names)))
	statDescs := map[string]*prometheus.Desc{}
	for _, name := range names {
		st, err := c.rt.Status(name)
		if err != nil {
			continue
		}
		kind := kindName(st.Type)
		ch <- prometheus.MustNewConstMetric(descs.state, prometheus.GaugeValue, 1, name, kind, string(st.Connector.State))
		for _, t := range st.Tasks {
			ch <- prometheus.MustNewConstMetric(descs.taskState, prometheus.GaugeValue, 1, name, strconv.Itoa(t.ID), string(t.State))
		}
		var records, rejected, restarts, replayed int64
		for _, t := range st.Tasks {
			records, rejected, restarts, replayed = t.Records, t.Rejected, t.Restarts, t.Replayed
		}
		ch <- prometheus.MustNewConstMetric(descs.rejected, prometheus.CounterValue, float64(rejected), name)
		ch <- prometheus.MustNewConstMetric(descs.restarts, prometheus.CounterValue, float64(restarts), name)
		prefix := "sluice_" + kind + "_"
		switch st.Type {
		case connect.KindSource:
			ch <- prometheus.MustNewConstMetric(descs.appended, prometheus.CounterValue, float64(records), name)
			ch <- prometheus.MustNewConstMetric(descs.replayed, prometheus.CounterValue, float64(replayed), name)
		case connect.KindSink:
			ch <- prometheus.MustNewConstMetric(descs.written, prometheus.CounterValue, float64(records), name)
			if parts, _, err := sinkLag(c.rt, name); err == nil {
				for _, p := range parts {
					ch <- prometheus.MustNewConstMetric(descs.lag, prometheus.GaugeValue, float64(p.Lag), name, p.Topic, strconv.Itoa(int(p.Partition)))
				}
			}
		default:
			continue
		}
		inst, _ := c.rt.Instance(name)
		for _, sm := range statsOf(inst) {
			full := prefix + sm.name
			labels := []string{"connector"}
			values := []string{name}
			for _, l := range sm.labels {
				labels = append(labels, l[0])
				values = append(values, l[1])
			}
			key := full + "/" + strings.Join(labels, ",")
			d := statDescs[key]
			if d == nil {
				d = prometheus.NewDesc(full, sm.help, labels, nil)
				statDescs[key] = d
			}
			vt := prometheus.GaugeValue
			if sm.counter {
				vt = prometheus.CounterValue
			}
			if m, err := prometheus.NewConstMetric(d, vt, sm.value, values...); err == nil {
				ch <- m
			}
		}
	}
	topics := c.rt.Log().Topics()
	ch <- prometheus.MustNewConstMetric(descs.topicsCount, prometheus.GaugeValue, float64(len(topics)))
	for _, t := range topics {
		info, err := c.rt.Log().Describe(t)
		if err != nil {
			continue
		}
		for _, p := range info.Partitions {
			ps := strconv.Itoa(int(p.Partition))
			ch <- prometheus.MustNewConstMetric(descs.partSize, prometheus.GaugeValue, float64(p.SizeBytes), t, ps)
			ch <- prometheus.MustNewConstMetric(descs.partStart, prometheus.GaugeValue, float64(p.LogStartOffset), t, ps)
			ch <- prometheus.MustNewConstMetric(descs.partEnd, prometheus.GaugeValue, float64(p.HighWatermark), t, ps)
			ch <- prometheus.MustNewConstMetric(descs.partHW, prometheus.GaugeValue, float64(p.HighWatermark), t, ps)
			ch <- prometheus.MustNewConstMetric(descs.partSegments, prometheus.GaugeValue, float64(p.Segments), t, ps)
			ch <- prometheus.MustNewConstMetric(descs.partCompactions, prometheus.CounterValue, float64(p.Compactions), t, ps)
			ch <- prometheus.MustNewConstMetric(descs.partCompacted, prometheus.CounterValue, float64(p.CompactedBytes), t, ps)
		}
	}
	if rl, ok := c.rt.Log().(replicated); ok {
		collectReplication(ch, rl.Partitions())
	}
}

// replicated is a log that replicates its partitions (wal/raft).
type replicated interface{ Partitions() []raft.PartitionStatus }

var replDescs = struct {
	role, serving, term, leader, commit, last, followerLag, followerActive *prometheus.Desc
}{
	role:           prometheus.NewDesc("sluice_replication_role", "1 for this node's Raft role in the partition (leader, follower, candidate, pre-candidate, failed).", []string{"topic", "partition", "role"}, nil),
	serving:        prometheus.NewDesc("sluice_replication_serving", "1 when this node leads the partition and committed an entry of its term: it serves appends and reads.", []string{"topic", "partition"}, nil),
	term:           prometheus.NewDesc("sluice_replication_term", "The partition's Raft term on this node.", []string{"topic", "partition"}, nil),
	leader:         prometheus.NewDesc("sluice_replication_leader", "The node id of the partition's leader as this node knows it (0: none).", []string{"topic", "partition"}, nil),
	commit:         prometheus.NewDesc("sluice_replication_commit_index", "The partition's Raft commit index on this node.", []string{"topic", "partition"}, nil),
	last:           prometheus.NewDesc("sluice_replication_last_index", "The partition's last Raft index on this node.", []string{"topic", "partition"}, nil),
	followerLag:    prometheus.NewDesc("sluice_replication_follower_lag_entries", "On the leader: entries a follower is behind the leader's last index.", []string{"topic", "partition", "follower"}, nil),
	followerActive: prometheus.NewDesc("sluice_replication_follower_active", "On the leader: 1 when the follower was heard from within an election timeout.", []string{"topic", "partition", "follower"}, nil),
}

func collectReplication(ch chan<- prometheus.Metric, parts []raft.PartitionStatus) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, p := range parts {
		ps := strconv.Itoa(int(p.Partition))
		gauge(replDescs.role, 1, p.Topic, ps, p.Role)
		gauge(replDescs.serving, boolValue(p.Serving), p.Topic, ps)
		gauge(replDescs.term, float64(p.Term), p.Topic, ps)
		gauge(replDescs.leader, float64(p.Leader), p.Topic, ps)
		gauge(replDescs.commit, float64(p.CommitIndex), p.Topic, ps)
		gauge(replDescs.last, float64(p.LastIndex), p.Topic, ps)
		for _, f := range p.Followers {
			id := strconv.FormatUint(f.Node, 10)
			gauge(replDescs.followerLag, float64(f.Lag), p.Topic, ps, id)
			gauge(replDescs.followerActive, boolValue(f.Active), p.Topic, ps, id)
		}
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// statMetric is one value of a plugin's Stats.
type statMetric struct {
	name    string
	help    string
	counter bool
	value   float64
	labels  [][2]string
}

// Debezium's names for fields whose snake case differs.
var statAliases = map[string]string{
	"MilliSecondsBehindSource":      "milliseconds_behind_source",
	"NumberOfCommittedTxns":         "number_of_committed_transactions",
	"NumberOfCommittedTransactions": "number_of_committed_transactions",
	"NumberOfAcknowledgedBatchs":    "number_of_acknowledged_batches",
	"Conflicts":                     "version_conflicts_skipped",
}

// gaugeStats are the fields that go up and down; every other number is a counter.
var gaugeStats = map[string]bool{
	"milliseconds_behind_source": true, "slot_lag_bytes": true, "binlog_position": true,
	"rows_total_estimate": true, "queue_remaining_capacity": true, "queue_total_capacity": true,
	"remaining_table_count": true,
}

var durationType = reflect.TypeOf(time.Duration(0))

// statsOf reads a plugin instance's Stats() struct.
func statsOf(inst any) []statMetric {
	if inst == nil {
		return nil
	}
	mv := reflect.ValueOf(inst).MethodByName("Stats")
	if !mv.IsValid() || mv.Type().NumIn() != 0 || mv.Type().NumOut() != 1 {
		return nil
	}
	res := mv.Call(nil)[0]
	if res.Kind() == reflect.Pointer {
		if res.IsNil() {
			return nil
		}
		res = res.Elem()
	}
	if res.Kind() != reflect.Struct {
		return nil
	}
	var out []statMetric
	t := res.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, ok := statAliases[f.Name]
		if !ok {
			name = snake(f.Name)
		}
		v := res.Field(i)
		help := "The plugin's " + f.Name + "."
		gauge := gaugeStats[name] || strings.HasPrefix(name, "last_")
		switch {
		case f.Type == durationType:
			out = append(out, statMetric{name: name + "_seconds", help: help, counter: !gauge, value: time.Duration(v.Int()).Seconds()})
		case v.Kind() == reflect.Bool:
			b := 0.0
			if v.Bool() {
				b = 1
			}
			out = append(out, statMetric{name: name, help: help, value: b})
		case v.CanInt():
			out = append(out, statMetric{name: name, help: help, counter: !gauge, value: float64(v.Int())})
		case v.CanUint():
			out = append(out, statMetric{name: name, help: help, counter: !gauge, value: float64(v.Uint())})
		case v.CanFloat():
			out = append(out, statMetric{name: name, help: help, value: v.Float()})
		case v.Kind() == reflect.String:
			if s := v.String(); s != "" {
				out = append(out, statMetric{name: name + "_info", help: help + " (the value is the label)", value: 1, labels: [][2]string{{"value", s}}})
			}
		case v.Kind() == reflect.Map && v.Type().Key().Kind() == reflect.String && v.Type().Elem().Kind() == reflect.Int64:
			keys := v.MapKeys()
			sort.Slice(keys, func(a, b int) bool { return keys[a].String() < keys[b].String() })
			for _, k := range keys {
				out = append(out, statMetric{name: name, help: help, counter: !gauge, value: float64(v.MapIndex(k).Int()), labels: [][2]string{{"table", k.String()}}})
			}
		}
	}
	return out
}

// snake turns a Go field name into snake case: "TotalNumberOfEventsSeen" → "total_number_of_events_seen",
// "LastAckedLSN" → "last_acked_lsn", "ServerWALEnd" → "server_wal_end".
func snake(s string) string {
	rs := []rune(s)
	var b strings.Builder
	for i, r := range rs {
		if unicode.IsUpper(r) && i > 0 {
			prevLower := unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1])
			nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if prevLower || unicode.IsUpper(rs[i-1]) && nextLower {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}
