package elasticsearch

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/sinks/sinktest"
)

// testSettings keep delete versions for an hour, so out-of-order tests do not depend on the
// machine's speed (the default index.gc_deletes is 60 s; see the README).
const testSettings = `{"number_of_shards":1,"number_of_replicas":0,"index.gc_deletes":"1h"}`

func writeAll(t testing.TB, s *Sink, recs []connect.Record, seed uint64, max int) {
	t.Helper()
	ctx := testCtx(t)
	for _, b := range sinktest.Batches(seed, recs, max) {
		if err := s.Write(ctx, b); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
}

// indexName is the index the test template renders for a table's topic.
func indexName(t testing.TB, topic string) string {
	return strings.ToLower(strings.Replace(uniqueIndex(t), "${table}", topic[strings.LastIndexByte(topic, '.')+1:], 1))
}

func checkView(t testing.TB, c *esClient, w *sinktest.Workload, when string) {
	t.Helper()
	for _, tb := range sinktest.Tables {
		want := asDocs(t, w.Final[tb.Topic])
		got := c.docs(indexName(t, tb.Topic))
		if d := diffDocs(want, got); d != "" {
			t.Fatalf("%s: index of %s differs from the model:\n%s", when, tb.Topic, d)
		}
	}
}

// TestWorkload is the view's main guarantee: a random workload of inserts, updates (some of
// them partial), deletes, re-inserts and NULLs leaves each index equal to the model, exactly;
// replaying the whole log twice more changes nothing; and injecting every superseded event
// again, shuffled, changes nothing and is counted as a conflict each.
func TestWorkload(t *testing.T) {
	es := sharedES(t)
	for _, tc := range []struct {
		name  string
		shape sinktest.Shape
	}{
		{"envelope", sinktest.Envelope},
		{"rewrite", sinktest.Rewrite},
		{"tombstones", sinktest.Tombstones},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := sinktest.Generate(sinktest.Options{Seed: 42, Transactions: 1500, Shape: tc.shape, Partial: true, Truncates: true})
			s := newTestSink(t, es.URL(), map[string]string{KeyIndex: uniqueIndex(t), KeyIndexSettings: testSettings, KeyBatchSize: "97", KeyMaxInFlight: "3"})
			c := newESClient(t, es.URL())
			writeAll(t, s, w.Records, 1, 300)
			checkView(t, c, w, "after the workload")
			if w.Count() < 300 {
				t.Fatalf("workload leaves only %d rows: too few to mean much", w.Count())
			}
			st := s.Stats()
			if st.Rejected != 0 || st.Retries != 0 {
				t.Fatalf("stats after the workload: %+v", st)
			}

			for replay := 2; replay <= 3; replay++ {
				writeAll(t, s, w.Records, uint64(replay), 500)
				checkView(t, c, w, "after a replay")
			}
			if s.Stats().Conflicts == 0 {
				t.Fatalf("replays caused no version conflict: the guard is not in use (stats %+v)", s.Stats())
			}

			before := s.Stats().Conflicts
			stale := make([]connect.Record, len(w.Stale))
			for i, j := range w.Stale {
				stale[i] = w.Records[j]
			}
			rng := rand.New(rand.NewPCG(9, 9))
			rng.Shuffle(len(stale), func(i, j int) { stale[i], stale[j] = stale[j], stale[i] })
			writeAll(t, s, stale, 4, 200)
			checkView(t, c, w, "after injecting older events out of order")
			if got := s.Stats().Conflicts - before; got != int64(len(stale)) {
				t.Fatalf("injecting %d older events counted %d conflicts, want one each", len(stale), got)
			}
		})
	}
}

