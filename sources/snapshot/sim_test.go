package snapshot

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"
)

// A simulated database and source drive the engine through thousands of steps: a writer
// commits inserts, updates, deletes and key changes whose commits become visible (MVCC) and
// reach the stream in either order and with delays, the stream lags behind, acknowledgements
// come late, and the source is killed and restarted from the last acknowledged position. At
// the end the table derived from the emitted records (folded in log order, and through a
// version guard like the sinks') must equal the table.

type simVersion struct {
	mark    Mark
	visAt   int
	val     int
	deleted bool
}

type simChange struct {
	op  byte // c, u, d
	key int
	val int
}

type simTx struct {
	xid            uint64
	mark           Mark
	visAt, flushAt int
	changes        []simChange
}

type simDB struct {
	rng      *rand.Rand
	tick     int
	nextMark Mark
	nextXid  uint64
	hist     map[int][]simVersion
	txs      []*simTx
	cur      map[int]int
	keySpace int
}

func newSimDB(rng *rand.Rand, rows, keySpace int) *simDB {
	db := &simDB{rng: rng, nextMark: 100, nextXid: 1000, hist: map[int][]simVersion{}, cur: map[int]int{}, keySpace: keySpace}
	// the initial rows, committed and visible long ago (not in the stream: the stream starts after them)
	for k := 0; k < rows; k++ {
		key := rng.IntN(keySpace)
		if _, ok := db.cur[key]; ok {
			continue
		}
		db.cur[key] = k
		db.hist[key] = []simVersion{{mark: 1, visAt: -1, val: k}}
	}
	return db
}

// write commits one transaction of one to three changes.
func (db *simDB) write() {
	tx := &simTx{xid: db.nextXid, mark: db.nextMark}
	db.nextXid++
	db.nextMark += 10
	tx.visAt = db.tick + db.rng.IntN(8)
	tx.flushAt = db.tick + db.rng.IntN(4)
	n := 1 + db.rng.IntN(3)
	for range n {
		key := db.rng.IntN(db.keySpace)
		val := db.rng.IntN(1 << 20)
		_, exists := db.cur[key]
		switch r := db.rng.IntN(10); {
		case !exists:
			tx.changes = append(tx.changes, simChange{'c', key, val})
			db.cur[key] = val
		case r < 5:
			tx.changes = append(tx.changes, simChange{'u', key, val})
			db.cur[key] = val
		case r < 7:
			tx.changes = append(tx.changes, simChange{'d', key, 0})
			delete(db.cur, key)
		default:
			// a key change: delete of the old key, create of a new one
			nk := db.rng.IntN(db.keySpace)
			if _, taken := db.cur[nk]; taken {
				continue
			}
			tx.changes = append(tx.changes, simChange{'d', key, 0}, simChange{'c', nk, val})
			delete(db.cur, key)
			db.cur[nk] = val
		}
	}
	// a row's later version becomes visible after its earlier one (the row lock)
	for _, c := range tx.changes {
		if h := db.hist[c.key]; len(h) > 0 && h[len(h)-1].visAt >= tx.visAt {
			tx.visAt = h[len(h)-1].visAt + 1
		}
	}
	for _, c := range tx.changes {
		db.hist[c.key] = append(db.hist[c.key], simVersion{mark: tx.mark, visAt: tx.visAt, val: c.val, deleted: c.op == 'd'})
	}
	db.txs = append(db.txs, tx)
}

// readAt returns the value of key in an MVCC snapshot taken at tick s.
func (db *simDB) readAt(key, s int) (int, bool) {
	h := db.hist[key]
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].visAt <= s {
			return h[i].val, !h[i].deleted
		}
	}
	return 0, false
}

func (db *simDB) visible(xid uint64, s int) bool {
	for _, tx := range db.txs {
		if tx.xid == xid {
			return tx.visAt <= s
		}
	}
	return xid < 1000 // the initial rows
}

// memStore is a connect.Store in memory.
type memStore struct {
	mu      sync.Mutex
	entries [][2][]byte
}

