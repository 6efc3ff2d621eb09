package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/sources/snapshot"
)

// slotInfo is the row of pg_replication_slots of the configured slot.
type slotInfo struct {
	Exists    bool
	Plugin    string
	SlotType  string
	Database  string
	Active    bool
	ActivePID int32
	Confirmed pglogrepl.LSN
	Restart   pglogrepl.LSN
	WALStatus string
}

func querySlot(ctx context.Context, c *pgx.Conn, name string) (slotInfo, error) {
	var si slotInfo
	var plugin, db, walStatus *string
	var pid *int32
	var confirmed, restart *string
	err := c.QueryRow(ctx, `
SELECT plugin, slot_type, database, active, active_pid, confirmed_flush_lsn::text, restart_lsn::text, wal_status
FROM pg_replication_slots WHERE slot_name = $1`, name).
		Scan(&plugin, &si.SlotType, &db, &si.Active, &pid, &confirmed, &restart, &walStatus)
	if errors.Is(err, pgx.ErrNoRows) {
		return si, nil
	}
	if err != nil {
		return si, fmt.Errorf("read replication slot %s: %w", name, err)
	}
	si.Exists = true
	si.Plugin, si.Database, si.WALStatus = deref(plugin), deref(db), deref(walStatus)
	if pid != nil {
		si.ActivePID = *pid
	}
	if confirmed != nil {
		si.Confirmed, _ = pglogrepl.ParseLSN(*confirmed)
	}
	if restart != nil {
		si.Restart, _ = pglogrepl.ParseLSN(*restart)
	}
	return si, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// checkSlotKind refuses a slot of the same name that sluice cannot use.
func checkSlotKind(si slotInfo, set *settings) error {
	if !si.Exists {
		return nil
	}
	fix := fmt.Sprintf("drop it (SELECT pg_drop_replication_slot(%s);) or set %s to another name", quoteLiteral(set.slot), KeySlotName)
	switch {
	case si.SlotType != "logical":
		return connect.Permanentf("replication slot %q is a %s slot; sluice needs a logical one: %s", set.slot, si.SlotType, fix)
	case si.Plugin != "pgoutput":
		return connect.Permanentf("replication slot %q uses the output plugin %s; sluice needs pgoutput: %s", set.slot, si.Plugin, fix)
	case si.Database != set.dbname:
		return connect.Permanentf("replication slot %q belongs to database %s, not %s: %s", set.slot, si.Database, set.dbname, fix)
	}
	return nil
}

// createSlot creates the slot without a snapshot and returns its consistent point and the
// replication connection it used (the caller closes it).
func createSlot(ctx context.Context, set *settings) (pglogrepl.LSN, *pgconn.PgConn, error) {
	lsn, conn, _, err := createSlotWith(ctx, set, "NOEXPORT_SNAPSHOT")
	return lsn, conn, err
}

// createSlotExport creates the slot with an exported snapshot. The snapshot lives while the
// returned connection stays open and idle: import it before closing the connection.
func createSlotExport(ctx context.Context, set *settings) (pglogrepl.LSN, *pgconn.PgConn, string, error) {
	return createSlotWith(ctx, set, "EXPORT_SNAPSHOT")
}

func createSlotWith(ctx context.Context, set *settings, action string) (pglogrepl.LSN, *pgconn.PgConn, string, error) {
	conn, err := set.connectReplication(ctx)
	if err != nil {
		return 0, nil, "", err
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, set.slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: action})
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		switch pgCode(err) {
		case "53400":
			return 0, nil, "", connect.Permanent(fmt.Errorf("create replication slot %s: %w; raise max_replication_slots "+
				"(ALTER SYSTEM SET max_replication_slots = <n>; then restart the server) or drop unused slots", set.slot, err))
		case "42501":
			return 0, nil, "", connect.Permanent(fmt.Errorf("create replication slot %s: %w; run ALTER ROLE %s WITH REPLICATION;", set.slot, err, quoteIdent(set.user)))
		case "55000":
			return 0, nil, "", connect.Permanent(fmt.Errorf("create replication slot %s: %w; run ALTER SYSTEM SET wal_level = logical; then restart the server", set.slot, err))
		}
		return 0, nil, "", fmt.Errorf("create replication slot %s: %w", set.slot, err)
	}
	lsn, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return 0, nil, "", fmt.Errorf("create replication slot %s: consistent point %q: %w", set.slot, res.ConsistentPoint, err)
	}
	return lsn, conn, res.SnapshotName, nil
}

