package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// receiver owns the replication connection while it streams. Its goroutine reads the
// server's messages, answers keepalives at once, reports the acknowledged LSN in standby
// status updates, and hands the WAL data messages to Read through a bounded queue. When the
// queue is full it stops reading but keeps sending status updates, so a stalled log never
// makes the server drop the connection (wal_sender_timeout).
//
// The flush LSN it reports is only ever what Ack allowed: the slot's confirmed_flush_lsn
// never passes what the log holds.
type receiver struct {
	conn     *pgconn.PgConn
	msgs     chan walMsg
	interval time.Duration
	log      *slog.Logger
	st       *stats

	done chan struct{}
	err  error // set before done is closed

	flush    atomic.Uint64 // highest LSN Ack allowed
	walEnd   atomic.Uint64 // from keepalives: every transaction committed before it was sent
	received atomic.Uint64 // end of the last WAL data received
	pinged   atomic.Bool   // the server asked for a reply (it waits for the flush, e.g. to shut down)
	askReply atomic.Bool   // Read wants a keepalive with the server's WAL end soon
	ackCh    chan struct{}

	// receiver goroutine only
	slab      slab
	sentFlush pglogrepl.LSN
	lastSent  time.Time
	deadline  time.Time // the read deadline set on the connection
}

// walMsg is one XLogData message: the LSN of its WAL record and the pgoutput message.
type walMsg struct {
	lsn  pglogrepl.LSN
	data []byte
}

func newReceiver(conn *pgconn.PgConn, queue int, interval time.Duration, start pglogrepl.LSN, log *slog.Logger, st *stats) *receiver {
	r := &receiver{
		conn: conn, msgs: make(chan walMsg, queue), interval: interval, log: log, st: st,
		done: make(chan struct{}), ackCh: make(chan struct{}, 1),
	}
	// everything before the start LSN is in the log: that is why streaming starts there
	r.flush.Store(uint64(start))
	r.walEnd.Store(uint64(start))
	return r
}

// run is the receiver goroutine; it returns when ctx ends or the connection fails.
func (r *receiver) run(ctx context.Context) {
	defer close(r.done)
	r.err = r.loop(ctx)
}

// allow raises the flush LSN the receiver may report; called by Ack, from any goroutine.
func (r *receiver) allow(lsn pglogrepl.LSN) {
	for {
		cur := r.flush.Load()
		if uint64(lsn) <= cur {
			return
		}
		if r.flush.CompareAndSwap(cur, uint64(lsn)) {
			break
		}
	}
	select {
	case r.ackCh <- struct{}{}:
	default:
	}
	// wake a receive blocked on a quiet connection, so the new flush LSN goes out now; the
	// receiver sets its own deadline again before its next receive
	_ = r.conn.Conn().SetReadDeadline(time.Now())
}

// requestReply asks the server for a keepalive (with its current WAL end) at the next status
// update, which it sends soon; called from Read's goroutine.
func (r *receiver) requestReply() {
	if r.askReply.Swap(true) {
		return
	}
	_ = r.conn.Conn().SetReadDeadline(time.Now())
}

const ackRateLimit = 100 * time.Millisecond

func (r *receiver) loop(ctx context.Context) error {
	r.lastSent = time.Time{}
	if err := r.status(false); err != nil {
		return err
	}
	// ReceiveMessage runs without a context (a context per message costs more than the
	// message); the read deadline of the connection bounds it instead, and ctx's end sets
	// that deadline to now.
	stop := context.AfterFunc(ctx, func() { _ = r.conn.Conn().SetReadDeadline(time.Now()) })
	defer stop()
	for {
		if err := r.maybeStatus(); err != nil {
			return err
		}
		if due := r.nextDue(); !due.Equal(r.deadline) {
			r.deadline = due
			if err := r.conn.Conn().SetReadDeadline(due); err != nil {
				return fmt.Errorf("replication stream: %w", err)
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		msg, err := r.conn.ReceiveMessage(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				r.deadline = time.Time{} // woken: set it again
				continue
			}
			return fmt.Errorf("receive from the replication stream: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				continue
			}
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return fmt.Errorf("parse keepalive: %w", err)
				}
				r.raiseWALEnd(ka.ServerWALEnd)
				if ka.ReplyRequested {
					r.pinged.Store(true)
					if err := r.status(false); err != nil {
						return err
					}
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					return fmt.Errorf("parse WAL data: %w", err)
				}
				data := r.slab.copy(xld.WALData)
				if end := uint64(xld.WALStart) + uint64(len(xld.WALData)); end > r.received.Load() {
					r.received.Store(end)
				}
				if err := r.deliver(ctx, walMsg{lsn: xld.WALStart, data: data}); err != nil {
					return err
				}
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone:
			return errors.New("replication stream: the server ended it")
		}
	}
}

