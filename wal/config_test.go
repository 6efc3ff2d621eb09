package wal

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseTopicConfig(t *testing.T) {
	cfg, err := ParseTopicConfig(DefaultTopicConfig(), map[string]string{
		"partitions":                "6",
		"cleanup.policy":            "compact,delete",
		"retention.ms":              "-1",
		"retention.bytes":           "1048576",
		"segment.bytes":             "4096",
		"segment.ms":                "60000",
		"delete.retention.ms":       "1000",
		"min.compaction.lag.ms":     "5",
		"max.compaction.lag.ms":     "600000",
		"min.cleanable.dirty.ratio": "0.25",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultTopicConfig()
	want.Partitions = 6
	want.Compact, want.Delete = true, true
	want.Retention = -1
	want.RetentionBytes = 1 << 20
	want.SegmentBytes = 4096
	want.SegmentAge = time.Minute
	want.DeleteRetention = time.Second
	want.MinCompactionLag = 5 * time.Millisecond
	want.MaxCompactionLag = 10 * time.Minute
	want.MinCleanableDirtyRatio = 0.25
	if d := cmp.Diff(want, cfg); d != "" {
		t.Fatalf("config (-want +got):\n%s", d)
	}
	// Round trip through Kafka names.
	back, err := ParseTopicConfig(DefaultTopicConfig(), cfg.Map())
	if err != nil || !cmp.Equal(cfg, back) {
		t.Fatalf("round trip: %v\n%s", err, cmp.Diff(cfg, back))
	}
}

func TestParseTopicConfigErrors(t *testing.T) {
	_, err := ParseTopicConfig(DefaultTopicConfig(), map[string]string{
		"cleanup.policy":            "archive",
		"retention.ms":              "soon",
		"segment.bytes":             "10",
		"min.cleanable.dirty.ratio": "2",
		"retention.msec":            "1",
	})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`cleanup.policy: must be "delete", "compact" or "compact,delete" (got "archive")`,
		`retention.ms: must be an integer number of milliseconds (got "soon")`,
		`segment.bytes: must be 1024..2147483647 (got 10)`,
		`min.cleanable.dirty.ratio: must be a number in 0..1 (got "2")`,
		`retention.msec: unknown topic config key (did you mean "retention.ms"?)`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestTopicNames(t *testing.T) {
	for _, ok := range []string{"a", "db.inventory.orders", "A_b-9"} {
		if err := ValidTopicName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a b", strings.Repeat("x", 250), "+x"} {
		if err := ValidTopicName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
