package vfs

import (
	"errors"
	"io"
	"io/fs"
)

// FS is a file system. Paths are slash-separated and absolute or relative to
// the process's working directory, as with package os.
type FS interface {
	// Create creates or truncates name for reading and writing. The new
	// directory entry is durable only after SyncDir of its directory.
	Create(name string) (File, error)
	// Open opens an existing file for reading.
	Open(name string) (File, error)
	// OpenRW opens an existing file for reading and writing.
	OpenRW(name string) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes a directory tree; a missing path is not an error.
	RemoveAll(name string) error
	// Rename atomically replaces newname by oldname. Durable after SyncDir
	// of both directories.
	Rename(oldname, newname string) error
	// MkdirAll creates a directory and its parents.
	MkdirAll(name string) error
	// ReadDir lists the names in a directory, sorted.
	ReadDir(name string) ([]string, error)
	// Stat reports whether name is a directory and its size.
	Stat(name string) (FileInfo, error)
	// SyncDir makes the directory's entries (creations, renames, removals)
	// durable.
	SyncDir(name string) error
	// Lock takes an exclusive advisory lock on name (created if missing),
	// held until the returned closer is closed. It fails at once if another
	// holder has it.
	Lock(name string) (io.Closer, error)
}

// FileInfo is what Stat reports.
type FileInfo struct {
	Size  int64
	IsDir bool
}

// File is an open file.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Writer
	io.Closer
	// Sync makes the file's written data durable (fdatasync).
	Sync() error
	// Truncate changes the file's size.
	Truncate(size int64) error
	// Size returns the file's current size.
	Size() (int64, error)
	// Preallocate reserves disk space for the file up to size bytes without
	// changing its size, so that later appends do not allocate blocks.
	// Implementations that cannot preallocate return nil.
	Preallocate(size int64) error
}

// ErrLocked is returned by Lock when the lock is held elsewhere.
var ErrLocked = errors.New("vfs: locked by another holder")

// IsNotExist reports whether err says a file does not exist.
func IsNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
