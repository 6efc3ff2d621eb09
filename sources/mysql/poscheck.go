package mysql

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/sluice-cdc/sluice/connect"
)

// CheckPosition checks, before the offsets API stores pos, that the server can still stream from
// it (the runtime's PositionChecker). It opens a connection of its own, reads, and closes it; it
// changes nothing on the server.
//
// A streaming position is binlog coordinates, file/pos, the start of the transaction to resume
// in (plus the rows of it already delivered and its GTID). They are checked exactly:
//
//   - the file is listed by SHOW BINARY LOGS; an older one was purged, a newer one is not
//     written yet;
//   - 4 <= pos <= the file's size (pos = size is the file's end: resume with what comes next);
//   - below the size, an event starts at pos: streaming cannot start inside an event. On MariaDB
//     BINLOG_GTID_POS(file, pos) decides it exactly (the server reads the file up to pos and
//     answers NULL unless an event starts there); on MySQL, SHOW BINLOG EVENTS IN file FROM pos
//     must read an event at pos;
//   - with a GTID (MariaDB "0-1-42", MySQL "uuid:42"), the event at pos is that transaction's
//     GTID event: the GTID names the transaction the position resumes in, so the binlog there
//     must still hold it (a server whose binlog was reset and rewritten holds another one);
//   - with rows to skip in the transaction (row > 0), pos is a transaction's first event (its
//     GTID event, or BEGIN without GTIDs).
//
// GTIDs are not resolved to coordinates (sluice resumes by coordinates; the GTID only verifies
// them), so a GTID set alone is not a position. A position inside an unfinished initial snapshot
// is not checked: it resumes from the snapshot's plan in the connector's state store, and Open
// reports a purged start point.
func (s *Source) CheckPosition(ctx context.Context, pos connect.Position) error {
	st, err := parseState(pos.State)
	if err != nil {
		return err
	}
	if st.Snapshot != nil {
		return nil
	}
	if _, err := fileSeq(st.File); err != nil {
		return err
	}
	c, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { abort(c) })
	defer stop()
	err = checkBinlogPosition(c, s.binlogFiles, st)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// checkBinlogPosition checks st's file/pos/gtid/row against the server c is connected to.
func checkBinlogPosition(c *client.Conn, list func(*client.Conn) ([]binlogFile, error), st *state) error {
	files, err := list(c)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return errors.New("the server has no binary logs: enable the binlog (log_bin)")
	}
	oldest, newest := files[0], files[len(files)-1]
	var file *binlogFile
	for i := range files {
		if files[i].name == st.File {
			file = &files[i]
		}
	}
	if file == nil {
		seq, _ := fileSeq(st.File)
		first, _ := fileSeq(oldest.name)
		last, _ := fileSeq(newest.name)
		switch {
		case seq < first:
			return fmt.Errorf("binlog %s was purged; the oldest on the server is %s: reset the offsets (a new snapshot) or give a later position", st.File, oldest.name)
		case seq > last:
			return fmt.Errorf("binlog %s is not on the server yet (ahead of it); the newest is %s, %d bytes: give a position the server has written", st.File, newest.name, newest.size)
		}
		return fmt.Errorf("binlog %s is not on the server; it has %s to %s: give a position in one of them", st.File, oldest.name, newest.name)
	}
	if st.Pos < 4 {
		return fmt.Errorf("position %d in binlog %s is before its first event: give a position of at least 4", st.Pos, st.File)
	}
	if int64(st.Pos) > file.size {
		return fmt.Errorf("position %d is past the end of binlog %s (%d bytes): give a position the server has written", st.Pos, st.File, file.size)
	}
	if int64(st.Pos) == file.size {
		if st.GTID != "" || st.Row > 0 {
			return fmt.Errorf("position %d is the end of binlog %s: no transaction starts there (the position names transaction %q, row %d)", st.Pos, st.File, st.GTID, st.Row)
		}
		return nil
	}
	noEvent := fmt.Errorf("no event starts at position %d of binlog %s: give the position of an event (SHOW BINLOG EVENTS IN '%s')", st.Pos, st.File, st.File)
	if strings.Contains(strings.ToLower(c.GetServerVersion()), "mariadb") {
		// BINLOG_GTID_POS reads the file from its start up to pos: NULL unless an event
		// starts exactly there
		r, err := c.Execute("SELECT BINLOG_GTID_POS(?, ?)", st.File, st.Pos)
		if err != nil {
			return fmt.Errorf("look up %s:%d: %w", st.File, st.Pos, err)
		}
		if len(r.Values) == 0 || r.Values[0][0].Value() == nil {
			return noEvent
		}
	}
	r, err := c.Execute(fmt.Sprintf("SHOW BINLOG EVENTS IN '%s' FROM %d LIMIT 1", strings.ReplaceAll(st.File, "'", "''"), st.Pos))
	if err != nil {
		if strings.Contains(err.Error(), "Wrong offset") {
			return noEvent
		}
		return fmt.Errorf("read the event at %s:%d: %w", st.File, st.Pos, err)
	}
	if len(r.Values) == 0 {
		return noEvent
	}
	// columns: Log_name, Pos, Event_type, Server_id, End_log_pos, Info
	at, _ := r.GetUint(0, 1)
	typ, _ := r.GetString(0, 2)
	info, _ := r.GetString(0, 5)
	if at != uint64(st.Pos) {
		return noEvent
	}
	gtid, isGTID := eventGTID(typ, info)
	if st.GTID != "" {
		if !isGTID {
			return fmt.Errorf("binlog position %s:%d holds an event of type %s, not the start of transaction %s: the server's binlog no longer matches the position", st.File, st.Pos, typ, st.GTID)
		}
		if gtid != st.GTID {
			return fmt.Errorf("binlog position %s:%d holds transaction %s, not %s: the server's binlog no longer matches the position", st.File, st.Pos, gtid, st.GTID)
		}
	}
	if st.Row > 0 && !isGTID && !(typ == "Query" && strings.EqualFold(strings.TrimSpace(info), "BEGIN")) {
		return fmt.Errorf("binlog position %s:%d holds an event of type %s, not a transaction's first event: a position with rows to skip (row %d) must give where the transaction starts", st.File, st.Pos, typ, st.Row)
	}
	return nil
}

// eventGTID returns the GTID of a GTID event as SHOW BINLOG EVENTS shows it: MariaDB
// "BEGIN GTID 0-1-42" (or "GTID 0-1-42", with " cid=..." after a group commit), MySQL
// "SET @@SESSION.GTID_NEXT= 'uuid:42'".
func eventGTID(typ, info string) (string, bool) {
	if !strings.EqualFold(typ, "Gtid") {
		return "", false
	}
	if _, v, ok := strings.Cut(info, "GTID_NEXT="); ok {
		return strings.Trim(strings.TrimSpace(v), "'"), true
	}
	f := strings.Fields(info)
	for i := range f {
		if f[i] == "GTID" && i+1 < len(f) {
			return f[i+1], true
		}
	}
	return "", true
}
