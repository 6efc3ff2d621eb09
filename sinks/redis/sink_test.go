package redis

import (
	"bytes"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
	"github.com/sluice-cdc/sluice/e2e/sinks/sinktest"
	"github.com/sluice-cdc/sluice/sinks/internal/change"
)

// TestWorkload is the view's main guarantee: a random workload of inserts, updates (some of
// them partial), deletes, re-inserts and NULLs leaves the keyspace equal to the model, exactly;
// replaying the whole log twice more changes nothing; and injecting every superseded event
// again, shuffled, changes nothing and is counted as a conflict each. The replays and the
// injections go through new sink instances, which remember no version (one of them only a
// few): they must find the versions in Redis, as after a restart. Hashes run with either
// version storage (redis.version.storage), and the versions must be where it says.
func TestWorkload(t *testing.T) {
	for _, v := range []struct{ typ, store string }{{TypeHash, StoreField}, {TypeHash, StoreKey}, {TypeJSON, ""}} {
		typ := v.typ
		for _, tc := range []struct {
			name  string
			shape sinktest.Shape
		}{
			{"envelope", sinktest.Envelope},
			{"rewrite", sinktest.Rewrite},
			{"tombstones", sinktest.Tombstones},
		} {
			t.Run(strings.Trim(typ+"-"+v.store, "-")+"/"+tc.name, func(t *testing.T) {
				addr, db := testDB(t)
				c := client(t, addr, db)
				w := sinktest.Generate(sinktest.Options{Seed: 42, Transactions: 1500, Shape: tc.shape, Partial: true, Truncates: true})
				sink := func(cache string) *Sink {
					return newTestSink(t, addr, db, map[string]string{KeyType: typ, KeyBatchSize: "37", KeyVersionCache: cache, KeyVersionStore: or(v.store, StoreField)}, nil)
				}
				check := func(when string) {
					t.Helper()
					if d := diffKeys(expected(t, w, typ, ""), keyspace(t, c, typ, "")); d != "" {
						t.Fatalf("%s: keyspace differs from the model:\n%s", when, d)
					}
					checkVersions(t, c, typ, v.store, "")
				}
				adds := func(s *Sink, records int) {
					t.Helper()
					if st := s.Stats(); st.Written+st.Deleted+st.Conflicts+st.Skipped != int64(records) || st.Written < 0 || st.Deleted < 0 {
						t.Fatalf("stats %+v do not add up to the %d records written", st, records)
					}
				}
				s1 := sink("500000")
				writeAll(t, s1, w.Records, 1, 300)
				check("after the workload")
				if st := s1.Stats(); st.Rejected != 0 || st.Retries != 0 {
					t.Fatalf("stats after the workload: %+v", st)
				}
				adds(s1, len(w.Records))

				s2 := sink("16") // a restarted sink that remembers only a few versions
				for replay := 2; replay <= 3; replay++ {
					writeAll(t, s2, w.Records, uint64(replay), 500)
					check("after a replay")
				}
				if st := s2.Stats(); st.Conflicts == 0 || st.MarkersRead < int64(distinctKeys(t, w.Records)) {
					t.Fatalf("replays caused no version conflict or read no marker: the guard is not in use (stats %+v)", st)
				}
				adds(s2, 2*len(w.Records))

				stale := make([]connect.Record, len(w.Stale))
				for i, j := range w.Stale {
					stale[i] = w.Records[j]
				}
				rng := rand.New(rand.NewPCG(9, 9))
				s3 := sink("500000")   // a restarted sink
				for round := range 2 { // first reading the markers, then from its cache
					rng.Shuffle(len(stale), func(i, j int) { stale[i], stale[j] = stale[j], stale[i] })
					before := s3.Stats()
					writeAll(t, s3, stale, uint64(4+round), 200)
					check("after injecting older events out of order")
					st := s3.Stats()
					if got := st.Conflicts - before.Conflicts; got != int64(len(stale)) {
						t.Fatalf("round %d: injecting %d older events counted %d conflicts, want one each", round, len(stale), got)
					}
					if round == 1 && st.MarkersRead != before.MarkersRead {
						t.Fatalf("the second injection read %d markers, want none (all cached)", st.MarkersRead-before.MarkersRead)
					}
				}
				adds(s3, 2*len(stale))
			})
		}
	}
}

