package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/sources/postgres"
	"github.com/sluice-cdc/sluice/wal"
	"github.com/sluice-cdc/sluice/wal/vfs"
)

var errPowerLoss = errors.New("power lost during fsync")

// runPipeline runs the runtime with one postgres connector named pg over l until the returned
// stop is called; stop returns Run's error.
func runPipeline(t *testing.T, l *wal.Log, cfg map[string]string) (stop func() error) {
	t.Helper()
	reg, err := connect.NewRegistry(postgres.Plugin())
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(runtime.Options{Log: l, Registry: reg, ShutdownTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Add(runtime.ConnectorSpec{Name: "pg", Class: "postgres", Config: cfg}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

func (d *database) lsn(t testing.TB, query string) pglogrepl.LSN {
	t.Helper()
	var s *string
	if err := d.conn.QueryRow(context.Background(), query, d.slot).Scan(&s); err != nil || s == nil {
		return 0
	}
	lsn, err := pglogrepl.ParseLSN(*s)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

// currentLSN is the server's WAL insert position (the write position may lag it without
// synchronous commits).
func (d *database) currentLSN(t testing.TB) pglogrepl.LSN {
	return d.lsn(t, "SELECT pg_current_wal_insert_lsn()::text WHERE $1::text IS NOT NULL")
}

// receivedLSN is the write position the slot's receiver last reported: what it received.
func (d *database) receivedLSN(t testing.TB) pglogrepl.LSN {
	return d.lsn(t, "SELECT r.write_lsn::text FROM pg_stat_replication r JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = $1")
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSlotNeverPassesTheLog stops the log's fsync path while the source streams: the changes
// written meanwhile are received (the receiver reports them written) but never durable, and
// the slot's confirmed_flush_lsn must not move past what the log durably holds. The power
// is then cut with the fsyncs still held; on the surviving log the committed source position
// is at or after the slot's confirmed_flush_lsn, and a restarted pipeline gets every row
// exactly once.
func TestSlotNeverPassesTheLog(t *testing.T) {
	d := newDatabase(t, server(t))
	d.exec(t, "CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, s text NOT NULL)")
	cfg := d.sourceConfig(map[string]string{
		"snapshot.mode":             "no_data",
		"status.update.interval.ms": "100",
		"offset.flush.interval.ms":  "50",
		"max.batch.size":            "50",
	})
	fs := vfs.NewMem()
	var hold, crashed atomic.Bool
	var held atomic.Int64
	release := make(chan struct{})
	fs.SetSyncError(func(string) error {
		if !hold.Load() {
			return nil
		}
		held.Add(1)
		<-release
		if crashed.Load() {
			return errPowerLoss
		}
		return nil
	})
	l, err := wal.Open("/log", wal.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	stop := runPipeline(t, l, cfg)
	released := false
	defer func() {
		if !released {
			hold.Store(false)
			close(release) // a failed check: let the held fsyncs go so the runtime can stop
		}
		if stop != nil {
			_ = stop()
		}
	}()
	insert := func(from, to int) {
		for i := from; i <= to; i += 50 {
			d.exec(t, fmt.Sprintf("INSERT INTO items SELECT g, g, 'row ' || g FROM generate_series(%d, %d) g", i, i+49))
		}
	}
	waitFor(t, "the slot", 30*time.Second, func() bool { return slotConfirmed(t, d) != 0 })
	insert(1, 500)
	before := d.currentLSN(t)
	waitFor(t, "the slot to confirm the first rows", 30*time.Second, func() bool { return slotConfirmed(t, d) >= before })

	// Every fsync of the log from now on is held.
	hold.Store(true)
	bound := d.currentLSN(t)
	insert(501, 1000)
	after := d.currentLSN(t)
	check := func(when string) pglogrepl.LSN {
		cf := slotConfirmed(t, d)
		if cf > bound {
			t.Fatalf("%s: confirmed_flush_lsn %s passed %s, the WAL end when the log's fsyncs were stopped (changes up to %s written since)", when, cf, bound, after)
		}
		return cf
	}
	waitFor(t, "the source to receive the rows written while fsyncs are held, and the log to fsync", 30*time.Second, func() bool {
		check("while the rows are received")
		return d.receivedLSN(t) >= after && held.Load() > 0
	})
	// Many status intervals: the receiver keeps reporting, the slot must stay put.
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		check("with the log's fsyncs held")
	}

	// Power cut with the fsyncs in flight: only what was durable survives.
	fs.Crash(vfs.CrashOptions{})
	crashed.Store(true)
	close(release)
	released = true
	_ = stop() // the log failed under it
	stop = nil
	_ = l.Close()
	cf := check("after the power cut")
	fs.SetSyncError(nil)
	l, err = wal.Open("/log", wal.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	durable, _ := durableLSN(t, committedStateOf(t, l))
	if cf > durable {
		t.Fatalf("confirmed_flush_lsn %s passed the surviving log's committed position %s", cf, durable)
	}
	if durable >= after {
		t.Fatalf("setup: the log's committed position %s holds the rows written while its fsyncs were held (up to %s)", durable, after)
	}

	// The restarted pipeline resumes from the surviving position: every row once.
	stop = runPipeline(t, l, cfg)
	waitFor(t, "the slot to confirm every row", 60*time.Second, func() bool { return slotConfirmed(t, d) >= after })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	stop = nil
	seen := map[string]int{}
	for _, r := range readTopicOf(t, l, "pg.public.items") {
		if r.value != nil {
			seen[string(r.key)]++
		}
	}
	for i := 1; i <= 1000; i++ {
		if k := fmt.Sprintf(`{"id":%d}`, i); seen[k] != 1 {
			t.Fatalf("row %s is in the log %d times (%d keys in all)", k, seen[k], len(seen))
		}
	}
	if len(seen) != 1000 {
		t.Fatalf("%d keys in the log, want 1000", len(seen))
	}
	t.Logf("slot confirmed %s with fsyncs held (bound %s, rows up to %s); surviving log committed %s", cf, bound, after, durable)
}
