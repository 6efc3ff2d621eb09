package wal

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// TopicConfig is a topic's configuration. The fields carry Kafka's topic
// configuration meanings; ParseTopicConfig reads them from Kafka's names.
type TopicConfig struct {
	// Partitions is the number of partitions (partitions). Fixed at creation.
	Partitions int32
	// Delete and Compact are the cleanup policy (cleanup.policy: "delete",
	// "compact" or "compact,delete"). At least one is set.
	Delete  bool
	Compact bool
	// Retention deletes sealed segments whose newest record is older
	// (retention.ms); negative keeps them forever. Applies when Delete.
	Retention time.Duration
	// RetentionBytes deletes the oldest sealed segments while the partition
	// is larger (retention.bytes); negative means no limit. Applies when
	// Delete.
	RetentionBytes int64
	// SegmentBytes is the size at which the active segment is rolled
	// (segment.bytes).
	SegmentBytes int64
	// SegmentAge rolls the active segment once its first record is older
	// (segment.ms), so that time retention and compaction can reach it.
	SegmentAge time.Duration
	// DeleteRetention is how long compaction keeps a tombstone after it
	// first saw it (delete.retention.ms).
	DeleteRetention time.Duration
	// MinCompactionLag keeps records younger than this out of compaction
	// (min.compaction.lag.ms).
	MinCompactionLag time.Duration
	// MaxCompactionLag makes a partition eligible for compaction whatever
	// its dirty ratio once its oldest uncompacted record is older
	// (max.compaction.lag.ms).
	MaxCompactionLag time.Duration
	// MinCleanableDirtyRatio is the share of not yet compacted bytes above
	// which a partition is compacted (min.cleanable.dirty.ratio).
	MinCleanableDirtyRatio float64
	// MaxMessageBytes bounds one appended batch (max.message.bytes).
	MaxMessageBytes int32
	// IndexIntervalBytes is the spacing of sparse index entries
	// (index.interval.bytes).
	IndexIntervalBytes int32
	// Compression is the codec appends compress each batch's records with
	// (compression.type). Batches already written keep their own codec.
	Compression Compression
}

// DefaultTopicConfig returns Kafka's defaults (one partition, delete
// policy, 7 days retention, 1 GiB segments), with 8 MiB batches allowed.
func DefaultTopicConfig() TopicConfig {
	return TopicConfig{
		Partitions:             1,
		Delete:                 true,
		Retention:              7 * 24 * time.Hour,
		RetentionBytes:         -1,
		SegmentBytes:           1 << 30,
		SegmentAge:             7 * 24 * time.Hour,
		DeleteRetention:        24 * time.Hour,
		MinCompactionLag:       0,
		MaxCompactionLag:       time.Duration(math.MaxInt64),
		MinCleanableDirtyRatio: 0.5,
		MaxMessageBytes:        8 << 20,
		IndexIntervalBytes:     4096,
	}
}

type configKey struct {
	name  string
	get   func(c *TopicConfig) string
	set   func(c *TopicConfig, v string) error
	check func(c *TopicConfig) error
}

func msField(name string, f func(c *TopicConfig) *time.Duration, min int64) configKey {
	return configKey{
		name: name,
		get: func(c *TopicConfig) string {
			d := *f(c)
			if d < 0 {
				return "-1"
			}
			if d == time.Duration(math.MaxInt64) {
				return strconv.FormatInt(math.MaxInt64, 10)
			}
			return strconv.FormatInt(d.Milliseconds(), 10)
		},
		set: func(c *TopicConfig, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("must be an integer number of milliseconds (got %q)", v)
			}
			if n < min {
				return fmt.Errorf("must be >= %d (got %d)", min, n)
			}
			switch {
			case n < 0:
				*f(c) = -1
			case n > math.MaxInt64/int64(time.Millisecond):
				*f(c) = time.Duration(math.MaxInt64)
			default:
				*f(c) = time.Duration(n) * time.Millisecond
			}
			return nil
		},
	}
}

func intField(name string, get func(c *TopicConfig) int64, set func(c *TopicConfig, n int64), min, max int64) configKey {
	return configKey{
		name: name,
		get:  func(c *TopicConfig) string { return strconv.FormatInt(get(c), 10) },
		set: func(c *TopicConfig, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("must be an integer (got %q)", v)
			}
			if n < min || n > max {
				return fmt.Errorf("must be %d..%d (got %d)", min, max, n)
			}
			set(c, n)
			return nil
		},
		check: func(c *TopicConfig) error {
			if n := get(c); n < min || n > max {
				return fmt.Errorf("must be %d..%d (got %d)", min, max, n)
			}
			return nil
		},
	}
}

