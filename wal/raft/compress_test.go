package raft

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal"
)

// TestCompressedTopicReplicated: a topic's compression.type holds on every
// replica, for appends made on any node and for those of a Client (which
// does not know the topic's codec); every node reads back what was
// appended.
func TestCompressedTopicReplicated(t *testing.T) {
	ns := startCluster(t, 3, nil)
	ctx := ctxT(t, 60*time.Second)
	cfg := smallTopic(1)
	cfg.Compression = wal.LZ4
	if err := ns[0].l.CreateTopicReplicas(ctx, "z", cfg, 3); err != nil {
		t.Fatal(err)
	}
	client := NewClient(ns[0].cfg.Nodes, "", nil)
	var want []wal.Record
	raw := 0
	for b := range 30 {
		var recs []wal.Record
		for i := range 40 {
			n := b*40 + i
			v := fmt.Sprintf(`{"before":null,"after":{"id":%d,"s":"row %d"},"source":{"connector":"mysql","db":"inventory","table":"orders","pos":%d},"op":"c"}`, n, n, 4000+n)
			recs = append(recs, wal.Record{Key: []byte(fmt.Sprint(n)), Value: []byte(v)})
			raw += len(recs[i].Key) + len(recs[i].Value)
		}
		var res wal.AppendResult
		var err error
		if b%2 == 0 {
			res, _, err = client.Append(ctx, 0, "z", 0, recs, wal.AppendOptions{})
		} else {
			res, err = ns[b%3].l.Append(ctx, "z", 0, recs, wal.AppendOptions{})
		}
		if err != nil {
			t.Fatalf("append %d: %v", b, err)
		}
		for i := range recs {
			recs[i].Offset = res.BaseOffset + int64(i)
		}
		want = append(want, recs...)
	}
	for _, n := range ns {
		var got []wal.Record
		waitFor(t, 10*time.Second, "the records on every node", func() bool {
			hw, err := n.l.LatestOffset("z", 0)
			return err == nil && hw == int64(len(want))
		})
		for off := int64(0); off < int64(len(want)); {
			out, err := n.l.Fetch(ctx, "z", 0, off, wal.FetchOptions{})
			if err != nil {
				t.Fatalf("node %d: fetch at %d: %v", n.cfg.NodeID, off, err)
			}
			for _, r := range out.Records {
				got = append(got, wal.Record{Offset: r.Offset, Key: r.Key, Value: r.Value})
			}
			off = out.NextOffset
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("node %d read back %d records, not the %d appended", n.cfg.NodeID, len(got), len(want))
		}
		stored := int64(0)
		err := filepath.WalkDir(n.cfg.Dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".log") && strings.Contains(path, string(filepath.Separator)+"z"+string(filepath.Separator)) {
				info, err := d.Info()
				if err != nil {
					return err
				}
				stored += info.Size()
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// LZ4 stores these batches in about a sixth of their bytes; a fifth of them left
		// uncompressed would take a third.
		t.Logf("node %d stores %d bytes for %d bytes of keys and values", n.cfg.NodeID, stored, raw)
		if stored == 0 || stored*4 > int64(raw) {
			t.Fatalf("node %d stores %d bytes for %d bytes of keys and values: not all compressed", n.cfg.NodeID, stored, raw)
		}
	}

	// max.message.bytes bounds the stored (compressed) batch, whoever appends it.
	small := smallTopic(1)
	small.Compression = wal.Snappy
	small.MaxMessageBytes = 64 << 10
	if err := ns[0].l.CreateTopicReplicas(ctx, "small", small, 3); err != nil {
		t.Fatal(err)
	}
	big := []wal.Record{{Key: []byte("k"), Value: []byte(strings.Repeat("the same text again ", 8000))}} // 160 kB
	if _, err := ns[1].l.Append(ctx, "small", 0, big, wal.AppendOptions{}); err != nil {
		t.Fatalf("append of 160 kB that compress below max.message.bytes: %v", err)
	}
	if _, _, err := client.Append(ctx, 0, "small", 0, big, wal.AppendOptions{}); err != nil {
		t.Fatalf("client append of 160 kB that compress below max.message.bytes: %v", err)
	}
}
