package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/sources/snapshot"
)

// Source captures one PostgreSQL database. See the package documentation.
type Source struct {
	set *settings
	env connect.Env
	log *slog.Logger
	now func() time.Time

	// Read's goroutine (and Open, before it)
	cat     *pgx.Conn // catalog queries and the snapshot transaction
	server  serverInfo
	types   *typeDecoders
	tables  map[uint32]*table // stream: by relation id, from Relation messages
	epoch   uint32
	phase   phase
	snap    *snapshotter
	stream  *streamState
	rc      rowChange // the row change being processed, reused
	spill   *spillDir
	opened  connect.Position // what Open was given
	lost    error            // the connection was lost with this error; Read reconnects
	attempt int
	backoff time.Duration
	nextTry time.Time
	emitted connect.Position // the position of the last batch Read returned
	cur     position         // the newest position the emitted records reach
	lastOut time.Time        // when the last batch (with or without records) was returned

	// receiver and monitor goroutines
	rcv       *receiver
	rcvCancel context.CancelFunc
	mon       *monitor
	monCancel context.CancelFunc
	wg        sync.WaitGroup

	// shared with Ack (any goroutine), under ackMu
	ackMu    sync.Mutex
	acked    pglogrepl.LSN // the highest LSN known durable in the log (of the current epoch)
	ackEpoch uint32

	st *stats

	// incremental snapshots (incremental.go); incr's control methods run on any goroutine,
	// the rest is Read's
	incr        *snapshot.Engine
	incrConns   []*pgx.Conn
	incrModels  map[string]*incrModel
	incrRing    xidRing
	engineOrder []byte                          // Order of the last record or batch the engine made
	keyBuf      []byte                          // scratch of touch
	wantWALEnd  pglogrepl.LSN                   // a position watermark the stream must reach
	prefetch    *snapshot.ReadAhead[openResult] // the next chunks, read while the last was emitted
	freshSnap   bool                            // start began a snapshot from scratch

	// boxed once for the records
	boxPrefix, boxDB any
	nowMs            any          // the envelope's ts_ms: the time the current Read began
	slab             connect.Slab // the current batch's records are built from it (on Read's goroutine)
	posSlab          connect.Slab // the Orders of the current batch's snapshot records (never recycled)
}

type phase int

const (
	phaseNone phase = iota
	phaseSnapshotting
	phaseStreaming
	phaseDone // initial_only after its snapshot: nothing more to read
)

var _ connect.Source = (*Source)(nil)

func newSource(cfg connect.Config, env connect.Env) (connect.Source, error) {
	set, err := settingsFrom(cfg)
	if err != nil {
		return nil, connect.Permanent(err)
	}
	return New(set, env), nil
}

// New returns a source for already validated settings. It does no I/O.
func New(set *settings, env connect.Env) *Source {
	log := env.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Source{set: set, env: env, log: log, now: time.Now, st: newStats(), boxPrefix: set.prefix, boxDB: set.dbname}
	s.incr = s.newEngine()
	return s
}

// NewFromConfig parses a configuration map (the same keys as a connector's config) and
// returns a source; for tests and tools that drive the source without the runtime.
func NewFromConfig(raw map[string]string, env connect.Env) (*Source, error) {
	p := Plugin()
	cfg, errs := p.ParseConfig(raw)
	if len(errs) > 0 {
		return nil, connect.Permanent(fmt.Errorf("postgres source config: %w", errors.Join(fieldErrors(errs)...)))
	}
	set, err := settingsFrom(cfg)
	if err != nil {
		return nil, connect.Permanent(err)
	}
	return New(set, env), nil
}

func fieldErrors(fes []connect.FieldError) []error {
	out := make([]error, len(fes))
	for i, fe := range fes {
		out[i] = fe
	}
	return out
}

// Stats returns the source's counters; safe to call concurrently with everything.
func (s *Source) Stats() Stats {
	st := s.st.snapshot()
	es := s.incr.Stats()
	st.IncrementalSnapshotRunning = es.IncrementalSnapshotRunning
	st.IncrementalSnapshotPaused = es.IncrementalSnapshotPaused
	st.RemainingTableCount = es.RemainingTableCount
	st.ChunkID = es.ChunkID
	return st
}

