package postgres

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/sluice-cdc/sluice/connect"
)

// TestCheckPosition: the offsets API's check of a position against the replication slot.
// Accepted: the slot's confirmed_flush_lsn, a later LSN the server has written, a transaction's
// commit LSN with an end, a snapshot streaming from the slot's point. Refused, each with the
// message the user sees: an LSN before confirmed_flush_lsn (as "lsn" and as "end", and a
// snapshot's), an LSN past the server's WAL end, a missing slot. The check moves no slot and
// leaves no connection behind.
func TestCheckPosition(t *testing.T) {
	pg := sharedPG(t)
	db := newDB(t, pg)
	ctx := testCtx(t)
	db.exec(t, "SELECT pg_create_logical_replication_slot('"+db.slot+"', 'pgoutput')")
	before := slotLSN(t, db)
	db.exec(t, "CREATE TABLE t (id int PRIMARY KEY, v int)", "INSERT INTO t SELECT g, g FROM generate_series(1, 100) g")
	// the slot advances up to what is flushed (commits need not wait for it here)
	confirmed := before
	for deadline := time.Now().Add(10 * time.Second); confirmed <= before; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the slot did not advance from %s", before)
		}
		db.exec(t, "SELECT pg_replication_slot_advance('"+db.slot+"', pg_current_wal_lsn())")
		confirmed = slotLSN(t, db)
	}
	db.exec(t, "INSERT INTO t VALUES (101, 101)")
	written := currentLSN(t, db)

	src, err := NewFromConfig(db.config(nil), connect.Env{Connector: "test", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	stream := func(lsn, end pglogrepl.LSN) string {
		st := fmt.Sprintf(`{"v":1,"epoch":0,"lsn":%q,"change":2,"record":1}`, lsn)
		if end != 0 {
			st = fmt.Sprintf(`{"v":1,"epoch":0,"lsn":%q,"change":0,"record":0,"end":%q}`, lsn, end)
		}
		return st
	}
	snap := func(lsn pglogrepl.LSN) string {
		return fmt.Sprintf(`{"v":1,"epoch":0,"snapshot":{"lsn":%q,"schema":"public","table":"t","table_index":0,"rows":10,"key":["10"]}}`, lsn)
	}
	check := func(src *Source, st string) error {
		t.Helper()
		return src.CheckPosition(ctx, connect.Position{State: []byte(st)})
	}
	accept := func(st string) {
		t.Helper()
		if err := check(src, st); err != nil {
			t.Errorf("CheckPosition(%s): %v", st, err)
		}
	}
	refuse := func(src *Source, st, want string) {
		t.Helper()
		err := check(src, st)
		if err == nil || err.Error() != want {
			t.Errorf("CheckPosition(%s) = %v\nwant %s", st, err, want)
		}
	}

	accept(stream(confirmed, confirmed))
	accept(stream(confirmed, 0))
	accept(stream(written, 0))
	accept(stream(before, written))
	accept(snap(confirmed))

	refuse(src, stream(before, 0), fmt.Sprintf("the position resumes at %s, before replication slot %q's confirmed_flush_lsn %s: the slot does not send again what was confirmed; give a position at or after %s, or reset the offsets (a new snapshot)", before, db.slot, confirmed, confirmed))
	refuse(src, stream(before, before), fmt.Sprintf("the position resumes at %s, before replication slot %q's confirmed_flush_lsn %s: the slot does not send again what was confirmed; give a position at or after %s, or reset the offsets (a new snapshot)", before, db.slot, confirmed, confirmed))
	refuse(src, snap(before), fmt.Sprintf("the position streams from %s, before replication slot %q's confirmed_flush_lsn %s: the slot does not send again what was confirmed; give a position at or after %s, or reset the offsets (a new snapshot)", before, db.slot, confirmed, confirmed))
	// the WAL end moves with every write on the shared server: the message names the one read
	ahead := written + 1<<30
	prefix := fmt.Sprintf("the position resumes at %s, past the server's WAL end ", ahead)
	const suffix = ": give a position the server has written"
	if err := check(src, stream(ahead, 0)); err == nil || !strings.HasPrefix(err.Error(), prefix) || !strings.HasSuffix(err.Error(), suffix) {
		t.Errorf("CheckPosition of %s, past the WAL end = %v\nwant %s<WAL end>%s", ahead, err, prefix, suffix)
	} else if end, perr := pglogrepl.ParseLSN(strings.TrimSuffix(strings.TrimPrefix(err.Error(), prefix), suffix)); perr != nil || end < written || end >= ahead {
		t.Errorf("the WAL end named is not between %s and %s: %v", written, ahead, err)
	}

	other := db.config(map[string]string{KeySlotName: "no_such_slot"})
	osrc, err := NewFromConfig(other, connect.Env{Connector: "test", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	refuse(osrc, stream(confirmed, 0), fmt.Sprintf(`replication slot "no_such_slot" does not exist, and the position (it resumes at %s) needs it: the changes after it are not kept without the slot (started with this offset, the connector fails, or with snapshot.mode=when_needed takes a new snapshot); reset the offsets to start over (a new slot and a new snapshot)`, confirmed))

	// nothing changed on the server: the slot is where it was, no slot was made, no
	// connection is left
	if got := slotLSN(t, db); got != confirmed {
		t.Errorf("slot moved from %s to %s", confirmed, got)
	}
	var slots int
	var conns []string
	if err := db.conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE database = $1", db.name).Scan(&slots); err != nil {
		t.Fatal(err)
	}
	// a backend exits shortly after its client hung up: wait for that, a leaked one stays
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err := db.conn.QueryRow(ctx, "SELECT coalesce(array_agg(backend_type || ' ' || coalesce(usename, '') || ' ' || application_name), '{}') FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", db.name).Scan(&conns); err != nil {
			t.Fatal(err)
		}
		if len(conns) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if slots != 1 || len(conns) != 0 {
		t.Errorf("after the checks: %d slots (want 1), other connections %q (want none)", slots, conns)
	}
}
