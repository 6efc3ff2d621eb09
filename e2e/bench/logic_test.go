package main

// Tests of the bench's pure logic only: nothing here starts a server (the workloads run through
// `make bench`, never through go test).

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	xs := []float64{9, 1, 8, 2, 7, 3, 6, 4, 5, 10}
	for _, c := range []struct {
		name string
		q    float64
		want float64
	}{
		{"p50 is the 5th of 10", 0.5, 5},
		{"p90 is the 9th", 0.9, 9},
		{"p99 rounds up to the last", 0.99, 10},
		{"p0 is the smallest", 0, 1},
		{"p100 is the largest", 1, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := percentile(xs, c.q); got != c.want {
				t.Fatalf("percentile(%v) = %v, want %v", c.q, got, c.want)
			}
		})
	}
	if xs[0] != 9 {
		t.Fatalf("percentile sorted its input in place: %v", xs)
	}
	if got := percentile(nil, 0.5); !math.IsNaN(got) {
		t.Fatalf("percentile of nothing = %v, want NaN", got)
	}
}

func TestBounded(t *testing.T) {
	// 20 s of rows at 100/s: steady latency with jitter, and latency that grows 200 ms per second
	var rows []row
	var flat, growing []float64
	for i := range 2000 {
		rows = append(rows, row{ID: int64(i), TS: int64(i) * 10_000})
		flat = append(flat, 50+float64(i%7)*10)
		growing = append(growing, 50+float64(i)*2)
	}
	if s := lagSlope(rows, flat); math.Abs(s) > 1 {
		t.Fatalf("slope of steady latencies = %v ms/s, want about 0", s)
	}
	if s := lagSlope(rows, growing); math.Abs(s-200) > 0.01 {
		t.Fatalf("slope of growing latencies = %v ms/s, want 200", s)
	}
	if !bounded(rows, flat) {
		t.Fatal("steady latencies reported as unbounded")
	}
	if bounded(rows, growing) {
		t.Fatal("latencies that grow 200 ms per second reported as bounded")
	}
	missing := append([]float64(nil), flat...)
	missing[1000] = math.NaN()
	if bounded(rows, missing) {
		t.Fatal("a rung with a row never seen reported as bounded")
	}
}

func TestViewRow(t *testing.T) {
	ts := time.Date(2026, 11, 30, 4, 42, 1, 123456000, time.UTC)
	want := row{ID: 42, V: 7, S: "bulk row 42", TS: ts.UnixMicro()}
	for _, c := range []struct {
		name   string
		fields map[string]any
	}{
		{"redis hash of a MariaDB row", map[string]any{"id": "42", "v": "7", "s": "bulk row 42", "ts": "1796013721123456"}},
		{"redis hash of a PostgreSQL row", map[string]any{"id": "42", "v": "7", "s": "bulk row 42", "ts": "2026-11-30T04:42:01.123456Z"}},
		{"elasticsearch source", map[string]any{"id": json.Number("42"), "v": json.Number("7"), "s": "bulk row 42", "ts": json.Number("1796013721123456")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := viewRow(c.fields)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("viewRow = %+v, want %+v", got, want)
			}
		})
	}
}

func TestDiffChunk(t *testing.T) {
	src := []row{{1, 1, "a", 10}, {2, 2, "b", 20}, {3, 3, "c", 30}, {4, 4, "d", 40}}
	view := []map[string]any{
		{"id": "1", "v": "1", "s": "a", "ts": "10"}, // equal
		nil, // missing
		{"id": "3", "v": "3", "s": "stale", "ts": "30"},          // another value
		{"id": "4", "v": "4", "s": "d", "ts": "40", "x": "more"}, // an extra column
	}
	got := diffChunk(src, view)
	if len(got) != 3 {
		t.Fatalf("diffChunk found %d differences, want 3: %q", len(got), got)
	}
	for i, want := range []string{"id 2: missing from the view", `id 3: view {ID:3 V:3 S:stale TS:30}, table {ID:3 V:3 S:c TS:30}`, "id 4: columns"} {
		if !strings.HasPrefix(got[i], want) {
			t.Errorf("difference %d = %q, want it to start with %q", i, got[i], want)
		}
	}
	if d := diffChunk(src[:1], view[:1]); len(d) != 0 {
		t.Fatalf("equal rows reported as different: %q", d)
	}
}

func TestBacklogMix(t *testing.T) {
	for _, c := range []struct{ rows, bulk, singles int }{
		{1_000_000, 980, 20_000},
		{500_000, 490, 10_000},
		{20_000, 19, 1_000},
	} {
		bulk, singles := backlogMix(c.rows)
		if bulk != c.bulk || singles != c.singles || bulk*1000+singles != c.rows {
			t.Errorf("backlogMix(%d) = %d, %d; want %d, %d", c.rows, bulk, singles, c.bulk, c.singles)
		}
	}
}

func TestPipelineRenders(t *testing.T) {
	p := pipe{Kind: "postgres", Prefix: "pg", DB: "w1", Table: "t", Slot: "s", Publication: "pub", SnapshotMode: "no_data",
		Sinks: true, Refresh: "1s", LogDir: "/tmp/x/log", API: "127.0.0.1:1", PGPort: 5432, PGUser: "postgres", RedisPort: 6379, ESPort: 9200}
	text, err := p.render()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"slot.name: s", `table.include.list: w1\.t`, "topics: pg.w1.t", "redis.key: ${topic}:${key}", `"index.refresh_interval":"1s"`} {
		if !strings.Contains(text, want) {
			t.Errorf("pipeline lacks %q:\n%s", want, text)
		}
	}
	p.SinkOnly, p.ClusterID, p.ClusterNodes = true, 2, "1=127.0.0.1:1, 2=127.0.0.1:2, 3=127.0.0.1:3"
	if text, err = p.render(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "connectors: []") || !strings.Contains(text, "node_id: 2") || strings.Contains(text, "name: src") {
		t.Errorf("a replicating node's pipeline:\n%s", text)
	}
}
