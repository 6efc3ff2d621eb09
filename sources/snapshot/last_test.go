package snapshot

import (
	"math"
	"testing"

	"github.com/sluice-cdc/sluice/connect"
)

// MarkLast marks the source block, whether the value is a Row or a rendering: not a column of
// the image called snapshot, nor text that looks like the mark; a rendering keeps every other
// byte (a -0 keeps its sign), and a Row's shared source block is not changed.
func TestMarkLast(t *testing.T) {
	raw := `{"before":null,"after":{"snapshot":"true","x":-0,"s":"\"snapshot\":\"true\""},` +
		`"source":{"connector":"postgresql","snapshot":"true","db":"a\"snapshot\":\"true\""},"op":"r","ts_ms":5}`
	r := connect.Record{Value: connect.RawJSON(raw)}
	MarkLast(&r)
	want := `{"before":null,"after":{"snapshot":"true","x":-0,"s":"\"snapshot\":\"true\""},` +
		`"source":{"connector":"postgresql","snapshot":"last","db":"a\"snapshot\":\"true\""},"op":"r","ts_ms":5}`
	if got := string(r.Value.(connect.RawJSON)); got != want {
		t.Errorf("rendered:\n got %s\nwant %s", got, want)
	}

	src := connect.Row{{Name: "connector", Value: "mysql"}, {Name: "snapshot", Value: "true"}}
	env := connect.Row{{Name: "before", Value: nil}, {Name: "after", Value: connect.Row{{Name: "x", Value: math.Copysign(0, -1)}}},
		{Name: "source", Value: src}, {Name: "op", Value: "r"}, {Name: "ts_ms", Value: int64(5)}}
	r = connect.Record{Value: env}
	MarkLast(&r)
	got, _ := connect.AppendJSON(nil, r.Value)
	if want := `{"before":null,"after":{"x":-0},"source":{"connector":"mysql","snapshot":"last"},"op":"r","ts_ms":5}`; string(got) != want {
		t.Errorf("row:\n got %s\nwant %s", got, want)
	}
	if v, _ := src.Get("snapshot"); v != "true" {
		t.Errorf("the shared source block was changed: snapshot %v", v)
	}
	if v, _ := env[2].Value.(connect.Row).Get("snapshot"); v != "true" {
		t.Errorf("the record's old envelope was changed: snapshot %v", v)
	}
}
