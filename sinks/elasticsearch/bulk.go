package elasticsearch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// bulkResponse is the part of a _bulk answer the sink reads.
type bulkResponse struct {
	Errors bool       `json:"errors"`
	Items  []bulkItem `json:"items"`
}

// bulkItem holds one item's result under its action's name.
type bulkItem struct {
	Index  *itemResult `json:"index"`
	Create *itemResult `json:"create"`
	Update *itemResult `json:"update"`
	Delete *itemResult `json:"delete"`
}

func (b *bulkItem) result() *itemResult {
	switch {
	case b.Index != nil:
		return b.Index
	case b.Delete != nil:
		return b.Delete
	case b.Create != nil:
		return b.Create
	}
	return b.Update
}

type itemResult struct {
	Status int        `json:"status"`
	Result string     `json:"result"`
	Error  *itemError `json:"error"`
}

type itemError struct {
	Type   string `json:"type"`
	Reason string `json:"reason"`
}

// ItemError is Elasticsearch's refusal of one bulk item.
type ItemError struct {
	Status int
	Type   string
	Reason string
}

func (e *ItemError) Error() string {
	if e.Type == "" {
		return fmt.Sprintf("elasticsearch refused the document: %d %s", e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("elasticsearch refused the document: %d %s: %s", e.Status, e.Type, e.Reason)
}

// bulkPath asks for the item fields the sink reads only: a much smaller answer to write, send
// and parse.
const bulkPath = "/_bulk?filter_path=errors,items.*.status,items.*.error.type,items.*.error.reason"

// bulk sends one bulk request and settles each of its items: done, conflict (a stale write
// the version guard refused), retry (429, 5xx: tried again later) or rejected (any other
// refusal: the document itself is at fault). A request that fails as a whole marks all its
// items for retry when it is transient, and returns an error otherwise.
func (s *Sink) bulk(ctx context.Context, body []byte, items []*action) error {
	resp, err := s.c.do(ctx, "POST", bulkPath, body)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !requestRetriable(err) {
			return fmt.Errorf("write to elasticsearch: %w", err)
		}
		for _, a := range items {
			a.state, a.err = itemRetry, err
		}
		return nil
	}
	if bytes.HasPrefix(resp, []byte(`{"errors":false`)) {
		// every item succeeded (deletes of missing documents included)
		for _, a := range items {
			a.state = itemDone
		}
		return nil
	}
	var br bulkResponse
	if err := json.Unmarshal(resp, &br); err != nil {
		return fmt.Errorf("write to elasticsearch: decode bulk response: %w", err)
	}
	if len(br.Items) != len(items) {
		return fmt.Errorf("write to elasticsearch: bulk response has %d items for %d sent", len(br.Items), len(items))
	}
	for i, a := range items {
		r := br.Items[i].result()
		if r == nil {
			return errors.New("write to elasticsearch: bulk response item without a result")
		}
		s.settle(a, r)
	}
	return nil
}

// settle records one item's result.
func (s *Sink) settle(a *action, r *itemResult) {
	switch {
	case r.Status >= 200 && r.Status < 300:
		a.state = itemDone
	case r.Status == http.StatusNotFound && a.del && r.Error == nil:
		a.state = itemDone // deleting a missing document (its version is still recorded)
	case r.Status == http.StatusConflict:
		a.state = itemConflict
	default:
		ie := &ItemError{Status: r.Status}
		if r.Error != nil {
			ie.Type, ie.Reason = r.Error.Type, r.Error.Reason
		}
		a.err = ie
		switch {
		case r.Status == http.StatusNotFound && ie.Type == "index_not_found_exception",
			r.Status == http.StatusBadRequest && strings.Contains(ie.Reason, "write index"):
			// the index went away under us, or its alias has no write index: not the
			// document's fault. Write fails, forgets the index and checks it again.
			a.state, a.gone = itemRetry, true
		case retriableStatus(r.Status):
			a.state = itemRetry
		default:
			a.state = itemRejected
		}
	}
}
