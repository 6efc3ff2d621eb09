package elasticsearch

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
)

// One Elasticsearch for the package's tests, started on first use and closed by TestMain.
var shared struct {
	mu  sync.Mutex
	es  *harness.Elasticsearch
	err error
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	shared.mu.Lock()
	if shared.es != nil {
		if err := shared.es.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close elasticsearch:", err)
			code = 1
		}
	}
	shared.mu.Unlock()
	os.Exit(code)
}

// sharedES returns the package's Elasticsearch; benchmarks get the full JIT.
func sharedES(t testing.TB) *harness.Elasticsearch {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.es == nil && shared.err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		bench := flag.Lookup("test.bench") != nil && flag.Lookup("test.bench").Value.String() != ""
		t0 := time.Now()
		shared.es, shared.err = harness.StartElasticsearch(ctx, harness.ElasticsearchOptions{FullJIT: bench})
		if shared.err == nil {
			t.Logf("elasticsearch started in %v", time.Since(t0).Round(time.Millisecond))
		}
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.es
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// esClient is the tests' own plain HTTP view of the server, independent of the sink's client.
type esClient struct {
	t   testing.TB
	url string
}

func newESClient(t testing.TB, url string) *esClient { return &esClient{t: t, url: url} }

func (c *esClient) call(method, path string, body any) (int, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		var b []byte
		switch x := body.(type) {
		case string:
			b = []byte(x)
		default:
			var err error
			if b, err = json.Marshal(body); err != nil {
				c.t.Fatal(err)
			}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.url+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// must is call that fails the test unless the answer is 2xx.
func (c *esClient) must(method, path string, body any) []byte {
	c.t.Helper()
	st, b := c.call(method, path, body)
	if st < 200 || st > 299 {
		c.t.Fatalf("%s %s: %d %s", method, path, st, b)
	}
	return b
}

// docs refreshes index and returns every document: id → _source as generic JSON.
func (c *esClient) docs(index string) map[string]any {
	c.t.Helper()
	c.must("POST", "/"+index+"/_refresh", nil)
	return c.search(index)
}

// search returns every document visible to searches now (no refresh).
func (c *esClient) search(index string) map[string]any {
	c.t.Helper()
	b := c.must("POST", "/"+index+"/_search", map[string]any{"size": 10000, "query": map[string]any{"match_all": map[string]any{}}})
	var res struct {
		Hits struct {
			Total struct {
				Value int `json:"value"`
			} `json:"total"`
			Hits []struct {
				Index  string          `json:"_index"`
				ID     string          `json:"_id"`
				Source json.RawMessage `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		c.t.Fatal(err)
	}
	if res.Hits.Total.Value > 10000 {
		c.t.Fatalf("index %s has %d documents: too many for this helper", index, res.Hits.Total.Value)
	}
	out := make(map[string]any, len(res.Hits.Hits))
	from := map[string]string{}
	for _, h := range res.Hits.Hits {
		if from[h.ID] != "" {
			c.t.Fatalf("search %s: document %q found in %s and in %s", index, h.ID, from[h.ID], h.Index)
		}
		from[h.ID] = h.Index
		var v any
		if err := json.Unmarshal(h.Source, &v); err != nil {
			c.t.Fatal(err)
		}
		out[h.ID] = v
	}
	return out
}

// asDocs renders expected rows as the generic JSON Elasticsearch returns.
func asDocs(t testing.TB, rows map[string]connect.Row) map[string]any {
	t.Helper()
	out := make(map[string]any, len(rows))
	for id, row := range rows {
		b, err := connect.MarshalJSONValue(row)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		out[id] = v
	}
	return out
}

// diffDocs compares an index with the expected rows and describes the first differences.
func diffDocs(want, got map[string]any) string {
	var missing, extra []string
	for id := range want {
		if _, ok := got[id]; !ok {
			missing = append(missing, id)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			extra = append(extra, id)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	var b strings.Builder
	if len(missing) > 0 {
		fmt.Fprintf(&b, "%d missing document(s), e.g. %q\n", len(missing), missing[:min(5, len(missing))])
	}
	if len(extra) > 0 {
		fmt.Fprintf(&b, "%d extra document(s), e.g. %q\n", len(extra), extra[:min(5, len(extra))])
	}
	n := 0
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			continue
		}
		if d := cmp.Diff(w, g); d != "" {
			if n < 3 {
				fmt.Fprintf(&b, "document %q (-want +got):\n%s", id, d)
			}
			n++
		}
	}
	if n > 3 {
		fmt.Fprintf(&b, "... %d stale document(s) in all\n", n)
	}
	return b.String()
}

// newTestSink builds a sink from raw config keys (connection.url is added), opened.
func newTestSink(t testing.TB, url string, raw map[string]string) *Sink {
	t.Helper()
	return newTestSinkEnv(t, url, raw, nil)
}

func newTestSinkEnv(t testing.TB, url string, raw map[string]string, log *slog.Logger) *Sink {
	t.Helper()
	cfg := map[string]string{KeyURL: url}
	for k, v := range raw {
		cfg[k] = v
	}
	p := Plugin()
	c, errs := p.ParseConfig(cfg)
	if len(errs) > 0 {
		t.Fatalf("config: %v", errs)
	}
	s, err := New(c, connect.Env{Connector: t.Name(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// uniqueIndex returns an index template unique to the test, so tests can share the server.
func uniqueIndex(t testing.TB) string {
	n := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	return n + "-${table}"
}
