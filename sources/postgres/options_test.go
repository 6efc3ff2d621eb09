package postgres

import (
	"context"
	"testing"

	"github.com/sluice-cdc/sluice/connect"
)

func slotExists(t *testing.T, db *testDB) bool {
	t.Helper()
	var n int
	if err := db.conn.QueryRow(testCtx(t), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", db.slot).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// slot.drop.on.stop: Close drops the slot when set, and keeps it by default (a slot dropped
// on every stop loses the changes made while the connector is down).
func TestSlotDropOnStop(t *testing.T) {
	for _, tc := range []struct {
		value    string
		wantKept bool
	}{{"", true}, {"false", true}, {"true", false}} {
		t.Run("slot.drop.on.stop="+tc.value, func(t *testing.T) {
			db := newDB(t, sharedPG(t))
			db.exec(t, "CREATE TABLE a (id int PRIMARY KEY)")
			src, err := NewFromConfig(db.config(map[string]string{KeySnapshotMode: SnapshotNoData, KeySlotDropOnStop: tc.value}),
				connect.Env{Connector: "test", Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			if err := src.Open(testCtx(t), connect.Position{}); err != nil {
				_ = src.Close(context.Background())
				t.Fatalf("open: %v", err)
			}
			if !slotExists(t, db) {
				t.Fatalf("no slot %s after Open", db.slot)
			}
			if err := src.Close(context.Background()); err != nil {
				t.Fatalf("close: %v", err)
			}
			if got := slotExists(t, db); got != tc.wantKept {
				t.Fatalf("slot %s exists after Close: %v, want %v", db.slot, got, tc.wantKept)
			}
		})
	}
}

// replica.identity.autoset.values: Open sets the replica identity of the captured tables its
// rules match (so a table without a primary key passes the pre-flight check), and leaves the
// others alone.
func TestReplicaIdentityAutoset(t *testing.T) {
	db := newDB(t, sharedPG(t))
	db.exec(t,
		"CREATE TABLE logs (id int, msg text)",
		"CREATE TABLE audit (id int NOT NULL, msg text)",
		"CREATE UNIQUE INDEX audit_pk ON audit (id)",
		"CREATE TABLE plain (id int PRIMARY KEY, msg text)",
	)
	openSource(t, db.config(map[string]string{
		KeySnapshotMode:    SnapshotNoData,
		KeyIdentityAutoset: `public\.logs:FULL, public\.audit:INDEX audit_pk`,
	}), connect.Position{})
	got := map[string]string{}
	rows, err := db.conn.Query(testCtx(t), "SELECT relname, relreplident::text FROM pg_class WHERE relname IN ('logs', 'audit', 'plain')")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, ident string
		if err := rows.Scan(&name, &ident); err != nil {
			t.Fatal(err)
		}
		got[name] = ident
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"logs": "f", "audit": "i", "plain": "d"}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("replica identities %v, want %v (f: FULL, i: INDEX, d: DEFAULT)", got, want)
		}
	}
	var idx string
	if err := db.conn.QueryRow(testCtx(t), "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = 'audit'::regclass AND indisreplident").Scan(&idx); err != nil || idx != "audit_pk" {
		t.Fatalf("replica identity index of audit: %q (%v), want audit_pk", idx, err)
	}
}
