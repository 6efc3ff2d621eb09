package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"strings"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

// Snapshots. A replica too far behind the leader (behind the leader's log
// start) is brought up to date by copying the leader's sealed, committed
// segment files, as they are: the Raft snapshot is a small Snapshot
// descriptor naming them, and the files are streamed apart
// (ReadSegment on the leader, StageSegment on the receiver). The receiver
// then replaces its whole log with them (InstallSnapshot).

// Snapshot describes a replica's log as of a committed entry.
type Snapshot struct {
	// Index and Term name the last entry covered.
	Index, Term uint64
	// StartIndex and StartTerm name the entry before the first one of the
	// segments (the sender's log start).
	StartIndex, StartTerm uint64
	// NextOffset is the offset after entry Index: where the receiver's
	// active segment starts.
	NextOffset int64
	// Segments are the sealed segment files to copy, oldest first; none
	// when the sender's log starts right after Index.
	Segments []SnapshotSegment
	// Layout identifies the sender's files; ReadSegment checks it.
	Layout uint64
}

// SnapshotSegment is one segment file of a Snapshot.
type SnapshotSegment struct {
	Base, Size          int64
	LastIndex, LastTerm uint64
}

// The encoded Snapshot:
//
//	"SLSN" | version u8 (1) | index u64 | term u64 | start index u64 |
//	start term u64 | next offset i64 | layout u64 | count u32 |
//	count × (base i64, size i64, last index u64, last term u64) | CRC-32C u32
const (
	snapshotDescMagic   = "SLSN"
	snapshotDescVersion = 1
	installMarker       = "snapshot-install"
	stagedSuffix        = ".log.staged"
)

// MarshalBinary encodes s.
func (s Snapshot) MarshalBinary() ([]byte, error) {
	be := binary.BigEndian
	b := append([]byte(snapshotDescMagic), snapshotDescVersion)
	for _, v := range []uint64{s.Index, s.Term, s.StartIndex, s.StartTerm, uint64(s.NextOffset), s.Layout} {
		b = be.AppendUint64(b, v)
	}
	b = be.AppendUint32(b, uint32(len(s.Segments)))
	for _, g := range s.Segments {
		for _, v := range []uint64{uint64(g.Base), uint64(g.Size), g.LastIndex, g.LastTerm} {
			b = be.AppendUint64(b, v)
		}
	}
	return be.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

// UnmarshalBinary decodes what MarshalBinary encoded.
func (s *Snapshot) UnmarshalBinary(b []byte) error {
	be := binary.BigEndian
	const fixed = 5 + 6*8 + 4
	if len(b) < fixed+4 || string(b[:4]) != snapshotDescMagic || b[4] != snapshotDescVersion {
		return errors.New("bad snapshot descriptor")
	}
	if crc32.Checksum(b[:len(b)-4], castagnoli) != be.Uint32(b[len(b)-4:]) {
		return errors.New("bad snapshot descriptor: checksum mismatch")
	}
	u := func(i int) uint64 { return be.Uint64(b[5+8*i:]) }
	out := Snapshot{Index: u(0), Term: u(1), StartIndex: u(2), StartTerm: u(3), NextOffset: int64(u(4)), Layout: u(5)}
	n := int(be.Uint32(b[5+48:]))
	rest := b[fixed : len(b)-4]
	if len(rest) != n*32 {
		return errors.New("bad snapshot descriptor: segment list length")
	}
	for i := 0; i < n; i++ {
		g := rest[i*32:]
		out.Segments = append(out.Segments, SnapshotSegment{Base: int64(be.Uint64(g)), Size: int64(be.Uint64(g[8:])),
			LastIndex: be.Uint64(g[16:]), LastTerm: be.Uint64(g[24:])})
	}
	*s = out
	return nil
}

// Snapshot describes the log as of the last entry of its newest sealed
// segment that is wholly committed, or, with none, as of its start.
func (r *ReplicaLog) Snapshot() (Snapshot, error) {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	si, st := p.startIndex()
	snap := Snapshot{Index: si, Term: st, StartIndex: si, StartTerm: st, NextOffset: p.segs[0].base, Layout: p.layoutGen}
	if e, _, err := p.findIndex(si); err == nil {
		snap.NextOffset = e.next
	}
	for _, s := range p.segs[:len(p.segs)-1] {
		if s.next > p.hw || s.base >= p.hwBase {
			break
		}
		li, lt, err := p.lastEntryOf(s)
		if err != nil {
			return Snapshot{}, err
		}
		if li <= si {
			continue // wholly before the start: retention is about to remove it
		}
		snap.Segments = append(snap.Segments, SnapshotSegment{Base: s.base, Size: s.size, LastIndex: li, LastTerm: lt})
		snap.Index, snap.Term, snap.NextOffset = li, lt, s.next
	}
	if snap.Index == 0 {
		return Snapshot{}, ErrNoSnapshot
	}
	return snap, nil
}

// ReadSegment reads bytes of a sealed segment named by a Snapshot taken
// with layout, from off into buf. It fails with ErrSnapshotStale if the
// sealed segments changed since.
func (r *ReplicaLog) ReadSegment(layout uint64, base, off int64, buf []byte) (int, error) {
	p := r.p
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return 0, ErrClosed
	}
	si := p.segByBase(base)
	if p.layoutGen != layout || si < 0 || si == len(p.segs)-1 {
		p.mu.Unlock()
		return 0, ErrSnapshotStale
	}
	s := p.segs[si]
	p.filesMu.RLock()
	p.mu.Unlock()
	defer p.filesMu.RUnlock()
	if off >= s.size {
		return 0, nil
	}
	n := int(min(int64(len(buf)), s.size-off))
	if _, err := s.f.ReadAt(buf[:n], off); err != nil {
		return 0, fmt.Errorf("read %s at %d: %w", s.path, off, err)
	}
	return n, nil
}

