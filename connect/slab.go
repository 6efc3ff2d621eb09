package connect

import (
	"sync"
	"unsafe"
)

// Slab builds the values of many records with a few large allocations instead of one or more
// per value: storing a string, an int64, a float64 or a Row in an interface (a Field's Value)
// normally copies it to the heap on its own, and a record's rows are each an allocation too.
// That is most of the allocation cost of decoding a record, on the source side and on the sink
// side alike.
//
// A Slab copies values into chunks and returns interfaces and rows that point into them (see
// box). The price is that one live value keeps its whole chunk alive, and chunks of different
// kinds point into each other (a row's fields chunk holds boxes in a strings chunk that the
// previous rows share, ...), so one live value of a Slab may keep every chunk the Slab ever
// made alive. Use a Slab for one bounded group of values that live about as long as each other
// (the records of a batch), then start a new one: never keep a Slab for good. A Slab
// never writes an element again once it handed it out, so the values it returned stay valid
// whatever happens to the Slab afterwards. The zero Slab is ready to use; it is not safe for
// concurrent use.
//
// With a Pool, a Slab takes its chunks from the pool and lists them until Detach, which
// starts the Slab over and returns them: the chunks of one batch, to give back to the pool
// (SlabPool.Put) once nothing reads the batch any more (Batch.Release). Until then the Slab
// never writes an element twice, as without a pool.
type Slab struct {
	// N is how many values a new chunk holds (0: 256). Strings' text and row fields are cut
	// from chunks of their own, sized from N too.
	N int
	// Pool, if set, is where new chunks come from.
	Pool *SlabPool

	strs   []string
	ints   []int64
	floats []float64
	rows   []Row
	fields []Field
	text   []byte
	render []byte // renderings (see Room)
	raws   []RawJSON
	held   *SlabChunks // the chunks taken from Pool since the last Detach
}

// SlabChunks are the chunks a Slab took from its pool.
type SlabChunks struct {
	strs   [][]string
	ints   [][]int64
	floats [][]float64
	rows   [][]Row
	fields [][]Field
	text   [][]byte
	render [][]byte
	raws   [][]RawJSON
}

// SlabPool keeps chunks given back for Slabs to take again: at most maxPooledChunks of a
// kind, none larger than the largest a Slab of its N makes (a chunk made for one large value
// goes back to the collector). The zero SlabPool is ready; it is safe for concurrent use.
type SlabPool struct {
	N int // of the Slabs that use the pool (0: 256)

	mu     sync.Mutex
	chunks SlabChunks
}

const maxPooledChunks = 256

// Detach ends the Slab's current chunks and returns those it took from its pool (nil without
// one); the Slab's next values go into new chunks.
func (s *Slab) Detach() *SlabChunks {
	held := s.held
	*s = Slab{N: s.N, Pool: s.Pool}
	return held
}

// Put gives chunks back to the pool. Nothing may read the values cut from them any more.
func (p *SlabPool) Put(c *SlabChunks) {
	if c == nil {
		return
	}
	s := Slab{N: p.N}
	n := s.size()
	p.mu.Lock()
	defer p.mu.Unlock()
	keep(&p.chunks.strs, c.strs, n)
	keep(&p.chunks.ints, c.ints, n)
	keep(&p.chunks.floats, c.floats, max(n/4, 4))
	keep(&p.chunks.rows, c.rows, n)
	keep(&p.chunks.fields, c.fields, 2*n)
	keep(&p.chunks.text, c.text, max(32*n, 4096))
	keep(&p.chunks.render, c.render, renderChunk(n))
	keep(&p.chunks.raws, c.raws, n)
}

func keep[T any](free *[][]T, chunks [][]T, limit int) {
	for _, c := range chunks {
		if len(*free) == maxPooledChunks {
			return
		}
		if cap(c) <= limit {
			*free = append(*free, c[:0])
		}
	}
}

// chunk returns an empty chunk of at least n values for s, from its pool if it has one.
func chunk[T any](s *Slab, free func(*SlabChunks) *[][]T, n int) []T {
	p := s.Pool
	if p == nil {
		return make([]T, 0, n)
	}
	if s.held == nil {
		s.held = &SlabChunks{}
	}
	var c []T
	p.mu.Lock()
	list := free(&p.chunks)
	for k := len(*list) - 1; k >= 0 && k >= len(*list)-4; k-- {
		if cap((*list)[k]) >= n {
			c = (*list)[k]
			(*list)[k] = (*list)[len(*list)-1]
			(*list)[len(*list)-1] = nil
			*list = (*list)[:len(*list)-1]
			break
		}
	}
	p.mu.Unlock()
	if c == nil {
		c = make([]T, 0, n)
	}
	h := free(s.held)
	*h = append(*h, c)
	return c
}

func strsOf(c *SlabChunks) *[][]string    { return &c.strs }
func intsOf(c *SlabChunks) *[][]int64     { return &c.ints }
func floatsOf(c *SlabChunks) *[][]float64 { return &c.floats }
func rowsOf(c *SlabChunks) *[][]Row       { return &c.rows }
func fieldsOf(c *SlabChunks) *[][]Field   { return &c.fields }
func textOf(c *SlabChunks) *[][]byte      { return &c.text }
func rawsOf(c *SlabChunks) *[][]RawJSON   { return &c.raws }
func renderOf(c *SlabChunks) *[][]byte    { return &c.render }

