package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"path"
	"sort"
	"strings"
	"sync"
)

// ErrCrashed is returned by every operation on a file handle opened before
// the last Mem.Crash.
var ErrCrashed = errors.New("vfs: file handle from before a crash")

// Mem is an in-memory FS that models durability. Each file keeps the bytes
// written to it and, apart, the bytes made durable by Sync; each directory
// keeps its entries and, apart, the entries made durable by SyncDir.
// Directories themselves survive a Crash as soon as they are created,
// unless CrashOptions.DropUnsyncedDirs asks for the stricter model.
//
// Crash turns the durable state back into the visible one, the way a power
// loss would, optionally keeping a random prefix of each file's unsynced
// tail (a torn write). SetSyncError makes Sync fail. Mem is safe for
// concurrent use.
type Mem struct {
	mu      sync.Mutex
	gen     int
	names   map[string]*memNode // visible namespace
	durable map[string]*memNode // durable namespace (files only)
	dirs    map[string]bool
	// dirSynced marks directories whose entry in their parent was made
	// durable by a SyncDir of the parent (for DropUnsyncedDirs).
	dirSynced map[string]bool
	locks     map[string]bool
	syncErr   func(name string) error
	syncs     int
}

type memNode struct {
	data      []byte
	synced    []byte
	rewritten bool // data below len(synced) changed since the last Sync
}

// NewMem returns an empty Mem with the root directory "/" in it.
func NewMem() *Mem {
	return &Mem{
		names:     map[string]*memNode{},
		durable:   map[string]*memNode{},
		dirs:      map[string]bool{"/": true, ".": true},
		dirSynced: map[string]bool{"/": true, ".": true},
		locks:     map[string]bool{},
	}
}

// CrashOptions says what survives a Crash.
type CrashOptions struct {
	// Tear keeps a random prefix (possibly empty, possibly all) of each
	// file's unsynced appended bytes instead of dropping them all.
	Tear bool
	// Rand drives the tearing; nil uses a fixed seed.
	Rand *rand.Rand
	// DropUnsyncedDirs also loses every directory whose entry was never
	// made durable (by SyncDir of its parent after it was created or
	// renamed there), with everything under it, as a file system that
	// does not persist directory entries on its own would. (A renamed
	// directory is dropped, rather than put back under its old name.)
	DropUnsyncedDirs bool
}

// Crash simulates a power loss: the visible state becomes the durable state
// (plus torn tails if asked), every lock is released and every open handle
// becomes unusable.
func (m *Mem) Crash(opts CrashOptions) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := opts.Rand
	if r == nil {
		r = rand.New(rand.NewPCG(1, 2))
	}
	m.gen++
	m.locks = map[string]bool{}
	if opts.DropUnsyncedDirs {
		for d := range m.dirs {
			if m.dirs[d] && !m.dirDurableLocked(d) {
				m.removeAllLocked(d)
			}
		}
	}
	m.names = make(map[string]*memNode, len(m.durable))
	// Sort for determinism of the random choices.
	keys := make([]string, 0, len(m.durable))
	for k := range m.durable {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	seen := map[*memNode]bool{}
	for _, k := range keys {
		n := m.durable[k]
		m.names[k] = n
		if seen[n] {
			continue
		}
		seen[n] = true
		keep := append([]byte(nil), n.synced...)
		if opts.Tear && !n.rewritten && len(n.data) > len(n.synced) {
			extra := n.data[len(n.synced):]
			keep = append(keep, extra[:r.IntN(len(extra)+1)]...)
		}
		n.data = keep
		n.synced = append([]byte(nil), keep...)
		n.rewritten = false
	}
}

// SetSyncError makes every later Sync and SyncDir call f first (with the
// file or directory name) and fail with its error when non-nil. A failed
// Sync makes nothing durable. nil removes the hook.
func (m *Mem) SetSyncError(f func(name string) error) {
	m.mu.Lock()
	m.syncErr = f
	m.mu.Unlock()
}

// Syncs returns how many Sync calls succeeded.
func (m *Mem) Syncs() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.syncs
}

// Corrupt lets a test change a file's bytes in place, both visible and
// durable, as bit rot would.
func (m *Mem) Corrupt(name string, f func(b []byte) []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.names[clean(name)]
	if !ok {
		return &fs.PathError{Op: "corrupt", Path: name, Err: fs.ErrNotExist}
	}
	n.data = f(n.data)
	n.synced = append([]byte(nil), n.data...)
	n.rewritten = false
	return nil
}

func clean(name string) string { return path.Clean(name) }

func (m *Mem) parentExists(name string) bool {
	return m.dirs[path.Dir(name)]
}

