package elasticsearch

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/sinks/sinktest"
)

// aliasIndices returns the indices an alias points at.
func aliasIndices(t testing.TB, c *esClient, alias string) []string {
	t.Helper()
	st, b := c.call("GET", "/_alias/"+alias, nil)
	if st == 404 {
		return nil
	}
	if st != 200 {
		t.Fatalf("get alias %s: %d %s", alias, st, b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func indexExists(t testing.TB, c *esClient, name string) bool {
	t.Helper()
	st, _ := c.call("HEAD", "/"+name, nil)
	return st == 200
}

// TestRebuild: while readers query the aliases without pause, a rebuild replays the log into
// fresh indices and swaps them in. Every query, before, during and after the swap, sees the
// complete view; afterwards the aliases point at the _v2 indices, the _v1 ones are gone, and
// the live sink's writes land in the new indices. A table whose rows were all deleted (and
// whose records are no longer in the log) becomes empty, even for a live sink that restarted
// and never wrote it.
func TestRebuild(t *testing.T) {
	es := sharedES(t)
	c := newESClient(t, es.URL())
	// an explicit refresh interval: readers see only what a refresh made visible
	settings := `{"number_of_shards":1,"number_of_replicas":0,"index.gc_deletes":"1h","index.refresh_interval":"30s"}`
	raw := map[string]string{KeyIndex: uniqueIndex(t), KeyIndexSettings: settings, KeyDropDelay: "300"}
	w := sinktest.Generate(sinktest.Options{Seed: 11, Transactions: 600, Shape: sinktest.Envelope})
	live := newTestSink(t, es.URL(), raw)
	writeAll(t, live, w.Records, 1, 300)
	extraKey := connect.Row{{Name: "id", Value: int64(1)}}
	mustWrite(t, live,
		connect.Record{Topic: "shop.public.extra", Key: extraKey, Version: 1, Value: connect.Row{{Name: "id", Value: int64(1)}}},
		connect.Record{Topic: "shop.public.extra", Key: extraKey, Version: 2})
	checkView(t, c, w, "before the rebuild")
	extra := indexName(t, "shop.public.extra")
	for _, tb := range append(sinktest.Tables, sinktest.Table{Topic: "shop.public.extra"}) {
		name := indexName(t, tb.Topic)
		if got := aliasIndices(t, c, name); len(got) != 1 || got[0] != name+"_v1" {
			t.Fatalf("alias %s points at %v, want [%s_v1]", name, got, name)
		}
	}

	// the live sink restarted: it knows no index yet
	live = newTestSink(t, es.URL(), raw)
	want := map[string]map[string]any{}
	for _, tb := range sinktest.Tables {
		want[indexName(t, tb.Topic)] = asDocs(t, w.Final[tb.Topic])
	}
	want[extra] = map[string]any{}

	var (
		stop    atomic.Bool
		queries atomic.Int64
		bad     atomic.Value
		wg      sync.WaitGroup
	)
	for name, docs := range want {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer recoverNonFatal()
			q := newESClient(&nonFatal{TB: t, failed: &bad}, es.URL())
			for !stop.Load() && bad.Load() == nil {
				if d := diffDocs(docs, q.search(name)); d != "" {
					bad.Store("query of " + name + " during the rebuild: " + d)
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
	for _, b := range sinktest.Batches(2, w.Records, 400) {
		if err := r.Write(ctx, b); err != nil {
			t.Fatalf("rebuild write: %v", err)
		}
	}
	during = queries.Load() - during
	if err := live.FinishRebuild(ctx, r); err != nil {
		t.Fatalf("finish rebuild: %v", err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for name := range want {
		if got := aliasIndices(t, c, name); len(got) != 1 || got[0] != name+"_v2" {
			t.Fatalf("alias %s points at %v after the rebuild, want [%s_v2]", name, got, name)
		}
		if !indexExists(t, c, name+"_v1") {
			t.Fatalf("old index %s_v1 dropped at once: searches running on it would fail", name)
		}
	}
	after := queries.Load()
	deadline := time.Now().Add(30 * time.Second)
	for queries.Load() < after+40 && bad.Load() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
	if during < 10 {
		t.Fatalf("only %d queries ran during the rebuild: the test proves little", during)
	}
	t.Logf("%d queries, %d of them while the rebuild wrote", queries.Load(), during)

	checkView(t, c, w, "after the rebuild")
	if d := diffDocs(map[string]any{}, c.docs(extra)); d != "" {
		t.Fatalf("table without rows after the rebuild: %s", d)
	}

	// the live sink now writes into the new index, and its first write after the drop delay
	// drops the old indices
	time.Sleep(400 * time.Millisecond) // the configured drop delay is 300 ms
	mustWrite(t, live, connect.Record{Topic: "shop.public.extra", Key: extraKey, Version: 3,
		Value: connect.Row{{Name: "id", Value: int64(1)}, {Name: "back", Value: true}}})
	if d := diffDocs(map[string]any{"1": map[string]any{"id": float64(1), "back": true}}, c.docs(extra+"_v2")); d != "" {
		t.Fatalf("live write after the rebuild: %s", d)
	}
	for name := range want {
		if indexExists(t, c, name+"_v1") {
			t.Fatalf("old index %s_v1 still exists after the drop delay", name)
		}
	}
}

// TestRebuildAfterCrash: a rebuild that died without AbortRebuild leaves an unaliased _v2; the
// next rebuild builds _v3 and drops both the old _v1 and the leftover _v2 (at Close here).
func TestRebuildAfterCrash(t *testing.T) {
	es := sharedES(t)
	c := newESClient(t, es.URL())
	raw := map[string]string{KeyIndex: uniqueIndex(t), KeyIndexSettings: testSettings}
	w := sinktest.Generate(sinktest.Options{Seed: 13, Transactions: 100, Shape: sinktest.Tombstones})
	live := newTestSink(t, es.URL(), raw)
	writeAll(t, live, w.Records, 1, 100)
	ctx := testCtx(t)
	crashed, err := live.BeginRebuild(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := crashed.Write(ctx, w.Records[:10]); err != nil {
		t.Fatal(err)
	}

	live = newTestSink(t, es.URL(), raw)
	r, err := live.BeginRebuild(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writeAll(t, r.(*Sink), w.Records, 2, 100)
	if err := live.FinishRebuild(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := live.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkView(t, c, w, "after the second rebuild")
	for _, tb := range sinktest.Tables {
		name := indexName(t, tb.Topic)
		if got := aliasIndices(t, c, name); len(got) != 1 || got[0] != name+"_v3" {
			t.Fatalf("alias %s points at %v, want [%s_v3]", name, got, name)
		}
		for _, old := range []string{name + "_v1", name + "_v2"} {
			if indexExists(t, c, old) {
				t.Fatalf("%s still exists", old)
			}
		}
	}
}

// TestRebuildAbort: an aborted rebuild deletes its indices and leaves the live view alone.
func TestRebuildAbort(t *testing.T) {
	es := sharedES(t)
	c := newESClient(t, es.URL())
	w := sinktest.Generate(sinktest.Options{Seed: 12, Transactions: 100, Shape: sinktest.Envelope})
	live := newTestSink(t, es.URL(), map[string]string{KeyIndex: uniqueIndex(t), KeyIndexSettings: testSettings})
	writeAll(t, live, w.Records, 1, 100)
	ctx := testCtx(t)
	r, err := live.BeginRebuild(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Write(ctx, w.Records[:len(w.Records)/2]); err != nil {
		t.Fatal(err)
	}
	for _, tb := range sinktest.Tables {
		if name := indexName(t, tb.Topic); !indexExists(t, c, name+"_v2") {
			t.Fatalf("rebuild did not create %s_v2", name)
		}
	}
	if err := live.AbortRebuild(ctx, r); err != nil {
		t.Fatal(err)
	}
	for _, tb := range sinktest.Tables {
		name := indexName(t, tb.Topic)
		if indexExists(t, c, name+"_v2") {
			t.Fatalf("aborted rebuild left %s_v2", name)
		}
		if got := aliasIndices(t, c, name); len(got) != 1 || got[0] != name+"_v1" {
			t.Fatalf("alias %s points at %v, want [%s_v1]", name, got, name)
		}
	}
	checkView(t, c, w, "after an aborted rebuild")
	if err := live.FinishRebuild(context.Background(), &Sink{}); err == nil {
		t.Fatal("FinishRebuild accepted a sink it did not begin")
	}
}

// nonFatal turns Fatal calls of a helper running in a goroutine into a recorded failure.
type nonFatal struct {
	testing.TB
	failed *atomic.Value
}

func (n *nonFatal) Fatalf(format string, args ...any) {
	n.failed.Store(fmt.Sprintf(format, args...))
	panic(nonFatalStop{})
}

func (n *nonFatal) Fatal(args ...any) {
	n.failed.Store(fmt.Sprint(args...))
	panic(nonFatalStop{})
}

type nonFatalStop struct{}

func recoverNonFatal() {
	if r := recover(); r != nil {
		if _, ok := r.(nonFatalStop); !ok {
			panic(r)
		}
	}
}

// TestCreateRace: a sink killed while it created an index leaves the request running in the
// cluster; the next sink, which did not see the alias yet, must not put a second index behind
// it (writes through an alias of two indices fail).
func TestCreateRace(t *testing.T) {
	es := sharedES(t)
	c := newESClient(t, es.URL())
	name := indexName(t, "db.s.t")
	first := newTestSink(t, es.URL(), map[string]string{KeyIndex: uniqueIndex(t)})
	ctx := testCtx(t)
	if _, err := first.createIndex(ctx, name, true); err != nil {
		t.Fatal(err)
	}
	second := newTestSink(t, es.URL(), map[string]string{KeyIndex: uniqueIndex(t)})
	got, err := second.createIndex(ctx, name, true) // as if its existence check came too early
	if err != nil || got != name {
		t.Fatalf("createIndex = %q, %v; want the existing alias %q", got, err, name)
	}
	if idx := aliasIndices(t, c, name); len(idx) != 1 || idx[0] != name+"_v1" {
		t.Fatalf("alias %s points at %v, want only %s_v1", name, idx, name)
	}
	if indexExists(t, c, name+"_v2") {
		t.Fatalf("the refused create left %s_v2", name)
	}
	mustWrite(t, second, connect.Record{Topic: "db.s.t", Key: connect.Row{{Name: "id", Value: int64(1)}}, Version: 1,
		Value: connect.Row{{Name: "id", Value: int64(1)}}})
}
