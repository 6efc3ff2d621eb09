package raft

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sluice-cdc/sluice/wal"
)

// storage is the raft.Storage of one partition: the partition's segment
// log itself, through a wal.ReplicaLog. One Raft entry is one batch; the
// entry's Data is the batch's bytes, which carry the entry's term and
// index in their header, so nothing is stored twice. Raft's own empty
// entries (a new leader's no-op) are stored as control batches, which take
// no offset. The HardState and the log's start live in the partition's
// replica state file.
//
// Raft calls the Storage methods from the goroutine driving the RawNode;
// the group's appender writes through append at the same time: the
// ReplicaLog and the entry cache lock. Raft reads only entries it knows
// are written, and not while the appender replaces them.
type storage struct {
	rl    *wal.ReplicaLog
	cs    *pb.ConfState
	hs    *pb.HardState // as last saved; the appender's
	self  uint64        // node id, carried in snapshot data
	cache entryCache
	now   func() time.Time
}

func newStorage(rl *wal.ReplicaLog, voters []uint64, self uint64, cacheBytes int) *storage {
	st := rl.State()
	s := &storage{
		rl:    rl,
		cs:    &pb.ConfState{Voters: append([]uint64(nil), voters...)},
		self:  self,
		cache: entryCache{max: cacheBytes},
		now:   time.Now,
	}
	if st.Term != 0 || st.Vote != 0 || st.Commit != 0 {
		commit := max(st.Commit, st.StartIndex)
		s.hs = &pb.HardState{Term: new(st.Term), Vote: new(st.Vote), Commit: new(commit)}
	}
	return s
}

// InitialState implements raft.Storage. The configuration is static: the
// voters come from the cluster configuration, not from the log.
func (s *storage) InitialState() (*pb.HardState, *pb.ConfState, error) {
	return s.hs, s.cs, nil
}

// Entries implements raft.Storage.
func (s *storage) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	if ents, ok := s.cache.slice(lo, hi, maxSize); ok {
		return ents, nil
	}
	batches, err := s.rl.Entries(lo, hi, maxSize)
	if err != nil {
		return nil, storageErr(err)
	}
	out := make([]*pb.Entry, 0, len(batches))
	for i, b := range batches {
		info, err := wal.DecodeBatchInfo(b)
		if err != nil {
			return nil, err
		}
		if info.Index != lo+uint64(i) {
			return nil, fmt.Errorf("%s: entry %d read where %d belongs", s.rl.Name(), info.Index, lo+uint64(i))
		}
		out = append(out, &pb.Entry{Term: new(info.Term), Index: new(info.Index), Type: pb.EntryNormal.Enum(), Data: b})
	}
	return out, nil
}

// Term implements raft.Storage.
func (s *storage) Term(i uint64) (uint64, error) {
	if t, ok := s.cache.term(i); ok {
		return t, nil
	}
	t, err := s.rl.Term(i)
	return t, storageErr(err)
}

// LastIndex implements raft.Storage.
func (s *storage) LastIndex() (uint64, error) {
	idx, _, _ := s.rl.Last()
	return idx, nil
}

// FirstIndex implements raft.Storage: the entry after the log's start.
func (s *storage) FirstIndex() (uint64, error) {
	idx, _ := s.rl.Start()
	return idx + 1, nil
}

// Snapshot implements raft.Storage: a descriptor of the sealed, committed
// segments (see wal.Snapshot); the files are streamed apart.
func (s *storage) Snapshot() (*pb.Snapshot, error) {
	snap, err := s.rl.Snapshot()
	if errors.Is(err, wal.ErrNoSnapshot) {
		return nil, etcdraft.ErrSnapshotTemporarilyUnavailable
	}
	if err != nil {
		return nil, err
	}
	data, err := encodeSnapData(snapData{From: s.self, Snap: snap})
	if err != nil {
		return nil, err
	}
	return &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{
		Index: new(snap.Index), Term: new(snap.Term), ConfState: s.cs,
	}}, nil
}

// storageErr maps the log's errors to the ones raft expects.
func storageErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, wal.ErrCompacted):
		return etcdraft.ErrCompacted
	case errors.Is(err, wal.ErrNoEntry):
		return etcdraft.ErrUnavailable
	}
	return err
}

