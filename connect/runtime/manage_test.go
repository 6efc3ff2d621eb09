package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/connect/runtime/runtimetest"
	"github.com/sluice-cdc/sluice/sources/datagen"
)

// countRecords returns how many records the topics of a datagen connector with prefix hold.
func countRecords(t *testing.T, log runtime.Log, prefix string) int {
	t.Helper()
	n := 0
	for _, topic := range log.Topics() {
		if strings.HasPrefix(topic, prefix+".") {
			n += len(readAll(t, log, topic))
		}
	}
	return n
}

// Connectors created through the API survive a restart of the runtime with their
// configuration, target state and offsets; file connectors keep their state too, with the
// file's configuration.
func TestRestoreAfterRestart(t *testing.T) {
	log := runtimetest.NewLog()
	ctx := t.Context()
	h := newHarness(t, log, newRegistry(t), nil)
	h.add("filegen", "datagen", datagenConfig(0, 10, 10, "datagen.rate", "500", "topic.prefix", "f"))
	if err := h.rt.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.rt.Create(ctx, runtime.ConnectorSpec{Name: "apigen", Config: datagenConfig(30, 10, 10, "connector.class", "datagen", "topic.prefix", "a")}); err != nil {
		t.Fatal(err)
	}
	if err := h.rt.Create(ctx, runtime.ConnectorSpec{Name: "idle", Class: "datagen", Config: datagenConfig(5, 5, 5, "topic.prefix", "i"), State: runtime.StateStopped}); err != nil {
		t.Fatal(err)
	}
	if err := h.rt.Create(ctx, runtime.ConnectorSpec{Name: "idle", Class: "datagen", Config: datagenConfig(5, 5, 5)}); !errors.Is(err, runtime.ErrConnectorExists) {
		t.Fatalf("second Create: %v, want ErrConnectorExists", err)
	}
	h.start()
	waitFor(t, "apigen's 30 events", func() bool { return countRecords(t, log, "a") >= 30 })
	if err := h.rt.Pause("filegen"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.rt.Put(ctx, runtime.ConnectorSpec{Name: "filegen", Class: "datagen", Config: datagenConfig(0, 1, 1)}); !errors.Is(err, runtime.ErrDefinedInFile) {
		t.Fatalf("Put of a file connector: %v, want ErrDefinedInFile", err)
	}
	h.stop()
	apiOffset, err := h.rt.SourceOffset(ctx, "apigen")
	if err != nil || apiOffset.IsZero() {
		t.Fatalf("apigen's offset %v, %v", apiOffset, err)
	}

	// A new runtime over the same log: the file connector is added from the "file" again.
	h2 := newHarness(t, log, newRegistry(t), nil)
	h2.add("filegen", "datagen", datagenConfig(0, 10, 10, "datagen.rate", "500", "topic.prefix", "f"))
	if err := h2.rt.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"apigen", "filegen", "idle"}, h2.rt.Names()); diff != "" {
		t.Fatalf("connectors after restart (-want +got):\n%s", diff)
	}
	states := map[string]runtime.State{}
	for _, n := range h2.rt.Names() {
		st, _ := h2.rt.Status(n)
		states[n] = st.Connector.State
	}
	want := map[string]runtime.State{"apigen": runtime.StateUnassigned, "filegen": runtime.StatePaused, "idle": runtime.StateStopped}
	if diff := cmp.Diff(want, states); diff != "" {
		t.Fatalf("states after restart (-want +got):\n%s", diff)
	}
	class, cfg, err := h2.rt.Config("apigen")
	if err != nil || class != "datagen" || cfg["datagen.max.events"] != "30" {
		t.Fatalf("apigen config after restart: %s %v %v", class, cfg, err)
	}
	if got, _ := h2.rt.SourceOffset(ctx, "apigen"); got.Compare(apiOffset) != 0 {
		t.Fatalf("apigen offset after restart %v, want %v", got, apiOffset)
	}
	h2.start()
	h2.waitState("apigen", runtime.StateRunning)
	time.Sleep(100 * time.Millisecond)
	if n := countRecords(t, log, "a"); n != 30 {
		t.Fatalf("apigen's topics hold %d records after the restart, want 30 (it resumed at its offset)", n)
	}
	// Delete is stored too.
	if err := h2.rt.Delete(ctx, "idle"); err != nil {
		t.Fatal(err)
	}
	h2.stop()
	h3 := newHarness(t, log, newRegistry(t), nil)
	if err := h3.rt.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"apigen"}, h3.rt.Names()); diff != "" {
		t.Fatalf("connectors after delete and restart, without the file (-want +got):\n%s", diff)
	}
}

