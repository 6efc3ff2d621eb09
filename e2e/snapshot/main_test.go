// Package snapshot_test holds the end-to-end tests and benchmarks of incremental snapshots:
// the real sluice binary against real PostgreSQL and MariaDB servers, controlled through the
// admin API, the CLI and signal tables, killed with SIGKILL in the middle of snapshots, while
// a writer changes the tables.
package snapshot_test

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
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
	"github.com/sluice-cdc/sluice/wal"
)

var (
	binDir  string
	binErr  error
	binOnce sync.Once

	servers struct {
		mu    sync.Mutex
		pg    *harness.Postgres
		maria *harness.MariaDB
	}
)

func TestMain(m *testing.M) {
	code := m.Run()
	servers.mu.Lock()
	if servers.pg != nil {
		if err := servers.pg.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close postgres:", err)
			code = 1
		}
	}
	if servers.maria != nil {
		if err := servers.maria.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close mariadb:", err)
			code = 1
		}
	}
	servers.mu.Unlock()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// sluiceBin builds ./cmd/sluice once.
func sluiceBin(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "sluice-e2e-snapshot-")
		if binErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, "sluice"), "github.com/sluice-cdc/sluice/cmd/sluice").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("build sluice: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return filepath.Join(binDir, "sluice")
}

// postgres starts the package's PostgreSQL on first use.
func postgres(t testing.TB) *harness.Postgres {
	t.Helper()
	servers.mu.Lock()
	defer servers.mu.Unlock()
	if servers.pg == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		pg, err := harness.StartPostgres(ctx, harness.PostgresOptions{})
		if err != nil {
			t.Fatal(err)
		}
		servers.pg = pg
	}
	return servers.pg
}

// mariadb starts the package's MariaDB on first use.
func mariadb(t testing.TB) *harness.MariaDB {
	t.Helper()
	servers.mu.Lock()
	defer servers.mu.Unlock()
	if servers.maria == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		m, err := harness.StartMariaDB(ctx, harness.MariaDBOptions{})
		if err != nil {
			t.Fatal(err)
		}
		servers.maria = m
	}
	return servers.maria
}

