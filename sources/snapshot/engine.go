package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-cdc/sluice/connect"
)

// Options configure an Engine.
type Options struct {
	Settings Settings
	// Connector is the connector's name, in notifications.
	Connector string
	Logger    *slog.Logger
	// Store keeps commands from the API and the signal topic until the position the source
	// stores says they were applied; nil keeps them in memory only.
	Store connect.Store
	Now   func() time.Time
	// Tables lists the captured tables with their chunk keys (nil Key: the table has none);
	// it may be called from any goroutine and may query the server.
	Tables func(ctx context.Context) ([]Table, error)
	// Lag returns how far the change stream is behind the server; nil: unknown. Called on
	// the Read goroutine.
	Lag func() time.Duration
	// LagBytes returns the source's backlog in bytes (PostgreSQL: the slot's lag) and the
	// limit above which chunks wait (0: none). Called on the Read goroutine.
	LagBytes func() (lag, limit int64)
}

// Engine is the shared logic of incremental and blocking snapshots: the queue of tables and
// its durable commands, the watermark windows and their de-duplication, the Orders of the
// records it emits, throttling, progress and notifications. The source does every read of
// its server and builds the records; it drives the engine from its Read goroutine at the
// boundaries between transactions of its change stream:
//
//	step := e.Begin(base, frontier)
//	switch step.Kind {
//	case StepNotify: emit step.Records
//	case StepOpen:   for each task: read its next chunk consistently, e.Opened(task, Window{...})
//	case StepEmit:   em := e.StartEmit(step.Window, base, frontier); for each row read:
//	                 if em.Keep(key) { rec.Position = em.Next() ... }; em.Done(...)
//	case StepWait:   go on with the stream (with step.Hold: do not), ask again after step.Wait,
//	                 at the next boundary or when Wake() fires
//	}
//
// and, for every row change it decodes of a table the engine is watching, e.Touch. The
// methods marked so may be called from any goroutine; the others only from Read's.
type Engine struct {
	opts Options
	set  Settings
	log  *slog.Logger
	now  func() time.Time

	cmdMu sync.Mutex // serializes storing commands, so that store order is seq order

	mu      sync.Mutex
	nextSeq uint64
	pending []command // stored, not yet applied
	// applying: commands taken from pending by apply whose effect is not published yet;
	// Status shows them as pending until publish replaces the status.
	applying []command
	acked    []byte // highest Order acknowledged
	await    []byte // end Order of the last emitted group until it is acknowledged
	status   Status // published by the Read goroutine
	stats    Stats
	filters  map[string]string // capture filter last stored
	wake     chan struct{}
	ready    chan struct{} // closed when Open is done: commands wait for it
	opened   bool
	// hasPending is len(pending) > 0, read without the lock by Idle
	hasPending atomic.Bool

	// Read goroutine only
	st        state
	enc       []byte    // st encoded; nil when it changed
	windows   []*Window // the open group, in emission order
	started   bool      // the group's emission began
	watch     map[string]*Window
	inline    []command // signals from the stream, applied at the next Begin
	notes     []notice  // notifications to emit at the next Begin
	tokens    float64
	tokensAt  time.Time
	throttled string
	rates     map[string]*rate
}

// New returns an engine. It does no I/O.
func New(opts Options) *Engine {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Settings.ChunkSize <= 0 {
		opts.Settings.ChunkSize = DefaultChunkSize
	}
	if opts.Settings.Parallel <= 0 {
		opts.Settings.Parallel = 1
	}
	e := &Engine{
		opts: opts, set: opts.Settings, log: opts.Logger, now: opts.Now,
		wake: make(chan struct{}, 1), ready: make(chan struct{}), watch: map[string]*Window{}, rates: map[string]*rate{},
		st: state{V: stateVersion}, nextSeq: 1,
	}
	e.publish()
	return e
}

// Settings returns the engine's settings.
func (e *Engine) Settings() Settings { return e.set }

// Store keys of the engine's entries in the connector's store.
const (
	storeCommand = "incremental/command"
	storeFilters = "incremental/filters"
)

