package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/sinks/internal/change"
)

// Sink maintains a Redis keyspace from change records. It is a connect.Sink and a
// connect.Rebuilder. Write is not safe for concurrent use (the runtime never calls it so).
type Sink struct {
	o   *options
	log *slog.Logger
	rdb *goredis.Client

	// gen is the generation this sink writes: the live one, or the one being rebuilt.
	gen    int
	prefix string // the view keys' prefix of gen ("" for generation 0)
	// rebuild is set on a sink returned by BeginRebuild.
	rebuild *rebuildState
	// cleanup is the old generation a finished rebuild left, deleted after cleanAt.
	cleanup *cleanupState
	cleanAt time.Time

	// noGuard turns the version guard off (for measuring its cost): no markers are read or
	// written, and a whole row is written over the stored hash without removing other fields.
	noGuard bool

	counters counters
	sleep    func(ctx context.Context, d time.Duration) error

	// Used by the goroutine that applies chunks (apply.go), one Write at a time.
	conn     *goredis.Conn // sends the transactions
	watching bool          // conn WATCHes the owner key, seen holding epoch after the WATCH
	epoch    int64         // this instance's epoch in the owner key; 0: not taken yet
	cache    *versionCache
	spare    []*plan

	ops []op
	buf []byte
	// strs holds a Write's string arguments, boxed as *string (no allocation per argument)
	strs []string
}

// New builds a sink from a validated configuration. It does no I/O (Open connects).
func New(cfg connect.Config, env connect.Env) (*Sink, error) {
	o, err := parseOptions(cfg, env)
	if err != nil {
		return nil, err
	}
	return newSink(o, env.Logger), nil
}

func newSink(o *options, log *slog.Logger) *Sink {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Sink{o: o, log: log, sleep: sleepCtx, cache: newVersionCache(o.cacheSize)}
}

// Open connects and reads which generation is live.
func (s *Sink) Open(ctx context.Context) error {
	if s.rdb == nil {
		s.rdb = goredis.NewClient(s.o.client)
	}
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		if isAuthError(err) {
			return connect.Permanentf("open redis sink: %w", err)
		}
		return fmt.Errorf("open redis sink: %w", err)
	}
	if s.rebuild != nil {
		return nil
	}
	gen, err := s.liveGeneration(ctx)
	if err != nil {
		return fmt.Errorf("open redis sink: %w", err)
	}
	s.setGeneration(gen)
	if err := s.resumeCleanup(ctx); err != nil {
		return fmt.Errorf("open redis sink: %w", err)
	}
	return nil
}

func isAuthError(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOPERM")
}

// Close finishes the cleanup of a replaced generation, if one is pending, and closes the
// connections.
func (s *Sink) Close(ctx context.Context) error {
	if s.rdb == nil {
		return nil
	}
	s.dropConn()
	if s.rebuild == nil && s.cleanup != nil {
		if err := s.runCleanup(ctx, -1); err != nil {
			s.log.Warn("clean up the generation a rebuild replaced", "err", err)
		}
	}
	if s.rebuild != nil && s.rebuild.live != nil {
		return nil // the live sink's connections
	}
	err := s.rdb.Close()
	s.rdb = nil
	return err
}

// Stats are the sink's counters since it was built.
type Stats struct {
	// Written counts rows written (or stream entries appended); Deleted rows deleted; neither
	// counts the writes the guard refused.
	Written, Deleted int64
	// Conflicts counts writes the version guard refused because a newer version is stored:
	// replays and reordered events. They are expected, not errors.
	Conflicts int64
	// MarkersRead counts version markers read from Redis because the version cache did not
	// hold them (rows not written since the sink started, or evicted from the cache).
	MarkersRead int64
	// Retries counts chunks sent again after a connection error or a busy server.
	Retries int64
	// Rejected counts records rejected for good; Skipped those with nothing to do.
	Rejected, Skipped int64
	// PartialMissing counts json partial updates whose stored row was missing.
	PartialMissing int64
	// Batches is the number of Write calls; BatchTime their total duration and LastBatchTime
	// the latest one's.
	Batches                  int64
	BatchTime, LastBatchTime time.Duration
}

type counters struct {
	written, deleted, conflicts, markersRead, retries, rejected, skipped, partialMissing atomic.Int64
	batches, batchNanos, lastBatchNanos                                                  atomic.Int64
}

