package snapshot

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/connect"
)

// The state of version 1 decodes forever.
func TestStateGolden(t *testing.T) {
	b, err := os.ReadFile("testdata/state-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	st, err := decodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	want := state{V: 1, Seq: 3, Chunk: 41, Emit: 45, Paused: true,
		Tables: []*Task{
			{Table: "public.orders", Request: "api-1", Type: TypeIncremental, Filter: "region = 'eu'", ChunkSize: 4096, Key: []string{"id"}, After: []string{"167936"}, Rows: 167936, Emitted: 167901, Total: 200000, Started: 1764470000000},
			{Table: "shop.items", Request: "s-7", Type: TypeBlocking, ChunkSize: 1024, Key: []string{"sku", "n"}, Total: -1, Started: 1764470000001},
		},
		Done: []Finished{{Table: "public.customers", Request: "api-1", Rows: 5000, Emitted: 4998, Status: "SUCCEEDED", Finished: 1764469990000}},
	}
	if d := cmp.Diff(want, st); d != "" {
		t.Fatalf("decoded state (-want +got):\n%s", d)
	}
	if got := string(st.encode()); got != strings.TrimSpace(string(b)) {
		t.Fatalf("encoding changed:\n got %s\nwant %s", got, b)
	}
}

func TestStateErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"v":2}`, "unknown version 2"},
		{`{"v":1,"tables":[{"type":"incremental","chunk_size":1}]}`, "tables[0] names no table"},
		{`{"v":1,"tables":[{"table":"a","type":"full","chunk_size":1}]}`, `tables[0]: unknown type "full"`},
		{`{"v":1,"tables":[{"table":"a","type":"blocking","chunk_size":0}]}`, "tables[0]: chunk_size 0"},
		{`[1]`, "malformed incremental snapshot state"},
	} {
		if _, err := decodeState([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.in, err, tc.want)
		}
	}
}

func FuzzDecodeState(f *testing.F) {
	b, _ := os.ReadFile("testdata/state-v1.json")
	f.Add(b)
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, in []byte) {
		st, err := decodeState(in)
		if err != nil {
			return
		}
		again, err := decodeState(st.encode())
		if err != nil {
			t.Fatalf("re-decoding %s: %v", st.encode(), err)
		}
		if d := cmp.Diff(st, again); d != "" {
			t.Fatalf("round trip (-first +second):\n%s", d)
		}
	})
}

func TestParseRequest(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"data-collections":["a.b"],"type":"INCREMENTAL"}`, ""},
		{`{"data-collections":["a.b"],"type":"Blocking","chunk-size":10}`, ""},
		{`{"data-collections":["a.b"],"type":"full"}`, `type must be incremental or blocking (got "full")`},
		{`{"data-collections":["a.b"],"chunk-size":-1}`, "chunk-size must be 1..1000000 (got -1)"},
		{`{"data-collections":["("]}`, `data-collections[0]: bad regular expression "("`},
		{`{"data-collections":[""]}`, "data-collections[0] is empty"},
		{`{"data-collections":["a.b"],"additional-conditions":[{"filter":"x"}]}`, "additional-conditions[0].data-collection is required"},
		{`{"data-collections":["a.b"],"additional-conditions":[{"data-collection":"a.b","filter":" "}]}`, "additional-conditions[0].filter is empty"},
		{`{"data-collections":["a.b"],"additional-conditions":[{"data-collection":"a.b","filter":"x; DROP TABLE y"}]}`, "must be one condition, without ';'"},
		{`{"data-collections":["a.b"],"typ":"blocking"}`, `unknown field "typ"; did you mean "type"?`},
		{`{"data-collections":["a.b"]} {}`, "trailing data"},
		{`{"data-collections":"a.b"}`, "not a valid signal data object"},
	} {
		_, err := parseRequest([]byte(tc.in))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.in, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want %q", tc.in, err, tc.want)
		}
	}
}

// clock is a manual time source.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time      { return c.now }
func (c *clock) add(d time.Duration) { c.now = c.now.Add(d) }

