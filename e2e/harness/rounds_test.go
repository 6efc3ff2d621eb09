package harness

import (
	"os"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := append([]float64(nil), c.xs...)
		if got := Median(c.xs); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", in, got, c.want)
		}
		for i := range in {
			if in[i] != c.xs[i] {
				t.Fatalf("Median reordered its argument: %v, was %v", c.xs, in)
			}
		}
	}
}

// A bound on peak RSS checks something only if the reading is real: this process's is more
// than a MiB, and a process that is gone reads 0.
func TestPeakRSSMiB(t *testing.T) {
	if got := PeakRSSMiB(os.Getpid()); got < 1 {
		t.Fatalf("peak RSS of this process %.2f MiB, want at least 1", got)
	}
	if got := PeakRSSMiB(1 << 30); got != 0 {
		t.Fatalf("peak RSS of a process that does not exist %.2f MiB, want 0", got)
	}
}
