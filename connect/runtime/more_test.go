package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/connect/runtime/runtimetest"
	"github.com/sluice-cdc/sluice/wal"
)

// storeSource appends one store entry per Open and emits heartbeats: empty batches with a
// newer position.
type storeSource struct {
	env    connect.Env
	n      int
	opened connect.Position
	seen   *[]string
	mu     *sync.Mutex
}

func (s *storeSource) Open(ctx context.Context, after connect.Position) error {
	s.opened = after
	if len(after.State) > 0 {
		fmt.Sscanf(string(after.State), "%d", &s.n)
	}
	var got []string
	if err := s.env.Store.Scan(ctx, func(k, v []byte) error {
		got = append(got, string(k)+"="+string(v))
		return nil
	}); err != nil {
		return err
	}
	s.mu.Lock()
	*s.seen = got
	s.mu.Unlock()
	return s.env.Store.Append(ctx, []byte(fmt.Sprintf("open-%d", len(got))), []byte(after.String()))
}

func (s *storeSource) Read(ctx context.Context) (connect.Batch, error) {
	if s.n >= 50 {
		<-ctx.Done()
		return connect.Batch{}, ctx.Err()
	}
	s.n++
	return connect.Batch{Position: connect.Position{Order: []byte{byte(s.n)}, State: []byte(fmt.Sprint(s.n))}}, nil
}
func (s *storeSource) Ack(context.Context, connect.Position) error { return nil }
func (s *storeSource) Close(context.Context) error                 { return nil }

// A source's Store keeps its entries across restarts, in order; heartbeats (batches without
// records) move the committed position.
func TestStoreAndHeartbeats(t *testing.T) {
	log := runtimetest.NewLog()
	var mu sync.Mutex
	var seen []string
	p := connect.Plugin{Name: "stateful", Kind: connect.KindSource,
		NewSource: func(cfg connect.Config, env connect.Env) (connect.Source, error) {
			if env.Store == nil {
				return nil, errors.New("no store")
			}
			return &storeSource{env: env, seen: &seen, mu: &mu}, nil
		}}
	for run := range 3 {
		h := newHarness(t, log, newRegistry(t, p), nil)
		h.add("st", "stateful", map[string]string{"offset.flush.interval.ms": "0"})
		h.start()
		waitFor(t, "the heartbeats to be committed and the store entry appended", func() bool {
			pos, _ := h.rt.SourceOffset(t.Context(), "st")
			return string(pos.State) == "50" && len(log.Records(runtime.StoreTopicPrefix+"st", 0)) == run+1
		})
		h.stop()
		mu.Lock()
		got := append([]string(nil), seen...)
		mu.Unlock()
		if len(got) != run {
			t.Fatalf("run %d: the store holds %v, want %d entries", run, got, run)
		}
		for i, e := range got {
			if !strings.HasPrefix(e, fmt.Sprintf("open-%d=", i)) {
				t.Fatalf("run %d: entry %d is %q", run, i, e)
			}
		}
	}
	if recs := log.Records(runtime.StoreTopicPrefix+"st", 0); len(recs) != 3 {
		t.Fatalf("store topic holds %d records, want 3", len(recs))
	}
}

// A second instance of a connector (another process on the same log) fences the first: its
// next append fails and it ends FAILED, while the new one goes on.
func TestZombieTaskIsFenced(t *testing.T) {
	log := runtimetest.NewLog()
	cfg := datagenConfig(0, 20, 5, "datagen.rate", "500")
	a := newHarness(t, log, newRegistry(t), nil)
	a.add("gen", "datagen", cfg)
	a.start()
	waitFor(t, "appends", func() bool { return log.Appends() > 3 })
	b := newHarness(t, log, newRegistry(t), nil)
	b.add("gen", "datagen", cfg)
	b.start()
	st := a.waitState("gen", runtime.StateFailed)
	if !strings.Contains(st.Tasks[0].Trace, "another instance of this connector took over") {
		t.Fatalf("trace %q", st.Tasks[0].Trace)
	}
	b.waitState("gen", runtime.StateRunning)
	n := log.Appends()
	waitFor(t, "the new instance to append", func() bool { return log.Appends() > n+3 })
	a.stop()
	b.stop()
	pos, err := b.rt.SourceOffset(t.Context(), "gen")
	if err != nil {
		t.Fatal(err)
	}
	s := settings(t, cfg)
	checkExactlyOnce(t, log, s, int64(mustAtoi(t, between(string(pos.State), `"next":`, "}"))))
}

// A task that keeps failing retriably without progress for errors.retry.timeout ends FAILED.
func TestRetryTimeoutFails(t *testing.T) {
	log := runtimetest.NewLog()
	log.Hooks.BeforeAppend = func(string, int32, []runtime.LogRecord) error { return errors.New("disk unavailable") }
	h := newHarness(t, log, newRegistry(t), nil)
	h.add("gen", "datagen", datagenConfig(0, 10, 10, "errors.retry.timeout", "50", "errors.retry.delay.max.ms", "5"))
	h.start()
	st := h.waitState("gen", runtime.StateFailed)
	if st.Tasks[0].Restarts == 0 || !strings.Contains(st.Tasks[0].Trace, "disk unavailable") ||
		!strings.Contains(st.Tasks[0].Trace, "without progress (errors.retry.timeout=50)") {
		t.Fatalf("status %+v", st.Tasks[0])
	}
}

// Topics are created on first use with the runtime's defaults, overridden by the connector's
// topic.creation.default.* keys.
func TestTopicCreationSettings(t *testing.T) {
	log := runtimetest.NewLog()
	h := newHarness(t, log, newRegistry(t), func(o *runtime.Options) {
		o.TopicDefaults = wal.DefaultTopicConfig()
		o.TopicDefaults.Partitions = 2
		o.TopicDefaults.Retention = time.Hour
	})
	h.add("a", "datagen", datagenConfig(10, 5, 10, "topic.prefix", "a", "datagen.tables", "customers"))
	h.add("b", "datagen", datagenConfig(10, 5, 10, "topic.prefix", "b", "datagen.tables", "customers",
		"topic.creation.default.partitions", "5", "topic.creation.default.cleanup.policy", "compact"))
	h.start()
	waitFor(t, "both topics", func() bool {
		_, ea := log.Describe("a.inventory.customers")
		_, eb := log.Describe("b.inventory.customers")
		return ea == nil && eb == nil
	})
	h.stop()
	a, _ := log.Describe("a.inventory.customers")
	b, _ := log.Describe("b.inventory.customers")
	if len(a.Partitions) != 2 || a.Config.Retention != time.Hour || a.Config.Compact {
		t.Fatalf("a: %d partitions, %+v", len(a.Partitions), a.Config)
	}
	if len(b.Partitions) != 5 || !b.Config.Compact || b.Config.Delete || b.Config.Retention != time.Hour {
		t.Fatalf("b: %d partitions, %+v", len(b.Partitions), b.Config)
	}
	if off, _ := log.Describe(runtime.SourceOffsetsTopic); len(off.Partitions) != 1 || !off.Config.Compact {
		t.Fatalf("offsets topic: %+v", off)
	}
}