var configKeys = []configKey{
	intField("partitions", func(c *TopicConfig) int64 { return int64(c.Partitions) },
		func(c *TopicConfig, n int64) { c.Partitions = int32(n) }, 1, 10000),
	{
		name: "cleanup.policy",
		get: func(c *TopicConfig) string {
			switch {
			case c.Compact && c.Delete:
				return "compact,delete"
			case c.Compact:
				return "compact"
			default:
				return "delete"
			}
		},
		set: func(c *TopicConfig, v string) error {
			c.Compact, c.Delete = false, false
			for _, p := range strings.Split(v, ",") {
				switch strings.TrimSpace(p) {
				case "compact":
					c.Compact = true
				case "delete":
					c.Delete = true
				default:
					return fmt.Errorf(`must be "delete", "compact" or "compact,delete" (got %q)`, v)
				}
			}
			return nil
		},
		check: func(c *TopicConfig) error {
			if !c.Compact && !c.Delete {
				return errors.New("must name at least one of delete, compact")
			}
			return nil
		},
	},
	msField("retention.ms", func(c *TopicConfig) *time.Duration { return &c.Retention }, -1),
	intField("retention.bytes", func(c *TopicConfig) int64 { return c.RetentionBytes },
		func(c *TopicConfig, n int64) { c.RetentionBytes = n }, -1, math.MaxInt64),
	intField("segment.bytes", func(c *TopicConfig) int64 { return c.SegmentBytes },
		func(c *TopicConfig, n int64) { c.SegmentBytes = n }, 1024, math.MaxInt32),
	msField("segment.ms", func(c *TopicConfig) *time.Duration { return &c.SegmentAge }, 1),
	msField("delete.retention.ms", func(c *TopicConfig) *time.Duration { return &c.DeleteRetention }, 0),
	msField("min.compaction.lag.ms", func(c *TopicConfig) *time.Duration { return &c.MinCompactionLag }, 0),
	msField("max.compaction.lag.ms", func(c *TopicConfig) *time.Duration { return &c.MaxCompactionLag }, 1),
	{
		name: "min.cleanable.dirty.ratio",
		get:  func(c *TopicConfig) string { return strconv.FormatFloat(c.MinCleanableDirtyRatio, 'g', -1, 64) },
		set: func(c *TopicConfig, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || f > 1 {
				return fmt.Errorf("must be a number in 0..1 (got %q)", v)
			}
			c.MinCleanableDirtyRatio = f
			return nil
		},
		check: func(c *TopicConfig) error {
			if !(c.MinCleanableDirtyRatio >= 0 && c.MinCleanableDirtyRatio <= 1) {
				return fmt.Errorf("must be a number in 0..1 (got %v)", c.MinCleanableDirtyRatio)
			}
			return nil
		},
	},
	intField("max.message.bytes", func(c *TopicConfig) int64 { return int64(c.MaxMessageBytes) },
		func(c *TopicConfig, n int64) { c.MaxMessageBytes = int32(n) }, 1024, maxBatchBytes),
	intField("index.interval.bytes", func(c *TopicConfig) int64 { return int64(c.IndexIntervalBytes) },
		func(c *TopicConfig, n int64) { c.IndexIntervalBytes = int32(n) }, 0, math.MaxInt32),
	{
		name: "compression.type",
		get:  func(c *TopicConfig) string { return c.Compression.String() },
		set: func(c *TopicConfig, v string) (err error) {
			c.Compression, err = ParseCompression(v)
			return err
		},
		check: func(c *TopicConfig) error {
			_, err := ParseCompression(c.Compression.String())
			return err
		},
	},
}

// ParseTopicConfig builds a TopicConfig from Kafka-named keys over the
// defaults in base. It reports every problem at once, each naming its key.
func ParseTopicConfig(base TopicConfig, kv map[string]string) (TopicConfig, error) {
	c := base
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []error
	for _, k := range keys {
		ck, ok := lookupKey(k)
		if !ok {
			msg := fmt.Sprintf("%s: unknown topic config key", k)
			if s := suggestKey(k); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			errs = append(errs, errors.New(msg))
			continue
		}
		if err := ck.set(&c, strings.TrimSpace(kv[k])); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", k, err))
		}
	}
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	return c, c.Validate()
}

// Validate checks every field and reports every problem, each naming its
// Kafka key.
func (c TopicConfig) Validate() error {
	var errs []error
	for _, ck := range configKeys {
		if ck.check != nil {
			if err := ck.check(&c); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", ck.name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Map returns the configuration under Kafka's key names.
func (c TopicConfig) Map() map[string]string {
	m := make(map[string]string, len(configKeys))
	for _, ck := range configKeys {
		m[ck.name] = ck.get(&c)
	}
	return m
}

func lookupKey(k string) (configKey, bool) {
	for _, ck := range configKeys {
		if ck.name == k {
			return ck, true
		}
	}
	return configKey{}, false
}

func suggestKey(k string) string {
	best, bestD := "", 4
	for _, ck := range configKeys {
		if d := editDistance(k, ck.name); d < bestD {
			best, bestD = ck.name, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