// Create implements FS.Create.
func (m *Mem) Create(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = clean(name)
	if !m.parentExists(name) {
		return nil, &fs.PathError{Op: "create", Path: name, Err: fs.ErrNotExist}
	}
	if m.dirs[name] {
		return nil, &fs.PathError{Op: "create", Path: name, Err: fs.ErrExist}
	}
	n, ok := m.names[name]
	if ok {
		if len(n.synced) > 0 {
			n.rewritten = true
		}
		n.data = n.data[:0:0]
	} else {
		n = &memNode{}
		m.names[name] = n
	}
	return &memFile{m: m, n: n, name: name, gen: m.gen, writable: true}, nil
}

func (m *Mem) open(name string, writable bool) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = clean(name)
	n, ok := m.names[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &memFile{m: m, n: n, name: name, gen: m.gen, writable: writable}, nil
}

// Open implements FS.Open.
func (m *Mem) Open(name string) (File, error) { return m.open(name, false) }

// OpenRW implements FS.OpenRW.
func (m *Mem) OpenRW(name string) (File, error) { return m.open(name, true) }

// Remove implements FS.Remove.
func (m *Mem) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = clean(name)
	if _, ok := m.names[name]; ok {
		delete(m.names, name)
		return nil
	}
	if m.dirs[name] {
		prefix := name + "/"
		for k := range m.names {
			if strings.HasPrefix(k, prefix) {
				return &fs.PathError{Op: "remove", Path: name, Err: errors.New("directory not empty")}
			}
		}
		for k := range m.dirs {
			if strings.HasPrefix(k, prefix) {
				return &fs.PathError{Op: "remove", Path: name, Err: errors.New("directory not empty")}
			}
		}
		delete(m.dirs, name)
		delete(m.dirSynced, name)
		return nil
	}
	return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
}

// dirDurableLocked reports whether d and every directory above it have
// durable entries. Caller holds mu.
func (m *Mem) dirDurableLocked(d string) bool {
	for ; d != "/" && d != "."; d = path.Dir(d) {
		if !m.dirSynced[d] {
			return false
		}
	}
	return true
}

// RemoveAll removes a tree. Directory removal is durable at once, like
// directory creation.
func (m *Mem) RemoveAll(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removeAllLocked(clean(name))
	return nil
}

func (m *Mem) removeAllLocked(name string) {
	prefix := name + "/"
	for k := range m.names {
		if k == name || strings.HasPrefix(k, prefix) {
			delete(m.names, k)
		}
	}
	for k := range m.durable {
		if k == name || strings.HasPrefix(k, prefix) {
			delete(m.durable, k)
		}
	}
	for k := range m.dirs {
		if k == name || strings.HasPrefix(k, prefix) {
			delete(m.dirs, k)
			delete(m.dirSynced, k)
		}
	}
}

// Rename renames a file, or a directory (durable at once, like directory
// creation).
func (m *Mem) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	oldname, newname = clean(oldname), clean(newname)
	if n, ok := m.names[oldname]; ok {
		if !m.parentExists(newname) {
			return &fs.PathError{Op: "rename", Path: newname, Err: fs.ErrNotExist}
		}
		delete(m.names, oldname)
		m.names[newname] = n
		return nil
	}
	if m.dirs[oldname] {
		if m.dirs[newname] {
			return &fs.PathError{Op: "rename", Path: newname, Err: fs.ErrExist}
		}
		op, np := oldname+"/", newname+"/"
		for _, mp := range []map[string]*memNode{m.names, m.durable} {
			for k, v := range mp {
				if strings.HasPrefix(k, op) {
					delete(mp, k)
					mp[np+k[len(op):]] = v
				}
			}
		}
		moved := map[string]bool{}
		for k := range m.dirs {
			if k == oldname || strings.HasPrefix(k, op) {
				moved[k] = m.dirSynced[k]
				delete(m.dirs, k)
				delete(m.dirSynced, k)
			}
		}
		for k, synced := range moved {
			nk := newname + k[len(oldname):]
			m.dirs[nk] = true
			// The entries inside moved with the directory; its own
			// entry in the new parent is not durable yet.
			m.dirSynced[nk] = synced && k != oldname
		}
		return nil
	}
	return &fs.PathError{Op: "rename", Path: oldname, Err: fs.ErrNotExist}
}

// MkdirAll implements FS.MkdirAll.
func (m *Mem) MkdirAll(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = clean(name)
	for d := name; ; d = path.Dir(d) {
		if _, ok := m.names[d]; ok {
			return &fs.PathError{Op: "mkdir", Path: d, Err: fs.ErrExist}
		}
		m.dirs[d] = true
		if d == "/" || d == "." {
			break
		}
	}
	return nil
}

