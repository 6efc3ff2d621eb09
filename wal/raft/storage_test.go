package raft

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	etcdraft "go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sluice-cdc/sluice/wal"
	"github.com/sluice-cdc/sluice/wal/vfs"
)

// memLog is a wal log on an in-memory file system with a settable clock.
type memLog struct {
	t   *testing.T
	fs  *vfs.Mem
	now time.Time
	l   *wal.Log
	rl  *wal.ReplicaLog
	st  *storage
}

const memTopic = "s"

func memTopicConfig() wal.TopicConfig {
	c := wal.DefaultTopicConfig()
	c.SegmentBytes = 1024
	c.IndexIntervalBytes = 128
	c.Retention = time.Hour
	return c
}

func newMemLog(t *testing.T) *memLog {
	m := &memLog{t: t, fs: vfs.NewMem(), now: time.UnixMilli(1_700_000_000_000)}
	m.open(true)
	t.Cleanup(func() { m.l.Close() })
	return m
}

func (m *memLog) open(create bool) {
	m.t.Helper()
	l, err := wal.Open("/d", wal.Options{FS: m.fs, Clock: func() time.Time { return m.now }})
	if err != nil {
		m.t.Fatal(err)
	}
	if create {
		if err := l.CreateTopic(memTopic, memTopicConfig()); err != nil {
			m.t.Fatal(err)
		}
	}
	rl, err := l.OpenReplica(memTopic, 0)
	if err != nil {
		m.t.Fatal(err)
	}
	m.l, m.rl, m.st = l, rl, newStorage(rl, []uint64{1, 2, 3}, 1, 1<<10)
}

func (m *memLog) reopen(crash bool) {
	m.t.Helper()
	if crash {
		m.fs.Crash(vfs.CrashOptions{Tear: true})
	}
	m.l.Close()
	m.open(false)
}

// mkEntries builds n entries from index first in term, continuing at
// offset next: data batches, with Raft's empty entry every fifth index.
func mkEntries(t *testing.T, first uint64, n int, term uint64, next int64) ([]*pb.Entry, int64) {
	t.Helper()
	var out []*pb.Entry
	for i := 0; i < n; i++ {
		idx := first + uint64(i)
		e := &pb.Entry{Term: new(term), Index: new(idx), Type: pb.EntryNormal.Enum()}
		if idx%5 != 0 {
			recs := []wal.Record{{Key: []byte(fmt.Sprint("k", idx)), Value: []byte(fmt.Sprintf("v%d-%d-%0100d", idx, term, 0))}}
			b, err := wal.EncodeBatch(next, term, idx, recs, wal.AppendOptions{}, time.UnixMilli(1_700_000_000_000))
			if err != nil {
				t.Fatal(err)
			}
			e.Data = b
			next++
		}
		out = append(out, e)
	}
	return out, next
}

func errKind(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, etcdraft.ErrCompacted):
		return "compacted"
	case errors.Is(err, etcdraft.ErrUnavailable):
		return "unavailable"
	}
	return err.Error()
}

type entryView struct {
	Index, Term uint64
	Data        string // "" for Raft's empty entry in MemoryStorage; "noop" for ours
}

func viewEntries(ents []*pb.Entry) []entryView {
	var out []entryView
	for _, e := range ents {
		v := entryView{Index: e.GetIndex(), Term: e.GetTerm(), Data: string(e.GetData())}
		if info, err := wal.DecodeBatchInfo(e.GetData()); err == nil && info.Control {
			v.Data = ""
		}
		out = append(out, v)
	}
	return out
}

