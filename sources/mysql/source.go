package mysql

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/sluice-cdc/sluice/connect"
)

// Source is the MySQL / MariaDB source. Build it with New (or through Plugin); the runtime
// drives it through connect.Source.
type Source struct {
	cfg   *settings
	env   connect.Env
	log   *slog.Logger
	opts  valueOptions
	store connect.Store

	// learnt in Open
	flavor     string // "mysql" or "mariadb"
	version    string
	collations collations
	history    *history

	epoch uint32
	phase int // phaseSnapshot, phaseStreaming or phaseIdle
	snap  *snapshotter
	strm  *streamer

	// idle (snapshot.mode=initial_only after the snapshot): the position to report
	idlePos connect.Position

	// incremental and blocking snapshots (incremental.go)
	incr *incr

	stats       stats
	now         func() time.Time
	srcTemplate [srcFields]connect.Field // see sourceTemplate

	forcePrepared bool // tests: every snapshot chunk through a prepared statement
	goMySQLText   bool // tests: text chunk queries through go-mysql, not a textQuery
}

const phaseIdle = 2

var _ connect.Source = (*Source)(nil)

// New builds a source from a validated configuration. It does no I/O.
func New(cfg connect.Config, env connect.Env) (*Source, error) {
	s, err := parseSettings(cfg)
	if err != nil {
		return nil, err
	}
	log := env.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	src := &Source{
		cfg:   s,
		env:   env,
		log:   log,
		store: env.Store,
		opts: valueOptions{
			decimalDouble: s.decimalDouble,
			binaryMode:    s.binaryMode,
			timeConnect:   s.timeConnect,
			bigintPrecise: s.bigintPrecise,
		},
		now:         time.Now,
		srcTemplate: sourceTemplate(s),
	}
	src.stats.behindMs.Store(-1)
	src.incr = newIncr(src, cfg)
	return src, nil
}

