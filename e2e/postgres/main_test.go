// Package postgres_test holds the end-to-end tests and benchmarks of the PostgreSQL source:
// the real sluice binary against a real PostgreSQL 15, killed with SIGKILL many times, and
// the source's throughput against bare pglogrepl and COPY baselines.
package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/e2e/harness"
	"github.com/sluice-cdc/sluice/wal"
)

var (
	binary   string // the sluice binary built for the tests
	pg       *harness.Postgres
	startErr error
	once     sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if pg != nil {
		if err := pg.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close postgres:", err)
			code = 1
		}
	}
	if binary != "" {
		os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}

// server starts the package's PostgreSQL once (durable settings when durable is set: the
// benchmarks measure a server that fsyncs, like a real one).
func server(t testing.TB) *harness.Postgres {
	t.Helper()
	once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		pg, startErr = harness.StartPostgres(ctx, harness.PostgresOptions{})
	})
	if startErr != nil {
		t.Fatal(startErr)
	}
	return pg
}

var buildOnce sync.Once

// sluiceBinary builds ./cmd/sluice once.
func sluiceBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-e2e-postgres-")
		if err != nil {
			startErr = err
			return
		}
		binary = filepath.Join(dir, "sluice")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/sluice-cdc/sluice/cmd/sluice").CombinedOutput()
		if err != nil {
			startErr = fmt.Errorf("build sluice: %v\n%s", err, out)
		}
	})
	if startErr != nil {
		t.Fatal(startErr)
	}
	return binary
}

// iterations is the number of kills: SLUICE_PG_KILLS, else def (times 10 with SLUICE_SOAK=1).
func iterations(def int) int {
	if v, err := strconv.Atoi(os.Getenv("SLUICE_PG_KILLS")); err == nil && v > 0 {
		return v
	}
	if os.Getenv("SLUICE_SOAK") == "1" {
		return def * 10
	}
	return def
}

var dbSeq atomic.Int64

// database is a fresh database on the server with its own slot name; cleanup drops both.
type database struct {
	pg   *harness.Postgres
	name string
	slot string
	conn *pgx.Conn
}

func newDatabase(t testing.TB, pg *harness.Postgres) *database {
	t.Helper()
	ctx := context.Background()
	n := dbSeq.Add(1)
	d := &database{pg: pg, name: fmt.Sprintf("e%d_%d", os.Getpid(), n), slot: fmt.Sprintf("e%d_%d", os.Getpid(), n)}
	if err := pg.Exec(ctx, "CREATE DATABASE "+d.name); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, pg.ConnStringFor(pg.User, d.name, false))
	if err != nil {
		t.Fatal(err)
	}
	d.conn = c
	t.Cleanup(func() {
		_ = c.Close(context.Background())
		admin, err := pgx.Connect(context.Background(), pg.ConnString())
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer admin.Close(context.Background())
		for i := 0; i < 100; i++ {
			_, _ = admin.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL", d.name)
			if _, err = admin.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1", d.name); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if _, err := admin.Exec(ctx, "DROP DATABASE "+d.name+" WITH (FORCE)"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return d
}

func (d *database) exec(t testing.TB, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := d.conn.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// sourceConfig is the connector configuration for the database.
func (d *database) sourceConfig(extra map[string]string) map[string]string {
	cfg := map[string]string{
		"database.hostname":         d.pg.Host,
		"database.port":             strconv.Itoa(d.pg.Port),
		"database.user":             d.pg.User,
		"database.dbname":           d.name,
		"database.sslmode":          "disable",
		"topic.prefix":              "pg",
		"slot.name":                 d.slot,
		"publication.name":          "sluice_pub",
		"slot.retry.delay.ms":       "200",
		"slot.max.retries":          "50",
		"status.update.interval.ms": "500",
	}
	for k, v := range extra {
		cfg[k] = v
	}
	return cfg
}

// pipeline writes a pipeline file with one postgres connector into dir.
func pipeline(t testing.TB, dir string, cfg map[string]string, partitions int) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "log:\n  dir: %s\n  partitions: %d\n  fsync: always\nrest:\n  listeners: []\nconnectors:\n  - name: pg\n    class: io.debezium.connector.postgresql.PostgresConnector\n    config:\n",
		filepath.Join(dir, "log"), partitions)
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "      %s: %q\n", k, cfg[k])
	}
	path := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// start runs `sluice run -c path` with its output appended to dir/sluice.log.
