// Package mysql_test holds the end-to-end tests and benchmarks of the MySQL source: the real
// sluice binary against a real MariaDB, killed with SIGKILL many times.
package mysql_test

import (
	"context"
	"fmt"
	"math/rand/v2"
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

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
	"github.com/sluice-cdc/sluice/wal"
)

var (
	binary   string // the sluice binary built for the tests
	mariadb  *harness.MariaDB
	startErr error
	once     sync.Once
	buildErr error
	built    sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if mariadb != nil {
		if err := mariadb.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close mariadb:", err)
			code = 1
		}
	}
	if binary != "" {
		os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}

// setup starts the package's MariaDB once.
func setup(t testing.TB) *harness.MariaDB {
	t.Helper()
	once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		mariadb, startErr = harness.StartMariaDB(ctx, harness.MariaDBOptions{})
	})
	if startErr != nil {
		t.Fatal(startErr)
	}
	return mariadb
}

// build builds ./cmd/sluice once (the kill tests run it; the benchmarks do not need it).
func build(t testing.TB) {
	t.Helper()
	built.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-e2e-mysql-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "sluice")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/sluice-cdc/sluice/cmd/sluice").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build sluice: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

func iterations(def int) int {
	if v, err := strconv.Atoi(os.Getenv("SLUICE_MYSQL_KILLS")); err == nil && v > 0 {
		return v
	}
	if os.Getenv("SLUICE_SOAK") == "1" {
		return def * 10
	}
	return def
}

// pipeline writes a pipeline file for one mysql connector into dir.
func pipeline(t testing.TB, m *harness.MariaDB, dir, db string, extra map[string]string) string {
	cfg := map[string]string{
		"database.hostname":     m.Host,
		"database.port":         strconv.Itoa(m.Port),
		"database.user":         m.ReplUser,
		"database.password":     m.ReplPassword,
		"database.server.id":    "4242",
		"topic.prefix":          "kill",
		"database.include.list": db,
		"snapshot.fetch.size":   "500",
		"max.batch.size":        "300",
	}
	for k, v := range extra {
		cfg[k] = v
	}
	var b strings.Builder
	fmt.Fprintf(&b, "log:\n  dir: %s\n  partitions: 3\n  fsync: always\nrest:\n  listeners: []\nconnectors:\n  - name: mysql\n    class: io.debezium.connector.mysql.MySqlConnector\n    config:\n", filepath.Join(dir, "log"))
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "      %s: %q\n", k, cfg[k])
	}
	path := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// start runs `sluice run -c path`, its output going to dir/sluice.log.