// Open connects, runs the pre-flight checks, prepares the publication and the slot and
// positions the source after `after` (see the package documentation for what happens when
// that position can no longer be resumed).
func (s *Source) Open(ctx context.Context, after connect.Position) error {
	s.opened = after.Clone()
	s.emitted = s.opened
	var incr []byte
	if !after.IsZero() {
		if p, err := decodePosition(after); err == nil {
			// the runtime opens the source at a position the log holds
			s.setDurable(p.Epoch, p.flushLSN())
			incr = p.Incr
		}
	}
	if err := s.incr.Open(ctx, incr); err != nil {
		return err
	}
	if err := s.start(ctx, after, true); err != nil {
		return err
	}
	if s.set.snapshotMode != SnapshotInitialOnly {
		if err := s.incr.ConfigChanged(ctx, s.captureFilters(), s.freshSnap, s.addedTables); err != nil {
			return err
		}
	}
	s.freshSnap = false
	s.startMonitor()
	return nil
}

// start (re)establishes everything from a position: Open calls it, and Read after losing
// the connection, with the position of the last batch it returned.
func (s *Source) start(ctx context.Context, after connect.Position, first bool) error {
	var from *position
	if !after.IsZero() {
		p, err := decodePosition(after)
		if err != nil {
			return connect.Permanent(fmt.Errorf("postgres source: stored position %s: %w", after, err))
		}
		from = &p
		s.epoch = p.Epoch
		s.setEpoch(p.Epoch)
	}
	c, err := s.set.connect(ctx)
	if err != nil {
		return err
	}
	s.cat = c
	s.types = newTypeDecoders(s.set, func(ctx context.Context, oid uint32) (pgTypeInfo, error) {
		return lookupType(ctx, s.cat, oid)
	})
	s.tables = map[uint32]*table{}
	if s.server, err = preflight(ctx, c, s.set, s.log, first); err != nil {
		return err
	}
	if s.spill == nil && s.set.protoVersion == 2 {
		if s.spill, err = openSpillDir(s.set.spillDir, s.set.slot); err != nil {
			return err
		}
	}

	if s.set.snapshotMode == SnapshotInitialOnly {
		return s.startInitialOnly(ctx, from)
	}
	slot, err := querySlot(ctx, c, s.set.slot)
	if err != nil {
		return err
	}
	if err := checkSlotKind(slot, s.set); err != nil {
		return err
	}
	switch {
	case from == nil:
		return s.startFresh(ctx, slot)
	case from.Snapshot != nil:
		if err := s.resumable(slot, from.Snapshot.LSN, after); err != nil {
			return s.positionLost(ctx, slot, err)
		}
		return s.startSnapshot(ctx, from.Snapshot.LSN, from.Snapshot, "")
	default:
		lsn, _ := from.resumeLSN()
		if err := s.resumable(slot, lsn, after); err != nil {
			return s.positionLost(ctx, slot, err)
		}
		return s.startStream(ctx, *from)
	}
}

// startFresh starts a connector that has no stored position.
func (s *Source) startFresh(ctx context.Context, slot slotInfo) error {
	if slot.Exists && slot.WALStatus == "lost" {
		s.log.Warn("replication slot has lost WAL and no position is stored: dropping and creating it again", "slot", s.set.slot)
		if err := dropSlot(ctx, s.cat, s.set.slot, s.set.slotRetryDelay); err != nil {
			return err
		}
		slot = slotInfo{}
	}
	if s.set.snapshotMode == SnapshotNoData {
		lsn := slot.Confirmed
		if !slot.Exists {
			res, conn, err := createSlot(ctx, s.set)
			if err != nil {
				return err
			}
			_ = conn.Close(context.WithoutCancel(ctx))
			lsn = res
		}
		return s.startStream(ctx, position{Epoch: s.epoch, LSN: lsn, End: lsn})
	}
	if slot.Exists {
		// A slot made earlier (by a previous run that stored nothing yet, or by someone
		// else) has no exported snapshot any more: read a fresh snapshot and stream from the
		// slot's position, which is older; the changes in between are replayed on top of it.
		s.log.Info("replication slot exists but no position is stored: snapshot, then stream from the slot", "slot", s.set.slot, "lsn", slot.Confirmed)
		return s.startSnapshot(ctx, slot.Confirmed, nil, "")
	}
	lsn, conn, snapshotName, err := createSlotExport(ctx, s.set)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	s.log.Info("replication slot created", "slot", s.set.slot, "lsn", lsn)
	return s.startSnapshot(ctx, lsn, nil, snapshotName)
}

// startInitialOnly reads a snapshot without a slot (snapshot.mode=initial_only).
func (s *Source) startInitialOnly(ctx context.Context, from *position) error {
	if from != nil && from.Snapshot == nil {
		s.phase = phaseDone
		s.st.snapDone.Store(true)
		return nil
	}
	var resume *snapshotPos
	if from != nil {
		resume = from.Snapshot
	}
	return s.startSnapshot(ctx, 0, resume, "")
}