// TestPartialUpdate: a TOAST-style update (the column left out of the image and named in
// __sluice.unchanged) keeps the stored value; in one batch and across batches; a later full
// image replaces it; upsert keeps every field the row lacks.
func TestPartialUpdate(t *testing.T) {
	es := sharedES(t)
	c := newESClient(t, es.URL())
	key := connect.Row{{Name: "id", Value: int64(1)}}
	full := func(v int64, a int64, bio string) connect.Record {
		return connect.Record{Topic: "db.s.t", Key: key, Version: v,
			Value: connect.Row{{Name: "id", Value: int64(1)}, {Name: "a", Value: a}, {Name: "bio", Value: bio}}}
	}
	partial := func(v int64, a int64) connect.Record {
		r := connect.Record{Topic: "db.s.t", Key: key, Version: v,
			Value: connect.Row{{Name: "id", Value: int64(1)}, {Name: "a", Value: a}}}
		r.Headers = r.Headers.Set(connect.HeaderUnchanged, []byte("bio"))
		return r
	}
	doc := func(a int64, bio string) map[string]any {
		return map[string]any{"1": map[string]any{"id": float64(1), "a": float64(a), "bio": bio}}
	}
	t.Run("across batches", func(t *testing.T) {
		s := newTestSink(t, es.URL(), map[string]string{KeyIndex: uniqueIndex(t)})
		idx := indexName(t, "db.s.t")
		ctx := testCtx(t)
		mustWrite(t, s, full(10, 1, "long text"))
		mustWrite(t, s, partial(11, 2))
		if d := diffDocs(doc(2, "long text"), c.docs(idx)); d != "" {
			t.Fatal(d)
		}
		// replaying the partial update, and an older one, changes nothing
		mustWrite(t, s, partial(11, 2), partial(10, 7))
		if d := diffDocs(doc(2, "long text"), c.docs(idx)); d != "" {
			t.Fatal(d)
		}
		mustWrite(t, s, full(12, 3, "new text"))
		if d := diffDocs(doc(3, "new text"), c.docs(idx)); d != "" {
			t.Fatal(d)
		}
		_ = ctx
	})
	t.Run("in one batch", func(t *testing.T) {
		s := newTestSink(t, es.URL(), map[string]string{KeyIndex: uniqueIndex(t)})
		idx := indexName(t, "db.s.t")
		mustWrite(t, s, full(10, 1, "first"), partial(11, 2), partial(11, 3), full(9, 8, "stale"), partial(12, 4))
		if d := diffDocs(doc(4, "first"), c.docs(idx)); d != "" {
			t.Fatal(d)
		}
		if st := s.Stats(); st.Conflicts != 1 {
			t.Fatalf("conflicts = %d, want 1 (the stale full image)", st.Conflicts)
		}
	})
	t.Run("stored document missing", func(t *testing.T) {
		s := newTestSink(t, es.URL(), map[string]string{KeyIndex: uniqueIndex(t)})
		idx := indexName(t, "db.s.t")
		mustWrite(t, s, partial(11, 2))
		want := map[string]any{"1": map[string]any{"id": float64(1), "a": float64(2)}}
		if d := diffDocs(want, c.docs(idx)); d != "" {
			t.Fatal(d)
		}
		if st := s.Stats(); st.PartialMissing != 1 {
			t.Fatalf("PartialMissing = %d, want 1", st.PartialMissing)
		}
	})
	t.Run("upsert", func(t *testing.T) {
		s := newTestSink(t, es.URL(), map[string]string{KeyIndex: uniqueIndex(t), KeyWriteMethod: "upsert"})
		idx := indexName(t, "db.s.t")
		mustWrite(t, s, full(10, 1, "kept"))
		mustWrite(t, s, connect.Record{Topic: "db.s.t", Key: key, Version: 11,
			Value: connect.Row{{Name: "id", Value: int64(1)}, {Name: "c", Value: "new"}}})
		want := map[string]any{"1": map[string]any{"id": float64(1), "a": float64(1), "bio": "kept", "c": "new"}}
		if d := diffDocs(want, c.docs(idx)); d != "" {
			t.Fatal(d)
		}
	})
}

