// Package sinktest generates change-event workloads for the view sinks' tests and benchmarks,
// with a model of the view each workload must leave behind.
//
// A workload is a log of records over two tables (one with a single-column key, one with a
// composite key whose values contain the separator and the escape character), built from
// random transactions: inserts, updates (some of them TOAST-style partial updates that leave a
// column out and name it in the __sluice.unchanged header), deletes, re-inserts of deleted keys,
// NULL values and the odd truncate event. Every record carries the version of its transaction,
// strictly increasing from one transaction to the next, as the sources produce it.
//
// The model is independent of the sinks: it renders document ids and keys by the documented
// rule (RenderID) and keeps the full rows, so a sink that loses a delete, keeps a stale image or
// drops an unchanged column fails the comparison.
package sinktest

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/connect"
)

// Shape is how change events reach the sink.
type Shape int

const (
	// Envelope: Debezium change events, each delete followed by a tombstone.
	Envelope Shape = iota
	// Rewrite: flat rows as unwrap's delete.tombstone.handling.mode=rewrite leaves them
	// (__deleted "true" on deletes, "false" otherwise), without tombstones.
	Rewrite
	// Tombstones: flat rows as unwrap's default leaves them: deletes are tombstones only.
	Tombstones
)

// Table is one source table.
type Table struct {
	Topic   string
	KeyCols []string
}

// The workload's tables.
var (
	Customers  = Table{Topic: "shop.public.customers", KeyCols: []string{"id"}}
	OrderLines = Table{Topic: "shop.public.order_lines", KeyCols: []string{"order_id", "line"}}
	Tables     = []Table{Customers, OrderLines}
)

// ToastColumn is the column that TOAST-style updates leave out.
const ToastColumn = "bio"

// Options shape a workload.
type Options struct {
	Seed uint64
	// Transactions is the number of source transactions (each 1-3 changes).
	Transactions int
	Shape        Shape
	// Partial enables TOAST-style partial updates.
	Partial bool
	// Truncates adds a few truncate events (Envelope shape only).
	Truncates bool
}

// Workload is a log of records and the state they leave.
type Workload struct {
	Records []connect.Record
	// Final is the expected view: topic → id (RenderID of the key) → the full row.
	Final map[string]map[string]connect.Row
	// Stale holds the indexes of the records whose key has a later record with a higher
	// version: written again after the workload, out of order, they must change nothing.
	// (Records of the key's last transaction share its version and are not stale: equal
	// versions only occur inside one transaction, whose changes arrive in log order.)
	Stale []int
}

type keyState struct {
	key   connect.Row
	row   connect.Row // nil: deleted
	table Table
}

// Generate builds a workload.
func Generate(o Options) *Workload {
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	w := &Workload{Final: map[string]map[string]connect.Row{}}
	for _, t := range Tables {
		w.Final[t.Topic] = map[string]connect.Row{}
	}
	states := map[string]*keyState{} // topic + "\x00" + id
	var live, dead []string
	offsets := map[string]int64{}
	indexes := map[string][]int{} // topic + "\x00" + id → its records
	version := int64(1_000_000)
	next := 0
	newKey := func(t Table) connect.Row {
		next++
		if t.Topic == Customers.Topic {
			return connect.Row{{Name: "id", Value: int64(next)}}
		}
		order := "o-" + strconv.Itoa(next/3)
		switch next % 7 {
		case 0:
			order += ":x" // the separator inside a value
		case 1:
			order += `\y` // the escape character
		case 2:
			order = "ü-" + order
		}
		return connect.Row{{Name: "order_id", Value: order}, {Name: "line", Value: int64(next % 3)}}
	}
	emit := func(st *keyState, rec connect.Record) {
		rec.Topic = st.table.Topic
		rec.Partition = 0
		rec.Offset = offsets[rec.Topic]
		offsets[rec.Topic]++
		rec.Version = version
		k := rec.Topic + "\x00" + RenderID(st.key)
		indexes[k] = append(indexes[k], len(w.Records))
		w.Records = append(w.Records, rec)
	}
	for range o.Transactions {
		version += int64(1 + rng.IntN(1000))
		n := 1 + rng.IntN(3)
		for range n {
			p := rng.IntN(100)
			switch {
			case o.Truncates && o.Shape == Envelope && p < 1:
				ev := connect.ChangeEvent{Op: connect.OpTruncate, Source: source(Customers)}
				rec := connect.Record{Topic: Customers.Topic, Offset: offsets[Customers.Topic], Version: version, Value: ev.Row()}
				offsets[Customers.Topic]++
				w.Records = append(w.Records, rec)
			case p < 40 || len(live) == 0:
				t := Tables[rng.IntN(len(Tables))]
				st := &keyState{key: newKey(t), table: t}
				st.row = randomRow(rng, st.key, nil)
				id := t.Topic + "\x00" + RenderID(st.key)
				states[id] = st
				live = append(live, id)
				emit(st, write(o.Shape, st, connect.OpCreate, nil, st.row, nil))
			case p < 75:
				id := live[rng.IntN(len(live))]
				st := states[id]
				before := st.row
				st.row = randomRow(rng, st.key, before)
				var unchanged []string
				image := st.row
				if o.Partial && rng.IntN(3) == 0 {
					st.row = st.row.Set(ToastColumn, before.Clone()[before.Index(ToastColumn)].Value)
					image = st.row.Delete(ToastColumn)
					unchanged = []string{ToastColumn}
				}
				emit(st, write(o.Shape, st, connect.OpUpdate, before, image, unchanged))
			case p < 90:
				i := rng.IntN(len(live))
				id := live[i]
				live[i] = live[len(live)-1]
				live = live[:len(live)-1]
				dead = append(dead, id)
				st := states[id]
				before := st.row
				st.row = nil
				switch o.Shape {
				case Envelope:
					ev := connect.ChangeEvent{Op: connect.OpDelete, Before: before, Source: source(st.table)}
					emit(st, connect.Record{Key: st.key, Value: ev.Row()})
					emit(st, connect.Record{Key: st.key})
				case Rewrite:
					emit(st, connect.Record{Key: st.key, Value: append(before.Clone(), connect.Field{Name: "__deleted", Value: "true"})})
				case Tombstones:
					emit(st, connect.Record{Key: st.key})
				}
			default:
				if len(dead) == 0 {
					continue
				}
				i := rng.IntN(len(dead))
				id := dead[i]
				dead[i] = dead[len(dead)-1]
				dead = dead[:len(dead)-1]
				live = append(live, id)
				st := states[id]
				st.row = randomRow(rng, st.key, nil)
				emit(st, write(o.Shape, st, connect.OpCreate, nil, st.row, nil))
			}
		}
	}
	for _, idx := range indexes {
		last := w.Records[idx[len(idx)-1]].Version
		for _, i := range idx {
			if w.Records[i].Version < last {
				w.Stale = append(w.Stale, i)
			}
		}
	}
	sort.Ints(w.Stale)
	for _, st := range states {
		if st.row != nil {
			w.Final[st.table.Topic][RenderID(st.key)] = st.row
		}
	}
	return w
}