// resumable checks that the slot can still deliver everything after lsn.
func (s *Source) resumable(slot slotInfo, lsn pglogrepl.LSN, after connect.Position) error {
	switch {
	case !slot.Exists:
		return fmt.Errorf("replication slot %q does not exist, but the stored position (%s) needs it: the changes since then are no longer available",
			s.set.slot, lsn)
	case slot.WALStatus == "lost":
		return fmt.Errorf("replication slot %q has lost the WAL the stored position (%s) needs (wal_status = lost, restart_lsn %s): "+
			"the server removed it, e.g. because of max_slot_wal_keep_size", s.set.slot, lsn, slot.Restart)
	case slot.Confirmed > lsn:
		return fmt.Errorf("replication slot %q is at %s (confirmed_flush_lsn), past the stored position %s: the changes in between "+
			"were confirmed by another client and will not be sent again", s.set.slot, slot.Confirmed, lsn)
	}
	return nil
}

// positionLost handles a stored position the slot can no longer serve: a new snapshot with
// snapshot.mode=when_needed, else a permanent error that says what to do.
func (s *Source) positionLost(ctx context.Context, slot slotInfo, cause error) error {
	if s.set.snapshotMode != SnapshotWhenNeeded {
		return connect.Permanent(fmt.Errorf("postgres source: position lost: %w. To capture again, set %s=%s (a new snapshot of every table) "+
			"or delete the connector's stored offsets and start over", cause, KeySnapshotMode, SnapshotWhenNeeded))
	}
	s.log.Warn("position lost: taking a new snapshot (snapshot.mode=when_needed)", "err", cause)
	if slot.Exists {
		if err := dropSlot(ctx, s.cat, s.set.slot, s.set.slotRetryDelay); err != nil {
			return err
		}
	}
	s.epoch++
	s.setEpoch(s.epoch)
	lsn, conn, snapshotName, err := createSlotExport(ctx, s.set)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return s.startSnapshot(ctx, lsn, nil, snapshotName)
}

// startSnapshot begins (or resumes) the snapshot. lsn is where streaming starts afterwards
// (0 for initial_only: the snapshot's own WAL position is used for versions).
func (s *Source) startSnapshot(ctx context.Context, lsn pglogrepl.LSN, resume *snapshotPos, exported string) error {
	sn, err := s.openSnapshot(ctx, lsn, resume, exported)
	if err != nil {
		return err
	}
	if resume == nil {
		// a snapshot of every table: the incremental snapshots asked for so far are moot
		s.freshSnap = true
		s.incr.Skip()
	}
	s.snap = sn
	s.phase = phaseSnapshotting
	s.st.snapRun.Store(true)
	s.st.connected.Store(true)
	return nil
}

// startStream connects the replication stream at a position.
func (s *Source) startStream(ctx context.Context, from position) error {
	start, skip := from.resumeLSN()
	if err := s.beginStream(ctx, start); err != nil {
		return err
	}
	s.stream = newStreamState(start, skip)
	s.cur = from
	s.cur.Snapshot = nil
	if s.cur.LSN == 0 && s.cur.End == 0 {
		s.cur = position{Epoch: s.epoch, LSN: start, End: start}
	}
	s.phase = phaseStreaming
	s.st.snapRun.Store(false)
	s.st.snapDone.Store(true)
	s.st.connected.Store(true)
	return nil
}

// Read returns the next batch; see connect.Source.
func (s *Source) Read(ctx context.Context) (connect.Batch, error) {
	s.nowMs = s.now().UnixMilli()
	// A new slab per batch: values cut from one slab keep all its earlier chunks alive, so a
	// slab must not outlive the batch it built (see connect.Slab). A snapshot's come from the
	// chunks of released batches (snapshotter.release).
	s.slab = connect.Slab{}
	s.posSlab = connect.Slab{}
	if s.phase == phaseSnapshotting && s.snap != nil {
		s.slab.Pool = &s.snap.pool
	}
	// (should this Read go on to the stream after a reconnect, the stream's batches carry no
	// Release: chunks they take from the pool never go back to it, so nothing is reused)
	for {
		if s.lost != nil {
			// the connection was lost: start again after the last returned batch; a Read
			// cancelled while it waits goes on waiting at the next call
			if err := s.reconnect(ctx); err != nil {
				return connect.Batch{}, err
			}
		}
		var b connect.Batch
		var err error
		switch s.phase {
		case phaseSnapshotting:
			b, err = s.readSnapshot(ctx)
		case phaseStreaming:
			b, err = s.readStream(ctx)
		case phaseDone:
			<-ctx.Done()
			return connect.Batch{}, ctx.Err()
		default:
			return connect.Batch{}, errors.New("postgres source: Read before Open")
		}
		if err == nil {
			if !b.Position.IsZero() {
				s.emitted = b.Position
			}
			s.lastOut = s.now()
			return b, nil
		}
		if ctx.Err() != nil {
			if s.phase == phaseSnapshotting {
				// the rows the cancelled call took from the chunk query (the held one
				// too) are gone: the next Read starts again after the last returned batch
				s.lost = ctx.Err()
				s.attempt, s.backoff, s.nextTry = 0, 500*time.Millisecond, time.Now()
				s.teardown(ctx)
			}
			return connect.Batch{}, ctx.Err()
		}
		if connect.IsPermanent(err) {
			return connect.Batch{}, err
		}
		s.lost = err
		s.attempt, s.backoff = 0, 500*time.Millisecond
		s.nextTry = time.Now().Add(s.backoff)
		s.st.connected.Store(false)
		s.log.Warn("postgres connection lost; reconnecting", "err", err, "position", s.emitted.String())
		s.teardown(ctx)
	}
}

