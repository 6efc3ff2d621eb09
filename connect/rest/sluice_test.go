package rest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/rest"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/connect/runtime/runtimetest"
)

// fileVersions returns the versions of the records in a file sink's output.
func fileVersions(t *testing.T, path string) map[int64]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	defer f.Close()
	out := map[int64]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Version int64 `json:"version"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out[line.Version] = true
	}
	return out
}

// GET /connectors/{c}/wait returns once the view holds the write: the file the sink writes
// contains the event right after the answer. It times out with 504 and says how far the
// pipeline got.
func TestWaitEndpoint(t *testing.T) {
	e := newEnv(t, envOptions{})
	out := filepath.Join(t.TempDir(), "view.jsonl")
	for _, body := range []string{
		`{"name":"gen","config":{"connector.class":"datagen","topic.prefix":"w","datagen.rate":"300","datagen.keys":"50","datagen.batch.size":"10"}}`,
		`{"name":"view","config":{"connector.class":"FileStreamSinkConnector","topics.regex":"w\\..*","file":"` + out + `"}}`,
	} {
		if r := e.do("POST", "/connectors", body); r.status != 201 {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	for _, n := range []int64{40, 120, 200} {
		// Not written yet when asked (300 events/s from the start).
		r := e.do("GET", fmt.Sprintf("/connectors/view/wait?position=%d&timeout=10s", n), "")
		if r.status != 200 {
			t.Fatalf("wait %d: %d %s", n, r.status, r.body)
		}
		m := r.obj(t)
		wantKeys(t, m, "name", "source", "position", "waited_ms", "offsets")
		if m["source"] != "gen" || m["position"] != fmt.Sprint(n) {
			t.Fatalf("answer %v", m)
		}
		// Event n-1 has version n: it must be in the file now.
		if !fileVersions(t, out)[n] {
			t.Fatalf("after the wait for %d events the view has no record of version %d", n, n)
		}
	}
	// Stop the source: a position it never reaches times out cleanly.
	if r := e.do("PUT", "/connectors/gen/stop", ""); r.status != 204 {
		t.Fatal(r.status)
	}
	start := time.Now()
	r := e.do("GET", "/connectors/view/wait?position=100000&timeout=300ms", "")
	if r.status != 504 {
		t.Fatalf("wait beyond the source: %d %s", r.status, r.body)
	}
	wantError(t, r, 504, "timed out: the source gen has not reached position 100000 yet")
	wantError(t, r, 504, "its task is STOPPED")
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the wait took %v with a 300ms timeout", d)
	}
}

// A rebuild through the API: 202, then its status until DONE; the view was switched.
func TestRebuildEndpoint(t *testing.T) {
	view := runtimetest.NewView()
	e := newEnv(t, envOptions{prepare: func(rt *runtime.Runtime) {
		if err := rt.Registry().Register(view.Plugin("view")); err != nil {
			t.Fatal(err)
		}
	}})
	for _, body := range []string{
		`{"name":"gen","config":{"connector.class":"datagen","topic.prefix":"r","datagen.rate":"2000","datagen.keys":"40","datagen.max.events":"1500"}}`,
		`{"name":"v","config":{"connector.class":"view","topics.regex":"r\\..*"}}`,
	} {
		if r := e.do("POST", "/connectors", body); r.status != 201 {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	e.waitTask("v", "RUNNING")
	waitFor(t, "the sink's task to open its sink", func() bool { inst, _ := e.rt.Instance("v"); return inst != nil })
	if r := e.do("GET", "/connectors/v/rebuild", ""); r.status != 404 {
		t.Fatalf("rebuild status before any: %d", r.status)
	}
	r := e.do("POST", "/connectors/v/rebuild", "")
	if r.status != 202 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	wantKeys(t, r.obj(t), "name", "state", "phase", "started_ms", "replayed_records", "target_records")
	var st map[string]any
	waitFor(t, "the rebuild", func() bool {
		st = e.do("GET", "/connectors/v/rebuild", "").obj(t)
		return st["state"] != "RUNNING" && st["state"] != "ABORTING"
	})
	if st["state"] != "DONE" {
		t.Fatalf("rebuild %v", st)
	}
	if _, live := view.Live(); live == 0 {
		t.Fatal("the live view is still generation 0")
	}
}

// statsSource is a source with a Stats method, for the metrics test.
type statsSource struct{ connect.Source }

type sourceStats struct {
	MilliSecondsBehindSource int64
	TotalNumberOfEventsSeen  int64
	NumberOfCommittedTxns    int64
	SnapshotRunning          bool
	RowsScanned              map[string]int64
	BinlogFilename           string
	LastBatchTime            time.Duration
}

func (statsSource) Stats() sourceStats {
	return sourceStats{MilliSecondsBehindSource: 42, TotalNumberOfEventsSeen: 7, NumberOfCommittedTxns: 3, SnapshotRunning: true,
		RowsScanned: map[string]int64{"db.t": 5}, BinlogFilename: "mariadb-bin.000002", LastBatchTime: 1500 * time.Millisecond}
}

// /metrics carries the runtime's, the plugins' (through Stats) and the log's metrics, with
// Debezium's names where they overlap.
func TestMetrics(t *testing.T) {
	e := newEnv(t, envOptions{prepare: func(rt *runtime.Runtime) {
		dg, _ := rt.Registry().Lookup("datagen")
		p := dg
		p.Name, p.Aliases = "statsgen", nil
		p.NewSource = func(cfg connect.Config, env connect.Env) (connect.Source, error) {
			s, err := dg.NewSource(cfg, env)
			return statsSource{s}, err
		}
		if err := rt.Registry().Register(p); err != nil {
			t.Fatal(err)
		}
	}})
	for _, body := range []string{
		`{"name":"gen","config":{"connector.class":"statsgen","topic.prefix":"m","datagen.rate":"500"}}`,
		`{"name":"out","config":{"connector.class":"mem","topics.regex":"m\\..*"}}`,
	} {
		if r := e.do("POST", "/connectors", body); r.status != 201 {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	waitFor(t, "sink writes", func() bool { return len(e.sink.Records()) > 20 })
	r := e.do("GET", "/metrics", "")
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Fatalf("%d %q", r.status, r.header.Get("Content-Type"))
	}
	text := string(r.body)
	for _, want := range []string{
		`sluice_source_milliseconds_behind_source{connector="gen"} 42`,
		`sluice_source_total_number_of_events_seen{connector="gen"} 7`,
		`sluice_source_number_of_committed_transactions{connector="gen"} 3`,
		`sluice_source_snapshot_running{connector="gen"} 1`,
		`sluice_source_rows_scanned{connector="gen",table="db.t"} 5`,
		`sluice_source_binlog_filename_info{connector="gen",value="mariadb-bin.000002"} 1`,
		`sluice_source_last_batch_time_seconds{connector="gen"} 1.5`,
		`sluice_connector_state{connector="gen",state="RUNNING",type="source"} 1`,
		`sluice_connector_state{connector="out",state="RUNNING",type="sink"} 1`,
		`sluice_source_records_appended_total{connector="gen"}`,
		`sluice_sink_records_written_total{connector="out"}`,
		`sluice_sink_batch_seconds_bucket{connector="out",le=`,
		`sluice_sink_consumer_lag{connector="out",partition="0",topic="m.inventory.orders"}`,
		`sluice_log_partition_size_bytes{partition="0",topic="m.inventory.orders"}`,
		`sluice_log_partition_high_watermark{partition="0",topic="m.inventory.orders"}`,
		`sluice_connector_rejected_records_total{connector="out"} 0`,
		`go_goroutines`, `process_cpu_seconds_total`,
		"# TYPE sluice_source_total_number_of_events_seen counter",
		"# TYPE sluice_source_milliseconds_behind_source gauge",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// A logger's level set through the API applies to its log lines at once.
func TestLoggerLevels(t *testing.T) {
	e := newEnv(t, envOptions{})
	if r := e.do("POST", "/connectors", datagenJSON("gen", "")); r.status != 201 {
		t.Fatal(r.status)
	}
	e.waitTask("gen", "RUNNING")
	// The task is RUNNING before its start is logged; a line whose level was checked before
	// the change below may still be written after it.
	waitFor(t, "gen's source to open", func() bool {
		return strings.Contains(e.logs.String(), `msg="source opening" component=runtime connector=gen`)
	})
	if r := e.do("PUT", "/admin/loggers/connector.gen", `{"level":"ERROR"}`); r.status != 200 {
		t.Fatal(r.status)
	}
	before := len(e.logs.String())
	if r := e.do("POST", "/connectors/gen/restart", ""); r.status != 204 {
		t.Fatal(r.status)
	}
	e.waitTask("gen", "RUNNING")
	if strings.Contains(e.logs.String()[before:], "connector=gen") {
		t.Fatalf("connector gen logged below ERROR:\n%s", e.logs.String()[before:])
	}
	if r := e.do("PUT", "/admin/loggers/root", `{"level":"INFO"}`); r.status != 200 || !strings.Contains(string(r.body), "connector.gen") {
		t.Fatalf("setting root: %d %s (it resets the loggers below it)", r.status, r.body)
	}
	before = len(e.logs.String())
	e.do("POST", "/connectors/gen/restart", "")
	e.waitTask("gen", "RUNNING")
	waitFor(t, "gen's log lines at INFO again", func() bool { return strings.Contains(e.logs.String()[before:], "connector=gen") })
}

func TestClient(t *testing.T) {
	e := newEnv(t, envOptions{token: "tok"})
	c := rest.NewClient(e.ts.URL, "tok", false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var names []string
	if _, err := c.Do(ctx, "GET", "/connectors", nil, &names); err != nil || len(names) != 0 {
		t.Fatalf("%v %v", names, err)
	}
	_, err := c.Do(ctx, "GET", rest.Path("connectors", "a/b"), nil, nil)
	ce, ok := err.(*rest.ClientError)
	if !ok || ce.Status != 404 || ce.Message != "connector a/b not found" {
		t.Fatalf("error %v", err)
	}
	bad := rest.NewClient(e.ts.URL, "wrong", false)
	if _, err := bad.Do(ctx, "GET", "/connectors", nil, nil); err == nil || !strings.Contains(err.Error(), "401 Unauthorized: authentication required") {
		t.Fatalf("wrong token: %v", err)
	}
}

// Reconfiguring connectors while other requests read them is safe (run with -race).
func TestConcurrentChanges(t *testing.T) {
	view := runtimetest.NewView()
	e := newEnv(t, envOptions{prepare: func(rt *runtime.Runtime) {
		if err := rt.Registry().Register(view.Plugin("view")); err != nil {
			t.Fatal(err)
		}
	}})
	for _, body := range []string{
		`{"name":"gen","config":{"connector.class":"datagen","topic.prefix":"c","datagen.rate":"1000"}}`,
		`{"name":"v","config":{"connector.class":"view","topics.regex":"c\\..*"}}`,
	} {
		if r := e.do("POST", "/connectors", body); r.status != 201 {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	e.waitTask("v", "RUNNING")
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, path := range []string{"/connectors?expand=status&expand=info", "/connectors/v/lag", "/connectors/v/offsets", "/metrics", "/connectors/v/wait?position=1&timeout=50ms", "/connectors/gen/offsets"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				e.do("GET", path, "")
				e.do("POST", "/connectors/v/rebuild", "")
			}
		}()
	}
	for i := range 20 {
		if r := e.do("PUT", "/connectors/v/config", fmt.Sprintf(`{"connector.class":"view","topics.regex":"c\\..*","consumer.override.max.poll.records":"%d"}`, 100+i)); r.status != 200 {
			t.Fatalf("PUT %d: %d %s", i, r.status, r.body)
		}
		if r := e.do("PATCH", "/connectors/gen/config", fmt.Sprintf(`{"datagen.keys":"%d"}`, 10+i)); r.status != 200 {
			t.Fatalf("PATCH %d: %d %s", i, r.status, r.body)
		}
	}
	close(done)
	wg.Wait()
	e.waitTask("v", "RUNNING")
	e.waitTask("gen", "RUNNING")
}
