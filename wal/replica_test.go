package wal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

// replicaEntries encodes n entries from index first on, continuing at
// offset next, with a control entry every fourth index.
func replicaEntries(t *testing.T, next int64, first uint64, n int, term uint64, now time.Time) ([][]byte, int64) {
	t.Helper()
	var out [][]byte
	for i := 0; i < n; i++ {
		idx := first + uint64(i)
		if idx%4 == 0 {
			out = append(out, EncodeControlBatch(next, term, idx, []byte(fmt.Sprint("conf", idx)), now))
			continue
		}
		recs := []Record{kv(fmt.Sprint("k", idx), fmt.Sprint("v", idx, "-", term, strings.Repeat("p", 200))), kv("x", "y")}
		b, err := EncodeBatch(next, term, idx, recs, AppendOptions{}, now)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
		next += int64(len(recs))
	}
	return out, next
}

func TestReplicaLog(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	ctx := context.Background()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	cfg := DefaultTopicConfig()
	cfg.SegmentBytes = 2048
	if err := l.CreateTopic("r", cfg); err != nil {
		t.Fatal(err)
	}
	r, err := l.ReplicaLog("r", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, "r", 0, []Record{kv("a", "b")}, AppendOptions{}); !errors.Is(err, ErrReplicated) {
		t.Fatalf("plain append on a replicated partition: %v", err)
	}
	batches, next := replicaEntries(t, 0, 1, 20, 1, clk.now())
	if err := r.Append(ctx, batches); err != nil {
		t.Fatal(err)
	}
	// Written and durable, but not committed: invisible.
	if hw, _ := l.LatestOffset("r", 0); hw != 0 {
		t.Fatalf("hw %d before any commit", hw)
	}
	if idx, term, n := r.Last(); idx != 20 || term != 1 || n != next {
		t.Fatalf("last %d/%d/%d, want 20/1/%d", idx, term, n, next)
	}
	// Entries read back byte for byte.
	for i, want := range batches {
		got, err := r.Batch(uint64(i + 1))
		if err != nil || !cmp.Equal(want, got) {
			t.Fatalf("batch %d: %v (equal %v)", i+1, err, cmp.Equal(want, got))
		}
	}
	if _, err := r.Batch(21); !errors.Is(err, ErrNoEntry) {
		t.Fatalf("batch past the end: %v", err)
	}
	// A gap or a wrong offset is refused.
	bad, _ := replicaEntries(t, next, 22, 1, 1, clk.now())
	if err := r.Append(ctx, bad); err == nil {
		t.Fatal("append with an index gap accepted")
	}
	bad, _ = replicaEntries(t, next+1, 21, 1, 1, clk.now())
	if err := r.Append(ctx, bad); err == nil {
		t.Fatal("append with an offset gap accepted")
	}
	// Commit index 6: readers see entries 1..6 (5 data entries, 10 records).
	if err := r.Commit(6); err != nil {
		t.Fatal(err)
	}
	recs := readAllRecords(t, l, "r", 0)
	if len(recs) != 10 || recs[9].Offset != 9 {
		t.Fatalf("after commit 6: %d records, last offset %d", len(recs), recs[len(recs)-1].Offset)
	}
	// Never truncate committed entries.
	if err := r.TruncateAfter(5); !errors.Is(err, ErrTruncateCommitted) {
		t.Fatalf("truncate below commit: %v", err)
	}
	// Entry 8 is a control entry (no offset): committing it and then
	// truncating after 7 must be refused too.
	if err := r.Commit(8); err != nil {
		t.Fatal(err)
	}
	if err := r.TruncateAfter(7); !errors.Is(err, ErrTruncateCommitted) {
		t.Fatalf("truncate of a committed control entry: %v", err)
	}
	// Truncate after 9 (crossing segment boundaries), then continue in a
	// new term at the same offsets.
	if err := r.TruncateAfter(9); err != nil {
		t.Fatal(err)
	}
	idx, term, n := r.Last()
	if idx != 9 || term != 1 || n != 14 {
		t.Fatalf("after truncation last %d/%d next %d, want 9/1/14", idx, term, n)
	}
	more, next2 := replicaEntries(t, 14, 10, 6, 2, clk.now())
	if err := r.Append(ctx, more); err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(15); err != nil {
		t.Fatal(err)
	}
	hw, _ := l.LatestOffset("r", 0)
	if hw != next2 {
		t.Fatalf("hw %d, want %d", hw, next2)
	}
	want := readAllRecords(t, l, "r", 0)
	if v := string(want[len(want)-2].Value); !strings.HasPrefix(v, "v15-2p") {
		t.Fatalf("last entry's record %q, want the term 2 entry 15", v)
	}
	// Crash and reopen: the replica log comes back with the same entries;
	// the committed end is what replication says.
	fs.Crash(vfs.CrashOptions{})
	l.Close()
	l = mustOpen(t, "/d", memOpts(fs, clk))
	defer l.Close()
	r, err = l.ReplicaLog("r", 0, 12)
	if err != nil {
		t.Fatal(err)
	}
	if idx, term, _ := r.Last(); idx != 15 || term != 2 {
		t.Fatalf("after reopen last %d/%d", idx, term)
	}
	got := readAllRecords(t, l, "r", 0)
	b12, _ := r.Batch(12)
	info, err := DecodeBatchInfo(b12)
	if err != nil || info.Control != true || got[len(got)-1].Offset != info.BaseOffset-1 {
		t.Fatalf("after reopen with commit 12: last visible offset %d, entry 12 %+v %v", got[len(got)-1].Offset, info, err)
	}
	if d := cmp.Diff(want[:len(got)], got); d != "" {
		t.Fatalf("records after reopen (-want +got):\n%s", d)
	}
	b4, _ := r.Batch(4)
	if info, _ := DecodeBatchInfo(b4); !info.Control || string(info.Data) != "conf4" || info.NextOffset != info.BaseOffset {
		t.Fatalf("control entry 4: %+v", info)
	}
}