// connect opens a query connection with the session settings every query of the source needs.
func (s *Source) connect(ctx context.Context) (*client.Conn, error) {
	addr := net.JoinHostPort(s.cfg.host, strconv.Itoa(s.cfg.port))
	c, err := client.ConnectWithContext(ctx, addr, s.cfg.user, s.cfg.password, "", s.cfg.connectTimeout)
	if err != nil {
		if isAuthError(err) {
			return nil, connect.Permanentf("connect to %s as %s: %w", addr, s.cfg.user, err)
		}
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	if _, err := c.Execute("SET NAMES utf8mb4"); err != nil {
		c.Close()
		return nil, fmt.Errorf("connect to %s: set names: %w", addr, err)
	}
	if _, err := c.Execute("SET time_zone = '+00:00'"); err != nil {
		c.Close()
		return nil, fmt.Errorf("connect to %s: set time zone: %w", addr, err)
	}
	return c, nil
}

func isAuthError(err error) bool {
	var me interface{ Error() string }
	if errors.As(err, &me) {
		msg := err.Error()
		return strings.Contains(msg, "Access denied") || strings.Contains(msg, "ERROR 1045")
	}
	return false
}

// Open implements connect.Source: it checks the server (see preflight), then prepares a
// snapshot or the binlog stream as the stored position and snapshot.mode say.
func (s *Source) Open(ctx context.Context, after connect.Position) error {
	c, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := s.preflight(ctx, c); err != nil {
		return err
	}
	if s.collations, err = loadCollations(c); err != nil {
		return err
	}
	s.history = newHistory(s.store)
	if err := s.history.load(ctx); err != nil {
		return err
	}
	s.stats.connected.Store(true)

	if after.IsZero() {
		switch s.cfg.snapshotMode {
		case SnapshotNoData:
			file, pos, err := s.binlogHead(c)
			if err != nil {
				return err
			}
			if err := s.openIncr(ctx, nil); err != nil {
				return err
			}
			return s.startStreaming(ctx, &state{V: stateVersion, File: file, Pos: pos})
		case SnapshotNever:
			files, err := s.binlogFiles(c)
			if err != nil {
				return err
			}
			if len(files) == 0 {
				return connect.Permanentf("the server has no binary logs: enable the binlog (log_bin)")
			}
			if err := s.openIncr(ctx, nil); err != nil {
				return err
			}
			return s.startStreaming(ctx, &state{V: stateVersion, File: files[0].name, Pos: 4})
		}
		return s.startSnapshot(ctx, 0, nil)
	}
	st, err := parseState(after.State)
	if err != nil {
		return connect.Permanentf("stored position %s: %w", after, err)
	}
	s.epoch = st.Epoch
	if st.Snapshot != nil {
		return s.startSnapshot(ctx, st.Epoch, st)
	}
	if s.cfg.snapshotMode == SnapshotInitialOnly {
		s.phase = phaseIdle
		s.idlePos = after.Clone()
		return nil
	}
	files, err := s.binlogFiles(c)
	if err != nil {
		return err
	}
	if !hasFile(files, st.File) {
		oldest := "none"
		if len(files) > 0 {
			oldest = files[0].name + ":4"
		}
		if s.cfg.snapshotMode == SnapshotWhenNeeded {
			s.log.Warn("stored binlog position is purged; taking a new snapshot", "position", st.File+":"+strconv.FormatUint(uint64(st.Pos), 10), "oldest", oldest)
			return s.startSnapshot(ctx, st.Epoch+1, nil)
		}
		return connect.Permanentf("binlog position %s:%d needed to resume is no longer on the server (purged); the oldest available is %s: set snapshot.mode=when_needed to take a new snapshot, or reset the connector's offsets", st.File, st.Pos, oldest)
	}
	if err := s.openIncr(ctx, st.Incr); err != nil {
		return err
	}
	return s.startStreaming(ctx, st)
}

func (s *Source) startSnapshot(ctx context.Context, epoch uint32, resume *state) error {
	s.epoch = epoch
	if p, _ := s.history.plan(epoch); resume == nil && p != nil {
		// an earlier attempt stored its plan and may have put rows into the log before any
		// position was committed: go on with that plan (its start point), from the first table
		resume = &state{V: stateVersion, Epoch: epoch, Snapshot: &snapState{}}
	}
	// a snapshot of every table: the incremental snapshots asked for so far are moot
	s.incr.fresh = true
	if err := s.openIncr(ctx, nil); err != nil {
		return err
	}
	s.phase = phaseSnapshot
	s.snap = newSnapshotter(s, epoch, resume)
	s.stats.snapshotRunning.Store(true)
	return s.snap.open(ctx)
}

func (s *Source) startStreaming(ctx context.Context, st *state) error {
	s.phase = phaseStreaming
	s.epoch = st.Epoch
	s.strm = newStreamer(s, st)
	return s.strm.start(ctx)
}

// Read implements connect.Source.
func (s *Source) Read(ctx context.Context) (connect.Batch, error) {
	for {
		switch s.phase {
		case phaseSnapshot:
			b, done, err := s.snap.read(ctx)
			if err != nil {
				return b, err
			}
			if done {
				s.snap.close()
				end := s.snap.streamStart()
				s.snap = nil
				s.stats.snapshotRunning.Store(false)
				s.stats.snapshotCompleted.Store(true)
				if s.cfg.snapshotMode == SnapshotInitialOnly {
					s.phase = phaseIdle
					s.idlePos = s.streamBoundary(end)
				} else if err := s.startStreaming(ctx, end); err != nil {
					return connect.Batch{}, err
				}
				// the snapshot is complete: a restart from here streams
				b.Position = s.streamBoundary(end)
				b.Position.State = s.withIncr(b.Position.State)
			}
			if len(b.Records) > 0 || !b.Position.IsZero() {
				return b, nil
			}
		case phaseStreaming:
			return s.strm.read(ctx)
		default:
			return s.idle(ctx)
		}
	}
}

// streamBoundary is the position "before the transaction at st.File/st.Pos".
func (s *Source) streamBoundary(st *state) connect.Position {
	seq, _ := fileSeq(st.File)
	return connect.Position{
		Order: appendStreamOrder(nil, st.Epoch, seq, st.Pos, 0, 0),
		State: appendStreamState(nil, st.Epoch, st.File, st.Pos, 0, ""),
	}
}

// idle waits for cancellation (snapshot.mode=initial_only after the snapshot), returning
// heartbeats of the final position when they are configured.
func (s *Source) idle(ctx context.Context) (connect.Batch, error) {
	if s.cfg.heartbeat <= 0 {
		<-ctx.Done()
		return connect.Batch{}, ctx.Err()
	}
	t := time.NewTimer(s.cfg.heartbeat)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return connect.Batch{}, ctx.Err()
	case <-t.C:
		return connect.Batch{Position: s.idlePos}, nil
	}
}

