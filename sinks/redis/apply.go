package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/connect"
)

// Applying chunks of operations (batch.size records each). Every row's version is kept in a
// marker key beside it (versions.go). Which writes apply is decided in the sink, against the
// markers it remembers (the version cache) or reads, and a chunk's writes go to Redis as one
// MULTI/EXEC transaction of plain commands, markers included, so a row and its marker change
// together:
//
//	plan:  MGET <markers not cached>  MGET <stored json rows of partial updates>
//	       decide in log order: a write applies if its version is at least the stored one
//	       (streams: a strictly newer version and offset); an unguarded one (version 0) always
//	send:  MULTI  <the applied writes>  MSET <markers>  SET <expiring markers> PX ..  EXEC
//	       WATCH <owner>  GET <owner>
//
// While a chunk's transaction runs, the next chunk is planned against the markers the running
// one will leave (if it fails, the plan is thrown away and made again).
//
// The cache is sound only if no one else writes the generation's markers: the owner key
// <meta>owner:<gen> holds the epoch of the sink instance that writes the generation (each
// instance takes a new one with INCR when it starts writing it). A transaction is sent only
// while its connection WATCHes the owner key and has seen it hold this instance's epoch after
// the WATCH (each transaction is followed by WATCH and GET for the next one). Once another
// instance has taken over (two sluice processes running one connector), this one's
// transactions abort and it stops with a permanent error, instead of overwriting newer rows
// from a stale cache.
//
// A command Redis refuses inside the transaction (WRONGTYPE: the key holds another type) does
// not undo the others: the marker written for it is set back to what it was, and the record is
// rejected. When the outcome of a transaction is unknown (the connection broke), the markers of
// its rows are dropped from the cache and read again when the chunk is retried.

// errWatch is a transaction aborted because the owner key changed.
var errWatch = errors.New("the owner key changed before the transaction")

func (s *Sink) ownerKey() string { return s.metaKey("owner:" + strconv.Itoa(s.gen)) }

// decision is what a chunk does with one operation.
type decision struct {
	apply         bool
	before, after marker // the row's marker before and after the operation
	first, n      int    // its commands in the transaction
	err           error  // the stored marker could not be read: the record is rejected
}

// chunkResult counts what a chunk did.
type chunkResult struct {
	written, deleted, conflicts, markerReads int64
	rejected                                 []connect.RecordError
}

func (r *chunkResult) add(o chunkResult) {
	r.written += o.written
	r.deleted += o.deleted
	r.conflicts += o.conflicts
	r.markerReads += o.markerReads
	r.rejected = append(r.rejected, o.rejected...)
}

// plan is a chunk decided, with its transaction built but not sent. Plans are reused.
type plan struct {
	ops   []op
	dec   []decision
	state map[rowID]marker     // the markers of the chunk's rows after it
	docs  map[string]storedDoc // json rows the chunk read or writes, as it leaves them
	reads int64                // markers read
	// touched lists the rows whose marker the chunk changes (their first applied operation)
	touched []int
	strs    []string // marker values, boxed as *string (no allocation per argument)
	mset    []any
	read    []rowID // the rows whose markers the chunk read from Redis

	all   []goredis.Cmder // MULTI, the transaction, EXEC, WATCH, GET
	cmds  []*goredis.Cmd  // the commands inside MULTI
	exec  *goredis.Cmd
	owner *goredis.StringCmd // GET of the owner key after the WATCH that follows EXEC
}

// storedDoc is a json row as stored (or as a chunk leaves it).
type storedDoc struct {
	found bool
	row   connect.Row
}

// lookup returns what the chunk in flight (prev) leaves, or what the cache holds.
func (s *Sink) lookup(prev *plan, id rowID, now int64) (marker, bool) {
	if prev != nil {
		if m, ok := prev.state[id]; ok {
			m.touched = false
			return m, true
		}
	}
	return s.cache.get(id, now)
}

