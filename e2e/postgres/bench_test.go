package postgres_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/e2e/harness"
	"github.com/sluice-cdc/sluice/sources/postgres"
	"github.com/sluice-cdc/sluice/wal"
)

// Benchmarks of the PostgreSQL source against baselines measured in the same run, on the
// same server and data (run them with -benchtime=1x; each iteration is a full measurement):
//
//	BenchmarkBacklogDrain: a backlog of 1M inserts (100 transactions of 10,000 rows) behind
//	  three slots created at the same position, drained by a bare pglogrepl receive loop that
//	  parses every message, by the source alone (Read + Ack), and by the source under the
//	  runtime into the log (fsync on).
//	BenchmarkSnapshot: a 1M-row table read by COPY (SELECT ...) TO STDOUT into io.Discard,
//	  by the source's snapshot alone and by the snapshot under the runtime into the log, in
//	  SLUICE_BENCH_ROUNDS rounds (default 3) of the three one after the other; it reports the
//	  medians of the rates and of the per-round ratios to COPY, so that a busy machine slows
//	  baseline and subject alike. SLUICE_BENCH_ONLY=copy|snapshot|log runs one phase alone.

const benchRows = 1_000_000

// cpuPerRow returns the CPU nanoseconds per row the process spent in run, and run's result.
func cpuPerRow(b *testing.B, rows float64, run func() time.Duration) (time.Duration, float64) {
	c := harness.ProcessCPU()
	took := run()
	return took, float64((harness.ProcessCPU() - c).Nanoseconds()) / rows
}

func createSlot(b *testing.B, d *database, name string) pglogrepl.LSN {
	var lsn string
	if err := d.conn.QueryRow(context.Background(), "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')", name).Scan(&lsn); err != nil {
		b.Fatal(err)
	}
	l, _ := pglogrepl.ParseLSN(lsn)
	return l
}

// bareDrain receives the slot's changes with pglogrepl until it has seen want inserts,
// parsing every message, and returns how long that took.
func bareDrain(b *testing.B, d *database, slot string, want int) time.Duration {
	ctx := context.Background()
	conn, err := pgconn.Connect(ctx, d.pg.ConnStringFor(d.pg.User, d.name, true))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	t0 := time.Now()
	err = pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{PluginArgs: []string{
		"proto_version '2'", "publication_names 'sluice_pub'", "messages 'true'", "streaming 'on'",
	}})
	if err != nil {
		b.Fatal(err)
	}
	inserts := 0
	var last pglogrepl.LSN
	next := time.Now().Add(5 * time.Second)
	for inserts < want {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			b.Fatal(err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok {
			continue
		}
		switch cd.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, _ := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			if ka.ReplyRequested {
				_ = pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: last})
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
			if err != nil {
				b.Fatal(err)
			}
			m, err := pglogrepl.ParseV2(xld.WALData, false)
			if err != nil {
				b.Fatal(err)
			}
			if _, ok := m.(*pglogrepl.InsertMessageV2); ok {
				inserts++
			}
			last = xld.WALStart
		}
		if time.Now().After(next) {
			_ = pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: last})
			next = time.Now().Add(5 * time.Second)
		}
	}
	return time.Since(t0)
}

// sourceDrain reads the source (opened fresh on an existing slot) until it has want records,
// as the runtime runs it for a connector without transforms (connect.Env.RawJSON).
func sourceDrain(b *testing.B, cfg map[string]string, want int) time.Duration {
	ctx := context.Background()
	src, err := postgres.NewFromConfig(cfg, connect.Env{Connector: "bench", RawJSON: true})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close(ctx)
	t0 := time.Now()
	if err := src.Open(ctx, connect.Position{}); err != nil {
		b.Fatal(err)
	}
	got := 0
	for got < want {
		batch, err := src.Read(ctx)
		if err != nil {
			b.Fatal(err)
		}
		got += len(batch.Records)
		if batch.Release != nil {
			batch.Release() // as the runtime does once a batch is encoded
		}
		if !batch.Position.IsZero() {
			_ = src.Ack(ctx, batch.Position)
		}
	}
	return time.Since(t0)
}

