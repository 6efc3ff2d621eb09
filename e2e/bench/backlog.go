package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// The backlog's mix: 98 % of the rows in 1,000-row transactions, the rest one row per
// transaction (at rows = 1,000,000: 980 and 20,000 transactions).
func backlogMix(rows int) (bulkTx, singles int) {
	bulkTx = rows * 98 / 100 / 1000
	return bulkTx, rows - bulkTx*1000
}

func (b *bench) myConn(db string) (*client.Conn, error) {
	c, err := client.Connect(b.my.Addr(), b.my.AppUser, b.my.AppPassword, db)
	if err != nil {
		return nil, fmt.Errorf("connect to mariadb: %w", err)
	}
	if _, err := c.Execute("SET time_zone = '+00:00'"); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (b *bench) pgConn(ctx context.Context) (*pgx.Conn, error) {
	c, err := pgx.Connect(ctx, b.pg.ConnString())
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return c, nil
}

func myExec(c *client.Conn, stmts ...string) error {
	for _, s := range stmts {
		if _, err := c.Execute(s); err != nil {
			return fmt.Errorf("%.80s: %w", s, err)
		}
	}
	return nil
}

func pgExec(ctx context.Context, c *pgx.Conn, stmts ...string) error {
	for _, s := range stmts {
		if _, err := c.Exec(ctx, s); err != nil {
			return fmt.Errorf("%.80s: %w", s, err)
		}
	}
	return nil
}

const myTableDDL = "CREATE TABLE %s.t (id BIGINT PRIMARY KEY, v INT NOT NULL, s VARCHAR(40) NOT NULL, ts DATETIME(6) NOT NULL)"
const pgTableDDL = "CREATE TABLE %s.t (id bigint PRIMARY KEY, v int NOT NULL, s text NOT NULL, ts timestamptz NOT NULL)"

// myBacklog is the MariaDB backlog: a binlog file of its own, the oldest on the server, so that
// snapshot.mode=never starts right at it.
type myBacklog struct {
	db        string
	file      string
	pos, end  uint32
	rows      int
	writeTime time.Duration
}

func myHead(c *client.Conn) (string, uint32, error) {
	r, err := c.Execute("SHOW MASTER STATUS")
	if err != nil {
		return "", 0, err
	}
	f, _ := r.GetString(0, 0)
	p, _ := r.GetUint(0, 1)
	return f, uint32(p), nil
}

// makeMyBacklog writes the backlog into database db.
func (b *bench) makeMyBacklog(ctx context.Context, db string, rows int) (*myBacklog, error) {
	c, err := b.myConn("")
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := myExec(c, "CREATE DATABASE "+db, "USE "+db, fmt.Sprintf(myTableDDL, db), "FLUSH BINARY LOGS"); err != nil {
		return nil, err
	}
	file, _, err := myHead(c)
	if err != nil {
		return nil, err
	}
	// the server keeps files until its binlog checkpoint passes them: retry the purge
	for deadline := time.Now().Add(30 * time.Second); ; {
		if err := myExec(c, fmt.Sprintf("PURGE BINARY LOGS TO '%s'", file)); err != nil {
			return nil, err
		}
		r, err := c.Execute("SHOW BINARY LOGS")
		if err != nil {
			return nil, err
		}
		if first, _ := r.GetString(0, 0); first == file {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("binlog files before %s are still on the server", file)
		}
		time.Sleep(200 * time.Millisecond)
	}
	bulk, singles := backlogMix(rows)
	t0 := time.Now()
	id := 0
	for i := 0; i < bulk; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if _, err := c.Execute(fmt.Sprintf("INSERT INTO %s.t (id, v, s, ts) SELECT %d + seq, seq %% 1000, CONCAT('bulk row ', %d + seq), NOW(6) FROM seq_1_to_1000", db, id, id)); err != nil {
			return nil, err
		}
		id += 1000
	}
	for i := 0; i < singles; i++ {
		id++
		if _, err := c.Execute(fmt.Sprintf("INSERT INTO %s.t (id, v, s, ts) VALUES (%d, %d, 'single row %d', NOW(6))", db, id, id%1000, id)); err != nil {
			return nil, err
		}
	}
	_, end, err := myHead(c)
	if err != nil {
		return nil, err
	}
	return &myBacklog{db: db, file: file, pos: 4, end: end, rows: rows, writeTime: time.Since(t0)}, nil
}