// TestStream: every change is appended once to its table's stream, in log order; replays and
// older events append nothing, also through a new sink instance.
func TestStream(t *testing.T) {
	addr, db := testDB(t)
	c := client(t, addr, db)
	w := sinktest.Generate(sinktest.Options{Seed: 5, Transactions: 400, Shape: sinktest.Envelope, Partial: true, Truncates: true})
	s := newTestSink(t, addr, db, map[string]string{KeyType: TypeStream}, nil)
	writeAll(t, s, w.Records, 1, 100)
	checkStreams(t, c, w, "after the workload")
	writeAll(t, s, w.Records, 2, 300)
	checkStreams(t, c, w, "after a replay")
	var stale []connect.Record
	for _, i := range w.Stale {
		stale = append(stale, w.Records[i])
	}
	writeAll(t, s, stale, 3, 50)
	checkStreams(t, c, w, "after older events")
	s2 := newTestSink(t, addr, db, map[string]string{KeyType: TypeStream}, nil)
	writeAll(t, s2, w.Records, 4, 200)
	checkStreams(t, c, w, "after a replay through a new sink")
}

// checkStreams checks that each table's stream holds every change of the workload once, in log
// order.
func checkStreams(t *testing.T, c *goredis.Client, w *sinktest.Workload, when string) {
	t.Helper()
	want := streamEntries(t, w)
	for table, entries := range want {
		msgs, err := c.XRange(testCtx(t), table, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != len(entries) {
			t.Fatalf("%s: stream %s has %d entries, want %d", when, table, len(msgs), len(entries))
		}
		checkEntries(t, msgs, entries, when, table)
	}
}

// checkEntries compares stream entries with the entries wanted, one by one.
func checkEntries(t *testing.T, msgs []goredis.XMessage, entries []map[string]any, when, table string) {
	t.Helper()
	for i, m := range msgs {
		got := map[string]any{}
		for k, v := range m.Values {
			if k == "key" || k == "value" {
				got[k] = asJSON(t, v)
			} else {
				got[k] = v
			}
		}
		if d := diffKeys(map[string]any{"e": entries[i]}, map[string]any{"e": got}); d != "" {
			t.Fatalf("%s: stream %s entry %d:\n%s", when, table, i, d)
		}
	}
}

// TestStreamMaxLen: redis.stream.maxlen trims each stream (XADD MAXLEN ~, so whole nodes of
// up to stream-node-max-entries, 100 by default, go at once): the newest entries stay, in log
// order, and the stream holds about maxlen of them.
func TestStreamMaxLen(t *testing.T) {
	const maxLen, node = 50, 100
	addr, db := testDB(t)
	c := client(t, addr, db)
	w := sinktest.Generate(sinktest.Options{Seed: 6, Transactions: 600, Shape: sinktest.Envelope})
	s := newTestSink(t, addr, db, map[string]string{KeyType: TypeStream, KeyStreamMaxLen: strconv.Itoa(maxLen)}, nil)
	writeAll(t, s, w.Records, 1, 100)
	want := streamEntries(t, w)
	for table, entries := range want {
		if len(entries) < 3*node {
			t.Fatalf("setup: only %d changes of %s, too few to trim", len(entries), table)
		}
		msgs, err := c.XRange(testCtx(t), table, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) < maxLen || len(msgs) > maxLen+node {
			t.Fatalf("stream %s holds %d of %d entries, want %d to %d", table, len(msgs), len(entries), maxLen, maxLen+node)
		}
		checkEntries(t, msgs, entries[len(entries)-len(msgs):], "after the trimmed workload", table)
	}
}

// streamEntries is what each table's stream holds after the workload w: every change but
// truncates, in log order.
func streamEntries(t *testing.T, w *sinktest.Workload) map[string][]map[string]any {
	t.Helper()
	want := map[string][]map[string]any{}
	for _, r := range w.Records {
		ev, err := connect.ParseChangeEvent(r.Value)
		if err == nil && ev.Op == connect.OpTruncate {
			continue
		}
		table := r.Topic[strings.LastIndexByte(r.Topic, '.')+1:]
		e := map[string]any{"op": "d", "key": asJSON(t, r.Key), "version": strconv.FormatInt(r.Version, 10)}
		if err == nil && ev.After != nil {
			e["op"] = ev.Op.String()
			e["value"] = asJSON(t, ev.After)
		}
		if u, ok := r.Headers.Get(connect.HeaderUnchanged); ok {
			e["unchanged"] = string(u)
		}
		want[table] = append(want[table], e)
	}
	return want
}

// TestPartialUpdate: a TOAST-style update keeps the stored value of the unchanged column, in
// hashes and in JSON rows, in one batch and across batches.
func TestPartialUpdate(t *testing.T) {
	key := connect.Row{{Name: "id", Value: int64(1)}}
	full := func(v int64, a int64, bio string) connect.Record {
		return connect.Record{Topic: "db.s.t", Key: key, Version: v,
			Value: connect.Row{{Name: "id", Value: int64(1)}, {Name: "a", Value: a}, {Name: "bio", Value: bio}, {Name: "n", Value: "x"}}}
	}
	partial := func(v int64, a int64) connect.Record {
		r := connect.Record{Topic: "db.s.t", Key: key, Version: v,
			Value: connect.Row{{Name: "id", Value: int64(1)}, {Name: "a", Value: a}, {Name: "n", Value: nil}}}
		r.Headers = r.Headers.Set(connect.HeaderUnchanged, []byte("bio"))
		return r
	}
	for _, v := range []struct{ typ, store string }{{TypeHash, StoreField}, {TypeHash, StoreKey}, {TypeJSON, ""}} {
		typ := v.typ
		t.Run(strings.Trim(typ+"-"+v.store, "-"), func(t *testing.T) {
			addr, db := testDB(t)
			c := client(t, addr, db)
			s := newTestSink(t, addr, db, map[string]string{KeyType: typ, KeyVersionStore: or(v.store, StoreField)}, nil)
			want := func(a int64, bio string) map[string]any {
				row := connect.Row{{Name: "id", Value: int64(1)}, {Name: "a", Value: a}, {Name: "n", Value: nil}, {Name: "bio", Value: bio}}
				if typ == TypeJSON {
					return map[string]any{"t:1": asJSON(t, row)}
				}
				return map[string]any{"t:1": hashFields(t, row)}
			}
			mustWrite(t, s, full(10, 1, "long text"))
			mustWrite(t, s, partial(11, 2))
			if d := diffKeys(want(2, "long text"), keyspace(t, c, typ, "")); d != "" {
				t.Fatal(d)
			}
			mustWrite(t, s, full(12, 3, "first"), partial(13, 4), partial(13, 5), full(9, 8, "stale"), partial(14, 6))
			if d := diffKeys(want(6, "first"), keyspace(t, c, typ, "")); d != "" {
				t.Fatal(d)
			}
		})
	}
}

// TestTTL: rows expire after redis.key.ttl with their version (a marker key with the row's TTL,
// or the hash's own field); a delete's marker lives redis.delete.marker.ttl.
func TestTTL(t *testing.T) {
	for _, store := range []string{StoreField, StoreKey} {
		t.Run(store, func(t *testing.T) {
			addr, db := testDB(t)
			c := client(t, addr, db)
			s := newTestSink(t, addr, db, map[string]string{KeyTTL: "100", KeyMarkerTTL: "50", KeyVersionStore: store}, nil)
			k1, k2 := connect.Row{{Name: "id", Value: int64(1)}}, connect.Row{{Name: "id", Value: int64(2)}}
			mustWrite(t, s,
				connect.Record{Topic: "db.s.t", Key: k1, Version: 3, Value: connect.Row{{Name: "id", Value: int64(1)}}},
				connect.Record{Topic: "db.s.t", Key: k2, Version: 3, Value: connect.Row{{Name: "id", Value: int64(2)}}},
				connect.Record{Topic: "db.s.t", Key: k2, Version: 4})
			ctx := testCtx(t)
			ttls := map[string]time.Duration{"t:1": 100 * time.Second, meta + "v:0:t:1": 100 * time.Second, meta + "v:0:t:2": 50 * time.Second}
			if store == StoreField {
				ttls[meta+"v:0:t:1"] = -2 * time.Nanosecond // no such key: the version is in t:1
				if v, err := c.HGet(ctx, "t:1", versionField).Result(); err != nil || !strings.HasPrefix(v, "0000000000000000003") {
					t.Fatalf("version field of t:1: %q, %v", v, err)
				}
			}
			for key, want := range ttls {
				got, err := c.TTL(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				if want < 0 && got != want || want > 0 && (got <= want-5*time.Second || got > want) {
					t.Fatalf("TTL of %s = %v, want %v", key, got, want)
				}
			}
			if n, _ := c.Exists(ctx, "t:2").Result(); n != 0 {
				t.Fatal("deleted row still exists")
			}
			// a late write of version 3 cannot bring row 2 back while the marker lives, also
			// through a sink that remembers nothing
			mustWrite(t, s, connect.Record{Topic: "db.s.t", Key: k2, Version: 3, Value: connect.Row{{Name: "id", Value: int64(2)}}})
			s2 := newTestSink(t, addr, db, map[string]string{KeyTTL: "100", KeyMarkerTTL: "50", KeyVersionStore: store}, nil)
			mustWrite(t, s2, connect.Record{Topic: "db.s.t", Key: k2, Version: 3, Value: connect.Row{{Name: "id", Value: int64(2)}}})
			if n, _ := c.Exists(ctx, "t:2").Result(); n != 0 {
				t.Fatal("an older write brought a deleted row back")
			}
		})
	}
}

// TestRejected: a record Redis refuses (the key holds another type) or that cannot become a
// row is reported in a *connect.WriteError; the rest of the batch is applied.
func TestRejected(t *testing.T) {
	for _, store := range []string{StoreField, StoreKey} {
		t.Run(store, func(t *testing.T) { testRejected(t, store) })
	}
}

func testRejected(t *testing.T, store string) {
	addr, db := testDB(t)
	c := client(t, addr, db)
	ctx := testCtx(t)
	if err := c.Set(ctx, "t:2", "a string", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s := newTestSink(t, addr, db, map[string]string{KeyVersionStore: store}, nil)
	rec := func(id int64) connect.Record {
		// partial updates: a whole row replaces whatever the key held
		r := connect.Record{Topic: "db.s.t", Key: connect.Row{{Name: "id", Value: id}}, Version: 7,
			Value: connect.Row{{Name: "id", Value: id}}}
		r.Headers = r.Headers.Set(connect.HeaderUnchanged, []byte("bio"))
		return r
	}
	err := s.Write(ctx, []connect.Record{rec(1), rec(2), {Topic: "db.s.t", Value: connect.Row{}}, rec(3)})
	var we *connect.WriteError
	if !errors.As(err, &we) || len(we.Failed) != 2 || we.Failed[0].Index != 1 || we.Failed[1].Index != 2 {
		t.Fatalf("write: %v, want records 1 and 2 rejected", err)
	}
	if msg := we.Failed[0].Err.Error(); !strings.HasPrefix(msg, "redis refused the write of t:2: WRONGTYPE") {
		t.Fatalf("record 1: %q", msg)
	}
	want := map[string]any{"t:1": map[string]string{"id": "1"}, "t:3": map[string]string{"id": "3"}}
	if v, err := c.Get(ctx, "t:2").Result(); err != nil || v != "a string" {
		t.Fatalf("t:2 = %q, %v: a refused write changed it", v, err)
	}
	if n, _ := c.Exists(ctx, meta+"v:0:t:2").Result(); n != 0 {
		t.Fatal("the refused write left a version marker")
	}
	marker := func(id string) string {
		if store == StoreField {
			v, _ := c.HGet(ctx, "t:"+id, versionField).Result()
			return v
		}
		v, _ := c.Get(ctx, meta+"v:0:t:"+id).Result()
		return v
	}
	// a row with a marker: the refused write sets it back, so the record can be written again
	// once the key is free
	mustWrite(t, s, connect.Record{Topic: "db.s.t", Key: connect.Row{{Name: "id", Value: int64(4)}}, Version: 5,
		Value: connect.Row{{Name: "id", Value: int64(4)}}})
	before := marker("4")
	c.Del(ctx, "t:4")
	c.Set(ctx, "t:4", "a string", 0)
	err = s.Write(ctx, []connect.Record{rec(4)})
	if !errors.As(err, &we) || len(we.Failed) != 1 || we.Failed[0].Index != 0 {
		t.Fatalf("write over a string: %v, want record 0 rejected", err)
	}
	if len(before) != 27 {
		t.Fatalf("marker of t:4 %q", before)
	}
	// with storage key the marker must be set back; with field it went with the hash that
	// was deleted, and nothing may be left in its place
	if after := marker("4"); store == StoreKey && after != before || store == StoreField && after != "" {
		t.Fatalf("marker of the refused write %q, want it back at %q", after, before)
	}
	if n, _ := c.Exists(ctx, meta+"v:0:t:4").Result(); store == StoreField && n != 0 {
		t.Fatal("the refused write left a marker key")
	}
	c.Del(ctx, "t:4")
	mustWrite(t, s, rec(4))
	if v, _ := c.HGetAll(ctx, "t:4").Result(); v["id"] != "4" {
		t.Fatalf("t:4 after the key was freed: %v", v)
	}
	c.Del(ctx, "t:4")
	c.Del(ctx, "t:2")
	// a column named like the version field: rejected with field storage, a column with key
	clash := connect.Record{Topic: "db.s.t", Key: connect.Row{{Name: "id", Value: int64(5)}}, Version: 9,
		Value: connect.Row{{Name: "id", Value: int64(5)}, {Name: versionField, Value: "x"}}}
	err = s.Write(ctx, []connect.Record{clash})
	if store == StoreField {
		if !errors.As(err, &we) || len(we.Failed) != 1 || we.Failed[0].Err.Error() != "column __sluice:test:version: the hash field __sluice:test:version holds the row's version (redis.version.storage=field); rename the column or set redis.meta.prefix" {
			t.Fatalf("write of a column named like the version field: %v", err)
		}
	} else {
		if err != nil {
			t.Fatalf("write of a column named like the version field with key storage: %v", err)
		}
		if v, _ := c.HGet(ctx, "t:5", versionField).Result(); v != "x" {
			t.Fatalf("column %s = %q, want x", versionField, v)
		}
		c.Del(ctx, "t:5")
	}
	got := keyspace(t, c, TypeHash, "")
	if d := diffKeys(want, got); d != "" {
		t.Fatal(d)
	}
}

// TestServerRefuses: a server that refuses writes (a read-only replica here) fails Write with
// a retriable error after max.retries, and the sink counts and logs each retry; once the server
// takes writes again, the same batch goes through.
func TestServerRefuses(t *testing.T) {
	addr, db := testDB(t)
	c := client(t, addr, db)
	ctx := testCtx(t)
	var logs syncBuffer
	s := newTestSink(t, addr, db, map[string]string{KeyMaxRetries: "2", KeyRetryBackoff: "1"}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err := c.SlaveOf(ctx, "127.0.0.1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	restored := false
	t.Cleanup(func() {
		if !restored {
			c.SlaveOf(ctx, "NO", "ONE")
		}
	})
	batch := []connect.Record{{Topic: "db.s.t", Key: connect.Row{{Name: "id", Value: int64(1)}}, Version: 1,
		Value: connect.Row{{Name: "id", Value: int64(1)}}}}
	err := s.Write(ctx, batch)
	if !connect.IsRetriable(err) || !strings.HasPrefix(err.Error(), "write to redis: still failing after 2 retries: READONLY") {
		t.Fatalf("write: %v, want a retriable error after 2 retries naming READONLY", err)
	}
	if st := s.Stats(); st.Retries != 2 {
		t.Fatalf("retries = %d, want 2", st.Retries)
	}
	if n := strings.Count(logs.String(), "redis write failed; retrying"); n != 2 {
		t.Fatalf("%d retries logged, want 2:\n%s", n, logs.String())
	}
	if err := c.SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	restored = true
	mustWrite(t, s, batch...)
	if d := diffKeys(map[string]any{"t:1": map[string]string{"id": "1"}}, keyspace(t, c, TypeHash, "")); d != "" {
		t.Fatal(d)
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

// TestHashReplace: a whole row replaces the hash: NULL columns and columns the row no longer
// has (a dropped column) disappear.
func TestHashReplace(t *testing.T) {
	for _, store := range []string{StoreField, StoreKey} {
		t.Run(store, func(t *testing.T) { testHashReplace(t, store) })
	}
}

func testHashReplace(t *testing.T, store string) {
	addr, db := testDB(t)
	c := client(t, addr, db)
	s := newTestSink(t, addr, db, map[string]string{KeyVersionStore: store}, nil)
	key := connect.Row{{Name: "id", Value: int64(1)}}
	mustWrite(t, s, connect.Record{Topic: "db.s.t", Key: key, Version: 1,
		Value: connect.Row{{Name: "id", Value: int64(1)}, {Name: "a", Value: "x"}, {Name: "b", Value: "y"}, {Name: "c", Value: "z"}}})
	mustWrite(t, s, connect.Record{Topic: "db.s.t", Key: key, Version: 2,
		Value: connect.Row{{Name: "id", Value: int64(1)}, {Name: "a", Value: nil}, {Name: "b", Value: "y2"}}})
	if d := diffKeys(map[string]any{"t:1": map[string]string{"id": "1", "b": "y2"}}, keyspace(t, c, TypeHash, "")); d != "" {
		t.Fatal(d)
	}
}

func distinctKeys(t *testing.T, recs []connect.Record) int {
	keys := map[string]bool{}
	for _, r := range recs {
		if r.Key == nil {
			continue // truncates
		}
		k, err := change.AppendKey([]byte(r.Topic+"/"), r.Key)
		if err != nil {
			t.Fatal(err)
		}
		keys[string(k)] = true
	}
	return len(keys)
}

// TestOwner: a second instance of the connector's sink takes the generation over; the first
// one's next Write fails with a permanent error that names the cause, and changes nothing (it
// would otherwise write an older version its cache allows over the newer one). A sink whose
// owner key disappeared (the keyspace was flushed) fails with a retriable error, and a new
// instance writes again.
func TestOwner(t *testing.T) {
	for _, store := range []string{StoreField, StoreKey} {
		t.Run(store, func(t *testing.T) { testOwner(t, store) })
	}
}

func testOwner(t *testing.T, store string) {
	addr, db := testDB(t)
	c := client(t, addr, db)
	ctx := testCtx(t)
	rec := func(id, v int64, name string) connect.Record {
		return connect.Record{Topic: "db.s.t", Key: connect.Row{{Name: "id", Value: id}}, Version: v,
			Value: connect.Row{{Name: "id", Value: id}, {Name: "name", Value: name}}}
	}
	row := func(id int64, name string) map[string]string {
		return map[string]string{"id": strconv.FormatInt(id, 10), "name": name}
	}
	cfg := map[string]string{KeyVersionStore: store}
	s1 := newTestSink(t, addr, db, cfg, nil)
	mustWrite(t, s1, rec(1, 1, "a"))
	s2 := newTestSink(t, addr, db, cfg, nil)
	mustWrite(t, s2, rec(1, 3, "c"))
	err := s1.Write(ctx, []connect.Record{rec(1, 2, "b"), rec(2, 2, "x")})
	if err == nil || connect.IsRetriable(err) || !strings.Contains(err.Error(), "another sink instance writes generation 0 of connector test (epoch 2 in __sluice:test:owner:0, this one's is 1): run each connector in one sluice process") {
		t.Fatalf("write of the replaced instance: %v, want a permanent error naming the other instance", err)
	}
	if d := diffKeys(map[string]any{"t:1": row(1, "c")}, keyspace(t, c, TypeHash, "")); d != "" {
		t.Fatalf("the replaced instance changed the keyspace:\n%s", d)
	}
	mustWrite(t, s2, rec(2, 4, "d"))
	if err := c.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	err = s2.Write(ctx, []connect.Record{rec(3, 5, "e")})
	if err == nil || !connect.IsRetriable(err) || !strings.Contains(err.Error(), "the key __sluice:test:owner:0 is gone") {
		t.Fatalf("write after a flush: %v, want a retriable error naming the owner key", err)
	}
	s3 := newTestSink(t, addr, db, cfg, nil)
	mustWrite(t, s3, rec(3, 5, "e"))
	if d := diffKeys(map[string]any{"t:3": row(3, "e")}, keyspace(t, c, TypeHash, "")); d != "" {
		t.Fatal(d)
	}
}

// TestWaitReplicas: with redis.wait.replicas a Write returns once the replica has every row of
// it (it is read from the replica right after); with the replica gone, Write fails with a
// retriable error naming WAIT after max.retries.
func TestWaitReplicas(t *testing.T) {
	ctx := testCtx(t)
	primary, err := harness.StartRedis(ctx, harness.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { primary.Close() })
	replica, err := harness.StartRedis(ctx, harness.RedisOptions{ExtraArgs: []string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port)}})
	if err != nil {
		t.Fatal(err)
	}
	replicaClosed := false
	t.Cleanup(func() {
		if !replicaClosed {
			replica.Close()
		}
	})
	pc, rc := client(t, primary.Addr(), 0), client(t, replica.Addr(), 0)
	for deadline := time.Now().Add(30 * time.Second); ; {
		info, _ := pc.Info(ctx, "replication").Result()
		if strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not come online:\n%s", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// 2s: a replica acknowledges in milliseconds, but a loaded machine (the CI runs two
	// packages at once) has been seen to take more than 300ms twice in a row.
	s := newTestSink(t, primary.Addr(), 0, map[string]string{KeyWaitReplicas: "1", KeyWaitTimeout: "2000",
		KeyMaxRetries: "1", KeyRetryBackoff: "1", KeyBatchSize: "3"}, nil)
	var recs []connect.Record
	for id := int64(1); id <= 10; id++ {
		recs = append(recs, connect.Record{Topic: "db.s.t", Key: connect.Row{{Name: "id", Value: id}}, Version: id,
			Value: connect.Row{{Name: "id", Value: id}, {Name: "v", Value: "x"}}})
	}
	mustWrite(t, s, recs...)
	for id := 1; id <= 10; id++ {
		if v, err := rc.HGet(ctx, "t:"+strconv.Itoa(id), "v").Result(); err != nil || v != "x" {
			t.Fatalf("the replica lacks t:%d right after Write returned: %q, %v", id, v, err)
		}
	}
	replicaClosed = true
	if err := replica.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		recs[i].Version += 100
	}
	err = s.Write(ctx, recs)
	if err == nil || !connect.IsRetriable(err) || !strings.Contains(err.Error(), "still failing after 1 retries: wait: 0 of 1 replicas acknowledged the batch within 2s") {
		t.Fatalf("write without the replica: %v, want a retriable error naming WAIT", err)
	}
	if st := s.Stats(); st.Retries != 1 {
		t.Fatalf("retries = %d, want 1", st.Retries)
	}
}

// TestStorageSwitch: a view written with redis.version.storage=key is switched to field in
// place. The field sink finds the versions in the marker keys (older events injected out of
// order change nothing), and each row it writes again moves its version into the hash and
// deletes its marker key.
func TestStorageSwitch(t *testing.T) {
	addr, db := testDB(t)
	c := client(t, addr, db)
	w := sinktest.Generate(sinktest.Options{Seed: 7, Transactions: 800, Shape: sinktest.Envelope, Partial: true})
	sink := func(store string) *Sink {
		return newTestSink(t, addr, db, map[string]string{KeyVersionStore: store, KeyBatchSize: "41"}, nil)
	}
	check := func(when, store string) {
		t.Helper()
		if d := diffKeys(expected(t, w, TypeHash, ""), keyspace(t, c, TypeHash, "")); d != "" {
			t.Fatalf("%s: keyspace differs from the model:\n%s", when, d)
		}
		checkVersions(t, c, TypeHash, store, "")
	}
	writeAll(t, sink(StoreKey), w.Records, 1, 300)
	check("after the workload with marker keys", StoreKey)

	s := sink(StoreField)
	stale := make([]connect.Record, len(w.Stale))
	for i, j := range w.Stale {
		stale[i] = w.Records[j]
	}
	rand.New(rand.NewPCG(3, 3)).Shuffle(len(stale), func(i, j int) { stale[i], stale[j] = stale[j], stale[i] })
	writeAll(t, s, stale, 2, 100)
	check("after older events through the field sink", StoreKey)
	if st := s.Stats(); st.Conflicts != int64(len(stale)) {
		t.Fatalf("%d older events, %d conflicts", len(stale), st.Conflicts)
	}
	writeAll(t, s, w.Records, 3, 300) // each row's last change is written again
	check("after a replay through the field sink", StoreField)
}

// A partial update of a row that was deleted writes the row live again: no version marker of
// the row may still say "deleted" (a version ending in '-') without expiring, in the row's
// marker key or its version field, and a later full write replaces the row.
func TestPartialUpdateAfterDelete(t *testing.T) {
	key := connect.Row{{Name: "id", Value: int64(1)}}
	for _, store := range []string{StoreField, StoreKey} {
		t.Run(store, func(t *testing.T) {
			addr, db := testDB(t)
			c := client(t, addr, db)
			ctx := testCtx(t)
			s := newTestSink(t, addr, db, map[string]string{KeyVersionStore: store}, nil)
			partial := connect.Record{Topic: "db.s.t", Key: key, Version: 5,
				Value: connect.Row{{Name: "id", Value: int64(1)}, {Name: "a", Value: int64(2)}}}
			partial.Headers = partial.Headers.Set(connect.HeaderUnchanged, []byte("bio"))
			mustWrite(t, s,
				connect.Record{Topic: "db.s.t", Key: key, Version: 1, Value: connect.Row{{Name: "id", Value: int64(1)}, {Name: "a", Value: int64(1)}, {Name: "bio", Value: "text"}}},
				connect.Record{Topic: "db.s.t", Key: key, Version: 3})
			mustWrite(t, s, partial)
			marker := meta + "v:0:t:1"
			if v, err := c.Get(ctx, marker).Result(); err == nil && strings.HasSuffix(v, "-") {
				if ttl, _ := c.TTL(ctx, marker).Result(); ttl < 0 {
					t.Fatalf("after a partial update of a deleted row its marker %q says deleted and never expires", v)
				}
			}
			if v, err := c.HGet(ctx, "t:1", versionField).Result(); err == nil && strings.HasSuffix(v, "-") {
				t.Fatalf("after a partial update of a deleted row its version field says deleted: %q", v)
			}
			mustWrite(t, s, connect.Record{Topic: "db.s.t", Key: key, Version: 7, Value: connect.Row{{Name: "id", Value: int64(1)}, {Name: "a", Value: int64(7)}}})
			want := map[string]any{"t:1": hashFields(t, connect.Row{{Name: "id", Value: int64(1)}, {Name: "a", Value: int64(7)}})}
			if d := diffKeys(want, keyspace(t, c, TypeHash, "")); d != "" {
				t.Fatal(d)
			}
		})
	}
}