func newTestEngine(t *testing.T, set Settings, c *clock, store connect.Store, tables ...Table) *Engine {
	t.Helper()
	if tables == nil {
		tables = []Table{{ID: "db.a", Key: []string{"id"}}, {ID: "db.b", Key: []string{"id"}}}
	}
	e := New(Options{Settings: set, Connector: "c", Store: store, Now: c.Now,
		Tables: func(context.Context) ([]Table, error) { return tables, nil }})
	if err := e.Open(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	return e
}

// emitAll opens and emits windows until the queue is empty, reading read rows per chunk.
func emitChunk(t *testing.T, e *Engine, mark Mark, read int, exhausted bool) {
	t.Helper()
	st := e.Begin([]byte{1}, mark)
	for st.Kind == StepNotify {
		st = e.Begin([]byte{1}, mark)
	}
	if st.Kind != StepOpen {
		t.Fatalf("step %v, want open", st.Kind)
	}
	for _, task := range st.Tasks {
		e.Opened(&Window{Task: task, Low: mark, High: mark})
	}
	for range st.Tasks {
		st := e.Begin([]byte{1}, mark)
		if st.Kind != StepEmit {
			t.Fatalf("step %v, want emit", st.Kind)
		}
		em := e.StartEmit(st.Window, []byte{1}, mark)
		for range read {
			em.Next()
		}
		_, end := em.Done(read, []string{"k"}, exhausted)
		e.Acked(end)
	}
}

func TestRateLimit(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	e := newTestEngine(t, Settings{ChunkSize: 100, MaxRowsPerSec: 1000}, c, nil)
	if _, err := e.Signal(context.Background(), SignalExecute, []byte(`{"data-collections":["db.a"]}`), OriginAPI, "r"); err != nil {
		t.Fatal(err)
	}
	emitChunk(t, e, 10, 100, false) // the bucket starts full: one chunk at once
	emitChunk(t, e, 20, 100, false) // then empty: the next at once too, overdrawing it
	st := e.Begin([]byte{1}, 30)
	if st.Kind != StepWait || st.Wait != 100*time.Millisecond {
		t.Fatalf("step %+v, want a wait of 100ms", st)
	}
	if s := e.Status(); s.State != "THROTTLED" || s.Throttled != "max.rows.per.second" {
		t.Fatalf("status %+v", s)
	}
	c.add(60 * time.Millisecond)
	if st := e.Begin([]byte{1}, 30); st.Kind != StepWait || st.Wait != 40*time.Millisecond {
		t.Fatalf("step %+v, want a wait of 40ms", st)
	}
	c.add(40 * time.Millisecond)
	if st := e.Begin([]byte{1}, 30); st.Kind != StepOpen {
		t.Fatalf("step %+v, want open", st)
	}
}

func TestLagPause(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	lag := time.Duration(0)
	e := New(Options{Settings: Settings{ChunkSize: 10, MaxLag: time.Second}, Now: c.Now, Lag: func() time.Duration { return lag },
		Tables: func(context.Context) ([]Table, error) { return []Table{{ID: "db.a", Key: []string{"id"}}}, nil }})
	if err := e.Open(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Signal(context.Background(), SignalExecute, []byte(`{"data-collections":["db.a"]}`), OriginAPI, "r"); err != nil {
		t.Fatal(err)
	}
	e.Begin(nil, 1) // applies the command
	lag = 2 * time.Second
	if st := e.Begin(nil, 1); st.Kind != StepWait || e.Status().Throttled != "max.lag.ms" {
		t.Fatalf("step %+v, status %+v; want a wait for the lag", st, e.Status())
	}
	lag = 0
	if st := e.Begin(nil, 1); st.Kind != StepOpen {
		t.Fatalf("step %+v, want open", st)
	}
}

func TestPercentNeverGoesDown(t *testing.T) {
	prev := 0.0
	for rows := int64(0); rows <= 3000; rows += 7 {
		p := percent(rows, 2000)
		if p < prev || p > 99.9 {
			t.Fatalf("percent(%d, 2000) = %v after %v", rows, p, prev)
		}
		prev = p
	}
	if percent(1000, 2000) != 50 || percent(5, -1) != 99.9 || percent(0, 10) != 0 {
		t.Fatal("percent of known cases")
	}
}

func TestConfigChanged(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	store := &memStore{}
	f1 := map[string]string{"table.include.list": "db.a"}
	f2 := map[string]string{"table.include.list": "db.a,db.b"}
	added := func(_ context.Context, old map[string]string) ([]Table, error) {
		if old["table.include.list"] != "db.a" {
			t.Fatalf("old filter %v", old)
		}
		return []Table{{ID: "db.b", Key: []string{"id"}}, {ID: "db.nokey"}}, nil
	}
	e := newTestEngine(t, Settings{}, c, store)
	if err := e.ConfigChanged(context.Background(), f1, false, added); err != nil { // the first: recorded
		t.Fatal(err)
	}
	if err := e.ConfigChanged(context.Background(), f1, false, added); err != nil || len(store.entries) != 1 {
		t.Fatalf("same filter: %v, %d entries", err, len(store.entries))
	}
	// a restart with b added
	e = newTestEngine(t, Settings{}, c, store)
	if err := e.ConfigChanged(context.Background(), f2, false, added); err != nil {
		t.Fatal(err)
	}
	st := e.Status()
	if len(st.Tables) != 1 || st.Tables[0].Table != "db.b" || st.Tables[0].State != "PENDING" || !strings.HasPrefix(st.Tables[0].Request, "config-") {
		t.Fatalf("status after adding b: %+v", st)
	}
	// a later start knows it (the command carries the filter)
	e = newTestEngine(t, Settings{}, c, store)
	n := len(store.entries)
	if err := e.ConfigChanged(context.Background(), f2, false, added); err != nil || len(store.entries) != n {
		t.Fatalf("unchanged filter after the command: %v, %d entries (had %d)", err, len(store.entries), n)
	}
	// a fresh full snapshot only records a new filter, and marks the commands applied
	e = newTestEngine(t, Settings{}, c, store)
	e.Skip()
	if err := e.ConfigChanged(context.Background(), f1, true, added); err != nil || e.Status().RemainingTables != 0 || len(e.Status().Tables) != 0 {
		t.Fatalf("fresh: %v, %+v", err, e.Status())
	}
	var s state
	if err := json.Unmarshal(e.State(), &s); err != nil || s.Seq != 1 {
		t.Fatalf("state after Skip: %s %v", e.State(), err)
	}
}

// Commands are applied once: a restart from a position that applied them does not again.
func TestCommandsAppliedOnce(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	store := &memStore{}
	e := newTestEngine(t, Settings{ChunkSize: 10, NotifySink: true, NotifyTopic: "n"}, c, store)
	for _, sig := range []struct{ typ, data string }{
		{SignalExecute, `{"data-collections":["db\\.(a|b)"]}`},
		{SignalPause, ``},
	} {
		if _, err := e.Signal(context.Background(), sig.typ, []byte(sig.data), OriginAPI, ""); err != nil {
			t.Fatal(err)
		}
	}
	st := e.Begin([]byte{1}, 5)
	if st.Kind != StepNotify || len(st.Records) != 2 {
		t.Fatalf("step %+v, want STARTED and PAUSED", st)
	}
	for i, want := range []string{"STARTED", "PAUSED"} {
		v, _ := st.Records[i].Value.(connect.Row).Get("type")
		if v != want {
			t.Fatalf("notification %d: %v, want %s", i, v, want)
		}
	}
	if st := e.Begin([]byte{1}, 5); st.Kind != StepWait || e.Status().State != "PAUSED" {
		t.Fatalf("paused: %+v %+v", st, e.Status())
	}
	saved := append([]byte(nil), e.State()...)
	// a restart from that state: nothing to apply again
	e2 := newTestEngine(t, Settings{ChunkSize: 10}, c, store)
	if err := e2.Open(context.Background(), saved); err != nil {
		t.Fatal(err)
	}
	if !e2.Idle() || e2.Status().State != "PAUSED" || e2.Status().RemainingTables != 2 {
		t.Fatalf("after a restart: idle %v, %+v", e2.Idle(), e2.Status())
	}
	// from before them: both again
	e3 := newTestEngine(t, Settings{ChunkSize: 10}, c, store)
	if e3.Idle() || len(e3.Status().Tables) != 2 {
		t.Fatalf("restart before the commands: %+v", e3.Status())
	}
	// stop: the tables end STOPPED
	if _, err := e2.Signal(context.Background(), SignalStop, nil, OriginAPI, ""); err != nil {
		t.Fatal(err)
	}
	e2.Begin([]byte{1}, 6)
	for _, ts := range e2.Status().Tables {
		if ts.State != "STOPPED" {
			t.Fatalf("after stop: %+v", e2.Status())
		}
	}
}

// Orders grow through notifications and chunks at one stream position, and stay above the
// stream Order they extend.
func TestOrdersGrow(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	e := newTestEngine(t, Settings{ChunkSize: 3, NotifySink: true, NotifyTopic: "n", Parallel: 2}, c, nil)
	if _, err := e.Signal(context.Background(), SignalExecute, []byte(`{"data-collections":["db.a","db.b"]}`), OriginAPI, ""); err != nil {
		t.Fatal(err)
	}
	base := []byte{0, 7}
	var last []byte
	check := func(o []byte) {
		if string(o) <= string(last) || string(o) <= string(base) || string(o[:2]) != string(base) {
			t.Fatalf("order %x after %x (base %x)", o, last, base)
		}
		last = o
	}
	for i := 0; i < 6; i++ {
		st := e.Begin(base, Mark(100))
		switch st.Kind {
		case StepNotify:
			for _, r := range st.Records {
				check(r.Position.Order)
			}
		case StepOpen:
			if len(st.Tasks) != 2 {
				t.Fatalf("parallel 2: %d tasks", len(st.Tasks))
			}
			for _, task := range st.Tasks {
				e.Opened(&Window{Task: task, Low: 50, High: 90})
			}
		case StepEmit:
			em := e.StartEmit(st.Window, base, 100)
			for range 3 {
				check(em.Next().Order)
			}
			notes, end := em.Done(3, []string{"x"}, false)
			for _, r := range notes {
				check(r.Position.Order)
			}
			if string(end) != string(last) {
				t.Fatalf("end %x, last record %x", end, last)
			}
			e.Acked(end)
		}
	}
}

// TestSlotLagPause: chunks wait while the source's backlog in bytes (PostgreSQL's slot lag)
// is above its limit, and go on once it is not.
func TestSlotLagPause(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	var lag, limit int64 = 0, 1 << 20
	e := New(Options{Settings: Settings{ChunkSize: 10}, Now: c.Now, LagBytes: func() (int64, int64) { return lag, limit },
		Tables: func(context.Context) ([]Table, error) { return []Table{{ID: "db.a", Key: []string{"id"}}}, nil }})
	if err := e.Open(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Signal(context.Background(), SignalExecute, []byte(`{"data-collections":["db.a"]}`), OriginAPI, "r"); err != nil {
		t.Fatal(err)
	}
	e.Begin(nil, 1) // applies the command
	lag = 2 << 20
	if st := e.Begin(nil, 1); st.Kind != StepWait || st.Wait <= 0 || e.Status().State != "THROTTLED" || e.Status().Throttled != "max.slot.lag.bytes" {
		t.Fatalf("step %+v, status %+v; want a wait for the slot lag", st, e.Status())
	}
	if tasks := e.Prefetch(); tasks != nil {
		t.Fatalf("a chunk read ahead while the slot lag is above its limit: %v", tasks)
	}
	limit = 0 // no limit
	if st := e.Begin(nil, 1); st.Kind != StepOpen {
		t.Fatalf("step %+v with no limit, want open", st)
	}
}

// TestNotifications follows a table's snapshot through Debezium's notifications on the
// notification topic, and a stopped one.
func TestNotifications(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	e := newTestEngine(t, Settings{ChunkSize: 10, NotifySink: true, NotifyTopic: "notes"}, c, nil)
	type note struct{ typ, agg, data string }
	notes := func(recs []connect.Record) []note {
		t.Helper()
		var out []note
		for _, r := range recs {
			if r.Topic != "notes" {
				t.Fatalf("notification on topic %q", r.Topic)
			}
			v := r.Value.(connect.Row)
			typ, _ := v.Get("type")
			agg, _ := v.Get("aggregate_type")
			data, _ := v.Get("additional_data")
			b, err := connect.MarshalJSONValue(data)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, note{typ.(string), agg.(string), string(b)})
		}
		return out
	}
	want := func(what string, got, want []note) {
		t.Helper()
		if d := cmp.Diff(want, got, cmp.AllowUnexported(note{})); d != "" {
			t.Fatalf("%s (-want +got):\n%s", what, d)
		}
	}
	chunk := func(mark Mark, read int, last string, exhausted bool) []connect.Record {
		t.Helper()
		st := e.Begin([]byte{1}, mark)
		if st.Kind != StepOpen {
			t.Fatalf("step %v, want open", st.Kind)
		}
		e.Opened(&Window{Task: st.Tasks[0], Low: mark, High: mark})
		if st = e.Begin([]byte{1}, mark); st.Kind != StepEmit {
			t.Fatalf("step %v, want emit", st.Kind)
		}
		em := e.StartEmit(st.Window, []byte{1}, mark)
		for range read {
			em.Next()
		}
		recs, end := em.Done(read, []string{last}, exhausted)
		e.Acked(end)
		return recs
	}
	const inc = "Incremental Snapshot"
	if _, err := e.Signal(context.Background(), SignalExecute, []byte(`{"data-collections":["db.a"]}`), OriginAPI, "r1"); err != nil {
		t.Fatal(err)
	}
	st := e.Begin([]byte{1}, 5)
	if st.Kind != StepNotify {
		t.Fatalf("step %v, want the notification of the start", st.Kind)
	}
	want("start", notes(st.Records), []note{{"STARTED", inc, `{"connector_name":"c","data_collections":"db.a"}`}})
	want("first chunk", notes(chunk(10, 10, "9", false)), []note{
		{"IN_PROGRESS", inc, `{"connector_name":"c","data_collections":"db.a","current_collection_in_progress":"db.a","last_processed_key":"[\"9\"]","chunk_id":"1","rows_scanned":"10"}`},
	})
	want("last chunk", notes(chunk(20, 4, "13", true)), []note{
		{"IN_PROGRESS", inc, `{"connector_name":"c","data_collections":"db.a","current_collection_in_progress":"db.a","last_processed_key":"[\"13\"]","chunk_id":"2","rows_scanned":"14"}`},
		{"TABLE_SCAN_COMPLETED", inc, `{"connector_name":"c","data_collection":"db.a","scanned_collection":"db.a","total_rows_scanned":"14","status":"SUCCEEDED"}`},
		{"COMPLETED", inc, `{"connector_name":"c"}`},
	})
	if s := e.Stats(); s.ChunkID != 2 || s.RowsScanned["db.a"] != 14 || s.RemainingTableCount != 0 || s.IncrementalSnapshotRunning {
		t.Fatalf("stats after the snapshot: %+v", s)
	}

	// a stopped snapshot: ABORTED with the tables
	if _, err := e.Signal(context.Background(), SignalExecute, []byte(`{"data-collections":["db.b"],"type":"blocking"}`), OriginAPI, "r2"); err != nil {
		t.Fatal(err)
	}
	want("blocking start", notes(e.Begin([]byte{1}, 30).Records), []note{{"STARTED", "Blocking Snapshot", `{"connector_name":"c","data_collections":"db.b"}`}})
	if _, err := e.Signal(context.Background(), SignalStop, []byte(`{"data-collections":["db\\.b"]}`), OriginAPI, "r3"); err != nil {
		t.Fatal(err)
	}
	want("stop", notes(e.Begin([]byte{1}, 30).Records), []note{
		{"TABLE_SCAN_COMPLETED", "Blocking Snapshot", `{"connector_name":"c","data_collection":"db.b","scanned_collection":"db.b","total_rows_scanned":"0","status":"STOPPED"}`},
		{"ABORTED", inc, `{"connector_name":"c","data_collections":"db.b"}`},
	})
}