// ReadDir implements FS.ReadDir.
func (m *Mem) ReadDir(name string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = clean(name)
	if !m.dirs[name] {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	var out []string
	for k := range m.names {
		if path.Dir(k) == name {
			out = append(out, path.Base(k))
		}
	}
	for k := range m.dirs {
		if k != name && path.Dir(k) == name {
			out = append(out, path.Base(k))
		}
	}
	sort.Strings(out)
	return out, nil
}

// Stat implements FS.Stat.
func (m *Mem) Stat(name string) (FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = clean(name)
	if n, ok := m.names[name]; ok {
		return FileInfo{Size: int64(len(n.data))}, nil
	}
	if m.dirs[name] {
		return FileInfo{IsDir: true}, nil
	}
	return FileInfo{}, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
}

// SyncDir implements FS.SyncDir.
func (m *Mem) SyncDir(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = clean(name)
	if !m.dirs[name] {
		return &fs.PathError{Op: "syncdir", Path: name, Err: fs.ErrNotExist}
	}
	if hook := m.syncErr; hook != nil {
		m.mu.Unlock()
		err := hook(name)
		m.mu.Lock()
		if err != nil {
			return err
		}
	}
	for k := range m.durable {
		if path.Dir(k) == name {
			delete(m.durable, k)
		}
	}
	for k, n := range m.names {
		if path.Dir(k) == name {
			m.durable[k] = n
		}
	}
	for k := range m.dirs {
		if k != name && path.Dir(k) == name {
			m.dirSynced[k] = true
		}
	}
	return nil
}

type memLock struct {
	m    *Mem
	name string
	gen  int
}

// Close implements io.Closer: it releases the lock.
func (l *memLock) Close() error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	if l.gen == l.m.gen {
		delete(l.m.locks, l.name)
	}
	return nil
}

// Lock implements FS.Lock.
func (m *Mem) Lock(name string) (io.Closer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = clean(name)
	if m.locks[name] {
		return nil, fmt.Errorf("lock %s: %w", name, ErrLocked)
	}
	m.locks[name] = true
	return &memLock{m: m, name: name, gen: m.gen}, nil
}

type memFile struct {
	m        *Mem
	n        *memNode
	name     string
	gen      int
	pos      int64
	writable bool
	closed   bool
}

func (f *memFile) check(op string) error {
	if f.closed {
		return &fs.PathError{Op: op, Path: f.name, Err: fs.ErrClosed}
	}
	if f.gen != f.m.gen {
		return &fs.PathError{Op: op, Path: f.name, Err: ErrCrashed}
	}
	return nil
}

// ReadAt implements io.ReaderAt.
func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check("read"); err != nil {
		return 0, err
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt implements io.WriterAt.
func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return f.writeAtLocked(p, off)
}

func (f *memFile) writeAtLocked(p []byte, off int64) (int, error) {
	if err := f.check("write"); err != nil {
		return 0, err
	}
	if !f.writable {
		return 0, &fs.PathError{Op: "write", Path: f.name, Err: fs.ErrPermission}
	}
	n := f.n
	end := off + int64(len(p))
	if off < int64(len(n.synced)) {
		n.rewritten = true
	}
	if end > int64(len(n.data)) {
		if end > int64(cap(n.data)) {
			nd := make([]byte, len(n.data), max(end, 2*int64(cap(n.data))))
			copy(nd, n.data)
			n.data = nd
		}
		n.data = n.data[:end]
	}
	copy(n.data[off:], p)
	return len(p), nil
}

// Write implements io.Writer.
func (f *memFile) Write(p []byte) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	n, err := f.writeAtLocked(p, f.pos)
	f.pos += int64(n)
	return n, err
}

// Close implements io.Closer.
func (f *memFile) Close() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.closed {
		return &fs.PathError{Op: "close", Path: f.name, Err: fs.ErrClosed}
	}
	f.closed = true
	return nil
}

// Sync implements File.Sync.
func (f *memFile) Sync() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check("sync"); err != nil {
		return err
	}
	// The hook runs unlocked so that it may block; what is durable is
	// what was written when it returns.
	if hook := f.m.syncErr; hook != nil {
		f.m.mu.Unlock()
		err := hook(f.name)
		f.m.mu.Lock()
		if err != nil {
			return err
		}
		if err := f.check("sync"); err != nil {
			return err
		}
	}
	n := f.n
	if n.rewritten || len(n.data) < len(n.synced) {
		n.synced = append(n.synced[:0:0], n.data...)
	} else {
		n.synced = append(n.synced, n.data[len(n.synced):]...)
	}
	n.rewritten = false
	f.m.syncs++
	return nil
}

// Truncate implements File.Truncate.
func (f *memFile) Truncate(size int64) error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check("truncate"); err != nil {
		return err
	}
	n := f.n
	if size < int64(len(n.synced)) {
		n.rewritten = true
	}
	if size <= int64(len(n.data)) {
		n.data = n.data[:size]
		return nil
	}
	n.data = append(n.data, make([]byte, size-int64(len(n.data)))...)
	return nil
}

// Size implements File.Size.
func (f *memFile) Size() (int64, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check("stat"); err != nil {
		return 0, err
	}
	return int64(len(f.n.data)), nil
}

// Preallocate implements File.Preallocate.
func (f *memFile) Preallocate(int64) error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return f.check("fallocate")
}
