package snapshot_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/e2e/harness"
)

// BenchmarkSnapshotRates measures, in one run and against one durable server of each kind
// (PostgreSQL, MariaDB), how fast the sluice binary gets a 1,000,000-row table into its log by
//
//   - the initial snapshot (snapshot.mode=initial on a new connector), the baseline;
//   - an incremental snapshot requested through the API, alone;
//   - an incremental snapshot while a writer updates, inserts and deletes rows of the table;
//
// and reports each rate and its ratio to the baseline (goal: at least 0.7 without load).
// Rounds alternate the three (SLUICE_BENCH_ROUNDS, default 2) and the medians are
// reported, with the ratio of each round (the machine's load changes between rounds more
// than between the runs of one round). Run it with:
//
//	go test ./e2e/snapshot -run '^$' -bench SnapshotRates -benchtime 1x
//
// -bench SnapshotRates/mysql for one kind. SLUICE_BENCH_CHUNK sets the incremental chunk size
// (default incremental.snapshot.chunk.size's); a comma-separated list of sizes runs an
// incremental snapshot without load for each of them in every round, to compare them in one
// run (the run under load uses the first). SLUICE_BENCH_LOADED=0 leaves out the runs under
// load. SLUICE_BENCH_PROFILE names a directory where each run of the sluice binary writes its
// CPU profile (<kind>-<run>.pprof). SLUICE_BENCH_OTHER_BIN names another sluice binary (an
// older build) whose incremental snapshot, with its own default chunk size, runs in every
// round too: the two builds are compared against the same initial snapshots.
func BenchmarkSnapshotRates(b *testing.B) {
	rows := 1000000
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_ROWS")); err == nil && v > 0 {
		rows = v
	}
	rounds := 2
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	sizes := []string{""}
	if v := os.Getenv("SLUICE_BENCH_CHUNK"); v != "" {
		sizes = strings.Split(v, ",")
	}
	withLoad := os.Getenv("SLUICE_BENCH_LOADED") != "0"
	other := os.Getenv("SLUICE_BENCH_OTHER_BIN")
	for _, k := range benchKinds {
		b.Run(k.name, func(b *testing.B) {
			d := k.open(b)
			d.createTable(b, "items", rows)
			d.analyze(b, "items")
			var initial, loaded, others []float64
			incr := make([][]float64, len(sizes))
			var writes []int64
			for range b.N {
				for r := range rounds {
					initial = append(initial, initialRate(b, d, rows, r))
					for i, size := range sizes {
						incr[i] = append(incr[i], incrementalRate(b, d, rows, r, size, false, nil))
					}
					if other != "" {
						others = append(others, incrementalRateWith(b, other, d, rows, r, "", false, nil))
					}
					if withLoad {
						var w int64
						loaded = append(loaded, incrementalRate(b, d, rows, r, sizes[0], true, &w))
						writes = append(writes, w)
					}
				}
			}
			mi := median(initial)
			b.ReportMetric(mi, "initial_rows/s")
			b.Logf("%s: %d rows, %d rounds: initial %v rows/s", k.name, rows, rounds, rounded(initial))
			for i, size := range sizes {
				unit := "incremental"
				if len(sizes) > 1 {
					unit += "_chunk_" + size
				}
				mn := median(incr[i])
				b.ReportMetric(mn, unit+"_rows/s")
				b.ReportMetric(mn/mi, "ratio_"+unit+"/initial")
				b.Logf("%s: incremental (chunk size %q) %v rows/s; ratio of the medians %.2f, per round %v, median %.2f", k.name, size, rounded(incr[i]), mn/mi, ratios(incr[i], initial), median(ratios(incr[i], initial)))
			}
			if other != "" {
				mo := median(others)
				b.ReportMetric(mo, "other_incremental_rows/s")
				b.ReportMetric(mo/mi, "ratio_other_incremental/initial")
				b.Logf("%s: incremental of %s %v rows/s; ratio of the medians %.2f, per round %v, median %.2f", k.name, other, rounded(others), mo/mi, ratios(others, initial), median(ratios(others, initial)))
			}
			if withLoad {
				ml := median(loaded)
				b.ReportMetric(ml, "incremental_under_writes_rows/s")
				b.ReportMetric(ml/mi, "ratio_under_writes/initial")
				b.Logf("%s: incremental under writes %v rows/s (writes per round %v); ratio of the medians %.2f, per round %v, median %.2f", k.name, rounded(loaded), writes, ml/mi, ratios(loaded, initial), median(ratios(loaded, initial)))
			}
		})
	}
}

// ratios are the ratios of the rates of each round, to two decimals.
func ratios(xs, base []float64) []float64 {
	out := make([]float64, len(xs))
	for i := range xs {
		out[i] = math.Round(xs[i]/base[i]*100) / 100
	}
	return out
}

// benchDB is a sourceDB the benchmark can run connectors of.
type benchDB interface {
	sourceDB
	// analyze refreshes the table's statistics (the estimate of its rows).
	analyze(t testing.TB, table string)
	// connector adapts a configuration for connector number n of the benchmark (its own slot
	// or server id, nothing left behind when it stops).
	connector(cfg map[string]string, n string)
	// streaming reports whether a committed offset is past the initial snapshot.
	streaming(off map[string]any) bool
}

