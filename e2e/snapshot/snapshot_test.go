package snapshot_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
)

// kinds are the sources the tests run against.
var kinds = []struct {
	name string
	open func(t testing.TB) sourceDB
}{
	{"postgres", func(t testing.TB) sourceDB { return newPG(t) }},
	{"mysql", func(t testing.TB) sourceDB { return newMaria(t) }},
}

// waitCaughtUp waits until the committed position is at the server's current position.
func waitCaughtUp(n *node, d sourceDB) {
	n.t.Helper()
	pos := d.position(n.t)
	n.waitFor("the stream to catch up with "+pos, 2*time.Minute, func() bool {
		off := n.offset()
		return off != nil && d.caughtUp(n.t, off, pos)
	})
}

// check stops sluice, folds the table's topic and compares it with the table.
func check(t testing.TB, n *node, d sourceDB, table string) []logRecord {
	t.Helper()
	waitCaughtUp(n, d)
	n.stop()
	recs := n.readTopic(d.topic(table))
	if df := diff(d.state(t, table), fold(t, recs)); df != "" {
		t.Fatalf("the view from topic %s differs from the table:\n%s", d.topic(table), df)
	}
	return recs
}

// progress polls the status until the table's snapshot is done, checking that its percent
// never goes down and ends at 100.
func progress(n *node, table string, timeout time.Duration) status {
	n.t.Helper()
	last := -1.0
	var st status
	n.waitFor("the snapshot of "+table, timeout, func() bool {
		st = n.status()
		for _, ts := range st.Tables {
			if ts.Table != table {
				continue
			}
			if ts.Percent < last {
				n.t.Fatalf("the percent of %s went down: %v after %v", table, ts.Percent, last)
			}
			last = ts.Percent
		}
		return st.done(table)
	})
	for _, ts := range st.Tables {
		if ts.Table == table && (ts.Percent != 100 || ts.State != "SUCCEEDED") {
			n.t.Fatalf("final status of %s: %+v", table, ts)
		}
	}
	committedDone(n, table)
	return st
}

// committedDone waits until the connector's committed position records the snapshot of table
// as finished. The status says SUCCEEDED once the last chunk is emitted, a moment before its
// records are in the log and its position committed: a stop in between would leave them out.
func committedDone(n *node, table string) {
	n.t.Helper()
	n.waitFor("the committed position to hold the end of the snapshot of "+table, time.Minute, func() bool {
		inc, _ := n.offset()["incremental"].(map[string]any)
		if inc == nil {
			return false
		}
		queued, _ := inc["tables"].([]any)
		for _, x := range queued {
			if q, _ := x.(map[string]any); q["table"] == table {
				return false
			}
		}
		done, _ := inc["done"].([]any)
		for _, x := range done {
			if d, _ := x.(map[string]any); d["table"] == table && d["status"] == "SUCCEEDED" {
				return true
			}
		}
		return false
	})
}

// TestIncrementalSnapshotUnderWrites snapshots a 200,000-row table incrementally while a
// writer inserts, updates, deletes and changes primary keys; the table derived from the topic
// equals the table, for several seeds (SLUICE_SNAPSHOT_ITER, or ten times more with
// SLUICE_SOAK=1).
func TestIncrementalSnapshotUnderWrites(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			for seed := range uint64(iterations(2)) {
				t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
					d := k.open(t)
					d.createTable(t, "items", 200000)
					n := newNode(t, d.class(), d.config([]string{"items"}, map[string]string{
						"incremental.snapshot.chunk.size":          "1024",
						"incremental.snapshot.max.rows.per.second": "50000",
					}))
					n.start()
					w := startWriter(t, d, "items", 200000, seed)
					n.waitFor("writes", time.Minute, func() bool { return w.writes.Load() > 500 })
					n.must("POST", "/connectors/src/snapshots", `{"data-collections":["`+escape(d.id("items"))+`"]}`, 202)
					progress(n, d.id("items"), 5*time.Minute)
					w.halt(t)
					recs := check(t, n, d, "items")
					reads := 0
					for _, r := range recs {
						if r.value != nil && event(t, r).Op == connect.OpRead {
							reads++
						}
					}
					t.Logf("%d writes, %d records, %d snapshot reads", w.writes.Load(), len(recs), reads)
					if reads < 150000 {
						t.Fatalf("only %d snapshot reads", reads)
					}
				})
			}
		})
	}
}