// plan decides ops. With prev (a chunk in flight on s.conn) it plans against the markers
// prev leaves and reads through the pool; otherwise it reads on s.conn and, unless the
// connection watches the owner key already, WATCHes and checks it in the same round trip.
func (s *Sink) plan(ctx context.Context, ops []op, prev *plan) (*plan, error) {
	p := s.newPlan(ops)
	if err := s.fill(ctx, p, prev); err != nil {
		s.release(p)
		return nil, err
	}
	return p, nil
}

func (s *Sink) fill(ctx context.Context, p *plan, prev *plan) error {
	ops := p.ops
	guard := !s.noGuard
	now := nowNanos()
	var need []string
	var needRows []string // the rows' keys, when their versions may be in hash fields
	var docKeys []string
	field := guard && s.o.vfield != ""
	for i := range ops {
		o := &ops[i]
		if guard {
			if _, seen := p.state[o.id]; !seen {
				if m, ok := s.lookup(prev, o.id, now); ok {
					p.state[o.id] = m
				} else {
					p.state[o.id] = marker{}
					need = append(need, o.vkey)
					p.read = append(p.read, o.id)
					if field {
						needRows = append(needRows, o.key)
					}
				}
			}
		}
		if o.partial {
			if _, seen := p.docs[o.key]; !seen {
				if prev != nil {
					if d, ok := prev.docs[o.key]; ok {
						p.docs[o.key] = d
						continue
					}
				}
				p.docs[o.key] = storedDoc{}
				docKeys = append(docKeys, o.key)
			}
		}
	}
	var bad map[rowID]error // markers that do not parse (nil: none)
	checkWatch := guard && prev == nil && !s.watching
	if checkWatch || len(need) > 0 || len(docKeys) > 0 {
		var c goredis.Pipeliner
		if prev != nil {
			c = s.rdb.Pipeline()
		} else {
			s.ensureConn()
			c = s.conn.Pipeline()
		}
		var take *goredis.IntCmd
		var owner *goredis.StringCmd
		if checkWatch {
			if s.epoch == 0 { // the first write of this instance to the generation
				take = c.Incr(ctx, s.ownerKey())
			}
			c.Do(ctx, "watch", s.ownerKey())
			owner = c.Get(ctx, s.ownerKey())
		}
		var markers, rows *goredis.SliceCmd
		var fields []*goredis.StringCmd
		if len(need) > 0 {
			markers = c.MGet(ctx, need...)
		}
		for _, k := range needRows {
			fields = append(fields, c.HGet(ctx, k, s.o.vfield))
		}
		if len(docKeys) > 0 {
			rows = c.MGet(ctx, docKeys...)
		}
		cmds, _ := c.Exec(ctx)
		for _, cmd := range cmds {
			if err := cmd.Err(); err != nil && !errors.Is(err, goredis.Nil) {
				if cmd.Name() == "hget" && strings.HasPrefix(err.Error(), "WRONGTYPE") {
					continue // not a hash, so no version field: the write will be refused
				}
				return err
			}
		}
		if take != nil {
			s.epoch = take.Val()
		}
		if owner != nil {
			if err := s.checkOwner(owner); err != nil {
				return err
			}
			s.watching = true
		}
		if markers != nil {
			p.reads = int64(len(need))
			stream := s.o.typ == TypeStream
			for i, v := range markers.Val() {
				var m, fm marker
				if str, ok := v.(string); ok {
					var err error
					if m, err = decodeMarker(str, stream); err != nil {
						if bad == nil {
							bad = map[rowID]error{}
						}
						bad[p.read[i]] = fmt.Errorf("version marker %s: %w", need[i], err)
						continue
					}
				}
				if fields != nil {
					if str, err := fields[i].Result(); err == nil {
						if fm, err = decodeMarker(str, false); err != nil {
							if bad == nil {
								bad = map[rowID]error{}
							}
							bad[p.read[i]] = fmt.Errorf("version field %s of %s: %w", s.o.vfield, needRows[i], err)
							continue
						}
					}
					// a live row's marker key (written with storage key): the version moves
					// into the hash at the row's next write, which deletes the key
					legacy := m.ok && m.fpState != fpDeleted
					// the hash's field is the newer one unless the row was deleted after
					// (DEL removed the field): a delete's marker key
					if fm.ok && (!m.ok || fm.ver >= m.ver) {
						m = fm
					}
					m.legacy = legacy
				}
				if !m.ok {
					continue // no marker
				}
				m.exp = s.markerLife(m, now)
				p.state[p.read[i]] = m
			}
		}
		if rows != nil {
			for i, v := range rows.Val() {
				var d storedDoc
				if str, ok := v.(string); ok {
					if row, err := connect.ParseJSON([]byte(str)); err == nil {
						d.row, _ = row.(connect.Row)
						d.found = d.row != nil
					}
				}
				p.docs[docKeys[i]] = d
			}
		}
	}

	// Decide, in log order, and queue the applied writes.
	p.all = append(p.all, goredis.NewCmd(ctx, "multi"))
	for i := range ops {
		o, d := &ops[i], &p.dec[i]
		if guard {
			if err := bad[o.id]; err != nil {
				d.err = err
				continue
			}
			d.before = p.state[o.id]
			d.apply = applies(o, d.before)
			if !d.apply {
				continue
			}
		} else {
			d.apply = true
		}
		if o.partial {
			if err := s.resolvePartial(o, p.docs[o.key]); err != nil {
				return err
			}
		}
		if guard {
			d.after = s.nextMarker(o, d.before, now)
		}
		d.first = len(p.cmds)
		s.queue(ctx, p, o, d, guard)
		d.n = len(p.cmds) - d.first
		switch o.kind {
		case 'J':
			p.docs[o.key] = storedDoc{found: true, row: o.row}
		case 'D':
			if s.o.typ == TypeJSON {
				p.docs[o.key] = storedDoc{}
			}
		}
		if guard {
			if !d.before.touched {
				p.touched = append(p.touched, i)
			}
			d.after.touched = true
			p.state[o.id] = d.after
		}
	}
	for id := range bad {
		delete(p.state, id) // nothing known: not cached
	}
	if guard {
		s.queueMarkers(ctx, p, now)
		// Remembered now, while the rows' cache lines are fresh, rather than when the
		// transaction is answered: if it fails, or the plan is not sent, the chunk's rows are
		// dropped from the cache (land, discard).
		for _, i := range p.touched {
			id := ops[i].id
			m := p.state[id]
			m.touched = false
			s.cache.put(id, m)
		}
		for _, id := range p.read { // what it read (entries it only read are not renewed)
			if m, ok := p.state[id]; ok && !m.touched {
				s.cache.put(id, m)
			}
		}
	}
	p.exec = goredis.NewCmd(ctx, "exec")
	p.all = append(p.all, p.exec)
	if guard {
		p.owner = goredis.NewStringCmd(ctx, "get", s.ownerKey())
		p.all = append(p.all, goredis.NewCmd(ctx, "watch", s.ownerKey()), p.owner)
	}
	return nil
}

