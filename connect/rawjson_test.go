package connect

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
)

// A RawJSON renders as the text it holds, at the top level and inside a Row; Materialize and
// ParseChangeEvent parse it; CloneValue copies its bytes.
func TestRawJSON(t *testing.T) {
	ev := RawJSON(`{"before":null,"after":{"id":1,"s":"x\"y"},"source":{"table":"t"},"op":"r","ts_ms":5}`)
	row := Row{{Name: "k", Value: RawJSON(`{"id":1}`)}, {Name: "n", Value: int64(2)}}
	for _, c := range []struct {
		v    any
		want string
	}{{ev, string(ev)}, {row, `{"k":{"id":1},"n":2}`}, {[]any{RawJSON(`[1,"a"]`)}, `[[1,"a"]]`}} {
		got, err := AppendJSON([]byte("pre:"), c.v)
		if err != nil || string(got) != "pre:"+c.want {
			t.Errorf("AppendJSON(%#v) = %s, %v; want pre:%s", c.v, got, err, c.want)
		}
		var m JSONMemo
		if got, err := AppendJSONMemo(nil, c.v, &m); err != nil || string(got) != c.want {
			t.Errorf("AppendJSONMemo(%#v) = %s, %v; want %s", c.v, got, err, c.want)
		}
	}
	if _, err := AppendJSON(nil, RawJSON{}); err == nil || err.Error() != "raw JSON value is empty" {
		t.Errorf("empty RawJSON: %v", err)
	}

	v, err := Materialize(ev)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := v.(Row).Get("after")
	if s, _ := after.(Row).Get("s"); s != `x"y` {
		t.Errorf("materialized after.s = %#v", s)
	}
	if x, err := Materialize(row); err != nil || fmt.Sprint(x) != fmt.Sprint(row) {
		t.Errorf("Materialize of a Row: %v, %v", x, err)
	}
	if _, err := Materialize(RawJSON(`{"a":`)); err == nil || err.Error()[:16] != "raw JSON value: " {
		t.Errorf("Materialize of bad JSON: %v", err)
	}
	e, err := ParseChangeEvent(ev)
	if err != nil || e.Op != OpRead || len(e.After) != 2 || e.Before != nil {
		t.Errorf("ParseChangeEvent: %+v, %v", e, err)
	}
	if _, err := ParseChangeEvent(RawJSON(`{"id":1}`)); !errors.Is(err, ErrNotChangeEvent) {
		t.Errorf("ParseChangeEvent of a flat row: %v", err)
	}

	orig := RawJSON(`{"id":1}`)
	c := CloneValue(orig).(RawJSON)
	orig[2] = 'X'
	if string(c) != `{"id":1}` {
		t.Errorf("clone shares memory with the original: %s", c)
	}
}

// Renderings appended to a Slab's Room and Cut stay as they were while later ones are
// appended, Text and Bytes are cut and the collector runs, whether the Slab's chunks come from
// a pool or not; one that outgrows its room is memory of its own, and the room stays usable.
func TestSlabRoomCut(t *testing.T) {
	for _, pool := range []*SlabPool{nil, {N: 8}} {
		s := Slab{N: 8, Pool: pool}
		var got []any
		var want []string
		for i := range 500 {
			n := 64
			if i%50 == 7 {
				n = 8 // outgrown: the rendering moves to memory of its own
			}
			room := s.Room(n)
			p := fmt.Appendf(room, `{"i":%d,"pad":"%0*d"}`, i, i%40+10, 0)
			_ = s.Text([]byte("a neighbour value")) // from another chunk: never in the room
			s.Cut(p)
			got = append(got, s.RawJSON(p))
			want = append(want, string(p))
			if i%100 == 0 {
				runtime.GC()
			}
		}
		runtime.GC()
		for i, v := range got {
			r, ok := v.(RawJSON)
			if !ok || string(r) != want[i] || cap(r) != len(r) {
				t.Fatalf("pool %v: value %d is %#v (cap %d), want %s", pool != nil, i, v, cap(r), want[i])
			}
		}
		if pool != nil {
			pool.Put(s.Detach())
		}
	}
}
