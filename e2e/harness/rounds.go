package harness

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchRounds is the number of rounds a benchmark iteration runs: SLUICE_BENCH_ROUNDS, or 3.
func BenchRounds() int {
	if n, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 3
}

// BenchPhase reports whether a benchmark phase runs: all run unless SLUICE_BENCH_ONLY names
// one (to profile a phase alone).
func BenchPhase(phase string) bool {
	only := os.Getenv("SLUICE_BENCH_ONLY")
	return only == "" || only == phase
}

// Median is the median of xs (0 when empty).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Rounds collects the per-round durations and CPU times of a benchmark's named phases (a
// baseline and its subjects, run one after the other in each round) and reports medians, so
// that a busy machine slows baseline and subject alike.
type Rounds struct {
	rows float64 // rows each phase handles
	wall map[string][]time.Duration
	cpu  map[string][]time.Duration
	srv  map[string][]time.Duration
	// ServerPID, when set, is the main process of the database server whose CPU time each
	// phase also records (ServerCPU, reported as server_cpu_ns/row): baseline and subject
	// share the cores with it.
	ServerPID int
}

// NewRounds returns an empty collection for phases that each handle rows rows.
func NewRounds(rows int) *Rounds {
	return &Rounds{rows: float64(rows), wall: map[string][]time.Duration{}, cpu: map[string][]time.Duration{}, srv: map[string][]time.Duration{}}
}

// ServerCPU is the CPU time (user and system) a server whose main process is pid has used so
// far, from /proc in clock ticks of 10 ms: the main process's own and that of its ended
// children (which it reaped), and its running children's (PostgreSQL's backends, which leave
// its process group).
func ServerCPU(pid int) time.Duration {
	ents, _ := os.ReadDir("/proc")
	var ticks int64
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // ended meanwhile
		}
		// the fields after the command name, which may hold spaces, in parentheses: state,
		// ppid, ...
		end := strings.LastIndexByte(string(b), ')')
		if end < 0 {
			continue
		}
		f := strings.Fields(string(b[end+1:]))
		self := e.Name() == strconv.Itoa(pid)
		if len(f) < 15 || !self && f[1] != strconv.Itoa(pid) {
			continue
		}
		fields := []int{11, 12} // utime, stime
		if self {
			fields = append(fields, 13, 14) // cutime, cstime
		}
		for _, k := range fields {
			n, _ := strconv.ParseInt(f[k], 10, 64)
			ticks += n
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ
}

// ProcessCPU is the CPU time (user and system) this process has used.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Measure runs phase and records its duration (as fn reports it) and the CPU time the process
// used meanwhile, and the server's (ServerPID) apart.
func (r *Rounds) Measure(phase string, fn func() time.Duration) {
	s0 := r.serverCPU() // before the process's own count starts: scanning /proc costs CPU
	c0 := ProcessCPU()
	d := fn()
	r.wall[phase] = append(r.wall[phase], d)
	r.cpu[phase] = append(r.cpu[phase], ProcessCPU()-c0)
	if r.ServerPID != 0 {
		r.srv[phase] = append(r.srv[phase], r.serverCPU()-s0)
	}
}

// Report reports each phase's median rate and CPU time per row and, against base, the median
// per-round ratio of the base's duration to the phase's (a rate ratio: 0.5 = half as fast as
// the baseline), and the process's peak RSS.
func (r *Rounds) Report(b *testing.B, base string, phases ...string) {
	rate := func(p string) {
		var xs, cs []float64
		for i, d := range r.wall[p] {
			xs = append(xs, r.rows/d.Seconds())
			cs = append(cs, float64(r.cpu[p][i].Nanoseconds())/r.rows)
		}
		if len(xs) > 0 {
			b.ReportMetric(Median(xs), p+"_rows/s")
			b.ReportMetric(Median(cs), p+"_cpu_ns/row")
		}
		if len(r.srv[p]) > 0 {
			var ss []float64
			for _, c := range r.srv[p] {
				ss = append(ss, float64(c.Nanoseconds())/r.rows)
			}
			b.ReportMetric(Median(ss), p+"_server_cpu_ns/row")
		}
	}
	rate(base)
	for _, p := range phases {
		rate(p)
		if len(r.wall[p]) == 0 || len(r.wall[base]) != len(r.wall[p]) {
			continue // a phase that did not run (SLUICE_BENCH_ONLY) has no ratio
		}
		var xs []float64
		for i := range r.wall[p] {
			xs = append(xs, r.wall[base][i].Seconds()/r.wall[p][i].Seconds())
		}
		b.ReportMetric(Median(xs), p+"/"+base)
	}
	b.ReportMetric(PeakRSSMiB(os.Getpid()), "peak_rss_MiB")
}

// PeakRSSMiB is the peak resident set size (VmHWM) of process pid in MiB, 0 if unknown.
func PeakRSSMiB(pid int) float64 {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseFloat(f[0], 64)
				return kb / 1024
			}
		}
	}
	return 0
}

func (r *Rounds) serverCPU() time.Duration {
	if r.ServerPID == 0 {
		return 0
	}
	return ServerCPU(r.ServerPID)
}
