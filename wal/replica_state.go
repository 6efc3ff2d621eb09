package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

// ReplicaState is what a replica keeps of replication besides its entries:
// the Raft HardState (term, vote, commit) and where its log starts (the
// index and term of the entry just before the first one it holds; 0 and 0
// while it holds the log from the beginning).
type ReplicaState struct {
	Term       uint64
	Vote       uint64
	Commit     uint64
	StartIndex uint64
	StartTerm  uint64
}

// The replica state file holds two slots; each write goes to the slot the
// previous write did not use and is fsynced before the call returns, so a
// torn write leaves the other slot, the previous state, intact. The valid
// slot with the higher sequence number is the state.
//
//	slot (64 bytes): "SLRS" | version u8 (1) | 0 0 0 | sequence u64 |
//	    term u64 | vote u64 | commit u64 | start index u64 |
//	    start term u64 | CRC-32C u32 of all before | 0 0 0 0
const (
	replicaStateFile    = "replica-state"
	replicaStateMagic   = "SLRS"
	replicaStateVersion = 1
	replicaStateSlot    = 64
	replicaStateBody    = 4 + 1 + 3 + 6*8
)

func encodeReplicaSlot(seq uint64, st ReplicaState) []byte {
	b := make([]byte, 0, replicaStateSlot)
	b = append(b, replicaStateMagic...)
	b = append(b, replicaStateVersion, 0, 0, 0)
	be := binary.BigEndian
	for _, v := range []uint64{seq, st.Term, st.Vote, st.Commit, st.StartIndex, st.StartTerm} {
		b = be.AppendUint64(b, v)
	}
	b = be.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return append(b, 0, 0, 0, 0)
}

func decodeReplicaSlot(b []byte) (uint64, ReplicaState, bool) {
	if len(b) < replicaStateBody+4 || string(b[:4]) != replicaStateMagic || b[4] != replicaStateVersion {
		return 0, ReplicaState{}, false
	}
	be := binary.BigEndian
	if crc32.Checksum(b[:replicaStateBody], castagnoli) != be.Uint32(b[replicaStateBody:]) {
		return 0, ReplicaState{}, false
	}
	u := func(i int) uint64 { return be.Uint64(b[8+8*i:]) }
	return u(0), ReplicaState{Term: u(1), Vote: u(2), Commit: u(3), StartIndex: u(4), StartTerm: u(5)}, true
}

// replicaStateStore is a partition's replica state file.
type replicaStateStore struct {
	fs   vfs.FS
	dir  string
	f    vfs.File // nil until the first write of a new file
	seq  uint64
	st   ReplicaState
	have bool // a valid slot was found or written
}

// loadReplicaState reads the state file of dir; a missing file is the
// zero state. Two invalid slots in an existing file are corruption: the
// file is written only by fsynced slot writes, so one slot is always whole.
func loadReplicaState(fsys vfs.FS, dir string) (*replicaStateStore, error) {
	s := &replicaStateStore{fs: fsys, dir: dir}
	path := filepath.Join(dir, replicaStateFile)
	f, err := fsys.OpenRW(path)
	if vfs.IsNotExist(err) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open replica state %s: %w", path, err)
	}
	buf := make([]byte, 2*replicaStateSlot)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, fmt.Errorf("read replica state %s: %w", path, err)
	}
	buf = buf[:n]
	for i := 0; i < 2; i++ {
		lo := i * replicaStateSlot
		if lo >= len(buf) {
			break
		}
		seq, st, ok := decodeReplicaSlot(buf[lo:min(len(buf), lo+replicaStateSlot)])
		if ok && (!s.have || seq > s.seq) {
			s.seq, s.st, s.have = seq, st, true
		}
	}
	if !s.have && n > 0 {
		f.Close()
		return nil, &CorruptionError{File: path, Offset: 0, Reason: "no valid replica state slot"}
	}
	s.f = f
	return s, nil
}

// save writes st durably.
func (s *replicaStateStore) save(st ReplicaState) error {
	path := filepath.Join(s.dir, replicaStateFile)
	if s.f == nil {
		// Created whole (both slots) by an atomic write, so that a crash
		// leaves no file or a readable one.
		both := make([]byte, 2*replicaStateSlot)
		copy(both, encodeReplicaSlot(0, s.st))
		if err := writeFileAtomic(s.fs, s.dir, path, both); err != nil {
			return fmt.Errorf("create replica state %s: %w", path, err)
		}
		f, err := s.fs.OpenRW(path)
		if err != nil {
			return fmt.Errorf("open replica state %s: %w", path, err)
		}
		s.f = f
	}
	seq := s.seq + 1
	if _, err := s.f.WriteAt(encodeReplicaSlot(seq, st), int64(seq%2)*replicaStateSlot); err != nil {
		return fmt.Errorf("write replica state %s: %w", path, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("sync replica state %s: %w", path, err)
	}
	s.seq, s.st, s.have = seq, st, true
	return nil
}

func (s *replicaStateStore) close() {
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}