func start(t testing.TB, dir, path string) *exec.Cmd {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "sluice.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(sluiceBinary(t), "run", "-c", path)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func logTail(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "sluice.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// stopGracefully sends SIGTERM and waits for sluice to exit cleanly.
func stopGracefully(t testing.TB, dir string, cmd *exec.Cmd) {
	t.Helper()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sluice run: %v\n%s", err, logTail(dir))
	}
}

// logRecord is a record read back from the log.
type logRecord struct {
	partition int32
	key       []byte
	value     []byte // nil: tombstone
}

// readTopic returns every record of a topic, partition by partition in offset order (sluice
// must not be running).
func readTopic(t testing.TB, dir, topic string) []logRecord {
	t.Helper()
	l, err := wal.Open(filepath.Join(dir, "log"), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return readTopicOf(t, l, topic)
}

// readTopicOf returns every committed record of a topic of an open log, partition by
// partition in offset order.
func readTopicOf(t testing.TB, l *wal.Log, topic string) []logRecord {
	t.Helper()
	info, err := l.Describe(topic)
	if err != nil {
		return nil
	}
	var out []logRecord
	for p := range info.Partitions {
		end, _ := l.LatestOffset(topic, int32(p))
		start, _ := l.EarliestOffset(topic, int32(p))
		for off := start; off < end; {
			res, err := l.Fetch(context.Background(), topic, int32(p), off, wal.FetchOptions{MaxBytes: 4 << 20})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res.Records {
				lr := logRecord{partition: int32(p), key: append([]byte(nil), r.Key...)}
				if r.Value != nil {
					lr.value = append([]byte(nil), r.Value...)
				}
				out = append(out, lr)
			}
			if res.NextOffset <= off {
				break
			}
			off = res.NextOffset
		}
	}
	return out
}

// committedState returns the state JSON of the connector's committed source position.
func committedState(t testing.TB, dir string) map[string]any {
	t.Helper()
	l, err := wal.Open(filepath.Join(dir, "log"), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return committedStateOf(t, l)
}

// committedStateOf returns the state JSON of connector pg's committed source position in an
// open log (nil if there is none).
func committedStateOf(t testing.TB, l *wal.Log) map[string]any {
	t.Helper()
	info, err := l.Describe(runtime.SourceOffsetsTopic)
	if err != nil {
		return nil
	}
	var last []byte
	for p := range info.Partitions {
		end, _ := l.LatestOffset(runtime.SourceOffsetsTopic, int32(p))
		start, _ := l.EarliestOffset(runtime.SourceOffsetsTopic, int32(p))
		for off := start; off < end; {
			res, err := l.Fetch(context.Background(), runtime.SourceOffsetsTopic, int32(p), off, wal.FetchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res.Records {
				if string(r.Key) == "pg" {
					last = append([]byte(nil), r.Value...)
				}
			}
			if res.NextOffset <= off {
				break
			}
			off = res.NextOffset
		}
	}
	if last == nil {
		return nil
	}
	var pos connect.Position
	if err := pos.UnmarshalBinary(last); err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(pos.State, &st); err != nil {
		t.Fatalf("position state %s: %v", pos.State, err)
	}
	return st
}

// durableLSN is the LSN up to which the committed position says the log holds every
// change: the slot must never confirm past it.
func durableLSN(t testing.TB, st map[string]any) (pglogrepl.LSN, bool) {
	t.Helper()
	if st == nil {
		return 0, false
	}
	field := func(m map[string]any, k string) pglogrepl.LSN {
		s, _ := m[k].(string)
		if s == "" {
			return 0
		}
		lsn, err := pglogrepl.ParseLSN(s)
		if err != nil {
			t.Fatalf("position %v: %v", st, err)
		}
		return lsn
	}
	if snap, ok := st["snapshot"].(map[string]any); ok {
		return field(snap, "lsn"), true
	}
	if end := field(st, "end"); end != 0 {
		return end, false
	}
	return field(st, "lsn"), false
}

func slotConfirmed(t testing.TB, d *database) pglogrepl.LSN {
	t.Helper()
	var s *string
	err := d.conn.QueryRow(context.Background(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", d.slot).Scan(&s)
	if err == pgx.ErrNoRows || s == nil {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	lsn, _ := pglogrepl.ParseLSN(*s)
	return lsn
}