// Stats returns the counters. Safe to call concurrently with Write.
func (s *Sink) Stats() Stats {
	c := &s.counters
	return Stats{
		Written: c.written.Load(), Deleted: c.deleted.Load(), Conflicts: c.conflicts.Load(),
		MarkersRead: c.markersRead.Load(), Retries: c.retries.Load(), Rejected: c.rejected.Load(),
		Skipped: c.skipped.Load(), PartialMissing: c.partialMissing.Load(), Batches: c.batches.Load(),
		BatchTime: time.Duration(c.batchNanos.Load()), LastBatchTime: time.Duration(c.lastBatchNanos.Load()),
	}
}

// op is one record turned into one write.
type op struct {
	rec  int
	kind byte // H (a whole hash), P (part of a hash), J (json), D (delete), X (stream entry)
	key  string
	vkey string // the row's version marker
	id   rowID  // vkey's name in the version cache
	// guarded is false for records without a version (and stream records without an offset):
	// they apply whatever the stored version.
	guarded  bool
	ver, off int64
	fp       uint32 // H: the fingerprint of the row's column names
	args     []any  // H, P: HSET key field value ...; J: the document; X: XADD key ... * field value ...
	nulls    []any  // H, P: HDEL key field ... (the NULL columns)
	row      connect.Row
	// json partial updates: the image and the columns to keep from the stored row
	partial bool
	image   connect.Row
	keep    []string
}

// Write applies the batch in chunks of batch.size records, one after the other (apply.go),
// preparing the next chunk while one is applied. It returns once every record is applied,
// refused as stale (counted), or rejected (a *connect.WriteError). Connection errors and a
// busy server are retried with backoff; after max.retries Write returns a retriable error.
func (s *Sink) Write(ctx context.Context, batch []connect.Record) error {
	t0 := time.Now()
	defer func() {
		d := time.Since(t0).Nanoseconds()
		s.counters.batches.Add(1)
		s.counters.batchNanos.Add(d)
		s.counters.lastBatchNanos.Store(d)
	}()
	if s.rebuild == nil && s.cleanup != nil && !time.Now().Before(s.cleanAt) {
		// a bounded step of the old generation's cleanup per Write
		if err := s.runCleanup(ctx, 4); err != nil {
			s.log.Warn("clean up the generation a rebuild replaced", "err", err)
		}
	}
	// ops never grows past its capacity, so the chunks the executor holds are never copied
	if cap(s.ops) < len(batch) {
		s.ops = make([]op, 0, len(batch))
	}
	ops := s.ops[:0]
	if cap(s.strs) < 12*len(batch) {
		s.strs = make([]string, 0, 12*len(batch))
	}
	defer func() {
		clear(ops[:cap(ops)])
		s.ops = ops[:0]
		clear(s.strs)
		s.strs = s.strs[:0]
	}()
	var failed []connect.RecordError
	ex := s.startExecutor(ctx)
	sent := 0
	for i := range batch {
		o, ok, err := s.toOp(&batch[i], i)
		if err != nil {
			s.counters.rejected.Add(1)
			failed = append(failed, connect.RecordError{Index: i, Err: err})
			continue
		}
		if ok {
			ops = append(ops, o)
		}
		if len(ops)-sent >= s.o.batchSize {
			ex.submit(ops[sent:len(ops):len(ops)])
			sent = len(ops)
		}
	}
	if sent < len(ops) {
		ex.submit(ops[sent:len(ops):len(ops)])
	}
	res, err := ex.finish()
	if err != nil {
		return err
	}
	s.counters.written.Add(res.written)
	s.counters.deleted.Add(res.deleted)
	s.counters.conflicts.Add(res.conflicts)
	s.counters.rejected.Add(int64(len(res.rejected)))
	failed = append(failed, res.rejected...)
	if len(failed) > 0 {
		sort.Slice(failed, func(i, j int) bool { return failed[i].Index < failed[j].Index })
		return &connect.WriteError{Failed: failed}
	}
	return nil
}

// executor applies chunks one after the other in a goroutine of its own, while Write prepares
// the next ones; while a chunk's transaction runs, it plans the next one (apply.go).
type executor struct {
	s    *Sink
	ctx  context.Context
	in   chan []op
	done chan struct{}
	res  chunkResult
	last []op // the last chunk applied
	err  error
}

