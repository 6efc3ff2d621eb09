package postgres

import (
	"strings"
	"testing"
)

// TestChunkSnapshotVisibility checks how a chunk's MVCC snapshot (pg_current_snapshot()) tells
// the transactions its read did not see: those running when it was taken and those that began
// after it, in the 32-bit ids pgoutput sends, across a wraparound. A change of such a
// transaction drops its row from the chunk, and a transaction the stream already processed
// that the snapshot does not see makes the chunk be read again.
func TestChunkSnapshotVisibility(t *testing.T) {
	sn, err := parseSnapshot("100:105:100,103")
	if err != nil {
		t.Fatal(err)
	}
	for xid, want := range map[uint64]bool{
		42: false, 99: false, // committed before the snapshot
		100: true, 103: true, // running when it was taken
		101: false, 102: false, 104: false, // committed before it, between running ones
		105: true, 106: true, 1 << 20: true, // began after it
	} {
		if got := sn.invisible(xid); got != want {
			t.Errorf("snapshot 100:105:100,103: invisible(%d) = %v, want %v", xid, got, want)
		}
	}

	// xid8 values of the second epoch: pgoutput's 32-bit ids are their low halves
	wrap, err := parseSnapshot("4294967390:4294967400:4294967395")
	if err != nil {
		t.Fatal(err)
	}
	for xid, want := range map[uint64]bool{
		4294967200: false, // before the wraparound: precedes xmin 94
		93:         false,
		99:         true, // 4294967395
		98:         false,
		104:        true, // xmax
	} {
		if got := wrap.invisible(xid); got != want {
			t.Errorf("wrapped snapshot: invisible(%d) = %v, want %v", xid, got, want)
		}
	}

	var ring xidRing
	for _, x := range []uint32{42, 101, 104} {
		ring.add(x)
	}
	if ring.anyInvisible(sn) {
		t.Fatal("streamed 42, 101, 104: all visible to 100:105:100,103, yet the chunk would be read again")
	}
	ring.add(103)
	if !ring.anyInvisible(sn) {
		t.Fatal("streamed 103, running for the snapshot 100:105:100,103: the chunk must be read again")
	}
	for range len(ring.ids) {
		ring.add(101)
	}
	if ring.anyInvisible(sn) {
		t.Fatal("103 left the ring of the last 1024 transactions, yet it is still reported")
	}

	for _, bad := range []string{"1:2", "x:2:", "1:2:3,y", ""} {
		if _, err := parseSnapshot(bad); err == nil || !strings.Contains(err.Error(), "snapshot") {
			t.Errorf("parseSnapshot(%q): %v, want an error", bad, err)
		}
	}
}
