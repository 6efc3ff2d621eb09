// Package sinks holds the end-to-end tests of the view sinks: the sluice binary maintaining an
// Elasticsearch index and a Redis keyspace from datagen's change events while it is killed
// with SIGKILL again and again. The sinks' own tests (sinks/elasticsearch, sinks/redis) cover
// the workloads, replays, out-of-order events, retries, rejections and rebuilds against the
// same servers; sinktest generates their workloads.
package sinks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
	"github.com/sluice-cdc/sluice/sources/datagen"
)

var shared struct {
	mu    sync.Mutex
	es    *harness.Elasticsearch
	redis *harness.Redis
}

func TestMain(m *testing.M) {
	code := m.Run()
	shared.mu.Lock()
	for _, c := range []interface{ Close() error }{shared.es, shared.redis} {
		if c == nil || c == (*harness.Elasticsearch)(nil) || c == (*harness.Redis)(nil) {
			continue
		}
		if err := c.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close server:", err)
			code = 1
		}
	}
	shared.mu.Unlock()
	os.Exit(code)
}

func servers(t *testing.T) (*harness.Elasticsearch, *harness.Redis) {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var err error
	if shared.es == nil {
		if shared.es, err = harness.StartElasticsearch(ctx, harness.ElasticsearchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if shared.redis == nil {
		if shared.redis, err = harness.StartRedis(ctx, harness.RedisOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return shared.es, shared.redis
}

// kills returns how many times the loop kills sluice: SLUICE_KILLS, else 100 with
// SLUICE_SOAK=1, else 6 (about a minute).
func kills(t *testing.T) int {
	if v := os.Getenv("SLUICE_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SLUICE_KILLS=%q: want a positive integer", v)
		}
		return n
	}
	if os.Getenv("SLUICE_SOAK") == "1" {
		return 100
	}
	return 6
}

// With 300 keys, 11 900 events leave 100 rows (each updated for the ninth time) and 200 keys
// deleted (for the tenth time), after nine rounds of insert, update, update, delete.
const (
	killEvents = 11900
	killKeys   = 300
	killRate   = 3000
)

func pipeline(dir, esURL, redisAddr string) string {
	return fmt.Sprintf(`log:
  dir: %s
  partitions: 3
rest:
  listeners: []
connectors:
  - name: gen
    class: datagen
    config:
      topic.prefix: kill
      datagen.keys: %d
      datagen.max.events: %d
      datagen.rate: %d
  - name: search
    class: io.confluent.connect.elasticsearch.ElasticsearchSinkConnector
    config:
      topics.regex: kill\..*
      connection.url: %s
      index.settings: '{"number_of_shards":1,"number_of_replicas":0,"index.gc_deletes":"1h"}'
      batch.size: 40
      max.in.flight.requests: 2
      consumer.override.max.poll.records: 200
  - name: cache
    class: com.redis.kafka.connect.RedisSinkConnector
    config:
      topics.regex: kill\..*
      redis.uri: redis://%s/3
      batch.size: 40
      consumer.override.max.poll.records: 200
`, filepath.Join(dir, "log"), killKeys, killEvents, killRate, esURL, redisAddr)
}

// expected replays datagen's events into the rows they leave: table → id → row.
func expected() map[string]map[int64]connect.Row {
	s := datagen.Settings{Prefix: "kill", Database: "inventory", Tables: datagen.Tables, Keys: killKeys, Seed: 1, Tombstones: true}
	out := map[string]map[int64]connect.Row{}
	for _, t := range datagen.Tables {
		out[t] = map[int64]connect.Row{}
	}
	for n := int64(0); n < killEvents; n++ {
		rec := s.Records(n)[0]
		ev, err := connect.ParseChangeEvent(rec.Value)
		if err != nil {
			panic(err)
		}
		table, id := s.Key(n)
		if ev.Op == connect.OpDelete {
			delete(out[table], id)
		} else {
			out[table][id] = ev.After
		}
	}
	return out
}

func jsonOf(t *testing.T, v any) any {
	b, err := connect.MarshalJSONValue(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// esView reads the three indices (the default index: the topic) after a refresh:
// "<table>/<id>" → document.
func esView(t *testing.T, url string) (map[string]any, error) {
	return esSearch(url, "kill", true)
}

// esSearch reads the indices of the topics with the prefix: "<table>/<id>" → document; with
// refresh, after refreshing them.
func esSearch(url, prefix string, refresh bool) (map[string]any, error) {
	out := map[string]any{}
	for _, table := range datagen.Tables {
		idx := prefix + ".inventory." + table
		if refresh {
			resp, err := http.Post(url+"/"+idx+"/_refresh", "application/json", nil)
			if err != nil {
				return nil, err
			}
			resp.Body.Close()
			if resp.StatusCode == 404 {
				continue
			}
		}
		resp, err := http.Post(url+"/"+idx+"/_search", "application/json", strings.NewReader(`{"size":10000}`))
		if err != nil {
			return nil, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return nil, fmt.Errorf("search %s: %d %s", idx, resp.StatusCode, b)
		}
		var res struct {
			Hits struct {
				Hits []struct {
					ID     string          `json:"_id"`
					Source json.RawMessage `json:"_source"`
				} `json:"hits"`
			} `json:"hits"`
		}
		if err := json.Unmarshal(b, &res); err != nil {
			return nil, err
		}
		for _, h := range res.Hits.Hits {
			if _, dup := out[table+"/"+h.ID]; dup {
				return nil, fmt.Errorf("search %s: document %s found twice", idx, h.ID)
			}
			var v any
			if err := json.Unmarshal(h.Source, &v); err != nil {
				return nil, err
			}
			out[table+"/"+h.ID] = v
		}
	}
	return out, nil
}

// redisView reads every row hash: "<table>/<id>" → fields.
func redisView(ctx context.Context, c *goredis.Client) (map[string]any, error) {
	out := map[string]any{}
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if strings.HasPrefix(k, "__sluice:") {
			continue
		}
		v, err := c.HGetAll(ctx, k).Result()
		if err != nil {
			return nil, fmt.Errorf("hgetall %s: %w", k, err)
		}
		out[strings.Replace(k, ":", "/", 1)] = v
	}
	return out, iter.Err()
}

func hashOf(t *testing.T, row connect.Row) map[string]string {
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

// TestKillLoop runs datagen → log → Elasticsearch and Redis sinks in the sluice binary, kills
// it with SIGKILL at random moments (mostly in the middle of sink batches: a Write is several
// bulk requests and MULTI/EXEC transactions) and stops it gracefully now and then, restarts it, and
// checks at the end that the index and the keyspace equal the rows datagen's events leave:
// no lost write, no stale document, no resurrected delete.
func TestKillLoop(t *testing.T) {
	es, rd := servers(t)
	n := kills(t)
	dir := t.TempDir()
	bin := buildSluice(t, dir)
	cfg := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(cfg, []byte(pipeline(dir, es.URL(), rd.Addr())), 0o644); err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: rd.Addr(), DB: 3})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 3))
	t.Logf("%d kills, seed %d", n, seed)

	for i := range n {
		logPath := filepath.Join(dir, fmt.Sprintf("run-%03d.log", i))
		p := start(t, bin, cfg, logPath)
		time.Sleep(time.Duration(300+rng.IntN(1500)) * time.Millisecond)
		if i%4 == 3 {
			p.cmd.Process.Signal(syscall.SIGTERM)
			if err := p.wait(); err != nil {
				t.Fatalf("run %d: graceful stop: %v\n%s", i, err, tail(logPath))
			}
		} else {
			p.cmd.Process.Signal(syscall.SIGKILL)
			p.wait()
		}
	}

	want := expected()
	wantES, wantRedis := map[string]any{}, map[string]any{}
	for table, rows := range want {
		for id, row := range rows {
			k := table + "/" + strconv.FormatInt(id, 10)
			wantES[k] = jsonOf(t, row)
			wantRedis[k] = hashOf(t, row)
		}
	}
	if len(wantES) != 100 {
		t.Fatalf("the model has %d rows, want 100", len(wantES))
	}
	logPath := filepath.Join(dir, "run-final.log")
	p := start(t, bin, cfg, logPath)
	deadline := time.Now().Add(3 * time.Minute)
	var diffES, diffRedis string
	for {
		gotES, err := esView(t, es.URL())
		if err != nil {
			t.Fatal(err)
		}
		gotRedis, err := redisView(ctx, rdb)
		if err != nil {
			t.Fatal(err)
		}
		diffES, diffRedis = cmp.Diff(wantES, gotES), cmp.Diff(wantRedis, gotRedis)
		if diffES == "" && diffRedis == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the views differ from the source rows 3 minutes into the final run\nelasticsearch (-want +got):\n%.3000s\nredis (-want +got):\n%.3000s\nlog:\n%s",
				diffES, diffRedis, tail(logPath))
		}
		select {
		case <-p.exited:
			t.Fatalf("the final run exited: %v\n%s", p.err, tail(logPath))
		case <-time.After(500 * time.Millisecond):
		}
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.wait(); err != nil {
		t.Fatalf("final graceful stop: %v\n%s", err, tail(logPath))
	}
	t.Logf("%d rows in both views equal the source after %d kills", len(wantES), n)
}

// buildSluice builds the binary into dir.
func buildSluice(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/sluice-cdc/sluice/cmd/sluice").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

func (p *proc) wait() error {
	<-p.exited
	return p.err
}

func start(t *testing.T, bin, cfg, logPath string) *proc {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "-c", cfg, "--log-format", "json")
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); f.Close(); close(p.exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-p.exited })
	return p
}

// tail returns the last lines of a run's log.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
