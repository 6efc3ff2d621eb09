package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sluice-cdc/sluice/e2e/harness"
)

// options configure a run.
type options struct {
	Bin  string
	Out  string
	Only map[string]bool // nil: all workloads
	Rows int
	// SnapshotRows is the size of W3's table.
	SnapshotRows int
	Duration     time.Duration
	KeepLogs     bool
	// MaxPoll sets the sinks' consumer.override.max.poll.records (0: sluice's default).
	MaxPoll int
}

// bench is one run: the servers, the sluice binaries and the report being filled.
type bench struct {
	opts    options
	dir     string // work dir: logs of sluice, pipeline files, calibration files
	bin     string
	profBin string // bin built with the pprof overlay ("" when that build failed)

	my  *harness.MariaDB
	pg  *harness.Postgres
	rds *harness.Redis
	es  *harness.Elasticsearch

	rep *report
	// backlog of W1, reused by W5.
	myBacklog *myBacklog
	pgBacklog *pgBacklog
	serverID  int // MariaDB reader ids handed out
}

func newBench(opts options) *bench {
	return &bench{opts: opts, rep: &report{Rows: opts.Rows, Started: time.Now().UTC()}}
}

func (b *bench) wants(w string) bool { return b.opts.Only == nil || b.opts.Only[w] }

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (b *bench) reportPath(name string) string { return filepath.Join(b.opts.Out, name) }

// runAll starts the servers, calibrates and runs the chosen workloads in order. A workload's
// failure is recorded and the next one runs; the error returned is only for what stops the
// whole run (servers that do not start, a cancelled context).
func (b *bench) runAll(ctx context.Context) error {
	if err := os.MkdirAll(b.opts.Out, 0o755); err != nil {
		return err
	}
	var err error
	if b.dir, err = os.MkdirTemp("", "sluice-bench-"); err != nil {
		return err
	}
	if err := b.build(ctx); err != nil {
		return err
	}
	if err := b.startServers(ctx); err != nil {
		return err
	}
	b.rep.Machine = describeMachine(ctx, b)
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"calibration", b.calibrate},
		{"W1", b.w1},
		{"W5", b.w5},
		{"W2", b.w2},
		{"W4", b.w4},
		{"W3", b.w3},
	}
	for _, s := range steps {
		if s.name != "calibration" && !b.wants(s.name) {
			b.rep.NotRun = append(b.rep.NotRun, s.name+": not selected (-only)")
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		t0 := time.Now()
		b.progress("== %s", s.name)
		if err := s.fn(ctx); err != nil {
			b.progress("%s failed: %v", s.name, err)
			b.rep.Errors = append(b.rep.Errors, fmt.Sprintf("%s: %v", s.name, err))
		}
		b.rep.StepSeconds = append(b.rep.StepSeconds, stepTime{s.name, time.Since(t0).Seconds()})
		b.progress("== %s done in %v", s.name, time.Since(t0).Round(time.Second))
		// keep what we have after every step
		_ = b.writeReport()
	}
	return nil
}

// build builds the sluice binary (unless -bin names one) and a second one with the pprof
// overlay (profile.go), used for W1's CPU profile.
func (b *bench) build(ctx context.Context) error {
	b.bin = b.opts.Bin
	if b.bin == "" {
		b.bin = filepath.Join(b.dir, "sluice")
		b.progress("building sluice ...")
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", b.bin, "github.com/sluice-cdc/sluice/cmd/sluice").CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %v\n%s", err, out)
		}
	} else if abs, err := filepath.Abs(b.bin); err == nil {
		b.bin = abs
	}
	if p, err := buildProfiled(ctx, b.dir); err != nil {
		b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("the profiled sluice binary did not build (%v): W1 runs without a CPU profile", err))
	} else {
		b.profBin = p
	}
	return nil
}

// startServers starts the four servers in parallel. Elasticsearch runs with its full JIT
// (slower to start, faster warm) and the harness's 512 MiB heap.
func (b *bench) startServers(ctx context.Context) error {
	b.progress("starting MariaDB, PostgreSQL, Redis and Elasticsearch ...")
	t0 := time.Now()
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		m, err := harness.StartMariaDB(gctx, harness.MariaDBOptions{})
		mu.Lock()
		b.my = m
		mu.Unlock()
		return err
	})
	g.Go(func() error {
		// synchronous_commit on (fsync stays off): a commit returns once its WAL is written,
		// and the walsender sends only written WAL, so with it off every change would wait for
		// the WAL writer (wal_writer_delay, 200 ms) before any reader could see it
		p, err := harness.StartPostgres(gctx, harness.PostgresOptions{Settings: []string{"synchronous_commit = on"}})
		mu.Lock()
		b.pg = p
		mu.Unlock()
		return err
	})
	g.Go(func() error {
		r, err := harness.StartRedis(gctx, harness.RedisOptions{})
		mu.Lock()
		b.rds = r
		mu.Unlock()
		return err
	})
	g.Go(func() error {
		es, err := harness.StartElasticsearch(gctx, harness.ElasticsearchOptions{FullJIT: true})
		mu.Lock()
		b.es = es
		mu.Unlock()
		return err
	})
	if err := g.Wait(); err != nil {
		return fmt.Errorf("start servers: %w", err)
	}
	b.progress("servers up in %v", time.Since(t0).Round(100*time.Millisecond))
	return nil
}

// close stops every server and removes the work dir.
func (b *bench) close() {
	var errs []error
	if b.es != nil {
		errs = append(errs, b.es.Close())
	}
	if b.rds != nil {
		errs = append(errs, b.rds.Close())
	}
	if b.pg != nil {
		errs = append(errs, b.pg.Close())
	}
	if b.my != nil {
		errs = append(errs, b.my.Close())
	}
	if b.dir != "" && !b.opts.KeepLogs {
		errs = append(errs, os.RemoveAll(b.dir))
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(os.Stderr, "bench: stop servers: %v\n", err)
	}
}
