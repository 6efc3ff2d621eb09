package sinks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	goredis "github.com/redis/go-redis/v9"
)

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func rebuildPipeline(dir, esURL, redisAddr string, port int) string {
	return fmt.Sprintf(`log:
  dir: %s
  partitions: 3
rest:
  listeners: [http://127.0.0.1:%d]
connectors:
  - name: gen
    class: datagen
    config:
      topic.prefix: rb
      datagen.keys: %d
      datagen.max.events: %d
  - name: search
    class: elasticsearch
    config:
      topics.regex: rb\..*
      connection.url: %s
      index.settings: '{"number_of_shards":1,"number_of_replicas":0}'
      rebuild.drop.delay.ms: 1000
  - name: cache
    class: redis
    config:
      topics.regex: rb\..*
      redis.uri: redis://%s/4
      rebuild.cleanup.delay.ms: 1000
`, filepath.Join(dir, "log"), port, killKeys, killEvents, esURL, redisAddr)
}

// redisRows reads the rows the model names (and must find every other id of the key space
// absent) through the live pointer, as a reader does.
func redisRows(ctx context.Context, c *goredis.Client) (map[string]any, string, error) {
	prefix, err := c.Get(ctx, "__sluice:cache:live").Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, "", err
	}
	out := map[string]any{}
	pipe := c.Pipeline()
	type slot struct {
		name string
		cmd  *goredis.MapStringStringCmd
	}
	var slots []slot
	for _, table := range []string{"customers", "orders", "products"} {
		for id := 1; id <= killKeys; id++ {
			name := table + "/" + strconv.Itoa(id)
			slots = append(slots, slot{name, pipe.HGetAll(ctx, prefix+table+":"+strconv.Itoa(id))})
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, "", err
	}
	for _, s := range slots {
		if v := s.cmd.Val(); len(v) > 0 {
			out[s.name] = v
		}
	}
	return out, prefix, nil
}

// TestRebuildLive rebuilds both views through the sluice binary's API (sluice rebuild) while
// readers query them without pause: every read of the Elasticsearch aliases and every lookup
// through the Redis pointer sees the complete view, before, during and after the switch; the
// views end in the new index generation and key generation, equal to the source rows. Before
// the rebuild, /metrics must serve both sinks' statistics (checkSinkMetrics).
func TestRebuildLive(t *testing.T) {
	es, rd := servers(t)
	dir := t.TempDir()
	bin := buildSluice(t, dir)
	port := freePort(t)
	cfg := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(cfg, []byte(rebuildPipeline(dir, es.URL(), rd.Addr(), port)), 0o644); err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: rd.Addr(), DB: 4})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	wantES, wantRedis := map[string]any{}, map[string]any{}
	for table, rows := range expected() {
		for id, row := range rows {
			k := table + "/" + strconv.FormatInt(id, 10)
			wantES[k] = jsonOf(t, row)
			wantRedis[k] = hashOf(t, row)
		}
	}
	logPath := filepath.Join(dir, "run.log")
	p := start(t, bin, cfg, logPath)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		gotES, err := esSearch(es.URL(), "rb", true)
		if err != nil {
			t.Fatal(err)
		}
		gotRedis, _, err := redisRows(ctx, rdb)
		if err != nil {
			t.Fatal(err)
		}
		if cmp.Equal(wantES, gotES) && cmp.Equal(wantRedis, gotRedis) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the views did not converge:\nelasticsearch (-want +got):\n%.2000s\nredis (-want +got):\n%.2000s\n%s",
				cmp.Diff(wantES, gotES), cmp.Diff(wantRedis, gotRedis), tail(logPath))
		}
		time.Sleep(300 * time.Millisecond)
	}
	checkSinkMetrics(t, port, logPath)

	var (
		stop      atomic.Bool
		bad       atomic.Value
		esReads   atomic.Int64
		redisRead atomic.Int64
		wg        sync.WaitGroup
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for !stop.Load() && bad.Load() == nil {
			got, err := esSearch(es.URL(), "rb", false)
			if err == nil && !cmp.Equal(wantES, got) {
				err = fmt.Errorf("an Elasticsearch read during the rebuild differs (-want +got):\n%.2000s", cmp.Diff(wantES, got))
			}
			if err != nil {
				bad.Store(err)
				return
			}
			esReads.Add(1)
		}
	}()
	go func() {
		defer wg.Done()
		for !stop.Load() && bad.Load() == nil {
			got, prefix, err := redisRows(ctx, rdb)
			if err == nil && !cmp.Equal(wantRedis, got) {
				err = fmt.Errorf("a Redis read (prefix %q) during the rebuild differs (-want +got):\n%.2000s", prefix, cmp.Diff(wantRedis, got))
			}
			if err != nil {
				bad.Store(err)
				return
			}
			redisRead.Add(1)
		}
	}()
	for _, name := range []string{"search", "cache"} {
		out, err := exec.Command(bin, "rebuild", name, "--server", fmt.Sprintf("http://127.0.0.1:%d", port)).CombinedOutput()
		if err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("sluice rebuild %s: %v\n%s\n%s", name, err, out, tail(logPath))
		}
		t.Logf("sluice rebuild %s: %s", name, strings.TrimSpace(string(out)))
	}
	time.Sleep(1500 * time.Millisecond) // past the drop and cleanup delays
	stop.Store(true)
	wg.Wait()
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
	if esReads.Load() < 5 || redisRead.Load() < 5 {
		t.Fatalf("only %d Elasticsearch and %d Redis reads ran", esReads.Load(), redisRead.Load())
	}
	t.Logf("%d Elasticsearch and %d Redis reads during the rebuilds", esReads.Load(), redisRead.Load())

	for _, table := range []string{"customers", "orders", "products"} {
		alias := "rb.inventory." + table
		resp, err := http.Get(es.URL() + "/_alias/" + alias)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil || len(m) != 1 || m[alias+"_v2"] == nil {
			t.Fatalf("alias %s after the rebuild: %s", alias, b)
		}
	}
	got, prefix, err := redisRows(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if prefix != "__sluice:cache:g1:" || !cmp.Equal(wantRedis, got) {
		t.Fatalf("redis after the rebuild: prefix %q, (-want +got):\n%s", prefix, cmp.Diff(wantRedis, got))
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.wait(); err != nil {
		t.Fatalf("graceful stop: %v\n%s", err, tail(logPath))
	}
	// the old generation is gone once the sink closed
	if n, err := rdb.Exists(ctx, "customers:1", "orders:1", "products:1").Result(); err != nil || n != 0 {
		t.Fatalf("%d keys of generation 0 left (%v)", n, err)
	}
}
