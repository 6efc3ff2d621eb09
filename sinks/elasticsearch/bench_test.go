package elasticsearch

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	es8 "github.com/elastic/go-elasticsearch/v8"
	"github.com/elastic/go-elasticsearch/v8/esutil"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/sinks/sinktest"
)

// benchEvents is the number of change events a benchmark applies: SLUICE_BENCH_EVENTS, else
// one million.
func benchEvents(b *testing.B) int {
	if v := os.Getenv("SLUICE_BENCH_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			b.Fatalf("SLUICE_BENCH_EVENTS=%q: want an integer >= 1000", v)
		}
		return n
	}
	return 1_000_000
}

const benchSettings = `{"number_of_shards":1,"number_of_replicas":0}`

// rawLoader loads events of a generator with a plain esutil.BulkIndexer (index and delete
// actions, no versions): the baseline.
type rawLoader struct {
	b      *testing.B
	client *es8.Client
	index  string
	flush  int
	gen    *sinktest.Small
	failed error
}

func newRawLoader(b *testing.B, url, index string, keys, flushBytes int) *rawLoader {
	c := newESClient(b, url)
	c.call("DELETE", "/"+index, nil)
	c.must("PUT", "/"+index, `{"settings":`+benchSettings+`}`)
	b.Cleanup(func() { c.call("DELETE", "/"+index, nil) })
	client, err := es8.NewClient(es8.Config{Addresses: []string{url}})
	if err != nil {
		b.Fatal(err)
	}
	return &rawLoader{b: b, client: client, index: index, flush: flushBytes, gen: sinktest.NewSmall(1, keys)}
}

// load applies the generator's next n events and returns how long it took.
func (r *rawLoader) load(n int) time.Duration {
	b := r.b
	bi, err := esutil.NewBulkIndexer(esutil.BulkIndexerConfig{Client: r.client, Index: r.index, FlushBytes: r.flush, NumWorkers: 2,
		OnError: func(_ context.Context, err error) { r.failed = err }})
	if err != nil {
		b.Fatal(err)
	}
	onFailure := func(_ context.Context, it esutil.BulkIndexerItem, res esutil.BulkIndexerResponseItem, err error) {
		if res.Status != http.StatusNotFound || it.Action != "delete" {
			r.failed = fmt.Errorf("item %s %s: %d %s %v", it.Action, it.DocumentID, res.Status, res.Error.Reason, err)
		}
	}
	ctx := context.Background()
	t0 := time.Now()
	for range n {
		e := r.gen.Next()
		it := esutil.BulkIndexerItem{Action: "index", DocumentID: strconv.FormatInt(e.ID, 10), OnFailure: onFailure}
		if e.Delete {
			it.Action = "delete"
		} else {
			doc, err := connect.MarshalJSONValue(e.Row)
			if err != nil {
				b.Fatal(err)
			}
			it.Body = bytes.NewReader(doc)
		}
		if err := bi.Add(ctx, it); err != nil {
			b.Fatal(err)
		}
	}
	if err := bi.Close(ctx); err != nil {
		b.Fatal(err)
	}
	d := time.Since(t0)
	if r.failed != nil {
		b.Fatalf("raw bulk load: %v", r.failed)
	}
	return d
}

// sinkLoader applies events of the same generator through the sink: Debezium change events
// with versions, version-guarded, in Writes of writeSize records.
type sinkLoader struct {
	b         *testing.B
	s         *Sink
	gen       *sinktest.Small
	writeSize int
	offset    int64
}

