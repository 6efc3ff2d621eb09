package connect

import (
	"context"
	"log/slog"
)

// Batch is what one Source.Read returns: records in source order and the position right after
// the last of them. A batch with no records and a newer Position is a heartbeat: it lets the
// runtime store progress of an idle or fully filtered source.
type Batch struct {
	Records []Record
	// Position is where the source resumes after this batch; the runtime passes it to Ack once
	// every record of the batch (and of all batches before it) is durable in the log. Its
	// Order is at least that of the batch's last record, and its State must be set (records'
	// States may be empty).
	Position Position
	// Release, if set, is called by the runtime once it reads none of the batch's records
	// any more (their Keys, Values and Headers are transformed, encoded and appended to the log:
	// a RawJSON key or value is appended from the batch's own memory), at most once, from
	// another goroutine than Read's. The source may then reuse that memory for a later batch,
	// which spares it allocating and clearing fresh memory for every batch. The Positions of
	// the batch and of its records stay in use after Release: their memory must not be reused.
	// A caller that never calls Release (a test, a tool) only costs the source fresh memory.
	Release func()
}

// Source captures changes from a system into records.
//
// The runtime calls Open once, then Read repeatedly from one goroutine, calling Ack after the
// records of one or more batches are durable in the log, and finally Close. Ack may be called
// concurrently with a blocked Read (a source must not make Read wait for Ack). After a crash,
// the runtime opens a new instance at the last position the log holds; records it re-emits at
// or below what is already in the log are dropped by the runtime (see Position).
type Source interface {
	// Open prepares the source to emit records that follow after: the zero Position means
	// "never ran" (take the initial snapshot if the configuration asks for one). A position
	// that can no longer be resumed from (purged binlog, dropped slot) is a Permanent error
	// naming the wanted and the oldest available position, unless configured to re-snapshot.
	Open(ctx context.Context, after Position) error
	// Read blocks until it has records or a heartbeat, and returns a bounded batch (a huge
	// source transaction arrives over several batches). On ctx cancellation it returns
	// ctx.Err() promptly. The batch is the runtime's from then on: the runtime calls Read
	// again while it still transforms and encodes the last batch, so no later Read may write
	// into memory the batch's records, values or positions use (build each batch from fresh
	// or never-reused memory, as connect.Slab does), until the runtime releases the batch (see
	// Batch.Release; positions never).
	Read(ctx context.Context) (Batch, error)
	// Ack tells the source that everything up to and including upTo is durable in the log, so
	// it may release the source's resources for it (Postgres flush LSN). Never called with a
	// position the source did not emit.
	Ack(ctx context.Context, upTo Position) error
	// Close releases connections. It is called once, also after Open failed.
	Close(ctx context.Context) error
}

// Sink maintains a view from records read from the log.
//
// The runtime calls Open once, then Write from one goroutine with batches in log order per
// partition, committing the consumer offsets of a batch only after Write returned nil (or a
// *WriteError), and finally Close. Delivery is at least once: after a crash the records since
// the last committed offsets are written again, so Write must be idempotent (guarded by
// Record.Version).
type Sink interface {
	Open(ctx context.Context) error
	// Write applies the batch. nil means every record is durable in the view. A *WriteError
	// means every record but the listed ones is durable, and those were rejected permanently
	// (they go to the dead-letter topic per errors.tolerance). Any other error means the
	// batch may be partly applied and will be retried whole (retriable) or fails the task
	// (Permanent).
	Write(ctx context.Context, batch []Record) error
	Close(ctx context.Context) error
}

// Transform reshapes one record. Apply is pure: no I/O, no clock, no goroutines, no
// retained state between calls; it may be called concurrently from several tasks.
// keep=false drops the record. An error is a per-record failure handled by errors.tolerance.
// Apply must not modify the input record's Key, Value or Headers in place (they may be shared):
// it builds new ones where it changes them. It keeps no part of a record (a string, a slice) once
// it returns, not even in a cache: the source may reuse the record's memory (Batch.Release).
type Transform interface {
	Apply(r Record) (out Record, keep bool, err error)
}

// Predicate decides whether a transform applies to a record. Test is pure, like Apply.
type Predicate interface {
	Test(r Record) (bool, error)
}

// Env is what the runtime hands a connector instance when it builds it.
type Env struct {
	// Connector is the connector's name; Task its task number.
	Connector string
	Task      int
	Logger    *slog.Logger
	// Store is the connector's durable state store in the log (nil for sinks), for state that
	// must outlive restarts apart from the position, e.g. the MySQL schema history.
	Store Store
	// RawJSON is set when the runtime stores a source's RawJSON keys and values as they are:
	// the connector has no transforms, which would need them parsed first. A source may then
	// render records as JSON itself; otherwise Rows serve the transforms better.
	RawJSON bool
}

// Store is a connector's durable, ordered record store, kept in an internal topic of the log.
type Store interface {
	// Append stores one entry; it is durable when Append returns.
	Append(ctx context.Context, key, value []byte) error
	// Scan calls fn for every stored entry in the order they were appended.
	Scan(ctx context.Context, fn func(key, value []byte) error) error
}

// Rebuilder is an optional capability of a Sink (discovered by type assertion): rebuilding
// the view from the log without downtime. The runtime rebuilds as follows:
//
//  1. BeginRebuild returns a second sink that writes into a fresh view (e.g. a new versioned
//     index behind an alias) while the live sink keeps serving and writing the current one.
//  2. The runtime replays every record of the connector's topics from the earliest offset
//     into the rebuilt sink, catching up with the live sink's position.
//  3. It pauses the live task at its position, drains the replay to exactly that position,
//     and calls FinishRebuild, which switches readers and the live sink to the rebuilt view
//     atomically and drops the old one; then the live task resumes.
//
// AbortRebuild discards the rebuilt view (on error or cancellation); the live view is
// untouched. The rebuilt sink is Opened, written and Closed by the runtime like any sink.
type Rebuilder interface {
	BeginRebuild(ctx context.Context) (Sink, error)
	FinishRebuild(ctx context.Context, rebuilt Sink) error
	AbortRebuild(ctx context.Context, rebuilt Sink) error
}
