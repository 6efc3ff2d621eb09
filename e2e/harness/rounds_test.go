package harness

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"syscall"
	"testing"
	"time"
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

// A bound on peak RSS checks something only if the reading is the peak: after 64 MiB were
// touched and given back to the system, this process's reading still holds them and agrees
// with the kernel's own peak (getrusage), and a process that is gone reads 0.
func TestPeakRSSMiB(t *testing.T) {
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	sink = buf[len(buf)-1]
	buf = nil
	runtime.GC()
	debug.FreeOSMemory()
	got := PeakRSSMiB(os.Getpid())
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	kernel := float64(ru.Maxrss) / 1024 // kB on Linux
	if got < 64 || math.Abs(got-kernel) > 4 {
		t.Fatalf("peak RSS of this process %.1f MiB, want at least 64 and within 4 MiB of getrusage's %.1f MiB", got, kernel)
	}
	if got := PeakRSSMiB(1 << 30); got != 0 {
		t.Fatalf("peak RSS of a process that does not exist %.2f MiB, want 0", got)
	}
}

var sink byte

// Report's ratios are the baseline's duration over the phase's (2 = twice as fast), the median
// over rounds; a phase that did not run reports none.
func TestReportRatios(t *testing.T) {
	r := NewRounds(1000)
	for _, d := range []struct{ base, fast, slow time.Duration }{
		{100 * time.Millisecond, 50 * time.Millisecond, 400 * time.Millisecond},
		{200 * time.Millisecond, 50 * time.Millisecond, 400 * time.Millisecond},
		{100 * time.Millisecond, 100 * time.Millisecond, 400 * time.Millisecond},
	} {
		r.Measure("base", func() time.Duration { return d.base })
		r.Measure("fast", func() time.Duration { return d.fast })
		r.Measure("slow", func() time.Duration { return d.slow })
	}
	res := testing.Benchmark(func(b *testing.B) { r.Report(b, "base", "fast", "slow", "skipped") })
	for name, want := range map[string]float64{
		"fast/base": 2, "slow/base": 0.25, "base_rows/s": 10000, "fast_rows/s": 20000, "slow_rows/s": 2500,
	} {
		if got, ok := res.Extra[name]; !ok || math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v (reported: %v), want %v", name, got, ok, want)
		}
	}
	if _, ok := res.Extra["skipped/base"]; ok {
		t.Errorf("a phase that never ran has a ratio: %v", res.Extra)
	}
}
