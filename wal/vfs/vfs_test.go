package vfs

import (
	"errors"
	"io"
	"math/rand/v2"
	"path/filepath"
	"testing"
)

func read(t *testing.T, fs FS, name string) string {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	defer f.Close()
	n, _ := f.Size()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return string(b)
}

// TestMemCrashModel pins what survives a Mem crash: synced bytes of files
// whose directory entry was synced; nothing else.
func TestMemCrashModel(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d")
	f, _ := m.Create("/d/a")
	f.Write([]byte("synced"))
	f.Sync()
	m.SyncDir("/d")
	f.Write([]byte("-unsynced"))
	h, _ := m.Create("/d/c")
	h.Sync()
	m.SyncDir("/d")
	g, _ := m.Create("/d/b") // entry never synced
	g.Write([]byte("b"))
	g.Sync()
	m.Rename("/d/c", "/d/c2") // rename never synced

	m.Crash(CrashOptions{})
	if got := read(t, m, "/d/a"); got != "synced" {
		t.Fatalf("a = %q, want the synced part only", got)
	}
	if _, err := m.Stat("/d/b"); !IsNotExist(err) {
		t.Fatalf("b survived without a directory sync: %v", err)
	}
	if _, err := m.Stat("/d/c"); err != nil {
		t.Fatalf("c: rename was not durable, the old name must remain: %v", err)
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, ErrCrashed) {
		t.Fatalf("write on a handle from before the crash: %v", err)
	}
}

func TestMemTear(t *testing.T) {
	seen := map[int]bool{}
	for seed := uint64(0); seed < 50; seed++ {
		m := NewMem()
		m.MkdirAll("/d")
		f, _ := m.Create("/d/a")
		f.Write([]byte("base"))
		f.Sync()
		m.SyncDir("/d")
		f.Write([]byte("0123456789"))
		m.Crash(CrashOptions{Tear: true, Rand: rand.New(rand.NewPCG(seed, 0))})
		got := read(t, m, "/d/a")
		if len(got) < 4 || got != ("base0123456789")[:len(got)] {
			t.Fatalf("torn file %q is not a prefix of what was written", got)
		}
		seen[len(got)] = true
	}
	if len(seen) < 5 {
		t.Fatalf("tearing kept only lengths %v", seen)
	}
}

func TestMemSyncError(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d")
	f, _ := m.Create("/d/a")
	m.SyncDir("/d")
	f.Write([]byte("lost"))
	boom := errors.New("boom")
	m.SetSyncError(func(string) error { return boom })
	if err := f.Sync(); !errors.Is(err, boom) {
		t.Fatalf("sync: %v", err)
	}
	m.SetSyncError(nil)
	m.Crash(CrashOptions{})
	if got := read(t, m, "/d/a"); got != "" {
		t.Fatalf("a failed sync made %q durable", got)
	}
}

func TestOSLockExclusive(t *testing.T) {
	name := filepath.Join(t.TempDir(), "LOCK")
	l1, err := OS.Lock(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OS.Lock(name); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock: %v, want ErrLocked", err)
	}
	l1.Close()
	l2, err := OS.Lock(name)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	l2.Close()
}

// TestMemDropUnsyncedDirs: with DropUnsyncedDirs a crash loses directories
// whose entry was not synced in their parent (with their content, synced
// or not), and keeps those that were, including after a rename whose
// target directory was synced.
func TestMemDropUnsyncedDirs(t *testing.T) {
	m := NewMem()
	write := func(d string) {
		f, _ := m.Create(d + "/f")
		f.Write([]byte("x"))
		f.Sync()
		f.Close()
		m.SyncDir(d)
	}
	for _, d := range []string{"/a/kept", "/a/tmp/sub"} {
		if err := m.MkdirAll(d); err != nil {
			t.Fatal(err)
		}
		write(d)
	}
	m.SyncDir("/")
	m.SyncDir("/a/tmp")
	m.SyncDir("/a")
	if err := m.Rename("/a/tmp", "/a/moved"); err != nil {
		t.Fatal(err)
	}
	m.SyncDir("/a")
	// Not synced in /a: lost, and lost2 renamed to lost3.
	for _, d := range []string{"/a/lost", "/a/lost2"} {
		if err := m.MkdirAll(d); err != nil {
			t.Fatal(err)
		}
		write(d)
	}
	if err := m.Rename("/a/lost2", "/a/lost3"); err != nil {
		t.Fatal(err)
	}
	m.Crash(CrashOptions{DropUnsyncedDirs: true})
	names, _ := m.ReadDir("/a")
	if got := filepath.Join(names...); got != filepath.Join("kept", "moved") {
		t.Fatalf("after the crash /a holds %v, want [kept moved]", names)
	}
	if got := read(t, m, "/a/moved/sub/f"); got != "x" {
		t.Fatalf("moved file %q", got)
	}
	if got := read(t, m, "/a/kept/f"); got != "x" {
		t.Fatalf("kept file %q", got)
	}
}
