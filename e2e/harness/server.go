package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is the lifecycle every started server shares; each server type embeds it. Its methods
// may be called from several goroutines: Start, Stop, Kill, Restart and Close take turns.
type Server struct {
	kind    string
	dir     string
	logPath string

	startTimeout time.Duration
	stopGrace    time.Duration // Stop: time between the graceful signal and SIGKILL
	closeGrace   time.Duration // Close: the same; 0 kills at once (nothing to keep)
	poll         time.Duration // readiness poll interval

	// supplied by the server type
	launch  func() (argv []string, p *proc, err error) // spawn with the current ports
	ready   func(ctx context.Context) error            // nil once the server answers
	repick  func() error                               // choose new ports (first start only)
	onFirst func(ctx context.Context) error            // after the first successful start
	onClose func()                                     // after the process is gone, before the dir is removed

	mu      sync.Mutex
	p       *proc
	started bool // has answered once: ports are fixed from then on
	closed  bool
	took    time.Duration
}

func newServer(kind, dir string) *Server {
	return &Server{
		kind:         kind,
		dir:          dir,
		logPath:      filepath.Join(dir, "server.log"),
		startTimeout: 60 * time.Second,
		stopGrace:    30 * time.Second,
		closeGrace:   10 * time.Second,
		poll:         50 * time.Millisecond,
	}
}

func (s *Server) server() *Server { return s }

// Dir is the server's private state dir (data, config, server.log); Close removes it.
func (s *Server) Dir() string { return s.dir }

// LogPath is the file that collects the server's stdout and stderr.
func (s *Server) LogPath() string { return s.logPath }

// StartDuration is how long the last Start took, from spawning the process to the first
// successful answer (storage initialisation such as initdb is not included).
func (s *Server) StartDuration() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.took
}

// PID is the server's process id (the leader of its process group), 0 when it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil || s.p.exited() {
		return 0
	}
	return s.p.cmd.Process.Pid
}

// Start starts a stopped or killed server again on the same ports and data, and returns once it
// answers. It fails if the server is running.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("start %s: closed", s.kind)
	}
	if s.p != nil && !s.p.exited() {
		return fmt.Errorf("start %s: already running (pid %d)", s.kind, s.p.cmd.Process.Pid)
	}
	return s.startLocked(ctx)
}

// Stop shuts the server down gracefully (SIGTERM, or SIGINT for PostgreSQL's fast shutdown)
// and keeps its data dir for Start. If the server is still running after the grace period
// (30 s), its process group is killed and Stop returns an error saying so.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil || s.p.exited() {
		return nil
	}
	t0 := time.Now()
	s.p.stop(s.stopGrace)
	if time.Since(t0) >= s.stopGrace {
		return fmt.Errorf("stop %s: still running %v after %s, killed", s.kind, s.stopGrace, signalName(s.p.stopSg))
	}
	return nil
}

// Kill sends SIGKILL to the server's process group, as a crash would, and waits until it is
// gone. The data dir stays for Start.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		s.p.kill()
	}
	return nil
}

// Restart is Stop followed by Start.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.Start(ctx)
}

// Close stops the server (its whole process group) and removes its dir. It may be called more
// than once.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.p != nil {
		if s.closeGrace > 0 {
			s.p.stop(s.closeGrace)
		} else {
			s.p.kill()
		}
	}
	if s.onClose != nil {
		s.onClose()
	}
	// a process that left the group (a double fork) must not keep writing into the dir
	for _, pid := range processesIn(s.dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("close %s: %w", s.kind, err)
	}
	return nil
}

// startLocked spawns the server and waits until it answers. Before the first success a port
// taken by someone else makes it pick new ports and try again; later (a restart) it retries the
// same ports for a while, so that clients can reconnect to the address they know.
func (s *Server) startLocked(ctx context.Context) error {
	const attempts = 6
	var lastErr error
	for attempt := 0; attempt < attempts; attempt++ {
		if attempt > 0 {
			if !s.started && s.repick != nil {
				if err := s.repick(); err != nil {
					return fmt.Errorf("start %s: %w", s.kind, err)
				}
			} else {
				select {
				case <-ctx.Done():
					return fmt.Errorf("start %s: %w", s.kind, ctx.Err())
				case <-time.After(time.Duration(attempt) * 500 * time.Millisecond):
				}
			}
		}
		off := fileSize(s.logPath)
		t0 := time.Now()
		argv, p, err := s.launch()
		if err != nil {
			return fmt.Errorf("start %s: %w", s.kind, err)
		}
		wctx, cancel := context.WithTimeout(ctx, s.startTimeout)
		err = waitReady(wctx, p, s.poll, s.ready)
		cancel()
		if err == nil {
			s.p = p
			s.took = time.Since(t0)
			if !s.started && s.onFirst != nil {
				if err := s.onFirst(ctx); err != nil {
					return fmt.Errorf("start %s: prepare: %w; last lines of %s:\n%s", s.kind, err, s.logPath, logTail(s.logPath, 30))
				}
			}
			s.started = true
			return nil
		}
		p.kill()
		lastErr = fmt.Errorf("start %s: %s: %w; last lines of %s:\n%s",
			s.kind, strings.Join(argv, " "), err, s.logPath, logTail(s.logPath, 30))
		if !addrInUse(s.logPath, off) || ctx.Err() != nil {
			return lastErr
		}
	}
	return lastErr
}

// closer is what the test-style constructors register for cleanup.
type closer interface{ Close() error }

// mustStart turns a StartX result into the test-style constructor's: fatal on error, Close
// registered with t.Cleanup.
func mustStart[T closer](t testing.TB, s T, err error) T {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// startOrClean runs the first start and removes the dir when it fails.
func startOrClean(ctx context.Context, s *Server) error {
	s.mu.Lock()
	err := s.startLocked(ctx)
	s.mu.Unlock()
	if err != nil {
		return errors.Join(err, s.Close())
	}
	return nil
}

// baseEnv is the environment of every server: a plain PATH and locale, nothing of the test's.
func baseEnv(extra ...string) []string {
	return append([]string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG=C.UTF-8",
		"TZ=UTC",
	}, extra...)
}

func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGKILL:
		return "SIGKILL"
	}
	return sig.String()
}
