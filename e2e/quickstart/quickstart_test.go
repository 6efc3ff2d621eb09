package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
)

// syncBuffer keeps sluice's log.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestQuickstart runs the quickstart without a terminal: start it, write rows in both
// databases, wait (read-your-writes) and see them in both views, stop it cleanly.
func TestQuickstart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	logs := &syncBuffer{}
	var out io.Writer = logs
	if os.Getenv("SLUICE_TEST_LOG") != "" {
		out = io.MultiWriter(logs, os.Stderr)
	}
	q, err := start(ctx, options{API: freeAddr(t), Log: out, Progress: testWriter{t}})
	if err != nil {
		if q != nil {
			q.close()
		}
		t.Fatalf("%v\nsluice's log:\n%s", err, logs.String())
	}
	stopped := false
	defer func() {
		if !stopped {
			q.close()
		}
	}()
	var banner strings.Builder
	q.banner(&banner)
	for _, want := range []string{q.api, "redis-cli -p", "/mysql.inventory.customers/_doc/1001", "Ctrl-C stops"} {
		if !strings.Contains(banner.String(), want) {
			t.Fatalf("the banner lacks %q:\n%s", want, banner.String())
		}
	}

	// The seed rows are in both views.
	rdb := goredis.NewClient(&goredis.Options{Addr: q.redis.Addr()})
	defer rdb.Close()
	checkDoc(t, q, "mysql.inventory.customers", "1001", map[string]any{"first_name": "Ada", "email": "ada.moreau@example.com"})
	checkDoc(t, q, "pg.inventory.orders", "10002", map[string]any{"customer_id": 1002.0, "quantity": 4.0})
	waitKey(t, ctx, rdb, "products:104", map[string]string{"name": "tea tin"})
	waitKey(t, ctx, rdb, "shipments:502", map[string]string{"status": "in transit"})

	// MariaDB: insert, update, delete; then wait on each view for the position and read it.
	if err := q.mariadb.Exec(ctx,
		"INSERT INTO inventory.customers (first_name, last_name, email) VALUES ('Emil', 'Novak', 'emil.novak@example.com')",
		"UPDATE inventory.customers SET email = 'bruno@example.org' WHERE id = 1002",
		"DELETE FROM inventory.customers WHERE id = 1004",
	); err != nil {
		t.Fatal(err)
	}
	pos := binlogPosition(t, ctx, q)
	for _, view := range []string{"search", "cache"} {
		waitView(t, q, view, "mysql-inventory", pos)
	}
	checkDoc(t, q, "mysql.inventory.customers", "1005", map[string]any{"first_name": "Emil"})
	checkDoc(t, q, "mysql.inventory.customers", "1002", map[string]any{"email": "bruno@example.org"})
	checkNoDoc(t, q, "mysql.inventory.customers", "1004")
	checkKey(t, ctx, rdb, "customers:1005", map[string]string{"first_name": "Emil"})
	checkKey(t, ctx, rdb, "customers:1002", map[string]string{"email": "bruno@example.org"})
	checkKey(t, ctx, rdb, "customers:1004", nil)

	// PostgreSQL likewise.
	pg, err := pgx.Connect(ctx, q.pg.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(context.Background())
	for _, stmt := range []string{
		"INSERT INTO inventory.orders (customer_id, product_id, quantity) VALUES (1005, 102, 3)",
		"UPDATE inventory.orders SET quantity = 7 WHERE id = 10003",
		"DELETE FROM inventory.orders WHERE id = 10005",
		"UPDATE inventory.shipments SET status = 'delivered' WHERE id = 502",
	} {
		if _, err := pg.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	var lsn string
	if err := pg.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	for _, view := range []string{"search", "cache"} {
		waitView(t, q, view, "postgres-inventory", lsn)
	}
	checkDoc(t, q, "pg.inventory.orders", "10006", map[string]any{"customer_id": 1005.0, "quantity": 3.0})
	checkDoc(t, q, "pg.inventory.orders", "10003", map[string]any{"quantity": 7.0})
	checkNoDoc(t, q, "pg.inventory.orders", "10005")
	checkKey(t, ctx, rdb, "orders:10006", map[string]string{"quantity": "3"})
	checkKey(t, ctx, rdb, "orders:10005", nil)
	checkKey(t, ctx, rdb, "shipments:502", map[string]string{"status": "delivered"})

	// Rebuild both views from the log while they serve; then a new write lands in the rebuilt ones.
	for _, view := range []string{"search", "cache"} {
		rebuild(t, q, view)
	}
	idx := getJSON(t, q.esURL("mysql.inventory.customers", "1005"))["_index"]
	if idx != "mysql.inventory.customers_v2" {
		t.Fatalf("after the rebuild the alias points to %v, want mysql.inventory.customers_v2", idx)
	}
	checkDoc(t, q, "mysql.inventory.customers", "1002", map[string]any{"email": "bruno@example.org"})
	checkNoDoc(t, q, "mysql.inventory.customers", "1004")
	prefix, err := rdb.Get(ctx, "__sluice:cache:live").Result()
	if err != nil || prefix == "" {
		t.Fatalf("the cache's live pointer after the rebuild: %q %v", prefix, err)
	}
	checkKey(t, ctx, rdb, prefix+"customers:1005", map[string]string{"first_name": "Emil"})
	checkKey(t, ctx, rdb, prefix+"orders:10006", map[string]string{"quantity": "3"})
	checkKey(t, ctx, rdb, prefix+"customers:1004", nil)
	if err := q.mariadb.Exec(ctx, "UPDATE inventory.customers SET last_name = 'Novakova' WHERE id = 1005"); err != nil {
		t.Fatal(err)
	}
	pos = binlogPosition(t, ctx, q)
	for _, view := range []string{"search", "cache"} {
		waitView(t, q, view, "mysql-inventory", pos)
	}
	checkDoc(t, q, "mysql.inventory.customers", "1005", map[string]any{"last_name": "Novakova"})
	checkKey(t, ctx, rdb, prefix+"customers:1005", map[string]string{"last_name": "Novakova"})

	// The password comes from a placeholder, which the API shows as written.
	cfg := getJSON(t, q.api+"/connectors/mysql-inventory/config")
	if cfg["database.password"] != "${env:QUICKSTART_MYSQL_PASSWORD}" {
		t.Fatalf("database.password shows %v", cfg["database.password"])
	}
	if strings.Contains(logs.String(), q.mariadb.ReplPassword) {
		t.Fatal("the MariaDB password appears in sluice's log")
	}

	stopped = true
	if err := q.stop(45 * time.Second); err != nil {
		t.Fatalf("stop: %v\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), `msg="sluice stopped"`) {
		t.Fatalf("sluice did not log a clean stop:\n%s", logs.String())
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func binlogPosition(t *testing.T, ctx context.Context, q *quickstart) string {
	t.Helper()
	c, err := client.ConnectWithContext(ctx, q.mariadb.Socket, "root", "", "", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Execute("SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	file, _ := r.GetString(0, 0)
	pos, _ := r.GetInt(0, 1)
	return fmt.Sprintf("%s:%d", file, pos)
}

// waitView waits through the API until view includes position of source; the caller reads
// the view right after.
func waitView(t *testing.T, q *quickstart, view, source, position string) {
	t.Helper()
	u := fmt.Sprintf("%s/connectors/%s/wait?position=%s&source=%s&timeout=60s", q.api, view, url.QueryEscape(position), source)
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("wait for %s of %s on %s: %d %s", position, source, view, resp.StatusCode, b)
	}
	t.Logf("wait %s %s on %s: %s", source, position, view, strings.TrimSpace(string(b)))
}

func getJSON(t *testing.T, u string) map[string]any {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("%s: %v", u, err)
	}
	return m
}

// checkDoc reads a document once (no retry: the wait said the view holds it).
func checkDoc(t *testing.T, q *quickstart, index, id string, want map[string]any) {
	t.Helper()
	m := getJSON(t, q.esURL(index, id))
	src, ok := m["_source"].(map[string]any)
	if !ok {
		t.Fatalf("%s/%s: %v", index, id, m)
	}
	for k, v := range want {
		if src[k] != v {
			t.Fatalf("%s/%s: %s = %v, want %v (document %v)", index, id, k, src[k], v, src)
		}
	}
}

func checkNoDoc(t *testing.T, q *quickstart, index, id string) {
	t.Helper()
	resp, err := http.Get(q.esURL(index, id))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("%s/%s: %d, want 404 (deleted)", index, id, resp.StatusCode)
	}
}

// checkKey reads a hash once; want nil means the key must be absent.
func checkKey(t *testing.T, ctx context.Context, rdb *goredis.Client, key string, want map[string]string) {
	t.Helper()
	got, err := rdb.HGetAll(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want == nil {
		if len(got) != 0 {
			t.Fatalf("%s: %v, want no key (deleted)", key, got)
		}
		return
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: %s = %q, want %q (hash %v)", key, k, got[k], v, got)
		}
	}
}

// waitKey polls a hash (for the initial snapshot, which has no position to wait for).
func waitKey(t *testing.T, ctx context.Context, rdb *goredis.Client, key string, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := rdb.HGetAll(ctx, key).Result()
		ok := err == nil
		for k, v := range want {
			ok = ok && got[k] == v
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v %v, want %v", key, got, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rebuild rebuilds a view through the API and waits until it is done.
func rebuild(t *testing.T, q *quickstart, view string) {
	t.Helper()
	resp, err := http.Post(q.api+"/connectors/"+view+"/rebuild", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 202 {
		t.Fatalf("rebuild %s: %d %s", view, resp.StatusCode, b)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st := getJSON(t, q.api+"/connectors/"+view+"/rebuild")
		switch st["state"] {
		case "DONE":
			t.Logf("rebuild of %s: %v", view, st)
			return
		case "FAILED":
			t.Fatalf("rebuild of %s failed: %v", view, st)
		}
		if time.Now().After(deadline) {
			t.Fatalf("rebuild of %s still %v after 2 minutes", view, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
