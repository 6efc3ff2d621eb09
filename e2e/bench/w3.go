package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// w3 is the snapshot workload: a table of -snapshot-rows rows read by an initial snapshot into
// a fresh log and both views, then by an incremental snapshot (requested through the API from a
// streaming connector), each compared to the native scan rate (SELECT * / COPY TO) of the same
// table, each followed by the parity check.
func (b *bench) w3(ctx context.Context) error {
	n := b.opts.SnapshotRows
	b.note("W3: the parity check after each snapshot compares the row count and every row's columns of both views with the table (stronger than a checksum)")
	b.note("W3: the snapshot is timed alone into the log (from the process start, or from the API request for the incremental one, to the last row in the topic); the sinks are then created through the API and timed from the log into both views")
	b.progress("W3: writing the %d-row tables ...", n)
	if err := b.makeSnapshotTables(ctx, n); err != nil {
		return err
	}
	if err := b.scanRates(ctx, n); err != nil {
		return err
	}
	var errs []error
	for _, kind := range []string{"mysql", "postgres"} {
		if err := b.w3Run(ctx, kind, false); err != nil {
			errs = append(errs, fmt.Errorf("%s initial: %w", kind, err))
		}
		if err := b.w3Run(ctx, kind, true); err != nil {
			errs = append(errs, fmt.Errorf("%s incremental: %w", kind, err))
		}
	}
	c, err := b.pgConn(ctx)
	if err == nil {
		_, _ = c.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'bench_w3%' AND NOT active")
		c.Close(ctx)
	}
	return joinErrs(errs)
}

func (b *bench) makeSnapshotTables(ctx context.Context, n int) error {
	c, err := b.myConn("")
	if err != nil {
		return err
	}
	defer c.Close()
	if err := myExec(c, "CREATE DATABASE w3", "USE w3", fmt.Sprintf(myTableDDL, "w3")); err != nil {
		return err
	}
	for lo := 0; lo < n; lo += 100_000 {
		k := min(100_000, n-lo)
		if err := myExec(c, fmt.Sprintf("INSERT INTO w3.t SELECT %d + seq, seq %% 1000, CONCAT('snapshot row ', %d + seq), NOW(6) FROM seq_1_to_%d", lo, lo, k)); err != nil {
			return err
		}
	}
	pc, err := b.pgConn(ctx)
	if err != nil {
		return err
	}
	defer pc.Close(ctx)
	if err := pgExec(ctx, pc, "CREATE SCHEMA w3", fmt.Sprintf(pgTableDDL, "w3"), "CREATE PUBLICATION bench_w3 FOR TABLE w3.t"); err != nil {
		return err
	}
	for lo := 0; lo < n; lo += 100_000 {
		k := min(100_000, n-lo)
		if err := pgExec(ctx, pc, fmt.Sprintf("INSERT INTO w3.t SELECT g, g %% 1000, 'snapshot row ' || g, now() FROM generate_series(%d, %d) g", lo+1, lo+k)); err != nil {
			return err
		}
	}
	return pgExec(ctx, pc, "VACUUM ANALYZE w3.t")
}

// scanRates measures SELECT * (go-mysql, streamed to nowhere) and COPY TO (into io.Discard).
func (b *bench) scanRates(ctx context.Context, n int) error {
	c, err := b.myConn("w3")
	if err != nil {
		return err
	}
	t0 := time.Now()
	got := 0
	var res gomysql.Result
	err = c.ExecuteSelectStreaming("SELECT * FROM w3.t", &res, func([]gomysql.FieldValue) error { got++; return nil }, nil)
	took := time.Since(t0)
	c.Close()
	if err != nil {
		return fmt.Errorf("select *: %w", err)
	}
	if got != n {
		return fmt.Errorf("select * read %d rows, want %d", got, n)
	}
	b.addLimit(limMySelect, float64(n)/took.Seconds(), "rows/s", "go-mysql ExecuteSelectStreaming, rows dropped")
	conn, err := pgconn.Connect(ctx, b.pg.ConnString())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	t0 = time.Now()
	tag, err := conn.CopyTo(ctx, io.Discard, "COPY (SELECT * FROM w3.t) TO STDOUT")
	took = time.Since(t0)
	if err != nil {
		return fmt.Errorf("copy to: %w", err)
	}
	if tag.RowsAffected() != int64(n) {
		return fmt.Errorf("copy to read %d rows, want %d", tag.RowsAffected(), n)
	}
	b.addLimit(limPGCopy, float64(n)/took.Seconds(), "rows/s", "pgconn CopyTo into io.Discard")
	return nil
}

