package mysql_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/e2e/harness"
	"github.com/sluice-cdc/sluice/sources/mysql"
	"github.com/sluice-cdc/sluice/wal"
)

// Benchmarks (never part of a plain go test run; each iteration is a full measurement):
//
//	go test ./e2e/mysql -run '^$' -bench . -benchtime 1x
//
// BenchmarkBinlogDrain: a 1,000,000-row binlog backlog (980 transactions of 1,000 rows and
// 20,000 single-row transactions) decoded by a raw BinlogSyncer with a no-op handler (the
// baseline), drained by the source alone (Read), and by the source under the runtime into a
// fresh log (fsync on) until the topic holds every row. BenchmarkSnapshot: a 1,000,000-row
// table read by SELECT * streamed to nowhere by the go-mysql client (the baseline), by the
// source's snapshot alone, and by the snapshot under the runtime into a fresh log.
//
// Each iteration runs SLUICE_BENCH_ROUNDS rounds (default 3) of baseline and subjects one
// after the other, and reports the medians of the rates and of the per-round ratios, so that
// a busy machine slows baseline and subject alike. SLUICE_BENCH_ONLY=raw|source|log (drain)
// or select|snapshot|log (snapshot) runs one phase alone, for CPU and memory profiles.

const benchRows = 1_000_000

func benchConfig(m *harness.MariaDB, db string, extra map[string]string) map[string]string {
	cfg := map[string]string{
		"database.hostname": m.Host, "database.port": strconv.Itoa(m.Port),
		"database.user": m.ReplUser, "database.password": m.ReplPassword,
		"database.server.id": "7000", "topic.prefix": "bench", "database.include.list": db,
	}
	for k, v := range extra {
		cfg[k] = v
	}
	return cfg
}

func head(b *testing.B, c *client.Conn) (string, uint32) {
	r, err := c.Execute("SHOW MASTER STATUS")
	if err != nil {
		b.Fatal(err)
	}
	f, _ := r.GetString(0, 0)
	p, _ := r.GetUint(0, 1)
	return f, uint32(p)
}

// rawDrain decodes the binlog from start to end with a no-op handler; it returns rows decoded.
func rawDrain(b *testing.B, m *harness.MariaDB, file string, pos, end uint32) int {
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 7100, Flavor: "mariadb", Host: m.Host, Port: uint16(m.Port),
		User: m.ReplUser, Password: m.ReplPassword, Logger: slog.New(slog.DiscardHandler),
	})
	defer syncer.Close()
	st, err := syncer.StartSync(gomysql.Position{Name: file, Pos: pos})
	if err != nil {
		b.Fatal(err)
	}
	rows := 0
	for {
		ev, err := st.GetEvent(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if re, ok := ev.Event.(*replication.RowsEvent); ok {
			rows += len(re.Rows)
		}
		if ev.Header.LogPos >= end && ev.Header.LogPos > 0 {
			return rows
		}
	}
}

// drainBacklog is the binlog backlog of BenchmarkBinlogDrain, made once per process.
var drainBacklog struct {
	db        string
	file      string
	pos, end  uint32
	made, bad bool
}

