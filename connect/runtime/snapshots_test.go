package runtime_test

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/connect/runtime/runtimetest"
	"github.com/sluice-cdc/sluice/wal"
)

// sigSource records the snapshot signals and acknowledgements it gets; it emits a record
// every few milliseconds and asks for prompt commits.
type sigSource struct {
	mu      sync.Mutex
	signals []string
	acks    int
	n       uint64
}

var sigShared = &sigSource{}

func (s *sigSource) Open(context.Context, connect.Position) error { return nil }
func (s *sigSource) Read(ctx context.Context) (connect.Batch, error) {
	select {
	case <-ctx.Done():
		return connect.Batch{}, ctx.Err()
	case <-time.After(5 * time.Millisecond):
	}
	s.mu.Lock()
	s.n++
	n := s.n
	s.mu.Unlock()
	pos := connect.Position{Order: binary.BigEndian.AppendUint64(nil, n), State: []byte(`{}`)}
	return connect.Batch{Records: []connect.Record{{Topic: "sig.out", Partition: -1, Offset: -1, Value: connect.Row{{Name: "n", Value: int64(n)}}, Position: pos}}, Position: pos}, nil
}
func (s *sigSource) Ack(context.Context, connect.Position) error {
	s.mu.Lock()
	s.acks++
	s.mu.Unlock()
	return nil
}
func (s *sigSource) Close(context.Context) error { return nil }
func (s *sigSource) CommitNow() bool             { return true }
func (s *sigSource) SnapshotSignal(_ context.Context, origin, id, typ string, data []byte) ([]byte, error) {
	if typ == "stop-snapshot" {
		return nil, connect.Permanentf("invalid snapshot request: nothing to stop")
	}
	s.mu.Lock()
	s.signals = append(s.signals, origin+"/"+id+"/"+typ+"/"+string(data))
	s.mu.Unlock()
	return []byte(`{}`), nil
}
func (s *sigSource) SnapshotStatus() []byte { return []byte(`{"state":"IDLE"}`) }

func (s *sigSource) got() ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.signals...), s.acks
}

func sigPlugin() connect.Plugin {
	return connect.Plugin{
		Name: "sigsrc", Kind: connect.KindSource, Version: "1",
		Config: connect.ConfigDef{
			{Name: "topic.prefix", Type: connect.TypeString, Required: true},
			{Name: "signal.enabled.channels", Type: connect.TypeList, Default: "source", HasDefault: true},
		},
		NewSource: func(connect.Config, connect.Env) (connect.Source, error) { return sigShared, nil },
	}
}

func appendSignal(t *testing.T, log runtime.Log, key, value string) {
	t.Helper()
	var k []byte
	if key != "" {
		k = []byte(key)
	}
	if _, err := log.Append(context.Background(), "srv-signal", 0, []wal.Record{{Key: k, Value: []byte(value)}}, wal.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestSignalTopicAndPromptCommits: signals on the signal topic reach the source once each
// (records of other connectors and malformed ones are skipped), also across a restart; a
// source that asks for prompt commits is acknowledged batch after batch although the flush
// interval is an hour.
func TestSignalTopicAndPromptCommits(t *testing.T) {
	*sigShared = sigSource{}
	log := runtimetest.NewLog()
	h := newHarness(t, log, newRegistry(t, sigPlugin()), nil)
	h.add("sig", "sigsrc", map[string]string{"topic.prefix": "srv", "signal.enabled.channels": "source,kafka", "offset.flush.interval.ms": "3600000"})
	h.start()
	h.waitState("sig", runtime.StateRunning)
	waitFor(t, "the signal topic", func() bool { _, err := log.Describe("srv-signal"); return err == nil })

	appendSignal(t, log, "srv", `{"type":"execute-snapshot","data":{"data-collections":["a"]}}`)
	appendSignal(t, log, "other", `{"type":"execute-snapshot","data":{"data-collections":["b"]}}`)
	appendSignal(t, log, "srv", `not json`)
	appendSignal(t, log, "srv", `{"type":"stop-snapshot","data":{}}`)
	appendSignal(t, log, "srv", `{"id":"s-9","type":"pause-snapshot","data":{}}`)
	want := []string{`topic/topic-0-0/execute-snapshot/{"data-collections":["a"]}`, `topic/s-9/pause-snapshot/{}`}
	waitFor(t, "the signals", func() bool { s, _ := sigShared.got(); return len(s) == len(want) })
	waitFor(t, "prompt acknowledgements", func() bool { _, acks := sigShared.got(); return acks >= 20 })
	offs, err := log.FetchOffsets("sluice-signal-sig")
	if err != nil || offs[runtime.TopicPartition{Topic: "srv-signal"}] != 5 {
		t.Fatalf("signal group offsets %v, %v; want 5", offs, err)
	}
	// a restart does not apply them again
	if err := h.rt.Restart(context.Background(), "sig", false); err != nil {
		t.Fatal(err)
	}
	appendSignal(t, log, "srv", `{"type":"resume-snapshot"}`)
	want = append(want, `topic/topic-0-5/resume-snapshot/`)
	waitFor(t, "the signal after the restart", func() bool { s, _ := sigShared.got(); return len(s) >= len(want) })
	time.Sleep(100 * time.Millisecond)
	got, _ := sigShared.got()
	if len(got) != len(want) {
		t.Fatalf("signals %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("signals %q, want %q", got, want)
		}
	}
	st, err := h.rt.SnapshotStatus("sig")
	if err != nil || string(st) != `{"state":"IDLE"}` {
		t.Fatalf("status %s, %v", st, err)
	}
}
