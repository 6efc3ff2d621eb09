package connect

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Values built from a Slab stay intact while the garbage collector runs, across chunk
// boundaries of every kind, and rows cut from it never overlap.
func TestSlabValuesSurviveGC(t *testing.T) {
	var s Slab
	s.N = 8 // small chunks: many boundaries
	var got, want []any
	for i := range 500 {
		text := fmt.Sprintf("text %d", i)
		row := s.Fields(3)
		row[0] = Field{Name: "s", Value: s.String(s.Text([]byte(text)))}
		row[1] = Field{Name: "n", Value: s.Int(int64(i) * 1000)}
		row[2] = Field{Name: "f", Value: s.Float(float64(i) / 4)}
		got = append(got, s.Row(row))
		want = append(want, Row{{Name: "s", Value: text}, {Name: "n", Value: int64(i) * 1000}, {Name: "f", Value: float64(i) / 4}})
		if i%100 == 0 {
			runtime.GC()
		}
	}
	runtime.GC()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("slab values changed (-want +got):\n%s", diff)
	}
	if r := got[0].(Row); cap(r) != len(r) {
		t.Fatalf("a row cut from the slab has capacity %d beyond its %d fields", cap(r), len(r))
	}
	if s.Int(7) != any(int64(7)) || s.Text(nil) != "" {
		t.Fatal("small integers or empty text differ")
	}
	big := make([]byte, 4000)
	if len(s.Text(big)) != 4000 || len(s.Fields(100)) != 100 {
		t.Fatal("large texts and rows are not served")
	}
}

// Bytes hands out room that no later Bytes or Text call writes, and appending past the room
// asked for moves to new memory instead of writing into a neighbour.
func TestSlabBytes(t *testing.T) {
	var s Slab
	var got [][]byte
	for i := range 3000 {
		b := append(s.Bytes(5), fmt.Sprintf("%05d", i)...)
		if i%3 == 0 {
			b = append(b, 'x') // past the room: a copy
		}
		got = append(got, b)
		_ = s.Text([]byte("neighbour"))
	}
	if b := s.Bytes(5000); cap(b) < 5000 || len(b) != 0 {
		t.Fatalf("a large request: len %d cap %d", len(b), cap(b))
	}
	for i, b := range got {
		want := fmt.Sprintf("%05d", i)
		if i%3 == 0 {
			want += "x"
		}
		if string(b) != want {
			t.Fatalf("value %d is %q, want %q", i, b, want)
		}
	}
}
