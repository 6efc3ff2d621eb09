package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/sluice-cdc/sluice/connect"
)

// CheckPosition checks, before the offsets API stores pos, that the replication slot can still
// deliver what comes after it (the runtime's PositionChecker). It opens a connection of its
// own, reads pg_replication_slots and the server's WAL end, and closes it; it changes nothing on
// the server (no slot is created, advanced or dropped).
//
// The LSN checked is where the source resumes: a position's "end" when set (the transaction
// committed at "lsn" is wholly out), else "lsn" (the commit LSN of the transaction it resumes
// in), and for an unfinished snapshot the LSN its stream starts at. It must be
//
//   - at or after the slot's confirmed_flush_lsn: a logical slot never sends again what was
//     confirmed before it (the same rule Open applies to a stored position);
//   - at or before the server's WAL end (pg_current_wal_insert_lsn(), or
//     pg_last_wal_replay_lsn() on a standby): a position the server has not written is not one
//     it can resume from. The insert LSN, not pg_current_wal_lsn() (the write LSN): with
//     asynchronous commit a committed transaction's LSN can be ahead of the write LSN for a
//     moment, and it is still a position the server has.
//
// The slot (slot.name) must exist, be a pgoutput logical slot of database.dbname, and not have
// lost its WAL (wal_status). With snapshot.mode=initial_only there is no slot and nothing to check.
func (s *Source) CheckPosition(ctx context.Context, pos connect.Position) error {
	p, err := decodePosition(pos)
	if err != nil {
		return err
	}
	if s.set.snapshotMode == SnapshotInitialOnly {
		return nil
	}
	lsn, _ := p.resumeLSN()
	what := "resumes at"
	if p.Snapshot != nil {
		lsn, what = p.Snapshot.LSN, "streams from"
	}
	c, err := s.set.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	slot, err := querySlot(ctx, c, s.set.slot)
	if err != nil {
		return err
	}
	if !slot.Exists {
		return fmt.Errorf("replication slot %q does not exist, and the position (it %s %s) needs it: "+
			"the changes after it are not kept without the slot (started with this offset, the connector fails, or with %s=%s takes a new snapshot); "+
			"reset the offsets to start over (a new slot and a new snapshot)", s.set.slot, what, lsn, KeySnapshotMode, SnapshotWhenNeeded)
	}
	if err := checkSlotKind(slot, s.set); err != nil {
		return err
	}
	if slot.WALStatus == "lost" {
		return fmt.Errorf("replication slot %q has lost its WAL (wal_status = lost): it cannot deliver %s or anything else; "+
			"reset the offsets (a new snapshot)", s.set.slot, lsn)
	}
	if lsn < slot.Confirmed {
		return fmt.Errorf("the position %s %s, before replication slot %q's confirmed_flush_lsn %s: the slot does not send again what was confirmed; "+
			"give a position at or after %s, or reset the offsets (a new snapshot)", what, lsn, s.set.slot, slot.Confirmed, slot.Confirmed)
	}
	var endText string
	if err := c.QueryRow(ctx, "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_insert_lsn() END)::text").Scan(&endText); err != nil {
		return fmt.Errorf("read the server's WAL end: %w", err)
	}
	end, err := pglogrepl.ParseLSN(endText)
	if err != nil {
		return fmt.Errorf("read the server's WAL end: %w", err)
	}
	if lsn > end {
		return fmt.Errorf("the position %s %s, past the server's WAL end %s: give a position the server has written", what, lsn, end)
	}
	return nil
}
