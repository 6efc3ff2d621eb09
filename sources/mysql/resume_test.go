package mysql

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
)

// appendTxs are the transactions TestResumeFromEveryPosition writes to an append-only table:
// each is a list of statements, each statement inserting that many rows with the next ids.
// Sizes: an autocommitted single row, seven one-row statements, one row, a 1,200-row insert
// (several rows events, many batches of 97), seven rows in one statement, three 150-row
// statements (one transaction over several batches), and a last single row.
var appendTxs = [][]int{{1}, {1, 1, 1, 1, 1, 1, 1}, {1}, {1200}, {7}, {150, 150, 150}, {1}}

// TestResumeFromEveryPosition: unique inserts in transactions of varied size are read once
// (the reference), then a new source is opened at every position the reference emitted, the
// batches' positions and the records' own (mid-transaction, at the first and last rows of each
// transaction and every 37th record). What each resumed source emits must be exactly the
// reference's records after that position, with the same positions: no insert missing, none
// emitted twice (before the log's drop rule: the source itself must not replay), in order.
func TestResumeFromEveryPosition(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	exec(t, m, "CREATE TABLE "+quoteName(db)+".app (id INT PRIMARY KEY, tx INT NOT NULL, s VARCHAR(60) NOT NULL)")
	cfg := baseConfig(m, db, map[string]string{KeySnapshotMode: SnapshotNoData, KeyMaxBatchSize: "97", KeyHeartbeatInterval: "100"})
	topic := "test." + db + ".app"
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// the reference: a position before the inserts, then every batch after them
	src := newSource(t, cfg, nil)
	if err := src.Open(ctx, connect.Position{}); err != nil {
		t.Fatal(err)
	}
	var ref testLog
	drain(t, ctx, m, src, &ref)
	if len(ref.recs) != 0 {
		t.Fatalf("%d records before the inserts", len(ref.recs))
	}
	type resume struct {
		pos  connect.Position
		from int // index in ref.recs of the first record after pos
		what string
	}
	points := []resume{{ref.committed, 0, "before the inserts"}}
	c := appConn(t, m, db)
	id := 0
	for tx, stmts := range appendTxs {
		var qs []string
		if len(stmts) > 1 || stmts[0] > 1 {
			qs = append(qs, "BEGIN")
		}
		for _, n := range stmts {
			var vals []string
			for range n {
				id++
				vals = append(vals, fmt.Sprintf("(%d, %d, 'row %d of transaction %d')", id, tx, id, tx))
			}
			qs = append(qs, "INSERT INTO app VALUES "+strings.Join(vals, ","))
		}
		if qs[0] == "BEGIN" {
			qs = append(qs, "COMMIT")
		}
		for _, q := range qs {
			if _, err := c.Execute(q); err != nil {
				t.Fatalf("%.60s: %v", q, err)
			}
		}
	}
	total := id
	for {
		b, err := src.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Records) > 97 {
			t.Fatalf("a batch of %d records (max.batch.size 97)", len(b.Records))
		}
		ref.add(b)
		if !b.Position.IsZero() {
			points = append(points, resume{b.Position, len(ref.recs), fmt.Sprintf("batch position after %d records", len(ref.recs))})
		}
		if len(ref.recs) >= total && len(b.Records) == 0 {
			break
		}
	}
	drain(t, ctx, m, src, &ref)
	src.Close(ctx)
	ids, txs := appendIDs(t, ref.recs, topic)
	if err := exactIDs(ids, 1, total); err != "" {
		t.Fatalf("reference run: %s", err)
	}
	midTx := 0
	for i, r := range ref.recs {
		first := i == 0 || txs[i-1] != txs[i]
		last := i == len(ref.recs)-1 || txs[i+1] != txs[i]
		second := i > 0 && txs[i-1] == txs[i] && (i < 2 || txs[i-2] != txs[i])
		penult := i+2 < len(ref.recs) && txs[i+1] == txs[i] && txs[i+2] != txs[i] || i+2 == len(ref.recs) && txs[i+1] == txs[i]
		if first || last || second || penult || i%37 == 0 {
			points = append(points, resume{r.Position, i + 1, fmt.Sprintf("record %d (id %d, transaction %d)", i, ids[i], txs[i])})
		}
		st, err := parseState(r.Position.State)
		if err != nil {
			t.Fatal(err)
		}
		if !last && st.Row == 0 {
			t.Fatalf("record %d (id %d) inside transaction %d has no row count in its position %s", i, ids[i], txs[i], r.Position.State)
		}
	}
	for _, p := range points {
		if st, _ := parseState(p.pos.State); st != nil && st.Row > 0 {
			midTx++
		}
	}
	if midTx < 20 {
		t.Fatalf("only %d of %d resume positions are inside a transaction", midTx, len(points))
	}

	start := time.Now()
	for _, p := range points {
		src := newSource(t, cfg, nil)
		if err := src.Open(ctx, p.pos); err != nil {
			t.Fatalf("open at %s: %v", p.what, err)
		}
		var got testLog // no floor: whatever the source emits is kept
		got.committed = p.pos
		drain(t, ctx, m, src, &got)
		src.Close(ctx)
		want := ref.recs[p.from:]
		gotIDs, _ := appendIDs(t, got.recs, topic)
		if err := exactIDs(gotIDs, int64(p.from+1), total); err != "" {
			t.Fatalf("resumed at %s (%s): %s", p.what, p.pos.State, err)
		}
		for i := range want {
			if string(got.recs[i].Position.Order) != string(want[i].Position.Order) || string(got.recs[i].Position.State) != string(want[i].Position.State) {
				t.Fatalf("resumed at %s: record %d (id %d) has position %s, the first run gave it %s", p.what, i, gotIDs[i], got.recs[i].Position.State, want[i].Position.State)
			}
		}
	}
	t.Logf("%d inserts in %d transactions, %d resume positions (%d inside a transaction) checked in %v", total, len(appendTxs), len(points), midTx, time.Since(start).Round(time.Millisecond))
}

// appendIDs returns the id and tx columns of the records of topic, failing on any record that
// is not an insert of it.
func appendIDs(t *testing.T, recs []connect.Record, topic string) (ids, txs []int64) {
	t.Helper()
	for _, r := range recs {
		if r.Topic != topic || r.Value == nil {
			t.Fatalf("unexpected record of %s (value %v)", r.Topic, r.Value)
		}
		ev := event(t, r)
		if ev.Op != connect.OpCreate {
			t.Fatalf("unexpected %s event in %s", ev.Op, topic)
		}
		id, _ := ev.After.Get("id")
		tx, _ := ev.After.Get("tx")
		ids = append(ids, toInt(t, id))
		txs = append(txs, toInt(t, tx))
	}
	return ids, txs
}

func toInt(t *testing.T, v any) int64 {
	t.Helper()
	switch v := v.(type) {
	case int64:
		return v
	case int32:
		return int64(v)
	case int:
		return int64(v)
	}
	t.Fatalf("value %v (%T) is not an integer", v, v)
	return 0
}

// exactIDs describes how ids differs from from, from+1, ..., to ("" when it does not).
func exactIDs(ids []int64, from int64, to int) string {
	want := from
	for i, id := range ids {
		if id != want {
			if id > want {
				return fmt.Sprintf("record %d is id %d: ids %d..%d are missing", i, id, want, id-1)
			}
			return fmt.Sprintf("record %d is id %d again or out of order (want id %d)", i, id, want)
		}
		want++
	}
	if want != int64(to)+1 {
		return fmt.Sprintf("%d records end at id %d: ids %d..%d are missing", len(ids), want-1, want, to)
	}
	return ""
}
