package connect

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Values built from a Slab stay intact while the garbage collector runs, across chunk
// boundaries of every kind, and rows cut from it never overlap.
func TestSlabValuesSurviveGC(t *testing.T) {
	var s Slab
	s.N = 8 // small chunks: many boundaries
	var got, want []any
	for i := range 500 {
		text := fmt.Sprintf("text %d", i)
		row := s.Fields(3)
		row[0] = Field{Name: "s", Value: s.String(s.Text([]byte(text)))}
		row[1] = Field{Name: "n", Value: s.Int(int64(i) * 1000)}
		row[2] = Field{Name: "f", Value: s.Float(float64(i) / 4)}
		got = append(got, s.Row(row))
		want = append(want, Row{{Name: "s", Value: text}, {Name: "n", Value: int64(i) * 1000}, {Name: "f", Value: float64(i) / 4}})
		if i%100 == 0 {
			runtime.GC()
		}
	}
	runtime.GC()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("slab values changed (-want +got):\n%s", diff)
	}
	if r := got[0].(Row); cap(r) != len(r) {
		t.Fatalf("a row cut from the slab has capacity %d beyond its %d fields", cap(r), len(r))
	}
	if s.Int(7) != any(int64(7)) || s.Text(nil) != "" {
		t.Fatal("small integers or empty text differ")
	}
	big := make([]byte, 4000)
	if len(s.Text(big)) != 4000 || len(s.Fields(100)) != 100 {
		t.Fatal("large texts and rows are not served")
	}
}

// Bytes hands out room that no later Bytes or Text call writes, and appending past the room
// asked for moves to new memory instead of writing into a neighbour.
func TestSlabBytes(t *testing.T) {
	var s Slab
	var got [][]byte
	for i := range 3000 {
		b := append(s.Bytes(5), fmt.Sprintf("%05d", i)...)
		if i%3 == 0 {
			b = append(b, 'x') // past the room: a copy
		}
		got = append(got, b)
		_ = s.Text([]byte("neighbour"))
	}
	if b := s.Bytes(5000); cap(b) < 5000 || len(b) != 0 {
		t.Fatalf("a large request: len %d cap %d", len(b), cap(b))
	}
	for i, b := range got {
		want := fmt.Sprintf("%05d", i)
		if i%3 == 0 {
			want += "x"
		}
		if string(b) != want {
			t.Fatalf("value %d is %q, want %q", i, b, want)
		}
	}
}

// A pooled Slab: values cut after Detach are in new chunks (those of a detached batch stay as
// they were while the batch is in use), chunks given back are taken again, and the pool keeps
// only chunks of its standard sizes.
func TestSlabPool(t *testing.T) {
	var pool SlabPool
	build := func(s *Slab, batch int) Row {
		var r Row
		for i := range 600 {
			f := s.Fields(3)
			f[0] = Field{Name: "s", Value: s.String(s.Text([]byte(fmt.Sprintf("batch %d value %d", batch, i))))}
			f[1] = Field{Name: "n", Value: s.Int(int64(batch*1_000_000 + i))}
			f[2] = Field{Name: "f", Value: s.Float(float64(i) / 3)}
			r = append(r, Field{Name: "r", Value: s.Row(f)})
		}
		return r
	}
	s := Slab{Pool: &pool}
	var prev *SlabChunks
	for batch := range 20 {
		row := build(&s, batch)
		want, _ := AppendJSON(nil, row)
		chunks := s.Detach()
		if chunks == nil || len(chunks.fields) == 0 || len(chunks.text) == 0 {
			t.Fatalf("batch %d: chunks %+v: want every kind listed", batch, chunks)
		}
		// the previous batch goes back now: this one must not be in its chunks
		pool.Put(prev)
		prev = chunks
		before := pooled(&pool)
		build(&s, batch+100) // written into the chunks given back
		s.Detach()
		if batch > 0 && (before == 0 || pooled(&pool) >= before) {
			t.Fatalf("batch %d: %d chunks pooled before a build, %d after: want them taken", batch, before, pooled(&pool))
		}
		if got, _ := AppendJSON(nil, row); string(got) != string(want) {
			t.Fatalf("batch %d changed once another batch was built: %.80s..., want %.80s...", batch, got, want)
		}
	}
	// a small batch leaves room in its chunks: the next batch must still not use them
	small := func(s *Slab, batch int) Row {
		f := s.Fields(3)
		f[0] = Field{Name: "s", Value: s.String(s.Text([]byte(fmt.Sprintf("small batch %d", batch))))}
		f[1] = Field{Name: "n", Value: s.Int(int64(batch + 1_000_000))}
		f[2] = Field{Name: "f", Value: s.Float(float64(batch) / 3)}
		return Row{{Name: "r", Value: s.Row(f)}}
	}
	s = Slab{Pool: &SlabPool{}}
	small(&s, 1)
	a := s.Detach()
	b := small(&s, 2)
	wantB, _ := AppendJSON(nil, b)
	s.Detach()
	s.Pool.Put(a)
	for i := range 50 {
		small(&s, 3+i) // into a's chunks
	}
	if got, _ := AppendJSON(nil, b); string(got) != string(wantB) {
		t.Fatalf("a batch built after Detach was in the detached chunks: %s, want %s", got, wantB)
	}

	big := &SlabChunks{text: [][]byte{make([]byte, 0, 1<<20)}, fields: [][]Field{make([]Field, 0, 4096)}}
	var p2 SlabPool
	p2.Put(big)
	if len(p2.chunks.text)+len(p2.chunks.fields) != 0 {
		t.Fatal("the pool kept chunks larger than a Slab makes")
	}
	var plain Slab
	build(&plain, 0)
	if plain.Detach() != nil {
		t.Fatal("a Slab without a pool listed chunks")
	}
}