// dropSlot drops the slot, waiting up to wait for a walsender still holding it to go.
func dropSlot(ctx context.Context, c *pgx.Conn, name string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		_, err := c.Exec(ctx, "SELECT pg_drop_replication_slot($1)", name)
		switch code := pgCode(err); {
		case err == nil, code == "42704":
			return nil
		case code == "55006" && time.Now().Before(deadline):
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		default:
			return fmt.Errorf("drop replication slot %s: %w", name, err)
		}
	}
}

// beginStream starts the replication stream at start and the receiver goroutine.
func (s *Source) beginStream(ctx context.Context, start pglogrepl.LSN) error {
	args := []string{
		fmt.Sprintf("proto_version '%d'", s.set.protoVersion),
		"publication_names '" + s.set.publication + "'",
		"messages 'true'",
	}
	if s.set.protoVersion >= 2 {
		args = append(args, "streaming 'on'")
	}
	var conn *pgconn.PgConn
	for attempt := 0; ; attempt++ {
		var err error
		if conn, err = s.set.connectReplication(ctx); err != nil {
			return err
		}
		err = pglogrepl.StartReplication(ctx, conn, s.set.slot, start, pglogrepl.StartReplicationOptions{Mode: pglogrepl.LogicalReplication, PluginArgs: args})
		if err == nil {
			break
		}
		_ = conn.Close(context.WithoutCancel(ctx))
		if pgCode(err) == "55006" && attempt < s.set.slotMaxRetries {
			s.log.Warn("replication slot in use; retrying", "slot", s.set.slot, "err", err, "attempt", attempt+1)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(s.set.slotRetryDelay):
			}
			continue
		}
		if pgCode(err) == "55006" {
			return fmt.Errorf("start replication from slot %s: %w (another client uses the slot)", s.set.slot, err)
		}
		return fmt.Errorf("start replication from slot %s at %s: %w", s.set.slot, start, err)
	}
	s.ackMu.Lock()
	r := newReceiver(conn, s.set.queueSize, s.set.statusInterval, s.acked, s.log, s.st)
	s.rcv = r
	s.ackMu.Unlock()
	rctx, cancel := context.WithCancel(context.Background())
	s.rcvCancel = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		r.run(rctx)
	}()
	s.log.Info("streaming", "slot", s.set.slot, "from", start, "protocol", s.set.protoVersion)
	return nil
}

// stopReceiver stops the receiver goroutine, reports the acknowledged LSN a last time and
// closes the replication connection.
func (s *Source) stopReceiver(ctx context.Context) {
	s.ackMu.Lock()
	r := s.rcv
	s.rcv = nil
	s.ackMu.Unlock()
	if r == nil {
		return
	}
	s.rcvCancel()
	<-r.done
	_ = r.conn.Conn().SetReadDeadline(time.Time{})
	if !r.conn.IsClosed() {
		if err := r.status(false); err != nil {
			s.log.Debug("final standby status", "err", err)
		}
		_ = r.conn.Close(ctx)
	}
}

// serverInfo is what the pre-flight checks learned about the server.
type serverInfo struct {
	Version int // server_version_num
}

