package transforms

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sluice-cdc/sluice/connect"
)

func registry(t testing.TB) *connect.Registry {
	t.Helper()
	reg, err := connect.NewRegistry(Plugins()...)
	if err != nil {
		t.Fatalf("registry: %v", err)
	}
	return reg
}

// chainOf builds a chain from connector keys and fails the test on any config error.
func chainOf(t testing.TB, cfg map[string]string) *Chain {
	t.Helper()
	c, errs := BuildChain(registry(t), cfg)
	if len(errs) > 0 {
		t.Fatalf("BuildChain: %v", errs)
	}
	return c
}

// single builds a one-transform chain of the given type and options.
func single(t testing.TB, typ string, opts map[string]string) *Chain {
	t.Helper()
	cfg := map[string]string{"transforms": "t", "transforms.t.type": typ}
	for k, v := range opts {
		cfg["transforms.t."+k] = v
	}
	return chainOf(t, cfg)
}

// row builds a Row from name, value pairs.
func row(kv ...any) connect.Row {
	if len(kv)%2 != 0 {
		panic("row: odd arguments")
	}
	r := connect.Row{}
	for i := 0; i < len(kv); i += 2 {
		r = append(r, connect.Field{Name: kv[i].(string), Value: kv[i+1]})
	}
	return r
}

var testSource = row("version", "2.7.0", "connector", "mysql", "name", "dbserver1", "ts_ms", int64(1700000000000),
	"db", "inventory", "table", "customers", "file", "mysql-bin.000003", "pos", int64(154), "row", int64(0))

// event builds a change-event value with the test source block.
func event(op connect.Op, before, after connect.Row) connect.Row {
	e := connect.ChangeEvent{Op: op, Before: before, After: after, Source: testSource, TsMs: 1700000000123}
	return e.Row()
}

// rec builds a source-side record of the test table.
func rec(key any, value any, headers ...connect.Header) connect.Record {
	return connect.Record{
		Topic:     "dbserver1.inventory.customers",
		Partition: -1,
		Offset:    -1,
		Timestamp: time.UnixMilli(1700000000100).UTC(),
		Key:       key,
		Value:     value,
		Headers:   headers,
		Version:   42,
	}
}

// result is what one Apply produced, for exact comparison.
type result struct {
	Rec  connect.Record
	Keep bool
	Err  string
}

func applyOne(c connect.Transform, r connect.Record) result {
	out, keep, err := c.Apply(r)
	res := result{Rec: out, Keep: keep}
	if err != nil {
		res.Err = err.Error()
		res.Rec = connect.Record{}
	}
	if !keep {
		res.Rec = connect.Record{}
	}
	return res
}

func kept(r connect.Record) result { return result{Rec: r, Keep: true} }

var dropped = result{}

func failed(msg string) result { return result{Err: msg} }

// checkApply applies c to in and compares with want; it also checks that the input was not
// modified in place.
func checkApply(t *testing.T, c connect.Transform, in connect.Record, want result) {
	t.Helper()
	snapshot := cloneRecord(in)
	got := applyOne(c, in)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Apply mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(snapshot, in); diff != "" {
		t.Errorf("Apply modified its input (-before +after):\n%s", diff)
	}
}

func cloneRecord(r connect.Record) connect.Record {
	r.Key = connect.CloneValue(r.Key)
	r.Value = connect.CloneValue(r.Value)
	if r.Headers != nil {
		hs := make(connect.Headers, len(r.Headers))
		for i, h := range r.Headers {
			hs[i] = connect.Header{Key: h.Key, Value: connect.CloneValue(h.Value).([]byte)}
		}
		r.Headers = hs
	}
	return r
}

func hdr(k, v string) connect.Header { return connect.Header{Key: k, Value: []byte(v)} }

func with(r connect.Record, f func(*connect.Record)) connect.Record {
	f(&r)
	return r
}

func fmtErrs(errs []connect.FieldError) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = fmt.Sprintf("%s: %s", e.Key, e.Message)
	}
	return out
}
