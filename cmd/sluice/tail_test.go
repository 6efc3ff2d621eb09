package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/wal"
)

// fillLog runs a datagen connector into a log in dir until it has appended events events.
func fillLog(t *testing.T, dir string, events int) {
	t.Helper()
	topics := wal.DefaultTopicConfig()
	topics.Partitions = 2
	log, err := openLog(dir, wal.Options{TopicDefaults: topics})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	reg, err := registry()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(runtime.Options{Log: log, Registry: reg, Chain: chainBuilder, Logger: slog.New(slog.DiscardHandler), TopicDefaults: topics})
	if err != nil {
		t.Fatal(err)
	}
	cfg := map[string]string{"topic.prefix": "tail", "datagen.tables": "customers", "datagen.keys": "5",
		"datagen.max.events": fmt.Sprint(events), "offset.flush.interval.ms": "0"}
	if err := rt.Add(runtime.ConnectorSpec{Name: "gen", Class: "datagen", Config: cfg}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		pos, err := rt.SourceOffset(ctx, "gen")
		if err == nil && string(pos.State) == fmt.Sprintf(`{"v":1,"next":%d}`, events) {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("datagen did not append %d events within 20s (at %s)", events, pos.State)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// `sluice topics tail` reads the log directory and prints Debezium JSON lines: every record
// with --from-beginning, one partition with --partition, at most --max-messages.
func TestTopicsTail(t *testing.T) {
	dir := t.TempDir()
	fillLog(t, dir, 30)
	type line struct {
		Topic     string          `json:"topic"`
		Partition int32           `json:"partition"`
		Offset    int64           `json:"offset"`
		Key       json.RawMessage `json:"key"`
		Value     json.RawMessage `json:"value"`
	}
	// tail runs the command; one that follows the log where it should have stopped fails the
	// test instead of hanging it.
	tail := func(args ...string) (int, string, string) {
		t.Helper()
		type result struct {
			code      int
			out, errs string
		}
		done := make(chan result, 1)
		go func() {
			code, out, errs := runCmd(append([]string{"topics", "tail"}, args...)...)
			done <- result{code, out, errs}
		}()
		select {
		case r := <-done:
			return r.code, r.out, r.errs
		case <-time.After(20 * time.Second):
			t.Fatalf("sluice topics tail %s did not return within 20s", strings.Join(args, " "))
			return 0, "", ""
		}
	}
	parse := func(out string) []line {
		var ls []line
		for _, s := range strings.Split(strings.TrimSpace(out), "\n") {
			var l line
			if err := json.Unmarshal([]byte(s), &l); err != nil {
				t.Fatalf("line %q: %v", s, err)
			}
			ls = append(ls, l)
		}
		return ls
	}
	code, out, errs := tail("tail.inventory.customers", "--from-beginning", "--max-messages", "5", "--log-dir", dir)
	if code != 0 {
		t.Fatalf("tail: exit %d: %s", code, errs)
	}
	ls := parse(out)
	if len(ls) != 5 {
		t.Fatalf("--max-messages 5 printed %d lines:\n%s", len(ls), out)
	}
	for _, l := range ls {
		var ev map[string]json.RawMessage
		if l.Topic != "tail.inventory.customers" || json.Unmarshal(l.Value, &ev) != nil || (string(l.Value) != "null" && ev["op"] == nil) {
			t.Fatalf("line %+v is not a record of the topic with a Debezium value", l)
		}
	}
	code, out, errs = tail("tail.inventory.customers", "--from-beginning", "--partition", "1", "--max-messages", "3", "--log-dir", dir)
	if code != 0 {
		t.Fatalf("tail --partition 1: exit %d: %s", code, errs)
	}
	for i, l := range parse(out) {
		if l.Partition != 1 || l.Offset != int64(i) {
			t.Fatalf("--partition 1 line %d: partition %d offset %d, want partition 1 offset %d", i, l.Partition, l.Offset, i)
		}
	}
	if code, _, errs := tail("tail.inventory.customers", "--partition", "7", "--max-messages", "1", "--log-dir", dir); code != 1 || !strings.Contains(errs, "tail tail.inventory.customers: no partition 7 (the topic has 2)") {
		t.Fatalf("tail of a partition the topic lacks: exit %d: %s", code, errs)
	}
	if code, _, errs := tail("nope", "--from-beginning", "--log-dir", dir); code != 1 || !strings.Contains(errs, "tail nope: ") {
		t.Fatalf("tail of an unknown topic: exit %d: %s", code, errs)
	}
	if code, _, errs := tail("tail.inventory.customers"); code != 2 || !strings.Contains(errs, "topics tail reads the log directly: give -c PIPELINE or --log-dir DIR") {
		t.Fatalf("tail without a log: exit %d: %s", code, errs)
	}
}
