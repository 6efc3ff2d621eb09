package elasticsearch

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/sinks/internal/change"
)

// Sink maintains Elasticsearch indices from change records. It is a connect.Sink and a
// connect.Rebuilder. Write is not safe for concurrent use (the runtime never calls it so).
type Sink struct {
	o   *options
	log *slog.Logger
	c   *client

	// indices caches the write targets known to exist: rendered index name → the name to send
	// writes to (the alias itself for the live sink, the fresh index for a rebuilt one).
	indices map[string]string
	// rebuild is set on a sink returned by BeginRebuild.
	rebuild *rebuildState

	// drops are indices a finished rebuild replaced, deleted after dropAt.
	drops  []string
	dropAt time.Time

	counters counters
	seed     maphash.Seed
	sleep    func(ctx context.Context, d time.Duration) error

	// per-Write buffers, reused
	acts  []action
	arena []byte
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
	return &Sink{o: o, log: log, indices: map[string]string{}, seed: maphash.MakeSeed(), sleep: sleepCtx}
}

// Open connects and checks that the cluster answers. Authentication failures are permanent.
func (s *Sink) Open(ctx context.Context) error {
	if s.c == nil {
		c, err := newClient(s.o)
		if err != nil {
			return connect.Permanent(err)
		}
		s.c = c
	}
	if _, err := s.c.do(ctx, "GET", "/_cluster/health", nil); err != nil {
		if st := statusOf(err); st == 401 || st == 403 {
			return connect.Permanentf("open elasticsearch sink: %w", err)
		}
		return fmt.Errorf("open elasticsearch sink: %w", err)
	}
	return nil
}

// Close drops the indices a rebuild replaced, if any are left, and releases idle connections.
func (s *Sink) Close(ctx context.Context) error {
	if s.c != nil {
		s.dropOld(ctx, true)
		s.c.tr.CloseIdleConnections()
	}
	return nil
}

// Stats are the sink's counters since it was built.
type Stats struct {
	// Indexed and Deleted count documents written and deleted (a delete of a missing document
	// counts: the view ends without it).
	Indexed, Deleted int64
	// Conflicts counts writes the version guard refused because the view holds a newer
	// version: replays and reordered events. They are expected, not errors.
	Conflicts int64
	// Retries counts items (and whole requests) sent again after a 429, a 5xx or a failed request.
	Retries int64
	// Rejected counts records rejected for good (malformed, refused by Elasticsearch).
	Rejected int64
	// Skipped counts records with nothing to do (truncate events, ignored tombstones).
	Skipped int64
	// PartialMissing counts partial updates whose stored document (or one of its unchanged
	// columns) was missing, so the unchanged columns could not be kept.
	PartialMissing int64
	// Batches is the number of Write calls; BatchTime their total duration and LastBatchTime
	// the latest one's.
	Batches                  int64
	BatchTime, LastBatchTime time.Duration
}

type counters struct {
	indexed, deleted, conflicts, retries, rejected, skipped, partialMissing atomic.Int64
	batches, batchNanos, lastBatchNanos                                     atomic.Int64
}

// Stats returns the counters. Safe to call concurrently with Write.
func (s *Sink) Stats() Stats {
	c := &s.counters
	return Stats{
		Indexed: c.indexed.Load(), Deleted: c.deleted.Load(), Conflicts: c.conflicts.Load(),
		Retries: c.retries.Load(), Rejected: c.rejected.Load(), Skipped: c.skipped.Load(),
		PartialMissing: c.partialMissing.Load(), Batches: c.batches.Load(),
		BatchTime: time.Duration(c.batchNanos.Load()), LastBatchTime: time.Duration(c.lastBatchNanos.Load()),
	}
}

// action is one record turned into one bulk item.
type action struct {
	rec     int    // index in the batch
	name    string // rendered index name (the alias)
	target  string // where the item is sent
	id      string
	del     bool
	merge   bool // partial update: resolved into a full document before sending
	version int64
	row     connect.Row
	keep    []string // columns whose stored value is kept (unchanged, or every stored one for upsert)
	upsert  bool

	item  []byte // the rendered bulk lines
	state itemState
	err   error // the last refusal
	gone  bool  // refused because the index does not exist
}

type itemState uint8

const (
	itemPending itemState = iota
	itemDone
	itemConflict
	itemRetry
	itemRejected
)