// A stored connector whose configuration no longer resolves is restored FAILED with the
// reason, and can be fixed with Put.
func TestRestoreBrokenConnector(t *testing.T) {
	log := runtimetest.NewLog()
	ctx := t.Context()
	env := map[string]string{"KEYS": "10"}
	resolve := func(cfg map[string]string) (map[string]string, []connect.FieldError) {
		out := map[string]string{}
		var errs []connect.FieldError
		for k, v := range cfg {
			if v == "${env:KEYS}" {
				x, ok := env["KEYS"]
				if !ok {
					errs = append(errs, connect.FieldError{Key: k, Message: "environment variable KEYS is not set (from ${env:KEYS})"})
				}
				v = x
			}
			out[k] = v
		}
		return out, errs
	}
	h := newHarness(t, log, newRegistry(t), func(o *runtime.Options) { o.Resolve = resolve })
	if err := h.rt.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := datagenConfig(5, 5, 5, "datagen.keys", "${env:KEYS}")
	if err := h.rt.Create(ctx, runtime.ConnectorSpec{Name: "g", Class: "datagen", Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if _, c, _ := h.rt.Config("g"); c["datagen.keys"] != "${env:KEYS}" {
		t.Fatalf("config shows %q, want the placeholder", c["datagen.keys"])
	}
	// A resolved value that does not validate is not shown, its placeholder is.
	env["KEYS"] = "many-keys"
	err := h.rt.Create(ctx, runtime.ConnectorSpec{Name: "g2", Class: "datagen", Config: cfg})
	if err == nil || strings.Contains(err.Error(), "many-keys") || !strings.Contains(err.Error(), `datagen.keys: must be an integer (got ${env:KEYS})`) {
		t.Fatalf("Create with a bad resolved value: %v", err)
	}
	delete(env, "KEYS")
	h2 := newHarness(t, log, newRegistry(t), func(o *runtime.Options) { o.Resolve = resolve })
	if err := h2.rt.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	h2.start()
	st := h2.waitState("g", runtime.StateFailed)
	if !strings.Contains(st.Tasks[0].Trace, "environment variable KEYS is not set") {
		t.Fatalf("trace %q does not name the missing variable", st.Tasks[0].Trace)
	}
	if _, err := h2.rt.Put(ctx, runtime.ConnectorSpec{Name: "g", Class: "datagen", Config: datagenConfig(5, 5, 5)}); err != nil {
		t.Fatal(err)
	}
	h2.waitState("g", runtime.StateRunning)
}

// After a reset or an alteration of a stopped source's offset, the records it reads again are
// appended, not dropped as replays.
func TestAlterAndResetSourceOffset(t *testing.T) {
	log := runtimetest.NewLog()
	ctx := t.Context()
	h := newHarness(t, log, newRegistry(t), nil)
	if err := h.rt.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := datagenConfig(40, 10, 10)
	h.add("gen", "datagen", cfg)
	s := settings(t, cfg)
	records := func(from, to int64) int {
		n := 0
		for i := from; i < to; i++ {
			n += len(s.Records(i))
		}
		return n
	}
	all := records(0, 40)
	h.start()
	waitFor(t, "40 events", func() bool { return countRecords(t, log, "gen") >= all })
	if err := h.rt.ResetSourceOffset(ctx, "gen"); !errors.Is(err, runtime.ErrNotStopped) {
		t.Fatalf("reset while running: %v, want ErrNotStopped", err)
	}
	if err := h.rt.Stop(ctx, "gen"); err != nil {
		t.Fatal(err)
	}
	if err := h.rt.ResetSourceOffset(ctx, "gen"); err != nil {
		t.Fatal(err)
	}
	if pos, _ := h.rt.SourceOffset(ctx, "gen"); !pos.IsZero() {
		t.Fatalf("offset after reset %v, want none", pos)
	}
	if err := h.rt.Resume("gen"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the 40 events again", func() bool { return countRecords(t, log, "gen") >= 2*all })
	if err := h.rt.Stop(ctx, "gen"); err != nil {
		t.Fatal(err)
	}
	state, errs := runtime.SourceOffsetState("datagen", json.RawMessage(`{"v":1,"next":30}`), nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if err := h.rt.AlterSourceOffset(ctx, "gen", connect.Position{State: state}); err != nil {
		t.Fatal(err)
	}
	if err := h.rt.Resume("gen"); err != nil {
		t.Fatal(err)
	}
	want := 2*all + records(30, 40)
	waitFor(t, "events 30..39 again", func() bool { return countRecords(t, log, "gen") >= want })
	time.Sleep(100 * time.Millisecond)
	if n := countRecords(t, log, "gen"); n != want {
		t.Fatalf("%d records, want %d", n, want)
	}
	// A restart of the task in the new generation still drops its replays.
	if err := h.rt.Restart(ctx, "gen", false); err != nil {
		t.Fatal(err)
	}
	h.waitState("gen", runtime.StateRunning)
	time.Sleep(100 * time.Millisecond)
	if n := countRecords(t, log, "gen"); n != want {
		t.Fatalf("%d records after a restart, want %d", n, want)
	}
}

func TestSourceOffsetState(t *testing.T) {
	for _, tc := range []struct {
		plugin, offset, current, want, err string
	}{
		{plugin: "mysql", offset: `{"file":"mariadb-bin.000003","pos":1234}`, current: `{"v":1,"epoch":2,"file":"x.000001","pos":4}`,
			want: `{"v":1,"epoch":2,"file":"mariadb-bin.000003","pos":1234}`},
		{plugin: "mysql", offset: `{"file":"mariadb-bin.000003","pos":1234,"gtids":"0-1-5","ts_sec":1}`, want: `{"v":1,"epoch":0,"file":"mariadb-bin.000003","pos":1234}`},
		{plugin: "mysql", offset: `{"v":1,"epoch":0,"file":"mariadb-bin.000003","pos":1234,"row":2}`, want: `{"epoch":0,"file":"mariadb-bin.000003","pos":1234,"row":2,"v":1}`},
		{plugin: "mysql", offset: `{"file":"mariadb-bin","pos":1234}`, err: `offset.file: must be a binlog file name ending in a number, e.g. "mariadb-bin.000003" (got "mariadb-bin")`},
		{plugin: "mysql", offset: `{"file":"mariadb-bin.000003","pos":-1}`, err: `offset.pos: must be a non-negative integer (got -1)`},
		{plugin: "mysql", offset: `{"file":"mariadb-bin.000003"}`, err: `offset.pos: is required (a binlog position, at least 4)`},
		{plugin: "mysql", offset: `{"file":"mariadb-bin.000003","poss":4}`, err: `offset.poss: unknown field; did you mean "pos"?`},
		{plugin: "postgres", offset: `{"lsn":23803720}`, want: `{"v":1,"epoch":0,"lsn":"0/16B3748","change":0,"record":0,"end":"0/16B3748"}`},
		{plugin: "postgres", offset: `{"lsn":"0/16B3748","txId":5}`, want: `{"v":1,"epoch":0,"lsn":"0/16B3748","change":0,"record":0,"end":"0/16B3748"}`},
		{plugin: "postgres", offset: `{"lsn":"16B3748"}`, err: `offset.lsn: must be a non-negative integer or an LSN like "0/16B3748" (got "16B3748")`},
		{plugin: "postgres", offset: `{"v":1,"epoch":0,"lsn":"0/1","change":3,"record":1}`, want: `{"change":3,"epoch":0,"lsn":"0/1","record":1,"v":1}`},
		{plugin: "postgres", offset: `{"v":2,"lsn":"0/1"}`, err: `offset.v: must be 1 (got 2)`},
		{plugin: "datagen", offset: `{"v":1,"next":7}`, want: `{"v":1,"next":7}`},
		{plugin: "datagen", offset: `{"v":1}`, err: `offset.next: is required: the number of the next event, at least 0`},
		{plugin: "other", offset: `{"anything":[1]}`, want: `{"anything":[1]}`},
		{plugin: "other", offset: `[1]`, err: `offset: must be a JSON object (the source's position)`},
	} {
		t.Run(tc.plugin+" "+tc.offset, func(t *testing.T) {
			got, errs := runtime.SourceOffsetState(tc.plugin, json.RawMessage(tc.offset), []byte(tc.current))
			if tc.err != "" {
				if len(errs) != 1 || errs[0].Error() != tc.err {
					t.Fatalf("errors %v, want %q", errs, tc.err)
				}
				return
			}
			if len(errs) > 0 || string(got) != tc.want {
				t.Fatalf("got %s %v, want %s", got, errs, tc.want)
			}
		})
	}
}

func TestParseWaitTarget(t *testing.T) {
	for _, tc := range []struct {
		plugin, target, state string
		passed                bool
	}{
		{"mysql", "mariadb-bin.000003:1234", `{"v":1,"epoch":0,"file":"mariadb-bin.000003","pos":1234}`, true},
		{"mysql", "mariadb-bin.000003:1234", `{"v":1,"epoch":0,"file":"mariadb-bin.000003","pos":1000,"row":5}`, false},
		{"mysql", "mariadb-bin.000003:1234", `{"v":1,"epoch":0,"file":"mariadb-bin.000004","pos":4}`, true},
		{"mysql", "mariadb-bin.000003:1234", `{"v":1,"epoch":0,"snapshot":{"tables":[]}}`, false},
		{"postgres", "0/16B3748", `{"v":1,"epoch":0,"lsn":"0/16B3700","change":2,"record":0,"end":"0/16B3750"}`, true},
		{"postgres", "0/16B3748", `{"v":1,"epoch":0,"lsn":"0/16B3700","change":2,"record":0}`, false},
		{"postgres", "0/16B3748", `{"v":1,"epoch":0,"lsn":"0/16B3748","change":0,"record":0,"end":"0/16B3748"}`, true},
		{"datagen", "42", `{"v":1,"next":42}`, true},
		{"datagen", "42", `{"v":1,"next":41}`, false},
	} {
		t.Run(tc.plugin+" "+tc.target+" "+tc.state, func(t *testing.T) {
			passed, err := runtime.ParseWaitTarget(tc.plugin, tc.target)
			if err != nil {
				t.Fatal(err)
			}
			if got := passed(connect.Position{State: []byte(tc.state)}); got != tc.passed {
				t.Fatalf("passed = %v, want %v", got, tc.passed)
			}
		})
	}
	if _, err := runtime.ParseWaitTarget("postgres", "mariadb-bin.000003:4"); err == nil || !strings.Contains(err.Error(), `a postgres position looks like "0/16B3748"`) {
		t.Fatalf("a MySQL position for postgres: %v", err)
	}
}

// Sink offsets: reset makes the sink read its topics again from the start; an alteration
// outside a partition is refused.
func TestSinkOffsets(t *testing.T) {
	log := runtimetest.NewLog()
	ctx := t.Context()
	sink := runtimetest.NewSink()
	h := newHarness(t, log, newRegistry(t, sink.Plugin("mem")), nil)
	h.add("gen", "datagen", datagenConfig(20, 5, 10, "datagen.tables", "customers"))
	h.add("out", "mem", map[string]string{"topics": "gen.inventory.customers"})
	h.start()
	waitFor(t, "20 events in the sink", func() bool {
		n := len(sink.Records())
		return n >= 20 && n == countRecords(t, log, "gen")
	})
	total := int64(len(sink.Records()))
	tp := runtime.TopicPartition{Topic: "gen.inventory.customers", Partition: 0}
	waitFor(t, "the sink's commit", func() bool {
		offs, err := h.rt.SinkOffsets("out")
		return err == nil && offs[tp] == total
	})
	if err := h.rt.ResetSinkOffsets(ctx, "out"); !errors.Is(err, runtime.ErrNotStopped) {
		t.Fatalf("reset while running: %v", err)
	}
	if err := h.rt.Stop(ctx, "out"); err != nil {
		t.Fatal(err)
	}
	var soe *runtime.SinkOffsetError
	if err := h.rt.AlterSinkOffsets(ctx, "out", map[runtime.TopicPartition]int64{tp: total + 1}); !errors.As(err, &soe) {
		t.Fatalf("offset past the end: %v, want a SinkOffsetError", err)
	}
	if err := h.rt.AlterSinkOffsets(ctx, "out", map[runtime.TopicPartition]int64{{Topic: "gen.inventory.customers", Partition: 3}: 0}); !errors.As(err, &soe) {
		t.Fatalf("missing partition: %v, want a SinkOffsetError", err)
	}
	if err := h.rt.AlterSinkOffsets(ctx, "out", map[runtime.TopicPartition]int64{tp: total - 5}); err != nil {
		t.Fatal(err)
	}
	if err := h.rt.Resume("out"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the last 5 records again", func() bool { return int64(len(sink.Records())) >= total+5 })
	if err := h.rt.Stop(ctx, "out"); err != nil {
		t.Fatal(err)
	}
	if err := h.rt.ResetSinkOffsets(ctx, "out"); err != nil {
		t.Fatal(err)
	}
	if offs, _ := h.rt.SinkOffsets("out"); len(offs) != 0 {
		t.Fatalf("offsets after reset: %v, want none", offs)
	}
	if err := h.rt.Resume("out"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "all records again", func() bool { return int64(len(sink.Records())) >= 2*total+5 })
}

// WaitFor returns once the sink has written everything up to the position, and times out
// with a message when the source never gets there.
func TestWaitFor(t *testing.T) {
	log := runtimetest.NewLog()
	sink := runtimetest.NewSink()
	h := newHarness(t, log, newRegistry(t, sink.Plugin("mem")), nil)
	h.add("gen", "datagen", datagenConfig(300, 1000, 10, "datagen.rate", "1000", "datagen.tables", "customers"))
	h.add("out", "mem", map[string]string{"topics": "gen.inventory.customers"})
	h.start()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	res, err := h.rt.WaitFor(ctx, "out", "", "150")
	if err != nil {
		t.Fatal(err)
	}
	if res.Source != "gen" {
		t.Fatalf("source %q, want gen", res.Source)
	}
	// Right after the wait, the sink holds event 149.
	found := false
	for _, r := range sink.Records() {
		if r.Version == 150 {
			found = true
		}
	}
	if !found {
		t.Fatalf("event 149 (version 150) is not in the sink after the wait (%d records)", len(sink.Records()))
	}
	short, cancel2 := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel2()
	_, err = h.rt.WaitFor(short, "out", "gen", "100000")
	var te *runtime.WaitTimeoutError
	if !errors.As(err, &te) || te.Stage != "source" || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait for a position never reached: %v", err)
	}
	var we *runtime.WaitError
	if _, err := h.rt.WaitFor(t.Context(), "gen", "", "5"); !errors.As(err, &we) {
		t.Fatalf("wait on a source: %v", err)
	}
	if _, err := h.rt.WaitFor(t.Context(), "out", "", "0/16B3748"); !errors.As(err, &we) || !strings.Contains(err.Error(), "no source connector has positions like") {
		t.Fatalf("wait with an LSN and no postgres source: %v", err)
	}
}

// A rebuild while the source keeps writing ends with a live view equal to the log's, in a
// new generation; the sink never stopped.
func TestRebuild(t *testing.T) {
	log := runtimetest.NewLog()
	view := runtimetest.NewView()
	h := newHarness(t, log, newRegistry(t, view.Plugin("view")), nil)
	h.add("gen", "datagen", datagenConfig(3000, 200, 20, "datagen.rate", "3000", "datagen.tables", "customers"))
	h.add("out", "view", map[string]string{"topics": "gen.inventory.customers"})
	if _, err := h.rt.Rebuild("out"); !errors.Is(err, runtime.ErrNotRunning) {
		t.Fatalf("rebuild before Run: %v", err)
	}
	h.start()
	h.waitState("out", runtime.StateRunning)
	waitFor(t, "some writes", func() bool { return countRecords(t, log, "gen") > 500 })
	if _, err := h.rt.Rebuild("gen"); !errors.Is(err, runtime.ErrNoRebuild) {
		t.Fatalf("rebuild of a source: %v", err)
	}
	if _, err := h.rt.Rebuild("out"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.rt.Rebuild("out"); !errors.Is(err, runtime.ErrRebuildRunning) {
		t.Fatalf("second rebuild: %v", err)
	}
	var st runtime.RebuildStatus
	waitFor(t, "the rebuild", func() bool {
		st, _, _ = h.rt.RebuildState("out")
		return st.State != runtime.RebuildRunning && st.State != runtime.RebuildAborting
	})
	if st.State != runtime.RebuildDone || st.Replayed < 500 {
		t.Fatalf("rebuild ended %+v", st)
	}
	if _, live := view.Live(); live != 1 {
		t.Fatalf("live generation %d, want 1", live)
	}
	// Once everything is written, the rebuilt live view equals the log folded by key.
	waitFor(t, "3000 events", func() bool { return countRecords(t, log, "gen") >= 3000 })
	want := map[string]string{}
	var last int64
	waitFor(t, "the sink to finish", func() bool {
		offs, _ := h.rt.SinkOffsets("out")
		total := int64(0)
		for _, o := range offs {
			total += o
		}
		done := total == int64(countRecords(t, log, "gen")) && total == last
		last = total
		return done
	})
	for _, lr := range readAll(t, log, "gen.inventory.customers") {
		k, _ := connect.AppendJSON(nil, lr.rec.Key)
		if lr.rec.Value == nil {
			delete(want, string(k))
			continue
		}
		v, _ := connect.AppendJSON(nil, lr.rec.Value)
		want[string(k)] = string(v)
	}
	got, _ := view.Live()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("rebuilt view differs from the log (-want +got):\n%.2000s", diff)
	}
}

// A sink paused while it waits for records writes nothing until it is resumed (it used to
// write the first batch that arrived after the pause).
func TestPauseIdleSink(t *testing.T) {
	log := runtimetest.NewLog()
	ctx := t.Context()
	sink := runtimetest.NewSink()
	h := newHarness(t, log, newRegistry(t, sink.Plugin("mem")), nil)
	h.add("gen", "datagen", datagenConfig(0, 5, 10, "datagen.rate", "500", "datagen.tables", "customers"))
	h.add("out", "mem", map[string]string{"topics": "gen.inventory.customers"})
	h.start()
	waitFor(t, "writes", func() bool { return len(sink.Records()) > 20 })
	if err := h.rt.Stop(ctx, "gen"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the sink to be idle", func() bool {
		n := len(sink.Records())
		return n == countRecords(t, log, "gen")
	})
	time.Sleep(100 * time.Millisecond) // the writer waits for input
	if err := h.rt.Pause("out"); err != nil {
		t.Fatal(err)
	}
	n := len(sink.Records())
	if err := h.rt.Resume("gen"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "new records in the log", func() bool { return countRecords(t, log, "gen") > n+20 })
	time.Sleep(200 * time.Millisecond)
	if m := len(sink.Records()); m != n {
		t.Fatalf("the paused sink wrote %d records", m-n)
	}
	if err := h.rt.Resume("out"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "writes after resume", func() bool { return len(sink.Records()) > n+20 })
}

// A wait returns only once the sink committed the last record the position covers, not one
// before: the sink writes one record per batch and is held at the last one.
func TestWaitForTheLastRecord(t *testing.T) {
	const events = 20
	log := runtimetest.NewLog()
	sink := runtimetest.NewSink()
	cfg := datagenConfig(events, 1000, 5, "datagen.tables", "customers")
	total := expectedRecords(settings(t, cfg), events)
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	var mu sync.Mutex
	written := 0
	sink.Hook = func(batch []connect.Record) error {
		mu.Lock()
		last := written+len(batch) >= total
		mu.Unlock()
		if last {
			<-release
		}
		mu.Lock()
		written += len(batch)
		mu.Unlock()
		return nil
	}
	h := newHarness(t, log, newRegistry(t, sink.Plugin("mem")), nil)
	h.add("gen", "datagen", cfg)
	h.add("out", "mem", map[string]string{"topics": "gen.inventory.customers", "consumer.override.max.poll.records": "1"})
	h.start()
	t.Cleanup(open) // before the harness stops
	waitFor(t, "the sink to hold all but the last record", func() bool { return len(sink.Records()) == total-1 })
	short, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := h.rt.WaitFor(short, "out", "", strconv.Itoa(events))
	var te *runtime.WaitTimeoutError
	if !errors.As(err, &te) || te.Stage != "sink" {
		t.Fatalf("wait while the last record is unwritten: %v; want a timeout in the sink stage", err)
	}
	open()
	ctx, cancel2 := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel2()
	if _, err := h.rt.WaitFor(ctx, "out", "", strconv.Itoa(events)); err != nil {
		t.Fatal(err)
	}
	if n := len(sink.Records()); n != total {
		t.Fatalf("the sink has %d records right after the wait, want %d", n, total)
	}
}

// checkedSource is a datagen source whose server keeps only the first 40 events.
type checkedSource struct {
	connect.Source
	checks *atomic.Int64
}

func (s *checkedSource) CheckPosition(_ context.Context, pos connect.Position) error {
	s.checks.Add(1)
	var st struct {
		Next int64 `json:"next"`
	}
	if err := json.Unmarshal(pos.State, &st); err != nil {
		return err
	}
	if st.Next > 40 {
		return fmt.Errorf("event %d is not on the server (it has events 0 to 39)", st.Next)
	}
	return nil
}

// checkedPlugin is datagen with checkedSource's CheckPosition.
func checkedPlugin(checks *atomic.Int64) connect.Plugin {
	p := datagen.Plugin()
	inner := p.NewSource
	p.Name, p.NewSource = "checked", func(cfg connect.Config, env connect.Env) (connect.Source, error) {
		src, err := inner(cfg, env)
		return &checkedSource{Source: src, checks: checks}, err
	}
	return p
}

// An altered source offset is checked by a source that implements PositionChecker: one it
// refuses is an *OffsetError with the source's reason and leaves the committed offset as it
// was; one it accepts is stored.
func TestAlterSourceOffsetChecked(t *testing.T) {
	log := runtimetest.NewLog()
	ctx := t.Context()
	var checks atomic.Int64
	h := newHarness(t, log, newRegistry(t, checkedPlugin(&checks)), nil)
	h.add("gen", "checked", datagenConfig(40, 10, 10))
	h.start()
	waitFor(t, "40 events", func() bool {
		pos, err := h.rt.SourceOffset(ctx, "gen")
		return err == nil && string(pos.State) == `{"v":1,"next":40}`
	})
	if err := h.rt.Stop(ctx, "gen"); err != nil {
		t.Fatal(err)
	}
	state := func(next int) []byte {
		s, errs := runtime.SourceOffsetState("datagen", json.RawMessage(fmt.Sprintf(`{"v":1,"next":%d}`, next)), nil)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		return s
	}
	err := h.rt.AlterSourceOffset(ctx, "gen", connect.Position{State: state(50)})
	var oe *runtime.OffsetError
	if !errors.As(err, &oe) || err.Error() != "connector gen: offset refused: event 50 is not on the server (it has events 0 to 39)" {
		t.Fatalf("alter to a position the server lacks: %v, want an *OffsetError with the source's reason", err)
	}
	if pos, _ := h.rt.SourceOffset(ctx, "gen"); string(pos.State) != `{"v":1,"next":40}` {
		t.Fatalf("offset after a refused alteration: %s, want it unchanged", pos.State)
	}
	if err := h.rt.AlterSourceOffset(ctx, "gen", connect.Position{State: state(30)}); err != nil {
		t.Fatal(err)
	}
	if pos, _ := h.rt.SourceOffset(ctx, "gen"); string(pos.State) != `{"v":1,"next":30}` {
		t.Fatalf("offset after the alteration: %s, want next 30", pos.State)
	}
	if n := checks.Load(); n != 2 {
		t.Fatalf("%d checks, want one per alteration", n)
	}
}
