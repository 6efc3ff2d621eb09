package runtime

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stuckPipeline feeds a file sink writing to stdout; the test's stdout pipe is never read, so
// the sink's write blocks once the pipe is full, in a call that ignores cancellation.
func stuckPipeline(dir string) string {
	return fmt.Sprintf(`log:
  dir: %s
rest:
  listeners: []
connectors:
  - name: gen
    class: datagen
    config:
      topic.prefix: stuck
      datagen.rate: 20000
  - name: out
    class: file
    config:
      topics.regex: stuck\..*
      file: "-"
`, filepath.Join(dir, "log"))
}

// startStuck starts sluice on stuckPipeline with its stdout to a pipe nobody reads, and waits
// until the sink is stuck (the pipe is full).
func startStuck(t *testing.T, bin, dir string, args ...string) (*proc, string) {
	t.Helper()
	pipeline := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(pipeline, []byte(stuckPipeline(dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "sluice.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	cmd := exec.Command(bin, append([]string{"run", "-c", pipeline}, args...)...)
	cmd.Stdout, cmd.Stderr = w, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	p := &proc{cmd: cmd, exited: make(chan struct{}), log: logPath}
	go func() { p.err = cmd.Wait(); logf.Close(); close(p.exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-p.exited })
	// The pipe holds 64 KiB by default: a few hundred records fill it.
	waitLog(t, p, `msg="source opening"`, 30*time.Second)
	time.Sleep(time.Second) // the source appends thousands of records meanwhile
	select {
	case <-p.exited:
		t.Fatalf("sluice exited before the signals: %v\n%s", p.err, tail(logPath))
	default:
	}
	return p, logPath
}

// exitWithin waits for the process to exit, failing after limit.
func exitWithin(t *testing.T, p *proc, limit time.Duration, what string) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(limit):
		t.Fatalf("sluice still runs %v after %s\n%s", limit, what, tail(p.log))
		return nil
	}
}

// A second signal forces the stop: when a task is stuck in a call that ignores cancellation (a
// sink writing to a full pipe), sluice exits with status 1 shortly after abandoning in-flight
// work, instead of waiting for it forever.
func TestSecondSignalForcesExit(t *testing.T) {
	dir := t.TempDir()
	bin := buildSluice(t, dir)
	p, logPath := startStuck(t, bin, dir, "--shutdown-timeout", "10m", "--force-timeout", "1s")
	p.cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(500 * time.Millisecond)
	select {
	case <-p.exited:
		t.Fatalf("sluice stopped on the first signal although its sink is stuck: %v\n%s", p.err, tail(logPath))
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	err := exitWithin(t, p, 30*time.Second, "the second signal")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit %v, want status 1\n%s", err, tail(logPath))
	}
	log, _ := os.ReadFile(logPath)
	for _, want := range []string{`msg="second signal; abandoning in-flight work"`, `msg="a task did not stop after its in-flight work was abandoned; exiting" reason="second signal" waited=1s`} {
		if !strings.Contains(string(log), want) {
			t.Fatalf("the log lacks %s\n%s", want, tail(logPath))
		}
	}
}

// The graceful stop timeout abandons in-flight work too, and a task stuck after that ends the
// process the same way.
func TestShutdownTimeoutForcesExit(t *testing.T) {
	dir := t.TempDir()
	bin := buildSluice(t, dir)
	p, logPath := startStuck(t, bin, dir, "--shutdown-timeout", "1s", "--force-timeout", "1s")
	p.cmd.Process.Signal(syscall.SIGTERM)
	err := exitWithin(t, p, 30*time.Second, "the first signal")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit %v, want status 1\n%s", err, tail(logPath))
	}
	log, _ := os.ReadFile(logPath)
	for _, want := range []string{`msg="graceful stop timed out; abandoning in-flight work"`, `reason="graceful stop timeout"`} {
		if !strings.Contains(string(log), want) {
			t.Fatalf("the log lacks %s\n%s", want, tail(logPath))
		}
	}
}

// A signal while sluice starts stops it cleanly: a node of a replicated log whose other nodes
// are down waits for a leader to read the connectors stored in the log (up to the cluster's
// 10s request timeout); SIGTERM ends the wait at once, and sluice exits with status 0.
func TestSignalWhileStarting(t *testing.T) {
	dir := t.TempDir()
	bin := buildSluice(t, dir)
	pipeline := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(pipeline, []byte(clusterPipeline(dir, 2, freeAddrs(t, 3), 0)), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "sluice.log")
	p := start(t, bin, pipeline, logPath)
	waitLog(t, p, `"msg":"replicated log"`, 30*time.Second)
	time.Sleep(300 * time.Millisecond)
	p.cmd.Process.Signal(syscall.SIGTERM)
	// 3s: far less than the 10s a request to a cluster without a leader waits.
	if err := exitWithin(t, p, 3*time.Second, "the signal"); err != nil {
		t.Fatalf("exit %v, want status 0\n%s", err, tail(logPath))
	}
	log, _ := os.ReadFile(logPath)
	if want := `"msg":"signal received while starting; stopping","signal":"terminated"`; !strings.Contains(string(log), want) {
		t.Fatalf("the log lacks %s\n%s", want, tail(logPath))
	}
}