func (s *memStore) Append(_ context.Context, key, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries = append(s.entries, [2][]byte{append([]byte(nil), key...), append([]byte(nil), value...)})
	return nil
}

func (s *memStore) Scan(_ context.Context, fn func(key, value []byte) error) error {
	s.mu.Lock()
	entries := append([][2][]byte(nil), s.entries...)
	s.mu.Unlock()
	for _, e := range entries {
		if err := fn(e[0], e[1]); err != nil {
			return err
		}
	}
	return nil
}

// simPos is the simulated source's position state.
type simPos struct {
	P     int             `json:"p"`    // next transaction to stream
	Base  string          `json:"base"` // hex of the stream Order
	Incr  json.RawMessage `json:"incremental,omitempty"`
	Chunk bool            `json:"-"`
}

type simRecord struct {
	topic   string
	key     int
	value   *int // nil: delete
	version Mark
	op      byte
	order   []byte
}

type simBatch struct {
	recs  []simRecord
	order []byte
	state []byte
	chunk bool // the batch ends a chunk emission
}

// simSource is a source over simDB that drives the engine like the real ones.
type simSource struct {
	t      *testing.T
	db     *simDB
	e      *Engine
	p      int
	base   []byte
	cfg    simConfig
	filter func(key int) bool
	rows   map[*Window][]int // keys read by open windows, with their values
	vals   map[*Window][]int
}

type simConfig struct {
	chunk, parallel int
	blocking        bool
	filter          bool
}

func streamOrder(mark Mark, idx uint32) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(mark))
	return binary.BigEndian.AppendUint32(b, idx)
}

func (s *simSource) frontier() Mark {
	if s.p < len(s.db.txs) {
		return s.db.txs[s.p].mark
	}
	return s.db.nextMark
}

func (s *simSource) position(order []byte, chunk bool) simBatch {
	st, _ := json.Marshal(simPos{P: s.p, Base: fmt.Sprintf("%x", s.base), Incr: s.e.State()})
	return simBatch{order: order, state: st, chunk: chunk}
}

// step is one Read: engine work if any, else one streamed transaction (if one is flushed).
func (s *simSource) step() (simBatch, bool) {
	db := s.db
	if !s.e.Idle() {
		step := s.e.Begin(s.base, s.frontier())
		switch step.Kind {
		case StepNotify:
			if len(step.Records) == 0 {
				return s.position(s.base, false), true
			}
			b := s.position(step.Records[len(step.Records)-1].Position.Order, false)
			for _, r := range step.Records {
				b.recs = append(b.recs, simRecord{topic: r.Topic, order: r.Position.Order})
			}
			return b, true
		case StepOpen:
			for _, task := range step.Tasks {
				s.open(task)
			}
			return simBatch{}, false
		case StepEmit:
			return s.emit(step.Window), true
		case StepWait:
			if step.Hold {
				return simBatch{}, false
			}
		}
	}
	if s.p >= len(db.txs) || db.txs[s.p].flushAt > db.tick {
		return simBatch{}, false
	}
	tx := db.txs[s.p]
	var b simBatch
	for i, c := range tx.changes {
		r := simRecord{topic: "t", key: c.key, version: tx.mark, op: c.op, order: streamOrder(tx.mark, uint32(i+1))}
		if c.op != 'd' {
			v := c.val
			r.value = &v
		}
		b.recs = append(b.recs, r)
		if s.e.Watching("db.t") {
			s.e.Touch("db.t", strconv.Itoa(c.key), tx.mark, tx.xid)
		}
	}
	s.p++
	s.base = streamOrder(tx.mark, ^uint32(0))
	pos := s.position(s.base, false)
	b.order, b.state = pos.order, pos.state
	return b, true
}

