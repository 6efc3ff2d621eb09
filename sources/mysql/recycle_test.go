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
		var out []string
		var pending []connect.Batch
		route := func(b connect.Batch) {
			for _, r := range b.Records {
				out = append(out, render(r))
			}
			if b.Release != nil {
				b.Release()
			}
		}
		released := 0
		for src.phase != phaseIdle {
			b, err := src.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if lag == 0 {
				for _, r := range b.Records {
					out = append(out, render(r))
				}
				continue
			}
			if b.Release != nil {
				released++
			}
			pending = append(pending, b)
			if len(pending) > lag {
				route(pending[0])
				pending = pending[1:]
			}
		}
		for _, b := range pending {
			route(b)
		}
		if lag > 0 && released < 2*lag {
			t.Fatalf("%d batches had a Release, want at least %d", released, 2*lag)
		}
		return out
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

// The recycler keeps standard slabs only, and at most maxPooled of a kind: slabs made for
// large values (or large batches) go back to the collector, so that what it holds stays small
// whatever a table's values were.
func TestRecyclerKeepsStandardSlabs(t *testing.T) {
	rc := &recycler{}
	var g generation
	for range maxPooled + 10 {
		g.bytes = append(g.bytes, make([]byte, 0, bytesSlab), make([]byte, 0, 4<<20))
		g.fields = append(g.fields, make([]connect.Field, maxFieldSlab), make([]connect.Field, 4*maxFieldSlab))
	}
	g.recs = make([]connect.Record, 0, maxPooledRecords+1)
	rc.release(&g)
	for kind, free := range map[string][]int{"bytes": caps(rc.bytes.free), "fields": caps(rc.fields.free), "records": caps(rc.recs.free)} {
		limit := map[string]int{"bytes": bytesSlab, "fields": maxFieldSlab, "records": maxPooledRecords}[kind]
		want := map[string]int{"bytes": maxPooled, "fields": maxPooled, "records": 0}[kind]
		if len(free) != want {
			t.Errorf("%s: %d slabs kept, want %d", kind, len(free), want)
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
