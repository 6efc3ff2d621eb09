package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
)

// openErr opens a source and returns Open's error.
func openErr(t *testing.T, cfg map[string]string, after connect.Position) error {
	t.Helper()
	src, err := NewFromConfig(cfg, connect.Env{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	err = src.Open(testCtx(t), after)
	_ = src.Close(context.Background())
	return err
}

// A server that is not set up for logical decoding: every problem at once, each with the
// statement that fixes it.
func TestPreflightServerSettings(t *testing.T) {
	pg := harness.NewPostgres(t, harness.PostgresOptions{Settings: []string{
		"wal_level = replica", "max_wal_senders = 0", "max_replication_slots = 0",
	}})
	db := newDB(t, pg)
	db.exec(t, "CREATE TABLE t (id int PRIMARY KEY)")
	err := openErr(t, db.config(nil), connect.Position{})
	want := "postgres source pre-flight failed:\n" +
		"  - wal_level is replica, logical decoding needs logical: run ALTER SYSTEM SET wal_level = logical; then restart the server\n" +
		"  - all 0 replication slots are in use (max_replication_slots = 0): run ALTER SYSTEM SET max_replication_slots = 1; then restart the server, or drop an unused slot\n" +
		"  - all 0 WAL senders are in use (max_wal_senders = 0): run ALTER SYSTEM SET max_wal_senders = 1; then restart the server"
	if err == nil || err.Error() != want || !connect.IsPermanent(err) {
		t.Fatalf("open error:\n got %v\nwant %s", err, want)
	}
	// initial_only needs no slot: it reads the tables and is done
	db.exec(t, "INSERT INTO t VALUES (1), (2)")
	src := openSource(t, db.config(map[string]string{KeySnapshotMode: SnapshotInitialOnly}), connect.Position{})
	log := newMemLog()
	readUntil(t, src, log, false, 30*time.Second, func() bool { return src.Stats().SnapshotCompleted })
	if got := countOps(t, log.records, "srv.public.t"); got["r"] != 2 || len(got) != 1 {
		t.Fatalf("initial_only records %v, want 2 reads", got)
	}
}

// A role without REPLICATION and without read access, and a table without a key: the
// GRANT, ALTER ROLE and ALTER TABLE to run.
func TestPreflightRoleAndTables(t *testing.T) {
	db := newDB(t, sharedPG(t))
	role := "r_" + db.name
	db.exec(t,
		"CREATE SCHEMA app",
		"CREATE TABLE app.orders (id int PRIMARY KEY)",
		"CREATE TABLE public.items (id int PRIMARY KEY)",
		"CREATE TABLE public.events (at timestamptz, msg text)",
		"CREATE TABLE public.logs (at timestamptz, msg text)",
		"ALTER TABLE public.logs REPLICA IDENTITY FULL",
		"CREATE ROLE "+role+" LOGIN",
		"GRANT SELECT ON public.items, public.logs TO "+role,
		"CREATE PUBLICATION "+db.pub+" FOR ALL TABLES",
	)
	t.Cleanup(func() { _ = db.pg.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) })
	err := openErr(t, db.config(map[string]string{KeyUser: role}), connect.Position{})
	want := "postgres source pre-flight failed:\n" +
		fmt.Sprintf("  - role %s lacks the REPLICATION attribute: run ALTER ROLE %q WITH REPLICATION;\n", role, role) +
		fmt.Sprintf("  - role %s cannot use schema app: run GRANT USAGE ON SCHEMA \"app\" TO %q;\n", role, role) +
		fmt.Sprintf("  - role %s cannot read table public.events: run GRANT SELECT ON \"public\".\"events\" TO %q;\n", role, role) +
		"  - table public.events has no primary key and REPLICA IDENTITY DEFAULT: its updates and deletes would carry no key " +
		"(and PostgreSQL rejects them once the table is in a publication): run ALTER TABLE \"public\".\"events\" REPLICA IDENTITY FULL; or add a primary key"
	if err == nil || err.Error() != want || !connect.IsPermanent(err) {
		t.Fatalf("open error:\n got %v\nwant %s", err, want)
	}

	// the fixes make it pass
	db.exec(t,
		"ALTER ROLE "+role+" WITH REPLICATION",
		"GRANT USAGE ON SCHEMA app TO "+role,
		"GRANT SELECT ON app.orders, public.events TO "+role,
		"ALTER TABLE public.events REPLICA IDENTITY FULL",
	)
	if err := openErr(t, db.config(map[string]string{KeyUser: role}), connect.Position{}); err != nil {
		t.Fatalf("after the fixes: %v", err)
	}
}

// A missing publication with autocreate disabled, one that lacks a captured table, and an
// all-tables publication that cannot be created because a table has no key.
func TestPreflightPublication(t *testing.T) {
	db := newDB(t, sharedPG(t))
	db.exec(t, "CREATE TABLE a (id int PRIMARY KEY)", "CREATE TABLE b (id int PRIMARY KEY)", "CREATE TABLE nokey (x int)")
	cfg := db.config(map[string]string{KeyPublicationMode: PublicationDisabled, KeyTableInclude: `public\.(a|b)`})
	err := openErr(t, cfg, connect.Position{})
	want := fmt.Sprintf(`publication %s does not exist and publication.autocreate.mode is disabled: create it, e.g. CREATE PUBLICATION %q FOR ALL TABLES; `+
		`or CREATE PUBLICATION %q FOR TABLE "public"."a", "public"."b";`, db.pub, db.pub, db.pub)
	if err == nil || err.Error() != want || !connect.IsPermanent(err) {
		t.Fatalf("open error:\n got %v\nwant %s", err, want)
	}
	db.exec(t, "CREATE PUBLICATION "+db.pub+" FOR TABLE a")
	err = openErr(t, cfg, connect.Position{})
	want = fmt.Sprintf(`publication %s does not publish "public"."b": run ALTER PUBLICATION %q ADD TABLE "public"."b";`, db.pub, db.pub)
	if err == nil || err.Error() != want {
		t.Fatalf("open error:\n got %v\nwant %s", err, want)
	}
	// filtered mode sets the publication's tables itself
	cfg[KeyPublicationMode] = PublicationFiltered
	if err := openErr(t, cfg, connect.Position{}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.conn.QueryRow(testCtx(t), "SELECT count(*) FROM pg_publication_tables WHERE pubname = $1", db.pub).Scan(&n); err != nil || n != 2 {
		t.Fatalf("publication has %d tables (%v), want 2", n, err)
	}

	db.exec(t, "DROP PUBLICATION "+db.pub)
	err = openErr(t, db.config(map[string]string{KeyTableInclude: `public\.a`, KeySlotName: db.slot + "_x"}), connect.Position{})
	want = fmt.Sprintf(`CREATE PUBLICATION %q FOR ALL TABLES would make PostgreSQL reject updates and deletes of "public"."nokey", which have no `+
		`primary key and no replica identity: run ALTER TABLE ... REPLICA IDENTITY FULL; on them, or set publication.autocreate.mode=filtered `+
		`to publish only the captured tables`, db.pub)
	if err == nil || err.Error() != want {
		t.Fatalf("open error:\n got %v\nwant %s", err, want)
	}
}

// A slot whose WAL the server removed (max_slot_wal_keep_size): wal_status = lost is a lost
// position; when_needed takes a new snapshot.
func TestSlotLostWAL(t *testing.T) {
	pg := harness.NewPostgres(t, harness.PostgresOptions{Settings: []string{"max_slot_wal_keep_size = 1MB", "min_wal_size = 32MB", "max_wal_size = 64MB"}})
	db := newDB(t, pg)
	db.exec(t, "CREATE TABLE t (id int PRIMARY KEY, pad text)", "INSERT INTO t VALUES (1, 'x')")
	cfg := db.config(nil)
	src := openSource(t, cfg, connect.Position{})
	log := newMemLog()
	readUntil(t, src, log, true, 30*time.Second, func() bool { return len(log.records) >= 1 && src.Stats().SnapshotCompleted })
	_ = src.Close(context.Background())
	_, pos := log.snapshot()
	// write WAL past the limit and let checkpoints remove it
	for i := 0; i < 6 && slotStatus(t, db) != "lost"; i++ {
		db.exec(t, "INSERT INTO t SELECT g, repeat(md5(g::text), 8) FROM generate_series("+strconv.Itoa(i*100000+2)+", "+strconv.Itoa(i*100000+100001)+") g", "CHECKPOINT")
	}
	if st := slotStatus(t, db); st != "lost" {
		t.Fatalf("wal_status = %s, want lost", st)
	}
	err := openErr(t, cfg, pos)
	if err == nil || !connect.IsPermanent(err) || !strings.Contains(err.Error(), "has lost the WAL the stored position") ||
		!strings.Contains(err.Error(), "set snapshot.mode=when_needed") {
		t.Fatalf("open error %v, want a permanent position-lost error", err)
	}
	cfg[KeySnapshotMode] = SnapshotWhenNeeded
	s2 := openSource(t, cfg, pos)
	readUntil(t, s2, log, true, 60*time.Second, func() bool { return s2.Stats().SnapshotCompleted })
	recs, _ := log.snapshot()
	if diff := diffStates(tableState(t, db, "t"), fold(t, recs, "srv.public.t")); diff != "" {
		t.Fatalf("derived state after the new snapshot:\n%s", diff)
	}
	if st := slotStatus(t, db); st == "lost" {
		t.Fatal("the new slot is lost too")
	}
}

func slotStatus(t *testing.T, db *testDB) string {
	t.Helper()
	var s *string
	if err := db.conn.QueryRow(testCtx(t), "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1", db.slot).Scan(&s); err != nil {
		t.Fatal(err)
	}
	if s == nil {
		return ""
	}
	return *s
}
