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
