package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

func TestReplicaStateSlots(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/p"); err != nil {
		t.Fatal(err)
	}
	st, err := loadReplicaState(fs, "/p")
	if err != nil || st.have {
		t.Fatalf("missing file: %+v %v", st, err)
	}
	states := []ReplicaState{
		{Term: 1, Vote: 2, Commit: 3},
		{Term: 2, Vote: 2, Commit: 9, StartIndex: 4, StartTerm: 1},
		{Term: 5, Vote: 1, Commit: 20, StartIndex: 4, StartTerm: 1},
	}
	for _, s := range states {
		if err := st.save(s); err != nil {
			t.Fatal(err)
		}
	}
	st.close()
	fs.Crash(vfs.CrashOptions{})
	got, err := loadReplicaState(fs, "/p")
	if err != nil || got.st != states[2] {
		t.Fatalf("after crash: %+v %v", got.st, err)
	}
	got.close()
	// A torn write of the newest slot leaves the previous state.
	path := "/p/" + replicaStateFile
	newest := int(got.seq%2) * replicaStateSlot
	if err := fs.Corrupt(path, func(b []byte) []byte { b[newest+20] ^= 0xff; return b }); err != nil {
		t.Fatal(err)
	}
	got, err = loadReplicaState(fs, "/p")
	if err != nil || got.st != states[1] {
		t.Fatalf("newest slot torn: %+v %v, want %+v", got.st, err, states[1])
	}
	got.close()
	// Both slots damaged: corruption, not a silent reset of term and vote.
	if err := fs.Corrupt(path, func(b []byte) []byte { b[(replicaStateSlot-newest)+20] ^= 0xff; return b }); err != nil {
		t.Fatal(err)
	}
	var ce *CorruptionError
	if _, err := loadReplicaState(fs, "/p"); !errors.As(err, &ce) {
		t.Fatalf("both slots damaged: %v", err)
	}
}

// TestReplicaStateGolden pins the replica state file format.
func TestReplicaStateGolden(t *testing.T) {
	want := ReplicaState{Term: 7, Vote: 3, Commit: 1234, StartIndex: 1000, StartTerm: 6}
	b := make([]byte, 2*replicaStateSlot)
	copy(b, encodeReplicaSlot(4, ReplicaState{Term: 7, Vote: 3, Commit: 1200, StartIndex: 1000, StartTerm: 6}))
	copy(b[replicaStateSlot:], encodeReplicaSlot(5, want))
	golden := filepath.Join("testdata", "replica-state-v1.bin")
	if os.Getenv("SLUICE_UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(golden, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fs := vfs.NewMem()
	data, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	fs.MkdirAll("/p")
	f, _ := fs.Create("/p/" + replicaStateFile)
	f.Write(data)
	f.Close()
	st, err := loadReplicaState(fs, "/p")
	if err != nil || st.st != want || st.seq != 5 {
		t.Fatalf("golden replica state: %+v seq %d %v", st.st, st.seq, err)
	}
	st.close()
	if !cmp.Equal(data, b) {
		t.Fatal("encoding changed: the golden file no longer matches what is written")
	}
}

func FuzzReplicaStateSlot(f *testing.F) {
	f.Add(encodeReplicaSlot(1, ReplicaState{Term: 1, Vote: 1, Commit: 1}))
	f.Add([]byte("SLRS"))
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, st, ok := decodeReplicaSlot(b)
		if ok && !cmp.Equal(encodeReplicaSlot(seq, st)[:replicaStateBody+4], b[:replicaStateBody+4]) {
			t.Fatal("decoded slot does not encode back")
		}
	})
}

func TestSnapshotDescriptorGolden(t *testing.T) {
	want := Snapshot{Index: 90, Term: 3, StartIndex: 10, StartTerm: 2, NextOffset: 400, Layout: 77,
		Segments: []SnapshotSegment{{Base: 0, Size: 4096, LastIndex: 50, LastTerm: 2}, {Base: 200, Size: 5000, LastIndex: 90, LastTerm: 3}}}
	b, _ := want.MarshalBinary()
	golden := filepath.Join("testdata", "snapshot-desc-v1.bin")
	if os.Getenv("SLUICE_UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(golden, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	var got Snapshot
	if err := got.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("golden snapshot descriptor (-want +got):\n%s", d)
	}
	if !cmp.Equal(data, b) {
		t.Fatal("encoding changed: the golden file no longer matches what is written")
	}
}

