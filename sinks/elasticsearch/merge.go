package elasticsearch

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sluice-cdc/sluice/connect"
)

// Partial updates. Elasticsearch's update API cannot be combined with external versions, and
// the search engine the sink targets may have no scripting, so a partial update (a row with
// unchanged columns, or any row under write.method=upsert) is resolved here into a whole
// document: the stored document is read (a realtime multi-get), the stored values of the kept
// columns are laid under the new image, and the result is indexed with the event's version like
// any other write. The version guard therefore still holds: if a newer version was stored in
// the meantime, the index is refused as stale.
//
// This is correct because one document is written by one sink task at a time and the changes
// of one key arrive in log order (one partition), so nothing changes the document between the
// read and the write except this sink. Within a batch, a later change of the same document is
// merged over what the earlier ones will have stored, simulating the version guard.

type docState struct {
	found   bool
	version int64
	row     connect.Row
}

// resolveMerges turns every merge action into a whole-document write.
func (s *Sink) resolveMerges(ctx context.Context, acts []action) error {
	type docKey struct{ target, id string }
	var keys []docKey
	states := map[docKey]*docState{}
	for i := range acts {
		a := &acts[i]
		if !a.merge || a.state != itemPending {
			continue
		}
		k := docKey{a.target, a.id}
		if _, ok := states[k]; !ok {
			states[k] = nil
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	for start := 0; start < len(keys); start += s.o.batchSize {
		end := min(len(keys), start+s.o.batchSize)
		docs := make([]map[string]string, 0, end-start)
		for _, k := range keys[start:end] {
			docs = append(docs, map[string]string{"_index": k.target, "_id": k.id})
		}
		body, _ := json.Marshal(map[string]any{"docs": docs})
		b, err := s.c.do(ctx, "POST", "/_mget", body)
		if err != nil {
			return fmt.Errorf("read stored documents for partial updates: %w", err)
		}
		var resp struct {
			Docs []struct {
				Found   bool            `json:"found"`
				Version int64           `json:"_version"`
				Source  json.RawMessage `json:"_source"`
				Error   *itemError      `json:"error"`
			} `json:"docs"`
		}
		if err := json.Unmarshal(b, &resp); err != nil {
			return fmt.Errorf("read stored documents for partial updates: %w", err)
		}
		if len(resp.Docs) != end-start {
			return fmt.Errorf("read stored documents for partial updates: %d answers for %d documents", len(resp.Docs), end-start)
		}
		for i, d := range resp.Docs {
			st := &docState{}
			if d.Error != nil && d.Error.Type != "index_not_found_exception" {
				return fmt.Errorf("read stored document %s/%s: %s: %s", keys[start+i].target, keys[start+i].id, d.Error.Type, d.Error.Reason)
			}
			if d.Found {
				v, err := connect.ParseJSON(d.Source)
				if err != nil {
					return fmt.Errorf("read stored document %s/%s: %w", keys[start+i].target, keys[start+i].id, err)
				}
				row, _ := v.(connect.Row)
				st.found, st.version, st.row = true, d.Version, row
			}
			states[keys[start+i]] = st
		}
	}
	// replay the batch over the stored states, in order
	for i := range acts {
		a := &acts[i]
		if a.state != itemPending {
			continue
		}
		st, ok := states[docKey{a.target, a.id}]
		if !ok {
			continue
		}
		applies := a.version == 0 || !st.found || a.version >= st.version
		if a.merge {
			a.row = s.merged(st, a)
			a.merge = false
		}
		if !applies {
			continue // Elasticsearch will refuse it as stale; the stored state stays
		}
		if a.del {
			st.found, st.row = false, nil
		} else {
			st.found, st.row = true, a.row
		}
		if a.version != 0 {
			st.version = a.version
		}
	}
	return nil
}

// merged is the whole document a partial update stores.
func (s *Sink) merged(st *docState, a *action) connect.Row {
	if !st.found {
		if a.upsert || len(a.keep) > 0 {
			s.counters.partialMissing.Add(1)
		}
		return a.row
	}
	if a.upsert {
		out := st.row.Clone()
		for _, f := range a.row {
			out = out.Set(f.Name, f.Value)
		}
		return out
	}
	out := make(connect.Row, 0, len(a.row)+len(a.keep))
	out = append(out, a.row...)
	missing := false
	for _, c := range a.keep {
		if out.Index(c) >= 0 {
			continue
		}
		v, ok := st.row.Get(c)
		if !ok {
			missing = true
			continue
		}
		out = append(out, connect.Field{Name: c, Value: v})
	}
	if missing {
		s.counters.partialMissing.Add(1)
	}
	return out
}