// sameAsMemory checks that st answers as raft's MemoryStorage does for
// every index and range around the log.
func sameAsMemory(t *testing.T, label string, st etcdraft.Storage, ms *etcdraft.MemoryStorage) {
	t.Helper()
	f1, _ := st.FirstIndex()
	f2, _ := ms.FirstIndex()
	l1, _ := st.LastIndex()
	l2, _ := ms.LastIndex()
	if f1 != f2 || l1 != l2 {
		t.Fatalf("%s: first/last %d/%d, memory storage %d/%d", label, f1, l1, f2, l2)
	}
	for i := uint64(0); i <= l1+2; i++ {
		t1, e1 := st.Term(i)
		t2, e2 := ms.Term(i)
		if t1 != t2 || errKind(e1) != errKind(e2) {
			t.Fatalf("%s: Term(%d) = %d, %s; memory storage %d, %s", label, i, t1, errKind(e1), t2, errKind(e2))
		}
	}
	for lo := max(f1, 2) - 1; lo <= l1; lo++ {
		for _, hi := range []uint64{lo + 1, (lo + l1 + 1) / 2, l1 + 1} {
			if hi <= lo || hi > l1+1 {
				continue
			}
			for _, maxSize := range []uint64{0, math.MaxUint64} {
				a, e1 := st.Entries(lo, hi, maxSize)
				b, e2 := ms.Entries(lo, hi, maxSize)
				if errKind(e1) != errKind(e2) {
					t.Fatalf("%s: Entries(%d, %d, %d): %s, memory storage %s", label, lo, hi, maxSize, errKind(e1), errKind(e2))
				}
				if d := cmp.Diff(viewEntries(b), viewEntries(a)); d != "" {
					t.Fatalf("%s: Entries(%d, %d, %d) (-memory +ours):\n%s", label, lo, hi, maxSize, d)
				}
			}
		}
	}
}

// TestStorageAgainstMemoryStorage drives our raft.Storage and raft's own
// MemoryStorage through the same appends, conflicting appends, compaction
// (retention here) and restarts, and checks that they answer alike:
// entries, terms (including at FirstIndex-1), bounds and error kinds.
func TestStorageAgainstMemoryStorage(t *testing.T) {
	ctx := context.Background()
	m := newMemLog(t)
	ms := etcdraft.NewMemoryStorage()
	sameAsMemory(t, "empty", m.st, ms)

	ents, next := mkEntries(t, 1, 60, 1, 0)
	if _, err := m.st.append(ctx, ents); err != nil {
		t.Fatal(err)
	}
	ms.Append(ents)
	sameAsMemory(t, "after 60 entries", m.st, ms)

	// A new leader's entries replace a suffix (45..60) that was never
	// committed.
	_, next45 := mkEntries(t, 1, 44, 1, 0)
	more, _ := mkEntries(t, 45, 30, 2, next45)
	trunc, err := m.st.append(ctx, more)
	if err != nil || trunc != 44 {
		t.Fatalf("conflicting append: truncated after %d, %v", trunc, err)
	}
	ms.Append(more)
	sameAsMemory(t, "after conflicting append", m.st, ms)
	_ = next

	// Commit most of it, age it, and let retention remove old segments:
	// raft's FirstIndex moves, Term(FirstIndex-1) stays known.
	if err := m.rl.Commit(70); err != nil {
		t.Fatal(err)
	}
	m.now = m.now.Add(2 * time.Hour)
	if err := m.l.EnforceRetention(ctx); err != nil {
		t.Fatal(err)
	}
	start, startTerm := m.rl.Start()
	if start == 0 {
		t.Fatal("retention removed nothing")
	}
	if err := ms.Compact(start); err != nil {
		t.Fatal(err)
	}
	if tm, _ := ms.Term(start); tm != startTerm {
		t.Fatalf("start %d has term %d, memory storage says %d", start, startTerm, tm)
	}
	sameAsMemory(t, "after retention", m.st, ms)

	// Restarts, clean and after a crash, answer the same.
	m.reopen(false)
	sameAsMemory(t, "after clean reopen", m.st, ms)
	m.reopen(true)
	sameAsMemory(t, "after crash", m.st, ms)
	if got := m.rl.CommitIndex(); got < start {
		t.Fatalf("commit index %d after reopen, below the log start %d", got, start)
	}
}

// TestStorageHardState checks that the HardState saved by the Ready loop
// is the InitialState after a crash, and that the commit index never
// reads below the log start.
func TestStorageHardState(t *testing.T) {
	ctx := context.Background()
	m := newMemLog(t)
	if hs, cs, _ := m.st.InitialState(); !etcdraft.IsEmptyHardState(hs) || !cmp.Equal(cs.GetVoters(), []uint64{1, 2, 3}) {
		t.Fatalf("fresh initial state %v %v", hs, cs)
	}
	ents, _ := mkEntries(t, 1, 20, 3, 0)
	if _, err := m.st.append(ctx, ents); err != nil {
		t.Fatal(err)
	}
	want := &pb.HardState{Term: new(uint64(3)), Vote: new(uint64(2)), Commit: new(uint64(17))}
	if err := m.st.saveHardState(want); err != nil {
		t.Fatal(err)
	}
	m.reopen(true)
	hs, _, _ := m.st.InitialState()
	if hs.GetTerm() != 3 || hs.GetVote() != 2 || hs.GetCommit() != 17 {
		t.Fatalf("after crash: %v", hs)
	}
	if hw := m.rl.HighWatermark(); hw != 14 {
		t.Fatalf("high watermark after crash %d, want 14 (entries 1..17 hold 14 records)", hw)
	}
}

