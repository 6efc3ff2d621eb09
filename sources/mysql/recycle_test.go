package mysql

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
)

// TestSnapshotReleasedBatches: a snapshot read through Source.Read whose batches are released
// late, as by a runtime with batches in flight, emits the records a snapshot whose batches are
// never released does, also once the converters build later batches in the released memory
// while earlier ones are still read. Every recycled kind of memory is in use: fields and rows,
// boxed ints (above the shared table), strings and their fetched text, and the string data of
// TIMESTAMP values.
func TestSnapshotReleasedBatches(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	stmts := []string{"USE " + quoteName(db),
		"CREATE TABLE t (id INT PRIMARY KEY, big BIGINT NOT NULL, s VARCHAR(64), ts TIMESTAMP(3) NULL, d DECIMAL(10,2))"}
	var rows []string
	for i := 1; i <= 3000; i++ {
		rows = append(rows, fmt.Sprintf("(%d, %d, 'text of row %d', '2024-01-%02d 10:%02d:%02d.%03d', %d.%02d)",
			i, int64(i)*1_000_003, i, 1+i%28, i%60, i/60%60, i%1000, i, i%100))
	}
	stmts = append(stmts, "INSERT INTO t VALUES "+strings.Join(rows, ","))
	exec(t, m, stmts...)
	cfg := baseConfig(m, db, map[string]string{KeySnapshotMode: SnapshotInitialOnly, KeySnapshotLocking: "none",
		KeySnapshotFetchSize: "400", KeyMaxBatchSize: "100"})

	// render is what must not change: key, after image, op, snapshot flag and position
	render := func(r connect.Record) string {
		ev := event(t, r)
		k, _ := connect.AppendJSON(nil, r.Key)
		a, _ := connect.AppendJSON(nil, ev.After)
		flag, _ := ev.Source.Get("snapshot")
		return fmt.Sprintf("%s %s %s %s %v %x %s", r.Topic, k, a, ev.Op, flag, r.Position.Order, r.Position.State)
	}
	// read snapshots the table; lag > 0 renders and releases each batch lag batches after it
	// was read (more than the batches the converters may hold converted), lag 0 renders each
	// batch at once and never releases it
	read := func(lag int) []string {
		src := newSource(t, cfg, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := src.Open(ctx, connect.Position{}); err != nil {
			t.Fatal(err)
		}
		defer src.Close(ctx)
		l := &lateRelease{lag: lag, render: render}
		for src.phase != phaseIdle {
			b, err := src.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			l.add(b)
		}
		if lag > 0 && l.released < 2*lag {
			t.Fatalf("%d batches had a Release, want at least %d", l.released, 2*lag)
		}
		return l.finish()
	}
	want := read(0)
	got := read(12)
	if len(want) != 3000 || len(got) != len(want) {
		t.Fatalf("%d records released late, %d never released, want 3000", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("record %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}

// The recycler keeps standard slabs only, and at most maxPooled of a kind (keepBytes byte slabs
// when set, as the snapshot's): slabs made for large values (or large batches) go back to the
// collector, so that what it holds stays small whatever a table's values were.
func TestRecyclerKeepsStandardSlabs(t *testing.T) {
	for _, keep := range []int{0, 4 * maxPooled} {
		testRecyclerKeeps(t, keep)
	}
}

func testRecyclerKeeps(t *testing.T, keep int) {
	rc := &recycler{keepBytes: keep}
	var g generation
	for range 4*maxPooled + 10 {
		g.bytes = append(g.bytes, make([]byte, 0, bytesSlab), make([]byte, 0, 4<<20))
		g.fields = append(g.fields, make([]connect.Field, maxFieldSlab), make([]connect.Field, 4*maxFieldSlab))
	}
	g.recs = make([]connect.Record, 0, maxPooledRecords+1)
	rc.release(&g)
	for kind, free := range map[string][]int{"bytes": caps(rc.bytes.free), "fields": caps(rc.fields.free), "records": caps(rc.recs.free)} {
		limit := map[string]int{"bytes": bytesSlab, "fields": maxFieldSlab, "records": maxPooledRecords}[kind]
		want := map[string]int{"bytes": max(keep, maxPooled), "fields": maxPooled, "records": 0}[kind]
		if len(free) != want {
			t.Errorf("keepBytes %d: %s: %d slabs kept, want %d", keep, kind, len(free), want)
		}
		for _, c := range free {
			if c > limit {
				t.Errorf("%s: a slab of %d kept, more than %d", kind, c, limit)
			}
		}
	}
}

func caps[T any](slabs [][]T) []int {
	var out []int
	for _, s := range slabs {
		out = append(out, cap(s))
	}
	return out
}

// TestStreamReleasedBatches: the binlog stream read through Source.Read, its batches released
// late as by a runtime with batches in flight, emits the records of a stream whose batches are
// never released. Rows events hold more rows than a batch (the rest of an event goes on in the
// next batch's memory), updates change some keys (a delete, its tombstone and a create),
// deletes have tombstones, and a DDL comes between; the released memory comes back.
func TestStreamReleasedBatches(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	q := quoteName(db)
	exec(t, m, "CREATE TABLE "+q+".t (id INT PRIMARY KEY, big BIGINT NOT NULL, s VARCHAR(64), ts TIMESTAMP(3) NULL, d DECIMAL(10,2))")
	cfg := func() map[string]string { // each reader with a server id of its own
		return baseConfig(m, db, map[string]string{KeySnapshotMode: SnapshotNoData, KeyHeartbeatInterval: "100", KeyMaxBatchSize: "40"})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// both start at the binlog head before the changes
	never, late := newSource(t, cfg(), nil), newSource(t, cfg(), nil)
	for _, src := range []*Source{never, late} {
		if err := src.Open(ctx, connect.Position{}); err != nil {
			t.Fatal(err)
		}
		defer src.Close(context.Background())
	}
	exec(t, m, "USE "+q,
		"INSERT INTO t SELECT seq, seq * 1000003, CONCAT('text of row ', seq), "+
			"TIMESTAMP('2024-01-01 00:00:00.123') + INTERVAL seq SECOND, seq / 7 FROM seq_1_to_3000",
		"UPDATE t SET big = big + 1, s = CONCAT(s, ' updated') WHERE id % 2 = 0",
		"UPDATE t SET id = id + 100000 WHERE id % 5 = 0",
		"ALTER TABLE t ADD COLUMN x INT NOT NULL DEFAULT 7",
		"DELETE FROM t WHERE id % 3 = 0",
		"UPDATE t SET x = id WHERE id % 4 = 1")
	headFile, headPos := binlogHeadOf(t, m)
	headSeq, _ := fileSeq(headFile)

	// render is what must not change: topic, key, the change event but its processing time
	// ts_ms, and the position
	render := func(r connect.Record) string {
		k, _ := connect.AppendJSON(nil, r.Key)
		v := "tombstone"
		if r.Value != nil && r.Topic != "test" {
			ev := event(t, r)
			j, _ := connect.AppendJSON(nil, []any{ev.Before, ev.After, ev.Source, string(ev.Op)})
			v = string(j)
		} else if r.Value != nil {
			v = "schema change"
		}
		return fmt.Sprintf("%s %s %s %x %s", r.Topic, k, v, r.Position.Order, r.Position.State)
	}
	// read streams up to the head; lag > 0 renders and releases each batch lag batches after
	// it was read, lag 0 renders each batch at once and never releases it
	read := func(src *Source, lag int) []string {
		l := &lateRelease{lag: lag, render: render}
		for {
			b, err := src.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Records) == 0 {
				st, err := parseState(b.Position.State)
				if err == nil && st.Snapshot == nil {
					if seq, _ := fileSeq(st.File); seq > headSeq || seq == headSeq && uint64(st.Pos) >= headPos {
						break
					}
				}
				continue
			}
			l.add(b)
		}
		if lag > 0 && l.released < 100 {
			t.Fatalf("%d batches had a Release, want at least 100", l.released)
		}
		return l.finish()
	}
	want := read(never, 0)
	got := read(late, 3)
	// 3000 inserts, 1500 updates, 600 key changes (delete, tombstone, create), a schema
	// change, 1000 deletes with tombstones, 500 updates
	if n := 3000 + 1500 + 3*600 + 1 + 2*1000 + 500; len(want) != n || len(got) != n {
		t.Fatalf("%d records released late, %d never released, want %d", len(got), len(want), n)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("record %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
	rc := late.strm.rc
	rc.fields.mu.Lock()
	defer rc.fields.mu.Unlock()
	if len(rc.fields.free) == 0 {
		t.Fatal("no field slab came back to the stream's recycler")
	}
}

// A recycled field slab holds a released batch's fields: take hands out zero fields all the
// same, as from a fresh slab (a field left unset must not show, or keep alive, a value of an
// earlier batch).
func TestFieldArenaClearsRecycledSlabs(t *testing.T) {
	rc := &recycler{}
	a := fieldArena{rc: rc}
	var bx boxer
	var firstSlab *connect.Field
	for batch := range 3 {
		a.reset()
		for i := range 100 {
			r := a.take(7)
			for j := range r {
				if r[j].Name != "" || r[j].Value != nil {
					t.Fatalf("batch %d, take %d: field %d is %v, want a zero field", batch, i, j, r[j])
				}
				r[j] = connect.Field{Name: "f", Value: int64(batch*1000 + i)}
			}
			if i == 0 && batch == 0 {
				firstSlab = &r[0]
			} else if i == 0 && &r[0] != firstSlab {
				t.Fatalf("batch %d is not in the released batch's slab", batch)
			}
		}
		rc.batch(&a, &bx, nil, nil)()
	}
}

// lateRelease renders the records of batches and releases each batch lag batches after it came,
// as a runtime with batches in flight does; with lag 0 it renders each batch at once and never
// releases it.
type lateRelease struct {
	lag      int
	render   func(connect.Record) string
	out      []string
	pending  []connect.Batch
	released int // batches that came with a Release
}

func (l *lateRelease) add(b connect.Batch) {
	if l.lag == 0 {
		l.route(b, false)
		return
	}
	if b.Release != nil {
		l.released++
	}
	l.pending = append(l.pending, b)
	if len(l.pending) > l.lag {
		l.route(l.pending[0], true)
		l.pending = l.pending[1:]
	}
}

func (l *lateRelease) route(b connect.Batch, release bool) {
	for _, r := range b.Records {
		l.out = append(l.out, l.render(r))
	}
	if release && b.Release != nil {
		b.Release()
	}
}

// finish routes the batches still pending and returns the renderings of all.
func (l *lateRelease) finish() []string {
	for _, b := range l.pending {
		l.route(b, true)
	}
	l.pending = nil
	return l.out
}