func (s *Sink) startExecutor(ctx context.Context) *executor {
	e := &executor{s: s, ctx: ctx, in: make(chan []op, 1), done: make(chan struct{})}
	go e.run()
	return e
}

func (e *executor) submit(ops []op) { e.in <- ops }

func (e *executor) run() {
	defer close(e.done)
	s := e.s
	var fl *flight
	for ops := range e.in {
		if e.err != nil {
			continue // drain
		}
		var p *plan
		var err error
		if fl != nil {
			p, err = s.plan(e.ctx, ops, fl.p) // against what the chunk in flight leaves
			clean := e.settle(fl)
			fl = nil
			if e.err != nil || !clean || !s.watching && !s.noGuard {
				if p != nil {
					s.discard(p)
				}
				p, err = nil, nil // what the plan assumed did not happen
			}
			if e.err != nil {
				continue
			}
		}
		if p == nil && err == nil {
			p, err = s.plan(e.ctx, ops, nil)
		}
		if err != nil {
			s.forget(ops)
			r, err := s.applyWithRetry(e.ctx, ops, err)
			if err != nil {
				e.err = err
				continue
			}
			e.res.add(r)
			e.last = ops
			continue
		}
		fl = s.send(e.ctx, p)
	}
	if fl != nil && e.err == nil {
		e.settle(fl)
	}
	if e.err == nil && s.o.waitN > 0 && e.last != nil {
		e.err = e.wait()
	}
	s.counters.markersRead.Add(e.res.markerReads)
}

// settle lands fl, applying its chunk again if it failed. clean reports that it was applied
// as planned, with no command refused.
func (e *executor) settle(fl *flight) (clean bool) {
	r, clean, err := e.s.land(e.ctx, fl)
	ops := fl.p.ops
	e.s.release(fl.p)
	if err != nil {
		clean = false
		if r, err = e.s.applyWithRetry(e.ctx, ops, err); err != nil {
			e.err = err
			return false
		}
	}
	e.res.add(r)
	e.last = ops
	return clean
}

// wait WAITs for redis.wait.replicas replicas to have the Write: on the connection that sent
// the last chunk (WAIT counts what its connection wrote, and replicas apply in order), or
// after applying the last chunk again on a new one.
func (e *executor) wait() error {
	s := e.s
	for attempt := 0; ; attempt++ {
		err := e.waitOnce()
		if err == nil {
			return nil
		}
		if err = s.retryable(e.ctx, err, attempt, len(e.last)); err != nil {
			return err
		}
	}
}

func (e *executor) waitOnce() error {
	s := e.s
	if s.conn == nil {
		if _, err := s.applyOnce(e.ctx, e.last); err != nil {
			return err
		}
	}
	n, err := s.conn.Wait(e.ctx, s.o.waitN, s.o.waitTimeout).Result()
	if err != nil {
		s.dropConn()
		return err
	}
	if n < int64(s.o.waitN) {
		return fmt.Errorf("wait: %d of %d replicas acknowledged the batch within %v", n, s.o.waitN, s.o.waitTimeout)
	}
	return nil
}

// finish waits for the submitted chunks and returns what they did.
func (e *executor) finish() (chunkResult, error) {
	close(e.in)
	<-e.done
	return e.res, e.err
}

// forget drops what the cache holds about ops' rows and the connection, after a failure.
func (s *Sink) forget(ops []op) {
	for i := range ops {
		s.cache.drop(ops[i].id)
	}
	s.dropConn()
}

// applyWithRetry applies a chunk after its first attempt failed with err, retrying transient
// failures (the operations are idempotent under the guard).
func (s *Sink) applyWithRetry(ctx context.Context, ops []op, err error) (chunkResult, error) {
	for attempt := 0; ; attempt++ {
		if err = s.retryable(ctx, err, attempt, len(ops)); err != nil {
			return chunkResult{}, err
		}
		var res chunkResult
		if res, err = s.applyOnce(ctx, ops); err == nil {
			return res, nil
		}
	}
}

