package waltest

import (
	"testing"

	"github.com/sluice-cdc/sluice/wal"
	"github.com/sluice-cdc/sluice/wal/vfs"
)

// Log is a wal.Log on a vfs.Mem, for tests.
type Log struct {
	*wal.Log
	FS   *vfs.Mem
	dir  string
	opts wal.Options
	t    testing.TB
}

// New opens a log on a fresh in-memory file system (opts.FS is replaced)
// and closes it when the test ends.
func New(t testing.TB, opts wal.Options) *Log {
	t.Helper()
	fs := vfs.NewMem()
	opts.FS = fs
	l := &Log{FS: fs, dir: "/wal", opts: opts, t: t}
	l.open()
	t.Cleanup(func() { l.Log.Close() })
	return l
}

func (l *Log) open() {
	l.t.Helper()
	wl, err := wal.Open(l.dir, l.opts)
	if err != nil {
		l.t.Fatalf("waltest: open: %v", err)
	}
	l.Log = wl
}

// Reopen closes the log cleanly and opens it again.
func (l *Log) Reopen() {
	l.t.Helper()
	if err := l.Log.Close(); err != nil {
		l.t.Fatalf("waltest: close: %v", err)
	}
	l.open()
}

// Crash simulates a power loss (unsynced bytes dropped, or torn if tear)
// and opens the log again, as a restarted process would.
func (l *Log) Crash(tear bool) {
	l.t.Helper()
	l.FS.Crash(vfs.CrashOptions{Tear: tear})
	l.Log.Close() // fails on the dead handles; the new open recovers
	l.open()
}