func source(t Table) connect.Row {
	parts := strings.Split(t.Topic, ".")
	return connect.Row{{Name: "connector", Value: "postgresql"}, {Name: "name", Value: parts[0]},
		{Name: "schema", Value: parts[1]}, {Name: "table", Value: parts[2]}}
}

// write builds the record of an insert or update.
func write(shape Shape, st *keyState, op connect.Op, before, image connect.Row, unchanged []string) connect.Record {
	rec := connect.Record{Key: st.key}
	if unchanged != nil {
		rec.Headers = rec.Headers.Set(connect.HeaderUnchanged, []byte(strings.Join(unchanged, ",")))
	}
	switch shape {
	case Envelope:
		ev := connect.ChangeEvent{Op: op, Before: before, After: image, Source: source(st.table)}
		rec.Value = ev.Row()
	case Rewrite:
		rec.Value = append(image.Clone(), connect.Field{Name: "__deleted", Value: "false"})
	default:
		rec.Value = image.Clone()
	}
	return rec
}

var words = []string{"alpha", "beta", "gamma", "δέλτα", "eps:ilon", `ze\ta`, "", "with space", "日本"}

// randomRow returns a row for key: the key columns, then columns with NULLs now and then.
func randomRow(rng *rand.Rand, key, before connect.Row) connect.Row {
	row := key.Clone()
	name := any(words[rng.IntN(len(words))] + strconv.Itoa(rng.IntN(1000)))
	if rng.IntN(8) == 0 {
		name = nil
	}
	row = append(row,
		connect.Field{Name: "name", Value: name},
		connect.Field{Name: "qty", Value: int64(rng.IntN(1_000_000)) - 500_000},
	)
	var score any = float64(rng.IntN(100000)) / 64
	if rng.IntN(5) == 0 {
		score = nil
	}
	row = append(row, connect.Field{Name: "score", Value: score})
	row = append(row, connect.Field{Name: "active", Value: rng.IntN(2) == 0})
	bio := strings.Repeat(words[rng.IntN(len(words))], 1+rng.IntN(20))
	if before != nil && rng.IntN(2) == 0 {
		bio = before[before.Index(ToastColumn)].Value.(string)
	}
	row = append(row, connect.Field{Name: ToastColumn, Value: bio})
	return row
}

// RenderID is the documented id of a key: one column renders as its value, a composite key as
// its values joined by ':' with '\' and ':' escaped by '\'. Values here are strings and
// integers only.
func RenderID(key connect.Row) string {
	text := func(v any) string {
		switch x := v.(type) {
		case string:
			return x
		case int64:
			return strconv.FormatInt(x, 10)
		}
		panic(fmt.Sprintf("sinktest: key value %T", v))
	}
	if len(key) == 1 {
		return text(key[0].Value)
	}
	parts := make([]string, len(key))
	for i, f := range key {
		s := strings.ReplaceAll(text(f.Value), `\`, `\\`)
		parts[i] = strings.ReplaceAll(s, ":", `\:`)
	}
	return strings.Join(parts, ":")
}

// Count returns the number of rows in the final state.
func (w *Workload) Count() int {
	n := 0
	for _, rows := range w.Final {
		n += len(rows)
	}
	return n
}

// Batches cuts records into batches of random sizes between 1 and max, in order.
func Batches(seed uint64, recs []connect.Record, max int) [][]connect.Record {
	rng := rand.New(rand.NewPCG(seed, 7))
	var out [][]connect.Record
	for len(recs) > 0 {
		n := min(len(recs), 1+rng.IntN(max))
		out = append(out, recs[:n])
		recs = recs[n:]
	}
	return out
}
