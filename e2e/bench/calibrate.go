package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// Limit names, used by the workloads' ratios.
const (
	limDisk      = "fdatasync'd sequential write"
	limESBulk    = "raw ES bulk load"
	limRedisHSET = "raw pipelined Redis HSET"
	limMyCommit1 = "MariaDB single-row commits, 1 connection"
	limMyCommit8 = "MariaDB single-row commits, 8 connections"
	limPGCommit1 = "PostgreSQL single-row commits, 1 connection"
	limPGCommit8 = "PostgreSQL single-row commits, 8 connections"
	limMyDecode  = "raw go-mysql binlog decode (W1 backlog)"
	limPGDecode  = "raw pglogrepl receive (W1 backlog)"
	limMySelect  = "MariaDB SELECT * scan (W3 table)"
	limPGCopy    = "PostgreSQL COPY TO scan (W3 table)"
)

// calibrate measures the limits that do not need a workload's data.
func (b *bench) calibrate(ctx context.Context) error {
	if err := b.calDisk(); err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	if err := b.calRedis(ctx, ""); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	if err := b.calES(ctx, ""); err != nil {
		return fmt.Errorf("elasticsearch: %w", err)
	}
	if err := b.calCommits(ctx); err != nil {
		return fmt.Errorf("commit rate: %w", err)
	}
	return nil
}

// calDisk writes 1 MiB blocks to a file beside the logs, fdatasync after each, for 3 s.
func (b *bench) calDisk() error {
	path := filepath.Join(b.dir, "disk-calibration")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	defer f.Close()
	buf := bytes.Repeat([]byte("sluice-bench-0123456789abcdef\n"), (1<<20)/30+1)[:1<<20]
	t0 := time.Now()
	var n int64
	for time.Since(t0) < 3*time.Second && n < 2<<30 {
		if _, err := f.Write(buf); err != nil {
			return err
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return err
		}
		n += int64(len(buf))
	}
	b.addLimit(limDisk, float64(n)/time.Since(t0).Seconds()/1e6, "MB/s", "1 MiB writes, fdatasync after each, 3 s, same filesystem as the logs")
	return nil
}

// calRedis: HSET of 4 fields per row, pipelines of 1,000, one connection.
// The views live in database 0; the calibration writes to database 1 and empties it after.
func (b *bench) calRedis(ctx context.Context, suffix string) error {
	rc := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", b.rds.Port), DB: 1})
	defer rc.Close()
	n := min(b.opts.Rows, 300_000)
	t0 := time.Now()
	for i := 0; i < n; i += 1000 {
		p := rc.Pipeline()
		for j := i; j < min(i+1000, n); j++ {
			p.HSet(ctx, "cal:"+strconv.Itoa(j), "id", j, "v", j%1000, "s", "bulk row "+strconv.Itoa(j), "ts", "1764480000000000")
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
	}
	rate := float64(n) / time.Since(t0).Seconds()
	b.addLimit(limRedisHSET+suffix, rate, "rows/s", fmt.Sprintf("go-redis, %d rows, HSET of the 4 columns, pipelines of 1,000, one connection", n))
	return rc.FlushDB(ctx).Err()
}

// calES: bulk-index documents of the benchmark's shape into a fresh index (1 shard, no replica,
// refresh 1s), 5,000 per request, two requests in flight, after a warm-up load of 20,000.
func (b *bench) calES(ctx context.Context, suffix string) error {
	if suffix == "" {
		if _, err := b.esLoad(ctx, "calibration-warmup", 20_000); err != nil {
			return err
		}
	}
	n := min(b.opts.Rows, 300_000)
	took, err := b.esLoad(ctx, "calibration", n)
	if err != nil {
		return err
	}
	b.addLimit(limESBulk+suffix, float64(n)/took.Seconds(), "rows/s", fmt.Sprintf("%d docs of the same shape, _bulk of 5,000, 2 in flight, 1 shard, refresh 1s, no versioning, after a 20,000-doc warm-up", n))
	return nil
}

// esLoad bulk-loads n documents into a new index, deletes it and returns the load's duration.
func (b *bench) esLoad(ctx context.Context, index string, n int) (time.Duration, error) {
	url := b.es.URL()
	if _, err := httpDo(ctx, "PUT", url+"/"+index, []byte(`{"settings":{"number_of_shards":1,"number_of_replicas":0,"refresh_interval":"1s"}}`), 200); err != nil {
		return 0, err
	}
	const per = 5000
	var next atomic.Int64
	t0 := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for range 2 {
		g.Go(func() error {
			var buf bytes.Buffer
			for {
				start := int(next.Add(per)) - per
				if start >= n {
					return nil
				}
				buf.Reset()
				for i := start; i < min(start+per, n); i++ {
					fmt.Fprintf(&buf, "{\"index\":{\"_id\":\"%d\"}}\n{\"id\":%d,\"v\":%d,\"s\":\"bulk row %d\",\"ts\":%d}\n", i, i, i%1000, i, 1764480000000000+int64(i))
				}
				body, err := httpDo(gctx, "POST", url+"/"+index+"/_bulk", buf.Bytes(), 200)
				if err != nil {
					return err
				}
				if bytes.Contains(body[:min(len(body), 200)], []byte(`"errors":true`)) {
					return fmt.Errorf("bulk load: item errors: %.300s", body)
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	took := time.Since(t0)
	_, err := httpDo(ctx, "DELETE", url+"/"+index, nil, 200)
	return took, err
}

// calCommits: autocommit single-row INSERTs for 3 s, from 1 and from 8 connections.
func (b *bench) calCommits(ctx context.Context) error {
	c, err := b.myConn("")
	if err != nil {
		return err
	}
	err = myExec(c, "CREATE DATABASE cal", fmt.Sprintf(myTableDDL, "cal"))
	c.Close()
	if err != nil {
		return err
	}
	pc, err := b.pgConn(ctx)
	if err != nil {
		return err
	}
	err = pgExec(ctx, pc, "CREATE SCHEMA cal", fmt.Sprintf(pgTableDDL, "cal"))
	pc.Close(ctx)
	if err != nil {
		return err
	}
	var id atomic.Int64
	for _, conns := range []int{1, 8} {
		for _, kind := range []string{"mysql", "postgres"} {
			w, err := b.newWriters(ctx, kind, "cal", conns)
			if err != nil {
				return err
			}
			var count atomic.Int64
			var wg sync.WaitGroup
			var werr atomic.Value
			deadline := time.Now().Add(3 * time.Second)
			t0 := time.Now()
			for i := range conns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(deadline) {
						if err := w.insert(ctx, i, id.Add(1)); err != nil {
							werr.Store(err)
							return
						}
						count.Add(1)
					}
				}()
			}
			wg.Wait()
			el := time.Since(t0)
			w.close(ctx)
			if e, ok := werr.Load().(error); ok {
				return e
			}
			name := map[string]string{"mysql1": limMyCommit1, "mysql8": limMyCommit8, "postgres1": limPGCommit1, "postgres8": limPGCommit8}[kind+strconv.Itoa(conns)]
			b.addLimit(name, float64(count.Load())/el.Seconds(), "commits/s", "autocommit INSERT of one row, 3 s")
		}
	}
	return nil
}
