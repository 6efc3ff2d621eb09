// Package transforms_test runs transforms end to end: the sluice binary with a real MariaDB
// source and two real Redis views, with transforms on the source side (before the log) and on
// the sink side (each view shapes the same topic its own way), deletes included.
package transforms_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/e2e/harness"
)

// The pipeline: the source filters out archived users, routes shop.users to the topic
// "users" and tags each record with a header; the "profiles" view unwraps, drops the password
// column and renames name to display_name; the "audit" view unwraps and adds a static field,
// under its own key template. Tombstones skip the filter through a negated predicate.
const pipeline = `log:
  dir: %[1]s/log
rest:
  listeners: [] # no admin API: tests run side by side
connectors:
  - name: shop
    class: mysql
    config:
      database.hostname: 127.0.0.1
      database.port: %[2]d
      database.user: %[3]s
      database.password: %[4]s
      database.server.id: 7310
      topic.prefix: app
      database.include.list: shop
      heartbeat.interval.ms: 300
      transforms: live,route,tag
      transforms.live.type: io.debezium.transforms.Filter
      transforms.live.condition: value.op == "d" || value.after.status != "archived"
      transforms.live.predicate: tombstone
      transforms.live.negate: true
      transforms.route.type: org.apache.kafka.connect.transforms.RegexRouter
      transforms.route.regex: app\.shop\.(.*)
      transforms.route.replacement: $1
      transforms.tag.type: insert_header
      transforms.tag.header: origin
      transforms.tag.value.literal: shop-db
      predicates: tombstone
      predicates.tombstone.type: org.apache.kafka.connect.transforms.predicates.RecordIsTombstone

  - name: profiles
    class: redis
    config:
      redis.uri: redis://127.0.0.1:%[5]d
      topics: users
      transforms: unwrap,strip
      transforms.unwrap.type: io.debezium.transforms.ExtractNewRecordState
      transforms.strip.type: org.apache.kafka.connect.transforms.ReplaceField$Value
      transforms.strip.exclude: password
      transforms.strip.renames: name:display_name

  - name: audit
    class: redis
    config:
      redis.uri: redis://127.0.0.1:%[5]d
      topics: users
      redis.key: audit:${key}
      transforms: unwrap,mark
      transforms.unwrap.type: io.debezium.transforms.ExtractNewRecordState
      transforms.mark.type: org.apache.kafka.connect.transforms.InsertField$Value
      transforms.mark.static.field: origin
      transforms.mark.static.value: sluice
`

func TestSourceAndSinkTransforms(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	m := harness.NewMariaDB(t, harness.MariaDBOptions{})
	rs := harness.NewRedis(t, harness.RedisOptions{})
	bin := build(t)

	db, err := client.Connect(m.Addr(), m.AppUser, m.AppPassword, "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec1 := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Execute(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec1("CREATE DATABASE shop")
	exec1("CREATE TABLE shop.users (id INT PRIMARY KEY, name VARCHAR(64), status VARCHAR(16), password VARCHAR(64), balance INT)")
	// Rows that exist before sluice starts come through the snapshot; the rest through the binlog.
	insert := func(from, to int) {
		for id := from; id <= to; id++ {
			status := "active"
			if id%5 == 0 {
				status = "archived"
			}
			exec1("INSERT INTO shop.users VALUES (?, ?, ?, ?, ?)", id, fmt.Sprintf("user %d", id), status, fmt.Sprintf("secret-%d", id), id*10)
		}
	}
	insert(1, 100)

	dir := t.TempDir()
	path := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(pipeline, dir, m.Port, m.ReplUser, m.ReplPassword, rs.Port)), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "sluice.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "run", "-c", path)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}) // closed when sluice exited, with waitErr set
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()

	insert(101, 200)
	for id := 1; id <= 200; id += 3 {
		exec1("UPDATE shop.users SET name = ?, balance = balance + 1 WHERE id = ?", fmt.Sprintf("renamed %d", id), id)
	}
	for id := 2; id <= 200; id += 7 {
		exec1("DELETE FROM shop.users WHERE id = ?", id)
	}
	exec1("UPDATE shop.users SET id = 1000 WHERE id = 4") // a key change: a delete and an insert

	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	wantProfiles, wantAudit := expected(t, db)
	if len(wantProfiles) < 100 {
		t.Fatalf("only %d live rows in the table", len(wantProfiles))
	}
	var gotProfiles, gotAudit map[string]map[string]string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		gotProfiles = view(ctx, t, rdb, "users:*")
		gotAudit = view(ctx, t, rdb, "audit:*")
		if cmp.Equal(wantProfiles, gotProfiles) && cmp.Equal(wantAudit, gotAudit) {
			break
		}
		select {
		case <-done:
			t.Fatalf("sluice exited: %v\n%s", waitErr, tail(dir))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the views differ from the table after 2 minutes\nprofiles (-want +got):\n%s\naudit (-want +got):\n%s\n%s",
				cmp.Diff(wantProfiles, gotProfiles), cmp.Diff(wantAudit, gotAudit), tail(dir))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// expected reads the table and shapes it as each view should hold it: archived users never
// reach the log; profiles lack the password and call name display_name; audit rows carry
// origin. Hash fields hold strings as they are and numbers as JSON text.
func expected(t *testing.T, db *client.Conn) (profiles, audit map[string]map[string]string) {
	res, err := db.Execute("SELECT id, name, status, password, balance FROM shop.users WHERE status <> 'archived'")
	if err != nil {
		t.Fatal(err)
	}
	profiles, audit = map[string]map[string]string{}, map[string]map[string]string{}
	for i := range res.RowNumber() {
		id, _ := res.GetInt(i, 0)
		name, _ := res.GetString(i, 1)
		status, _ := res.GetString(i, 2)
		password, _ := res.GetString(i, 3)
		balance, _ := res.GetInt(i, 4)
		key := strconv.FormatInt(id, 10)
		profiles["users:"+key] = map[string]string{"id": key, "display_name": name, "status": status, "balance": strconv.FormatInt(balance, 10)}
		audit["audit:"+key] = map[string]string{"id": key, "name": name, "status": status, "password": password,
			"balance": strconv.FormatInt(balance, 10), "origin": "sluice"}
	}
	return profiles, audit
}

// view reads every hash whose key matches pattern.
func view(ctx context.Context, t *testing.T, rdb *redis.Client, pattern string) map[string]map[string]string {
	keys, err := rdb.Keys(ctx, pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	out := map[string]map[string]string{}
	for _, k := range keys {
		h, err := rdb.HGetAll(ctx, k).Result()
		if err != nil {
			t.Fatalf("HGETALL %s: %v", k, err)
		}
		out[k] = h
	}
	return out
}

func build(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "sluice")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/sluice-cdc/sluice/cmd/sluice").CombinedOutput()
	if err != nil {
		t.Fatalf("build sluice: %v\n%s", err, out)
	}
	return bin
}

func tail(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "sluice.log"))
	s := string(b)
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return strings.TrimSpace(s)
}