func FuzzSnapshotDescriptor(f *testing.F) {
	b, _ := Snapshot{Index: 1, Segments: []SnapshotSegment{{Size: 1}}}.MarshalBinary()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Snapshot
		if s.UnmarshalBinary(b) != nil {
			return
		}
		again, _ := s.MarshalBinary()
		if !cmp.Equal(again, b) {
			t.Fatal("decoded descriptor does not encode back")
		}
	})
}

// replicaFixture is a replicated partition with n entries on a Mem.
func replicaFixture(t *testing.T, cfg TopicConfig, n int) (*vfs.Mem, *Log, *ReplicaLog, [][]byte) {
	t.Helper()
	fs := vfs.NewMem()
	l := mustOpen(t, "/d", memOpts(fs, newClock()))
	if err := l.CreateTopic("r", cfg); err != nil {
		t.Fatal(err)
	}
	r, err := l.OpenReplica("r", 0)
	if err != nil {
		t.Fatal(err)
	}
	batches, _ := replicaEntries(t, 0, 1, n, 1, time.UnixMilli(1_700_000_000_000))
	if err := r.Append(context.Background(), batches); err != nil {
		t.Fatal(err)
	}
	return fs, l, r, batches
}

// TestReplicaFindIndex reads every entry by index and its term, from the
// recent window and, after a reopen, by binary search over the sparse
// offset index, in segments of many entries.
func TestReplicaFindIndex(t *testing.T) {
	cfg := DefaultTopicConfig()
	cfg.SegmentBytes = 64 << 10
	cfg.IndexIntervalBytes = 512
	fs, l, r, batches := replicaFixture(t, cfg, 3000)
	check := func(label string) {
		t.Helper()
		for i, want := range batches {
			idx := uint64(i + 1)
			got, err := r.Batch(idx)
			if err != nil || !bytes.Equal(want, got) {
				t.Fatalf("%s: batch %d: %v", label, idx, err)
			}
			if tm, err := r.Term(idx); err != nil || tm != 1 {
				t.Fatalf("%s: term of %d: %d %v", label, idx, tm, err)
			}
		}
		ents, err := r.Entries(1, 3001, 1<<30)
		if err != nil || len(ents) != 3000 {
			t.Fatalf("%s: entries: %d, %v", label, len(ents), err)
		}
		for i := range ents {
			if !bytes.Equal(ents[i], batches[i]) {
				t.Fatalf("%s: entries: entry %d differs", label, i+1)
			}
		}
		if ents, _ := r.Entries(10, 3001, 1); len(ents) != 1 {
			t.Fatalf("%s: entries within 1 byte: %d, want 1", label, len(ents))
		}
		if _, err := r.Batch(3001); !errors.Is(err, ErrNoEntry) {
			t.Fatalf("%s: batch past the end: %v", label, err)
		}
	}
	check("recent")
	l.Close()
	l = mustOpen(t, "/d", memOpts(fs, newClock()))
	defer l.Close()
	var err error
	if r, err = l.OpenReplica("r", 0); err != nil {
		t.Fatal(err)
	}
	check("after reopen")
}

