package elasticsearch

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/sinks/sinktest"
)

// faultProxy is a reverse proxy in front of Elasticsearch that refuses bulk work the way an
// overloaded cluster does: whole requests answered 429 or 503, and single items left out of
// the forwarded request and answered 429 (es_rejected_execution_exception) or 503, so the
// refused items are really not applied.
type faultProxy struct {
	t       testing.TB
	target  *url.URL
	forward *httputil.ReverseProxy

	mu        sync.Mutex
	rng       *rand.Rand
	wholeRate float64
	itemRate  float64

	wholeRefused, itemsRefused atomic.Int64
}

func newFaultProxy(t testing.TB, esURL string, wholeRate, itemRate float64) (*faultProxy, string) {
	u, err := url.Parse(esURL)
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{t: t, target: u, forward: httputil.NewSingleHostReverseProxy(u),
		rng: rand.New(rand.NewPCG(3, 4)), wholeRate: wholeRate, itemRate: itemRate}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

func (p *faultProxy) roll(rate float64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rng.Float64() < rate
}

func writeES(w http.ResponseWriter, status int, body any) {
	w.Header().Set("X-Elastic-Product", "Elasticsearch")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/_bulk" {
		p.forward.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	if p.roll(p.wholeRate) {
		p.wholeRefused.Add(1)
		if p.roll(0.5) {
			writeES(w, 429, map[string]any{"status": 429, "error": map[string]any{"type": "es_rejected_execution_exception", "reason": "injected: queue full"}})
		} else {
			writeES(w, 503, map[string]any{"status": 503, "error": map[string]any{"type": "unavailable_shards_exception", "reason": "injected: no shard"}})
		}
		return
	}
	// split the NDJSON into items: an action line, and a document line unless it deletes
	type item struct {
		op    string
		lines []byte
		drop  bool
	}
	var items []item
	lines := bytes.Split(bytes.TrimRight(body, "\n"), []byte("\n"))
	for i := 0; i < len(lines); i++ {
		var meta map[string]json.RawMessage
		if err := json.Unmarshal(lines[i], &meta); err != nil {
			http.Error(w, "proxy: bad bulk line", 500)
			return
		}
		it := item{lines: append(append([]byte{}, lines[i]...), '\n')}
		for k := range meta {
			it.op = k
		}
		if it.op != "delete" {
			i++
			it.lines = append(append(it.lines, lines[i]...), '\n')
		}
		it.drop = p.roll(p.itemRate)
		items = append(items, it)
	}
	var fwd []byte
	for _, it := range items {
		if !it.drop {
			fwd = append(fwd, it.lines...)
		}
	}
	var got []json.RawMessage
	if len(fwd) > 0 {
		resp, err := http.Post(p.target.String()+"/_bulk", "application/x-ndjson", bytes.NewReader(fwd))
		if err != nil {
			http.Error(w, err.Error(), 502)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			w.Header().Set("X-Elastic-Product", "Elasticsearch")
			w.WriteHeader(resp.StatusCode)
			_, _ = w.Write(b)
			return
		}
		var br struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(b, &br); err != nil {
			http.Error(w, err.Error(), 502)
			return
		}
		got = br.Items
	}
	out := make([]any, 0, len(items))
	for _, it := range items {
		if !it.drop {
			out = append(out, got[0])
			got = got[1:]
			continue
		}
		p.itemsRefused.Add(1)
		status, typ := 429, "es_rejected_execution_exception"
		if p.roll(0.3) {
			status, typ = 503, "unavailable_shards_exception"
		}
		out = append(out, map[string]any{it.op: map[string]any{"status": status,
			"error": map[string]any{"type": typ, "reason": "injected"}}})
	}
	writeES(w, 200, map[string]any{"took": 1, "errors": true, "items": out})
}

// TestRetries: with a fifth of the bulk requests and a third of the items refused with 429 or
// 503, the sink retries (counting and logging it) and the index still equals the model.
func TestRetries(t *testing.T) {
	es := sharedES(t)
	proxy, proxyURL := newFaultProxy(t, es.URL(), 0.2, 0.3)
	var logs syncBuffer
	s := newTestSinkEnv(t, proxyURL, map[string]string{KeyIndex: uniqueIndex(t), KeyIndexSettings: testSettings,
		KeyMaxRetries: "40", KeyRetryBackoff: "1", KeyRetryBackoffMax: "20", KeyBatchSize: "50", KeyMaxInFlight: "4"},
		slog.New(slog.NewTextHandler(&logs, nil)))
	w := sinktest.Generate(sinktest.Options{Seed: 7, Transactions: 800, Shape: sinktest.Envelope, Partial: true})
	writeAll(t, s, w.Records, 5, 400)
	checkView(t, newESClient(t, es.URL()), w, "after the workload through the faulty proxy")
	st := s.Stats()
	if proxy.itemsRefused.Load() == 0 || proxy.wholeRefused.Load() == 0 {
		t.Fatalf("the proxy refused %d items and %d requests: nothing was tested", proxy.itemsRefused.Load(), proxy.wholeRefused.Load())
	}
	if st.Retries == 0 || st.Rejected != 0 {
		t.Fatalf("stats %+v: want retries and no rejection", st)
	}
	if !strings.Contains(logs.String(), "elasticsearch refused bulk items; retrying") {
		t.Fatalf("no retry was logged:\n%s", logs.String())
	}
	t.Logf("proxy refused %d requests and %d items; the sink retried %d items", proxy.wholeRefused.Load(), proxy.itemsRefused.Load(), st.Retries)
}

// TestRetriesExhausted: items still refused after max.retries make Write fail with a retriable
// error naming the refusal, so the runtime replays the batch; nothing is dropped silently.
func TestRetriesExhausted(t *testing.T) {
	es := sharedES(t)
	_, proxyURL := newFaultProxy(t, es.URL(), 0, 1)
	s := newTestSink(t, proxyURL, map[string]string{KeyIndex: uniqueIndex(t), KeyMaxRetries: "2", KeyRetryBackoff: "1"})
	rec := connect.Record{Topic: "db.s.t", Key: connect.Row{{Name: "id", Value: int64(1)}}, Version: 3,
		Value: connect.Row{{Name: "id", Value: int64(1)}}}
	err := s.Write(testCtx(t), []connect.Record{rec})
	if err == nil || connect.IsPermanent(err) || !connect.IsRetriable(err) {
		t.Fatalf("write: %v, want a retriable error", err)
	}
	const want = "write to elasticsearch: 1 item(s) still refused after 2 retries: elasticsearch refused the document: "
	if !strings.HasPrefix(err.Error(), want) || !strings.HasSuffix(err.Error(), ": injected") {
		t.Fatalf("write: %q, want %q...: injected", err, want)
	}
	if st := s.Stats(); st.Retries != 2 {
		t.Fatalf("retries = %d, want 2", st.Retries)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