// offset is the source connector's committed offset (nil before the first commit).
func (n *node) offset(ctx context.Context) map[string]any {
	var v struct {
		Offsets []struct {
			Offset map[string]any `json:"offset"`
		} `json:"offsets"`
	}
	if err := n.getJSON(ctx, "/connectors/src/offsets", &v); err != nil || len(v.Offsets) == 0 {
		return nil
	}
	return v.Offsets[0].Offset
}

func streaming(off map[string]any) bool {
	if off == nil {
		return false
	}
	_, snap := off["snapshot"]
	return !snap
}

func incrementalDone(off map[string]any) bool {
	inc, _ := off["incremental"].(map[string]any)
	if inc == nil {
		return false
	}
	tables, _ := inc["tables"].([]any)
	done, _ := inc["done"].([]any)
	return len(tables) == 0 && len(done) > 0
}

// w3Run runs one snapshot (initial or incremental) of table w3.t into a fresh log and both views.
func (b *bench) w3Run(ctx context.Context, kind string, incremental bool) error {
	name := srcName(kind)
	mode, prefix := "initial", map[string]string{"mysql": "my3", "postgres": "pg3"}[kind]
	if incremental {
		mode, prefix = "incremental", prefix+"i"
	}
	p := b.newPipe(kind, prefix, "w3")
	// the snapshot runs alone (no sink competes for the two cores); the sinks are created
	// through the API once the snapshot is in the log
	p.Sinks, p.Publication, p.Slot = false, "bench_w3", "bench_w3_"+prefix
	b.serverID++
	p.ServerID = 5500 + b.serverID
	p.SnapshotMode = "initial"
	if incremental {
		p.SnapshotMode = "no_data"
	}
	dir := filepath.Join(b.dir, "W3-"+prefix)
	port, err := freePort()
	if err != nil {
		return err
	}
	p.LogDir, p.API = filepath.Join(dir, "log"), fmt.Sprintf("127.0.0.1:%d", port)
	text, err := p.render()
	if err != nil {
		return err
	}
	t0 := time.Now()
	nd, err := b.startNode(ctx, b.bin, "W3-"+prefix, dir, p.API, text)
	if err != nil {
		return err
	}
	defer nd.kill()
	if incremental {
		// the source must be streaming before the request (the API answers 409 until it opened)
		deadline := time.Now().Add(60 * time.Second)
		for {
			_, err := httpDo(ctx, "POST", nd.api+"/connectors/src/snapshots", []byte(`{"data-collections":["w3.t"]}`), 202)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				b.note("W3 %s incremental snapshot: not run: the request was refused for 60 s: %v", name, err)
				return nil
			}
			time.Sleep(200 * time.Millisecond)
		}
		t0 = time.Now()
	}
	// the cut-over (initial: the committed position is a stream position; incremental: the
	// snapshot's state says every table is done), watched beside the drain
	var cut time.Duration
	var mu sync.Mutex
	wctx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for wctx.Err() == nil {
			off := nd.offset(wctx)
			if (!incremental && streaming(off)) || (incremental && incrementalDone(off)) {
				mu.Lock()
				cut = time.Since(t0)
				mu.Unlock()
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	rows := b.opts.SnapshotRows
	d, err := b.drain(ctx, nd, p, int64(rows), t0, b.drainTimeout())
	if err == nil {
		// the cut-over comes with the commit of the last snapshot batch; give it a moment
		deadline := time.Now().Add(30 * time.Second)
		for {
			mu.Lock()
			c := cut
			mu.Unlock()
			if c > 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	stopWatch()
	<-watchDone
	if err != nil {
		return err
	}
	snapCPU := d.cpu // the process's CPU from its start (an initial snapshot starts with it)
	// phase 2: both sinks, created through the API, read the snapshot from the log
	b.progress("W3 %s: snapshot in the log; creating the sinks ...", prefix)
	p.Sinks = true
	t1 := time.Now()
	for name, cfg := range sinkConfigs(p) {
		body := []byte(jsonString(map[string]any{"name": name, "config": cfg}))
		if _, err := httpDo(ctx, "POST", nd.api+"/connectors", body, 201); err != nil {
			return fmt.Errorf("create sink: %w", err)
		}
	}
	shares := b.startCPU(nd.cmd.Process.Pid)
	dv, err := b.drain(ctx, nd, p, int64(rows), t1, b.drainTimeout())
	if err != nil {
		return err
	}
	viewCPU, viewBusy := shares.stop()
	if err := nd.stop(); err != nil {
		b.note("W3 %s: sluice stop: %v", prefix, err)
	}
	scan := limMySelect
	if kind != "mysql" {
		scan = limPGCopy
	}
	tag := name + " " + mode
	f := b.addFigure("W3", tag+": snapshot into the log", float64(rows)/d.log.Seconds(), "rows/s", scan, fmt.Sprintf("%.1f s", d.log.Seconds()))
	if cut > 0 {
		b.addFigure("W3", tag+": time to consistent cut-over", cut.Seconds(), "s", "", "from "+map[bool]string{false: "the process start", true: "the API request"}[incremental]+" until the committed position says the snapshot is done")
	} else {
		b.note("W3 %s: the committed offset never showed the cut-over (offset: %v)", tag, jsonString(nd.offset(ctx)))
	}
	b.addFigure("W3", tag+": sluice CPU per 1M rows, snapshot into the log", snapCPU.Seconds()*1e6/float64(rows), "CPU s", "", "")
	b.addFigure("W3", tag+": from the log into both views", float64(rows)/dv.views.Seconds(), "rows/s", limESBulk, fmt.Sprintf("%.1f s; sinks created through the API after the snapshot", dv.views.Seconds()))
	b.cpuFiguresOf("W3", tag+" (views)", viewCPU, viewBusy, float64(rows))
	b.addGoal("W3", tag+" snapshot >= 0.5 of the native scan rate", fmt.Sprintf("%s rows/s = %.2f of %s", num(f.Value), f.Ratio, scan), f.Ratio >= 0.5)
	if !b.checkViews(ctx, "W3", p) {
		return fmt.Errorf("parity check failed")
	}
	return nil
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// sinkConfigs are the pipe's two sink connectors, as the pipeline template writes them.
func sinkConfigs(p pipe) map[string]map[string]string {
	unwrap := func(m map[string]string) map[string]string {
		m["topics"] = p.topic()
		m["transforms"] = "unwrap"
		m["transforms.unwrap.type"] = "io.debezium.transforms.ExtractNewRecordState"
		if p.MaxPoll > 0 {
			m["consumer.override.max.poll.records"] = strconv.Itoa(p.MaxPoll)
		}
		return m
	}
	return map[string]map[string]string{
		"es": unwrap(map[string]string{"connector.class": "elasticsearch", "connection.url": fmt.Sprintf("http://127.0.0.1:%d", p.ESPort),
			"index.settings": fmt.Sprintf(`{"index.refresh_interval":"%s","number_of_replicas":0}`, p.Refresh)}),
		"redis": unwrap(map[string]string{"connector.class": "redis", "redis.uri": fmt.Sprintf("redis://127.0.0.1:%d", p.RedisPort), "redis.key": "${topic}:${key}"}),
	}
}