// StagedSegment is a segment file being received for a snapshot.
type StagedSegment struct {
	p    *partition
	base int64
	path string
	f    vfs.File
	size int64
}

func stagedPath(dir string, base int64) string {
	return filepath.Join(dir, fmt.Sprintf("%020d%s", base, stagedSuffix))
}

// StageSegment starts receiving the segment file with that base, replacing
// any staged before.
func (r *ReplicaLog) StageSegment(base int64) (*StagedSegment, error) {
	path := stagedPath(r.p.dir, base)
	f, err := r.p.fs.Create(path)
	if err != nil {
		return nil, fmt.Errorf("stage segment %s: %w", path, err)
	}
	return &StagedSegment{p: r.p, base: base, path: path, f: f}, nil
}

// Write appends b to the staged file.
func (s *StagedSegment) Write(b []byte) error {
	if _, err := s.f.WriteAt(b, s.size); err != nil {
		return fmt.Errorf("write staged segment %s: %w", s.path, err)
	}
	s.size += int64(len(b))
	return nil
}

// Finish verifies the staged file against want (size, every batch valid,
// last entry) and makes it durable.
func (s *StagedSegment) Finish(want SnapshotSegment) error {
	defer func() {
		if s.f != nil {
			s.f.Close()
			s.f = nil
		}
	}()
	if s.size != want.Size {
		return fmt.Errorf("staged segment %s: %d bytes, want %d", s.path, s.size, want.Size)
	}
	seg := newSegmentState(s.base, s.path, s.f)
	end, bad, err := scanSegment(seg, s.size, s.p.cfg.IndexIntervalBytes, nil)
	if err != nil {
		return err
	}
	if bad != nil {
		return &CorruptionError{File: s.path, Offset: end, Reason: bad.Error()}
	}
	if seg.lastIndex != want.LastIndex || seg.lastTerm != want.LastTerm {
		return fmt.Errorf("staged segment %s: last entry %d/%d, want %d/%d", s.path, seg.lastIndex, seg.lastTerm, want.LastIndex, want.LastTerm)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("sync staged segment %s: %w", s.path, err)
	}
	return nil
}

// Abort removes the staged file.
func (s *StagedSegment) Abort() {
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	_ = removeIfExists(s.p.fs, s.path)
}

// InstallSnapshot replaces the whole log by the snapshot's segments, all
// staged and finished before: afterwards the log starts after
// snap.StartIndex, ends with entry snap.Index, which is committed, and the
// active segment starts at snap.NextOffset. A crash during the install
// leaves a marker naming the snapshot, and the next open completes it.
func (r *ReplicaLog) InstallSnapshot(snap Snapshot) error {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.writable(); err != nil {
		return err
	}
	for _, g := range snap.Segments {
		fi, err := p.fs.Stat(stagedPath(p.dir, g.Base))
		if err != nil || fi.Size != g.Size {
			return fmt.Errorf("install snapshot on %s: segment %d not staged whole: %v", p.name(), g.Base, err)
		}
	}
	if err := p.fs.SyncDir(p.dir); err != nil {
		return fmt.Errorf("install snapshot on %s: %w", p.name(), err)
	}
	b, _ := snap.MarshalBinary()
	if err := writeFileAtomic(p.fs, p.dir, filepath.Join(p.dir, installMarker), b); err != nil {
		return fmt.Errorf("install snapshot on %s: %w", p.name(), err)
	}
	// From here on, a failure leaves the files to the next open.
	p.filesMu.Lock()
	p.closeFiles()
	p.segs = nil
	p.filesMu.Unlock()
	p.stateMu.Lock()
	err := completeInstall(p.fs, p.dir, snap, p.rstate)
	p.stateMu.Unlock()
	if err != nil {
		return p.installFailed(err)
	}
	p.next, p.hw, p.hwBase, p.hwPos = 0, 0, 0, 0
	p.durable = p.written
	p.producers = map[int64]*producerEntry{}
	p.cleanedTo = 0
	p.created = p.l.now()
	p.recent = nil
	p.layoutGen++
	if err := p.load(); err != nil {
		return p.installFailed(fmt.Errorf("reload: %w", err))
	}
	p.indexKnown = false
	if err := p.loadLastIndex(); err != nil {
		return p.installFailed(err)
	}
	if p.lastIndex != snap.Index {
		return p.installFailed(fmt.Errorf("last entry %d after install, want %d", p.lastIndex, snap.Index))
	}
	if err := p.setCommitted(snap.Index, true); err != nil {
		return p.installFailed(err)
	}
	p.l.logger.Info("installed snapshot", "topic", p.topic, "partition", p.id,
		"index", snap.Index, "segments", len(snap.Segments), "offset", snap.NextOffset)
	return nil
}