// open reads a window: like the PostgreSQL source (low watermark, MVCC snapshot, chunk,
// high watermark), with writes landing in between.
func (s *simSource) open(task *Task) {
	db := s.db
	if task.Total < 0 {
		s.e.SetTotal(task, int64(len(db.cur)))
	}
	low := db.nextMark
	if db.rng.IntN(2) == 0 {
		db.write()
	}
	db.tick++
	snap := db.tick
	// the source's check: a transaction already streamed but not visible to the read (its
	// commit is in the WAL, its visibility not yet) makes the read retry
	for _, tx := range db.txs[:s.p] {
		if tx.visAt > snap {
			return
		}
	}
	w := &Window{Task: task, Low: low, Invisible: func(xid uint64) bool { return !db.visible(xid, snap) }}
	if !w.Blocking() {
		keys, vals := s.readChunk(task.After, task.ChunkSize, snap)
		s.rows[w], s.vals[w] = keys, vals
	} else {
		s.rows[w] = []int{snap} // the blocking read's snapshot
	}
	if db.rng.IntN(2) == 0 {
		db.write()
	}
	w.High = db.nextMark
	s.e.Opened(w)
}

func (s *simSource) readChunk(after []string, limit, snap int) ([]int, []int) {
	from := -1
	if after != nil {
		from, _ = strconv.Atoi(after[0])
	}
	var keys, vals []int
	for k := from + 1; k < s.db.keySpace && len(keys) < limit; k++ {
		if v, ok := s.db.readAt(k, snap); ok && (s.filter == nil || s.filter(k)) {
			keys, vals = append(keys, k), append(vals, v)
		}
	}
	return keys, vals
}

func (s *simSource) emit(w *Window) simBatch {
	keys, vals := s.rows[w], s.vals[w]
	if w.Blocking() {
		snap := s.rows[w][0]
		keys, vals = s.readChunk(w.Task.After, w.Task.ChunkSize, snap)
	} else {
		delete(s.rows, w)
		delete(s.vals, w)
	}
	em := s.e.StartEmit(w, s.base, s.frontier())
	var b simBatch
	for i, k := range keys {
		if !em.Keep(strconv.Itoa(k)) {
			continue
		}
		v := vals[i]
		b.recs = append(b.recs, simRecord{topic: "t", key: k, value: &v, version: w.High, op: 'r', order: em.Next().Order})
	}
	var last []string
	if len(keys) > 0 {
		last = []string{strconv.Itoa(keys[len(keys)-1])}
	}
	notes, end := em.Done(len(keys), last, len(keys) < w.Task.ChunkSize)
	for _, n := range notes {
		b.recs = append(b.recs, simRecord{topic: n.Topic, order: n.Position.Order})
	}
	pos := s.position(end, true)
	b.order, b.state, b.chunk = pos.order, pos.state, true
	return b
}

// simLog is the log and the runtime: replayed records dropped by Order, batches acknowledged
// after a delay.
type simLog struct {
	t         *testing.T
	recs      []simRecord
	floor     map[string][]byte
	committed simBatch
	inflight  []pendingAck
	// chunk emissions appended after the committed position, at each kill
	unacked int
}

type pendingAck struct {
	b  simBatch
	at int
}

func (l *simLog) append(b simBatch, ackAt int) {
	var prev []byte
	for _, r := range b.recs {
		if prev != nil && bytes.Compare(r.order, prev) <= 0 {
			l.t.Fatalf("orders do not grow within a batch: %x after %x", r.order, prev)
		}
		prev = r.order
		if f := l.floor[r.topic]; f != nil && bytes.Compare(r.order, f) <= 0 {
			continue
		}
		l.floor[r.topic] = r.order
		l.recs = append(l.recs, r)
	}
	if len(b.recs) > 0 && bytes.Compare(b.order, b.recs[len(b.recs)-1].order) < 0 {
		l.t.Fatalf("batch order %x below its last record %x", b.order, b.recs[len(b.recs)-1].order)
	}
	l.inflight = append(l.inflight, pendingAck{b, ackAt})
}

// acks acknowledges the batches due by tick (in order).
func (l *simLog) acks(tick int, e *Engine) {
	for len(l.inflight) > 0 && l.inflight[0].at <= tick {
		b := l.inflight[0].b
		l.inflight = l.inflight[1:]
		l.committed = b
		e.Acked(b.order)
	}
}

