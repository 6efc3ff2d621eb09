package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
)

// TestSnapshotReleasedBatches: a snapshot whose batches are released late, as by a runtime with
// batches in flight, emits the records of one whose batches are never released, while later
// batches are built in the released chunks: the row held back for the next batch keeps its
// batch's chunks until that batch is released too. Two tables, values of every kind the slab
// holds (ints, text short and long, timestamptz, numeric through the decoder). Release runs on
// another goroutine than Read, as on the runtime's router (run with -race), and the released
// memory comes back.
func TestSnapshotReleasedBatches(t *testing.T) {
	db := newDB(t, sharedPG(t))
	db.exec(t,
		"CREATE TABLE a (id int PRIMARY KEY, big bigint NOT NULL, s text, at timestamptz, n numeric(10,2))",
		`INSERT INTO a SELECT g, g::bigint * 1000003, CASE WHEN g % 7 = 3 THEN repeat('long text ', 150) ELSE 'text of row ' || g END,
			'2024-01-01 00:00:00+00'::timestamptz + g * interval '1 minute 1.5 second', g / 7.0 FROM generate_series(1, 2500) g`,
		"CREATE TABLE b (k text PRIMARY KEY, v int)",
		"INSERT INTO b SELECT 'key ' || g, g FROM generate_series(1, 700) g")
	cfg := db.config(map[string]string{KeySnapshotMode: SnapshotInitialOnly, KeyMaxBatchSize: "100", KeySnapshotFetchSize: "400"})
	render := func(r connect.Record) string {
		ev := eventOf(t, r)
		k, _ := connect.AppendJSON(nil, r.Key)
		a, _ := connect.AppendJSON(nil, ev.After)
		return fmt.Sprintf("%s %s %s %s %x", r.Topic, k, a, ev.Op, r.Position.Order)
	}
	// read snapshots both tables; lag > 0 renders and releases each batch lag batches after
	// it was read, lag 0 renders each batch at once and never releases it
	read := func(lag int) []string {
		src := openSource(t, cfg, connect.Position{})
		defer src.Close(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var out []string
		var pending []connect.Batch
		// the runtime keeps positions past Release (a batch's to commit, a record's Order as
		// its partition's floor): their bytes must stay as they were
		type kept struct{ at, was []byte }
		var positions []kept
		keep := func(b connect.Batch) {
			for _, p := range [][]byte{b.Position.Order, b.Position.State} {
				positions = append(positions, kept{p, append([]byte(nil), p...)})
			}
			for _, r := range b.Records {
				positions = append(positions, kept{r.Position.Order, append([]byte(nil), r.Position.Order...)})
			}
		}
		defer func() {
			for i, p := range positions {
				if string(p.at) != string(p.was) {
					t.Fatalf("position bytes %d changed after their batch was released: %x, were %x", i, p.at, p.was)
				}
			}
		}()
		// Release runs on a goroutine of its own, as on the runtime's router, while the next
		// batches are read
		releases := make(chan func(), 1)
		releasing := make(chan struct{})
		go func() {
			defer close(releasing)
			for release := range releases {
				release()
			}
		}()
		stopReleasing := sync.OnceFunc(func() {
			close(releases)
			<-releasing
		})
		defer stopReleasing()
		route := func(b connect.Batch) {
			for _, r := range b.Records {
				out = append(out, render(r))
			}
			if b.Release != nil {
				releases <- b.Release
			}
		}
		released := 0
		var sn *snapshotter
		for src.phase == phaseSnapshotting {
			if sn == nil {
				sn = src.snap
			}
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
			keep(b)
			pending = append(pending, b)
			if len(pending) > lag {
				route(pending[0])
				pending = pending[1:]
			}
		}
		for _, b := range pending {
			route(b)
		}
		stopReleasing()
		if lag > 0 && released < 2*lag {
			t.Fatalf("%d batches had a Release, want at least %d", released, 2*lag)
		}
		if lag > 0 && len(sn.recs.free) == 0 {
			t.Fatal("no released batch's memory came back to the snapshot")
		}
		return out
	}
	want := read(0)
	got := read(3)
	if len(want) != 3200 || len(got) != len(want) {
		t.Fatalf("%d records released late, %d never released, want 3200", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("record %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}
