package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Servers shared by the package's tests: started on first use, closed by TestMain.
var shared struct {
	mu       sync.Mutex
	closers  []func() error
	mariadb  *MariaDB
	postgres *Postgres
	redis    *Redis
	es       *Elasticsearch
	kafka    *Kafka
}

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		helperMain()
		return
	}
	code := m.Run()
	for i := len(shared.closers) - 1; i >= 0; i-- {
		if err := shared.closers[i](); err != nil {
			fmt.Fprintln(os.Stderr, "close shared server:", err)
			code = 1
		}
	}
	// the package's own promise: nothing of this process is left behind
	if left := ownDirs(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "harness dirs left behind: %v\n", left)
		code = 1
	}
	os.Exit(code)
}

// ownDirs lists the harness dirs this test process made that still exist.
func ownDirs() []string {
	m, _ := filepath.Glob(filepath.Join(os.TempDir(), fmt.Sprintf("%s*-%d-*", dirPrefix, os.Getpid())))
	return m
}

// sharedServer starts a server once per test binary and logs its start time.
func sharedServer[T closer](t *testing.T, slot *T, start func(context.Context) (T, error)) T {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	var zero T
	if any(*slot) != any(zero) {
		return *slot
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t0 := time.Now()
	s, err := start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("started in %v", time.Since(t0).Round(time.Millisecond))
	*slot = s
	shared.closers = append(shared.closers, s.Close)
	return s
}

func sharedMariaDB(t *testing.T) *MariaDB {
	return sharedServer(t, &shared.mariadb, func(ctx context.Context) (*MariaDB, error) {
		return StartMariaDB(ctx, MariaDBOptions{})
	})
}

func sharedPostgres(t *testing.T) *Postgres {
	return sharedServer(t, &shared.postgres, func(ctx context.Context) (*Postgres, error) {
		return StartPostgres(ctx, PostgresOptions{})
	})
}

func sharedRedis(t *testing.T) *Redis {
	return sharedServer(t, &shared.redis, func(ctx context.Context) (*Redis, error) {
		return StartRedis(ctx, RedisOptions{})
	})
}

func sharedElasticsearch(t *testing.T) *Elasticsearch {
	return sharedServer(t, &shared.es, func(ctx context.Context) (*Elasticsearch, error) {
		return StartElasticsearch(ctx, ElasticsearchOptions{})
	})
}

func sharedKafka(t *testing.T) *Kafka {
	return sharedServer(t, &shared.kafka, func(ctx context.Context) (*Kafka, error) {
		return StartKafka(ctx, KafkaOptions{})
	})
}

// testCtx is a context for one test's client calls.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// restartAll is the restart guarantee each server must keep: same address, and for the
// persistent servers the same data, after Stop/Start and after Kill/Start.
func checkRestart(t *testing.T, s *Server, addr func() string, check func(t *testing.T)) {
	t.Helper()
	before := addr()
	pid := s.PID()
	if err := s.Restart(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted in %v", s.StartDuration().Round(time.Millisecond))
	if got := addr(); got != before {
		t.Fatalf("address after restart = %s, want %s", got, before)
	}
	if s.PID() == pid || s.PID() == 0 {
		t.Fatalf("pid after restart = %d, before %d: want a new process", s.PID(), pid)
	}
	if !processGone(pid) {
		t.Fatalf("old process %d still running after restart", pid)
	}
	check(t)
}

func checkKill(t *testing.T, s *Server, addr func() string, check func(t *testing.T)) {
	t.Helper()
	before := addr()
	pid := s.PID()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if !processGone(pid) {
		t.Fatalf("process %d still running after Kill", pid)
	}
	if s.PID() != 0 {
		t.Fatalf("PID() after Kill = %d, want 0", s.PID())
	}
	if err := s.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Logf("started after kill in %v", s.StartDuration().Round(time.Millisecond))
	if got := addr(); got != before {
		t.Fatalf("address after kill and start = %s, want %s", got, before)
	}
	check(t)
}

// processGone tells whether pid has exited (a zombie counts as gone).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && strings.HasPrefix(string(b[i+1:]), " Z")
}
