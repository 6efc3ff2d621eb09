package runtime

import (
	"testing"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/wal"
)

// TestTopicsCreatedCompressed: without topic defaults, or with only a partition count, the
// topics the runtime creates compress their batches with snappy.
func TestTopicsCreatedCompressed(t *testing.T) {
	l, err := wal.Open(t.TempDir(), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	reg, err := connect.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	for _, defaults := range []wal.TopicConfig{{}, {Partitions: 3}} {
		rt, err := New(Options{Log: l, Registry: reg, TopicDefaults: defaults})
		if err != nil {
			t.Fatal(err)
		}
		if got := rt.topics.defaults; got.Compression != wal.Snappy || got.Partitions != max(defaults.Partitions, 1) {
			t.Fatalf("defaults %+v: topics created with compression.type %s and %d partitions", defaults, got.Compression, got.Partitions)
		}
	}
}
