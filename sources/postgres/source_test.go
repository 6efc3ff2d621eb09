package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/connect"
)

// A snapshot of existing rows, then inserts, updates (also of the key), deletes and a
// truncate from the stream: the records, their keys, ops, source blocks and positions.
func TestSnapshotThenStream(t *testing.T) {
	for _, proto := range []string{"1", "2"} {
		t.Run("proto"+proto, func(t *testing.T) {
			db := newDB(t, sharedPG(t))
			db.exec(t,
				"CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, s text)",
				"INSERT INTO items SELECT g, g * 10, 'row ' || g FROM generate_series(1, 5) g",
			)
			src := openSource(t, db.config(map[string]string{KeyProtocolVersion: proto, KeySnapshotFetchSize: "2"}), connect.Position{})
			log := newMemLog()
			readUntil(t, src, log, true, 30*time.Second, func() bool { return len(log.records) >= 5 })
			recs, _ := log.snapshot()
			for i, r := range recs {
				ev := eventOf(t, r)
				if ev.Op != connect.OpRead || r.Topic != "srv.public.items" {
					t.Fatalf("record %d: op %v topic %s", i, ev.Op, r.Topic)
				}
				snap, _ := ev.Source.Get("snapshot")
				want := "true"
				if i == 4 {
					want = "last"
				}
				if snap != want {
					t.Errorf("record %d: source.snapshot = %v, want %s", i, snap, want)
				}
				if got, want := jsonOf(t, r.Key), fmt.Sprintf(`{"id":%d}`, i+1); got != want {
					t.Errorf("record %d key = %s, want %s", i, got, want)
				}
			}
			if got, want := jsonOf(t, eventOf(t, recs[2]).After), `{"id":3,"v":30,"s":"row 3"}`; got != want {
				t.Errorf("after = %s, want %s", got, want)
			}

			db.exec(t,
				"INSERT INTO items VALUES (6, 60, 'six')",
				"UPDATE items SET v = 31 WHERE id = 3",
				"UPDATE items SET id = 7 WHERE id = 4",
				"DELETE FROM items WHERE id = 1",
				"BEGIN; INSERT INTO items VALUES (8, 80, NULL); UPDATE items SET s = 'eight' WHERE id = 8; COMMIT",
			)
			readUntil(t, src, log, true, 30*time.Second, func() bool { return len(log.records) >= 5+9 })
			recs, _ = log.snapshot()
			var got []string
			for _, r := range recs[5:] {
				if r.Value == nil {
					got = append(got, "tombstone "+jsonOf(t, r.Key))
					continue
				}
				ev := eventOf(t, r)
				got = append(got, fmt.Sprintf("%s %s before=%s after=%s", ev.Op, jsonOf(t, r.Key), jsonOf(t, ev.Before), jsonOf(t, ev.After)))
			}
			want := []string{
				`c {"id":6} before=null after={"id":6,"v":60,"s":"six"}`,
				`u {"id":3} before=null after={"id":3,"v":31,"s":"row 3"}`,
				`d {"id":4} before={"id":4,"v":null,"s":null} after=null`,
				`tombstone {"id":4}`,
				`c {"id":7} before=null after={"id":7,"v":40,"s":"row 4"}`,
				`d {"id":1} before={"id":1,"v":null,"s":null} after=null`,
				`tombstone {"id":1}`,
				`c {"id":8} before=null after={"id":8,"v":80,"s":null}`,
				`u {"id":8} before=null after={"id":8,"v":80,"s":"eight"}`,
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("stream records (-want +got):\n%s", diff)
			}
			if diff := diffStates(tableState(t, db, "items"), fold(t, recs, "srv.public.items")); diff != "" {
				t.Fatalf("derived state differs from the table:\n%s", diff)
			}

			// source block of a streamed change
			ev := eventOf(t, recs[5])
			names := strings.Join(ev.Source.Names(), ",")
			if names != "version,connector,name,ts_ms,snapshot,db,sequence,schema,table,txId,lsn,xmin" {
				t.Errorf("source fields = %s", names)
			}
			for _, f := range []struct {
				name string
				want any
			}{{"connector", "postgresql"}, {"name", "srv"}, {"snapshot", "false"}, {"db", db.name}, {"schema", "public"}, {"table", "items"}} {
				if v, _ := ev.Source.Get(f.name); v != f.want {
					t.Errorf("source.%s = %v, want %v", f.name, v, f.want)
				}
			}
			// the two changes of one transaction share the version, which is its commit LSN
			if recs[12].Version != recs[13].Version || recs[12].Version <= recs[11].Version {
				t.Errorf("versions %d %d %d: want the last two equal and above the one before", recs[11].Version, recs[12].Version, recs[13].Version)
			}

			db.exec(t, "TRUNCATE items")
			readUntil(t, src, log, true, 30*time.Second, func() bool { return len(log.records) >= 15 })
			recs, _ = log.snapshot()
			if ev := eventOf(t, recs[14]); ev.Op != connect.OpTruncate || recs[14].Key != nil {
				t.Fatalf("truncate record: op %v key %v", ev.Op, recs[14].Key)
			}
		})
	}
}

// A Read cancelled by its context during the snapshot loses no row: the next Read goes on right
// after the last batch returned, with the row held back for the next batch and the rows the
// cancelled Read had taken from the chunk query.
func TestSnapshotCancelledReadLosesNoRow(t *testing.T) {
	db := newDB(t, sharedPG(t))
	db.exec(t, "CREATE TABLE a (id int PRIMARY KEY, v int)", "INSERT INTO a SELECT g, g FROM generate_series(1, 300) g")
	src := openSource(t, db.config(map[string]string{KeySnapshotMode: SnapshotInitialOnly, KeyMaxBatchSize: "10", KeySnapshotFetchSize: "1000"}), connect.Position{})
	ctx := testCtx(t)
	var ids []int64
	read := func(ctx context.Context) error {
		b, err := src.Read(ctx)
		for _, r := range b.Records {
			ids = append(ids, keyOf(t, r)[0].Value.(int64))
		}
		return err
	}
	if err := read(ctx); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := read(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Read: %v, want %v", err, context.Canceled)
	}
	for src.phase != phaseDone {
		if err := read(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range ids {
		if id != int64(i+1) {
			t.Fatalf("record %d is row %d, want row %d (rows %v...)", i, id, i+1, ids[:min(len(ids), i+3)])
		}
	}
	if len(ids) != 300 {
		t.Fatalf("%d rows, want 300", len(ids))
	}
}
