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

	// noGuard turns the version guard off (for measuring its cost).
	noGuard bool

	counters counters
	sleep    func(ctx context.Context, d time.Duration) error

	ops []op
	buf []byte
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
	return &Sink{o: o, log: log, sleep: sleepCtx}
}

// Open connects, loads the script and reads which generation is live.
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
	if err := applyScript.Load(ctx, s.rdb).Err(); err != nil {
		return fmt.Errorf("open redis sink: load script: %w", err)
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
	// Retries counts batches sent again after a connection error or a busy server.
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
	written, deleted, conflicts, retries, rejected, skipped, partialMissing atomic.Int64
	batches, batchNanos, lastBatchNanos                                     atomic.Int64
}

// Stats returns the counters. Safe to call concurrently with Write.
func (s *Sink) Stats() Stats {
	c := &s.counters
	return Stats{
		Written: c.written.Load(), Deleted: c.deleted.Load(), Conflicts: c.conflicts.Load(),
		Retries: c.retries.Load(), Rejected: c.rejected.Load(), Skipped: c.skipped.Load(),
		PartialMissing: c.partialMissing.Load(), Batches: c.batches.Load(),
		BatchTime: time.Duration(c.batchNanos.Load()), LastBatchTime: time.Duration(c.lastBatchNanos.Load()),
	}
}

// op is one record turned into one script operation.
type op struct {
	rec     int
	kind    byte   // H, P, J, D, X
	fp      string // H: the fingerprint of the row's column names
	key     string
	vkey    string
	version string // "" = unguarded
	args    []any
	// json partial updates: the row and the columns to keep from the stored one
	row  connect.Row
	keep []string
}

// Write applies the batch: the operations of batch.size records go to one script call, and
// the calls are pipelined. It returns once every record is applied, refused as stale
// (counted), or rejected (a *connect.WriteError). Connection errors and a busy server are
// retried with backoff; after max.retries Write returns a retriable error.
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
	var failed []connect.RecordError
	ops := s.ops[:0]
	// Script calls run while the next ones are prepared, unless json partial updates need the
	// stored rows read first.
	var ex *executor
	if s.o.typ != TypeJSON || !anyUnchanged(batch) {
		ex = s.startExecutor(ctx)
	}
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
		if ex != nil && len(ops)-sent >= s.o.batchSize {
			ex.submit(ops[sent:])
			sent = len(ops)
		}
	}
	s.ops = ops
	if len(ops) > 0 || ex != nil {
		var results []callResult
		var err error
		if ex != nil {
			if sent < len(ops) {
				ex.submit(ops[sent:])
			}
			results, err = ex.finish()
			if err != nil && ctx.Err() == nil && transient(err) {
				results, err = s.applyWithRetry(ctx, ops, err)
			} else if err != nil {
				err = fmt.Errorf("write to redis: %w", err)
			}
		} else {
			results, err = s.applyWithRetry(ctx, ops, nil)
		}
		if err != nil {
			return err
		}
		failed = append(failed, s.settle(results)...)
	}
	if len(failed) > 0 {
		sort.Slice(failed, func(i, j int) bool { return failed[i].Index < failed[j].Index })
		return &connect.WriteError{Failed: failed}
	}
	return nil
}

func anyUnchanged(batch []connect.Record) bool {
	for i := range batch {
		if _, ok := batch[i].Headers.Get(connect.HeaderUnchanged); ok {
			return true
		}
	}
	return false
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
	s.buf = b[:0]
	if s.o.typ == TypeStream {
		return s.streamOp(o, r, ch)
	}
	if r.Version != 0 {
		o.version = pad19(r.Version)
	}
	if ch.Kind == change.Delete {
		o.kind = 'D'
		return o, true, nil
	}
	switch s.o.typ {
	case TypeJSON:
		o.kind = 'J'
		if len(ch.Unchanged) > 0 {
			o.row, o.keep = ch.Row, ch.Unchanged // resolved against the stored row
			return o, true, nil
		}
		doc, err := connect.MarshalJSONValue(ch.Row)
		if err != nil {
			return op{}, false, fmt.Errorf("render row: %w", err)
		}
		o.args = []any{string(doc)}
		o.row = ch.Row
	default:
		o.kind = 'H'
		if len(ch.Unchanged) > 0 {
			o.kind = 'P'
		} else {
			o.fp = fingerprint(ch.Row)
		}
		o.args = make([]any, 1, 1+2*len(ch.Row))
		var dels []any
		for _, f := range ch.Row {
			if f.Value == nil {
				dels = append(dels, f.Name)
				continue
			}
			val, err := fieldValue(f.Value)
			if err != nil {
				return op{}, false, fmt.Errorf("column %s: %w", f.Name, err)
			}
			o.args = append(o.args, f.Name, val)
		}
		o.args[0] = len(o.args) - 1
		o.args = append(o.args, dels...)
	}
	return o, true, nil
}

