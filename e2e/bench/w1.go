package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// drained is what a drain measured.
type drained struct {
	log, redis, es, views time.Duration // from the process start to each point
	cpu                   time.Duration
	rss                   int64
	logBytes              int64
}

// drain waits until the pipe's topic holds want records and both sinks have committed them
// (when the pipe has sinks), polling the node's API. It fails on a FAILED task, on a process
// exit and after timeout.
func (b *bench) drain(ctx context.Context, n *node, p pipe, want int64, started time.Time, timeout time.Duration) (drained, error) {
	var d drained
	topic := p.topic()
	lastLog := time.Now()
	deadline := started.Add(timeout)
	for {
		now := time.Now()
		hw, size, err := n.topicRecords(ctx, topic)
		if err != nil {
			return d, err
		}
		if d.log == 0 && hw >= want {
			d.log = now.Sub(started)
			d.logBytes = size
		}
		var cr, ce int64
		if p.Sinks {
			if cr, _, err = n.sinkCommitted(ctx, "redis"); err != nil {
				return d, err
			}
			if ce, _, err = n.sinkCommitted(ctx, "es"); err != nil {
				return d, err
			}
			if d.redis == 0 && cr >= want {
				d.redis = now.Sub(started)
			}
			if d.es == 0 && ce >= want {
				d.es = now.Sub(started)
			}
		}
		if d.log > 0 && (!p.Sinks || (d.redis > 0 && d.es > 0)) {
			d.views = max(d.log, d.redis, d.es)
			d.cpu, d.rss = n.cpu(), n.peakRSS()
			return d, nil
		}
		if time.Since(lastLog) > 10*time.Second {
			b.progress("  %s: log %d/%d, redis %d, es %d (%v)", topic, hw, want, cr, ce, time.Since(started).Round(time.Second))
			lastLog = time.Now()
			if err := n.checkTasks(ctx, "src", "es", "redis"); err != nil && p.Sinks {
				return d, err
			}
		}
		if now.After(deadline) {
			return d, fmt.Errorf("%s not drained in %v: log %d/%d, redis %d, es %d", topic, timeout, hw, want, cr, ce)
		}
		if n.exited() {
			return d, fmt.Errorf("sluice exited: %v", n.exitErr())
		}
		select {
		case <-ctx.Done():
			return d, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (b *bench) drainTimeout() time.Duration {
	return max(5*time.Minute, time.Duration(b.opts.Rows/1000)*time.Second)
}

// w1 is the backlog drain: the backlog is written first, then sluice starts and drains it into
// the log, Elasticsearch and Redis.
func (b *bench) w1(ctx context.Context) error {
	var errs []error
	if err := b.w1MySQL(ctx); err != nil {
		errs = append(errs, fmt.Errorf("mariadb: %w", err))
	}
	if err := b.w1Postgres(ctx); err != nil {
		errs = append(errs, fmt.Errorf("postgres: %w", err))
	}
	return joinErrs(errs)
}

func joinErrs(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return fmt.Errorf("%v; %v", errs[0], joinErrs(errs[1:]))
}

func (b *bench) ensureMyBacklog(ctx context.Context) error {
	if b.myBacklog != nil {
		return nil
	}
	b.progress("writing the MariaDB backlog: %d rows ...", b.opts.Rows)
	bl, err := b.makeMyBacklog(ctx, "w1", b.opts.Rows)
	if err != nil {
		return fmt.Errorf("backlog: %w", err)
	}
	b.myBacklog = bl
	bulk, singles := backlogMix(b.opts.Rows)
	b.progress("backlog written in %v (%d transactions of 1,000 rows, %d single-row ones)", bl.writeTime.Round(time.Second), bulk, singles)
	took, err := b.rawBinlogDecode(ctx, bl)
	if err != nil {
		return fmt.Errorf("raw binlog decode: %w", err)
	}
	b.addLimit(limMyDecode, float64(bl.rows)/took.Seconds(), "rows/s", "go-mysql BinlogSyncer, no-op handler, the whole W1 backlog")
	return nil
}

func (b *bench) ensurePGBacklog(ctx context.Context) error {
	if b.pgBacklog != nil {
		return nil
	}
	b.progress("writing the PostgreSQL backlog: %d rows ...", b.opts.Rows)
	bl, err := b.makePGBacklog(ctx, "w1", b.opts.Rows, "raw", "w1", "w5")
	if err != nil {
		return fmt.Errorf("backlog: %w", err)
	}
	b.pgBacklog = bl
	b.progress("backlog written in %v", bl.writeTime.Round(time.Second))
	took, err := b.rawPGReceive(ctx, bl, bl.slots["raw"])
	if err != nil {
		return fmt.Errorf("raw pglogrepl receive: %w", err)
	}
	b.addLimit(limPGDecode, float64(bl.rows)/took.Seconds(), "rows/s", "pglogrepl, pgoutput v2, every message parsed, the whole W1 backlog")
	return nil
}

func (b *bench) w1MySQL(ctx context.Context) error {
	if err := b.ensureMyBacklog(ctx); err != nil {
		return err
	}
	p := b.newPipe("mysql", "my", "w1")
	p.ServerID, p.SnapshotMode, p.Sinks = 5401, "never", true
	return b.runDrain(ctx, "W1", "mariadb", p, limMyDecode, true, false)
}

func (b *bench) w1Postgres(ctx context.Context) error {
	if err := b.ensurePGBacklog(ctx); err != nil {
		return err
	}
	p := b.newPipe("postgres", "pg", "w1")
	p.Slot, p.Publication, p.SnapshotMode, p.Sinks = b.pgBacklog.slots["w1"], b.pgBacklog.pub, "no_data", true
	return b.runDrain(ctx, "W1", "postgres", p, limPGDecode, true, false)
}

// runDrain runs one backlog drain and records its figures, goal and parity. With cluster set,
// the log is a 3-node cluster on loopback: node 1 runs the connectors, nodes 2 and 3 only
// replicate.
func (b *bench) runDrain(ctx context.Context, w, src string, p pipe, decodeLimit string, profiled, cluster bool) error {
	dir := filepath.Join(b.dir, w+"-"+src)
	port, err := freePort()
	if err != nil {
		return err
	}
	p.LogDir, p.API = filepath.Join(dir, "log"), fmt.Sprintf("127.0.0.1:%d", port)
	var others []*node
	defer func() {
		for _, o := range others {
			o.kill()
		}
	}()
	var otherPipes []pipe
	if cluster {
		var addrs []string
		for i := 1; i <= 3; i++ {
			rp, err := freePort()
			if err != nil {
				return err
			}
			addrs = append(addrs, fmt.Sprintf("%d=127.0.0.1:%d", i, rp))
		}
		p.ClusterID, p.ClusterNodes = 1, strings.Join(addrs, ", ")
		for i := 2; i <= 3; i++ {
			op := p
			ap, err := freePort()
			if err != nil {
				return err
			}
			op.ClusterID, op.SinkOnly = i, true
			op.LogDir, op.API = filepath.Join(dir, fmt.Sprintf("node%d", i), "log"), fmt.Sprintf("127.0.0.1:%d", ap)
			otherPipes = append(otherPipes, op)
		}
	}
	text, err := p.render()
	if err != nil {
		return err
	}
	bin, env := b.bin, []string(nil)
	profPath := ""
	if profiled && b.profBin != "" {
		abs, _ := filepath.Abs(b.reportPath(fmt.Sprintf("%s-%s.cpu.pprof", w, src)))
		profPath = abs
		bin, env = b.profBin, []string{"SLUICE_BENCH_CPUPROFILE=" + profPath}
		os.Remove(profPath + ".done")
	}
	// the sinks' limits again, right before the drain: the machine is shared, and a limit
	// measured minutes earlier may have met other load
	suffix := fmt.Sprintf(", just before %s %s", w, src)
	if err := b.calRedis(ctx, suffix); err != nil {
		return fmt.Errorf("redis limit: %w", err)
	}
	if err := b.calES(ctx, suffix); err != nil {
		return fmt.Errorf("elasticsearch limit: %w", err)
	}
	// the nodes of a cluster start together: none answers before the log has a leader
	type started struct {
		n   *node
		err error
	}
	ch := make(chan started, len(otherPipes))
	for i, op := range otherPipes {
		go func() {
			text, err := op.render()
			if err != nil {
				ch <- started{err: err}
				return
			}
			n, err := b.startNode(ctx, b.bin, fmt.Sprintf("%s-%s-node%d", w, src, i+2), filepath.Join(dir, fmt.Sprintf("node%d", i+2)), op.API, text)
			ch <- started{n, err}
		}()
	}
	t0 := time.Now()
	n, err := b.startNode(ctx, bin, w+"-"+src, dir, p.API, text, env...)
	for range otherPipes {
		s := <-ch
		if s.n != nil {
			others = append(others, s.n)
		}
		if s.err != nil && err == nil {
			err = s.err
		}
	}
	if err != nil {
		if n != nil {
			n.kill()
		}
		return err
	}
	defer n.kill()
	started0 := t0
	b.progress("%s %s: sluice draining %d rows into the log, Elasticsearch and Redis ...", w, src, b.opts.Rows)
	shares := b.startCPU(n.cmd.Process.Pid)
	d, err := b.drain(ctx, n, p, int64(b.opts.Rows), started0, b.drainTimeout())
	if err != nil {
		return err
	}
	b.cpuFigures(w, src, shares, float64(b.opts.Rows))
	if profPath != "" {
		if err := stopProfile(n, profPath); err != nil {
			b.note("%s %s: %v", w, src, err)
		} else if flat, cum, err := summarizeProfile(ctx, bin, profPath); err != nil {
			b.note("%s %s: %v", w, src, err)
		} else {
			b.rep.Profiles = append(b.rep.Profiles, profile{Workload: w + " " + src, File: filepath.Base(profPath), Flat: flat, Cum: cum})
		}
	}
	if err := n.stop(); err != nil {
		b.note("%s %s: sluice stop: %v", w, src, err)
	}
	for _, o := range others {
		if err := o.stop(); err != nil {
			b.note("%s %s: sluice stop: %v", w, src, err)
		}
	}
	rows := float64(b.opts.Rows)
	tag := src
	b.addFigure(w, tag+": source into the log", rows/d.log.Seconds(), "rows/s", decodeLimit, fmt.Sprintf("%.1f s", d.log.Seconds()))
	b.addFigure(w, tag+": log write bandwidth", float64(d.logBytes)/d.log.Seconds()/1e6, "MB/s", limDisk, fmt.Sprintf("%.0f MB of topic data", float64(d.logBytes)/1e6))
	b.addFigure(w, tag+": into Redis", rows/d.redis.Seconds(), "rows/s", limRedisHSET+suffix, fmt.Sprintf("%.1f s", d.redis.Seconds()))
	b.addFigure(w, tag+": into Elasticsearch", rows/d.es.Seconds(), "rows/s", limESBulk+suffix, fmt.Sprintf("%.1f s", d.es.Seconds()))
	// the goal's limit: the slower of source decode and sink apply
	lim := b.rep.limit(decodeLimit)
	limName := decodeLimit
	for _, l := range []string{limRedisHSET + suffix, limESBulk + suffix} {
		if v := b.rep.limit(l); v > 0 && v < lim {
			lim, limName = v, l
		}
	}
	goalLimit := fmt.Sprintf("%s %s limit: slower of decode and sink apply", w, src)
	b.rep.Limits = append(b.rep.Limits, figure{Workload: w, Name: goalLimit, Value: lim, Unit: "rows/s", Note: "= " + limName})
	f := b.addFigure(w, tag+": end to end (log and both views)", rows/d.views.Seconds(), "rows/s", goalLimit, fmt.Sprintf("%.1f s", d.views.Seconds()))
	b.addFigure(w, tag+": sluice peak RSS", float64(d.rss)/(1<<20), "MiB", "", "")
	if w == "W1" {
		b.addGoal(w, src+": end-to-end drain >= 0.8 of the slower of decode and sink apply", fmt.Sprintf("%s rows/s = %.2f of %s rows/s (%s)", num(f.Value), f.Ratio, num(lim), limName), f.Ratio >= 0.8)
	}
	if !b.checkViews(ctx, w, p) {
		return fmt.Errorf("parity check failed")
	}
	return nil
}

// cpuFigures records where the machine's CPU went during a drain: CPU seconds per 1M rows of
// sluice and of each server, and how busy the machine was.
func (b *bench) cpuFigures(w, src string, c *cpuShares, rows float64) {
	use, busy := c.stop()
	b.cpuFiguresOf(w, src, use, busy, rows)
}

// cpuFiguresOf records CPU figures measured earlier (a stopped process's CPU can no longer be read).
func (b *bench) cpuFiguresOf(w, src string, use map[string]float64, busy, rows float64) {
	for _, name := range []string{"sluice", "elasticsearch", "redis", "mariadb", "postgres", "other processes"} {
		if v, ok := use[name]; ok && v > 0.05 {
			b.addFigure(w, fmt.Sprintf("%s: CPU of %s per 1M rows", src, name), v*1e6/rows, "CPU s", "", "process group, over the drain")
		}
	}
	b.addFigure(w, src+": machine CPU busy during the drain", busy*100, "%", "", fmt.Sprintf("of %d cores", runtime.NumCPU()))
	var ours float64
	for name, v := range use {
		if name != "other processes" {
			ours += v
		}
	}
	if other := use["other processes"]; other > 0.25*ours {
		b.note("%s %s: the machine was shared: other processes (other work on the machine and the bench command itself) used %.0f CPU s during the drain, sluice and its servers %.0f CPU s", w, src, other, ours)
	}
}