// logDrain runs the source under the runtime into a fresh log (fsync on) until the topic
// holds want records.
func logDrain(b *testing.B, cfg map[string]string, topic string, want int64) time.Duration {
	l, err := wal.Open(b.TempDir(), walOpts())
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	reg, err := connect.NewRegistry(postgres.Plugin())
	if err != nil {
		b.Fatal(err)
	}
	rt, err := runtime.New(runtime.Options{Log: l, Registry: reg})
	if err != nil {
		b.Fatal(err)
	}
	if err := rt.Add(runtime.ConnectorSpec{Name: "bench", Class: "postgres", Config: cfg}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	t0 := time.Now()
	go func() { done <- rt.Run(ctx) }()
	for {
		if n, err := l.LatestOffset(topic, 0); err == nil && n >= want {
			break
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

func BenchmarkBacklogDrain(b *testing.B) {
	runtime.SetGCDefaults() // the collector target of `sluice run`, for baseline and subject alike
	d := newDatabase(b, server(b))
	d.exec(b, "CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, s text NOT NULL, t timestamptz NOT NULL)",
		"CREATE PUBLICATION sluice_pub FOR ALL TABLES")
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		slots := []string{fmt.Sprintf("%s_bare%d", d.slot, i), fmt.Sprintf("%s_src%d", d.slot, i), fmt.Sprintf("%s_log%d", d.slot, i)}
		for _, s := range slots {
			createSlot(b, d, s)
		}
		d.exec(b, "TRUNCATE items")
		for tx := 0; tx < 100; tx++ {
			d.exec(b, fmt.Sprintf("INSERT INTO items SELECT g, g %% 1000, 'row ' || g, now() FROM generate_series(%d, %d) g", tx*10000+1, tx*10000+10000))
		}
		b.StartTimer()
		rows := float64(benchRows)
		bare, bareCPU := cpuPerRow(b, rows, func() time.Duration { return bareDrain(b, d, slots[0], benchRows) })
		cfg := d.sourceConfig(map[string]string{"snapshot.mode": "no_data", "slot.name": slots[1], "publication.autocreate.mode": "disabled", "max.batch.size": "2048"})
		alone, aloneCPU := cpuPerRow(b, rows, func() time.Duration { return sourceDrain(b, cfg, benchRows+1) }) // the truncate, then the rows
		cfg["slot.name"] = slots[2]
		intoLog, logCPU := cpuPerRow(b, rows, func() time.Duration { return logDrain(b, cfg, "pg.public.items", benchRows+1) })
		b.StopTimer()
		b.ReportMetric(bareCPU, "bare_cpu_ns/row")
		b.ReportMetric(aloneCPU, "source_cpu_ns/row")
		b.ReportMetric(logCPU, "log_cpu_ns/row")
		b.ReportMetric(rows/bare.Seconds(), "bare_rows/s")
		b.ReportMetric(rows/alone.Seconds(), "source_rows/s")
		b.ReportMetric(rows/intoLog.Seconds(), "log_rows/s")
		b.ReportMetric(bare.Seconds()/alone.Seconds(), "source/bare")
		b.ReportMetric(bare.Seconds()/intoLog.Seconds(), "log/bare")
		b.ReportMetric(harness.PeakRSSMiB(os.Getpid()), "peak_rss_MiB")
		for _, s := range slots {
			d.exec(b, "SELECT pg_drop_replication_slot('"+s+"')")
		}
		b.StartTimer()
	}
}

func BenchmarkSnapshot(b *testing.B) {
	runtime.SetGCDefaults() // the collector target of `sluice run`, for baseline and subject alike
	d := newDatabase(b, server(b))
	d.exec(b, "CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, s text NOT NULL, t timestamptz NOT NULL)",
		fmt.Sprintf("INSERT INTO items SELECT g, g %% 1000, 'row ' || g, now() FROM generate_series(1, %d) g", benchRows),
		"VACUUM ANALYZE items")
	pid := d.pg.PID()
	b.ResetTimer()
	for range b.N {
		r := harness.NewRounds(benchRows)
		r.ServerPID = pid
		for range harness.BenchRounds() {
			if harness.BenchPhase("copy") {
				r.Measure("copy", func() time.Duration { return copyOut(b, d) })
			}
			cfg := d.sourceConfig(map[string]string{"snapshot.mode": "initial_only"})
			if harness.BenchPhase("snapshot") {
				r.Measure("snapshot", func() time.Duration { return sourceDrain(b, cfg, benchRows) })
			}
			if harness.BenchPhase("log") {
				cfg["topic.prefix"] = "snap"
				r.Measure("log", func() time.Duration { return logDrain(b, cfg, "snap.public.items", benchRows) })
			}
		}
		r.Report(b, "copy", "snapshot", "log")
	}
}

// copyOut streams COPY (SELECT * FROM items) TO STDOUT into io.Discard.
func copyOut(b *testing.B, d *database) time.Duration {
	conn, err := pgconn.Connect(context.Background(), d.pg.ConnStringFor(d.pg.User, d.name, false))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.Background())
	t0 := time.Now()
	tag, err := conn.CopyTo(context.Background(), io.Discard, "COPY (SELECT * FROM items) TO STDOUT")
	took := time.Since(t0)
	if err != nil || tag.RowsAffected() != benchRows {
		b.Fatalf("copy: %v (%d rows)", err, tag.RowsAffected())
	}
	return took
}

// walOpts returns the log options of the benchmark: the default fsync, or no fsync with
// SLUICE_BENCH_NOSYNC=1 (to see how much of the time into the log is the wait for the disk).
func walOpts() wal.Options {
	if os.Getenv("SLUICE_BENCH_NOSYNC") == "1" {
		return wal.Options{Fsync: wal.UnsafeFsyncNever}
	}
	return wal.Options{}
}