// Open restores the engine from the "incremental" object of the position the source resumes
// from (nil: none) and queues the stored commands that position has not applied yet.
func (e *Engine) Open(ctx context.Context, state []byte) error {
	st, err := decodeState(state)
	if err != nil {
		return connect.Permanent(err)
	}
	// commands stored meanwhile wait (their sequence numbers follow the store's)
	e.cmdMu.Lock()
	defer e.cmdMu.Unlock()
	e.st = st
	e.enc = nil
	e.windows, e.started = nil, false
	clear(e.watch)
	var pending []command
	maxSeq := st.Seq
	var filters map[string]string
	if e.opts.Store != nil {
		err := e.opts.Store.Scan(ctx, func(key, value []byte) error {
			switch string(key) {
			case storeCommand:
				var c command
				if err := json.Unmarshal(value, &c); err != nil {
					return fmt.Errorf("stored snapshot command %s: %w", value, err)
				}
				maxSeq = max(maxSeq, c.Seq)
				if c.Seq > st.Seq {
					pending = append(pending, c)
				}
				if c.Filters != nil {
					filters = c.Filters
				}
			case storeFilters:
				if err := json.Unmarshal(value, &filters); err != nil {
					return fmt.Errorf("stored capture filter %s: %w", value, err)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("read snapshot commands: %w", err)
		}
	}
	e.mu.Lock()
	e.pending = pending
	e.hasPending.Store(len(pending) > 0)
	e.nextSeq = maxSeq + 1
	e.filters = filters
	e.acked, e.await = nil, nil
	if !e.opened {
		e.opened = true
		close(e.ready)
	}
	e.mu.Unlock()
	if len(pending) > 0 {
		e.log.Info("incremental snapshot commands to apply", "commands", len(pending), "applied_seq", st.Seq)
	}
	e.publish()
	return nil
}

// ConfigChanged records the capture filter in force (the source's include/exclude lists) and,
// when it differs from the one stored before, queues an incremental snapshot of the tables the
// new filter captures and the old one did not: added(old) lists them. The first call, and a
// call while the source takes a snapshot of every table (fresh), only record the filter. Call
// it from the source's Open after Open.
func (e *Engine) ConfigChanged(ctx context.Context, filters map[string]string, fresh bool, added func(ctx context.Context, old map[string]string) ([]Table, error)) error {
	e.mu.Lock()
	old := e.filters
	e.mu.Unlock()
	if old != nil && equalMaps(old, filters) {
		return nil
	}
	if old == nil || fresh || e.opts.Store == nil {
		return e.storeFilters(ctx, filters)
	}
	tables, err := added(ctx, old)
	if err != nil {
		return err
	}
	if len(tables) == 0 {
		return e.storeFilters(ctx, filters)
	}
	c := command{ID: fmt.Sprintf("config-%d", e.now().UnixMilli()), Type: signalAddTables, Origin: OriginConfig, Kind: TypeIncremental, Filters: filters, At: e.now().UnixMilli()}
	var names []string
	for _, t := range tables {
		if t.Key == nil {
			e.log.Warn("table added to the capture has no primary key and no message.key.columns: it is streamed but not snapshotted", "table", t.ID)
			continue
		}
		c.Tables = append(c.Tables, tableSpec{Table: t.ID, Key: t.Key})
		names = append(names, t.ID)
	}
	if _, err := e.store(ctx, &c); err != nil {
		return err
	}
	e.log.Info("tables added to the capture: snapshotting them incrementally", "tables", strings.Join(names, ","))
	return nil
}

func (e *Engine) storeFilters(ctx context.Context, filters map[string]string) error {
	if e.opts.Store != nil {
		b, _ := json.Marshal(filters)
		if err := e.opts.Store.Append(ctx, []byte(storeFilters), b); err != nil {
			return fmt.Errorf("store capture filter: %w", err)
		}
	}
	e.mu.Lock()
	e.filters = filters
	e.mu.Unlock()
	return nil
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Skip forgets the queue and marks every stored command applied: the source begins a new
// snapshot of every table, which covers whatever was asked before.
func (e *Engine) Skip() {
	e.mu.Lock()
	e.st.Seq = max(e.st.Seq, e.nextSeq-1)
	e.pending = nil
	e.hasPending.Store(false)
	e.mu.Unlock()
	e.st.Tables = nil
	e.st.Paused = false
	e.windows, e.started = nil, false
	clear(e.watch)
	e.inline = nil
	e.changed()
}

// ErrRequest is wrapped by the errors of requests that cannot be applied as given.
var ErrRequest = errors.New("invalid snapshot request")

func requestErr(format string, args ...any) error {
	return connect.Permanent(fmt.Errorf("%w: %s", ErrRequest, fmt.Sprintf(format, args...)))
}

// Signal applies a signal from the API (OriginAPI) or the signal topic (OriginTopic): it
// returns once the command is stored, with the status document. A request that cannot be
// applied is a connect.Permanent error wrapping ErrRequest. Any goroutine.
func (e *Engine) Signal(ctx context.Context, typ string, data []byte, origin, id string) ([]byte, error) {
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("the source is starting: %w", ctx.Err())
	}
	c, err := e.command(ctx, typ, data, origin, id)
	if err != nil {
		return nil, err
	}
	if _, err := e.store(ctx, &c); err != nil {
		return nil, err
	}
	return e.StatusJSON(), nil
}

// SignalInline applies a signal read from the change stream (the signal table): on the Read
// goroutine, at the next Begin, without storing it (the stream replays it if the position
// after it was not stored).
func (e *Engine) SignalInline(ctx context.Context, typ string, data []byte, id string) error {
	c, err := e.command(ctx, typ, data, OriginSource, id)
	if err != nil {
		return err
	}
	e.inline = append(e.inline, c)
	return nil
}

// command validates a signal and resolves its tables.
func (e *Engine) command(ctx context.Context, typ string, data []byte, origin, id string) (command, error) {
	typ = strings.ToLower(strings.TrimSpace(typ))
	c := command{ID: id, Type: typ, Origin: origin, At: e.now().UnixMilli()}
	if c.ID == "" {
		c.ID = fmt.Sprintf("%s-%d", origin, e.now().UnixNano())
	}
	switch typ {
	case SignalPause, SignalResume:
		if len(bytes.TrimSpace(data)) > 0 {
			var v map[string]json.RawMessage
			if err := json.Unmarshal(data, &v); err != nil {
				return c, requestErr("%s data must be a JSON object (got %s)", typ, data)
			}
		}
		return c, nil
	case SignalExecute, SignalStop:
	default:
		return c, requestErr("unknown signal type %q: want %s, %s, %s or %s", typ, SignalExecute, SignalStop, SignalPause, SignalResume)
	}
	req, err := parseRequest(data)
	if err != nil {
		return c, requestErr("%v", err)
	}
	c.Kind = req.Type
	if typ == SignalStop {
		// stop matches the tables of the queue, not the server's
		for i, p := range req.DataCollections {
			if _, err := compileName(p); err != nil {
				return c, requestErr("data-collections[%d]: %v", i, err)
			}
			c.Tables = append(c.Tables, tableSpec{Table: p})
		}
		return c, nil
	}
	if len(req.DataCollections) == 0 {
		return c, requestErr("data-collections is required: the tables to snapshot (regular expressions of <schema>.<table> names)")
	}
	if e.opts.Tables == nil {
		return c, requestErr("this source cannot list its tables")
	}
	captured, err := e.opts.Tables(ctx)
	if err != nil {
		return c, fmt.Errorf("list captured tables: %w", err)
	}
	tables, err := matchTables(req.DataCollections, captured)
	if err != nil {
		return c, requestErr("%v", err)
	}
	for i, cond := range req.AdditionalConditions {
		re, _ := compileName(cond.DataCollection)
		hit := false
		for _, t := range tables {
			if re.MatchString(t.ID) || strings.EqualFold(t.ID, cond.DataCollection) {
				hit = true
			}
		}
		if !hit {
			return c, requestErr("additional-conditions[%d].data-collection %q matches none of the requested tables", i, cond.DataCollection)
		}
	}
	var problems []string
	for _, t := range tables {
		key := t.Key
		if req.SurrogateKey != "" {
			key = []string{req.SurrogateKey}
		}
		if len(key) == 0 {
			problems = append(problems, fmt.Sprintf("table %s has no primary key: set message.key.columns for it (a unique, non-null column list) or give a surrogate-key", t.ID))
			continue
		}
		c.Tables = append(c.Tables, tableSpec{Table: t.ID, Filter: req.filterFor(t.ID), Key: key, ChunkSize: req.ChunkSize})
	}
	if len(problems) > 0 {
		return c, requestErr("%s", strings.Join(problems, "; "))
	}
	return c, nil
}

// store appends a command to the store (durable on return) and queues it.
func (e *Engine) store(ctx context.Context, c *command) (uint64, error) {
	e.cmdMu.Lock()
	defer e.cmdMu.Unlock()
	e.mu.Lock()
	c.Seq = e.nextSeq
	e.mu.Unlock()
	if e.opts.Store != nil {
		b, _ := json.Marshal(c)
		if err := e.opts.Store.Append(ctx, []byte(storeCommand), b); err != nil {
			return 0, fmt.Errorf("store snapshot command: %w", err)
		}
	}
	e.mu.Lock()
	e.nextSeq++
	e.pending = append(e.pending, *c)
	e.hasPending.Store(true)
	if c.Filters != nil {
		e.filters = c.Filters
	}
	e.mu.Unlock()
	e.signal()
	return c.Seq, nil
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Wake fires when something the Read goroutine waits for may have happened: a command
// arrived, an acknowledgement opened the gate. Any goroutine.
func (e *Engine) Wake() <-chan struct{} { return e.wake }

// Acked records that everything up to order is durable in the log. Any goroutine.
func (e *Engine) Acked(order []byte) {
	e.mu.Lock()
	if bytes.Compare(order, e.acked) > 0 {
		e.acked = append(e.acked[:0:0], order...)
	}
	opened := e.await != nil && bytes.Compare(e.acked, e.await) >= 0
	if opened {
		e.await = nil
	}
	e.mu.Unlock()
	if opened {
		e.signal()
	}
}

// CommitNow reports whether an emitted chunk waits for its acknowledgement: the runtime then
// commits positions at once instead of at its flush interval. Any goroutine.
func (e *Engine) CommitNow() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.await != nil
}

func (e *Engine) gateOpen() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.await == nil
}

// State returns the "incremental" object for the State of the positions the source emits,
// or nil while no command was ever applied. The slice must not be modified.
func (e *Engine) State() []byte {
	if e.st.zero() {
		return nil
	}
	if e.enc == nil {
		e.enc = e.st.encode()
	}
	return e.enc
}

func (e *Engine) changed() {
	e.enc = nil
	e.publish()
}

// Idle reports whether Begin has nothing to do: no table to read (or paused), no window
// open, no command or notification waiting. The source may skip Begin then.
func (e *Engine) Idle() bool {
	if len(e.windows) > 0 || len(e.inline) > 0 || len(e.notes) > 0 || e.hasPending.Load() {
		return false
	}
	return len(e.st.Tables) == 0 || e.st.Paused
}

// Watching reports whether a window of the table is open: the source must then report the
// table's row changes with Touch.
func (e *Engine) Watching(table string) bool { return e.watch[table] != nil }

// Touch reports a row change of a watched table: key is the changed row's chunk key in the
// encoding the source uses for chunk rows (an update that changes the key reports both),
// mark the position of its transaction in the stream and txid its id (0 if the source has
// none). The row is dropped from the window if the window's read may not include the change.
func (e *Engine) Touch(table, key string, mark Mark, txid uint64) {
	w := e.watch[table]
	if w == nil || !w.misses(mark, txid) {
		return
	}
	if w.touched == nil {
		w.touched = map[string]*touch{}
	}
	w.touched[key] = dropped
}

// Partial is a change whose event carried only part of the row (PostgreSQL's unchanged TOAST
// values): the source's image of the columns it has, and the change's version.
type Partial struct {
	Image   any
	Version int64
}

// TouchPartial reports an update of a watched table whose event lacks some columns. If the
// window's read may not include it, the chunk row is not dropped (the stream's event alone
// would leave the missing columns unknown to the views) but emitted with the partial images
// applied in order (Emission.Partials), at a version not below theirs. A full change of the
// row in the window drops it as Touch does.
func (e *Engine) TouchPartial(table, key string, mark Mark, txid uint64, p Partial) {
	w := e.watch[table]
	if w == nil || !w.misses(mark, txid) {
		return
	}
	if w.touched == nil {
		w.touched = map[string]*touch{}
	}
	t := w.touched[key]
	if t == dropped {
		return
	}
	if t == nil {
		t = &touch{}
		w.touched[key] = t
	}
	t.partials = append(t.partials, p)
}

// touch is what the stream did to a row of a window: dropped, or partial updates to apply.
type touch struct{ partials []Partial }

var dropped = &touch{}

// TouchAll reports a change of every row of a watched table (a truncate): the window's rows
// are all dropped if its read may not include it.
func (e *Engine) TouchAll(table string, mark Mark, txid uint64) {
	if w := e.watch[table]; w != nil && w.misses(mark, txid) {
		w.void = true
	}
}

// Reset drops the open windows (the source lost its stream and starts it again from the
// position of the last batch it returned); their tables are read again.
func (e *Engine) Reset() {
	e.windows, e.started = nil, false
	clear(e.watch)
	e.inline = nil
	e.publish()
}

// Windows returns the open windows (for the source to release what it holds for them).
func (e *Engine) Windows() []*Window { return e.windows }

// StepKind says what the source should do next.
type StepKind int

const (
	StepWait   StepKind = iota // go on with the stream; nothing to do now
	StepNotify                 // emit Step.Records (none: a heartbeat carries the new state)
	StepOpen                   // read the next chunk of each of Step.Tasks and report it with Opened
	StepEmit                   // emit the rows of Step.Window
)

// Step is what Begin asks of the source.
type Step struct {
	Kind    StepKind
	Records []connect.Record
	Tasks   []*Task
	Window  *Window
	// Wait (StepWait) is when to ask again at the latest; 0: at the next boundary or Wake.
	Wait time.Duration
	// Hold (StepWait) says not to process the stream meanwhile (a blocking snapshot).
	Hold bool
}

// Window is one open read: a table's next chunk, consistent with a point of the stream.
type Window struct {
	Task *Task
	// Low and High place the read in the stream: every transaction before High is in it, and
	// the changes of transactions at or after Low may be missing from it. For an exact read
	// (MariaDB's consistent snapshot) Low = High.
	Low, High Mark
	// Invisible reports transactions (by id) that the read did not see wherever they are in
	// the stream (PostgreSQL: those the read's MVCC snapshot does not see); nil: none.
	Invisible func(txid uint64) bool
	// Data is the source's: the rows read, or its open transaction.
	Data any

	chunk   uint64
	touched map[string]*touch
	void    bool
}

// misses reports whether the window's read may not include a transaction's change.
func (w *Window) misses(mark Mark, txid uint64) bool {
	return mark >= w.Low || w.Invisible != nil && w.Invisible(txid)
}

// Blocking reports whether the window belongs to a blocking snapshot: its rows are read at
// emission, a chunk at a time, while the stream waits.
func (w *Window) Blocking() bool { return w.Task.Type == TypeBlocking }

// Chunk is the window's chunk id.
func (w *Window) Chunk() uint64 { return w.chunk }

// Begin says what to do at a boundary of the stream: base is the Order of the last stream
// record or heartbeat the source emitted, frontier the stream position up to which every
// transaction has been processed.
func (e *Engine) Begin(base []byte, frontier Mark) Step {
	if recs := e.apply(base, frontier); recs != nil {
		return Step{Kind: StepNotify, Records: recs}
	}
	if len(e.windows) > 0 {
		w := e.windows[0]
		if !e.started {
			for _, x := range e.windows {
				if x.High > frontier {
					return Step{Kind: StepWait}
				}
			}
			if !e.gateOpen() {
				return Step{Kind: StepWait}
			}
		} else if w.Blocking() {
			if !e.gateOpen() {
				return Step{Kind: StepWait, Hold: true}
			}
			if why, d := e.throttle(); d > 0 {
				e.setThrottled(why)
				return Step{Kind: StepWait, Wait: d, Hold: true}
			}
			e.setThrottled("")
		}
		return Step{Kind: StepEmit, Window: w}
	}
	if e.st.Paused || len(e.st.Tables) == 0 {
		e.setThrottled("")
		return Step{Kind: StepWait}
	}
	if why, d := e.throttle(); d > 0 {
		e.setThrottled(why)
		return Step{Kind: StepWait, Wait: d}
	}
	e.setThrottled("")
	first := e.st.Tables[0]
	if first.Type == TypeBlocking {
		return Step{Kind: StepOpen, Tasks: []*Task{first}}
	}
	var tasks []*Task
	for _, t := range e.st.Tables {
		if t.Type != TypeIncremental || len(tasks) == e.set.Parallel {
			break
		}
		tasks = append(tasks, t)
	}
	return Step{Kind: StepOpen, Tasks: tasks}
}

// Prefetch returns the tasks whose next chunks the next Begin would read, when nothing would
// come first (no window open, no command or notification waiting, not paused or throttled):
// the source may read them now, while it emits the last chunk, provided it registers them with
// Opened before it processes any further transaction of the stream. nil: nothing to read ahead.
func (e *Engine) Prefetch() []*Task {
	if len(e.windows) > 0 || len(e.inline) > 0 || len(e.notes) > 0 || e.hasPending.Load() || e.st.Paused || len(e.st.Tables) == 0 {
		return nil
	}
	if _, d := e.throttle(); d > 0 {
		return nil
	}
	var tasks []*Task
	for _, t := range e.st.Tables {
		if t.Type != TypeIncremental || len(tasks) == e.set.Parallel {
			break
		}
		tasks = append(tasks, t)
	}
	return tasks
}

// Opened registers the window the source opened for a task (of the last StepOpen). A task
// the source could not open (it retries) simply gets no window; its table comes again.
func (e *Engine) Opened(w *Window) {
	e.st.Chunk++
	w.chunk = e.st.Chunk
	e.windows = append(e.windows, w)
	e.watch[w.Task.Table] = w
	e.changed()
}

// SetTotal records a task's estimated row count.
func (e *Engine) SetTotal(t *Task, total int64) {
	t.Total = total
	e.changed()
}

// Abandon ends a task that cannot be read any more (its table is gone): status is the
// reason, e.g. "SKIPPED".
func (e *Engine) Abandon(t *Task, status string) {
	e.dropWindowOf(t)
	e.notes = append(e.notes, e.finish(t, status)...)
	e.changed()
}

// Emission is the emission of one window's rows (for a blocking window: of one chunk).
type Emission struct {
	e    *Engine
	w    *Window
	base []byte
	mark Mark
	unit uint64
	n    uint32
	last []byte
	slab []byte // room for the next Orders: one allocation per many records
}

// StartEmit begins emitting a window's rows (the source calls it for a StepEmit).
func (e *Engine) StartEmit(w *Window, base []byte, frontier Mark) *Emission {
	e.st.Emit++
	return &Emission{e: e, w: w, base: append([]byte(nil), base...), mark: frontier, unit: e.st.Emit}
}

// Keep reports whether a row read by the window is emitted: false when the stream delivered
// a change of it that the read may not include.
func (em *Emission) Keep(key string) bool {
	if em.w.void {
		return false
	}
	return em.w.touched[key] != dropped
}

// Partials returns the partial images to apply to a kept row, in stream order (nil: none).
func (em *Emission) Partials(key string) []Partial {
	if t := em.w.touched[key]; t != nil && t != dropped {
		return t.partials
	}
	return nil
}

// Next returns the Position of the next emitted record (an Order; no State).
func (em *Emission) Next() connect.Position {
	size := len(em.base) + orderSuffixLen
	if len(em.slab) < size {
		em.slab = make([]byte, size*orderSlab)
	}
	o := appendOrder(em.slab[:0:size], em.base, em.mark, em.unit, em.n)
	em.slab = em.slab[size:]
	em.n++
	em.last = o
	return connect.Position{Order: o}
}

// Done ends the emission: read is the number of rows the window read (for a blocking
// window: this chunk), last the chunk key of the last of them (nil if none), exhausted
// whether the read reached the end of the table. It returns the notification records to
// emit after the rows and the Order of the batch Position that ends the emission.
func (em *Emission) Done(read int, last []string, exhausted bool) ([]connect.Record, []byte) {
	e := em.e
	t := em.w.Task
	t.Rows += int64(read)
	t.Emitted += int64(em.n)
	if last != nil {
		t.After = last
	}
	e.noteRate(t)
	var notes []notice
	notes = append(notes, notice{kind: "IN_PROGRESS", agg: aggregate(t), data: connect.Row{
		{Name: "connector_name", Value: e.opts.Connector},
		{Name: "data_collections", Value: t.Table},
		{Name: "current_collection_in_progress", Value: t.Table},
		{Name: "last_processed_key", Value: keyText(t.After)},
		{Name: "chunk_id", Value: fmt.Sprint(em.w.chunk)},
		{Name: "rows_scanned", Value: fmt.Sprint(t.Rows)},
	}})
	e.consume(read)
	e.addScanned(t.Table, int64(read))
	if exhausted || !em.w.Blocking() {
		e.dropWindow(t.Table)
		e.windows = e.windows[1:]
	} else {
		// a blocking window reads its next chunk in the same transaction
		e.st.Chunk++
		em.w.chunk = e.st.Chunk
	}
	if exhausted {
		notes = append(notes, e.finish(t, "SUCCEEDED")...)
	}
	e.started = len(e.windows) > 0
	recs := em.notices(notes)
	end := em.last
	if end == nil {
		end = appendOrder(nil, em.base, em.mark, em.unit, ^uint32(0))
	}
	if len(e.windows) == 0 || em.w.Blocking() {
		// the group (or this blocking chunk) is out: the next waits for its acknowledgement
		e.mu.Lock()
		e.await = end
		if bytes.Compare(e.acked, e.await) >= 0 {
			e.await = nil
		}
		e.mu.Unlock()
	}
	e.changed()
	return recs, end
}

func (e *Engine) dropWindow(table string) {
	delete(e.watch, table)
}

// finish moves a task from the queue to the finished tables and returns its notifications.
func (e *Engine) finish(t *Task, status string) []notice {
	for i, x := range e.st.Tables {
		if x == t {
			e.st.Tables = append(e.st.Tables[:i], e.st.Tables[i+1:]...)
			break
		}
	}
	now := e.now().UnixMilli()
	e.st.addDone(Finished{Table: t.Table, Request: t.Request, Rows: t.Rows, Emitted: t.Emitted, Status: status, Finished: now})
	delete(e.rates, t.Table)
	e.log.Info("snapshot of table done", "table", t.Table, "type", t.Type, "status", status, "rows", t.Rows, "emitted", t.Emitted)
	out := []notice{{kind: "TABLE_SCAN_COMPLETED", agg: aggregate(t), data: connect.Row{
		{Name: "connector_name", Value: e.opts.Connector},
		{Name: "data_collection", Value: t.Table},
		{Name: "scanned_collection", Value: t.Table},
		{Name: "total_rows_scanned", Value: fmt.Sprint(t.Rows)},
		{Name: "status", Value: status},
	}}}
	last := true
	for _, x := range e.st.Tables {
		if x.Request == t.Request {
			last = false
		}
	}
	if last {
		out = append(out, notice{kind: "COMPLETED", agg: aggregate(t), data: connect.Row{{Name: "connector_name", Value: e.opts.Connector}}})
	}
	return out
}

func aggregate(t *Task) string {
	if t != nil && t.Type == TypeBlocking {
		return "Blocking Snapshot"
	}
	return "Incremental Snapshot"
}

func keyText(k []string) string {
	if k == nil {
		return ""
	}
	b, _ := json.Marshal(k)
	return string(b)
}

// apply applies the pending and inline commands, returning their notifications.
func (e *Engine) apply(base []byte, frontier Mark) []connect.Record {
	e.mu.Lock()
	cmds := e.pending
	e.pending = nil
	e.applying = cmds
	e.hasPending.Store(false)
	e.mu.Unlock()
	if len(cmds) > 0 {
		defer func() { // published by changed below, unless apply stopped before
			e.mu.Lock()
			e.applying = nil
			e.mu.Unlock()
		}()
	}
	cmds = append(cmds, e.inline...)
	e.inline = nil
	if len(cmds) == 0 && len(e.notes) == 0 {
		return nil
	}
	if len(cmds) == 0 && !e.set.NotifySink && !e.set.NotifyLog {
		e.notes = nil
		return nil
	}
	notes := e.notes
	e.notes = nil
	for _, c := range cmds {
		notes = append(notes, e.applyOne(c)...)
		if c.Seq > e.st.Seq {
			e.st.Seq = c.Seq
		}
	}
	e.changed()
	if len(notes) == 0 {
		// no record, but a new state: a batch carries it (commands are durable once the
		// position after them is)
		return []connect.Record{}
	}
	e.st.Emit++
	em := &Emission{e: e, base: append([]byte(nil), base...), mark: frontier, unit: e.st.Emit}
	return em.notices(notes)
}

func (e *Engine) applyOne(c command) []notice {
	conn := connect.Field{Name: "connector_name", Value: e.opts.Connector}
	switch c.Type {
	case SignalPause:
		if e.st.Paused {
			return nil
		}
		e.st.Paused = true
		e.log.Info("incremental snapshot paused", "origin", c.Origin)
		return []notice{{kind: "PAUSED", agg: "Incremental Snapshot", data: connect.Row{conn}}}
	case SignalResume:
		if !e.st.Paused {
			return nil
		}
		e.st.Paused = false
		e.log.Info("incremental snapshot resumed", "origin", c.Origin)
		return []notice{{kind: "RESUMED", agg: "Incremental Snapshot", data: connect.Row{conn}}}
	case SignalStop:
		var stopped []string
		var notes []notice
		keep := e.st.Tables[:0:0]
		for _, t := range e.st.Tables {
			if stopMatches(c, t) {
				stopped = append(stopped, t.Table)
				e.dropWindowOf(t)
				notes = append(notes, e.finishQuiet(t, "STOPPED"))
				continue
			}
			keep = append(keep, t)
		}
		e.st.Tables = keep
		if len(stopped) == 0 {
			return nil
		}
		e.log.Info("snapshot stopped", "tables", strings.Join(stopped, ","), "origin", c.Origin)
		return append(notes, notice{kind: "ABORTED", agg: "Incremental Snapshot", data: connect.Row{conn, {Name: "data_collections", Value: strings.Join(stopped, ",")}}})
	case SignalExecute, signalAddTables:
		var added []string
		agg := "Incremental Snapshot"
		if c.Kind == TypeBlocking {
			agg = "Blocking Snapshot"
		}
		for _, ts := range c.Tables {
			if e.queued(ts.Table) {
				e.log.Info("table already queued for a snapshot; request ignored for it", "table", ts.Table, "request", c.ID)
				continue
			}
			size := ts.ChunkSize
			if size <= 0 {
				size = e.set.ChunkSize
			}
			e.st.Tables = append(e.st.Tables, &Task{
				Table: ts.Table, Request: c.ID, Type: c.Kind, Filter: ts.Filter, ChunkSize: size, Key: ts.Key,
				Total: -1, Started: e.now().UnixMilli(),
			})
			added = append(added, ts.Table)
		}
		if len(added) == 0 {
			return nil
		}
		e.log.Info("snapshot requested", "tables", strings.Join(added, ","), "type", c.Kind, "origin", c.Origin, "request", c.ID)
		return []notice{{kind: "STARTED", agg: agg, data: connect.Row{conn, {Name: "data_collections", Value: strings.Join(added, ",")}}}}
	}
	return nil
}

func stopMatches(c command, t *Task) bool {
	if len(c.Tables) == 0 {
		return c.Kind == "" || c.Kind == t.Type || c.Kind == TypeIncremental
	}
	for _, ts := range c.Tables {
		re, err := compileName(ts.Table)
		if err == nil && re.MatchString(t.Table) || strings.EqualFold(ts.Table, t.Table) {
			return true
		}
	}
	return false
}

func (e *Engine) dropWindowOf(t *Task) {
	if e.watch[t.Table] == nil {
		return
	}
	delete(e.watch, t.Table)
	for i, w := range e.windows {
		if w.Task == t {
			e.windows = append(e.windows[:i:i], e.windows[i+1:]...)
			break
		}
	}
	if len(e.windows) == 0 {
		e.started = false
	}
}

// finishQuiet is finish without the COMPLETED notice (stop reports ABORTED instead).
func (e *Engine) finishQuiet(t *Task, status string) notice {
	n := e.finish(t, status)
	return n[0]
}

func (e *Engine) queued(table string) bool {
	for _, t := range e.st.Tables {
		if t.Table == table {
			return true
		}
	}
	return false
}

// notice is a notification before it becomes a record.
type notice struct {
	kind string
	agg  string
	data connect.Row
}

// notices turns notifications into records (Debezium's notification shape) with the next
// Orders of the emission; with the log channel they are logged too.
func (em *Emission) notices(notes []notice) []connect.Record {
	e := em.e
	if e.set.NotifyLog {
		for _, n := range notes {
			e.log.Info("snapshot notification", "type", n.kind, "aggregate_type", n.agg, "data", rowText(n.data))
		}
	}
	if !e.set.NotifySink || len(notes) == 0 {
		return nil
	}
	now := e.now()
	out := make([]connect.Record, 0, len(notes))
	for _, n := range notes {
		pos := em.Next()
		id := fmt.Sprintf("%s-%d-%d", e.opts.Connector, em.unit, em.n-1)
		out = append(out, connect.Record{
			Topic: e.set.NotifyTopic, Partition: -1, Offset: -1, Timestamp: now,
			Value: connect.Row{
				{Name: "id", Value: id},
				{Name: "aggregate_type", Value: n.agg},
				{Name: "type", Value: n.kind},
				{Name: "additional_data", Value: n.data},
				{Name: "timestamp", Value: now.UnixMilli()},
			},
			Position: pos,
		})
	}
	return out
}

func rowText(r connect.Row) string {
	b, err := connect.MarshalJSONValue(r)
	if err != nil {
		return fmt.Sprint(r)
	}
	return string(b)
}