// retryable returns nil after the backoff before retry attempt+1 of a failure err, or the
// error to give up with.
func (s *Sink) retryable(ctx context.Context, err error, attempt, records int) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if !errors.Is(err, errWatch) && !transient(err) {
		return fmt.Errorf("write to redis: %w", err)
	}
	if attempt >= s.o.maxRetries {
		return fmt.Errorf("write to redis: still failing after %d retries: %w", attempt, err)
	}
	d := s.backoff(attempt)
	s.counters.retries.Add(1)
	s.log.Warn("redis write failed; retrying", "records", records, "attempt", attempt+1,
		"max_retries", s.o.maxRetries, "backoff", d, "err", err)
	return s.sleep(ctx, d)
}

// toOp interprets a record. ok=false: nothing to do.
func (s *Sink) toOp(r *connect.Record, i int) (op, bool, error) {
	ch, err := change.Interpret(r)
	if err != nil {
		return op{}, false, err
	}
	if ch.Kind == change.Skip {
		s.counters.skipped.Add(1)
		return op{}, false, nil
	}
	o := op{rec: i}
	b := s.buf[:0]
	b = append(b, s.prefix...)
	start := len(b)
	if b, err = s.renderKey(b, r); err != nil {
		return op{}, false, err
	}
	o.key = string(b)
	name := b[start:]
	// the version marker: <meta>v:<gen>:<name>, for streams <meta>s:<gen>:<len(name)>:<name>:<row key>
	v := append(b[len(b):], s.o.meta...)
	if s.o.typ == TypeStream {
		v = append(v, "s:"...)
	} else {
		v = append(v, "v:"...)
	}
	v = strconv.AppendInt(v, int64(s.gen), 10)
	v = append(v, ':')
	if s.o.typ == TypeStream {
		v = strconv.AppendInt(v, int64(len(name)), 10)
		v = append(v, ':')
		v = append(v, name...)
		v = append(v, ':')
		if v, err = change.AppendKey(v, r.Key); err != nil {
			return op{}, false, err
		}
	} else {
		v = append(v, name...)
	}
	o.vkey = string(v)
	o.id = idOf(o.vkey)
	s.buf = b[:0]
	if s.o.typ == TypeStream {
		return s.streamOp(o, r, ch)
	}
	o.guarded, o.ver = r.Version != 0, r.Version
	if ch.Kind == change.Delete {
		o.kind = 'D'
		return o, true, nil
	}
	switch s.o.typ {
	case TypeJSON:
		o.kind = 'J'
		o.row = ch.Row
		if len(ch.Unchanged) > 0 {
			// resolved against the stored row when the chunk is applied
			o.partial, o.image, o.keep = true, ch.Row, ch.Unchanged
			return o, true, nil
		}
		doc, err := connect.MarshalJSONValue(ch.Row)
		if err != nil {
			return op{}, false, fmt.Errorf("render row: %w", err)
		}
		o.args = []any{string(doc)}
	default:
		o.kind = 'H'
		if len(ch.Unchanged) > 0 {
			o.kind = 'P'
		} else {
			o.fp = fingerprint(ch.Row)
		}
		// two spare places: the version field and its marker (apply.go)
		o.args = make([]any, 2, 4+2*len(ch.Row))
		o.args[0], o.args[1] = "hset", s.box(o.key)
		for _, f := range ch.Row {
			if s.o.vfield != "" && f.Name == s.o.vfield {
				return op{}, false, fmt.Errorf("column %s: the hash field %s holds the row's version (redis.version.storage=field); rename the column or set redis.meta.prefix", f.Name, s.o.vfield)
			}
			if f.Value == nil {
				if o.nulls == nil {
					o.nulls = []any{"hdel", o.args[1]}
				}
				o.nulls = append(o.nulls, s.box(f.Name))
				continue
			}
			val, err := fieldValue(f.Value)
			if err != nil {
				return op{}, false, fmt.Errorf("column %s: %w", f.Name, err)
			}
			o.args = append(o.args, s.box(f.Name), s.box(val))
		}
	}
	return o, true, nil
}

