package rest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/rest"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/sources/datagen"
	"github.com/sluice-cdc/sluice/wal"
)

// A compaction of a log partition shows in /metrics as a run and the bytes it removed, labelled
// with its topic and partition; a partition not compacted shows zero.
func TestMetricsCompactions(t *testing.T) {
	ctx := context.Background()
	log, err := wal.Open(t.TempDir(), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cfg := wal.DefaultTopicConfig()
	cfg.Delete, cfg.Compact = false, true
	cfg.SegmentBytes = 1024
	cfg.MinCleanableDirtyRatio = 0
	cfg.Partitions = 2
	if err := log.CreateTopic("kv", cfg); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		r := wal.Record{Key: []byte(fmt.Sprint("k", i%10)), Value: []byte(strings.Repeat("v", 40)), Timestamp: time.Now()}
		if _, err := log.Append(ctx, "kv", 0, []wal.Record{r}, wal.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	reg, err := connect.NewRegistry(datagen.Plugin())
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(runtime.Options{Log: log, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	metrics := rest.NewMetrics()
	metrics.Attach(rt)
	srv, err := rest.New(rest.Options{Runtime: rt, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	scrape := func() string {
		t.Helper()
		resp, err := http.Get(ts.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	want := func(text string, lines ...string) {
		t.Helper()
		for _, l := range lines {
			if !strings.Contains(text, "\n"+l+"\n") {
				t.Errorf("/metrics lacks %q", l)
			}
		}
	}
	want(scrape(),
		"# TYPE sluice_log_partition_compactions_total counter",
		"# TYPE sluice_log_partition_compacted_bytes_total counter",
		`sluice_log_partition_compactions_total{partition="0",topic="kv"} 0`,
		`sluice_log_partition_compacted_bytes_total{partition="0",topic="kv"} 0`)

	if err := log.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := log.Describe("kv")
	if err != nil {
		t.Fatal(err)
	}
	if info.Partitions[0].CompactedBytes <= 0 {
		t.Fatalf("the compaction removed nothing: %+v", info.Partitions[0])
	}
	want(scrape(),
		`sluice_log_partition_compactions_total{partition="0",topic="kv"} 1`,
		fmt.Sprintf(`sluice_log_partition_compacted_bytes_total{partition="0",topic="kv"} %d`, info.Partitions[0].CompactedBytes),
		`sluice_log_partition_compactions_total{partition="1",topic="kv"} 0`,
		`sluice_log_partition_compacted_bytes_total{partition="1",topic="kv"} 0`)
}