// makeDrainBacklog writes the backlog into a binlog file of its own, which it makes the oldest
// (older ones are purged), so that snapshot.mode=never starts right at the backlog.
func makeDrainBacklog(b *testing.B, m *harness.MariaDB) {
	bl := &drainBacklog
	if bl.bad {
		b.Fatal("backlog setup failed before")
	}
	if bl.made {
		return
	}
	bl.bad = true
	bl.db = "benchdrain"
	ctx := context.Background()
	if err := m.Exec(ctx, "DROP DATABASE IF EXISTS "+bl.db, "CREATE DATABASE "+bl.db, "USE "+bl.db,
		"CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL, s VARCHAR(40) NOT NULL, d DATETIME(3))",
		"FLUSH BINARY LOGS"); err != nil {
		b.Fatal(err)
	}
	c, err := client.Connect(m.Addr(), m.AppUser, m.AppPassword, bl.db)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	file, _ := head(b, c)
	// the server keeps files until its binlog checkpoint passes them: retry the purge
	for deadline := time.Now().Add(30 * time.Second); ; {
		if err := m.Exec(ctx, fmt.Sprintf("PURGE BINARY LOGS TO '%s'", file)); err != nil {
			b.Fatal(err)
		}
		r, err := c.Execute("SHOW BINARY LOGS")
		if err != nil {
			b.Fatal(err)
		}
		if first, _ := r.GetString(0, 0); first == file {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("binlog files before %s are still on the server", file)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for i := 0; i < 980; i++ {
		if _, err := c.Execute("INSERT INTO t (v, s, d) SELECT seq, CONCAT('bulk ', seq), NOW(3) FROM seq_1_to_1000"); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < 20000; i++ {
		if _, err := c.Execute(fmt.Sprintf("INSERT INTO t (v, s, d) VALUES (%d, 'single', NOW(3))", i)); err != nil {
			b.Fatal(err)
		}
	}
	_, end := head(b, c)
	bl.file, bl.pos, bl.end = file, 4, end
	bl.made, bl.bad = true, false
}

func BenchmarkBinlogDrain(b *testing.B) {
	runtime.SetGCDefaults() // the collector target of `sluice run`, for baseline and subject alike
	m := setup(b)
	makeDrainBacklog(b, m)
	bl := &drainBacklog
	b.ResetTimer()
	for range b.N {
		r := harness.NewRounds(benchRows)
		r.ServerPID = m.PID()
		for range harness.BenchRounds() {
			if harness.BenchPhase("raw") {
				r.Measure("raw", func() time.Duration {
					t0 := time.Now()
					if n := rawDrain(b, m, bl.file, bl.pos, bl.end); n != benchRows {
						b.Fatalf("raw decode saw %d rows, want %d", n, benchRows)
					}
					return time.Since(t0)
				})
			}
			if harness.BenchPhase("source") {
				r.Measure("source", func() time.Duration {
					return drainSource(b, benchConfig(m, bl.db, map[string]string{"snapshot.mode": "never"}), bl.file, bl.pos, benchRows)
				})
			}
			if harness.BenchPhase("log") {
				cfg := benchConfig(m, bl.db, map[string]string{"snapshot.mode": "never", "database.server.id": "7001"})
				r.Measure("log", func() time.Duration { return intoLog(b, cfg, "bench."+bl.db+".t", benchRows) })
			}
		}
		r.Report(b, "raw", "source", "log")
	}
}

func startPosition(file string, pos uint32) connect.Position {
	return connect.Position{Order: []byte{0}, State: []byte(fmt.Sprintf(`{"v":1,"epoch":0,"file":%q,"pos":%d}`, file, pos))}
}

// drainSource reads want records from a source opened at file:pos, acknowledging every batch
// as the runtime would, and returns how long that took.
func drainSource(b *testing.B, raw map[string]string, file string, pos uint32, want int) time.Duration {
	p := mysql.Plugin()
	cfg, errs := p.ParseConfig(raw)
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	src, err := mysql.New(cfg, connect.Env{Connector: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Now()
	if err := src.Open(ctx, startPosition(file, pos)); err != nil {
		b.Fatal(err)
	}
	defer src.Close(ctx)
	n := 0
	for n < want {
		batch, err := src.Read(ctx)
		if err != nil {
			b.Fatal(err)
		}
		n += len(batch.Records)
		if batch.Release != nil {
			batch.Release() // as the runtime does once a batch is encoded
		}
		if !batch.Position.IsZero() {
			_ = src.Ack(ctx, batch.Position)
		}
	}
	return time.Since(t0)
}

// intoLog runs the source under the runtime into a fresh log (fsync on) until topic holds
// want records, and returns how long that took.
func intoLog(b *testing.B, raw map[string]string, topic string, want int64) time.Duration {
	l, err := wal.Open(b.TempDir(), walOpts())
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	reg, err := connect.NewRegistry(mysql.Plugin())
	if err != nil {
		b.Fatal(err)
	}
	rt, err := runtime.New(runtime.Options{Log: l, Registry: reg})
	if err != nil {
		b.Fatal(err)
	}
	if err := rt.Add(runtime.ConnectorSpec{Name: "bench", Class: "mysql", Config: raw}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	t0 := time.Now()
	go func() { done <- rt.Run(ctx) }()
	for {
		if info, err := l.Describe(topic); err == nil {
			var n int64
			for _, p := range info.Partitions {
				n += p.HighWatermark
			}
			if n >= want {
				break
			}
		}
		if time.Since(t0) > 10*time.Minute {
			b.Fatal("drain into the log timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(t0)
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return took
}

var snapshotTableMade bool

func BenchmarkSnapshot(b *testing.B) {
	runtime.SetGCDefaults() // the collector target of `sluice run`, for baseline and subject alike
	m := setup(b)
	db := "benchsnap"
	ctx := context.Background()
	if !snapshotTableMade {
		if err := m.Exec(ctx, "DROP DATABASE IF EXISTS "+db, "CREATE DATABASE "+db, "USE "+db,
			"CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL, s VARCHAR(40) NOT NULL, d DATETIME(3))",
			"INSERT INTO t SELECT seq, seq % 1000, CONCAT('row ', seq), NOW(3) FROM seq_1_to_1000000"); err != nil {
			b.Fatal(err)
		}
		snapshotTableMade = true
	}
	b.ResetTimer()
	for range b.N {
		r := harness.NewRounds(benchRows)
		r.ServerPID = m.PID()
		for range harness.BenchRounds() {
			if harness.BenchPhase("select") {
				r.Measure("select", func() time.Duration { return selectAll(b, m, db) })
			}
			if harness.BenchPhase("snapshot") {
				r.Measure("snapshot", func() time.Duration { return snapshotAlone(b, m, db) })
			}
			if harness.BenchPhase("log") {
				cfg := benchConfig(m, db, map[string]string{"snapshot.mode": "initial_only", "snapshot.locking.mode": "none", "database.server.id": "7002"})
				r.Measure("log", func() time.Duration { return intoLog(b, cfg, "bench."+db+".t", benchRows) })
			}
		}
		r.Report(b, "select", "snapshot", "log")
		if len(snapshotOpens) > 0 {
			b.ReportMetric(harness.Median(snapshotOpens), "snapshot_open_ms")
		}
		snapshotOpens = nil
	}
}

// selectAll streams SELECT * of the table to nowhere.
func selectAll(b *testing.B, m *harness.MariaDB, db string) time.Duration {
	c, err := client.Connect(m.Addr(), m.ReplUser, m.ReplPassword, db)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	t0 := time.Now()
	n := 0
	var res gomysql.Result
	if err := c.ExecuteSelectStreaming("SELECT * FROM t", &res, func(row []gomysql.FieldValue) error { n++; return nil }, nil); err != nil {
		b.Fatal(err)
	}
	took := time.Since(t0)
	if n != benchRows {
		b.Fatalf("SELECT * gave %d rows", n)
	}
	return took
}

// snapshotOpens are the durations of the snapshot's Open (checks, plan, table definitions), in
// milliseconds: part of the snapshot's time, none of SELECT *'s.
var snapshotOpens []float64

// snapshotAlone reads the table through the source's snapshot (Open to the last row), as the
// runtime runs it for a connector without transforms (connect.Env.RawJSON).
func snapshotAlone(b *testing.B, m *harness.MariaDB, db string) time.Duration {
	ctx := context.Background()
	p := mysql.Plugin()
	cfg, errs := p.ParseConfig(benchConfig(m, db, map[string]string{"snapshot.mode": "initial_only", "snapshot.locking.mode": "none"}))
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	src, err := mysql.New(cfg, connect.Env{Connector: "bench", RawJSON: true})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close(ctx)
	t0 := time.Now()
	if err := src.Open(ctx, connect.Position{}); err != nil {
		b.Fatal(err)
	}
	snapshotOpens = append(snapshotOpens, time.Since(t0).Seconds()*1000)
	got := 0
	for got < benchRows {
		batch, err := src.Read(ctx)
		if err != nil {
			b.Fatal(err)
		}
		got += len(batch.Records)
		if batch.Release != nil {
			batch.Release() // as the runtime does once a batch is encoded
		}
	}
	return time.Since(t0)
}

// walOpts returns the log options of the benchmark: the default fsync, or no fsync with
// SLUICE_BENCH_NOSYNC=1 (to see how much of the time into the log is the wait for the disk).
func walOpts() wal.Options {
	if os.Getenv("SLUICE_BENCH_NOSYNC") == "1" {
		return wal.Options{Fsync: wal.UnsafeFsyncNever}
	}
	return wal.Options{}
}