// Write applies the batch and returns once every item is settled: written, refused as stale
// (counted), or rejected for good (reported per behavior.on.malformed.documents). Items that
// Elasticsearch refuses with 429 or 5xx are retried with backoff; if they still fail after
// max.retries, Write returns a retriable error and the runtime replays the batch.
func (s *Sink) Write(ctx context.Context, batch []connect.Record) error {
	t0 := time.Now()
	defer func() {
		d := time.Since(t0).Nanoseconds()
		s.counters.batches.Add(1)
		s.counters.batchNanos.Add(d)
		s.counters.lastBatchNanos.Store(d)
	}()
	s.dropOld(ctx, false)
	rej := rejections{s: s, batch: batch}
	acts := s.acts[:0]
	s.arena = s.arena[:0]
	for i := range batch {
		a, ok, err := s.toAction(&batch[i], i)
		if err != nil {
			if err := rej.add(i, err); err != nil {
				return err
			}
			continue
		}
		if ok {
			acts = append(acts, a)
		}
	}
	s.acts = acts
	if len(acts) == 0 {
		return rej.result()
	}
	for i := range acts {
		a := &acts[i]
		target, err := s.ensureIndex(ctx, a.name)
		if err != nil {
			if errors.Is(err, errBadIndex) {
				a.state = itemRejected
				a.err = err
				continue
			}
			return fmt.Errorf("write to elasticsearch: %w", err)
		}
		a.target = target
	}
	if err := s.resolveMerges(ctx, acts); err != nil {
		return fmt.Errorf("write to elasticsearch: %w", err)
	}
	for i := range acts {
		a := &acts[i]
		if a.state == itemRejected {
			continue
		}
		if err := s.render(a); err != nil {
			a.state, a.err = itemRejected, err
		}
	}
	if err := s.send(ctx, acts); err != nil {
		for i := range acts {
			if acts[i].gone {
				delete(s.indices, acts[i].name)
			}
		}
		return err
	}
	for i := range acts {
		a := &acts[i]
		switch a.state {
		case itemDone:
			if a.del {
				s.counters.deleted.Add(1)
			} else {
				s.counters.indexed.Add(1)
			}
		case itemConflict:
			s.counters.conflicts.Add(1)
		case itemRejected:
			if err := rej.add(a.rec, a.err); err != nil {
				return err
			}
		}
	}
	if cap(s.arena) > 64<<20 {
		s.arena = nil // do not keep a huge buffer after an unusual batch
	}
	return rej.result()
}

// rejections collects the records rejected for good and applies
// behavior.on.malformed.documents to them.
type rejections struct {
	s      *Sink
	batch  []connect.Record
	failed []connect.RecordError
}

func (r *rejections) add(i int, err error) error {
	s := r.s
	s.counters.rejected.Add(1)
	rec := &r.batch[i]
	switch s.o.malformed {
	case MalformedFail:
		return connect.Permanentf("record %s-%d@%d rejected (behavior.on.malformed.documents=fail): %w",
			rec.Topic, rec.Partition, rec.Offset, err)
	case MalformedWarn:
		s.log.Warn("record rejected and skipped", "topic", rec.Topic, "partition", rec.Partition,
			"offset", rec.Offset, "err", err)
	case MalformedIgnore:
	default:
		r.failed = append(r.failed, connect.RecordError{Index: i, Err: err})
	}
	return nil
}

func (r *rejections) result() error {
	if len(r.failed) > 0 {
		sort.Slice(r.failed, func(i, j int) bool { return r.failed[i].Index < r.failed[j].Index })
		return &connect.WriteError{Failed: r.failed}
	}
	return nil
}

// toAction interprets a record. ok=false: nothing to do.
func (s *Sink) toAction(r *connect.Record, i int) (action, bool, error) {
	ch, err := change.Interpret(r)
	if err != nil {
		return action{}, false, err
	}
	if ch.Kind == change.Skip {
		s.counters.skipped.Add(1)
		return action{}, false, nil
	}
	if ch.Tombstone {
		switch s.o.nullValues {
		case NullIgnore:
			s.counters.skipped.Add(1)
			return action{}, false, nil
		case NullFail:
			return action{}, false, errors.New("record has a null value (behavior.on.null.values=fail)")
		}
	}
	a := action{rec: i, version: r.Version}
	start := len(s.arena)
	if s.arena, err = s.index(s.arena, r.Topic); err != nil {
		return action{}, false, err
	}
	a.name = string(s.arena[start:])
	s.arena = s.arena[:start]
	if s.o.keyIgnore {
		if ch.Kind == change.Delete {
			// there is no id to delete: an index with key.ignore is append-only
			s.counters.skipped.Add(1)
			return action{}, false, nil
		}
		a.id = r.Topic + "+" + strconv.Itoa(int(r.Partition)) + "+" + strconv.FormatInt(r.Offset, 10)
		a.version = 0
	} else {
		if s.arena, err = change.AppendKey(s.arena, r.Key); err != nil {
			return action{}, false, err
		}
		a.id = string(s.arena[start:])
		s.arena = s.arena[:start]
		if a.id == "" {
			return action{}, false, errors.New("record key renders as an empty document id")
		}
		if len(a.id) > 512 {
			return action{}, false, fmt.Errorf("document id is %d bytes long; Elasticsearch allows 512", len(a.id))
		}
	}
	if ch.Kind == change.Delete {
		a.del = true
		return a, true, nil
	}
	a.row = ch.Row
	switch {
	case s.o.upsert:
		a.merge, a.upsert = true, true
	case len(ch.Unchanged) > 0:
		a.merge, a.keep = true, ch.Unchanged
	}
	return a, true, nil
}

// errBadIndex marks a rendered index name that Elasticsearch cannot have.
var errBadIndex = errors.New("invalid index name")

