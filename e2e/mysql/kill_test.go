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

// appendSizes are the sizes of the transactions of the append writer, in turn: single rows,
// small transactions, and transactions longer than a batch (max.batch.size 300).
var appendSizes = []int{1, 7, 1, 700, 3, 1, 40, 2, 1500}

// appender inserts rows with ids 1, 2, ... into appends, in transactions of appendSizes (a
// statement per 100 rows), until stop is closed; it returns the last id committed.
func appender(t testing.TB, m *harness.MariaDB, db string, stop <-chan struct{}) int {
	w, err := client.Connect(m.Addr(), m.AppUser, m.AppPassword, db)
	if err != nil {
		t.Error(err)
		return 0
	}
	defer w.Close()
	id := 0
	for n := 0; ; n++ {
		select {
		case <-stop:
			return id
		default:
		}
		size := appendSizes[n%len(appendSizes)]
		qs := []string{"BEGIN"}
		next := id
		for left := size; left > 0; left -= 100 {
			var vals []string
			for range min(left, 100) {
				next++
				vals = append(vals, fmt.Sprintf("(%d, %d)", next, n))
			}
			qs = append(qs, "INSERT INTO appends (id, tx) VALUES "+strings.Join(vals, ","))
		}
		qs = append(qs, "COMMIT")
		for _, q := range qs {
			if _, err := w.Execute(q); err != nil {
				t.Errorf("append writer: %.60s: %v", q, err)
				return id
			}
		}
		id = next
		time.Sleep(5 * time.Millisecond)
	}
}

// checkAppends fails if an id of the appends topic is in the log twice, or in a change other
// than an insert (or a snapshot read), and describes the ids of 1..last it lacks.
func checkAppends(t testing.TB, dir, db string, last int) string {
	seen := make([]int, last+1)
	for _, recs := range topicRecords(t, dir, "kill."+db+".appends") {
		for _, r := range recs {
			if r.Value == nil {
				t.Fatalf("appends: a tombstone for key %s", r.Key)
			}
			v, err := connect.ParseJSON(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := connect.ParseChangeEvent(v)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Op != connect.OpCreate && ev.Op != connect.OpRead {
				t.Fatalf("appends: a %s event for key %s", ev.Op, r.Key)
			}
			idv, _ := ev.After.Get("id")
			id, ok := idv.(int64)
			if !ok || id < 1 || id > int64(last) {
				t.Fatalf("appends: id %v (%T) was never inserted (ids 1..%d were)", idv, idv, last)
			}
			if seen[id]++; seen[id] > 1 {
				t.Fatalf("appends: id %d is in the log %d times", id, seen[id])
			}
		}
	}
	var missing []string
	for id := 1; id <= last; id++ {
		if seen[id] == 0 {
			missing = append(missing, strconv.Itoa(id))
		}
	}
	if len(missing) > 10 {
		missing = append(missing[:10], fmt.Sprintf("... (%d in all)", len(missing)))
	}
	if len(missing) > 0 {
		return "appends: ids missing from the log: " + strings.Join(missing, ", ")
	}
	return ""
}

// countLog counts the lines of dir/sluice.log that contain s.
func countLog(dir, s string) int {
	b, _ := os.ReadFile(filepath.Join(dir, "sluice.log"))
	return strings.Count(string(b), s)
}

// midTxResumes counts the runs in dir/sluice.log whose binlog reader started inside a
// transaction (skipping rows of it the log holds).
func midTxResumes(dir string) int {
	b, _ := os.ReadFile(filepath.Join(dir, "sluice.log"))
	n := 0
	for _, ln := range strings.Split(string(b), "\n") {
		if strings.Contains(ln, "binlog reader started") && strings.Contains(ln, " skip_rows=") && !strings.Contains(ln, " skip_rows=0") {
			n++
		}
	}
	return n
}

// TestKillDuringSnapshotAndStreaming runs `sluice run` with the MySQL source and kills it with
// SIGKILL at random moments, first while it snapshots a 40,000-row table and then while it
// streams the changes of a concurrent writer; every other run is stopped gracefully instead,
// right after its binlog reader started after a pause, while it catches up. Afterwards the topic holds every change once and
// the state derived from it equals the table. Alongside, an append writer inserts unique ids
// in transactions of 1 to 1,500 rows: each must be in the log exactly once (a later write to
// the same key cannot hide a lost change there). SLUICE_MYSQL_KILLS sets the number of kills
// (default 6; SLUICE_SOAK=1 makes it 60).
func TestKillDuringSnapshotAndStreaming(t *testing.T) {
	m := setup(t)
	build(t)
	db := "killtest"
	ctx := context.Background()
	if err := m.Exec(ctx, "DROP DATABASE IF EXISTS "+db, "CREATE DATABASE "+db,
		"USE "+db, "CREATE TABLE items (id INT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL, s VARCHAR(40) NOT NULL)",
		"INSERT INTO items (v, s) SELECT seq % 1000, CONCAT('row ', seq) FROM seq_1_to_40000",
		"CREATE TABLE appends (id INT PRIMARY KEY, tx INT NOT NULL)"); err != nil {
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
	last := 0
	wg.Add(2)
	go func() {
		defer wg.Done()
		last = appender(t, m, db, stop)
	}()
	// the writers stop before the test ends, also when it fails early (a t.Error after the
	// end would panic)
	stopWriters := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	defer stopWriters()
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
	stops := 0
	for i := 0; i < kills; i++ {
		// two runs in four commit the position after each batch (the default interval makes
		// a restart replay up to a second that the log already holds, and drop it)
		path = pipeline(t, m, dir, db, map[string]string{"offset.flush.interval.ms": []string{"0", "1000"}[i/2%2]})
		cmd := start(t, dir, path)
		if i%2 == 1 {
			// a graceful stop while it catches up on the backlog of the pause before: the
			// committed position is the log's end, most often inside a transaction, so the
			// next run must skip exactly the rows of it that the log holds
			started := countLog(dir, "binlog reader started")
			for deadline := time.Now().Add(30 * time.Second); countLog(dir, "binlog reader started") == started; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("sluice run: no binlog reader started in 30s\n%s", logTail(dir))
				}
			}
			time.Sleep(time.Duration(r.IntN(60)) * time.Millisecond)
			cmd.Process.Signal(syscall.SIGTERM)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("sluice run, stopped: %v\n%s", err, logTail(dir))
			}
			stops++
		} else {
			time.Sleep(time.Duration(200+r.IntN(1200)) * time.Millisecond)
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
		}
		// down for a while: the writers go on, and the next run catches up on a backlog in
		// full batches, most ending inside a transaction
		time.Sleep(time.Duration(300+r.IntN(1200)) * time.Millisecond)
	}
	stopWriters()
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
		if d := checkAppends(t, dir, db, last); d != "" {
			diff = strings.TrimPrefix(diff+"\n"+d, "\n")
		}
		if diff == "" {
			t.Logf("%d records and %d appends after %d kills and %d graceful stops (%d runs resumed inside a transaction)", n, last, kills-stops, stops, midTxResumes(dir))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("derived state differs from the table after %d kills:\n%s\nsluice log:\n%s", kills, diff, logTail(dir))
		}
	}
}