func (r *receiver) raiseWALEnd(lsn pglogrepl.LSN) {
	if uint64(lsn) > r.walEnd.Load() {
		r.walEnd.Store(uint64(lsn))
		r.st.walEnd.Store(uint64(lsn))
	}
}

// nextDue is when the next status update is due: at the interval, or soon when Ack allowed
// more than was reported.
func (r *receiver) nextDue() time.Time {
	due := r.lastSent.Add(r.interval)
	if r.askReply.Load() {
		if soon := r.lastSent.Add(ackRateLimit); soon.Before(due) {
			due = soon
		}
	}
	if pglogrepl.LSN(r.flush.Load()) > r.sentFlush {
		if soon := r.lastSent.Add(ackRateLimit); soon.Before(due) {
			due = soon
		}
	}
	return due
}

func (r *receiver) maybeStatus() error {
	if time.Now().Before(r.nextDue()) {
		return nil
	}
	return r.status(r.askReply.Swap(false))
}

// deliver queues a message for Read, sending status updates while the queue is full.
func (r *receiver) deliver(ctx context.Context, m walMsg) error {
	select {
	case r.msgs <- m:
		return r.maybeStatus()
	default:
	}
	for {
		t := time.NewTimer(time.Until(r.nextDue()))
		select {
		case r.msgs <- m:
			t.Stop()
			return r.maybeStatus()
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		case <-r.ackCh:
			t.Stop()
		}
		if err := r.maybeStatus(); err != nil {
			return err
		}
	}
}

// status sends a standby status update: write is what was received, flush and apply what
// Ack allowed.
func (r *receiver) status(reply bool) error {
	flush := pglogrepl.LSN(r.flush.Load())
	write := pglogrepl.LSN(max(r.received.Load(), r.walEnd.Load(), uint64(flush)))
	if err := sendStatus(r.conn, write, flush, reply); err != nil {
		return fmt.Errorf("send standby status: %w", err)
	}
	r.sentFlush = flush
	r.lastSent = time.Now()
	r.st.acked.Store(uint64(flush))
	return nil
}

// sendStatus writes a standby status update. (pglogrepl's helper reports the write position
// as flushed when flush is 0; this one reports exactly what it is given.)
func sendStatus(conn *pgconn.PgConn, write, flush pglogrepl.LSN, reply bool) error {
	data := make([]byte, 0, 34)
	data = append(data, pglogrepl.StandbyStatusUpdateByteID)
	data = binary.BigEndian.AppendUint64(data, uint64(write))
	data = binary.BigEndian.AppendUint64(data, uint64(flush))
	data = binary.BigEndian.AppendUint64(data, uint64(flush))
	data = binary.BigEndian.AppendUint64(data, uint64(time.Now().UnixMicro()-946_684_800_000_000))
	if reply {
		data = append(data, 1)
	} else {
		data = append(data, 0)
	}
	buf, err := (&pgproto3.CopyData{Data: data}).Encode(nil)
	if err != nil {
		return err
	}
	return conn.Frontend().SendUnbufferedEncodedCopyData(buf)
}

// slab hands out copies of messages cut from large chunks, so that the queue costs one
// allocation per chunk instead of one per message. A chunk is garbage once every message cut
// from it has been decoded (decoded values never point into it).
type slab struct{ buf []byte }

const slabSize = 256 << 10

func (s *slab) copy(b []byte) []byte {
	if len(b) > slabSize/8 {
		return append([]byte(nil), b...)
	}
	if cap(s.buf)-len(s.buf) < len(b) {
		s.buf = make([]byte, 0, slabSize)
	}
	start := len(s.buf)
	s.buf = append(s.buf, b...)
	return s.buf[start:len(s.buf):len(s.buf)]
}
