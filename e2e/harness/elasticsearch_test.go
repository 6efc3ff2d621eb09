package harness

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/google/go-cmp/cmp"
)

func esClient(t *testing.T, es *Elasticsearch) *elasticsearch.Client {
	t.Helper()
	c, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{es.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// esGetSource fetches a document's _source with the official client (whose first answer must
// carry X-Elastic-Product: Elasticsearch, or it refuses the server).
func esGetSource(t *testing.T, c *elasticsearch.Client, index, id string) map[string]any {
	t.Helper()
	res, err := c.Get(index, id, c.Get.WithContext(testCtx(t)))
	if err != nil {
		t.Fatalf("get %s/%s: %v", index, id, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.IsError() {
		t.Fatalf("get %s/%s: %s: %s", index, id, res.Status(), body)
	}
	var doc struct {
		Source map[string]any `json:"_source"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Source
}

// A document indexed with go-elasticsearch v8 reads back; the client accepts the server.
func TestElasticsearchSmoke(t *testing.T) {
	es := sharedElasticsearch(t)
	c := esClient(t, es)
	ctx := testCtx(t)
	res, err := c.Index("smoke", strings.NewReader(`{"id":1,"name":"alpha"}`),
		c.Index.WithDocumentID("1"), c.Index.WithRefresh("true"), c.Index.WithContext(ctx))
	if err != nil {
		t.Fatalf("index: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 201 {
		t.Fatalf("index: %s: %s", res.Status(), body)
	}
	if got := res.Header.Get("X-Elastic-Product"); got != "Elasticsearch" {
		t.Fatalf("X-Elastic-Product = %q, want Elasticsearch", got)
	}
	if diff := cmp.Diff(map[string]any{"id": 1.0, "name": "alpha"}, esGetSource(t, c, "smoke", "1")); diff != "" {
		t.Fatalf("get (-want +got):\n%s", diff)
	}
}

// Indexed documents survive a restart; the address stays.
func TestElasticsearchRestart(t *testing.T) {
	es := sharedElasticsearch(t)
	c := esClient(t, es)
	res, err := c.Index("restart", strings.NewReader(`{"n":7}`),
		c.Index.WithDocumentID("7"), c.Index.WithRefresh("true"), c.Index.WithContext(testCtx(t)))
	if err != nil || res.IsError() {
		t.Fatalf("index: %v %v", err, res)
	}
	res.Body.Close()
	checkRestart(t, es.Server, es.URL, func(t *testing.T) {
		if diff := cmp.Diff(map[string]any{"n": 7.0}, esGetSource(t, esClient(t, es), "restart", "7")); diff != "" {
			t.Fatalf("after restart (-want +got):\n%s", diff)
		}
	})
}
