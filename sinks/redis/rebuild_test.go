package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/sinks/sinktest"
)

// readView reads the rows the model expects (and the deleted ones, which must be absent) the
// way a reader does: the live prefix first, then the keys under it.
func readView(ctx context.Context, c *goredis.Client, keys []string, want map[string]any) error {
	prefix, err := c.Get(ctx, meta+"live").Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return err
	}
	pipe := c.Pipeline()
	cmds := make([]*goredis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HGetAll(ctx, prefix+k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	for i, k := range keys {
		got := cmds[i].Val()
		delete(got, versionField) // sluice's (redis.version.storage=field)
		w, ok := want[k]
		if !ok {
			if len(got) != 0 {
				return fmt.Errorf("deleted row %s%s is visible: %v", prefix, k, got)
			}
			continue
		}
		if d := cmp.Diff(w, got); d != "" {
			return fmt.Errorf("row %s%s (-want +got):\n%s", prefix, k, d)
		}
	}
	return nil
}

// TestRebuild: while readers look rows up through the live pointer without pause, a rebuild
// replays the log into a fresh generation and switches to it. Every lookup, before, during and
// after the switch, sees the complete view (every row, no deleted one); afterwards the
// keyspace holds exactly the new generation, the live sink writes into it, and a second
// rebuild replaces it in turn. Versions are kept with either storage, also when generation 0
// was written with the other one (its rows are found and deleted either way).
func TestRebuild(t *testing.T) {
	for _, tc := range []struct{ before, store string }{{StoreField, StoreField}, {StoreKey, StoreKey}, {StoreField, StoreKey}, {StoreKey, StoreField}} {
		name := tc.store
		if tc.before != tc.store {
			name = tc.before + "-then-" + tc.store
		}
		t.Run(name, func(t *testing.T) { testRebuild(t, tc.before, tc.store) })
	}
}

func testRebuild(t *testing.T, before, store string) {
	addr, db := testDB(t)
	c := client(t, addr, db)
	w := sinktest.Generate(sinktest.Options{Seed: 21, Transactions: 600, Shape: sinktest.Envelope, Partial: true})
	raw := map[string]string{KeyCleanupDelay: "200", KeyVersionStore: before}
	live := newTestSink(t, addr, db, raw, nil)
	writeAll(t, live, w.Records, 1, 300)
	checkVersions(t, c, TypeHash, before, "")
	if store != before {
		if err := live.Close(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		raw = map[string]string{KeyCleanupDelay: "200", KeyVersionStore: store}
		live = newTestSink(t, addr, db, raw, nil)
	}
	want := expected(t, w, TypeHash, "")
	var keys []string
	seen := map[string]bool{}
	for _, r := range w.Records {
		if r.Key == nil {
			continue
		}
		k := r.Topic[strings.LastIndexByte(r.Topic, '.')+1:] + ":" + sinktest.RenderID(r.Key.(connect.Row))
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	if len(keys) <= len(want) {
		t.Fatalf("the workload deletes no row")
	}

	log := append([]connect.Record(nil), w.Records...) // what a rebuild replays
	for gen := 1; gen <= 2; gen++ {
		var (
			stop    atomic.Bool
			queries atomic.Int64
			bad     atomic.Value
			wg      sync.WaitGroup
		)
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := context.Background()
				for !stop.Load() && bad.Load() == nil {
					if err := readView(ctx, c, keys, want); err != nil {
						bad.Store(err)
						return
					}
					queries.Add(1)
				}
			}()
		}
		ctx := testCtx(t)
		r, err := live.BeginRebuild(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Open(ctx); err != nil {
			t.Fatal(err)
		}
		during := queries.Load()
		for _, b := range sinktest.Batches(uint64(gen), log, 50) {
			if err := r.Write(ctx, b); err != nil {
				t.Fatalf("rebuild write: %v", err)
			}
		}
		during = queries.Load() - during
		if err := live.FinishRebuild(ctx, r); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
		after := queries.Load()
		deadline := time.Now().Add(30 * time.Second)
		for queries.Load() < after+30 && bad.Load() == nil && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		stop.Store(true)
		wg.Wait()
		if v := bad.Load(); v != nil {
			t.Fatalf("rebuild %d: %v", gen, v)
		}
		if during < 5 {
			t.Fatalf("only %d lookups ran during rebuild %d: the test proves little", during, gen)
		}
		t.Logf("rebuild %d: %d lookups, %d while the rebuild wrote", gen, queries.Load(), during)

		prefix := fmt.Sprintf("%sg%d:", meta, gen)
		if p := c.Get(ctx, meta+"live").Val(); p != prefix {
			t.Fatalf("live pointer = %q, want %q", p, prefix)
		}
		// the live sink writes into the new generation
		k := connect.Row{{Name: "id", Value: int64(1_000_000 + gen)}}
		rec := connect.Record{Topic: "shop.public.customers", Key: k, Version: 1 << 40,
			Value: connect.Row{{Name: "id", Value: int64(1_000_000 + gen)}}}
		mustWrite(t, live, rec)
		log = append(log, rec)
		id := fmt.Sprintf("customers:%d", 1_000_000+gen)
		want[id] = map[string]string{"id": fmt.Sprint(1_000_000 + gen)}
		keys = append(keys, id)
		// the old generation goes after the delay, at the latest when the sink closes
		time.Sleep(300 * time.Millisecond)
		if err := live.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := live.Open(ctx); err != nil {
			t.Fatal(err)
		}
		if d := diffKeys(expected2(want, prefix), keyspace(t, c, TypeHash, "")); d != "" {
			t.Fatalf("keyspace after rebuild %d (only generation %d may be left):\n%s", gen, gen, d)
		}
		for k := range expected2(want, prefix) {
			has, err := c.HExists(ctx, k, versionField).Result()
			if err != nil {
				t.Fatal(err)
			}
			if has != (store == StoreField) {
				t.Fatalf("row %s of generation %d: version field present %v (redis.version.storage=%s)", k, gen, has, store)
			}
		}
		markers, _ := c.Keys(ctx, meta+"v:*").Result()
		for _, m := range markers {
			if !strings.HasPrefix(m, fmt.Sprintf("%sv:%d:", meta, gen)) {
				t.Fatalf("marker %s of an old generation left", m)
			}
		}
		if n := c.SCard(ctx, meta+"cleanup").Val() + c.SCard(ctx, meta+"building").Val(); n != 0 {
			t.Fatalf("%d generations still listed for cleanup or building", n)
		}
	}
}

// expected2 puts want under prefix.
func expected2(want map[string]any, prefix string) map[string]any {
	out := make(map[string]any, len(want))
	for k, v := range want {
		out[prefix+k] = v
	}
	return out
}

// TestRebuildAbort: an aborted rebuild deletes its generation; a rebuild that died without
// AbortRebuild is cleaned up by the next one.
func TestRebuildAbort(t *testing.T) {
	addr, db := testDB(t)
	c := client(t, addr, db)
	w := sinktest.Generate(sinktest.Options{Seed: 22, Transactions: 200, Shape: sinktest.Rewrite})
	raw := map[string]string{KeyCleanupDelay: "0"}
	live := newTestSink(t, addr, db, raw, nil)
	writeAll(t, live, w.Records, 1, 100)
	ctx := testCtx(t)
	want := expected(t, w, TypeHash, "")

	r, err := live.BeginRebuild(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writeAll(t, r.(*Sink), w.Records, 2, 100)
	if err := live.AbortRebuild(ctx, r); err != nil {
		t.Fatal(err)
	}
	if d := diffKeys(want, keyspace(t, c, TypeHash, "")); d != "" {
		t.Fatalf("after an aborted rebuild:\n%s", d)
	}
	if n := len(c.Keys(ctx, meta+"g*").Val()) + len(c.Keys(ctx, meta+"v:1:*").Val()); n != 0 {
		t.Fatalf("aborted rebuild left %d keys", n)
	}

	crashed, err := live.BeginRebuild(ctx) // generation 2, never finished
	if err != nil {
		t.Fatal(err)
	}
	writeAll(t, crashed.(*Sink), w.Records[:50], 3, 20)
	live = newTestSink(t, addr, db, raw, nil) // the task restarted
	r, err = live.BeginRebuild(ctx)           // generation 3
	if err != nil {
		t.Fatal(err)
	}
	writeAll(t, r.(*Sink), w.Records, 4, 100)
	if err := live.FinishRebuild(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := live.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if d := diffKeys(expected2(want, meta+"g3:"), keyspace(t, c, TypeHash, "")); d != "" {
		t.Fatalf("after the rebuild that followed a crashed one:\n%s", d)
	}
	if live.FinishRebuild(ctx, &Sink{}) == nil {
		t.Fatal("FinishRebuild accepted a sink it did not begin")
	}
}