type simResult struct {
	kills, maxUnacked int
	chunks            int
}

func runSim(t *testing.T, seed uint64, cfg simConfig, steps int) simResult {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	db := newSimDB(rng, 300, 600)
	store := &memStore{}
	tables := func(context.Context) ([]Table, error) { return []Table{{ID: "db.t", Key: []string{"id"}}}, nil }
	set := Settings{ChunkSize: cfg.chunk, Parallel: cfg.parallel, NotifySink: true, NotifyTopic: "notify"}
	var clock time.Time = time.Unix(1_700_000_000, 0)
	now := func() time.Time { return clock }
	newEngine := func() *Engine {
		return New(Options{Settings: set, Connector: "sim", Store: store, Now: now, Tables: tables})
	}
	src := &simSource{t: t, db: db, e: newEngine(), base: streamOrder(0, ^uint32(0)), rows: map[*Window][]int{}, vals: map[*Window][]int{}}
	if cfg.filter {
		src.filter = func(k int) bool { return k%3 == 0 }
	}
	if err := src.e.Open(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	log := &simLog{t: t, floor: map[string][]byte{}}
	req := `{"data-collections":["db\\.t"]}`
	if cfg.blocking {
		req = `{"data-collections":["db.t"],"type":"blocking"}`
	}
	if cfg.filter {
		req = `{"data-collections":["db.t"],"additional-conditions":[{"data-collection":"db.t","filter":"id % 3 = 0"}]}`
	}
	requested := false
	var res simResult
	lastPercent := -1.0
	for i := 0; ; i++ {
		db.tick++
		clock = clock.Add(time.Millisecond)
		writing := i < steps
		if writing && rng.IntN(3) == 0 {
			db.write()
		}
		if !requested && i == steps/10 {
			if _, err := src.e.Signal(context.Background(), SignalExecute, []byte(req), OriginAPI, "req-1"); err != nil {
				t.Fatal(err)
			}
			requested = true
		}
		// the source reads a few times per tick; the runtime appends at once and acknowledges later
		for range 1 + rng.IntN(3) {
			b, ok := src.step()
			if !ok {
				break
			}
			if b.chunk {
				res.chunks++
			}
			log.append(b, db.tick+rng.IntN(6))
		}
		log.acks(db.tick, src.e)
		for _, ts := range src.e.Status().Tables {
			if ts.Table == "db.t" && ts.State == "RUNNING" {
				if ts.Percent < lastPercent {
					t.Fatalf("percent went down: %v after %v", ts.Percent, lastPercent)
				}
				lastPercent = ts.Percent
			}
		}
		// a kill now and then: everything not acknowledged is lost to the source (the log keeps it)
		if writing && requested && rng.IntN(150) == 0 {
			unacked := 0
			for _, p := range log.inflight {
				if p.b.chunk {
					unacked++
				}
			}
			res.maxUnacked = max(res.maxUnacked, unacked)
			res.kills++
			log.inflight = nil
			var pos simPos
			if log.committed.state != nil {
				if err := json.Unmarshal(log.committed.state, &pos); err != nil {
					t.Fatal(err)
				}
			}
			src.e = newEngine()
			if err := src.e.Open(context.Background(), pos.Incr); err != nil {
				t.Fatal(err)
			}
			src.p = pos.P
			src.base = streamOrder(0, ^uint32(0))
			if pos.Base != "" {
				fmt.Sscanf(pos.Base, "%x", &src.base)
			}
			src.rows, src.vals = map[*Window][]int{}, map[*Window][]int{}
			lastPercent = -1 // the rate restarts; the percent comes back from the state
		}
		if !writing && requested && src.e.Idle() && src.p == len(db.txs) && len(log.inflight) == 0 {
			break
		}
		if i > steps*50 {
			t.Fatalf("no end after %d steps: status %s", i, src.e.StatusJSON())
		}
	}
	st := src.e.Status()
	if len(st.Tables) == 0 || st.Tables[len(st.Tables)-1].State != "SUCCEEDED" || st.Tables[len(st.Tables)-1].Percent != 100 {
		t.Fatalf("final status: %s", src.e.StatusJSON())
	}

	want := map[int]int{}
	for k := range db.cur {
		if v, ok := db.readAt(k, db.tick+10); ok {
			want[k] = v
		}
	}
	// the fold in log order
	fold := map[int]int{}
	// the version-guarded view
	type guarded struct {
		v       Mark
		val     int
		present bool
	}
	view := map[int]guarded{}
	for _, r := range log.recs {
		if r.topic != "t" {
			continue
		}
		if r.value == nil {
			delete(fold, r.key)
		} else {
			fold[r.key] = *r.value
		}
		if g, ok := view[r.key]; !ok || r.version >= g.v {
			view[r.key] = guarded{v: r.version, val: valOr(r.value), present: r.value != nil}
		}
		if cfg.filter && r.op == 'r' && r.key%3 != 0 {
			t.Fatalf("filtered snapshot emitted key %d", r.key)
		}
	}
	got := map[int]int{}
	for k, g := range view {
		if g.present {
			got[k] = g.val
		}
	}
	if cfg.filter {
		// rows never changed and outside the filter are in neither; the rest must agree
		for k, v := range want {
			if k%3 == 0 {
				if fold[k] != v {
					t.Fatalf("seed %d: key %d: fold %v, want %v", seed, k, fold[k], v)
				}
			}
		}
		return res
	}
	if d := diffInts(want, fold); d != "" {
		t.Fatalf("seed %d: fold differs from the table:\n%s", seed, d)
	}
	if d := diffInts(want, got); d != "" {
		t.Fatalf("seed %d: version-guarded view differs from the table:\n%s", seed, d)
	}
	return res
}

func valOr(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func diffInts(want, got map[int]int) string {
	var keys []int
	seen := map[int]bool{}
	for k := range want {
		keys, seen[k] = append(keys, k), true
	}
	for k := range got {
		if !seen[k] {
			keys = append(keys, k)
		}
	}
	sort.Ints(keys)
	var out []string
	for _, k := range keys {
		w, wok := want[k]
		g, gok := got[k]
		switch {
		case !wok:
			out = append(out, fmt.Sprintf("key %d: unexpected %d", k, g))
		case !gok:
			out = append(out, fmt.Sprintf("key %d: missing, want %d", k, w))
		case w != g:
			out = append(out, fmt.Sprintf("key %d: got %d, want %d", k, g, w))
		}
		if len(out) == 10 {
			break
		}
	}
	if len(out) == 0 {
		return ""
	}
	return fmt.Sprint(out)
}

func TestSimulatedIncremental(t *testing.T) {
	for _, cfg := range []simConfig{
		{chunk: 16, parallel: 1},
		{chunk: 7, parallel: 1},
		{chunk: 64, parallel: 1},
		{chunk: 16, parallel: 1, blocking: true},
		{chunk: 16, parallel: 1, filter: true},
	} {
		name := fmt.Sprintf("chunk%d", cfg.chunk)
		if cfg.blocking {
			name += "-blocking"
		}
		if cfg.filter {
			name += "-filter"
		}
		t.Run(name, func(t *testing.T) {
			kills, chunks := 0, 0
			for seed := uint64(1); seed <= 40; seed++ {
				res := runSim(t, seed, cfg, 3000)
				if res.maxUnacked > cfg.parallel {
					t.Fatalf("seed %d: %d chunk emissions were not acknowledged at a kill (at most %d may be)", seed, res.maxUnacked, cfg.parallel)
				}
				kills += res.kills
				chunks += res.chunks
			}
			if kills == 0 || chunks == 0 {
				t.Fatalf("the simulation killed %d times and emitted %d chunks: it tests nothing", kills, chunks)
			}
			t.Logf("%d kills, %d chunk emissions", kills, chunks)
		})
	}
}