// iterations is def, SLUICE_SNAPSHOT_ITER when set, or def*10 with SLUICE_SOAK=1.
func iterations(def int) int {
	if v, err := strconv.Atoi(os.Getenv("SLUICE_SNAPSHOT_ITER")); err == nil && v > 0 {
		return v
	}
	if os.Getenv("SLUICE_SOAK") == "1" {
		return def * 10
	}
	return def
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// node is a pipeline directory: the log, the pipeline file, the admin API's address.
type node struct {
	t     testing.TB
	class string // of the file connector; "" when there is none
	dir   string
	path  string
	api   string
	cmd   *exec.Cmd
	done  chan struct{}
	// profile, when set, is where sluice writes a CPU profile of its run (-cpuprofile)
	profile string
	// bin, when set, is the sluice binary to run instead of the one built from this tree
	bin string
}

// newNode writes a pipeline with one source connector named "src" (class, config).
func newNode(t testing.TB, class string, cfg map[string]string) *node {
	t.Helper()
	n := &node{t: t, dir: t.TempDir(), class: class}
	n.api = fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	n.path = filepath.Join(n.dir, "pipeline.yaml")
	n.write(class, cfg)
	t.Cleanup(n.kill)
	return n
}

func (n *node) write(class string, cfg map[string]string) {
	var b strings.Builder
	fmt.Fprintf(&b, "log:\n  dir: %s\n  partitions: 2\n  fsync: always\nrest:\n  listeners: [%s]\n", filepath.Join(n.dir, "log"), n.api)
	if class == "" {
		b.WriteString("connectors: []\n")
	} else {
		fmt.Fprintf(&b, "connectors:\n  - name: src\n    class: %s\n    config:\n", class)
	}
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "      %s: %q\n", k, cfg[k])
	}
	if err := os.WriteFile(n.path, []byte(b.String()), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// start runs sluice and waits for the API and the connector's task.
func (n *node) start() {
	n.t.Helper()
	f, err := os.OpenFile(filepath.Join(n.dir, "sluice.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	defer f.Close()
	args := []string{"run", "-c", n.path}
	if n.profile != "" {
		args = append(args, "-cpuprofile", n.profile)
	}
	bin := n.bin
	if bin == "" {
		bin = sluiceBin(n.t)
	}
	n.cmd = exec.Command(bin, args...)
	n.cmd.Stdout, n.cmd.Stderr = f, f
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.done = make(chan struct{})
	cmd, done := n.cmd, n.done
	go func() { cmd.Wait(); close(done) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		// The task is RUNNING before its source has opened; the snapshot API answers 409
		// ("starting, retry in a moment") until it has, so the node is up once it answers 200.
		code, body, err := n.call("GET", "/connectors/src/status", "")
		if err == nil && code == 200 && strings.Contains(string(body), `"tasks":[{"id":0,"state":"RUNNING"`) {
			if code, _, err := n.call("GET", "/connectors/src/snapshots", ""); err == nil && code == 200 {
				return
			}
		}
		if n.class == "" {
			if code, _, err := n.call("GET", "/health", ""); err == nil && code == 200 {
				return
			}
		}
		select {
		case <-done:
			n.t.Fatalf("sluice exited at start: %v\n%s", cmd.ProcessState, n.logTail())
		default:
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("the connector is not running after 60s: %s %v\n%s", body, err, n.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill sends SIGKILL and waits for the process to go.
func (n *node) kill() {
	if n.cmd == nil {
		return
	}
	select {
	case <-n.done:
	default:
		_ = n.cmd.Process.Signal(syscall.SIGKILL)
		<-n.done
	}
	n.cmd = nil
}

// stop sends SIGTERM and expects a clean exit.
func (n *node) stop() {
	n.t.Helper()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(60 * time.Second):
		n.t.Fatalf("sluice did not stop within 60s\n%s", n.logTail())
	}
	if !n.cmd.ProcessState.Success() {
		n.t.Fatalf("sluice run: %v\n%s", n.cmd.ProcessState, n.logTail())
	}
	n.cmd = nil
}

func (n *node) logTail() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "sluice.log"))
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

func (n *node) call(method, path, body string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, n.api+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// must calls the API and wants the status.
func (n *node) must(method, path, body string, want int) []byte {
	n.t.Helper()
	code, b, err := n.call(method, path, body)
	if err != nil || code != want {
		n.t.Fatalf("%s %s: %d %s %v; want %d\n%s", method, path, code, b, err, want, n.logTail())
	}
	return b
}

// status is the snapshot status of the connector.
type status struct {
	State           string `json:"state"`
	ChunkID         uint64 `json:"chunk_id"`
	RemainingTables int    `json:"remaining_table_count"`
	Tables          []struct {
		Table       string  `json:"table"`
		State       string  `json:"state"`
		RowsScanned int64   `json:"rows_scanned"`
		Total       int64   `json:"total_estimate"`
		Percent     float64 `json:"percent"`
		Rate        float64 `json:"rows_per_second"`
	} `json:"tables"`
}

// status is the connector's snapshot status, once its source restored its position.
func (n *node) status() status {
	n.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var st status
		if err := json.Unmarshal(n.must("GET", "/connectors/src/snapshots", "", 200), &st); err != nil {
			n.t.Fatal(err)
		}
		if st.State != "STARTING" {
			return st
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("the source is still starting after a minute\n%s", n.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// done reports whether the snapshot of table finished.
func (st status) done(table string) bool {
	if st.RemainingTables > 0 {
		return false
	}
	for _, ts := range st.Tables {
		if ts.Table == table && ts.State == "SUCCEEDED" {
			return true
		}
	}
	return false
}

// waitFor polls cond until it holds, failing after timeout.
func (n *node) waitFor(what string, timeout time.Duration, cond func() bool) {
	n.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			n.t.Fatalf("timed out after %v waiting for %s\n%s", timeout, what, n.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// offset returns the state of the connector's committed position (the offsets API).
func (n *node) offset() map[string]any {
	n.t.Helper()
	var v struct {
		Offsets []struct {
			Offset map[string]any `json:"offset"`
		} `json:"offsets"`
	}
	if err := json.Unmarshal(n.must("GET", "/connectors/src/offsets", "", 200), &v); err != nil {
		n.t.Fatal(err)
	}
	if len(v.Offsets) == 0 {
		return nil
	}
	return v.Offsets[0].Offset
}

// logRecord is a record of a topic.
type logRecord struct {
	key   []byte
	value []byte // nil: tombstone
}

// readTopic returns every record of a topic (sluice must not be running).
func (n *node) readTopic(topic string) []logRecord {
	n.t.Helper()
	l, err := wal.Open(filepath.Join(n.dir, "log"), wal.Options{})
	if err != nil {
		n.t.Fatal(err)
	}
	defer l.Close()
	info, err := l.Describe(topic)
	if err != nil {
		return nil
	}
	var out []logRecord
	for p := range info.Partitions {
		start, _ := l.EarliestOffset(topic, int32(p))
		end, _ := l.LatestOffset(topic, int32(p))
		for off := start; off < end; {
			res, err := l.Fetch(context.Background(), topic, int32(p), off, wal.FetchOptions{MaxBytes: 4 << 20})
			if err != nil {
				n.t.Fatal(err)
			}
			for _, r := range res.Records {
				lr := logRecord{key: bytes.Clone(r.Key)}
				if r.Value != nil {
					lr.value = bytes.Clone(r.Value)
				}
				out = append(out, lr)
			}
			if res.NextOffset <= off {
				break
			}
			off = res.NextOffset
		}
	}
	return out
}

// event decodes a record's change event.
func event(t testing.TB, r logRecord) *connect.ChangeEvent {
	t.Helper()
	v, err := connect.ParseJSON(r.value)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := connect.ParseChangeEvent(v)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// fold derives the table from a topic: the last after image per key, deleted keys removed.
// Partitions are read one after the other; a key's events are all in one partition.
func fold(t testing.TB, recs []logRecord) map[string]string {
	t.Helper()
	state := map[string]string{}
	for _, r := range recs {
		if r.value == nil {
			delete(state, string(r.key))
			continue
		}
		ev := event(t, r)
		switch ev.Op {
		case connect.OpDelete:
			delete(state, string(r.key))
		case connect.OpTruncate:
			clear(state)
		default:
			img, _ := connect.AppendJSON(nil, ev.After)
			state[string(r.key)] = string(img)
		}
	}
	return state
}

// diff describes how the derived state differs from the table (at most 10 keys).
func diff(want, got map[string]string) string {
	var out []string
	for k, v := range want {
		if got[k] != v {
			out = append(out, fmt.Sprintf("key %s: table %s, topic %q", k, v, got[k]))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("key %s: not in the table, topic %s", k, v))
		}
	}
	sort.Strings(out)
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("... %d more", len(out)-10))
	}
	return strings.Join(out, "\n")
}

// rereads counts the snapshot chunks in a topic (told apart by the chunk's watermark in the
// source block) and the snapshot rows read again: snapshot reads of a key that an earlier
// snapshot read already emitted. Only a restart from an older position reads rows again, at
// most the one chunk it had not had committed; rows are counted, not chunks, because rows the
// writer inserts can spread that chunk's range over two new chunks.
func rereads(t testing.TB, recs []logRecord, mark func(ev *connect.ChangeEvent) string) (chunks, reread int) {
	t.Helper()
	marks := map[string]bool{}
	seen := map[int64]bool{}
	for _, r := range recs {
		if r.value == nil {
			continue
		}
		ev := event(t, r)
		if ev.Op != connect.OpRead {
			continue
		}
		id, _ := ev.After.Get("id")
		k, err := connect.AsInt64(id)
		if err != nil {
			t.Fatal(err)
		}
		if m := mark(ev); !marks[m] {
			marks[m] = true
			chunks++
		}
		if seen[k] {
			reread++
		}
		seen[k] = true
	}
	return chunks, reread
}
