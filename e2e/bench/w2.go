package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// live is a streaming pipeline on an empty table, with its sluice node.
type live struct {
	p        pipe
	n        *node
	pipeline string // path of the pipeline file (for restarts)
	w        *writers
	src      sourceRows
}

// startLive makes table db.t (empty), starts sluice on it with both sinks and waits until a
// probe row (id 0) is in both views.
func (b *bench) startLive(ctx context.Context, w, kind, db string) (*live, error) {
	l := &live{}
	prefix := "my"
	if kind == "mysql" {
		c, err := b.myConn("")
		if err != nil {
			return nil, err
		}
		err = myExec(c, "CREATE DATABASE "+db, fmt.Sprintf(myTableDDL, db))
		c.Close()
		if err != nil {
			return nil, err
		}
		l.src = b.mySource(db)
	} else {
		prefix = "pg"
		c, err := b.pgConn(ctx)
		if err != nil {
			return nil, err
		}
		err = pgExec(ctx, c, "CREATE SCHEMA "+db, fmt.Sprintf(pgTableDDL, db), fmt.Sprintf("CREATE PUBLICATION bench_%s FOR TABLE %s.t", db, db))
		c.Close(ctx)
		if err != nil {
			return nil, err
		}
		l.src = b.pgSource(db)
	}
	p := b.newPipe(kind, prefix, db)
	p.SnapshotMode, p.Sinks = "no_data", true
	b.serverID++
	p.ServerID, p.Slot, p.Publication = 5500+b.serverID, "bench_"+db, "bench_"+db
	dir := filepath.Join(b.dir, w+"-"+kind)
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p.LogDir, p.API = filepath.Join(dir, "log"), fmt.Sprintf("127.0.0.1:%d", port)
	text, err := p.render()
	if err != nil {
		return nil, err
	}
	l.p = p
	l.pipeline = filepath.Join(dir, "pipeline.yaml")
	if l.n, err = b.startNode(ctx, b.bin, w+"-"+kind, dir, p.API, text); err != nil {
		return nil, err
	}
	if l.w, err = b.newWriters(ctx, kind, db, 8); err != nil {
		l.close(ctx)
		return nil, err
	}
	// the source may take a moment to reach streaming: write the probe until it shows up
	deadline := time.Now().Add(90 * time.Second)
	rc := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", b.rds.Port)})
	defer rc.Close()
	if err := l.w.insert(ctx, 0, 0); err != nil {
		l.close(ctx)
		return nil, fmt.Errorf("probe row: %w", err)
	}
	for {
		n, _ := rc.Exists(ctx, p.topic()+":0").Result()
		_, esErr := httpDo(ctx, "GET", b.es.URL()+"/"+strings.ToLower(p.topic())+"/_doc/0", nil, 200)
		if n == 1 && esErr == nil {
			return l, nil
		}
		if time.Now().After(deadline) {
			err := l.n.checkTasks(ctx, "src", "es", "redis")
			l.close(ctx)
			return nil, fmt.Errorf("the probe row did not reach both views in 90s (task state: %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (l *live) close(ctx context.Context) {
	if l.w != nil {
		l.w.close(ctx)
	}
	if l.n != nil {
		l.n.kill()
	}
}

// waitVisible waits until every id in [lo, hi] is visible in both views, up to timeout.
func waitVisible(ctx context.Context, lo, hi int64, timeout time.Duration, views ...*visibility) bool {
	deadline := time.Now().Add(timeout)
	next := lo
	for next <= hi {
		all := true
		for _, v := range views {
			if !v.has(next) {
				all = false
			}
		}
		if all {
			next++
			continue
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// w2 is the latency ladder: an open-loop writer at 1k, 5k and the highest rate the source
// sustains (0.8 of the 8-connection commit rate measured by the calibration).
func (b *bench) w2(ctx context.Context) error {
	var errs []error
	for _, kind := range []string{"mysql", "postgres"} {
		if err := b.w2Source(ctx, kind); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", kind, err))
		}
	}
	return joinErrs(errs)
}

func srcName(kind string) string {
	if kind == "mysql" {
		return "mariadb"
	}
	return "postgres"
}

// topRate is the highest rung of the ladder for a source.
func (b *bench) topRate(kind string) float64 {
	lim := b.rep.limit(limMyCommit8)
	if kind != "mysql" {
		lim = b.rep.limit(limPGCommit8)
	}
	return math.Floor(lim*0.8/100) * 100
}

func (b *bench) w2Source(ctx context.Context, kind string) error {
	l, err := b.startLive(ctx, "W2", kind, "w2")
	if err != nil {
		return err
	}
	defer l.close(ctx)
	name := srcName(kind)
	if kind == "mysql" {
		b.note("W2/W4: latency = the time a row's first HSET reached the bench through Redis keyspace notifications, or the arrival of the first Elasticsearch search response (polled every 50 ms, refresh interval %s) holding it, minus the row's commit-time column (SYSDATE(6) / clock_timestamp(), same clock); 8 writer connections, one row per transaction, on an open-loop schedule", esRefresh)
	}
	rvis := newVisibility()
	stopRedis, err := b.watchRedis(ctx, l.p.topic(), rvis)
	if err != nil {
		return err
	}
	defer stopRedis()
	rates := []float64{1000, 5000}
	if top := b.topRate(kind); top > 5000 {
		rates = append(rates, top)
	} else {
		b.note("W2 %s: the source's 8-connection commit rate (%.0f/s) is not above 5k/s: no third rung", name, top/0.8)
	}
	for i, rate := range rates {
		lo := int64(i+1) * 10_000_000
		evis := newVisibility()
		stopES := b.watchES(ctx, strings.ToLower(l.p.topic()), lo, evis)
		b.progress("W2 %s: %.0f rows/s for %v ...", name, rate, b.opts.Duration)
		ol := l.w.runOpenLoop(ctx, rate, b.opts.Duration, lo)
		if err := ol.err(); err != nil {
			stopES()
			return fmt.Errorf("writer at %.0f/s: %w", rate, err)
		}
		sent := ol.sent.Load()
		hi := lo + int64(rate*b.opts.Duration.Seconds()) - 1
		drained := waitVisible(ctx, lo, hi, 60*time.Second, rvis, evis)
		stopES()
		if err := l.n.checkTasks(ctx, "src", "es", "redis"); err != nil {
			return err
		}
		rows, err := readRows(ctx, l.src, lo, hi)
		if err != nil {
			return err
		}
		rl, el := latencies(rows, rvis), latencies(rows, evis)
		rs, es := seen(rl), seen(el)
		rung := fmt.Sprintf("%s @ %.0f/s", name, rate)
		achieved := float64(sent) / ol.elapsed.Seconds()
		b.addFigure("W2", rung+": writer achieved", achieved, "rows/s", "", fmt.Sprintf("target %.0f/s; %d rows in %.1f s; schedule at worst %v behind", rate, sent, ol.elapsed.Seconds(), time.Duration(ol.maxBehind.Load()).Round(time.Millisecond)))
		for _, v := range []struct {
			view string
			xs   []float64
			lat  []float64
		}{{"Redis", rs, rl}, {"Elasticsearch (refresh " + esRefresh + ")", es, el}} {
			note := fmt.Sprintf("%d of %d rows seen; latency grew %.0f ms/s over the rung; lag bounded: %v", len(v.xs), len(v.lat), lagSlope(rows, v.lat), drained && bounded(rows, v.lat))
			b.addFigure("W2", rung+": "+v.view+" p50", percentile(v.xs, 0.5), "ms", "", note)
			b.addFigure("W2", rung+": "+v.view+" p99", percentile(v.xs, 0.99), "ms", "", "")
			b.addFigure("W2", rung+": "+v.view+" p99.9", percentile(v.xs, 0.999), "ms", "", "")
		}
		if rate == 5000 {
			p99r, p99e := percentile(rs, 0.99), percentile(es, 0.99)
			b.addGoal("W2", name+": p99 commit-to-Redis <= 100 ms at 5k rows/s", fmt.Sprintf("%.0f ms (%d/%d rows seen, writer %.0f/s)", p99r, len(rs), len(rl), achieved), p99r <= 100 && len(rs) == len(rl))
			b.addGoal("W2", name+": p99 commit-to-Elasticsearch <= refresh 1 s + 250 ms at 5k rows/s", fmt.Sprintf("%.0f ms (%d/%d rows seen)", p99e, len(es), len(el)), p99e <= 1250 && len(es) == len(el))
		}
		if !drained {
			b.note("W2 %s: not every row reached both views within 60 s after the writer stopped", rung)
		}
	}
	if !b.checkViews(ctx, "W2", l.p) {
		return fmt.Errorf("parity check failed")
	}
	return l.n.stop()
}

// esIndexing returns an index's primary indexing operations and document count.
func (b *bench) esIndexing(ctx context.Context, index string) (ops, docs int64, err error) {
	if _, err := httpDo(ctx, "POST", b.es.URL()+"/"+index+"/_refresh", nil, 200); err != nil {
		return 0, 0, err
	}
	body, err := httpDo(ctx, "GET", b.es.URL()+"/"+index+"/_stats/indexing,docs", nil, 200)
	if err != nil {
		return 0, 0, err
	}
	var s struct {
		All struct {
			Primaries struct {
				Indexing struct {
					IndexTotal int64 `json:"index_total"`
				} `json:"indexing"`
				Docs struct {
					Count int64 `json:"count"`
				} `json:"docs"`
			} `json:"primaries"`
		} `json:"_all"`
	}
	if err := json.Unmarshal(body, &s); err != nil {
		return 0, 0, err
	}
	return s.All.Primaries.Indexing.IndexTotal, s.All.Primaries.Docs.Count, nil
}