func (s *Sink) ensureConn() {
	if s.conn == nil {
		s.conn = s.rdb.Conn()
		s.watching = false
	}
}

// dropConn forgets the connection (and with it the WATCH) after a failure.
func (s *Sink) dropConn() {
	if s.conn != nil {
		_ = s.conn.Close()
		s.conn = nil
	}
	s.watching = false
}

// flight is a plan sent, whose answer is awaited.
type flight struct {
	p    *plan
	done chan struct{}
	err  error
}

// send sends p on s.conn in a goroutine of its own. The connection must watch the owner key
// (plan made sure of it) unless the guard is off.
func (s *Sink) send(ctx context.Context, p *plan) *flight {
	f := &flight{p: p, done: make(chan struct{})}
	if !s.noGuard && (s.conn == nil || !s.watching) {
		// never send an unfenced transaction; land treats it as failed
		p.exec.SetErr(errors.New("redis sink: a transaction on a connection that does not watch the owner key"))
		close(f.done)
		return f
	}
	s.ensureConn()
	pipe := s.conn.Pipeline()
	_ = pipe.BatchProcess(ctx, p.all...)
	s.watching = false // until the answer shows the WATCH that follows EXEC held
	go func() {
		defer close(f.done)
		_, f.err = pipe.Exec(ctx)
	}()
	return f
}

