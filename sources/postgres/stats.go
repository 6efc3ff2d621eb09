package postgres

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/jackc/pglogrepl"
)

// Stats are the source's counters, with Debezium's metric names in the field docs. Stats()
// may be called at any time from any goroutine.
type Stats struct {
	// TotalNumberOfEventsSeen counts change events emitted (snapshot reads included;
	// tombstones not).
	TotalNumberOfEventsSeen int64
	// NumberOfCommittedTransactions counts the source transactions fully emitted.
	NumberOfCommittedTransactions int64
	// MilliSecondsBehindSource is the time between the last emitted change's commit and its
	// emission; -1 before the first.
	MilliSecondsBehindSource int64
	SnapshotRunning          bool
	SnapshotCompleted        bool
	// RowsScanned counts the snapshot rows read per table (schema.table).
	RowsScanned map[string]int64
	// Connected is true while the replication stream (or the snapshot) is connected.
	Connected bool
	// SlotLagBytes is pg_current_wal_lsn() - confirmed_flush_lsn of the slot at the last
	// check (every status.update.interval.ms); -1 before the first.
	SlotLagBytes int64
	// LastAckedLSN is the highest LSN acknowledged to the server as flushed: everything
	// committed before it is durable in the log.
	LastAckedLSN string
	// ServerWALEnd is the server's WAL position that the stream has caught up with.
	ServerWALEnd string
	// StreamedTransactions counts the transactions the server streamed while they ran
	// (protocol 2), and SpilledBytes what their changes took in spill files.
	StreamedTransactions int64
	SpilledBytes         int64
	// Reconnects counts the connections lost and established again.
	Reconnects int64
	// Incremental snapshots: whether one runs or is paused, the tables left to read and the
	// chunks read so far (rows read are in RowsScanned).
	IncrementalSnapshotRunning bool
	IncrementalSnapshotPaused  bool
	RemainingTableCount        int64
	ChunkID                    int64
}

type stats struct {
	events    atomic.Int64
	txs       atomic.Int64
	behind    atomic.Int64
	snapRun   atomic.Bool
	snapDone  atomic.Bool
	connected atomic.Bool
	slotLag   atomic.Int64
	acked     atomic.Uint64
	walEnd    atomic.Uint64
	streamed  atomic.Int64
	spilled   atomic.Int64
	reconnect atomic.Int64

	mu   sync.Mutex
	rows map[string]int64
}

func newStats() *stats {
	st := &stats{rows: map[string]int64{}}
	st.behind.Store(-1)
	st.slotLag.Store(-1)
	return st
}

func (st *stats) addRows(table string, n int64) {
	st.mu.Lock()
	st.rows[table] += n
	st.mu.Unlock()
}

func (st *stats) snapshot() Stats {
	st.mu.Lock()
	rows := maps.Clone(st.rows)
	st.mu.Unlock()
	return Stats{
		TotalNumberOfEventsSeen:       st.events.Load(),
		NumberOfCommittedTransactions: st.txs.Load(),
		MilliSecondsBehindSource:      st.behind.Load(),
		SnapshotRunning:               st.snapRun.Load(),
		SnapshotCompleted:             st.snapDone.Load(),
		RowsScanned:                   rows,
		Connected:                     st.connected.Load(),
		SlotLagBytes:                  st.slotLag.Load(),
		LastAckedLSN:                  pglogrepl.LSN(st.acked.Load()).String(),
		ServerWALEnd:                  pglogrepl.LSN(st.walEnd.Load()).String(),
		StreamedTransactions:          st.streamed.Load(),
		SpilledBytes:                  st.spilled.Load(),
		Reconnects:                    st.reconnect.Load(),
	}
}
