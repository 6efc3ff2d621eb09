package datagen

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/connect"
)

func settings(t *testing.T, raw map[string]string) Settings {
	t.Helper()
	cfg, errs := Plugin().ParseConfig(raw)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return SettingsFrom(cfg)
}

// Every key goes through insert, update, update, delete (+ tombstone), with images that chain:
// each before image is the previous after image.
func TestEventsCycleAndChain(t *testing.T) {
	s := settings(t, map[string]string{"datagen.keys": "7"})
	last := map[string]connect.Row{}
	ops := map[string][]string{}
	for n := range int64(7 * 8) {
		recs := s.Records(n)
		ev, err := connect.ParseChangeEvent(recs[0].Value)
		if err != nil {
			t.Fatalf("event %d: %v", n, err)
		}
		key := recs[0].Topic + string(must(connect.AppendJSON(nil, recs[0].Key)))
		ops[key] = append(ops[key], ev.Op.String())
		if ev.Op != connect.OpCreate {
			if diff := cmp.Diff(last[key], ev.Before); diff != "" {
				t.Fatalf("event %d: before image differs from the last after image:\n%s", n, diff)
			}
		}
		last[key] = ev.After
		want := 1
		if ev.Op == connect.OpDelete {
			want = 2
			if recs[1].Value != nil || recs[1].Version != recs[0].Version {
				t.Fatalf("event %d: tombstone %+v", n, recs[1])
			}
		}
		if len(recs) != want || recs[0].Version != n+1 {
			t.Fatalf("event %d: %d records, version %d", n, len(recs), recs[0].Version)
		}
	}
	if len(ops) != 7 {
		t.Fatalf("%d distinct keys, want 7", len(ops))
	}
	for key, o := range ops {
		if diff := cmp.Diff([]string{"c", "u", "u", "d", "c", "u", "u", "d"}, o); diff != "" {
			t.Fatalf("key %s ops:\n%s", key, diff)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// Orders grow strictly across reads, and a source opened at a batch's position continues
// with exactly the records that followed it.
func TestReadResumeAndOrder(t *testing.T) {
	s := settings(t, map[string]string{"datagen.keys": "10", "datagen.batch.size": "7", "datagen.max.events": "50"})
	ctx := context.Background()
	src := New(s)
	if err := src.Open(ctx, connect.Position{}); err != nil {
		t.Fatal(err)
	}
	var all []connect.Record
	positions := []connect.Position{{}}
	for !bytes.Contains(positions[len(positions)-1:][0].State, []byte(`"next":50}`)) {
		b, err := src.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b.Records...)
		positions = append(positions, b.Position)
	}
	for i := 1; i < len(all); i++ {
		if bytes.Compare(all[i-1].Position.Order, all[i].Position.Order) >= 0 {
			t.Fatalf("record %d's Order does not grow", i)
		}
	}
	// After the last event the source idles until cancelled.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := src.Read(cctx); err != context.DeadlineExceeded {
		t.Fatalf("Read after max.events: %v, want the context's error", err)
	}
	// Resume after the third batch (positions[0] is the start).
	again := New(s)
	if err := again.Open(ctx, positions[3]); err != nil {
		t.Fatal(err)
	}
	b, err := again.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var upTo int
	for i, r := range all {
		if bytes.Equal(r.Position.Order, positions[3].Order) {
			upTo = i + 1
		}
	}
	want := all[upTo : upTo+len(b.Records)]
	for i := range want {
		if !bytes.Equal(want[i].Position.Order, b.Records[i].Position.Order) {
			t.Fatalf("resumed record %d: Order %x, want %x", i, b.Records[i].Position.Order, want[i].Position.Order)
		}
	}
	if err := again.Open(ctx, connect.Position{Order: []byte{1}, State: []byte(`{"v":1}`)}); err == nil || !connect.IsPermanent(err) {
		t.Fatalf("Open with a bad position: %v, want a permanent error", err)
	}
}

// The rate limits how many events a second Read returns.
func TestRate(t *testing.T) {
	s := settings(t, map[string]string{"datagen.rate": "200", "datagen.batch.size": "1000"})
	src := New(s)
	now := time.Unix(1000, 0)
	src.now = func() time.Time { return now }
	ctx := context.Background()
	if err := src.Open(ctx, connect.Position{}); err != nil {
		t.Fatal(err)
	}
	b, _ := src.Read(ctx)
	if len(b.Records) != 1 {
		t.Fatalf("first read: %d records, want 1", len(b.Records))
	}
	now = now.Add(500 * time.Millisecond)
	b, _ = src.Read(ctx)
	if n := len(b.Records); n < 95 || n > 125 {
		t.Fatalf("after 0.5s at 200/s: %d records", n)
	}
}

func TestConfigErrors(t *testing.T) {
	_, errs := Plugin().ParseConfig(map[string]string{"datagen.tables": "customers,users", "datagen.rate": "-1", "topic.prefix": "a b"})
	want := []connect.FieldError{
		{Key: "datagen.rate", Message: "must be 0..1e9 events per second (got -1)"},
		{Key: "datagen.tables", Message: `must name tables among customers, orders, products (got "users")`},
		{Key: "topic.prefix", Message: `must use only A-Z a-z 0-9 . _ - (got "a b")`},
	}
	if diff := cmp.Diff(want, errs); diff != "" {
		t.Fatal(diff)
	}
}
