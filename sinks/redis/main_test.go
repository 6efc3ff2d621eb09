package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
	"github.com/sluice-cdc/sluice/e2e/sinks/sinktest"
)

// One Redis for the package's tests, started on first use and closed by TestMain. Each test
// uses a database of its own.
var shared struct {
	mu    sync.Mutex
	redis *harness.Redis
	err   error
	next  int
}

func TestMain(m *testing.M) {
	code := m.Run()
	shared.mu.Lock()
	if shared.redis != nil {
		if err := shared.redis.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close redis:", err)
			code = 1
		}
	}
	shared.mu.Unlock()
	os.Exit(code)
}

// testDB returns the shared server's address and an empty database for the test.
func testDB(t testing.TB) (addr string, db int) {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.redis == nil && shared.err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		shared.redis, shared.err = harness.StartRedis(ctx, harness.RedisOptions{ExtraArgs: []string{"--databases", "64"}})
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	db = shared.next
	shared.next = (shared.next + 1) % 64
	c := goredis.NewClient(&goredis.Options{Addr: shared.redis.Addr(), DB: db})
	defer c.Close()
	if err := c.FlushDB(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	return shared.redis.Addr(), db
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// client is the tests' own view of the database.
func client(t testing.TB, addr string, db int) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, DB: db})
	t.Cleanup(func() { c.Close() })
	return c
}

// newTestSink builds an opened sink on addr/db from raw config keys.
func newTestSink(t testing.TB, addr string, db int, raw map[string]string, log *slog.Logger) *Sink {
	t.Helper()
	cfg := map[string]string{KeyURI: fmt.Sprintf("redis://%s/%d", addr, db)}
	for k, v := range raw {
		cfg[k] = v
	}
	c, errs := Plugin().ParseConfig(cfg)
	if len(errs) > 0 {
		t.Fatalf("config: %v", errs)
	}
	s, err := New(c, connect.Env{Connector: "test", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

const meta = "__sluice:test:"

// versionField is the hash field that holds a row's version with redis.version.storage=field.
const versionField = meta + "version"

func writeAll(t testing.TB, s *Sink, recs []connect.Record, seed uint64, max int) {
	t.Helper()
	ctx := testCtx(t)
	for _, b := range sinktest.Batches(seed, recs, max) {
		if err := s.Write(ctx, b); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
}

// hashFields is the documented hash of a row: a field per non-null column, strings as they
// are, other values as JSON text.
func hashFields(t testing.TB, row connect.Row) map[string]string {
	out := map[string]string{}
	for _, f := range row {
		switch v := f.Value.(type) {
		case nil:
		case string:
			out[f.Name] = v
		default:
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			out[f.Name] = string(b)
		}
	}
	return out
}

func asJSON(t testing.TB, v any) any {
	var b []byte
	switch x := v.(type) {
	case string:
		b = []byte(x)
	default:
		var err error
		if b, err = connect.MarshalJSONValue(v); err != nil {
			t.Fatal(err)
		}
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// expected is the keyspace a workload must leave: key → hash fields or JSON document.
func expected(t testing.TB, w *sinktest.Workload, typ, prefix string) map[string]any {
	out := map[string]any{}
	for topic, rows := range w.Final {
		table := topic[strings.LastIndexByte(topic, '.')+1:]
		for id, row := range rows {
			k := prefix + table + ":" + id
			if typ == TypeJSON {
				out[k] = asJSON(t, row)
			} else {
				out[k] = hashFields(t, row)
			}
		}
	}
	return out
}

// keyspace reads every view key of the database (not the markers and pointers under the meta
// prefix, but the rebuilt generations under <meta>g<n>:), with prefix only the keys under it.
func keyspace(t testing.TB, c *goredis.Client, typ, prefix string) map[string]any {
	t.Helper()
	ctx := testCtx(t)
	out := map[string]any{}
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if !strings.HasPrefix(k, prefix) || strings.HasPrefix(k, meta) && !strings.HasPrefix(k, meta+"g") {
			continue
		}
		if typ == TypeJSON {
			v, err := c.Get(ctx, k).Result()
			if err != nil {
				t.Fatalf("get %s: %v", k, err)
			}
			out[k] = asJSON(t, v)
		} else {
			v, err := c.HGetAll(ctx, k).Result()
			if err != nil {
				t.Fatalf("hgetall %s: %v", k, err)
			}
			// the version field (redis.version.storage=field) is sluice's, not the row's
			if m, ok := v[versionField]; ok {
				if _, err := decodeMarker(m, false); err != nil {
					t.Fatalf("%s: version field: %v", k, err)
				}
				delete(v, versionField)
			}
			out[k] = v
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func diffKeys(want, got map[string]any) string {
	var missing, extra []string
	for k := range want {
		if _, ok := got[k]; !ok {
			missing = append(missing, k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	var b strings.Builder
	if len(missing) > 0 {
		fmt.Fprintf(&b, "%d missing key(s), e.g. %q\n", len(missing), missing[:min(5, len(missing))])
	}
	if len(extra) > 0 {
		fmt.Fprintf(&b, "%d extra key(s), e.g. %q\n", len(extra), extra[:min(5, len(extra))])
	}
	n := 0
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			continue
		}
		if d := cmp.Diff(w, g); d != "" {
			if n < 3 {
				fmt.Fprintf(&b, "key %q (-want +got):\n%s", k, d)
			}
			n++
		}
	}
	if n > 3 {
		fmt.Fprintf(&b, "... %d stale key(s) in all\n", n)
	}
	return b.String()
}

// or returns v, or def when v is empty.
func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// checkVersions checks that the versions of hash rows under prefix are kept where store
// (redis.version.storage) says: with field, every row's hash holds a version field and every
// marker key of generation 0 is a deleted row's, expiring; with key, no hash holds the field
// and every row has a marker key. Rows of other types always have marker keys.
func checkVersions(t testing.TB, c *goredis.Client, typ, store, prefix string) {
	t.Helper()
	ctx := testCtx(t)
	rows, markers := map[string]bool{}, map[string]string{}
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		switch {
		case strings.HasPrefix(k, meta+"v:0:"):
			v, err := c.Get(ctx, k).Result()
			if err != nil {
				t.Fatalf("get %s: %v", k, err)
			}
			markers[strings.TrimPrefix(k, meta+"v:0:")] = v
		case strings.HasPrefix(k, prefix) && !(strings.HasPrefix(k, meta) && !strings.HasPrefix(k, meta+"g")):
			rows[k] = true
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	field := typ == TypeHash && store == StoreField
	for k := range rows {
		if typ == TypeHash {
			has, err := c.HExists(ctx, k, versionField).Result()
			if err != nil {
				t.Fatal(err)
			}
			if has != field {
				t.Fatalf("row %s: version field present %v, want %v (redis.version.storage=%s)", k, has, field, store)
			}
		}
		if !field {
			if m, ok := markers[k]; !ok || strings.HasSuffix(m, "-") {
				t.Fatalf("row %s: marker key %q (present %v), want a live row's", k, m, ok)
			}
		}
	}
	if field {
		for k, m := range markers {
			ttl, err := c.PTTL(ctx, meta+"v:0:"+k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(m, "-") || ttl <= 0 {
				t.Fatalf("marker key of %s: %q with TTL %v, want only expiring markers of deleted rows", k, m, ttl)
			}
		}
	}
}

func mustWrite(t testing.TB, s *Sink, recs ...connect.Record) {
	t.Helper()
	if err := s.Write(testCtx(t), recs); err != nil {
		t.Fatalf("write: %v", err)
	}
}