// land waits for f and settles it: the chunk's counts and the refused commands (whose markers
// are set back, in Redis and in the cache). An error leaves nothing cached about the chunk's
// rows.
func (s *Sink) land(ctx context.Context, f *flight) (res chunkResult, clean bool, err error) {
	<-f.done
	p := f.p
	defer func() {
		if err != nil {
			for i := range p.ops {
				s.cache.drop(p.ops[i].id)
			}
			s.dropConn()
		}
	}()
	guard := !s.noGuard
	applied, refused, cause := txOutcome(p)
	if !applied {
		if errors.Is(cause, errWatch) {
			return res, false, s.ownerChanged(ctx)
		}
		return res, false, cause
	}
	if guard {
		if err := p.owner.Err(); err != nil && !errors.Is(err, goredis.Nil) {
			return res, false, err
		}
		if err := s.checkOwner(p.owner); err != nil {
			return res, false, err
		}
		s.watching = true
	}
	res.markerReads = p.reads
	var failed map[int]bool
	if len(refused) > 0 {
		failed = map[int]bool{}
		if res.rejected, err = s.refused(ctx, p, refused); err != nil {
			return res, false, err
		}
		for _, r := range res.rejected {
			failed[r.Index] = true
		}
	}
	for i := range p.ops {
		o, d := &p.ops[i], &p.dec[i]
		switch {
		case d.err != nil:
			res.rejected = append(res.rejected, connect.RecordError{Index: o.rec, Err: d.err})
		case !d.apply:
			res.conflicts++
		case failed[o.rec]:
		case o.kind == 'D':
			res.deleted++
		default:
			res.written++
		}
	}
	return res, len(refused) == 0, nil
}

// applyOnce plans, sends and lands ops with nothing in flight.
func (s *Sink) applyOnce(ctx context.Context, ops []op) (chunkResult, error) {
	p, err := s.plan(ctx, ops, nil)
	if err != nil {
		for i := range ops {
			s.cache.drop(ops[i].id)
		}
		s.dropConn()
		return chunkResult{}, err
	}
	res, _, err := s.land(ctx, s.send(ctx, p))
	s.release(p)
	return res, err
}

// checkOwner checks the owner key's value read after a WATCH.
func (s *Sink) checkOwner(cmd *goredis.StringCmd) error {
	v, err := cmd.Result()
	if errors.Is(err, goredis.Nil) {
		s.epoch = 0
		s.cache.clear()
		return fmt.Errorf("the key %s is gone: the keyspace was flushed, or a rebuild replaced generation %d; restarting the task reads the live generation again", s.ownerKey(), s.gen)
	}
	if n, _ := strconv.ParseInt(v, 10, 64); n != s.epoch {
		return connect.Permanentf("another sink instance writes generation %d of connector %s (epoch %s in %s, this one's is %d): run each connector in one sluice process", s.gen, s.o.connector, v, s.ownerKey(), s.epoch)
	}
	return nil
}

// ownerChanged reads the owner key after an aborted transaction.
func (s *Sink) ownerChanged(ctx context.Context) error {
	cmd := s.rdb.Get(ctx, s.ownerKey())
	if err := cmd.Err(); err != nil && !errors.Is(err, goredis.Nil) {
		return fmt.Errorf("read %s after an aborted transaction: %w", s.ownerKey(), err)
	}
	if err := s.checkOwner(cmd); err != nil {
		return err
	}
	return errWatch // changed and back: retry
}

