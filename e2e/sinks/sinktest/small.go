package sinktest

import (
	"math/rand/v2"
	"strconv"

	"github.com/sluice-cdc/sluice/connect"
)

// Small generates an endless stream of small change events for benchmarks: upserts of rows
// {id, name, qty, price, active} (about 80 bytes of JSON) over a fixed set of keys, and 5 %
// deletes, each with the next version. It holds nothing but its position, so a benchmark can
// apply millions of events in bounded memory.
type Small struct {
	rng     *rand.Rand
	keys    int
	version int64
}

// Event is one generated change.
type Event struct {
	ID      int64
	Delete  bool
	Version int64
	Row     connect.Row // nil for a delete
}

// NewSmall returns a generator over keys distinct ids.
func NewSmall(seed uint64, keys int) *Small {
	return &Small{rng: rand.New(rand.NewPCG(seed, seed+1)), keys: keys, version: 1}
}

// Next returns the next event.
func (g *Small) Next() Event {
	g.version++
	e := Event{ID: int64(g.rng.IntN(g.keys)), Version: g.version}
	if g.rng.IntN(100) < 5 {
		e.Delete = true
		return e
	}
	e.Row = connect.Row{
		{Name: "id", Value: e.ID},
		{Name: "name", Value: "customer-" + strconv.Itoa(g.rng.IntN(1_000_000))},
		{Name: "qty", Value: int64(g.rng.IntN(10_000))},
		{Name: "price", Value: float64(g.rng.IntN(1_000_000)) / 100},
		{Name: "active", Value: g.rng.IntN(2) == 0},
	}
	return e
}

// Record returns the event as the sink receives it from the log: a Debezium change event (a
// delete has its before image), with its version.
func (e Event) Record(topic string, offset int64) connect.Record {
	key := connect.Row{{Name: "id", Value: e.ID}}
	ev := connect.ChangeEvent{Op: connect.OpUpdate, After: e.Row,
		Source: connect.Row{{Name: "connector", Value: "postgresql"}, {Name: "table", Value: "bench"}}}
	if e.Delete {
		ev = connect.ChangeEvent{Op: connect.OpDelete, Before: key, Source: ev.Source}
	}
	return connect.Record{Topic: topic, Partition: 0, Offset: offset, Key: key, Value: ev.Row(), Version: e.Version}
}
