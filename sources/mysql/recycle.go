package mysql

import (
	"sync"

	"github.com/sluice-cdc/sluice/connect"
)

// Reusing the memory of routed batches.
//
// A record costs several hundred bytes of slabs (its fields, boxed rows and values, its slot
// in the batch). Fresh slabs must be cleared before use, and a steady stream of them walks
// through far more memory than the caches hold, so at a million rows a second allocating them
// costs about as much as building the records. The runtime tells a source when it is done
// with a batch (connect.Batch.Release); from then on the batch's slabs may serve a later batch,
// which keeps the memory a snapshot works in to a few batches.
//
// A batch's slabs are its generation (see fieldArena and boxer): reset starts a new one, and
// the slabs it holds become the batch's, returned to the recycler by the batch's Release.
// Positions are not recycled (the runtime keeps them), nor is anything the source keeps across
// batches (a table's shared source block, the key a chunk resumes after): those are allocated
// the usual way.

// maxPooled bounds the slabs a pool keeps: about eight batches of a thousand records, enough
// for the batches between a converter and the log (the rest is dropped to the collector).
const maxPooled = 128

// pool is a bounded free list of slabs of T. It is safe for concurrent use.
type pool[T any] struct {
	mu   sync.Mutex
	free [][]T
}

// get returns an empty slab with room for at least n.
func (p *pool[T]) get(n int) []T {
	p.mu.Lock()
	var s []T
	if k := len(p.free); k > 0 {
		s = p.free[k-1]
		p.free[k-1] = nil
		p.free = p.free[:k-1]
	}
	p.mu.Unlock()
	if cap(s) >= n {
		return s[:0]
	}
	return make([]T, 0, n)
}

// put keeps slabs for later gets, up to keep (0: maxPooled), and none larger than limit: a slab made for
// one large value goes back to the collector, so that the pool stays a few MiB whatever the
// values were.
func (p *pool[T]) put(slabs [][]T, limit, keep int) {
	if keep == 0 {
		keep = maxPooled
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range slabs {
		if len(p.free) >= keep {
			return
		}
		if cap(s) <= limit {
			p.free = append(p.free, s[:0])
		}
	}
}

// maxPooledRecords bounds the record slices the recycler keeps (a larger max.batch.size gets
// fresh ones).
const maxPooledRecords = 4096

// recycler keeps the slabs of released batches for the next batches of one builder (a
// converter). The zero recycler is ready.
type recycler struct {
	fields pool[connect.Field]
	rows   pool[connect.Row]
	ints   pool[int64]
	strs   pool[string]
	bytes  pool[byte]
	raws   pool[connect.RawJSON]
	recs   pool[connect.Record]
	// keepBytes is how many byte slabs bytes keeps (0: maxPooled)
	keepBytes int
}

// generation is the slabs of one batch.
type generation struct {
	fields [][]connect.Field
	rows   [][]connect.Row
	ints   [][]int64
	strs   [][]string
	bytes  [][]byte
	raws   [][]connect.RawJSON
	recs   []connect.Record
}

// release returns g's slabs to rc. The batch must not be read any more.
func (rc *recycler) release(g *generation) {
	rc.fields.put(g.fields, maxFieldSlab, 0)
	rc.rows.put(g.rows, boxSlab, 0)
	rc.ints.put(g.ints, boxSlab, 0)
	rc.strs.put(g.strs, boxSlab, 0)
	rc.bytes.put(g.bytes, bytesSlab, rc.keepBytes)
	rc.raws.put(g.raws, boxSlab, 0)
	if g.recs != nil {
		// what stale records point to stays alive until overwritten: other pooled slabs
		// and positions, bounded by maxPooled
		rc.recs.put([][]connect.Record{g.recs}, maxPooledRecords, 0)
	}
}

// records returns an empty record slice with room for n, reused if rc holds one.
func (rc *recycler) records(n int) []connect.Record {
	if rc == nil {
		return make([]connect.Record, 0, n)
	}
	return rc.recs.get(n)
}

// batch ends the generation of fields and bx, which built recs with values pointing into the
// data slabs too, and returns the Release of their batch (nil without a recycler).
func (rc *recycler) batch(fields *fieldArena, bx *boxer, recs []connect.Record, data [][]byte) func() {
	if rc == nil {
		return nil
	}
	g := &generation{recs: recs}
	g.fields, fields.held = fields.held, nil
	bx.detach(g)
	g.bytes = append(g.bytes, data...)
	var once sync.Once
	return func() { once.Do(func() { rc.release(g) }) }
}
