package transforms

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/connect"
)

// deepCopy copies the rows of a value, so that a later change of the original shows.
func deepCopy(v any) any {
	r, ok := v.(connect.Row)
	if !ok || r == nil {
		return v
	}
	out := make(connect.Row, len(r))
	for i, f := range r {
		out[i] = connect.Field{Name: f.Name, Value: deepCopy(f.Value)}
	}
	return out
}

// The chain changes rows in place only when one of its own steps built them: the record a
// caller passes in is never written, whatever the chain, and applying the chain twice to it
// gives the same result.
func TestChainNeverWritesItsInput(t *testing.T) {
	flat := rec(row("id", int64(7)), row("id", int64(7), "name", "x", "password", "secret"))
	before, _ := benchRecord().Value.(connect.Row).Get(connect.FieldBefore)
	deleted := rec(row("id", int64(1004)), event(connect.OpDelete, before.(connect.Row), nil))
	chains := map[string]map[string]string{
		"five": fiveTransforms,
		"unwrap without added fields": {
			"transforms": "unwrap,strip,tag", "transforms.unwrap.type": "unwrap",
			"transforms.strip.type": "replace_field", "transforms.strip.exclude": "password",
			"transforms.tag.type": "insert_field", "transforms.tag.static.field": "origin", "transforms.tag.static.value": "sluice",
		},
		"no unwrap": {
			"transforms":            "strip,tag",
			"transforms.strip.type": "replace_field", "transforms.strip.exclude": "password",
			"transforms.tag.type": "insert_field", "transforms.tag.static.field": "origin", "transforms.tag.static.value": "sluice",
		},
		"value_to_key between": {
			"transforms": "unwrap,key,strip,tag", "transforms.unwrap.type": "unwrap", "transforms.unwrap.add.fields": "op",
			"transforms.key.type": "value_to_key", "transforms.key.fields": "id,password",
			"transforms.strip.type": "replace_field", "transforms.strip.exclude": "password", "transforms.strip.renames": "id:ID",
			"transforms.tag.type": "insert_field", "transforms.tag.static.field": "origin", "transforms.tag.static.value": "sluice",
		},
	}
	for name, cfg := range chains {
		c := chainOf(t, cfg)
		for _, in := range []connect.Record{benchRecord(), flat, deleted} {
			key, value := deepCopy(in.Key), deepCopy(in.Value)
			first, keep1, err1 := c.Apply(in)
			second, keep2, err2 := c.Apply(in)
			if err1 != nil || err2 != nil || keep1 != keep2 {
				t.Fatalf("%s: %v %v %v %v", name, keep1, keep2, err1, err2)
			}
			if d := cmp.Diff(value, in.Value); d != "" {
				t.Errorf("%s: the chain wrote the value it was given (-before +after):\n%s", name, d)
			}
			if d := cmp.Diff(key, in.Key); d != "" {
				t.Errorf("%s: the chain wrote the key it was given (-before +after):\n%s", name, d)
			}
			if d := cmp.Diff(first, second); d != "" {
				t.Errorf("%s: two applications differ (-first +second):\n%s", name, d)
			}
		}
	}
}

// Rows changed in place have the same content as rows built anew: the five-transform chain's
// output, step by step.
func TestChainInPlaceResult(t *testing.T) {
	out, keep, err := chainOf(t, fiveTransforms).Apply(benchRecord())
	if err != nil || !keep {
		t.Fatalf("keep=%v err=%v", keep, err)
	}
	want := row("id", int64(1004), "first_name", "Anne Marie", "last_name", "Kretchmar", "email", "annek@noanswer.org",
		"status", "active", "created_at", int64(1700000000000), "balance", "12.75", "country", "DE", "vip", true,
		"__op", "u", "__table", "customers", "__deleted", "false", "origin", "sluice")
	if d := cmp.Diff(want, out.Value); d != "" {
		t.Errorf("value (-want +got):\n%s", d)
	}
	if out.Topic != "customers" {
		t.Errorf("topic %q, want customers", out.Topic)
	}
	// The key keeps its own row when value_to_key took fields of an owned value.
	out, _, err = chainOf(t, map[string]string{
		"transforms": "unwrap,key,strip", "transforms.unwrap.type": "unwrap", "transforms.unwrap.add.fields": "op",
		"transforms.key.type": "value_to_key", "transforms.key.fields": "id,password",
		"transforms.strip.type": "replace_field", "transforms.strip.exclude": "password", "transforms.strip.renames": "id:ID",
	}).Apply(benchRecord())
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(row("id", int64(1004), "password", "x"), out.Key); d != "" {
		t.Errorf("key (-want +got):\n%s", d)
	}
}