// streamOp builds the XADD of one change: fields op (c, u, r, d), key (the record key's
// JSON), version, and value (the row's JSON; absent for deletes). Only records with a log
// offset are guarded: a stream entry is appended if its version and offset are newer than the
// stored ones, so a replay appends nothing twice.
func (s *Sink) streamOp(o op, r *connect.Record, ch change.Change) (op, bool, error) {
	o.kind = 'X'
	o.guarded, o.ver, o.off = r.Offset >= 0, r.Version, r.Offset
	key, err := connect.MarshalJSONValue(r.Key)
	if err != nil {
		return op{}, false, fmt.Errorf("render key: %w", err)
	}
	opName := "d"
	if ev, err := connect.ParseChangeEvent(r.Value); err == nil {
		opName = ev.Op.String()
	} else if ch.Kind == change.Write {
		opName = "u"
	}
	o.args = []any{"xadd", o.key}
	if s.o.maxLen > 0 {
		o.args = append(o.args, "maxlen", "~", s.o.maxLen)
	}
	o.args = append(o.args, "*", "op", opName, "key", string(key), "version", strconv.FormatInt(r.Version, 10))
	if ch.Kind == change.Write {
		doc, err := connect.MarshalJSONValue(ch.Row)
		if err != nil {
			return op{}, false, fmt.Errorf("render row: %w", err)
		}
		o.args = append(o.args, "value", string(doc))
		if len(ch.Unchanged) > 0 {
			o.args = append(o.args, "unchanged", strings.Join(ch.Unchanged, ","))
		}
	}
	return o, true, nil
}

// box returns v as a command argument without allocating: a *string into the Write's slab.
// A pointer taken before the slab grows stays valid (the old array is left as it was).
func (s *Sink) box(v string) any {
	s.strs = append(s.strs, v)
	return &s.strs[len(s.strs)-1]
}

// fingerprint is FNV-1a over the row's column names, in order (kept in the marker as 8 hex
// digits).
func fingerprint(row connect.Row) uint32 {
	h := uint32(2166136261)
	for _, f := range row {
		for i := 0; i < len(f.Name); i++ {
			h ^= uint32(f.Name[i])
			h *= 16777619
		}
		h ^= 0
		h *= 16777619
	}
	return h
}

// renderKey renders the key template for a record.
func (s *Sink) renderKey(dst []byte, r *connect.Record) ([]byte, error) {
	tp := change.SplitTopic(r.Topic)
	return s.o.key.Render(dst, func(dst []byte, ph string) ([]byte, error) {
		switch ph {
		case "topic":
			return append(dst, tp.Name...), nil
		case "db", "schema":
			return append(dst, tp.DB...), nil
		case "table":
			return append(dst, tp.Table...), nil
		case "key":
			return change.AppendKey(dst, r.Key)
		}
		col := strings.TrimPrefix(ph, "key.")
		row, ok := r.Key.(connect.Row)
		if !ok {
			return dst, fmt.Errorf("key template uses ${%s} but the record key is not a row", ph)
		}
		v, ok := row.Get(col)
		if !ok {
			return dst, fmt.Errorf("key template uses ${%s} but the record key has no column %s", ph, col)
		}
		return change.AppendValue(dst, v, false)
	})
}

// fieldValue renders a column as a hash field value: strings as they are, every other value as
// its JSON text (bytes and times as their JSON string's content).
func fieldValue(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case bool:
		return strconv.FormatBool(x), nil
	case float64:
		// plain notation for ordinary magnitudes, as connect.AppendJSON renders them
		if a := math.Abs(x); a == 0 || a >= 1e-6 && a < 1e21 {
			return strconv.FormatFloat(x, 'f', -1, 64), nil
		}
	}
	b, err := change.AppendValue(nil, v, false)
	return string(b), err
}

// transient reports whether a failed call is worth retrying: connection errors and a server
// that is busy, loading, read-only or out of memory.
func transient(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, goredis.ErrClosed) {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"OOM", "READONLY", "BUSY", "LOADING", "MASTERDOWN", "NOREPLICAS", "TRYAGAIN", "MISCONF", "connection", "i/o timeout", "broken pipe", "reset by peer", "wait:"} {
		if strings.HasPrefix(msg, p) || strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// backoff is the wait before retry attempt+1: retry.backoff.ms doubled per attempt, capped at
// retry.backoff.max.ms, with "equal jitter" (between half and all of it).
func (s *Sink) backoff(attempt int) time.Duration {
	d := s.o.backoff << min(attempt, 30)
	if d > s.o.backoffMax || d <= 0 {
		d = s.o.backoffMax
	}
	if d <= 0 {
		return 0
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