func (s *Slab) size() int {
	if s.N > 0 {
		return s.N
	}
	return 256
}

// String returns v boxed.
func (s *Slab) String(v string) any {
	if len(s.strs) == cap(s.strs) {
		s.strs = chunk(s, strsOf, s.size())
	}
	s.strs = append(s.strs, v)
	return box(typString, unsafe.Pointer(&s.strs[len(s.strs)-1]))
}

// Bytes returns an empty slice with room for n bytes, cut from the Slab's text chunk; its
// capacity ends there, so appending past n never writes into a neighbour.
func (s *Slab) Bytes(n int) []byte {
	if n > 1024 {
		return make([]byte, 0, n) // large ones get their own allocation
	}
	if cap(s.text)-len(s.text) < n {
		s.text = chunk(s, textOf, max(32*s.size(), 4096))
	}
	start := len(s.text)
	s.text = s.text[:start+n]
	return s.text[start : start : start+n]
}

// Text returns a string holding a copy of b, cut from the Slab's text chunk.
func (s *Slab) Text(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > 1024 {
		return string(b) // large texts get their own allocation
	}
	if cap(s.text)-len(s.text) < len(b) {
		s.text = chunk(s, textOf, max(32*s.size(), 4096))
	}
	start := len(s.text)
	s.text = append(s.text, b...)
	return unsafe.String(&s.text[start], len(b))
}

// Room returns the unused room of the Slab's chunk for renderings, with at least n bytes (n at
// most a few KiB), to append one rendering to; Cut then takes what was appended. Renderings
// have a chunk of their own, so that values made while one is appended (String, Text, ...)
// never write into it.
func (s *Slab) Room(n int) []byte {
	if cap(s.render)-len(s.render) < n {
		s.render = chunk(s, renderOf, max(renderChunk(s.size()), n))
	}
	return s.render[len(s.render):len(s.render)]
}

// renderChunk is the size of the rendering chunks of a Slab of size n: a batch of rows with their
// change event envelopes fills a few dozen (a pool keeps up to maxPooledChunks, 16 MiB at n 256).
func renderChunk(n int) int { return max(256*n, 4096) }

// Cut takes p, a rendering appended to what Room returned, out of the chunk for good, so that
// the Slab never writes it again. When the append outgrew the room, p is memory of its own and
// the chunk stays as it was.
func (s *Slab) Cut(p []byte) {
	free := s.render[len(s.render):cap(s.render)]
	if len(p) > 0 && len(free) >= len(p) && &free[0] == &p[0] {
		s.render = s.render[:len(s.render)+len(p)]
	}
}

// RawJSON returns p, a rendering that is never written again (cut from the Slab's room, or
// memory of its own), boxed as a RawJSON.
func (s *Slab) RawJSON(p []byte) any {
	if len(s.raws) == cap(s.raws) {
		s.raws = chunk(s, rawsOf, s.size())
	}
	s.raws = append(s.raws, RawJSON(p[:len(p):len(p)]))
	return box(typRawJSON, unsafe.Pointer(&s.raws[len(s.raws)-1]))
}

// Int returns n boxed.
func (s *Slab) Int(n int64) any {
	if n >= 0 && n < 256 {
		return n // the runtime boxes small integers without allocating
	}
	if len(s.ints) == cap(s.ints) {
		s.ints = chunk(s, intsOf, s.size())
	}
	s.ints = append(s.ints, n)
	return box(typInt64, unsafe.Pointer(&s.ints[len(s.ints)-1]))
}

// Float returns f boxed.
func (s *Slab) Float(f float64) any {
	if len(s.floats) == cap(s.floats) {
		s.floats = chunk(s, floatsOf, max(s.size()/4, 4))
	}
	s.floats = append(s.floats, f)
	return box(typFloat64, unsafe.Pointer(&s.floats[len(s.floats)-1]))
}

// Row returns r boxed (nil stays a Row(nil) in the interface, not a nil interface).
func (s *Slab) Row(r Row) any {
	if len(s.rows) == cap(s.rows) {
		// A pooled Slab serves batches of records of a few rows each; without a pool, the
		// values of one parsed document take few rows for their size.
		n := max(s.size()/8, 4)
		if s.Pool != nil {
			n = s.size()
		}
		s.rows = chunk(s, rowsOf, n)
	}
	s.rows = append(s.rows, r)
	return box(typRow, unsafe.Pointer(&s.rows[len(s.rows)-1]))
}

// Fields returns a Row of n zero fields, cut from the Slab's field chunk; its capacity ends at
// its length, so appending to it never writes into a neighbour.
func (s *Slab) Fields(n int) Row {
	if n > 64 {
		return make(Row, n)
	}
	if cap(s.fields)-len(s.fields) < n {
		s.fields = chunk(s, fieldsOf, max(2*s.size(), n))
	}
	start := len(s.fields)
	s.fields = s.fields[:start+n]
	r := Row(s.fields[start : start+n : start+n])
	if s.Pool != nil {
		clear(r) // a pooled chunk holds an earlier batch's fields
	}
	return r
}

// reserve makes the next string and row chunks hold exactly strs and rows values (a one-value
// parse that counted them); 0 leaves a kind as it is.
func (s *Slab) reserve(strs, rows int) {
	if strs > 0 {
		s.strs = make([]string, 0, strs)
	}
	if rows > 0 {
		s.rows = make([]Row, 0, rows)
	}
}
