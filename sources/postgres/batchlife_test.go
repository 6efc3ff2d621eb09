package postgres

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/sluice-cdc/sluice/connect"
)

// renderRecord is everything of a record the runtime encodes, as bytes.
func renderRecord(t *testing.T, r *connect.Record) []byte {
	t.Helper()
	b := fmt.Appendf(nil, "%s|%d|%d|%x|%s|", r.Topic, r.Version, r.Timestamp.UnixNano(), r.Position.Order, r.Position.State)
	var err error
	if b, err = connect.AppendJSON(b, r.Key); err != nil {
		t.Fatal(err)
	}
	b = append(b, '|')
	if b, err = connect.AppendJSON(b, r.Value); err != nil {
		t.Fatal(err)
	}
	for _, h := range r.Headers {
		b = fmt.Appendf(b, "|%s=%s", h.Key, h.Value)
	}
	return b
}

// A batch stays as Read returned it while later Reads run (connect.Source.Read): the runtime
// encodes a batch while the next is read, so no later Read may write into the memory of an
// earlier batch's records, through the snapshot and the stream alike.
func TestBatchesStayIntactAfterLaterReads(t *testing.T) {
	pg := sharedPG(t)
	db := newDB(t, pg)
	db.exec(t, "CREATE TABLE t (id int PRIMARY KEY, v bigint NOT NULL, note text, at timestamptz NOT NULL DEFAULT now())",
		"INSERT INTO t (id, v, note, at) SELECT g, g * 100000, 'seed ' || g, now() FROM generate_series(1, 3000) g")
	src := openWithStore(t, db.config(map[string]string{KeySnapshotMode: SnapshotInitial, KeyMaxBatchSize: "256"}), connect.Position{}, &memStore{})
	type kept struct {
		rec  *connect.Record
		text []byte
	}
	var all []kept
	updates := 0
	ctx := testCtx(t)
	for len(all) < 3000+2*1000 {
		b, err := src.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range b.Records {
			all = append(all, kept{&b.Records[i], renderRecord(t, &b.Records[i])})
		}
		if len(all) >= 3000 && updates < 20 {
			// changes of other rows and values arrive while earlier batches are still held
			db.exec(t, fmt.Sprintf("UPDATE t SET v = v + 7, note = 'update %d' WHERE id %% 20 = %d AND id <= 2000", updates, updates))
			updates++
		}
	}
	for i, k := range all {
		if now := renderRecord(t, k.rec); !bytes.Equal(now, k.text) {
			t.Fatalf("record %d of %d changed after later Reads:\nwas %s\nnow %s", i, len(all), k.text, now)
		}
	}
	t.Logf("%d records checked after %d updates", len(all), updates)
}