// txOutcome tells whether p's transaction was applied and which of its commands Redis
// refused; if it was not applied, why.
func txOutcome(p *plan) (applied bool, refused []int, cause error) {
	err := p.exec.Err()
	switch {
	case err == nil:
	case errors.Is(err, goredis.Nil):
		return false, nil, errWatch // EXEC answered null: a WATCHed key changed
	default:
		var re goredis.Error
		if !errors.As(err, &re) {
			return false, nil, err // the connection: the outcome is unknown
		}
		// EXECABORT: discarded because a command was refused while queued (READONLY, OOM, ...)
		for _, c := range p.cmds {
			if e := c.Err(); e != nil && !strings.HasPrefix(e.Error(), "QUEUED") && !strings.HasPrefix(e.Error(), "EXECABORT") {
				return false, nil, e
			}
		}
		return false, nil, err
	}
	vals, _ := p.exec.Val().([]any)
	if len(vals) != len(p.cmds) {
		return false, nil, fmt.Errorf("EXEC answered %d replies to %d commands", len(vals), len(p.cmds))
	}
	for i, v := range vals {
		if _, isErr := v.(error); isErr {
			refused = append(refused, i)
		}
	}
	return true, refused, nil
}

// applies is the version guard: whether o applies over the stored marker cur.
func applies(o *op, cur marker) bool {
	if !o.guarded || !cur.ok {
		return true
	}
	if o.kind == 'X' {
		return o.ver > cur.ver || o.ver == cur.ver && o.off > cur.off
	}
	return o.ver >= cur.ver
}

// nextMarker is the marker after o applied over cur.
func (s *Sink) nextMarker(o *op, cur marker, now int64) marker {
	m := marker{ok: true, ver: cur.ver, off: cur.off}
	if o.guarded {
		m.ver, m.off = o.ver, o.off
	}
	switch o.kind {
	case 'H':
		m.fpState, m.fp = fpHash, o.fp
	case 'P':
		if cur.fpState == fpHash {
			m.fpState, m.fp = fpHash, cur.fp
		} // else the hash holds some of the row's columns: no fingerprint (not "deleted")
	case 'D':
		m.fpState = fpDeleted
	}
	switch {
	case o.kind == 'D' || o.kind == 'X':
		m.exp = now + s.o.markerTTL*int64(time.Second)
	case s.o.ttl > 0:
		m.exp = now + s.o.ttl*int64(time.Second)
	}
	return m
}

// markerLife bounds the life of a marker read from Redis (its TTL is not read): a delete's and
// a stream row's markers live at most redis.delete.marker.ttl, a row's with redis.key.ttl that
// long. Remembering one longer than Redis keeps it could only refuse more older writes.
func (s *Sink) markerLife(m marker, now int64) int64 {
	switch {
	case s.o.typ == TypeStream || m.fpState == fpDeleted:
		return now + s.o.markerTTL*int64(time.Second)
	case s.o.ttl > 0:
		return now + s.o.ttl*int64(time.Second)
	}
	return 0
}

func (p *plan) do(ctx context.Context, args ...any) {
	c := goredis.NewCmd(ctx, args...)
	p.cmds = append(p.cmds, c)
	p.all = append(p.all, c)
}

// queue adds o's commands to the transaction (d: its decision, with the marker it leaves).
func (s *Sink) queue(ctx context.Context, p *plan, o *op, d *decision, guard bool) {
	cur := d.before
	switch o.kind {
	case 'H', 'P':
		whole := false
		if o.kind == 'H' && guard && !(cur.ok && (cur.fpState == fpHash && cur.fp == o.fp || cur.fpState == fpDeleted)) {
			// the stored hash may hold fields of columns this row does not have
			p.do(ctx, "del", o.key)
			whole = true
		}
		if guard && s.o.vfield != "" {
			// the version field, in the places toOp left spare (each plan sets them anew)
			p.strs = append(p.strs, d.after.encode(false))
			p.do(ctx, append(o.args, &s.o.vfield, &p.strs[len(p.strs)-1])...)
		} else if len(o.args) > 2 {
			p.do(ctx, o.args...)
		}
		if len(o.nulls) > 2 && !whole {
			p.do(ctx, o.nulls...)
		}
		if s.o.ttl > 0 {
			p.do(ctx, "expire", o.key, s.o.ttl)
		}
	case 'J':
		if s.o.ttl > 0 {
			p.do(ctx, "set", o.key, o.args[0], "ex", s.o.ttl)
		} else {
			p.do(ctx, "set", o.key, o.args[0])
		}
	case 'D':
		p.do(ctx, "del", o.key)
	case 'X':
		p.do(ctx, o.args...)
	}
}