func newSinkLoader(b *testing.B, url, index string, keys, batchSize, bulkBytes, inFlight, writeSize int) *sinkLoader {
	c := newESClient(b, url)
	c.call("DELETE", "/"+index+"*", nil)
	b.Cleanup(func() { c.call("DELETE", "/"+index+"*", nil) })
	s := newTestSink(b, url, map[string]string{KeyIndex: index, KeyIndexSettings: benchSettings,
		KeyBatchSize: strconv.Itoa(batchSize), KeyBulkSizeBytes: strconv.Itoa(bulkBytes), KeyMaxInFlight: strconv.Itoa(inFlight)})
	return &sinkLoader{b: b, s: s, gen: sinktest.NewSmall(1, keys), writeSize: writeSize}
}

// load applies the generator's next n events and returns how long it took. The records are
// read ahead while the sink writes, as the runtime's fetchers read the log ahead.
func (l *sinkLoader) load(n int) time.Duration {
	batches := make(chan []connect.Record, 2)
	go func() {
		defer close(batches)
		for i := 0; i < n; {
			batch := make([]connect.Record, 0, l.writeSize)
			for ; len(batch) < l.writeSize && i < n; i++ {
				batch = append(batch, l.gen.Next().Record("bench.public.items", l.offset))
				l.offset++
			}
			batches <- batch
		}
	}()
	ctx := context.Background()
	t0 := time.Now()
	var err error
	for batch := range batches {
		if err == nil {
			err = l.s.Write(ctx, batch)
		}
	}
	if err != nil {
		l.b.Fatal(err)
	}
	return time.Since(t0)
}

// BenchmarkApply measures the sink applying one million small change events (95 % upserts of
// 250 000 keys, 5 % deletes) against a tuned raw loader in the same run: esutil.BulkIndexer
// with two workers and its flush size found by doubling. The sink gets the same bulk size in
// bytes and two requests in flight. The machine is shared, so the two load the events in
// alternating segments of 50 000 and each rate is its events over the sum of its segments'
// times. Run it alone:
//
//	go test -run '^$' -bench Apply -benchtime 1x ./sinks/elasticsearch
func BenchmarkApply(b *testing.B) {
	url := sharedES(b).URL()
	n := benchEvents(b)
	const segment = 50_000
	// doubling: each size gets the better of two tries; stop after two sizes without a gain
	best, bestRate, worse := 0, 0.0, 0
	for fb := 64 << 10; fb <= 32<<20 && worse < 2; fb *= 2 {
		rate := 0.0
		for range 2 {
			r := newRawLoader(b, url, "bench-raw-tune", 25_000, fb)
			rate = max(rate, 50_000/r.load(50_000).Seconds())
		}
		b.Logf("raw bulk, flush %5d KiB: %8.0f docs/s", fb>>10, rate)
		if rate > bestRate {
			best, bestRate, worse = fb, rate, 0
		} else {
			worse++
		}
	}
	// an item is about 170 bytes: the bulk size in documents that matches the best flush size
	batchSize := max(100, best/170)
	for range b.N {
		raw := newRawLoader(b, url, "bench-raw", n/4, best)
		sink := newSinkLoader(b, url, "bench-sink", n/4, batchSize, best, 2, 4*2*batchSize)
		var rawTime, sinkTime time.Duration
		for done, i := 0, 0; done < n; i++ {
			k := min(segment, n-done)
			if i%2 == 0 {
				rawTime += raw.load(k)
				sinkTime += sink.load(k)
			} else {
				sinkTime += sink.load(k)
				rawTime += raw.load(k)
			}
			done += k
		}
		rawRate, sinkRate := float64(n)/rawTime.Seconds(), float64(n)/sinkTime.Seconds()
		b.Logf("%d events: raw BulkIndexer (flush %d KiB, 2 workers) %.0f docs/s; sink (batch.size %d, 2 in flight) %.0f events/s = %.2fx; sink stats %+v",
			n, best>>10, rawRate, batchSize, sinkRate, sinkRate/rawRate, sink.s.Stats())
		b.ReportMetric(rawRate, "raw_docs/s")
		b.ReportMetric(sinkRate, "sink_events/s")
		b.ReportMetric(sinkRate/rawRate, "ratio")
	}
}