// Ack implements connect.Source. The binlog needs no acknowledgement; Ack records what the
// log holds for the statistics.
func (s *Source) Ack(ctx context.Context, upTo connect.Position) error {
	s.incr.e.Acked(upTo.Order)
	s.stats.acked.Add(1)
	return nil
}

// Close implements connect.Source.
func (s *Source) Close(ctx context.Context) error {
	if s.snap != nil {
		s.snap.close()
	}
	if s.strm != nil {
		s.strm.shutdown()
	}
	s.closeIncr()
	s.stats.connected.Store(false)
	return nil
}

// sourceBlock builds the Debezium source block, in Debezium's field order.
func (s *Source) sourceBlock(tsMs int64, snapshot string, db, table string, serverID uint32, gtid any, file string, pos uint32, row int, thread any) connect.Row {
	src := make(connect.Row, srcFields)
	copy(src, s.srcTemplate[:])
	src[srcTsMs].Value = tsMs
	src[srcSnapshot].Value = snapshot
	src[srcDB].Value = db
	src[srcTable].Value = nilIfEmpty(table)
	src[srcServerID].Value = int64(serverID)
	src[srcGTID].Value = gtid
	src[srcFile].Value = file
	src[srcPos].Value = int64(pos)
	src[srcRow].Value = boxInt(int64(row))
	src[srcThread].Value = thread
	return src
}