func pooled(p *SlabPool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := &p.chunks
	return len(c.strs) + len(c.ints) + len(c.floats) + len(c.rows) + len(c.fields) + len(c.text)
}

// Fields cut from a chunk given back to the pool are zero, as from a new chunk, though the
// chunk holds an earlier batch's fields.
func TestSlabPoolFieldsAreZero(t *testing.T) {
	s := Slab{Pool: &SlabPool{}}
	first := s.Fields(4)
	for i := range 100 {
		r := s.Fields(4)
		for j := range r {
			r[j] = Field{Name: "old", Value: s.Int(int64(1000 + i))}
		}
	}
	s.Pool.Put(s.Detach())
	for i := range 101 {
		r := s.Fields(4)
		if i == 0 && &r[0] != &first[0] {
			t.Fatal("the fields are not cut from the chunk given back")
		}
		for j := range r {
			if r[j].Name != "" || r[j].Value != nil {
				t.Fatalf("fields %d: field %d is %v, want a zero field", i, j, r[j])
			}
		}
	}
}

// A batch is released on another goroutine than the one building the next (the runtime's
// router and the source's Read): Put and the Slab's taking chunks share the pool safely (run
// with -race), and a batch's values hold until it is given back.
func TestSlabPoolConcurrentPut(t *testing.T) {
	pool := &SlabPool{}
	s := Slab{Pool: pool}
	type built struct {
		row    Row
		want   string
		chunks *SlabChunks
	}
	ch := make(chan built, 2)
	done := make(chan string)
	go func() {
		var bad string
		for b := range ch {
			if got, _ := AppendJSON(nil, b.row); bad == "" && string(got) != b.want {
				bad = fmt.Sprintf("a batch changed before its release: %.80s..., want %.80s...", got, b.want)
			}
			pool.Put(b.chunks)
		}
		done <- bad
	}()
	for batch := range 200 {
		var row Row
		for i := range 40 {
			f := s.Fields(2)
			f[0] = Field{Name: "s", Value: s.String(s.Text([]byte(fmt.Sprintf("batch %d value %d", batch, i))))}
			f[1] = Field{Name: "n", Value: s.Int(int64(batch*1_000_000 + i))}
			row = append(row, Field{Name: "r", Value: s.Row(f)})
		}
		want, _ := AppendJSON(nil, row)
		ch <- built{row, string(want), s.Detach()}
	}
	close(ch)
	if bad := <-done; bad != "" {
		t.Fatal(bad)
	}
}

// The chunks of the batches a source has in flight fit the pool: a PostgreSQL snapshot's
// batches of 2048 records with three rows (key, after-image, envelope; the source block is
// shared) and ten fields each, read ahead of the runtime up to five at a time and released in
// bursts. Once the pool is
// warm, a batch takes all its chunks from it and allocates only the lists of those it took.
func TestSlabPoolServesBatchesInFlight(t *testing.T) {
	var pool SlabPool
	s := Slab{Pool: &pool}
	const inFlight, records = 5, 2048
	var held []*SlabChunks
	batch := func() {
		for i := range records {
			f := s.Fields(10)
			f[0].Value = s.Row(f[1:3])
			f[3].Value = s.Row(f[4:6])
			f[6].Value = s.Row(f[7:8])
			f[8].Value = s.Int(int64(1000 + i))
			f[9].Value = s.String(s.Text([]byte("row 1000000")))
		}
		held = append(held, s.Detach())
		if len(held) == inFlight {
			for _, c := range held[:inFlight-1] {
				pool.Put(c)
			}
			held = append(held[:0], held[inFlight-1])
		}
	}
	for range 3 * inFlight {
		batch()
	}
	if n := testing.AllocsPerRun(2*inFlight, batch); n > 40 {
		t.Fatalf("%v allocations per batch of %d records, want at most 40 (the chunk lists)", n, records)
	}
}