// append persists entries (fsynced on return), first removing a
// conflicting suffix. Each data batch is placed at the log's next offset
// as it is written: the leader proposes batches without an offset, and
// every replica, holding the same entries before it (Raft's log
// matching), places it at the same offset. It returns the index after
// which entries were removed (0: none). Raft's own empty entries (a new
// leader's no-op) are written as control batches, which take no offset.
func (s *storage) append(ctx context.Context, ents []*pb.Entry) (truncatedAfter uint64, err error) {
	if len(ents) == 0 {
		return 0, nil
	}
	last, _, next := s.rl.Last()
	first := ents[0].GetIndex()
	if first <= last {
		if err := s.rl.TruncateAfter(first - 1); err != nil {
			return 0, err
		}
		s.cache.truncateAfter(first - 1)
		truncatedAfter = first - 1
		_, _, next = s.rl.Last()
	}
	batches := make([][]byte, len(ents))
	stored := make([]*pb.Entry, len(ents))
	for i, e := range ents {
		b := e.GetData()
		place, ok := wal.PeekBatch(b)
		switch {
		case len(b) == 0:
			// Its timestamp is fixed so that every replica writes the same
			// bytes.
			b = wal.EncodeControlBatch(next, e.GetTerm(), e.GetIndex(), nil, time.UnixMilli(0))
		case ok && !place.Control && place.BaseOffset != next && place.BaseOffset != 0:
			// Placed by another replica at another offset: the logs differ
			// before this entry, which Raft's log matching rules out.
			return truncatedAfter, fmt.Errorf("%s: entry %d was written at offset %d elsewhere, here it goes at %d",
				s.rl.Name(), e.GetIndex(), place.BaseOffset, next)
		case ok && !place.Control && place.BaseOffset != next:
			// Proposed unplaced (offset 0): it takes the next offset.
			if b, err = wal.PlaceBatch(b, next); err != nil {
				return truncatedAfter, fmt.Errorf("%s: entry %d: %w", s.rl.Name(), e.GetIndex(), err)
			}
		}
		if len(b) != len(e.GetData()) || &b[0] != &e.GetData()[0] {
			e = &pb.Entry{Term: new(e.GetTerm()), Index: new(e.GetIndex()), Type: pb.EntryNormal.Enum(), Data: b}
		}
		place, ok = wal.PeekBatch(b)
		if !ok || place.Term != e.GetTerm() || place.Index != e.GetIndex() || e.GetType() != pb.EntryNormal {
			return truncatedAfter, fmt.Errorf("%s: entry %d/%d of type %v does not hold its own batch (header %d/%d)",
				s.rl.Name(), e.GetIndex(), e.GetTerm(), e.GetType(), place.Index, place.Term)
		}
		next = place.NextOffset
		batches[i], stored[i] = b, e
	}
	if err := s.rl.Append(ctx, batches); err != nil {
		return truncatedAfter, err
	}
	for _, e := range stored {
		s.cache.add(e)
	}
	return truncatedAfter, nil
}

// placed returns the batch of entry e as written (with its offset).
func (s *storage) placed(e *pb.Entry) []byte {
	if c := s.cache.get(e.GetIndex()); c != nil && c.GetTerm() == e.GetTerm() {
		return c.GetData()
	}
	if b, err := s.rl.Batch(e.GetIndex()); err == nil {
		if place, ok := wal.PeekBatch(b); ok && place.Term == e.GetTerm() {
			return b
		}
	}
	return e.GetData()
}

// saveHardState persists hs.
func (s *storage) saveHardState(hs *pb.HardState) error {
	if err := s.rl.SaveHardState(hs.GetTerm(), hs.GetVote(), hs.GetCommit()); err != nil {
		return err
	}
	s.hs = &pb.HardState{Term: new(hs.GetTerm()), Vote: new(hs.GetVote()), Commit: new(hs.GetCommit())}
	return nil
}

// entryCache keeps the latest entries written, contiguous, up to max
// bytes of data, so that sending them to followers and applying them on
// commit does not read the disk. The appender adds, the loop and the
// applier read.
type entryCache struct {
	mu    sync.Mutex
	max   int
	ents  []*pb.Entry // ents[i].Index == ents[0].Index+i
	bytes int
}

func (c *entryCache) add(e *pb.Entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.ents); n > 0 && c.ents[n-1].GetIndex()+1 != e.GetIndex() {
		c.resetLocked()
	}
	c.ents = append(c.ents, e)
	c.bytes += len(e.GetData())
	drop := 0
	for c.bytes > c.max && drop < len(c.ents)-1 {
		c.bytes -= len(c.ents[drop].GetData())
		c.ents[drop] = nil
		drop++
	}
	if drop > 0 {
		c.ents = append(c.ents[:0], c.ents[drop:]...)
	}
}

func (c *entryCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.resetLocked()
}

func (c *entryCache) resetLocked() {
	clear(c.ents)
	c.ents, c.bytes = c.ents[:0], 0
}

func (c *entryCache) truncateAfter(idx uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.ents) > 0 && c.ents[len(c.ents)-1].GetIndex() > idx {
		c.bytes -= len(c.ents[len(c.ents)-1].GetData())
		c.ents[len(c.ents)-1] = nil
		c.ents = c.ents[:len(c.ents)-1]
	}
}

func (c *entryCache) get(i uint64) *pb.Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ents) == 0 || i < c.ents[0].GetIndex() || i > c.ents[len(c.ents)-1].GetIndex() {
		return nil
	}
	return c.ents[i-c.ents[0].GetIndex()]
}

func (c *entryCache) term(i uint64) (uint64, bool) {
	if e := c.get(i); e != nil {
		return e.GetTerm(), true
	}
	return 0, false
}

// slice returns entries lo..hi-1 within maxSize (at least one) if the
// cache holds lo..hi-1.
func (c *entryCache) slice(lo, hi, maxSize uint64) ([]*pb.Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ents) == 0 || lo < c.ents[0].GetIndex() || hi-1 > c.ents[len(c.ents)-1].GetIndex() {
		return nil, false
	}
	src := c.ents[lo-c.ents[0].GetIndex() : hi-c.ents[0].GetIndex()]
	var size uint64
	n := 0
	for n < len(src) {
		size += uint64(len(src[n].GetData()))
		if n > 0 && size > maxSize {
			break
		}
		n++
	}
	out := make([]*pb.Entry, n)
	copy(out, src)
	return out, true
}