// index renders the index name of a topic, in lower case.
func (s *Sink) index(dst []byte, topic string) ([]byte, error) {
	start := len(dst)
	tp := change.SplitTopic(topic)
	dst, _ = s.o.index.Render(dst, func(dst []byte, ph string) ([]byte, error) {
		switch ph {
		case "topic":
			return append(dst, tp.Name...), nil
		case "db", "schema":
			return append(dst, tp.DB...), nil
		case "table":
			return append(dst, tp.Table...), nil
		}
		return dst, nil
	})
	for i := start; i < len(dst); i++ {
		if c := dst[i]; 'A' <= c && c <= 'Z' {
			dst[i] = c + 'a' - 'A'
		}
	}
	if err := checkIndexName(string(dst[start:])); err != nil {
		return dst[:start], fmt.Errorf("topic %s: %w: %w", topic, errBadIndex, err)
	}
	return dst, nil
}

var (
	metaIndex  = []byte(`{"index":{"_index":`)
	metaDelete = []byte(`{"delete":{"_index":`)
)

// render builds the item's bulk lines into the arena.
func (s *Sink) render(a *action) error {
	start := len(s.arena)
	b := s.arena
	if a.del {
		b = append(b, metaDelete...)
	} else {
		b = append(b, metaIndex...)
	}
	b, _ = connect.AppendJSON(b, a.target)
	b = append(b, `,"_id":`...)
	b, _ = connect.AppendJSON(b, a.id)
	if a.version != 0 {
		b = append(b, `,"version":`...)
		b = strconv.AppendInt(b, a.version, 10)
		b = append(b, `,"version_type":"external_gte"`...)
	}
	b = append(b, "}}\n"...)
	if !a.del {
		var err error
		if b, err = connect.AppendJSON(b, a.row); err != nil {
			s.arena = b[:start]
			return fmt.Errorf("render document: %w", err)
		}
		b = append(b, '\n')
	}
	s.arena = b
	a.item = b[start:len(b):len(b)]
	return nil
}

// lane returns the lane of a document: the same document always goes to the same lane, so
// its changes are sent in order.
func (s *Sink) lane(a *action, n int) int {
	if n == 1 {
		return 0
	}
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(a.target)
	h.WriteByte(0)
	h.WriteString(a.id)
	return int(h.Sum64() % uint64(n))
}

// send sends every pending action in up to max.in.flight lanes at once and settles them.
func (s *Sink) send(ctx context.Context, acts []action) error {
	n := 0
	for i := range acts {
		if acts[i].state == itemPending {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	lanes := min(s.o.inFlight, (n+s.o.batchSize-1)/s.o.batchSize)
	byLane := make([][]*action, lanes)
	for i := range acts {
		a := &acts[i]
		if a.state != itemPending {
			continue
		}
		l := s.lane(a, lanes)
		byLane[l] = append(byLane[l], a)
	}
	if lanes == 1 {
		return s.runLane(ctx, byLane[0])
	}
	errs := make([]error, lanes)
	var wg sync.WaitGroup
	for l := range byLane {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[l] = s.runLane(ctx, byLane[l])
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// runLane sends a lane's items in order, in bulk requests of at most batch.size items and
// bulk.size.bytes, and retries the refused ones.
func (s *Sink) runLane(ctx context.Context, items []*action) error {
	var body []byte
	for attempt := 0; ; attempt++ {
		for start := 0; start < len(items); {
			body = body[:0]
			end := start
			for end < len(items) && end-start < s.o.batchSize &&
				(end == start || len(body)+len(items[end].item) <= s.o.bulkBytes) {
				body = append(body, items[end].item...)
				end++
			}
			if err := s.bulk(ctx, body, items[start:end]); err != nil {
				return err
			}
			start = end
		}
		retry := items[:0:0]
		var last error
		for i, a := range items {
			if a.state != itemRetry {
				continue
			}
			if a.gone {
				return fmt.Errorf("write to elasticsearch: index %s: %w", a.target, a.err)
			}
			if superseded(items, i) {
				a.state = itemDone
				continue
			}
			last = a.err
			retry = append(retry, a)
		}
		if len(retry) == 0 {
			return nil
		}
		if attempt >= s.o.maxRetries {
			return fmt.Errorf("write to elasticsearch: %d item(s) still refused after %d retries: %w", len(retry), attempt, last)
		}
		d := s.backoff(attempt)
		s.counters.retries.Add(int64(len(retry)))
		s.log.Warn("elasticsearch refused bulk items; retrying", "items", len(retry), "attempt", attempt+1,
			"max_retries", s.o.maxRetries, "backoff", d, "err", last)
		if err := s.sleep(ctx, d); err != nil {
			return err
		}
		for _, a := range retry {
			a.state = itemPending
		}
		items = retry
	}
}

// superseded reports whether items[i], refused for now, need not be retried because a later
// item of the same document with a version at least as new was settled: every item carries
// the whole document, so the later one already decided the document's state.
func superseded(items []*action, i int) bool {
	a := items[i]
	for _, b := range items[i+1:] {
		if b.id == a.id && b.target == a.target && (b.state == itemDone || b.state == itemConflict) && b.version >= a.version {
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