// reconnect starts again from the last returned batch, with backoff (0.5 s doubling up to
// 30 s), until it works, ctx ends or a permanent error comes up. The schedule survives a
// cancelled Read.
func (s *Source) reconnect(ctx context.Context) error {
	for {
		if wait := time.Until(s.nextTry); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		s.attempt++
		err := s.start(ctx, s.emitted, false)
		if err == nil {
			s.lost = nil
			s.st.reconnect.Add(1)
			s.log.Info("postgres connection restored", "attempts", s.attempt, "position", s.emitted.String())
			return nil
		}
		s.teardown(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if connect.IsPermanent(err) {
			return err
		}
		s.lost = err
		s.backoff = min(2*s.backoff, 30*time.Second)
		s.nextTry = time.Now().Add(s.backoff)
		s.log.Warn("postgres reconnect failed", "err", err, "attempt", s.attempt, "next_in", s.backoff)
	}
}

// teardown closes the connections of Read's side (not the spill directory or the monitor).
func (s *Source) teardown(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	s.stopReceiver(cctx)
	s.closeIncr(cctx)
	if s.stream != nil {
		s.stream.discard()
		s.stream = nil
	}
	if s.snap != nil {
		s.snap.close(cctx)
		s.snap = nil
	}
	if s.cat != nil {
		_ = s.cat.Close(cctx)
		s.cat = nil
	}
	s.phase = phaseNone
}

// Ack lets the slot confirm everything up to upTo: it is durable in the log. It may run
// concurrently with Read.
func (s *Source) Ack(ctx context.Context, upTo connect.Position) error {
	s.incr.Acked(upTo.Order)
	p, err := decodePosition(upTo)
	if err != nil {
		return fmt.Errorf("postgres source: ack: %w", err)
	}
	lsn := p.flushLSN()
	if lsn == 0 {
		return nil
	}
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	if p.Epoch != s.ackEpoch || lsn <= s.acked {
		return nil
	}
	s.acked = lsn
	if r := s.rcv; r != nil {
		r.allow(lsn)
	}
	return nil
}

// setDurable records an LSN known durable in the log.
func (s *Source) setDurable(epoch uint32, lsn pglogrepl.LSN) {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	if epoch != s.ackEpoch {
		s.ackEpoch, s.acked = epoch, 0
	}
	s.acked = max(s.acked, lsn)
}

// setEpoch switches Ack to a new epoch: positions of older epochs no longer move the slot.
func (s *Source) setEpoch(epoch uint32) {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	if epoch != s.ackEpoch {
		s.ackEpoch, s.acked = epoch, 0
	}
}

// Close stops the goroutines, confirms the acknowledged LSN to the server and closes the
// connections; with slot.drop.on.stop it drops the slot.
func (s *Source) Close(ctx context.Context) error {
	s.stopMonitor()
	s.teardown(ctx)
	var errs []error
	if err := s.spill.remove(); err != nil {
		errs = append(errs, err)
	}
	s.spill = nil
	if s.set.slotDropOnStop && s.set.snapshotMode != SnapshotInitialOnly {
		c, err := s.set.connect(ctx)
		if err == nil {
			err = dropSlot(ctx, c, s.set.slot, 10*time.Second)
			_ = c.Close(context.WithoutCancel(ctx))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("drop slot %s on stop: %w", s.set.slot, err))
		}
	}
	s.wg.Wait()
	return errors.Join(errs...)
}
