package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// node is one running `sluice run` process.
type node struct {
	name string
	dir  string
	api  string // http://127.0.0.1:port
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	logf *os.File
}

// freePort returns a loopback port free at the time of the call.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startNode writes pipeline (a YAML file whose log dir and API address it must already hold)
// into dir and starts bin on it; it returns once the API answers /health.
func (b *bench) startNode(ctx context.Context, bin, name, dir, api, pipeline string, env ...string) (*node, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(path, []byte(pipeline), 0o644); err != nil {
		return nil, err
	}
	return b.runNode(ctx, bin, name, dir, api, path, env...)
}

// runNode starts bin on an existing pipeline file (a restart keeps the dir).
func (b *bench) runNode(ctx context.Context, bin, name, dir, api, path string, env ...string) (*node, error) {
	logf, err := os.OpenFile(filepath.Join(dir, "sluice.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	n := &node{name: name, dir: dir, api: "http://" + api, done: make(chan struct{}), logf: logf}
	n.cmd = exec.Command(bin, "run", "-c", path, "--log-level", "warn")
	n.cmd.Env = append(os.Environ(), "BENCH_MYSQL_PASSWORD="+b.my.ReplPassword)
	n.cmd.Env = append(n.cmd.Env, env...)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start sluice %s: %w", name, err)
	}
	go func() {
		n.err = n.cmd.Wait()
		logf.Close()
		close(n.done)
	}()
	deadline := time.Now().Add(90 * time.Second)
	for {
		if _, err := n.get(ctx, "/health"); err == nil {
			return n, nil
		} else if time.Now().After(deadline) {
			n.kill()
			return nil, fmt.Errorf("sluice %s: API not up in 90s: %v (log %s)", name, err, tail(filepath.Join(dir, "sluice.log")))
		}
		select {
		case <-n.done:
			return nil, fmt.Errorf("sluice %s exited while starting: %v: %s", name, n.err, tail(filepath.Join(dir, "sluice.log")))
		case <-ctx.Done():
			n.kill()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

func (n *node) exited() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to 60 s, then SIGKILL.
func (n *node) stop() error {
	if n.exited() {
		return n.exitErr()
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
		return n.exitErr()
	case <-time.After(60 * time.Second):
		n.kill()
		return fmt.Errorf("sluice %s did not stop within 60s of SIGTERM", n.name)
	}
}

func (n *node) exitErr() error {
	if n.err != nil {
		return fmt.Errorf("sluice %s: %w: %s", n.name, n.err, tail(filepath.Join(n.dir, "sluice.log")))
	}
	return nil
}

// kill is kill -9 of the process (and its group).
func (n *node) kill() {
	if n.exited() {
		return
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	<-n.done
}

// cpu is the CPU time (user + system) the process has used so far.
func (n *node) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// fields after the name: state(0) ... utime(11) stime(12), in clock ticks (100 Hz)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

// peakRSS is the process's peak resident set (VmHWM), in bytes.
func (n *node) peakRSS() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}

// get fetches path from the node's API and fails on any status but 200.
func (n *node) get(ctx context.Context, path string) ([]byte, error) {
	return httpDo(ctx, "GET", n.api+path, nil, 200)
}

func (n *node) getJSON(ctx context.Context, path string, v any) error {
	body, err := n.get(ctx, path)
	if err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}

var httpClient = &http.Client{Timeout: 60 * time.Second}

// httpDo sends a request and fails unless the status is one of want.
func httpDo(ctx context.Context, method, url string, body []byte, want ...int) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	for _, w := range want {
		if resp.StatusCode == w {
			return out, nil
		}
	}
	s := string(out)
	if len(s) > 500 {
		s = s[:500]
	}
	return out, fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, strings.TrimSpace(s))
}

// topicRecords is the sum of a topic's high watermarks (0 when it does not exist yet).
func (n *node) topicRecords(ctx context.Context, topic string) (int64, int64, error) {
	var v struct {
		Partitions []struct {
			HighWatermark int64 `json:"high_watermark"`
			SizeBytes     int64 `json:"size_bytes"`
		} `json:"partitions"`
	}
	body, err := httpDo(ctx, "GET", n.api+"/topics/"+topic, nil, 200, 404)
	if err != nil {
		return 0, 0, err
	}
	if json.Unmarshal(body, &v) != nil {
		return 0, 0, nil
	}
	var hw, size int64
	for _, p := range v.Partitions {
		hw += p.HighWatermark
		size += p.SizeBytes
	}
	return hw, size, nil
}

// sinkCommitted is the sum of a sink's committed offsets and its total lag.
func (n *node) sinkCommitted(ctx context.Context, sink string) (committed, lag int64, err error) {
	var v struct {
		Total      *int64 `json:"total_lag"`
		Partitions []struct {
			Committed int64 `json:"committed_offset"`
		} `json:"partitions"`
	}
	if err := n.getJSON(ctx, "/connectors/"+sink+"/lag", &v); err != nil {
		return 0, 0, err
	}
	for _, p := range v.Partitions {
		committed += max(p.Committed, 0)
	}
	if v.Total != nil {
		lag = *v.Total
	}
	return committed, lag, nil
}

// status is a connector's and its task's state.
func (n *node) status(ctx context.Context, name string) (string, string) {
	var v struct {
		Connector struct {
			State string `json:"state"`
		} `json:"connector"`
		Tasks []struct {
			State string `json:"state"`
			Trace string `json:"trace"`
		} `json:"tasks"`
	}
	if err := n.getJSON(ctx, "/connectors/"+name+"/status", &v); err != nil {
		return "?", err.Error()
	}
	for _, t := range v.Tasks {
		if t.State != "RUNNING" {
			return t.State, t.Trace
		}
	}
	return v.Connector.State, ""
}

// checkTasks fails when any of the named connectors has a FAILED task.
func (n *node) checkTasks(ctx context.Context, names ...string) error {
	for _, c := range names {
		if st, trace := n.status(ctx, c); st == "FAILED" {
			if len(trace) > 1500 {
				trace = trace[:1500]
			}
			return fmt.Errorf("connector %s FAILED: %s", c, trace)
		}
	}
	if n.exited() {
		return fmt.Errorf("sluice %s exited: %v", n.name, n.exitErr())
	}
	return nil
}