// preflight checks the server, the role and the captured tables, and prepares the
// publication. Every problem is a permanent error that says what to run.
func preflight(ctx context.Context, c *pgx.Conn, set *settings, log interface {
	Warn(string, ...any)
	Info(string, ...any)
}, first bool) (serverInfo, error) {
	var info serverInfo
	var ver string
	if err := c.QueryRow(ctx, "SHOW server_version_num").Scan(&ver); err != nil {
		return info, fmt.Errorf("pre-flight: %w", err)
	}
	fmt.Sscan(ver, &info.Version)
	if info.Version < 100000 {
		return info, connect.Permanentf("postgres source: server version %s is too old: logical replication with pgoutput needs PostgreSQL 10 or newer", ver)
	}
	if set.protoVersion >= 2 && info.Version < 140000 {
		log.Warn("pgoutput protocol 2 needs PostgreSQL 14; using protocol 1", "server_version_num", info.Version)
		set.protoVersion = 1
	}
	var problems []string
	needSlot := set.snapshotMode != SnapshotInitialOnly

	var walLevel string
	if err := c.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil {
		return info, fmt.Errorf("pre-flight: %w", err)
	}
	if needSlot && walLevel != "logical" {
		problems = append(problems, fmt.Sprintf("wal_level is %s, logical decoding needs logical: run ALTER SYSTEM SET wal_level = logical; then restart the server", walLevel))
	}

	var repl, super bool
	var user string
	if err := c.QueryRow(ctx, "SELECT rolname, rolreplication, rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&user, &repl, &super); err != nil {
		return info, fmt.Errorf("pre-flight: %w", err)
	}
	if needSlot && !repl && !super {
		problems = append(problems, fmt.Sprintf("role %s lacks the REPLICATION attribute: run ALTER ROLE %s WITH REPLICATION;", user, quoteIdent(user)))
	}

	if needSlot {
		var maxSlots, maxSenders, usedSlots, usedSenders int
		var haveSlot bool
		err := c.QueryRow(ctx, `
SELECT current_setting('max_replication_slots')::int, current_setting('max_wal_senders')::int,
       (SELECT count(*) FROM pg_replication_slots)::int,
       EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1),
       (SELECT count(*) FROM pg_stat_replication r
        WHERE r.pid IS DISTINCT FROM (SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1))::int`, set.slot).
			Scan(&maxSlots, &maxSenders, &usedSlots, &haveSlot, &usedSenders)
		if err != nil {
			return info, fmt.Errorf("pre-flight: %w", err)
		}
		if !haveSlot && usedSlots >= maxSlots {
			problems = append(problems, fmt.Sprintf("all %d replication slots are in use (max_replication_slots = %d): run ALTER SYSTEM SET max_replication_slots = %d; "+
				"then restart the server, or drop an unused slot", usedSlots, maxSlots, usedSlots+1))
		}
		if usedSenders >= maxSenders {
			problems = append(problems, fmt.Sprintf("all %d WAL senders are in use (max_wal_senders = %d): run ALTER SYSTEM SET max_wal_senders = %d; then restart the server",
				usedSenders, maxSenders, usedSenders+1))
		}
	}

	if err := applyIdentityAutoset(ctx, c, set, log); err != nil {
		return info, err
	}
	tables, err := capturedTables(ctx, c, &set.filter)
	if err != nil {
		return info, err
	}
	if len(tables) == 0 && first {
		log.Warn("no table matches the filters; only tables created later will be captured")
	}
	problems = append(problems, privilegeProblems(ctx, c, user, tables)...)
	for _, t := range tables {
		if !t.HasPK && (t.ReplIdent == 'd' || t.ReplIdent == 'n') && needSlot {
			problems = append(problems, fmt.Sprintf("table %s has no primary key and REPLICA IDENTITY %s: its updates and deletes would carry no key "+
				"(and PostgreSQL rejects them once the table is in a publication): run ALTER TABLE %s REPLICA IDENTITY FULL; or add a primary key",
				t, identityName(t.ReplIdent), qualified(t.Schema, t.Name)))
		}
	}
	pubTables := tables
	if needSlot && set.incr.SignalTableEnabled() {
		sig, err := signalTableRef(ctx, c, set.incr.SignalTable)
		if err != nil {
			return info, err
		}
		if sig == nil {
			problems = append(problems, fmt.Sprintf("%s names %s, which does not exist: create it, e.g. CREATE TABLE %s (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048) NULL);",
				snapshot.KeySignalTable, set.incr.SignalTable, set.incr.SignalTable))
		} else if !set.filter.table(sig.Schema, sig.Name) {
			pubTables = append(append([]tableRef(nil), tables...), *sig)
		}
	}
	if len(problems) > 0 {
		return info, connect.Permanent(fmt.Errorf("postgres source pre-flight failed:\n  - %s", strings.Join(problems, "\n  - ")))
	}
	if needSlot {
		if err := ensurePublication(ctx, c, set, pubTables, log); err != nil {
			return info, err
		}
	}
	return info, nil
}