// queueMarkers adds the markers the chunk changed: those that never expire in one MSET, the
// others one SET each. With redis.version.storage=field only deleted rows' markers are keys.
func (s *Sink) queueMarkers(ctx context.Context, p *plan, now int64) {
	stream := s.o.typ == TypeStream
	mset := append(p.mset[:0], "mset")
	for _, i := range p.touched {
		o := &p.ops[i]
		m := p.state[o.id]
		if s.o.vfield != "" && m.fpState != fpDeleted {
			// the row's HSET wrote its version into the hash
			if p.dec[i].before.legacy {
				p.do(ctx, "del", &o.vkey)
			}
			continue
		}
		p.strs = append(p.strs, m.encode(stream))
		v := &p.strs[len(p.strs)-1]
		if m.exp == 0 {
			mset = append(mset, &o.vkey, v)
			continue
		}
		p.do(ctx, "set", &o.vkey, v, "px", max((m.exp-now)/int64(time.Millisecond), 1))
	}
	if len(mset) > 1 {
		p.do(ctx, mset...)
	}
	p.mset = mset
}

// newPlan returns an empty plan for ops, reusing a released one.
func (s *Sink) newPlan(ops []op) *plan {
	var p *plan
	if n := len(s.spare); n > 0 {
		p, s.spare = s.spare[n-1], s.spare[:n-1]
	} else {
		p = &plan{state: map[rowID]marker{}, docs: map[string]storedDoc{}}
	}
	p.ops = ops
	if cap(p.dec) < len(ops) {
		p.dec = make([]decision, len(ops))
	}
	p.dec = p.dec[:len(ops)]
	return p
}

// discard forgets a plan that will not be sent: what fill put in the cache about its rows, too.
func (s *Sink) discard(p *plan) {
	for i := range p.ops {
		s.cache.drop(p.ops[i].id)
	}
	s.release(p)
}

// release returns p for reuse once nothing reads it any more.
func (s *Sink) release(p *plan) {
	clear(p.dec)
	clear(p.state)
	clear(p.docs)
	clear(p.all)
	clear(p.cmds)
	clear(p.strs)
	clear(p.mset)
	*p = plan{dec: p.dec[:0], state: p.state, docs: p.docs, touched: p.touched[:0], strs: p.strs[:0], all: p.all[:0], cmds: p.cmds[:0], mset: p.mset[:0], read: p.read[:0]}
	if len(s.spare) < 2 {
		s.spare = append(s.spare, p)
	}
}