// installFailed stops the partition after a failed install: its files are
// left for the next open to complete. Caller holds mu.
func (p *partition) installFailed(err error) error {
	err = p.fail(fmt.Errorf("install snapshot: %w", err))
	p.filesMu.Lock()
	p.closeFiles()
	p.segs = []*segment{newSegmentState(0, "", nil)}
	p.filesMu.Unlock()
	p.closed = true
	close(p.hwCh)
	p.hwCh = make(chan struct{})
	return err
}

// recoverInstall completes a snapshot install cut short by a crash, or
// removes staged files of one that never reached its marker. Part of load.
func (p *partition) recoverInstall() error {
	b, err := readFile(p.fs, filepath.Join(p.dir, installMarker))
	if vfs.IsNotExist(err) {
		names, err := p.fs.ReadDir(p.dir)
		if err != nil {
			return err
		}
		for _, n := range names {
			if strings.HasSuffix(n, stagedSuffix) {
				if err := p.fs.Remove(filepath.Join(p.dir, n)); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err != nil {
		return err
	}
	var snap Snapshot
	if err := snap.UnmarshalBinary(b); err != nil {
		return &CorruptionError{File: filepath.Join(p.dir, installMarker), Reason: err.Error()}
	}
	st, err := loadReplicaState(p.fs, p.dir)
	if err != nil {
		return err
	}
	defer st.close()
	p.l.logger.Warn("completing an interrupted snapshot install", "topic", p.topic, "partition", p.id, "index", snap.Index)
	return completeInstall(p.fs, p.dir, snap, st)
}

// completeInstall does the file steps of a snapshot install; each is
// idempotent, so that a crash at any point is completed by running it
// again: remove every segment not in the snapshot (and all producer
// snapshots and indexes of replaced files), rename the staged files into
// place, create the empty active segment, record the new start and commit
// in the state file, remove the marker.
func completeInstall(fsys vfs.FS, dir string, snap Snapshot, st *replicaStateStore) error {
	keep := map[int64]bool{}
	for _, g := range snap.Segments {
		keep[g.Base] = true
	}
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		full := filepath.Join(dir, n)
		stem := n
		for _, suf := range []string{".timeindex", ".index"} {
			stem = strings.TrimSuffix(stem, suf)
		}
		switch {
		case strings.HasSuffix(n, snapshotSuffix), n == cleanMarker, strings.HasSuffix(n, ".swap"),
			strings.HasSuffix(n, ".cleaned"), strings.HasSuffix(n, ".tmp"):
			err = removeIfExists(fsys, full)
		case strings.HasSuffix(n, ".log"):
			base, ok := parseSegmentName(n)
			if _, serr := fsys.Stat(stagedPath(dir, base)); ok && (!keep[base] || serr == nil) {
				err = removeIfExists(fsys, full)
			}
		case stem != n:
			// Index files: rebuilt from the installed segments.
			err = removeIfExists(fsys, full)
		}
		if err != nil {
			return err
		}
	}
	for _, g := range snap.Segments {
		sp := stagedPath(dir, g.Base)
		if _, err := fsys.Stat(sp); err == nil {
			if err := fsys.Rename(sp, segmentPath(dir, g.Base)); err != nil {
				return err
			}
		} else if _, err := fsys.Stat(segmentPath(dir, g.Base)); err != nil {
			return fmt.Errorf("snapshot segment %d neither staged nor installed: %w", g.Base, err)
		}
	}
	f, err := fsys.Create(segmentPath(dir, snap.NextOffset))
	if err != nil {
		return err
	}
	f.Close()
	if err := fsys.SyncDir(dir); err != nil {
		return err
	}
	s := st.st
	s.StartIndex, s.StartTerm = snap.StartIndex, snap.StartTerm
	if len(snap.Segments) == 0 {
		s.StartIndex, s.StartTerm = snap.Index, snap.Term
	}
	s.Commit = snap.Index
	if err := st.save(s); err != nil {
		return err
	}
	if err := removeIfExists(fsys, filepath.Join(dir, installMarker)); err != nil {
		return err
	}
	return fsys.SyncDir(dir)
}