func start(t testing.TB, dir, path string) *exec.Cmd {
	f, err := os.OpenFile(filepath.Join(dir, "sluice.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "run", "-c", path)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return cmd
}

func logTail(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "sluice.log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// topicRecords reads every record of a topic from the log in dir (sluice must be stopped).
func topicRecords(t testing.TB, dir, topic string) [][]wal.Record {
	l, err := wal.Open(filepath.Join(dir, "log"), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	info, err := l.Describe(topic)
	if err != nil {
		t.Fatalf("describe %s: %v", topic, err)
	}
	var out [][]wal.Record
	for p := range info.Partitions {
		var recs []wal.Record
		end, _ := l.LatestOffset(topic, int32(p))
		for off := int64(0); off < end; {
			res, err := l.Fetch(context.Background(), topic, int32(p), off, wal.FetchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res.Records {
				recs = append(recs, wal.Record{Offset: r.Offset, Key: append([]byte(nil), r.Key...), Value: append([]byte(nil), r.Value...)})
				if r.Value == nil {
					recs[len(recs)-1].Value = nil
				}
			}
			off = res.NextOffset
		}
		out = append(out, recs)
	}
	return out
}

// check folds the topic (per partition, in order) and compares it with the table, and fails on
// any change event that is in the log twice.
func check(t testing.TB, dir, db string, c *client.Conn) (diff string, n int) {
	parts := topicRecords(t, dir, "kill."+db+".items")
	state := map[string]string{}
	seen := map[string]bool{}
	for _, recs := range parts {
		for _, r := range recs {
			n++
			if r.Value == nil {
				delete(state, string(r.Key))
				continue
			}
			v, err := connect.ParseJSON(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := connect.ParseChangeEvent(v)
			if err != nil {
				t.Fatal(err)
			}
			var id string
			if ev.Op == connect.OpRead {
				id = "r" + string(r.Key)
			} else {
				img, _ := connect.AppendJSON(nil, ev.After)
				bimg, _ := connect.AppendJSON(nil, ev.Before)
				srcf, _ := ev.Source.Get("file")
				srcp, _ := ev.Source.Get("pos")
				id = fmt.Sprintf("%s|%s|%v:%v|%s|%s", ev.Op, r.Key, srcf, srcp, bimg, img)
			}
			if seen[id] {
				t.Fatalf("change %s is in the log twice", id)
			}
			seen[id] = true
			switch ev.Op {
			case connect.OpDelete:
				delete(state, string(r.Key))
			case connect.OpTruncate:
				clear(state)
			default:
				img, _ := connect.AppendJSON(nil, ev.After)
				state[string(r.Key)] = string(img)
			}
		}
	}
	res, err := c.Execute("SELECT id, v, s FROM items")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := range res.Values {
		id, _ := res.GetInt(i, 0)
		v, _ := res.GetInt(i, 1)
		s, _ := res.GetString(i, 2)
		k, _ := connect.AppendJSON(nil, connect.Row{{Name: "id", Value: id}})
		img, _ := connect.AppendJSON(nil, connect.Row{{Name: "id", Value: id}, {Name: "v", Value: v}, {Name: "s", Value: s}})
		want[string(k)] = string(img)
	}
	var out []string
	for k, v := range want {
		if state[k] != v {
			out = append(out, fmt.Sprintf("key %s: table %s, log %q", k, v, state[k]))
		}
	}
	for k, v := range state {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("key %s: not in the table, log %s", k, v))
		}
	}
	sort.Strings(out)
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("... %d more", len(out)-10))
	}
	return strings.Join(out, "\n"), n
}

// TestKillDuringSnapshotAndStreaming runs `sluice run` with the MySQL source and kills it with
// SIGKILL at random moments, first while it snapshots a 40,000-row table and then while it
// streams the changes of a concurrent writer. Afterwards the topic holds every change once and
// the state derived from it equals the table. SLUICE_MYSQL_KILLS sets the number of kills
// (default 6; SLUICE_SOAK=1 makes it 60).
func TestKillDuringSnapshotAndStreaming(t *testing.T) {
	m := setup(t)
	build(t)
	db := "killtest"
	ctx := context.Background()
	if err := m.Exec(ctx, "DROP DATABASE IF EXISTS "+db, "CREATE DATABASE "+db,
		"USE "+db, "CREATE TABLE items (id INT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL, s VARCHAR(40) NOT NULL)",
		"INSERT INTO items (v, s) SELECT seq % 1000, CONCAT('row ', seq) FROM seq_1_to_40000"); err != nil {
		t.Fatal(err)
	}
	c, err := client.Connect(m.Addr(), m.AppUser, m.AppPassword, db)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dir := t.TempDir()
	path := pipeline(t, m, dir, db, nil)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the writer
		defer wg.Done()
		w, err := client.Connect(m.Addr(), m.AppUser, m.AppPassword, db)
		if err != nil {
			t.Error(err)
			return
		}
		defer w.Close()
		r := rand.New(rand.NewPCG(1, 2))
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			id := 1 + r.IntN(45000)
			var qs []string
			switch r.IntN(4) {
			case 0:
				qs = []string{fmt.Sprintf("INSERT INTO items (v, s) VALUES (%d, 'new %d')", n, n)}
			case 1:
				qs = []string{fmt.Sprintf("UPDATE items SET v = v + 1, s = 'upd %d' WHERE id = %d", n, id)}
			case 2:
				qs = []string{fmt.Sprintf("DELETE FROM items WHERE id = %d", id)}
			case 3: // a bigger transaction
				qs = []string{"BEGIN", fmt.Sprintf("UPDATE items SET v = v + 1 WHERE id BETWEEN %d AND %d", id, id+400), fmt.Sprintf("DELETE FROM items WHERE id BETWEEN %d AND %d", id+401, id+420), "COMMIT"}
			}
			for _, q := range qs {
				if _, err := w.Execute(q); err != nil {
					t.Errorf("writer: %s: %v", q, err)
					return
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	kills := iterations(6)
	r := rand.New(rand.NewPCG(9, 9))
	for i := 0; i < kills; i++ {
		cmd := start(t, dir, path)
		time.Sleep(time.Duration(300+r.IntN(1500)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	}
	close(stop)
	wg.Wait()
	// let sluice catch up, stopping it gracefully to read the log, until the state matches
	deadline := time.Now().Add(2 * time.Minute)
	for {
		cmd := start(t, dir, path)
		time.Sleep(3 * time.Second)
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("sluice run: %v\n%s", err, logTail(dir))
		}
		diff, n := check(t, dir, db, c)
		if diff == "" {
			t.Logf("%d records after %d kills", n, kills)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("derived state differs from the table after %d kills:\n%s\nsluice log:\n%s", kills, diff, logTail(dir))
		}
	}
}