// TestStorageSnapshotBoundaries takes a snapshot on one replica (the last
// sealed, committed segment), installs it on an empty one by copying the
// segment files, and checks the boundaries raft relies on: the new
// replica's last index and its term, FirstIndex-1 and its term, entries
// byte for byte equal, and later entries continuing at the same offsets.
func TestStorageSnapshotBoundaries(t *testing.T) {
	ctx := context.Background()
	a := newMemLog(t)
	ents, next := mkEntries(t, 1, 80, 1, 0)
	if _, err := a.st.append(ctx, ents); err != nil {
		t.Fatal(err)
	}
	// Nothing committed: no snapshot to send.
	if _, err := a.st.Snapshot(); !errors.Is(err, etcdraft.ErrSnapshotTemporarilyUnavailable) {
		t.Fatalf("snapshot of an uncommitted log: %v", err)
	}
	if err := a.rl.Commit(70); err != nil {
		t.Fatal(err)
	}
	snap, err := a.st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sd, err := decodeSnapData(snap.GetData())
	if err != nil {
		t.Fatal(err)
	}
	si := snap.GetMetadata().GetIndex()
	if si == 0 || si > 70 || len(sd.Snap.Segments) == 0 || sd.From != 1 {
		t.Fatalf("snapshot at %d with %d segments from %d", si, len(sd.Snap.Segments), sd.From)
	}
	if last := sd.Snap.Segments[len(sd.Snap.Segments)-1]; last.LastIndex != si {
		t.Fatalf("snapshot index %d is not the last entry of its last segment (%d)", si, last.LastIndex)
	}
	if tm, _ := a.st.Term(si); tm != snap.GetMetadata().GetTerm() {
		t.Fatalf("snapshot term %d, entry %d has %d", snap.GetMetadata().GetTerm(), si, tm)
	}
	if !cmp.Equal(snap.GetMetadata().GetConfState().GetVoters(), []uint64{1, 2, 3}) {
		t.Fatalf("snapshot conf state %v", snap.GetMetadata().GetConfState())
	}

	b := newMemLog(t)
	junk, _ := mkEntries(t, 1, 7, 1, 0) // a stale log the snapshot replaces
	if _, err := b.st.append(ctx, junk); err != nil {
		t.Fatal(err)
	}
	st := &stagedSnapshot{index: si, term: snap.GetMetadata().GetTerm()}
	err = stageSegments(b.rl, sd.Snap, st, func(base, off int64, n int) ([]byte, error) {
		buf := make([]byte, min(n, 300)) // odd chunk sizes
		k, err := a.rl.ReadSegment(sd.Snap.Layout, base, off, buf)
		return buf[:k], err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.rl.InstallSnapshot(sd.Snap); err != nil {
		t.Fatal(err)
	}
	check := func(label string) {
		t.Helper()
		first, _ := b.st.FirstIndex()
		last, _ := b.st.LastIndex()
		if last != si || first != 1 {
			t.Fatalf("%s: first/last %d/%d, want 1/%d", label, first, last, si)
		}
		if tm, err := b.st.Term(si); err != nil || tm != snap.GetMetadata().GetTerm() {
			t.Fatalf("%s: Term(%d) %d %v", label, si, tm, err)
		}
		got, err := b.st.Entries(1, si+1, math.MaxUint64)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := a.st.Entries(1, si+1, math.MaxUint64)
		if d := cmp.Diff(viewEntries(want), viewEntries(got)); d != "" {
			t.Fatalf("%s: entries (-leader +installed):\n%s", label, d)
		}
		if b.rl.CommitIndex() != si {
			t.Fatalf("%s: commit %d, want %d", label, b.rl.CommitIndex(), si)
		}
	}
	check("installed")
	b.reopen(true)
	check("installed, after crash")
	// Entries after the snapshot continue at the same offsets.
	rest, _ := a.st.Entries(si+1, 81, math.MaxUint64)
	if _, err := b.st.append(ctx, rest); err != nil {
		t.Fatal(err)
	}
	if _, _, n := b.rl.Last(); n != next {
		t.Fatalf("next offset %d after catching up, leader's %d", n, next)
	}

	// With retention on the leader, a snapshot's log start is the
	// leader's: the installed replica's Term(FirstIndex-1) is known.
	a.now = a.now.Add(2 * time.Hour)
	if err := a.l.EnforceRetention(ctx); err != nil {
		t.Fatal(err)
	}
	start, startTerm := a.rl.Start()
	snap2, err := a.st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sd2, _ := decodeSnapData(snap2.GetData())
	if sd2.Snap.StartIndex != start || sd2.Snap.StartTerm != startTerm || start == 0 {
		t.Fatalf("snapshot start %d/%d, leader's %d/%d", sd2.Snap.StartIndex, sd2.Snap.StartTerm, start, startTerm)
	}
	c := newMemLog(t)
	st2 := &stagedSnapshot{}
	if err := stageSegments(c.rl, sd2.Snap, st2, func(base, off int64, n int) ([]byte, error) {
		buf := make([]byte, n)
		k, err := a.rl.ReadSegment(sd2.Snap.Layout, base, off, buf)
		return buf[:k], err
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.rl.InstallSnapshot(sd2.Snap); err != nil {
		t.Fatal(err)
	}
	if f, _ := c.st.FirstIndex(); f != start+1 {
		t.Fatalf("installed first index %d, want %d", f, start+1)
	}
	if tm, err := c.st.Term(start); err != nil || tm != startTerm {
		t.Fatalf("installed Term(FirstIndex-1) = %d, %v; want %d", tm, err, startTerm)
	}
	if _, err := c.st.Entries(start, start+1, math.MaxUint64); !errors.Is(err, etcdraft.ErrCompacted) {
		t.Fatalf("entries before the start: %v", err)
	}
	// A snapshot taken before the leader's segments changed is refused.
	buf := make([]byte, 10)
	if _, err := a.rl.ReadSegment(sd.Snap.Layout, sd.Snap.Segments[0].Base, 0, buf); !errors.Is(err, wal.ErrSnapshotStale) {
		t.Fatalf("read with a stale snapshot: %v", err)
	}
}

// TestStorageRefusesCommittedTruncation: entries that conflict with
// committed ones are a broken invariant; the replica stops instead.
func TestStorageRefusesCommittedTruncation(t *testing.T) {
	ctx := context.Background()
	m := newMemLog(t)
	ents, next := mkEntries(t, 1, 10, 1, 0)
	if _, err := m.st.append(ctx, ents); err != nil {
		t.Fatal(err)
	}
	if err := m.rl.Commit(8); err != nil {
		t.Fatal(err)
	}
	_, next5 := mkEntries(t, 1, 5, 1, 0)
	bad, _ := mkEntries(t, 6, 3, 2, next5)
	if _, err := m.st.append(ctx, bad); !errors.Is(err, wal.ErrTruncateCommitted) {
		t.Fatalf("append over committed entries: %v", err)
	}
	// An entry whose data was not placed at its own index is refused.
	wrong, _ := mkEntries(t, 12, 1, 1, next)
	wrong[0].Index = new(uint64(11))
	if _, err := m.st.append(ctx, wrong); err == nil {
		t.Fatal("entry 11 holding the batch of entry 12 accepted")
	}
	// An entry another replica placed at another offset means the logs
	// differ: refused. An unplaced one (offset 0) is placed here.
	elsewhere, _ := mkEntries(t, 11, 1, 1, next+7)
	if _, err := m.st.append(ctx, elsewhere); err == nil || !strings.Contains(err.Error(), "was written at offset") {
		t.Fatalf("entry placed at another offset: %v", err)
	}
	unplaced, _ := mkEntries(t, 11, 1, 1, 0)
	if _, err := m.st.append(ctx, unplaced); err != nil {
		t.Fatal(err)
	}
	if b, err := m.rl.Batch(11); err != nil {
		t.Fatal(err)
	} else if info, _ := wal.DecodeBatchInfo(b); info.BaseOffset != next {
		t.Fatalf("unplaced entry written at offset %d, want %d", info.BaseOffset, next)
	}
}
