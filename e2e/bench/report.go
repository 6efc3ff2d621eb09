package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/go-mysql-org/go-mysql/client"
)

// report is everything a run measured; it is written as report.json and report.md.
type report struct {
	Started     time.Time  `json:"started"`
	WallSeconds float64    `json:"wall_seconds"`
	Rows        int        `json:"rows"`
	Machine     machine    `json:"machine"`
	Limits      []figure   `json:"limits"`
	Figures     []figure   `json:"figures"`
	Goals       []goal     `json:"goals"`
	Parity      []parity   `json:"parity"`
	Notes       []string   `json:"notes"`
	NotRun      []string   `json:"not_run"`
	Errors      []string   `json:"errors"`
	StepSeconds []stepTime `json:"step_seconds"`
	Profiles    []profile  `json:"profiles,omitempty"`
}

type stepTime struct {
	Step    string  `json:"step"`
	Seconds float64 `json:"seconds"`
}

// figure is one measured value; Limit names the calibration figure it is compared to.
type figure struct {
	Workload string  `json:"workload"`
	Name     string  `json:"name"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Limit    string  `json:"limit,omitempty"`
	LimitVal float64 `json:"limit_value,omitempty"`
	// Ratio is Value / LimitVal for rates (higher is better).
	Ratio float64 `json:"ratio,omitempty"`
	Note  string  `json:"note,omitempty"`
}

// goal is one acceptance goal of issue 12.
type goal struct {
	Workload string `json:"workload"`
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	Pass     bool   `json:"pass"`
}

// parity is the result of one view-versus-table comparison.
type parity struct {
	Workload string   `json:"workload"`
	View     string   `json:"view"`
	Table    string   `json:"table"`
	Rows     int64    `json:"rows"`
	Diffs    int64    `json:"diffs"`
	Examples []string `json:"examples,omitempty"`
	Err      string   `json:"error,omitempty"`
}

func (p parity) ok() bool { return p.Diffs == 0 && p.Err == "" }

type profile struct {
	Workload string `json:"workload"`
	File     string `json:"file"`
	Flat     string `json:"top_flat"`
	Cum      string `json:"top_cum"`
}

type machine struct {
	CPU       string            `json:"cpu"`
	Cores     int               `json:"cores"`
	RAMBytes  int64             `json:"ram_bytes"`
	Disk      string            `json:"disk"`
	Kernel    string            `json:"kernel"`
	GoVersion string            `json:"go_version"`
	Servers   map[string]string `json:"servers"`
}

// failed says whether the run must exit non-zero: a workload error or any parity difference
// (a missed performance goal is not a failure).
func (r *report) failed() bool { return len(r.Errors) > 0 || r.parityFailed() }

func (r *report) parityFailed() bool {
	for _, p := range r.Parity {
		if !p.ok() {
			return true
		}
	}
	return false
}

// limit returns a calibration figure's value by name (0 when it was not measured).
func (r *report) limit(name string) float64 {
	for _, f := range r.Limits {
		if f.Name == name {
			return f.Value
		}
	}
	return 0
}

func (b *bench) addLimit(name string, v float64, unit, note string) {
	b.rep.Limits = append(b.rep.Limits, figure{Workload: "calibration", Name: name, Value: v, Unit: unit, Note: note})
	b.progress("limit %s: %s %s", name, num(v), unit)
}

// addFigure records a figure and, when limit names a measured limit, its ratio.
func (b *bench) addFigure(w, name string, v float64, unit, limit, note string) figure {
	f := figure{Workload: w, Name: name, Value: v, Unit: unit, Note: note}
	if limit != "" {
		f.Limit = limit
		f.LimitVal = b.rep.limit(limit)
		if f.LimitVal > 0 {
			f.Ratio = v / f.LimitVal
		}
	}
	b.rep.Figures = append(b.rep.Figures, f)
	if f.Ratio > 0 {
		b.progress("%s %s: %s %s (%.2f of %s)", w, name, num(v), unit, f.Ratio, limit)
	} else {
		b.progress("%s %s: %s %s", w, name, num(v), unit)
	}
	return f
}

func (b *bench) addGoal(w, g, measured string, pass bool) {
	b.rep.Goals = append(b.rep.Goals, goal{Workload: w, Goal: g, Measured: measured, Pass: pass})
	b.progress("goal %s %s: %s -> %s", w, g, measured, passMiss(pass))
}

func (b *bench) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	b.rep.Notes = append(b.rep.Notes, s)
	b.progress("note: %s", s)
}

func passMiss(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// num renders a value with at most 3 significant decimals, grouped thousands for big ones.
func num(v float64) string {
	switch {
	case v >= 10000:
		s := strconv.FormatInt(int64(v+0.5), 10)
		var out []byte
		for i := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				out = append(out, ',')
			}
			out = append(out, s[i])
		}
		return string(out)
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

func (b *bench) writeReport() error {
	if b.opts.Out == "" {
		return nil
	}
	if err := os.MkdirAll(b.opts.Out, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(b.rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(b.reportPath("report.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(b.reportPath("report.md"), []byte(b.rep.markdown()), 0o644)
}

func (r *report) markdown() string {
	var s strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&s, format, args...) }
	w("# sluice benchmark report\n\n")
	w("Run started %s, took %.1f min. W1/W5 backlog and W3 table: %s rows.\n\n", r.Started.Format(time.RFC3339), r.WallSeconds/60, num(float64(r.Rows)))
	m := r.Machine
	w("## Machine\n\n| | |\n|---|---|\n")
	w("| CPU | %s |\n| cores | %d |\n| RAM | %.1f GiB |\n| disk | %s |\n| kernel | %s |\n| Go | %s |\n", m.CPU, m.Cores, float64(m.RAMBytes)/(1<<30), m.Disk, m.Kernel, m.GoVersion)
	for _, k := range []string{"mariadb", "postgres", "redis", "elasticsearch"} {
		if v, ok := m.Servers[k]; ok {
			w("| %s | %s |\n", k, v)
		}
	}
	w("\n## Goals\n\n| workload | goal | measured | result |\n|---|---|---|---|\n")
	for _, g := range r.Goals {
		w("| %s | %s | %s | **%s** |\n", g.Workload, g.Goal, g.Measured, passMiss(g.Pass))
	}
	w("\n## Parity (every view against its source table, row by row)\n\n| workload | view | table | rows | differences | result |\n|---|---|---|---|---|---|\n")
	for _, p := range r.Parity {
		res := "OK"
		if !p.ok() {
			res = "**FAIL**"
		}
		detail := strconv.FormatInt(p.Diffs, 10)
		if p.Err != "" {
			detail += " (" + p.Err + ")"
		}
		w("| %s | %s | %s | %s | %s | %s |\n", p.Workload, p.View, p.Table, num(float64(p.Rows)), detail, res)
	}
	for _, p := range r.Parity {
		for _, e := range p.Examples {
			w("\n- %s %s: %s", p.Workload, p.View, e)
		}
	}
	w("\n\n## Limits (calibration, this run)\n\n| limit | value | unit | how |\n|---|---|---|---|\n")
	for _, f := range r.Limits {
		w("| %s | %s | %s | %s |\n", f.Name, num(f.Value), f.Unit, f.Note)
	}
	w("\n## Figures\n\n| workload | figure | value | unit | limit | ratio | note |\n|---|---|---|---|---|---|---|\n")
	for _, f := range r.Figures {
		ratio := ""
		if f.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f", f.Ratio)
		}
		w("| %s | %s | %s | %s | %s | %s | %s |\n", f.Workload, f.Name, num(f.Value), f.Unit, f.Limit, ratio, f.Note)
	}
	for _, p := range r.Profiles {
		w("\n## CPU profile of sluice during %s\n\nProfile file: `%s`. Top functions by own time:\n\n```\n%s```\n\nBy cumulative time:\n\n```\n%s```\n", p.Workload, p.File, p.Flat, p.Cum)
	}
	if len(r.Notes) > 0 {
		w("\n## Notes\n\n")
		for _, n := range r.Notes {
			w("- %s\n", n)
		}
	}
	if len(r.NotRun) > 0 {
		w("\n## Not run\n\n")
		for _, n := range r.NotRun {
			w("- %s\n", n)
		}
	}
	if len(r.Errors) > 0 {
		w("\n## Errors\n\n")
		for _, e := range r.Errors {
			w("- %s\n", strings.ReplaceAll(e, "\n", " "))
		}
	}
	w("\n## Step times\n\n| step | seconds |\n|---|---|\n")
	for _, st := range r.StepSeconds {
		w("| %s | %.0f |\n", st.Step, st.Seconds)
	}
	return s.String()
}

// describeMachine reads the CPU, memory, disk and kernel from /proc and asks each server its
// version.
func describeMachine(ctx context.Context, b *bench) machine {
	m := machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version(), Servers: map[string]string{}}
	if cpu, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(cpu), "\n") {
			if strings.HasPrefix(line, "model name") {
				if i := strings.IndexByte(line, ':'); i > 0 {
					m.CPU = strings.TrimSpace(line[i+1:])
					break
				}
			}
		}
	}
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		m.RAMBytes = int64(si.Totalram) * int64(si.Unit)
	}
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		m.Kernel = utsString(u.Release[:])
	}
	m.Disk = diskOf(b.dir)
	if c, err := client.Connect(b.my.Addr(), b.my.AppUser, b.my.AppPassword, ""); err == nil {
		if r, err := c.Execute("SELECT VERSION()"); err == nil {
			m.Servers["mariadb"], _ = r.GetString(0, 0)
		}
		c.Close()
	}
	if c, err := pgx.Connect(ctx, b.pg.ConnString()); err == nil {
		var v string
		if c.QueryRow(ctx, "SHOW server_version").Scan(&v) == nil {
			m.Servers["postgres"] = v
		}
		c.Close(ctx)
	}
	rc := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", b.rds.Port)})
	if info, err := rc.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				m.Servers["redis"] = v
			}
		}
	}
	rc.Close()
	var nodes struct {
		Nodes map[string]struct {
			Version string `json:"version"`
			JVM     struct {
				Mem struct {
					HeapMax int64 `json:"heap_max_in_bytes"`
				} `json:"mem"`
			} `json:"jvm"`
		} `json:"nodes"`
	}
	if body, err := httpDo(ctx, "GET", b.es.URL()+"/_nodes/_local/jvm", nil, 200); err == nil && json.Unmarshal(body, &nodes) == nil {
		for _, n := range nodes.Nodes {
			m.Servers["elasticsearch"] = fmt.Sprintf("%s (heap %d MiB)", n.Version, n.JVM.Mem.HeapMax>>20)
		}
	}
	m.Servers["mariadb"] += " (sync_binlog=0, innodb_flush_log_at_trx_commit=2: the harness default)"
	m.Servers["postgres"] += " (fsync=off, full_page_writes=off: the harness default; synchronous_commit=on)"
	return m
}

func utsString(b []int8) string {
	var out []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// diskOf names the filesystem and block device that hold dir.
func diskOf(dir string) string {
	mounts, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return "?"
	}
	best, dev, fstype := "", "", ""
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		if strings.HasPrefix(dir, f[1]) && len(f[1]) > len(best) {
			best, dev, fstype = f[1], f[0], f[2]
		}
	}
	model := ""
	if base := strings.TrimPrefix(dev, "/dev/"); base != dev {
		name := strings.TrimRightFunc(base, func(r rune) bool { return r >= '0' && r <= '9' })
		name = strings.TrimSuffix(name, "p")
		if b, err := os.ReadFile("/sys/block/" + name + "/device/model"); err == nil {
			model = strings.TrimSpace(string(b))
		}
		if b, err := os.ReadFile("/sys/block/" + name + "/queue/rotational"); err == nil {
			if strings.TrimSpace(string(b)) == "0" {
				model += " (non-rotational)"
			}
		}
	}
	var st syscall.Statfs_t
	size := ""
	if syscall.Statfs(dir, &st) == nil {
		size = fmt.Sprintf(", %.0f GiB", float64(st.Blocks)*float64(st.Bsize)/(1<<30))
	}
	return strings.TrimSpace(fmt.Sprintf("%s %s on %s %s%s", fstype, dev, best, model, size))
}