// benchKinds start a durable server of their own for the benchmark.
var benchKinds = []struct {
	name string
	open func(b *testing.B) benchDB
}{
	{"postgres", func(b *testing.B) benchDB {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		pg, err := harness.StartPostgres(ctx, harness.PostgresOptions{Durable: true})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		servers.mu.Lock()
		prev := servers.pg
		servers.pg = pg
		servers.mu.Unlock()
		b.Cleanup(func() {
			servers.mu.Lock()
			servers.pg = prev
			servers.mu.Unlock()
			if err := pg.Close(); err != nil {
				b.Error(err)
			}
		})
		return newPG(b)
	}},
	{"mysql", func(b *testing.B) benchDB {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		m, err := harness.StartMariaDB(ctx, harness.MariaDBOptions{Durable: true})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		servers.mu.Lock()
		prev := servers.maria
		servers.maria = m
		servers.mu.Unlock()
		b.Cleanup(func() {
			servers.mu.Lock()
			servers.maria = prev
			servers.mu.Unlock()
			if err := m.Close(); err != nil {
				b.Error(err)
			}
		})
		return newMaria(b)
	}},
}

func (d *pgDB) analyze(t testing.TB, table string) { d.exec(t, "VACUUM ANALYZE "+table) }

func (d *pgDB) connector(cfg map[string]string, n string) {
	cfg["slot.name"] = d.name + "_" + n
	cfg["slot.drop.on.stop"] = "true"
}

func (d *pgDB) streaming(off map[string]any) bool {
	_, snap := off["snapshot"]
	return !snap && off["lsn"] != nil
}

func (d *mariaDB) analyze(t testing.TB, table string) { d.exec(t, "ANALYZE TABLE "+table) }

var benchServerID atomic.Int64

func (d *mariaDB) connector(cfg map[string]string, n string) {
	cfg["database.server.id"] = strconv.FormatInt(9000+benchServerID.Add(1), 10)
}

func (d *mariaDB) streaming(off map[string]any) bool {
	_, snap := off["snapshot"]
	return !snap && off["file"] != nil
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func rounded(xs []float64) []int64 {
	out := make([]int64, len(xs))
	for i, x := range xs {
		out[i] = int64(x)
	}
	return out
}

// committedDone polls the committed position until done says it is past the snapshot.
func (n *node) committedDone(what string, done func(off map[string]any) bool) {
	n.t.Helper()
	n.waitFor(what, 10*time.Minute, func() bool {
		off := n.offset()
		return off != nil && done(off)
	})
}

// initialRate creates a connector through the API whose initial snapshot reads the table into
// a new log; it is done when the committed position is a stream position.
func initialRate(b *testing.B, d benchDB, rows, round int) float64 {
	n := newNode(b, "", nil)
	n.profile = benchProfile(d, fmt.Sprintf("init%d", round))
	n.start()
	cfg := d.config([]string{"items"}, map[string]string{"snapshot.mode": "initial", "offset.flush.interval.ms": "0"})
	d.connector(cfg, fmt.Sprintf("init%d", round))
	cfg["connector.class"] = d.class()
	start := time.Now()
	n.must("PUT", "/connectors/src/config", jsonOf(b, cfg), 201)
	n.committedDone("the initial snapshot", d.streaming)
	el := time.Since(start)
	n.stop()
	return float64(rows) / el.Seconds()
}

// incrementalRate runs a streaming connector and times an incremental snapshot of the table
// in chunks of size rows ("": the default), with a writer running when load is set, until the committed position says it is done.
func incrementalRate(b *testing.B, d benchDB, rows, round int, size string, load bool, writes *int64) float64 {
	return incrementalRateWith(b, "", d, rows, round, size, load, writes)
}

// incrementalRateWith is incrementalRate with the sluice binary bin ("": the one built from
// this tree).
func incrementalRateWith(b *testing.B, bin string, d benchDB, rows, round int, size string, load bool, writes *int64) float64 {
	cfg := d.config([]string{"items"}, map[string]string{"offset.flush.interval.ms": "0"})
	if size != "" {
		cfg["incremental.snapshot.chunk.size"] = size
	}
	run := fmt.Sprintf("incr%d_%t_%s", round, load, size)
	if bin != "" {
		run += "_other"
	}
	d.connector(cfg, run)
	n := newNode(b, d.class(), cfg)
	n.profile = benchProfile(d, run)
	n.bin = bin
	n.start()
	var w *writer
	if load {
		w = startWriter(b, d, "items", rows, uint64(round))
		n.waitFor("writes", time.Minute, func() bool { return w.writes.Load() > 100 })
	}
	start := time.Now()
	n.must("POST", "/connectors/src/snapshots", `{"data-collections":["`+escape(d.id("items"))+`"]}`, 202)
	n.committedDone("the incremental snapshot", func(off map[string]any) bool {
		inc, _ := off["incremental"].(map[string]any)
		if inc == nil {
			return false
		}
		tables, _ := inc["tables"].([]any)
		done, _ := inc["done"].([]any)
		return len(tables) == 0 && len(done) > 0
	})
	el := time.Since(start)
	if w != nil {
		*writes = w.writes.Load()
		w.halt(b)
	}
	var read int64
	for _, ts := range n.status().Tables {
		read = ts.RowsScanned
	}
	n.stop()
	return float64(read) / el.Seconds()
}

// benchProfile is where a run of the sluice binary writes its CPU profile: a file in
// SLUICE_BENCH_PROFILE's directory, "" when it is not set.
func benchProfile(d benchDB, run string) string {
	dir := os.Getenv("SLUICE_BENCH_PROFILE")
	if dir == "" {
		return ""
	}
	kind := "postgres"
	if _, ok := d.(*mariaDB); ok {
		kind = "mysql"
	}
	return filepath.Join(dir, kind+"-"+run+".pprof")
}