// signalTableRef finds the signal table (schema.table, matched like the filters: ignoring
// case); nil if it does not exist.
func signalTableRef(ctx context.Context, c *pgx.Conn, name string) (*tableRef, error) {
	all, err := listTables(ctx, c)
	if err != nil {
		return nil, err
	}
	for _, t := range all {
		if strings.EqualFold(t.String(), name) {
			return &t, nil
		}
	}
	return nil, nil
}

func identityName(b byte) string {
	switch b {
	case 'n':
		return "NOTHING"
	case 'f':
		return "FULL"
	case 'i':
		return "USING INDEX"
	}
	return "DEFAULT"
}

// privilegeProblems lists the missing USAGE and SELECT privileges on the captured tables.
func privilegeProblems(ctx context.Context, c *pgx.Conn, user string, tables []tableRef) []string {
	var out []string
	schemas := map[string]bool{}
	for _, t := range tables {
		if _, seen := schemas[t.Schema]; !seen {
			var ok bool
			if err := c.QueryRow(ctx, "SELECT has_schema_privilege(current_user, $1, 'USAGE')", t.Schema).Scan(&ok); err != nil {
				return []string{fmt.Sprintf("cannot check USAGE on schema %s: %v", t.Schema, err)}
			}
			schemas[t.Schema] = ok
			if !ok {
				out = append(out, fmt.Sprintf("role %s cannot use schema %s: run GRANT USAGE ON SCHEMA %s TO %s;", user, t.Schema, quoteIdent(t.Schema), quoteIdent(user)))
			}
		}
		if !schemas[t.Schema] {
			continue
		}
		var ok bool
		if err := c.QueryRow(ctx, "SELECT has_table_privilege(current_user, $1::oid, 'SELECT')", t.OID).Scan(&ok); err != nil {
			return append(out, fmt.Sprintf("cannot check SELECT on %s: %v", t, err))
		}
		if !ok {
			out = append(out, fmt.Sprintf("role %s cannot read table %s: run GRANT SELECT ON %s TO %s;", user, t, qualified(t.Schema, t.Name), quoteIdent(user)))
		}
	}
	return out
}

// applyIdentityAutoset runs the ALTER TABLE ... REPLICA IDENTITY of replica.identity.autoset.values.
func applyIdentityAutoset(ctx context.Context, c *pgx.Conn, set *settings, log interface{ Info(string, ...any) }) error {
	if len(set.identityAutoset) == 0 {
		return nil
	}
	tables, err := capturedTables(ctx, c, &set.filter)
	if err != nil {
		return err
	}
	for _, t := range tables {
		for _, r := range set.identityAutoset {
			if !r.table.MatchString(t.String()) {
				continue
			}
			q := "ALTER TABLE " + qualified(t.Schema, t.Name) + " REPLICA IDENTITY " + r.identity
			if _, err := c.Exec(ctx, q); err != nil {
				return connect.Permanent(fmt.Errorf("%s: %s: %w (the role must own the table)", KeyIdentityAutoset, q, err))
			}
			log.Info("replica identity set", "table", t.String(), "identity", r.identity)
			break
		}
	}
	return nil
}