// sourceTemplate is the source block with the fields every record shares set.
func sourceTemplate(cfg *settings) [srcFields]connect.Field {
	return [srcFields]connect.Field{
		{Name: "version", Value: cfg.sourceVersion},
		{Name: "connector", Value: "mysql"},
		{Name: "name", Value: cfg.prefix},
		{Name: "ts_ms"},
		{Name: "snapshot"},
		{Name: "db"},
		{Name: "sequence"},
		{Name: "table"},
		{Name: "server_id"},
		{Name: "gtid"},
		{Name: "file"},
		{Name: "pos"},
		{Name: "row"},
		{Name: "thread"},
		{Name: "query"},
	}
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Stats are the source's counters, with Debezium's metric names where they exist. Counters
// count from the source's construction (a task restart starts them over).
type Stats struct {
	// Connected is true from a successful Open until Close, except while the binlog reader
	// reconnects.
	Connected bool
	// SnapshotRunning is true while this source reads snapshot rows; SnapshotCompleted once it
	// has read the last of them (a snapshot finished by an earlier run does not count).
	SnapshotRunning   bool
	SnapshotCompleted bool
	// TotalNumberOfEventsSeen counts the change events emitted: snapshot reads, row changes,
	// truncates and schema changes (tombstones not).
	TotalNumberOfEventsSeen int64
	// NumberOfCommittedTransactions counts the binlog transactions read to their end (XID or
	// COMMIT, and each DDL statement), of captured tables or not.
	NumberOfCommittedTransactions int64
	// MilliSecondsBehindSource is the time between the commit of the last emitted binlog change
	// and its emission (the binlog stamps commits in whole seconds); -1 before the first.
	MilliSecondsBehindSource int64
	// RowsScanned and RowsTotalEstimate are, per snapshot table ("db.table"), the rows read so
	// far and the server's estimate of its rows (information_schema.TABLES). A table finished by
	// an earlier run of an interrupted snapshot shows -1 rows read.
	RowsScanned       map[string]int64
	RowsTotalEstimate map[string]int64
	// BinlogFilename and BinlogPosition are the file and the end position of the last binlog
	// event read.
	BinlogFilename string
	BinlogPosition int64
	// NumberOfSkippedEvents counts the row changes of captured tables left out by
	// skipped.operations.
	NumberOfSkippedEvents int64
	// NumberOfReconnects counts the binlog connections lost and established again.
	NumberOfReconnects int64
	// NumberOfAcknowledgedBatches counts the calls of Ack (positions durable in the log).
	NumberOfAcknowledgedBatches int64
	// IncrementalSnapshotRunning and IncrementalSnapshotPaused say whether an incremental or
	// blocking snapshot has tables to read, and whether it is paused; RemainingTableCount
	// counts those tables and ChunkID the chunks read (see sources/snapshot). RowsScanned
	// includes their rows.
	IncrementalSnapshotRunning bool
	IncrementalSnapshotPaused  bool
	RemainingTableCount        int64
	ChunkID                    int64
}

type stats struct {
	connected         atomic.Bool
	snapshotRunning   atomic.Bool
	snapshotCompleted atomic.Bool
	events            atomic.Int64
	txns              atomic.Int64
	behindMs          atomic.Int64
	skipped           atomic.Int64
	reconnects        atomic.Int64
	acked             atomic.Int64
	binlogFile        atomic.Pointer[string]
	binlogPos         atomic.Int64
	progress          atomic.Pointer[map[string][2]int64] // table → rows scanned, estimated total
}

// Stats returns the current counters. It is cheap and safe to call concurrently with Read.
func (s *Source) Stats() Stats {
	st := Stats{
		Connected:                     s.stats.connected.Load(),
		SnapshotRunning:               s.stats.snapshotRunning.Load(),
		SnapshotCompleted:             s.stats.snapshotCompleted.Load(),
		TotalNumberOfEventsSeen:       s.stats.events.Load(),
		NumberOfCommittedTransactions: s.stats.txns.Load(),
		MilliSecondsBehindSource:      s.stats.behindMs.Load(),
		BinlogPosition:                s.stats.binlogPos.Load(),
		NumberOfSkippedEvents:         s.stats.skipped.Load(),
		NumberOfReconnects:            s.stats.reconnects.Load(),
		NumberOfAcknowledgedBatches:   s.stats.acked.Load(),
	}
	if f := s.stats.binlogFile.Load(); f != nil {
		st.BinlogFilename = *f
	}
	es := s.incr.e.Stats()
	st.IncrementalSnapshotRunning = es.IncrementalSnapshotRunning
	st.IncrementalSnapshotPaused = es.IncrementalSnapshotPaused
	st.RemainingTableCount = es.RemainingTableCount
	st.ChunkID = es.ChunkID
	if p := s.stats.progress.Load(); p != nil {
		st.RowsScanned = map[string]int64{}
		st.RowsTotalEstimate = map[string]int64{}
		for k, v := range *p {
			st.RowsScanned[k] = v[0]
			st.RowsTotalEstimate[k] = v[1]
		}
	}
	return st
}

// abort closes the network connection under c, making a query running on it in another
// goroutine fail; unlike c.Close it is safe to call concurrently with that query. The owner
// still closes c.
func abort(c *client.Conn) {
	if c != nil && c.Conn != nil && c.Conn.Conn != nil {
		_ = c.Conn.Conn.Close()
	}
}
