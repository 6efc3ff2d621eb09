package wal

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		crashChildMain()
		return
	}
	goleak.VerifyTestMain(m)
}

// fakeClock is a settable clock for tests.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newClock() *fakeClock { return &fakeClock{t: time.UnixMilli(1_700_000_000_000)} }

func memOpts(fs vfs.FS, c *fakeClock) Options {
	return Options{FS: fs, Clock: c.now}
}

func mustOpen(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l
}

func mustAppend(t testing.TB, l *Log, topic string, part int32, recs []Record, opts AppendOptions) AppendResult {
	t.Helper()
	res, err := l.Append(context.Background(), topic, part, recs, opts)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return res
}

// readAllRecords reads a partition from its start to its high watermark,
// copying the records.
func readAllRecords(t testing.TB, l *Log, topic string, part int32) []Record {
	t.Helper()
	recs, err := tryReadAll(l, topic, part)
	if err != nil {
		t.Fatalf("read all: %v", err)
	}
	return recs
}

func tryReadAll(l *Log, topic string, part int32) ([]Record, error) {
	off, err := l.EarliestOffset(topic, part)
	if err != nil {
		return nil, err
	}
	var out []Record
	for {
		res, err := l.Fetch(context.Background(), topic, part, off, FetchOptions{MaxBytes: 64 << 10})
		if err != nil {
			return nil, err
		}
		for _, r := range res.Records {
			out = append(out, copyRecord(r))
		}
		if res.NextOffset >= res.HighWatermark {
			return out, nil
		}
		if res.NextOffset <= off {
			return nil, fmt.Errorf("fetch at %d made no progress (hw %d)", off, res.HighWatermark)
		}
		off = res.NextOffset
	}
}

func copyRecord(r Record) Record {
	c := r
	if r.Key != nil {
		c.Key = append([]byte{}, r.Key...)
	}
	if r.Value != nil {
		c.Value = append([]byte{}, r.Value...)
	}
	c.Headers = nil
	for _, h := range r.Headers {
		var v []byte
		if h.Value != nil {
			v = append([]byte{}, h.Value...)
		}
		c.Headers = append(c.Headers, Header{Key: h.Key, Value: v})
	}
	return c
}

func kv(k, v string) Record {
	r := Record{Key: []byte(k)}
	if v != "\x00nil" {
		r.Value = []byte(v)
	}
	return r
}
