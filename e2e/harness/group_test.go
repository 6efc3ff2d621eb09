package harness

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// spawnFamily starts a shell that forks two sleepers in its process group and one that leaves
// the group with setsid (as PostgreSQL's backends do), and returns it with their pids.
func spawnFamily(t *testing.T) (*proc, []int) {
	t.Helper()
	dir := t.TempDir()
	p, err := spawn([]string{"/bin/sh", "-c", "sleep 300 & sleep 300 & setsid sleep 300 & wait"}, dir, os.Environ(), nil, filepath.Join(dir, "log"), syscall.SIGTERM)
	if err != nil {
		t.Fatal(err)
	}
	var family []int
	deadline := time.Now().Add(10 * time.Second)
	for {
		family = descendants(p.cmd.Process.Pid)
		if len(family) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			p.kill()
			t.Fatalf("the shell has %d descendants after 10s, want 3", len(family))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() {
		for _, pid := range family {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return p, append(family, p.cmd.Process.Pid)
}

// kill and stop end the leader, every member of its group and the descendants that left the
// group, without help from Close's sweep of processes working in the server's dir.
func TestKillAndStopTakeTheWholeFamily(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(p *proc)
	}{
		{"kill", func(p *proc) { p.kill() }},
		{"stop", func(p *proc) { p.stop(2 * time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, family := spawnFamily(t)
			tc.end(p)
			for _, pid := range family {
				if !processGone(pid) {
					t.Errorf("process %d still running after %s", pid, tc.name)
				}
			}
		})
	}
}