// refused handles the commands Redis refused inside an applied transaction: their records are
// rejected, and the markers of their rows set back to what the other operations left.
func (s *Sink) refused(ctx context.Context, p *plan, refused []int) ([]connect.RecordError, error) {
	vals, _ := p.exec.Val().([]any)
	var out []connect.RecordError
	failed := map[int]bool{}
	rows := map[rowID]bool{}
	for i := range p.ops {
		d := &p.dec[i]
		if !d.apply || d.n == 0 {
			continue
		}
		for j := d.first; j < d.first+d.n; j++ {
			if err, isErr := vals[j].(error); isErr {
				failed[i] = true
				rows[p.ops[i].id] = true
				out = append(out, connect.RecordError{Index: p.ops[i].rec, Err: fmt.Errorf("redis refused the write of %s: %s", p.ops[i].key, err)})
				break
			}
		}
	}
	if len(rows) == 0 || s.noGuard {
		return out, nil
	}
	// replay the markers of those rows without the refused operations
	now := nowNanos()
	fixed := map[rowID]marker{}
	vkeys, keys := map[rowID]string{}, map[rowID]string{}
	for i := range p.ops {
		o, d := &p.ops[i], &p.dec[i]
		if !rows[o.id] {
			continue
		}
		m, seen := fixed[o.id]
		if !seen {
			m = d.before
		}
		if d.apply && !failed[i] {
			m = s.nextMarker(o, m, now)
		}
		fixed[o.id], vkeys[o.id], keys[o.id] = m, o.vkey, o.key
	}
	for id, m := range fixed {
		p.state[id] = m
		s.cache.put(id, m) // fill remembered what the refused commands would have left
	}
	return out, s.fixMarkers(ctx, fixed, vkeys, keys)
}

// fixMarkers sets markers back in a transaction of their own, fenced like the others. With
// redis.version.storage=field a live row's marker is its hash's version field (a command
// refused again, because the key is not a hash, leaves it as the refused write did).
func (s *Sink) fixMarkers(ctx context.Context, fixed map[rowID]marker, vkeys, keys map[rowID]string) error {
	stream := s.o.typ == TypeStream
	now := nowNanos()
	p := s.conn.Pipeline()
	p.Do(ctx, "multi")
	var cmds []*goredis.Cmd
	for id, m := range fixed {
		switch {
		case s.o.vfield != "" && !m.ok:
			cmds = append(cmds, p.Do(ctx, "del", vkeys[id]), p.Do(ctx, "hdel", keys[id], s.o.vfield))
		case s.o.vfield != "" && m.fpState != fpDeleted:
			cmds = append(cmds, p.Do(ctx, "hset", keys[id], s.o.vfield, m.encode(stream)))
		case !m.ok:
			cmds = append(cmds, p.Do(ctx, "del", vkeys[id]))
		case m.exp == 0:
			cmds = append(cmds, p.Do(ctx, "set", vkeys[id], m.encode(stream)))
		default:
			cmds = append(cmds, p.Do(ctx, "set", vkeys[id], m.encode(stream), "px", max((m.exp-now)/int64(time.Millisecond), 1)))
		}
	}
	exec := p.Do(ctx, "exec")
	p.Do(ctx, "watch", s.ownerKey())
	owner := p.Get(ctx, s.ownerKey())
	_, _ = p.Exec(ctx)
	fp := &plan{cmds: cmds, exec: exec}
	applied, _, cause := txOutcome(fp)
	if !applied {
		if errors.Is(cause, errWatch) {
			return s.ownerChanged(ctx)
		}
		return fmt.Errorf("set back version markers: %w", cause)
	}
	if err := owner.Err(); err != nil && !errors.Is(err, goredis.Nil) {
		return err
	}
	if err := s.checkOwner(owner); err != nil {
		return err
	}
	s.watching = true
	return nil
}

// resolvePartial turns a json partial update (a row with unchanged columns) into the whole
// document: the stored row's values of the unchanged columns are kept. As in the Elasticsearch
// sink, this is correct because one key is written by one task at a time, in log order.
func (s *Sink) resolvePartial(o *op, st storedDoc) error {
	row := o.image
	if st.found {
		row = append(connect.Row(nil), row...)
		for _, c := range o.keep {
			if row.Index(c) >= 0 {
				continue
			}
			if v, ok := st.row.Get(c); ok {
				row = append(row, connect.Field{Name: c, Value: v})
			}
		}
	} else {
		s.counters.partialMissing.Add(1)
	}
	doc, err := connect.MarshalJSONValue(row)
	if err != nil {
		return connect.Permanentf("render row: %w", err)
	}
	o.args = []any{string(doc)}
	o.row = row
	return nil
}
