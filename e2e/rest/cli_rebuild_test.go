package rest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/e2e/harness"
)

// The CLI's `connectors lag` and `rebuild` against a sluice whose Redis view is fed by
// datagen: the lag table ends at 0 once the view has every record, and a rebuild replays
// every record of the topic into a new generation and switches the view to it, which then
// holds the same rows.
func TestCLIRebuildAndLag(t *testing.T) {
	rs := harness.NewRedis(t, harness.RedisOptions{})
	dir := t.TempDir()
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	pipeline := filepath.Join(dir, "pipeline.yaml")
	os.WriteFile(pipeline, []byte(fmt.Sprintf(`log:
  dir: %s/log
rest:
  listeners: [%q]
connectors:
  - name: gen
    class: datagen
    config:
      topic.prefix: g
      datagen.tables: customers
      datagen.keys: 50
      datagen.max.events: 350 # 7 rounds of the 50 keys: c, u, u, d, c, u, u
      datagen.seed: 7
  - name: view
    class: redis
    config:
      redis.uri: redis://%s
      topics: g.inventory.customers
      transforms: unwrap
      transforms.unwrap.type: unwrap
`, dir, base, rs.Addr())), 0o644)
	start(t, pipeline, base, "")

	var stdout, stderr bytes.Buffer
	run := func(args ...string) int {
		stdout.Reset()
		stderr.Reset()
		cmd := exec.Command(bin, append(args, "--server", base)...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				return ee.ExitCode()
			}
			t.Fatal(err)
		}
		return 0
	}
	// The lag table: one row for the topic's partition, then the total; wait for 0.
	total := regexp.MustCompile(`(?m)^total\s+(\d+)$`)
	row := regexp.MustCompile(`(?m)^g\.inventory\.customers\s+0\s+(\d+)\s+(\d+)\s+(\d+)$`)
	deadline := time.Now().Add(time.Minute)
	records := 0
	for {
		if code := run("connectors", "lag", "view"); code != 0 {
			t.Fatalf("connectors lag: %d %q", code, stderr.String())
		}
		out := stdout.String()
		if !strings.HasPrefix(out, "TOPIC") || !total.MatchString(out) {
			t.Fatalf("connectors lag: no table with a total:\n%s", out)
		}
		// 350 events are more records (a delete is followed by its tombstone); the source
		// is done when the topic stops growing.
		m := row.FindStringSubmatch(out)
		if m != nil && total.FindStringSubmatch(out)[1] == "0" && m[1] == m[2] && m[3] == "0" {
			end, _ := strconv.Atoi(m[2])
			if end >= 350 && end == records {
				break
			}
			records = end
		}
		if time.Now().After(deadline) {
			t.Fatalf("the view never caught up with the 350 events:\n%s", out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	before := hashes(ctx, t, rdb)
	if len(before) == 0 || len(before) > 50 {
		t.Fatalf("%d rows in the view, want 1..50", len(before))
	}
	// Drop one row behind sluice's back: the rebuild brings it back.
	var dropped string
	for k := range before {
		dropped = k
		break
	}
	if err := rdb.Del(ctx, dropped).Err(); err != nil {
		t.Fatal(err)
	}
	if code := run("rebuild", "view"); code != 0 {
		t.Fatalf("rebuild: %d %q %q", code, stdout.String(), stderr.String())
	}
	// Progress lines, then the result.
	m := regexp.MustCompile(`(?:^|\n)rebuild of view done: (\d+) records replayed; the view was switched\n$`).FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("rebuild output %q", stdout.String())
	}
	if n, _ := strconv.Atoi(m[1]); n != records {
		t.Fatalf("the rebuild replayed %d records, want the topic's %d", n, records)
	}
	after := hashes(ctx, t, rdb)
	if len(after) != len(before) {
		t.Fatalf("after the rebuild the view has %d rows, before %d", len(after), len(before))
	}
	for k, v := range before {
		got, ok := after[k]
		if !ok || fmt.Sprint(got) != fmt.Sprint(v) {
			t.Fatalf("row %s after the rebuild: %v (present %v), before: %v", k, got, ok, v)
		}
	}
	if code := run("rebuild", "gen"); code != 1 || !strings.Contains(stderr.String(), "gen") {
		t.Fatalf("rebuild of a source: %d %q", code, stderr.String())
	}
}

// hashes reads the view's rows through its live generation pointer: row keys are the ones
// under it, with the generation prefix taken off.
func hashes(ctx context.Context, t *testing.T, rdb *redis.Client) map[string]map[string]string {
	t.Helper()
	prefix, err := rdb.Get(ctx, "__sluice:view:live").Result()
	if err == redis.Nil {
		prefix = ""
	} else if err != nil {
		t.Fatal(err)
	}
	keys, err := rdb.Keys(ctx, prefix+"customers:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	for _, k := range keys {
		h, err := rdb.HGetAll(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(k, prefix)] = h
	}
	return out
}