// ensurePublication creates or checks the publication per publication.autocreate.mode.
func ensurePublication(ctx context.Context, c *pgx.Conn, set *settings, tables []tableRef, log interface{ Info(string, ...any) }) error {
	var all, ins, upd, del, trunc bool
	err := c.QueryRow(ctx, "SELECT puballtables, pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication WHERE pubname = $1", set.publication).
		Scan(&all, &ins, &upd, &del, &trunc)
	exists := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("read publication %s: %w", set.publication, err)
	}
	list := make([]string, len(tables))
	for i, t := range tables {
		list[i] = qualified(t.Schema, t.Name)
	}
	forTables := "FOR TABLE " + strings.Join(list, ", ")
	if len(list) == 0 {
		forTables = ""
	}
	pub := quoteIdent(set.publication)
	if !exists {
		var q string
		switch set.pubMode {
		case PublicationDisabled:
			return connect.Permanentf("publication %s does not exist and %s is disabled: create it, e.g. CREATE PUBLICATION %s FOR ALL TABLES; "+
				"or CREATE PUBLICATION %s %s;", set.publication, KeyPublicationMode, pub, pub, forTables)
		case PublicationAllTables:
			// every table of the database joins it: one without a key would reject its
			// updates and deletes from then on
			all, err := listTables(ctx, c)
			if err != nil {
				return err
			}
			var bad []string
			for _, t := range all {
				if !t.HasPK && (t.ReplIdent == 'd' || t.ReplIdent == 'n') {
					bad = append(bad, qualified(t.Schema, t.Name))
				}
			}
			if len(bad) > 0 {
				return connect.Permanentf("CREATE PUBLICATION %s FOR ALL TABLES would make PostgreSQL reject updates and deletes of %s, "+
					"which have no primary key and no replica identity: run ALTER TABLE ... REPLICA IDENTITY FULL; on them, or set %s=%s "+
					"to publish only the captured tables", pub, strings.Join(bad, ", "), KeyPublicationMode, PublicationFiltered)
			}
			q = "CREATE PUBLICATION " + pub + " FOR ALL TABLES"
		default:
			q = strings.TrimSpace("CREATE PUBLICATION " + pub + " " + forTables)
		}
		if _, err := c.Exec(ctx, q); err != nil {
			if pgCode(err) == "42501" {
				return connect.Permanent(fmt.Errorf("%s: %w; have a superuser (FOR ALL TABLES) or the tables' owner run it, "+
					"or set %s=%s and create the publication yourself", q, err, KeyPublicationMode, PublicationDisabled))
			}
			return fmt.Errorf("%s: %w", q, err)
		}
		log.Info("publication created", "publication", set.publication, "statement", q)
		return nil
	}
	if set.pubMode == PublicationFiltered && !all {
		q := "ALTER PUBLICATION " + pub + " SET TABLE " + strings.Join(list, ", ")
		if len(list) > 0 {
			missing, extra, err := publicationDiff(ctx, c, set.publication, tables)
			if err != nil {
				return err
			}
			if len(missing) > 0 || extra {
				if _, err := c.Exec(ctx, q); err != nil {
					return connect.Permanent(fmt.Errorf("%s: %w (the role must own the tables)", q, err))
				}
				log.Info("publication tables set", "publication", set.publication, "statement", q)
			}
		}
		return nil
	}
	if !all {
		missing, _, err := publicationDiff(ctx, c, set.publication, tables)
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			return connect.Permanentf("publication %s does not publish %s: run ALTER PUBLICATION %s ADD TABLE %s;",
				set.publication, strings.Join(missing, ", "), pub, strings.Join(missing, ", "))
		}
	}
	if !ins || !upd || !del {
		return connect.Permanentf("publication %s does not publish every insert, update and delete (publish = insert %t, update %t, delete %t): "+
			"run ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate');", set.publication, ins, upd, del, pub)
	}
	return nil
}

// publicationDiff returns the captured tables the publication lacks, and whether it has
// tables that are not captured.
func publicationDiff(ctx context.Context, c *pgx.Conn, publication string, tables []tableRef) ([]string, bool, error) {
	rows, err := c.Query(ctx, "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = $1", publication)
	if err != nil {
		return nil, false, fmt.Errorf("read publication %s: %w", publication, err)
	}
	have := map[string]bool{}
	for rows.Next() {
		var sch, name string
		if err := rows.Scan(&sch, &name); err != nil {
			rows.Close()
			return nil, false, fmt.Errorf("read publication %s: %w", publication, err)
		}
		have[sch+"\x00"+name] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("read publication %s: %w", publication, err)
	}
	var missing []string
	for _, t := range tables {
		k := t.Schema + "\x00" + t.Name
		if !have[k] {
			missing = append(missing, qualified(t.Schema, t.Name))
		}
		delete(have, k)
	}
	return missing, len(have) > 0, nil
}
