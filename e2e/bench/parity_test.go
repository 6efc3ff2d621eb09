package main

// Tests of checkParity over an in-memory table and view: nothing here starts a server.

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// memTable is a source table held in memory, read the way mySource and pgSource read one: ids
// above after, in id order, at most limit.
func memTable(rows []row) sourceRows {
	return func(ctx context.Context, after int64, limit int) ([]row, error) {
		i := sort.Search(len(rows), func(i int) bool { return rows[i].ID > after })
		end := min(i+limit, len(rows))
		return append([]row(nil), rows[i:end]...), nil
	}
}

// memView is a view held in memory: the fields of each id's document, as Redis returns them.
type memView struct {
	docs     map[int64]map[string]any
	fetchErr error
}

func (v *memView) name() string { return "memory" }

func (v *memView) fetch(ctx context.Context, ids []int64) ([]map[string]any, error) {
	if v.fetchErr != nil {
		return nil, v.fetchErr
	}
	out := make([]map[string]any, len(ids))
	for i, id := range ids {
		out[i] = v.docs[id]
	}
	return out, nil
}

func (v *memView) count(ctx context.Context) (int64, error) { return int64(len(v.docs)), nil }

func fieldsOf(r row) map[string]any {
	return map[string]any{"id": strconv.FormatInt(r.ID, 10), "v": strconv.FormatInt(r.V, 10), "s": r.S, "ts": strconv.FormatInt(r.TS, 10)}
}

// parityCase builds a table of n rows (more than two of checkParity's 5,000-row chunks) and a
// view equal to it.
func parityCase(n int) ([]row, *memView) {
	rows := make([]row, n)
	view := &memView{docs: map[int64]map[string]any{}}
	for i := range rows {
		rows[i] = row{ID: int64(i + 1), V: int64(i % 100), S: "row " + strconv.Itoa(i+1), TS: 1_796_013_721_000_000 + int64(i)}
		view.docs[rows[i].ID] = fieldsOf(rows[i])
	}
	return rows, view
}

func TestCheckParity(t *testing.T) {
	ctx := context.Background()
	const n = 12_001
	for _, c := range []struct {
		name    string
		change  func(rows []row, v *memView) []row
		diffs   int64
		example string // the start of one of the examples
		err     string
	}{
		{name: "equal view", change: func(rows []row, v *memView) []row { return rows }},
		{
			name: "a value differs in the last chunk",
			change: func(rows []row, v *memView) []row {
				v.docs[12_000]["v"] = "101"
				return rows
			},
			diffs: 1, example: "id 12000: view {ID:12000 V:101",
		},
		{
			name: "a row missing from the view",
			change: func(rows []row, v *memView) []row {
				delete(v.docs, 7_000)
				return rows
			},
			// missing from the view, and the view holds one row fewer than the table
			diffs: 2, example: "id 7000: missing from the view",
		},
		{
			name: "an extra row in the view",
			change: func(rows []row, v *memView) []row {
				v.docs[n+5] = fieldsOf(row{ID: n + 5, S: "deleted from the table"})
				return rows
			},
			diffs: 1, example: "the view holds 12002 rows, the table 12001",
		},
		{
			name: "a row deleted from the table but kept in the view",
			change: func(rows []row, v *memView) []row {
				return append(rows[:4_999:4_999], rows[5_000:]...)
			},
			diffs: 1, example: "the view holds 12001 rows, the table 12000",
		},
		{
			name: "a document under another row's key",
			change: func(rows []row, v *memView) []row {
				v.docs[3] = fieldsOf(rows[3])
				return rows
			},
			diffs: 1, example: "id 3: view {ID:4",
		},
		{
			name: "the view cannot be read",
			change: func(rows []row, v *memView) []row {
				v.fetchErr = errors.New("connection refused")
				return rows
			},
			err: "read view: connection refused",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			rows, view := parityCase(n)
			rows = c.change(rows, view)
			b := newBench(options{})
			p := b.checkParity(ctx, "W4", "mariadb w4.t", memTable(rows), view)
			if len(b.rep.Parity) != 1 || b.rep.Parity[0].Diffs != p.Diffs || b.rep.Parity[0].Err != p.Err {
				t.Fatalf("report holds %+v, want the one result %+v", b.rep.Parity, p)
			}
			if c.err != "" {
				if p.Err != c.err || p.ok() || !b.rep.parityFailed() || !b.rep.failed() {
					t.Fatalf("parity %+v (ok %v, run failed %v), want error %q and a failed run", p, p.ok(), b.rep.failed(), c.err)
				}
				return
			}
			if p.Err != "" {
				t.Fatalf("parity error %q", p.Err)
			}
			if p.Rows != int64(len(rows)) {
				t.Errorf("compared %d rows, want all %d of the table", p.Rows, len(rows))
			}
			if p.Diffs != c.diffs {
				t.Fatalf("%d differences %q, want %d", p.Diffs, p.Examples, c.diffs)
			}
			if c.diffs == 0 {
				if !p.ok() || b.rep.parityFailed() || b.rep.failed() {
					t.Fatalf("an equal view failed the run: %+v", p)
				}
				return
			}
			if p.ok() || !b.rep.parityFailed() || !b.rep.failed() {
				t.Fatalf("a differing view passed: ok %v, parity failed %v, run failed %v", p.ok(), b.rep.parityFailed(), b.rep.failed())
			}
			found := false
			for _, e := range p.Examples {
				found = found || strings.HasPrefix(e, c.example)
			}
			if !found {
				t.Fatalf("examples %q, want one starting with %q", p.Examples, c.example)
			}
		})
	}
}

func TestReportFailed(t *testing.T) {
	r := &report{Parity: []parity{{Rows: 10}, {Rows: 10}}}
	if r.failed() {
		t.Fatal("a run with equal views and no errors failed")
	}
	r.Parity = append(r.Parity, parity{Rows: 10, Diffs: 1})
	if !r.failed() {
		t.Fatal("a run with a differing view did not fail")
	}
	r = &report{Parity: []parity{{Err: "count view: timeout"}}}
	if !r.failed() {
		t.Fatal("a run whose view could not be read did not fail")
	}
	r = &report{Errors: []string{"w1: sluice exited"}}
	if !r.failed() {
		t.Fatal("a run with a workload error did not fail")
	}
}