func mustWrite(t testing.TB, s *Sink, recs ...connect.Record) {
	t.Helper()
	if err := s.Write(testCtx(t), recs); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// TestMalformed: a document Elasticsearch refuses for good (a mapping conflict) is reported per
// behavior.on.malformed.documents while the rest of the batch is written.
func TestMalformed(t *testing.T) {
	es := sharedES(t)
	c := newESClient(t, es.URL())
	rec := func(id int64, n any) connect.Record {
		return connect.Record{Topic: "db.s.t", Key: connect.Row{{Name: "id", Value: id}}, Version: 5,
			Value: connect.Row{{Name: "id", Value: id}, {Name: "n", Value: n}}}
	}
	batch := []connect.Record{rec(1, int64(1)), rec(2, "not a number"), rec(3, int64(3)),
		{Topic: "db.s.t", Key: connect.Row{{Name: "id", Value: int64(4)}}, Value: "a bare string"},
		{Topic: "db.s.t", Value: connect.Row{{Name: "id", Value: int64(5)}}}}
	mappings := `{"properties":{"n":{"type":"long"}}}`
	good := map[string]any{
		"1": map[string]any{"id": float64(1), "n": float64(1)},
		"3": map[string]any{"id": float64(3), "n": float64(3)},
	}
	t.Run("dlq", func(t *testing.T) {
		s := newTestSink(t, es.URL(), map[string]string{KeyIndex: uniqueIndex(t), KeyIndexMappings: mappings})
		err := s.Write(testCtx(t), batch)
		var we *connect.WriteError
		if !errors.As(err, &we) {
			t.Fatalf("write: %v, want a *connect.WriteError", err)
		}
		var idx []int
		for _, f := range we.Failed {
			idx = append(idx, f.Index)
		}
		if len(idx) != 3 || idx[0] != 1 || idx[1] != 3 || idx[2] != 4 {
			t.Fatalf("rejected %v (%v), want records 1, 3 and 4", idx, err)
		}
		var ie *ItemError
		if !errors.As(we.Failed[0].Err, &ie) || ie.Status != 400 || ie.Type != "document_parsing_exception" {
			t.Fatalf("record 1 rejected with %v, want a 400 document_parsing_exception", we.Failed[0].Err)
		}
		if msg := we.Failed[1].Err.Error(); msg != "value is a string, not a row or a change event" {
			t.Fatalf("record 3 rejected with %q", msg)
		}
		if msg := we.Failed[2].Err.Error(); msg != "record has no key (a view needs the primary key to identify the row)" {
			t.Fatalf("record 4 rejected with %q", msg)
		}
		if d := diffDocs(good, c.docs(indexName(t, "db.s.t"))); d != "" {
			t.Fatal(d)
		}
		if st := s.Stats(); st.Rejected != 3 || st.Indexed != 2 {
			t.Fatalf("stats %+v, want 3 rejected and 2 indexed", st)
		}
	})
	t.Run("fail", func(t *testing.T) {
		s := newTestSink(t, es.URL(), map[string]string{KeyIndex: uniqueIndex(t), KeyIndexMappings: mappings, KeyMalformed: "fail"})
		err := s.Write(testCtx(t), batch[:3])
		if !connect.IsPermanent(err) || !strings.Contains(err.Error(), "document_parsing_exception") {
			t.Fatalf("write: %v, want a permanent error naming the refusal", err)
		}
	})
	t.Run("warn", func(t *testing.T) {
		s := newTestSink(t, es.URL(), map[string]string{KeyIndex: uniqueIndex(t), KeyIndexMappings: mappings, KeyMalformed: "warn"})
		if err := s.Write(testCtx(t), batch); err != nil {
			t.Fatalf("write: %v, want nil (rejections are logged and skipped)", err)
		}
		if d := diffDocs(good, c.docs(indexName(t, "db.s.t"))); d != "" {
			t.Fatal(d)
		}
	})
}

// TestNullValues: behavior.on.null.values decides what a tombstone does: delete the document
// (the default), leave it (counted as skipped), or reject the record (here to the caller, as
// behavior.on.malformed.documents=dlq says) while the rest of the batch is written.
func TestNullValues(t *testing.T) {
	es := sharedES(t)
	c := newESClient(t, es.URL())
	row := func(id, v int64) connect.Record {
		return connect.Record{Topic: "db.s.t", Key: connect.Row{{Name: "id", Value: id}}, Version: v,
			Value: connect.Row{{Name: "id", Value: id}, {Name: "v", Value: v}}}
	}
	tomb := func(id, v int64) connect.Record {
		return connect.Record{Topic: "db.s.t", Key: connect.Row{{Name: "id", Value: id}}, Version: v}
	}
	doc := func(id, v int64) any { return map[string]any{"id": float64(id), "v": float64(v)} }
	for _, tc := range []struct {
		mode    string
		want    map[string]any
		failed  []int
		skipped int64
	}{
		{"", map[string]any{"2": doc(2, 11)}, nil, 0},
		{NullDelete, map[string]any{"2": doc(2, 11)}, nil, 0},
		{NullIgnore, map[string]any{"1": doc(1, 10), "2": doc(2, 11)}, nil, 1},
		{NullFail, map[string]any{"1": doc(1, 10), "2": doc(2, 11)}, []int{0}, 0},
	} {
		t.Run("mode="+tc.mode, func(t *testing.T) {
			raw := map[string]string{KeyIndex: uniqueIndex(t)}
			if tc.mode != "" {
				raw[KeyNullValues] = tc.mode
			}
			s := newTestSink(t, es.URL(), raw)
			mustWrite(t, s, row(1, 10))
			err := s.Write(testCtx(t), []connect.Record{tomb(1, 12), row(2, 11)})
			var we *connect.WriteError
			switch {
			case tc.failed == nil && err != nil:
				t.Fatalf("write: %v", err)
			case tc.failed != nil && !errors.As(err, &we):
				t.Fatalf("write: %v, want a WriteError for record %v", err, tc.failed)
			case tc.failed != nil:
				if len(we.Failed) != 1 || we.Failed[0].Index != tc.failed[0] ||
					we.Failed[0].Err.Error() != "record has a null value (behavior.on.null.values=fail)" {
					t.Fatalf("write error %v, want record %d: record has a null value (behavior.on.null.values=fail)", err, tc.failed[0])
				}
			}
			if d := diffDocs(tc.want, c.docs(indexName(t, "db.s.t"))); d != "" {
				t.Fatal(d)
			}
			if st := s.Stats(); st.Skipped != tc.skipped {
				t.Fatalf("stats %+v, want %d skipped", st, tc.skipped)
			}
		})
	}
}