// TestInstallSnapshotCrash fails an install at each of its steps, crashes
// and reopens: the reopened log is the installed one, whole.
func TestInstallSnapshotCrash(t *testing.T) {
	cfg := DefaultTopicConfig()
	cfg.SegmentBytes = 4096
	_, src, sr, _ := replicaFixture(t, cfg, 200)
	defer src.Close()
	if err := sr.Commit(180); err != nil {
		t.Fatal(err)
	}
	snap, err := sr.Snapshot()
	if err != nil || len(snap.Segments) < 3 {
		t.Fatalf("snapshot: %+v %v", snap, err)
	}
	want := readAllRecords(t, src, "r", 0)
	for failAt := 1; ; failAt++ {
		fs, l, r, _ := replicaFixture(t, cfg, 7) // a stale log to replace
		for _, g := range snap.Segments {
			st, err := r.StageSegment(g.Base)
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, g.Size)
			if _, err := sr.ReadSegment(snap.Layout, g.Base, 0, buf); err != nil {
				t.Fatal(err)
			}
			if err := st.Write(buf); err != nil {
				t.Fatal(err)
			}
			if err := st.Finish(g); err != nil {
				t.Fatal(err)
			}
		}
		calls := 0
		fs.SetSyncError(func(name string) error {
			if calls++; calls == failAt {
				return errors.New("injected fsync failure")
			}
			return nil
		})
		ierr := r.InstallSnapshot(snap)
		fs.SetSyncError(nil)
		fs.Crash(vfs.CrashOptions{Tear: true})
		l.Close()
		l = mustOpen(t, "/d", memOpts(fs, newClock()))
		r, err := l.OpenReplica("r", 0)
		if err != nil {
			t.Fatalf("fail at sync %d: reopen: %v", failAt, err)
		}
		idx, term, _ := r.Last()
		if ierr == nil || idx == snap.Index {
			// Installed (now or by the reopen): the log is the snapshot's.
			if idx != snap.Index || term != snap.Term || r.CommitIndex() != snap.Index {
				t.Fatalf("fail at sync %d (install err %v): last %d/%d commit %d, want %d/%d", failAt, ierr, idx, term, r.CommitIndex(), snap.Index, snap.Term)
			}
			got := readAllRecords(t, l, "r", 0)
			if d := cmp.Diff(want[:len(got)], got); d != "" || got[len(got)-1].Offset != snap.NextOffset-1 {
				t.Fatalf("fail at sync %d: records (-want +got):\n%s", failAt, d)
			}
		} else if idx != 7 {
			t.Fatalf("fail at sync %d: neither the old log nor the snapshot: last %d", failAt, idx)
		}
		names, _ := fs.ReadDir("/d/topics/r/0")
		for _, n := range names {
			if strings.HasSuffix(n, stagedSuffix) || n == installMarker {
				t.Fatalf("fail at sync %d: %s left behind", failAt, n)
			}
		}
		l.Close()
		if ierr == nil {
			break
		}
	}
}

// TestCompactionKeepsReplicatedEntries: compaction of a replicated
// partition empties batches but keeps them, so every index stays
// readable and offsets never change.
func TestCompactionKeepsReplicatedEntries(t *testing.T) {
	cfg := DefaultTopicConfig()
	cfg.Delete, cfg.Compact = false, true
	cfg.SegmentBytes = 2048
	cfg.MinCleanableDirtyRatio = 0
	fs := vfs.NewMem()
	l := mustOpen(t, "/d", memOpts(fs, newClock()))
	defer l.Close()
	if err := l.CreateTopic("c", cfg); err != nil {
		t.Fatal(err)
	}
	r, err := l.OpenReplica("c", 0)
	if err != nil {
		t.Fatal(err)
	}
	var next int64
	for i := 1; i <= 100; i++ {
		b, err := EncodeBatch(next, 1, uint64(i), []Record{kv("same", fmt.Sprint("v", i))}, AppendOptions{}, time.UnixMilli(1_700_000_000_000))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Append(context.Background(), [][]byte{b}); err != nil {
			t.Fatal(err)
		}
		next++
	}
	if err := r.Commit(100); err != nil {
		t.Fatal(err)
	}
	if _, err := l.partitionMust(t, "c").compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs := readAllRecords(t, l, "c", 0)
	if len(recs) >= 100 || len(recs) == 0 {
		t.Fatalf("compaction kept %d of 100 records of one key", len(recs))
	}
	ents, err := r.Entries(1, 101, 1<<30)
	if err != nil || len(ents) != 100 {
		t.Fatalf("entries after compaction: %d, %v", len(ents), err)
	}
	for i, b := range ents {
		info, err := DecodeBatchInfo(b)
		if err != nil || info.Index != uint64(i+1) || info.BaseOffset != int64(i) {
			t.Fatalf("entry %d after compaction: %+v %v", i+1, info, err)
		}
	}
}

func (l *Log) partitionMust(t *testing.T, name string) *partition {
	t.Helper()
	p, err := l.partition(name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
