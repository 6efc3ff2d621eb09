package runtime_test

import (
	"context"

	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/connect/runtime/runtimetest"
	"github.com/sluice-cdc/sluice/sources/datagen"
)

// Pause holds a task between batches, Resume lets it go on, Stop shuts it down and keeps it
// STOPPED, Restart brings it back.
func TestPauseResumeStopRestart(t *testing.T) {
	log := runtimetest.NewLog()
	h := newHarness(t, log, newRegistry(t), nil)
	h.add("gen", "datagen", datagenConfig(0, 50, 10, "datagen.rate", "2000"))
	if st, _ := h.rt.Status("gen"); st.Tasks[0].State != runtime.StateUnassigned || st.Connector.State != runtime.StateUnassigned {
		t.Fatalf("before Run: %+v, want UNASSIGNED", st)
	}
	h.start()
	h.waitState("gen", runtime.StateRunning)
	appended := func() int { return log.Appends() }
	waitFor(t, "appends", func() bool { return appended() > 5 })

	if err := h.rt.Pause("gen"); err != nil {
		t.Fatal(err)
	}
	st := h.waitState("gen", runtime.StatePaused)
	if st.Connector.State != runtime.StatePaused {
		t.Fatalf("connector state %s, want PAUSED", st.Connector.State)
	}
	// The batch in flight completes; then nothing more is appended while paused.
	waitFor(t, "appends to stop while paused", func() bool {
		n := appended()
		time.Sleep(150 * time.Millisecond)
		return appended() == n
	})
	n := appended()
	if err := h.rt.Resume("gen"); err != nil {
		t.Fatal(err)
	}
	h.waitState("gen", runtime.StateRunning)
	waitFor(t, "appends after resume", func() bool { return appended() > n+3 })

	if err := h.rt.Stop(t.Context(), "gen"); err != nil {
		t.Fatal(err)
	}
	st, _ = h.rt.Status("gen")
	if st.Connector.State != runtime.StateStopped || len(st.Tasks) != 0 {
		t.Fatalf("after Stop: %+v, want STOPPED without tasks", st)
	}
	n = appended()
	time.Sleep(100 * time.Millisecond)
	if m := appended(); m != n {
		t.Fatalf("%d appends while stopped", m-n)
	}
	if err := h.rt.Restart(t.Context(), "gen", false); err != nil {
		t.Fatal(err)
	}
	h.waitState("gen", runtime.StateRunning)
	waitFor(t, "appends after restart", func() bool { return appended() > n+3 })
	if err := h.rt.Delete(t.Context(), "gen"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.rt.Status("gen"); err == nil {
		t.Fatal("Status of a deleted connector succeeded")
	}
}

// ackSource records what the runtime acknowledges, and the position of the last batch Read
// returned without an error.
type ackSource struct {
	inner connect.Source
	acks  chan connect.Position
	read  atomic.Pointer[connect.Position]
}

func (s *ackSource) Open(ctx context.Context, after connect.Position) error {
	return s.inner.Open(ctx, after)
}
func (s *ackSource) Read(ctx context.Context) (connect.Batch, error) {
	b, err := s.inner.Read(ctx)
	if err == nil && !b.Position.IsZero() {
		s.read.Store(&b.Position)
	}
	return b, err
}
func (s *ackSource) Ack(ctx context.Context, upTo connect.Position) error {
	select {
	case s.acks <- upTo:
	default:
	}
	return s.inner.Ack(ctx, upTo)
}
func (s *ackSource) Close(ctx context.Context) error { return s.inner.Close(ctx) }

// A graceful stop appends the batches in flight (every batch Read returned), commits the
// position of the last one and acknowledges it, so the next start resumes exactly there.
func TestGracefulStopCommitsAndAcks(t *testing.T) {
	log := runtimetest.NewLog()
	var last connect.Position
	acks := make(chan connect.Position, 1<<16)
	var src *ackSource
	p := datagen.Plugin()
	inner := p.NewSource
	p.Name, p.NewSource = "acked", func(cfg connect.Config, env connect.Env) (connect.Source, error) {
		in, err := inner(cfg, env)
		src = &ackSource{inner: in, acks: acks}
		return src, err
	}
	h := newHarness(t, log, newRegistry(t, p), nil)
	h.add("gen", "acked", datagenConfig(0, 50, 10, "datagen.rate", "5000"))
	h.start()
	waitFor(t, "acks", func() bool { return len(acks) > 10 })
	h.stop()
	for len(acks) > 0 {
		last = <-acks
	}
	pos, err := h.rt.SourceOffset(t.Context(), "gen")
	if err != nil {
		t.Fatal(err)
	}
	if pos.Compare(last) != 0 || string(pos.State) != string(last.State) {
		t.Fatalf("committed %s, last ack %s: want equal", pos, last)
	}
	if read := src.read.Load(); read == nil || pos.Compare(*read) != 0 || string(pos.State) != string(read.State) {
		t.Fatalf("committed %s, last batch read %v: a batch read before the stop was not appended", pos, read)
	}
	// Everything appended is covered by the committed position.
	s := settings(t, datagenConfig(0, 50, 10))
	next := int64(mustAtoi(t, between(string(pos.State), `"next":`, "}")))
	checkExactlyOnce(t, log, s, next)
}

func TestCheckReportsEveryProblem(t *testing.T) {
	reg := newRegistry(t, runtimetest.NewSink().Plugin("mem"))
	tests := []struct {
		name, conn, class string
		cfg               map[string]string
		want              []connect.FieldError
	}{
		{"unknown class", "a", "datagne", nil, []connect.FieldError{{Key: "connector.class", Message: `unknown connector class "datagne"; did you mean "datagen"?`}}},
		{"no class", "a", "", nil, []connect.FieldError{{Key: "connector.class", Message: "is required (the connector class, one of datagen, file, mem)"}}},
		{"class from config", "a", "", map[string]string{"connector.class": "datagen"}, nil},
		{"class mismatch", "a", "datagen", map[string]string{"connector.class": "file", "file": "/tmp/x", "topics": "t"}, []connect.FieldError{
			{Key: "connector.class", Message: `names "file" but the connector's class is "datagen"`},
			{Key: "file", Message: "unknown key"},
			{Key: "topics", Message: "unknown key"},
		}},
		{"bad name", "a b", "datagen", nil, []connect.FieldError{{Key: "name", Message: `must be 1 to 200 of A-Z a-z 0-9 . _ - (got "a b")`}}},
		{"name mismatch", "a", "datagen", map[string]string{"name": "b"}, []connect.FieldError{{Key: "name", Message: `is "b" but the connector is named "a"`}}},
		{"sink needs topics", "a", "mem", nil, []connect.FieldError{{Key: "topics", Message: "is required: set topics or topics.regex"}}},
		{"sink both", "a", "mem", map[string]string{"topics": "x", "topics.regex": "y"}, []connect.FieldError{{Key: "topics.regex", Message: "must not be set together with topics"}}},
		{"bad regex", "a", "mem", map[string]string{"topics.regex": "("}, []connect.FieldError{{Key: "topics.regex", Message: "must be a regular expression: missing closing ): `^(?:()$`"}}},
		{"dlq loops", "a", "mem", map[string]string{"topics": "x,dl", "errors.deadletterqueue.topic.name": "dl"}, []connect.FieldError{{Key: "errors.deadletterqueue.topic.name", Message: `must not be one of the topics the connector consumes (got "dl")`}}},
		{"runtime keys", "a", "datagen", map[string]string{
			"errors.tolerance": "some", "errors.retry.timeout": "-2", "tasks.max": "4", "key.converter": "org.apache.kafka.connect.json.JsonConverter",
			"key.converter.schemas.enable": "false", "topic.creation.default.partitions": "0", "errors.tolerence": "all",
		}, []connect.FieldError{
			{Key: "errors.retry.timeout", Message: "must be at least -1 (got -2)"},
			{Key: "errors.tolerance", Message: `must be one of none, all (got "some")`},
			{Key: "errors.tolerence", Message: `unknown key; did you mean "errors.tolerance"?`},
			{Key: "topic.creation.default.partitions", Message: "must be -1 or at least 1 (got 0)"},
		}},
		{"sink keys on a source", "a", "datagen", map[string]string{"topics": "x"}, []connect.FieldError{{Key: "topics", Message: "unknown key"}}},
		{"transforms without a builder", "a", "datagen", map[string]string{"transforms": "u", "transforms.u.type": "unwrap"}, []connect.FieldError{{Key: "transforms", Message: "transforms are not available in this build"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := runtime.Check(reg, nil, tc.conn, tc.class, tc.cfg)
			if diff := cmp.Diff(tc.want, errs); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
	if def := runtime.RuntimeDef(connect.KindSink); !strings.Contains(def[0].Name, "name") {
		t.Fatalf("RuntimeDef starts with %q", def[0].Name)
	}
}

// A graceful stop waits for the write in flight; Abort (the second signal) and the shutdown
// timeout abandon it.
func TestAbortAndShutdownTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		abort   bool
	}{{"abort", time.Minute, true}, {"timeout", 100 * time.Millisecond, false}} {
		t.Run(tc.name, func(t *testing.T) {
			log := runtimetest.NewLog()
			entered := make(chan struct{}, 1)
			blocking := connect.Plugin{Name: "stuck", Kind: connect.KindSink,
				NewSink: func(connect.Config, connect.Env) (connect.Sink, error) { return stuckSink{entered}, nil }}
			rt, err := runtime.New(runtime.Options{Log: log, Registry: newRegistry(t, blocking), ShutdownTimeout: tc.timeout, FetchWait: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []runtime.ConnectorSpec{
				{Name: "gen", Class: "datagen", Config: datagenConfig(10, 5, 10)},
				{Name: "out", Class: "stuck", Config: map[string]string{"topics.regex": "gen\\..*"}},
			} {
				if err := rt.Add(s); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- rt.Run(ctx) }()
			<-entered
			cancel()
			select {
			case <-done:
				t.Fatal("Run returned while a write was in flight")
			case <-time.After(50 * time.Millisecond):
			}
			if tc.abort {
				rt.Abort()
			}
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return after the abort or timeout")
			}
		})
	}
}

// stuckSink's Write blocks until its context ends.
type stuckSink struct{ entered chan struct{} }

func (stuckSink) Open(context.Context) error { return nil }
func (s stuckSink) Write(ctx context.Context, _ []connect.Record) error {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}
func (stuckSink) Close(context.Context) error { return nil }
