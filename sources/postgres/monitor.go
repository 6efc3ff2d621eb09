package postgres

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// monitor runs on its own connection: it measures the slot's lag every status interval and,
// with heartbeat.interval.ms, writes heartbeats into the WAL. Its failures are logged, never
// fatal: the stream does not depend on it.
type monitor struct {
	set  *settings
	log  *slog.Logger
	st   *stats
	conn *pgx.Conn
}

func (s *Source) startMonitor() {
	m := &monitor{set: s.set, log: s.log, st: s.st}
	ctx, cancel := context.WithCancel(context.Background())
	s.mon, s.monCancel = m, cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		m.run(ctx)
	}()
}

func (s *Source) stopMonitor() {
	if s.monCancel != nil {
		s.monCancel()
		s.monCancel = nil
	}
}

func (m *monitor) run(ctx context.Context) {
	defer func() {
		if m.conn != nil {
			_ = m.conn.Close(context.Background())
		}
	}()
	lag := time.NewTicker(m.set.statusInterval)
	defer lag.Stop()
	var beat <-chan time.Time
	if m.set.heartbeat > 0 && m.set.snapshotMode != SnapshotInitialOnly {
		t := time.NewTicker(m.set.heartbeat)
		defer t.Stop()
		beat = t.C
	}
	m.measure(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-lag.C:
			m.measure(ctx)
		case <-beat:
			m.heartbeat(ctx)
		}
	}
}

func (m *monitor) connection(ctx context.Context) *pgx.Conn {
	if m.conn != nil && !m.conn.IsClosed() {
		return m.conn
	}
	c, err := m.set.connect(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Debug("monitor connection", "err", err)
		}
		return nil
	}
	m.conn = c
	return c
}

func (m *monitor) drop() {
	if m.conn != nil {
		_ = m.conn.Close(context.Background())
		m.conn = nil
	}
}

// measure stores pg_current_wal_lsn() - confirmed_flush_lsn of the slot.
func (m *monitor) measure(ctx context.Context) {
	if m.set.snapshotMode == SnapshotInitialOnly {
		return
	}
	c := m.connection(ctx)
	if c == nil {
		return
	}
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var lag *int64
	err := c.QueryRow(qctx, `SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1`, m.set.slot).Scan(&lag)
	switch {
	case err == pgx.ErrNoRows:
		m.st.slotLag.Store(-1)
	case err != nil:
		if ctx.Err() == nil {
			m.log.Debug("measure slot lag", "err", err)
		}
		m.drop()
	case lag != nil:
		m.st.slotLag.Store(*lag)
	}
}

// heartbeat writes a heartbeat into the WAL: a non-transactional logical decoding message
// (which the stream receives and uses as a safe point to confirm), or heartbeat.action.query.
func (m *monitor) heartbeat(ctx context.Context) {
	c := m.connection(ctx)
	if c == nil {
		return
	}
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	q := "SELECT pg_logical_emit_message(false, 'sluice.heartbeat', '')"
	if m.set.heartbeatQuery != "" {
		q = m.set.heartbeatQuery
	}
	if _, err := c.Exec(qctx, q); err != nil {
		if ctx.Err() == nil {
			m.log.Warn("heartbeat failed", "err", err)
		}
		m.drop()
	}
}