func escape(s string) string { return strings.ReplaceAll(s, `\`, `\\`) }

// TestKillDuringIncrementalSnapshot kills sluice with SIGKILL many times while it snapshots a
// 200,000-row table under writes: after each restart the snapshot goes on from its last
// chunk (never from the start), at most one chunk per kill is read again, and in the end the
// view equals the table. SLUICE_SNAPSHOT_ITER sets the number of kills (default 5).
//
// A kill lands at a random moment, and most moments fall between chunks, when the committed
// position holds every chunk emitted: the restart then reads nothing again. So after its random
// wait each kill waits (up to two seconds) for a moment when a chunk was emitted and its
// position not yet committed: the status counts more rows read than the committed position
// records (max.batch.size 100 splits a MySQL chunk into ten batches, the first nine positioned
// before it). A kill then must leave the committed position behind the status (the restart
// reads that chunk again), and some kills must so land, or the bound was never put to the test.
func TestKillDuringIncrementalSnapshot(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			const chunkRows = 1000
			d := k.open(t)
			d.createTable(t, "items", 200000)
			n := newNode(t, d.class(), d.config([]string{"items"}, map[string]string{
				"incremental.snapshot.chunk.size":          strconv.Itoa(chunkRows),
				"incremental.snapshot.max.rows.per.second": "20000",
				"max.batch.size":                           "100",
			}))
			n.start()
			w := startWriter(t, d, "items", 200000, 42)
			n.must("POST", "/connectors/src/snapshots", `{"data-collections":["`+escape(d.id("items"))+`"]}`, 202)
			rng := rand.New(rand.NewPCG(9, 9))
			kills, behind := 0, 0
			var before int64
			for kills < iterations(5) {
				time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
				st := n.status()
				if st.done(d.id("items")) {
					break
				}
				scanned := st.Tables[0].RowsScanned
				if scanned < before {
					t.Fatalf("after kill %d the snapshot went back: %d rows read, %d before the kill", kills, scanned, before)
				}
				// a moment when the status is ahead of the committed position
				deadline := time.Now().Add(2 * time.Second)
				for time.Now().Before(deadline) {
					st = n.status()
					if len(st.Tables) == 0 || st.done(d.id("items")) || st.Tables[0].RowsScanned > committedRows(n, d.id("items")) {
						break
					}
				}
				if len(st.Tables) > 0 {
					scanned = st.Tables[0].RowsScanned
				}
				n.kill()
				kills++
				n.start()
				after := n.status()
				if len(after.Tables) == 0 || after.Tables[0].RowsScanned+chunkRows < scanned {
					t.Fatalf("after kill %d the snapshot did not resume where it was (%d rows read before): %+v", kills, scanned, after)
				}
				if after.Tables[0].RowsScanned < scanned {
					behind++
				}
				before = after.Tables[0].RowsScanned
			}
			progress(n, d.id("items"), 5*time.Minute)
			w.halt(t)
			recs := check(t, n, d, "items")
			chunks, reread := rereads(t, recs, d.mark)
			t.Logf("%d kills, %d of them with a chunk emitted and not committed, %d writes, %d chunks, %d rows read again", kills, behind, w.writes.Load(), chunks, reread)
			if kills < 3 {
				t.Fatalf("only %d kills before the snapshot ended", kills)
			}
			if behind == 0 {
				t.Fatalf("no kill of %d fell between a chunk's emission and its commit: the restarts read nothing again", kills)
			}
			if reread > kills*chunkRows {
				t.Fatalf("%d snapshot rows were read again after %d kills; at most one chunk (%d rows) per kill may be", reread, kills, chunkRows)
			}
		})
	}
}

// committedRows is the rows read of a table's snapshot that the committed position records
// (-1: none).
func committedRows(n *node, table string) int64 {
	n.t.Helper()
	inc, _ := n.offset()["incremental"].(map[string]any)
	queued, _ := inc["tables"].([]any)
	for _, x := range queued {
		if q, _ := x.(map[string]any); q["table"] == table {
			r, _ := q["rows"].(float64)
			return int64(r)
		}
	}
	return -1
}

// TestSnapshotControl pauses, resumes and stops snapshots through the admin API, the CLI and
// the signal table, and follows one with `sluice snapshots status --watch`.
func TestSnapshotControl(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			d := k.open(t)
			d.createTable(t, "a", 30000)
			d.createTable(t, "b", 30000)
			d.signalTable(t, "dbz_signal")
			n := newNode(t, d.class(), d.config([]string{"a", "b"}, map[string]string{
				"incremental.snapshot.chunk.size":          "500",
				"incremental.snapshot.max.rows.per.second": "10000",
				"signal.data.collection":                   d.id("dbz_signal"),
			}))
			n.start()
			a, b := d.id("a"), d.id("b")

			// API: start, pause, resume
			n.must("POST", "/connectors/src/snapshots", `{"data-collections":["`+escape(a)+`"]}`, 202)
			n.waitFor("chunks", time.Minute, func() bool { return n.status().ChunkID >= 2 })
			n.must("PUT", "/connectors/src/snapshots/pause", "", 202)
			n.waitFor("the pause", time.Minute, func() bool { return n.status().State == "PAUSED" })
			paused := n.status().ChunkID
			time.Sleep(time.Second)
			if c := n.status().ChunkID; c > paused+1 {
				t.Fatalf("chunks went on while paused: %d, then %d", paused, c)
			}
			n.must("PUT", "/connectors/src/snapshots/resume", "", 202)

			// CLI: follow it to the end
			out, err := exec.Command(sluiceBin(t), "snapshots", "status", "src", "--watch", "--interval", "200ms", "--server", n.api).CombinedOutput()
			if err != nil {
				t.Fatalf("sluice snapshots status --watch: %v\n%s", err, out)
			}
			lastBlock := string(out[bytes.LastIndex(out, []byte("src: ")):])
			if !strings.Contains(lastBlock, "src: IDLE") || !strings.Contains(lastBlock, a) || !strings.Contains(lastBlock, "SUCCEEDED") || !strings.Contains(lastBlock, "100.0%") {
				t.Fatalf("the last status of --watch:\n%s", lastBlock)
			}

			// signal table: execute, pause, resume, stop
			d.signal(t, "dbz_signal", "s1", "execute-snapshot", `{"data-collections": ["`+escape(b)+`"], "type": "INCREMENTAL"}`)
			n.waitFor("the signal's snapshot", time.Minute, func() bool { return n.status().RemainingTables == 1 && n.status().ChunkID > paused+3 })
			d.signal(t, "dbz_signal", "s2", "pause-snapshot", `{}`)
			n.waitFor("the signal's pause", time.Minute, func() bool { return n.status().State == "PAUSED" })
			d.signal(t, "dbz_signal", "s3", "resume-snapshot", `{}`)
			n.waitFor("the signal's resume", time.Minute, func() bool { return n.status().State != "PAUSED" })
			d.signal(t, "dbz_signal", "s4", "stop-snapshot", `{"data-collections": ["`+escape(b)+`"]}`)
			n.waitFor("the signal's stop", time.Minute, func() bool { return n.status().RemainingTables == 0 })
			st := n.status()
			if last := st.Tables[len(st.Tables)-1]; last.Table != b || last.State != "STOPPED" {
				t.Fatalf("after stop-snapshot: %+v", st)
			}

			// CLI: start, stop
			out, err = exec.Command(sluiceBin(t), "snapshots", "start", "src", b, "--server", n.api).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "snapshot of "+b+" requested on src") {
				t.Fatalf("sluice snapshots start: %v\n%s", err, out)
			}
			n.waitFor("the CLI's snapshot", time.Minute, func() bool { return n.status().RemainingTables == 1 })
			// CLI: pause, resume
			for _, sub := range []string{"pause", "resume"} {
				out, err = exec.Command(sluiceBin(t), "snapshots", sub, "src", "--server", n.api).CombinedOutput()
				if err != nil || !strings.Contains(string(out), "snapshot of src: "+sub+" requested") {
					t.Fatalf("sluice snapshots %s: %v\n%s", sub, err, out)
				}
				n.waitFor("the CLI's "+sub, time.Minute, func() bool { return (n.status().State == "PAUSED") == (sub == "pause") })
			}
			out, err = exec.Command(sluiceBin(t), "snapshots", "stop", "src", "--server", n.api).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "stop requested for every table") {
				t.Fatalf("sluice snapshots stop: %v\n%s", err, out)
			}
			n.waitFor("the CLI's stop", time.Minute, func() bool { return n.status().RemainingTables == 0 })
			// a request the source refuses: exit code 1 and the reason
			out, err = exec.Command(sluiceBin(t), "snapshots", "start", "src", "nosuch.table", "--server", n.api).CombinedOutput()
			if err == nil || !strings.Contains(string(out), `"nosuch.table" matches no captured table`) {
				t.Fatalf("sluice snapshots start of a missing table: %v\n%s", err, out)
			}
			check(t, n, d, "a")
		})
	}
}

// TestTablesAddedToARunningPipeline adds a table to a running pipeline twice: by editing
// table.include.list in the pipeline file and restarting, and by PUT of an API connector's
// configuration. Each time only the new table is snapshotted, and then streamed.
func TestTablesAddedToARunningPipeline(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			d := k.open(t)
			d.createTable(t, "a", 3000)
			d.createTable(t, "b", 20000)
			d.createTable(t, "c", 20000)
			cfg := d.config([]string{"a"}, map[string]string{"incremental.snapshot.chunk.size": "2000"})
			n := newNode(t, d.class(), cfg)
			n.start()
			n.must("POST", "/connectors/src/snapshots", `{"data-collections":["`+escape(d.id("a"))+`"]}`, 202)
			progress(n, d.id("a"), time.Minute)
			d.exec(t, "UPDATE b SET v = -1 WHERE id < 10")
			n.stop()

			// the pipeline file: b joins
			n.write(d.class(), d.config([]string{"a", "b"}, map[string]string{"incremental.snapshot.chunk.size": "2000"}))
			n.start()
			w := startWriter(t, d, "b", 20000, 5)
			progress(n, d.id("b"), 2*time.Minute)
			w.halt(t)
			d.exec(t, "DELETE FROM b WHERE id = 19999", "UPDATE b SET note = 'after' WHERE id = 5")
			recs := check(t, n, d, "b")
			st := statusOf(t, n)
			if len(st.Tables) != 2 {
				t.Fatalf("snapshots after adding b: %+v", st)
			}
			if reads := countReads(t, n.readTopic(d.topic("a"))); reads != 3000 {
				t.Fatalf("table a was read %d times, want its 3000 rows once", reads)
			}
			_ = recs

			// the API: a connector created through it, then c added by PUT of its configuration
			api := newNode(t, "", nil)
			api.start()
			conf := d.config([]string{"a", "b"}, map[string]string{"incremental.snapshot.chunk.size": "2000"})
			d.second(conf)
			conf["connector.class"] = d.class()
			api.must("PUT", "/connectors/src/config", jsonOf(t, conf), 201)
			api.waitFor("the connector's first position", time.Minute, func() bool {
				code, body, _ := api.call("GET", "/connectors/src/offsets", "")
				return code == 200 && strings.Contains(string(body), `"`+d.offsetField()+`"`)
			})
			conf["table.include.list"] = d.config([]string{"a", "b", "c"}, nil)["table.include.list"]
			api.must("PUT", "/connectors/src/config", jsonOf(t, conf), 200)
			api.waitFor("the snapshot of c", 2*time.Minute, func() bool {
				code, body, _ := api.call("GET", "/connectors/src/snapshots", "")
				return code == 200 && strings.Contains(string(body), `"table":"`+d.id("c")+`","request":"config`) && strings.Contains(string(body), `"state":"SUCCEEDED"`) && strings.Contains(string(body), `"remaining_table_count":0`)
			})
			d.exec(t, "UPDATE c SET v = 7 WHERE id = 3")
			check(t, api, d, "c")
			if reads := countReads(t, api.readTopic(d.topic("b"))); reads != 0 {
				t.Fatalf("table b was read %d times by the API connector, which streamed it from its start", reads)
			}
		})
	}
}