// rawBinlogDecode decodes the backlog with a bare go-mysql BinlogSyncer and a no-op handler.
func (b *bench) rawBinlogDecode(ctx context.Context, bl *myBacklog) (time.Duration, error) {
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 7100, Flavor: "mariadb", Host: b.my.Host, Port: uint16(b.my.Port),
		User: b.my.ReplUser, Password: b.my.ReplPassword, Logger: slog.New(slog.DiscardHandler),
	})
	defer syncer.Close()
	t0 := time.Now()
	st, err := syncer.StartSync(gomysql.Position{Name: bl.file, Pos: bl.pos})
	if err != nil {
		return 0, err
	}
	rows := 0
	for {
		ev, err := st.GetEvent(ctx)
		if err != nil {
			return 0, err
		}
		if re, ok := ev.Event.(*replication.RowsEvent); ok {
			rows += len(re.Rows)
		}
		if ev.Header.LogPos >= bl.end && ev.Header.LogPos > 0 {
			break
		}
	}
	took := time.Since(t0)
	if rows != bl.rows {
		return 0, fmt.Errorf("raw binlog decode saw %d rows, want %d", rows, bl.rows)
	}
	return took, nil
}

// pgBacklog is the PostgreSQL backlog: slots made before it, one per reader.
type pgBacklog struct {
	schema    string
	pub       string
	slots     map[string]string // reader -> slot
	rows      int
	writeTime time.Duration
}

// makePGBacklog makes the schema, its publication, a slot per reader, then the backlog.
func (b *bench) makePGBacklog(ctx context.Context, schema string, rows int, readers ...string) (*pgBacklog, error) {
	c, err := b.pgConn(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close(ctx)
	bl := &pgBacklog{schema: schema, pub: "bench_" + schema, slots: map[string]string{}, rows: rows}
	if err := pgExec(ctx, c, "CREATE SCHEMA "+schema, fmt.Sprintf(pgTableDDL, schema),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s.t", bl.pub, schema)); err != nil {
		return nil, err
	}
	for _, r := range readers {
		slot := fmt.Sprintf("bench_%s_%s", schema, r)
		if err := pgExec(ctx, c, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", slot)); err != nil {
			return nil, err
		}
		bl.slots[r] = slot
	}
	bulk, singles := backlogMix(rows)
	t0 := time.Now()
	id := 0
	for i := 0; i < bulk; i++ {
		if err := pgExec(ctx, c, fmt.Sprintf("INSERT INTO %s.t SELECT g, g %% 1000, 'bulk row ' || g, now() FROM generate_series(%d, %d) g", schema, id+1, id+1000)); err != nil {
			return nil, err
		}
		id += 1000
	}
	for i := 0; i < singles; i++ {
		id++
		if _, err := c.Exec(ctx, fmt.Sprintf("INSERT INTO %s.t VALUES (%d, %d, 'single row %d', now())", schema, id, id%1000, id)); err != nil {
			return nil, err
		}
	}
	bl.writeTime = time.Since(t0)
	return bl, nil
}

// dropSlots drops the backlog's slots that remain (inactive slots hold WAL forever).
func (b *bench) dropSlots(ctx context.Context, bl *pgBacklog) {
	c, err := b.pgConn(ctx)
	if err != nil {
		return
	}
	defer c.Close(ctx)
	for _, s := range bl.slots {
		_, _ = c.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active", s)
	}
}

// rawPGReceive receives the slot's changes with a bare pglogrepl loop that parses every
// message, until it has seen every insert of the backlog.
func (b *bench) rawPGReceive(ctx context.Context, bl *pgBacklog, slot string) (time.Duration, error) {
	conn, err := pgconn.Connect(ctx, b.pg.ConnStringFor(b.pg.User, "postgres", true))
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	t0 := time.Now()
	err = pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{PluginArgs: []string{
		"proto_version '2'", "publication_names '" + bl.pub + "'", "messages 'true'", "streaming 'on'",
	}})
	if err != nil {
		return 0, err
	}
	inserts := 0
	var last pglogrepl.LSN
	next := time.Now().Add(5 * time.Second)
	for inserts < bl.rows {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return 0, err
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok {
			continue
		}
		switch cd.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, _ := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			if ka.ReplyRequested {
				_ = pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: last})
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
			if err != nil {
				return 0, err
			}
			m, err := pglogrepl.ParseV2(xld.WALData, false)
			if err != nil {
				return 0, err
			}
			if _, ok := m.(*pglogrepl.InsertMessageV2); ok {
				inserts++
			}
			last = xld.WALStart
		}
		if time.Now().After(next) {
			_ = pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: last})
			next = time.Now().Add(5 * time.Second)
		}
	}
	return time.Since(t0), nil
}
