package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// w4 is crash recovery: the open-loop writer at half the top W2 rate; halfway through, sluice is
// killed with SIGKILL and started again at once on the same log. Measured: time from the restart
// to the first row written into Redis, catch-up time (until every row committed before the
// restart is in both views), duplicates applied (Redis rows written more than once; Elasticsearch
// index operations beyond one per document), and lost rows (the parity check after the run).
func (b *bench) w4(ctx context.Context) error {
	var errs []error
	for _, kind := range []string{"mysql", "postgres"} {
		if err := b.w4Source(ctx, kind); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", kind, err))
		}
	}
	return joinErrs(errs)
}

func (b *bench) w4Source(ctx context.Context, kind string) error {
	name := srcName(kind)
	l, err := b.startLive(ctx, "W4", kind, "w4")
	if err != nil {
		return err
	}
	defer l.close(ctx)
	rvis, evis := newVisibility(), newVisibility()
	stopRedis, err := b.watchRedis(ctx, l.p.topic(), rvis)
	if err != nil {
		return err
	}
	defer stopRedis()
	const lo = 1
	index := strings.ToLower(l.p.topic())
	stopES := b.watchES(ctx, index, lo, evis)
	defer stopES()
	rate := max(b.topRate(kind)/2, 1000)
	d := max(b.opts.Duration, 20*time.Second)
	b.progress("W4 %s: %.0f rows/s for %v, kill -9 of sluice at %v ...", name, rate, d, d/2)
	type restart struct {
		kill, start, up time.Time
		err             error
	}
	rs := make(chan restart, 1)
	go func() {
		select {
		case <-ctx.Done():
			rs <- restart{err: ctx.Err()}
			return
		case <-time.After(d / 2):
		}
		var r restart
		r.kill = time.Now()
		l.n.kill()
		r.start = time.Now()
		n, err := b.runNode(ctx, b.bin, l.n.name, l.n.dir, strings.TrimPrefix(l.n.api, "http://"), l.pipeline)
		r.up, r.err = time.Now(), err
		if err == nil {
			l.n = n
		}
		rs <- r
	}()
	ol := l.w.runOpenLoop(ctx, rate, d, lo)
	r := <-rs
	if r.err != nil {
		return fmt.Errorf("restart: %w", r.err)
	}
	if err := ol.err(); err != nil {
		return fmt.Errorf("writer: %w", err)
	}
	hi := lo + int64(rate*d.Seconds()) - 1
	drained := waitVisible(ctx, lo, hi, 120*time.Second, rvis, evis)
	if err := l.n.checkTasks(ctx, "src", "es", "redis"); err != nil {
		return err
	}
	rows, err := readRows(ctx, l.src, lo, hi)
	if err != nil {
		return err
	}
	first, ok := rvis.firstAfter(r.start)
	ttfe := first.Sub(r.start)
	if !ok {
		ttfe = -1
	}
	// catch-up: until every row committed before the restart is in both views
	var catch time.Duration
	before := 0
	for _, row := range rows {
		if time.UnixMicro(row.TS).After(r.start) {
			continue
		}
		before++
		for _, v := range []*visibility{rvis, evis} {
			if t, ok := v.when(row.ID); ok && t.Sub(r.start) > catch {
				catch = t.Sub(r.start)
			}
		}
	}
	ops, docs, err := b.esIndexing(ctx, index)
	if err != nil {
		return err
	}
	dupES := ops - docs
	dupRedis := rvis.duplicates()
	tag := name + " @ " + fmt.Sprintf("%.0f/s", rate)
	b.addFigure("W4", tag+": API up after restart", r.up.Sub(r.start).Seconds(), "s", "", "exec to /health answering")
	b.addFigure("W4", tag+": first event after restart", ttfe.Seconds(), "s", "", "exec of the new process to the first row written into Redis")
	b.addFigure("W4", tag+": catch-up", catch.Seconds(), "s", "", fmt.Sprintf("until all %d rows committed before the restart were in both views", before))
	b.addFigure("W4", tag+": duplicates applied to Redis", float64(dupRedis), "writes", "", "row writes beyond one per row: rows of the write in flight at the kill, written again with the same version after the restart")
	b.addFigure("W4", tag+": duplicates applied to Elasticsearch", float64(dupES), "index ops", "", "index operations beyond one per document: external_gte accepts a write again at the same version")
	lost := int64(len(rows)) - int64(countSeen(rows, rvis))
	b.addFigure("W4", tag+": rows missing from Redis after catch-up", float64(lost), "rows", "", fmt.Sprintf("%d rows written; all visible: %v", len(rows), drained))
	b.addGoal("W4", name+": first event <= 2 s after restart", fmt.Sprintf("%.2f s", ttfe.Seconds()), ok && ttfe <= 2*time.Second)
	par := b.checkViews(ctx, "W4", l.p)
	b.addGoal("W4", name+": 0 rows lost (parity of both views with the table)", fmt.Sprintf("parity %s", map[bool]string{true: "equal", false: "DIFFERENT"}[par]), par)
	if !par {
		return fmt.Errorf("parity check failed")
	}
	return l.n.stop()
}

func countSeen(rows []row, v *visibility) int {
	n := 0
	for _, r := range rows {
		if v.has(r.ID) {
			n++
		}
	}
	return n
}
