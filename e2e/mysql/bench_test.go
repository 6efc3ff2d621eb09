package mysql_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
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

// Benchmarks (never part of a plain go test run):
//
//	go test ./e2e/mysql -run '^$' -bench . -benchtime 1x
//
// BenchmarkBinlogDrain: a 1,000,000-row binlog backlog (980 transactions of 1,000 rows and
// 20,000 single-row transactions) drained by the source into the log (runtime + wal, fsync on)
// and by the source alone, each against a raw BinlogSyncer decode of the same binlog with a
// no-op handler, in the same run. BenchmarkSnapshot: a 1,000,000-row table read by the
// snapshot against SELECT * streamed to nowhere by the go-mysql client.

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

func peakRSSMiB() float64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
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

func BenchmarkBinlogDrain(b *testing.B) {
	m := setup(b)
	db := "benchdrain"
	ctx := context.Background()
	if err := m.Exec(ctx, "DROP DATABASE IF EXISTS "+db, "CREATE DATABASE "+db, "USE "+db,
		"CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL, s VARCHAR(40) NOT NULL, d DATETIME(3))"); err != nil {
		b.Fatal(err)
	}
	c, err := client.Connect(m.Addr(), m.AppUser, m.AppPassword, db)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	file, pos := head(b, c)
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
	const rows = 1_000_000
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if n := rawDrain(b, m, file, pos, end); n != rows {
			b.Fatalf("raw decode saw %d rows, want %d", n, rows)
		}
		raw := time.Since(t0)

		// the source alone
		t0 = time.Now()
		drainSource(b, benchConfig(m, db, map[string]string{"snapshot.mode": "never"}), file, pos, end, rows)
		alone := time.Since(t0)

		// the source into the log
		t0 = time.Now()
		drainIntoLog(b, benchConfig(m, db, nil), file, pos, end)
		intoLog := time.Since(t0)

		b.ReportMetric(rows/raw.Seconds(), "raw_rows/s")
		b.ReportMetric(rows/alone.Seconds(), "source_rows/s")
		b.ReportMetric(rows/intoLog.Seconds(), "log_rows/s")
		b.ReportMetric(raw.Seconds()/alone.Seconds(), "source/raw")
		b.ReportMetric(raw.Seconds()/intoLog.Seconds(), "log/raw")
		b.ReportMetric(peakRSSMiB(), "peak_rss_MiB")
	}
}

func startPosition(file string, pos uint32) connect.Position {
	return connect.Position{Order: []byte{0}, State: []byte(fmt.Sprintf(`{"v":1,"epoch":0,"file":%q,"pos":%d}`, file, pos))}
}

func drainSource(b *testing.B, raw map[string]string, file string, pos, end uint32, want int) {
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
	}
}

// drainIntoLog runs the source under the runtime into a wal until the committed position
// reaches end.
func drainIntoLog(b *testing.B, raw map[string]string, file string, pos, end uint32) {
	dir := b.TempDir()
	l, err := wal.Open(dir, wal.Options{})
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
	raw["snapshot.mode"] = "never"
	raw["database.server.id"] = "7001"
	// start at file/pos: "never" starts at the oldest binlog, which is where the backlog begins
	if err := rt.Add(runtime.ConnectorSpec{Name: "bench", Class: "mysql", Config: raw}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	for {
		p, err := rt.SourceOffset(context.Background(), "bench")
		if err == nil && !p.IsZero() {
			var st struct {
				File string `json:"file"`
				Pos  uint32 `json:"pos"`
			}
			if json.Unmarshal(p.State, &st) == nil && st.File >= file && st.Pos >= end {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
}

func BenchmarkSnapshot(b *testing.B) {
	m := setup(b)
	db := "benchsnap"
	ctx := context.Background()
	if err := m.Exec(ctx, "DROP DATABASE IF EXISTS "+db, "CREATE DATABASE "+db, "USE "+db,
		"CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL, s VARCHAR(40) NOT NULL, d DATETIME(3))",
		"INSERT INTO t SELECT seq, seq % 1000, CONCAT('row ', seq), NOW(3) FROM seq_1_to_1000000"); err != nil {
		b.Fatal(err)
	}
	const rows = 1_000_000
	b.ResetTimer()
	for range b.N {
		c, err := client.Connect(m.Addr(), m.ReplUser, m.ReplPassword, db)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		n := 0
		var res gomysql.Result
		if err := c.ExecuteSelectStreaming("SELECT * FROM t", &res, func(row []gomysql.FieldValue) error { n++; return nil }, nil); err != nil {
			b.Fatal(err)
		}
		raw := time.Since(t0)
		c.Close()
		if n != rows {
			b.Fatalf("SELECT * gave %d rows", n)
		}

		p := mysql.Plugin()
		cfg, errs := p.ParseConfig(benchConfig(m, db, map[string]string{"snapshot.mode": "initial_only", "snapshot.locking.mode": "none"}))
		if len(errs) > 0 {
			b.Fatal(errs)
		}
		src, err := mysql.New(cfg, connect.Env{Connector: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		if err := src.Open(ctx, connect.Position{}); err != nil {
			b.Fatal(err)
		}
		got := 0
		for got < rows {
			batch, err := src.Read(ctx)
			if err != nil {
				b.Fatal(err)
			}
			got += len(batch.Records)
		}
		snap := time.Since(t0)
		src.Close(ctx)
		b.ReportMetric(rows/raw.Seconds(), "select_rows/s")
		b.ReportMetric(rows/snap.Seconds(), "snapshot_rows/s")
		b.ReportMetric(raw.Seconds()/snap.Seconds(), "snapshot/select")
		b.ReportMetric(peakRSSMiB(), "peak_rss_MiB")
	}
}