// streamOp builds the XADD of one change: fields op (c, u, r, d), key (the record key's
// JSON), version, and value (the row's JSON; absent for deletes).
func (s *Sink) streamOp(o op, r *connect.Record, ch change.Change) (op, bool, error) {
	o.kind = 'X'
	if r.Offset >= 0 {
		o.version = pad19(r.Version) + pad19(r.Offset)
	}
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
	o.args = []any{"op", opName, "key", string(key), "version", strconv.FormatInt(r.Version, 10)}
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

// kindArg is an operation's kind argument: the kind letter, for H followed by the fingerprint.
func kindArg(o *op) string {
	switch o.kind {
	case 'H':
		return "H" + o.fp
	case 'P':
		return "P"
	case 'J':
		return "J"
	case 'D':
		return "D"
	}
	return "X"
}

// fingerprint is 8 hex digits of FNV-1a over the row's column names, in order.
func fingerprint(row connect.Row) string {
	h := uint32(2166136261)
	for _, f := range row {
		for i := 0; i < len(f.Name); i++ {
			h ^= uint32(f.Name[i])
			h *= 16777619
		}
		h ^= 0
		h *= 16777619
	}
	const digits = "0123456789abcdef"
	var b [8]byte
	for i := 7; i >= 0; i-- {
		b[i] = digits[h&15]
		h >>= 4
	}
	return string(b[:])
}

// pad19 renders a non-negative int64 in 19 digits, so that versions compare as strings.
func pad19(n int64) string {
	if n < 0 {
		n = 0
	}
	var b [19]byte
	for i := 18; i >= 0; i-- {
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[:])
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

// applyWithRetry applies ops, retrying the whole batch after transient failures (the
// operations are idempotent under the guard). first is the failure of an earlier attempt.
func (s *Sink) applyWithRetry(ctx context.Context, ops []op, first error) ([]callResult, error) {
	attempt := 0
	err := first
	for {
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if !transient(err) {
				return nil, fmt.Errorf("write to redis: %w", err)
			}
			if attempt >= s.o.maxRetries {
				return nil, fmt.Errorf("write to redis: still failing after %d retries: %w", attempt, err)
			}
			d := s.backoff(attempt)
			s.counters.retries.Add(1)
			s.log.Warn("redis write failed; retrying", "records", len(ops), "attempt", attempt+1,
				"max_retries", s.o.maxRetries, "backoff", d, "err", err)
			if err := s.sleep(ctx, d); err != nil {
				return nil, err
			}
			attempt++
		}
		var results []callResult
		if results, err = s.apply(ctx, ops); err == nil {
			return results, nil
		}
	}
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
	for _, p := range []string{"OOM", "READONLY", "BUSY", "LOADING", "MASTERDOWN", "NOREPLICAS", "TRYAGAIN", "MISCONF", "NOSCRIPT", "connection", "i/o timeout", "broken pipe", "reset by peer", "wait:"} {
		if strings.HasPrefix(msg, p) || strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// callResult is the answer to one script call: its operations, and the script's reply.
type callResult struct {
	ops   []op
	reply []any
}

// apply sends every operation once: json partial updates are first resolved against the stored
// rows, then the script calls are pipelined.
func (s *Sink) apply(ctx context.Context, ops []op) ([]callResult, error) {
	if err := s.resolveJSON(ctx, ops); err != nil {
		return nil, err
	}
	pipe := s.rdb.Pipeline()
	var cmds []*goredis.Cmd
	var results []callResult
	for start := 0; start < len(ops); start += s.o.batchSize {
		chunk := ops[start:min(len(ops), start+s.o.batchSize)]
		keys, args := s.callArgs(chunk)
		cmds = append(cmds, applyScript.EvalSha(ctx, pipe, keys, args...))
		results = append(results, callResult{ops: chunk})
	}
	if err := s.execPipe(ctx, pipe); err != nil {
		return nil, err
	}
	for i, cmd := range cmds {
		vals, err := cmd.Slice()
		if err != nil {
			return nil, err
		}
		results[i].reply = vals
	}
	return results, nil
}

// callArgs builds the KEYS and ARGV of one script call (see applyScript).
func (s *Sink) callArgs(chunk []op) ([]string, []any) {
	guard := "1"
	if s.noGuard {
		guard = "0"
	}
	keys := make([]string, 0, 2*len(chunk))
	n := 3
	for i := range chunk {
		n += 4 + len(chunk[i].args)
	}
	args := make([]any, 0, n)
	args = append(args, s.o.maxLen, s.o.markerTTL, guard)
	for i := range chunk {
		o := &chunk[i]
		keys = append(keys, o.key, o.vkey)
		args = append(args, kindArg(o), o.version, s.o.ttl, len(o.args))
		args = append(args, o.args...)
	}
	return keys, args
}

// execPipe runs a pipeline, followed by WAIT when redis.wait.replicas asks for it.
func (s *Sink) execPipe(ctx context.Context, pipe goredis.Pipeliner) error {
	var wait *goredis.Cmd
	if s.o.waitN > 0 {
		wait = pipe.Do(ctx, "WAIT", s.o.waitN, s.o.waitTimeout.Milliseconds())
	}
	_, err := pipe.Exec(ctx)
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		if lerr := applyScript.Load(ctx, s.rdb).Err(); lerr != nil {
			return fmt.Errorf("load script: %w", lerr)
		}
		return err // transient: the retry finds the script
	}
	if err != nil {
		return err
	}
	if wait != nil {
		if n, _ := wait.Int64(); n < int64(s.o.waitN) {
			return fmt.Errorf("wait: %d of %d replicas acknowledged the batch within %v", n, s.o.waitN, s.o.waitTimeout)
		}
	}
	return nil
}

// executor runs script calls one after the other in a goroutine of its own, while Write
// prepares the next ones.
type executor struct {
	s       *Sink
	ctx     context.Context
	in      chan []op
	done    chan struct{}
	results []callResult
	err     error
}

func (s *Sink) startExecutor(ctx context.Context) *executor {
	e := &executor{s: s, ctx: ctx, in: make(chan []op, 1), done: make(chan struct{})}
	go e.run()
	return e
}

func (e *executor) submit(ops []op) { e.in <- ops }

func (e *executor) run() {
	defer close(e.done)
	for ops := range e.in {
		if e.err != nil {
			continue // drain
		}
		keys, args := e.s.callArgs(ops)
		vals, err := applyScript.EvalSha(e.ctx, e.s.rdb, keys, args...).Slice()
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			if lerr := applyScript.Load(e.ctx, e.s.rdb).Err(); lerr != nil {
				err = fmt.Errorf("load script: %w", lerr)
			}
		}
		if err != nil {
			e.err = err
			continue
		}
		e.results = append(e.results, callResult{ops: ops, reply: vals})
	}
	if e.err == nil && e.s.o.waitN > 0 {
		n, err := e.s.rdb.Wait(e.ctx, e.s.o.waitN, e.s.o.waitTimeout).Result()
		if err == nil && n < int64(e.s.o.waitN) {
			err = fmt.Errorf("wait: %d of %d replicas acknowledged the batch within %v", n, e.s.o.waitN, e.s.o.waitTimeout)
		}
		e.err = err
	}
}

// finish waits for the submitted calls and returns their results.
func (e *executor) finish() ([]callResult, error) {
	close(e.in)
	<-e.done
	return e.results, e.err
}

// settle counts the outcome of applied calls and returns the operations the server refused.
func (s *Sink) settle(results []callResult) []connect.RecordError {
	var rejected []connect.RecordError
	for _, r := range results {
		conflicts, _ := r.reply[0].(int64)
		deleted, _ := r.reply[1].(int64)
		s.counters.conflicts.Add(conflicts)
		bad := 0
		for j := 2; j+1 < len(r.reply); j += 2 {
			n, _ := r.reply[j].(int64)
			msg, _ := r.reply[j+1].(string)
			o := &r.ops[n-1]
			bad++
			s.counters.rejected.Add(1)
			rejected = append(rejected, connect.RecordError{Index: o.rec, Err: fmt.Errorf("redis refused the write of %s: %s", o.key, msg)})
		}
		s.counters.deleted.Add(deleted)
		s.counters.written.Add(int64(len(r.ops)-bad) - deleted - conflicts)
	}
	return rejected
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

// resolveJSON turns json partial updates (rows with unchanged columns) into whole documents:
// the stored rows and versions are read, the batch is replayed over them in order (simulating
// the guard), and each partial row gets the stored values of its unchanged columns. As in the
// Elasticsearch sink, this is correct because one key is written by one task at a time, in log
// order.
func (s *Sink) resolveJSON(ctx context.Context, ops []op) error {
	type state struct {
		found   bool
		version string
		row     connect.Row
	}
	states := map[string]*state{}
	var keys []string
	for i := range ops {
		o := &ops[i]
		if o.kind == 'J' && o.args == nil {
			if _, ok := states[o.key]; !ok {
				states[o.key] = nil
				keys = append(keys, o.key, o.vkey)
			}
		}
	}
	if len(keys) == 0 {
		return nil
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return fmt.Errorf("read stored rows for partial updates: %w", err)
	}
	for i := 0; i < len(keys); i += 2 {
		st := &state{}
		if v, ok := vals[i+1].(string); ok {
			st.version = v
		}
		if doc, ok := vals[i].(string); ok {
			v, err := connect.ParseJSON([]byte(doc))
			if err == nil {
				st.row, _ = v.(connect.Row)
				st.found = st.row != nil
			}
		}
		states[keys[i]] = st
	}
	for i := range ops {
		o := &ops[i]
		st, ok := states[o.key]
		if !ok {
			continue
		}
		applies := s.noGuard || o.version == "" || st.version == "" || o.version >= st.version
		if o.kind == 'J' && o.args == nil {
			row := o.row
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
		}
		if !applies {
			continue
		}
		switch o.kind {
		case 'D':
			st.found, st.row = false, nil
		case 'J':
			st.found, st.row = true, o.row
		}
		if o.version != "" {
			st.version = o.version
		}
	}
	return nil
}
