package vfs

import (
	"fmt"
	"io"
	"os"
	"sort"

	"golang.org/x/sys/unix"
)

// OS is the FS of the operating system.
var OS FS = osFS{}

type osFS struct{}

type osFile struct{ *os.File }

// Create implements FS.Create.
func (osFS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Open implements FS.Open.
func (osFS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// OpenRW implements FS.OpenRW.
func (osFS) OpenRW(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Remove implements FS.Remove.
func (osFS) Remove(name string) error { return os.Remove(name) }

// RemoveAll implements FS.RemoveAll.
func (osFS) RemoveAll(name string) error { return os.RemoveAll(name) }

// Rename implements FS.Rename.
func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

// MkdirAll implements FS.MkdirAll.
func (osFS) MkdirAll(name string) error { return os.MkdirAll(name, 0o755) }

// ReadDir implements FS.ReadDir.
func (osFS) ReadDir(name string) ([]string, error) {
	ents, err := os.ReadDir(name)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	sort.Strings(names)
	return names, nil
}

// Stat implements FS.Stat.
func (osFS) Stat(name string) (FileInfo, error) {
	st, err := os.Stat(name)
	if err != nil {
		return FileInfo{}, err
	}
	return FileInfo{Size: st.Size(), IsDir: st.IsDir()}, nil
}

// SyncDir implements FS.SyncDir.
func (osFS) SyncDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Lock implements FS.Lock.
func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, fmt.Errorf("lock %s: %w", name, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return f, nil
}

// Sync implements File.Sync.
func (f osFile) Sync() error { return unix.Fdatasync(int(f.Fd())) }

// Size implements File.Size.
func (f osFile) Size() (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// Preallocate implements File.Preallocate.
func (f osFile) Preallocate(size int64) error {
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, size)
	if err == unix.EOPNOTSUPP || err == unix.ENOSYS {
		return nil
	}
	return err
}