// TestFilteredSnapshot emits only the rows of an additional condition.
func TestFilteredSnapshot(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			d := k.open(t)
			d.createTable(t, "items", 20000)
			n := newNode(t, d.class(), d.config([]string{"items"}, map[string]string{"incremental.snapshot.chunk.size": "777"}))
			n.start()
			n.must("POST", "/connectors/src/snapshots", `{"data-collections":["`+escape(d.id("items"))+`"],"additional-conditions":[{"data-collection":"`+escape(d.id("items"))+`","filter":"v < 100 AND id >= 5000"}]}`, 202)
			progress(n, d.id("items"), time.Minute)
			// the metrics of the snapshot, Debezium's names
			metrics := string(n.must("GET", "/metrics", "", 200))
			for _, want := range []string{
				`sluice_source_rows_scanned{connector="src",table="` + d.id("items") + `"} 1500`,
				`sluice_source_remaining_table_count{connector="src"} 0`,
				`sluice_source_chunk_id{connector="src"} 2`,
			} {
				if !strings.Contains(metrics, want+"\n") {
					t.Errorf("/metrics lacks %s", want)
				}
			}
			n.stop()
			reads := 0
			for _, r := range n.readTopic(d.topic("items")) {
				ev := event(t, r)
				if ev.Op != connect.OpRead {
					continue
				}
				reads++
				v, _ := ev.After.Get("v")
				id, _ := ev.After.Get("id")
				vi, _ := connect.AsInt64(v)
				ii, _ := connect.AsInt64(id)
				if vi >= 100 || ii < 5000 {
					t.Fatalf("the filtered snapshot emitted %v", ev.After)
				}
			}
			// ids 5000..19999 with v = id % 1000 < 100
			if reads != 1500 {
				t.Fatalf("the filtered snapshot emitted %d rows, want 1500", reads)
			}
		})
	}
}

func countReads(t testing.TB, recs []logRecord) int {
	n := 0
	for _, r := range recs {
		if r.value != nil && event(t, r).Op == connect.OpRead {
			n++
		}
	}
	return n
}

func statusOf(t testing.TB, n *node) status {
	t.Helper()
	n.start()
	defer n.stop()
	return n.status()
}

func jsonOf(t testing.TB, cfg map[string]string) string {
	t.Helper()
	b, err := connect.MarshalJSONValue(toRow(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func toRow(cfg map[string]string) connect.Row {
	var r connect.Row
	for k, v := range cfg {
		r = append(r, connect.Field{Name: k, Value: v})
	}
	return r
}
