package harness

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

func pgConnect(t *testing.T, connString string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(testCtx(t), connString)
	if err != nil {
		t.Fatalf("connect %s: %v", connString, err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func pgShow(t *testing.T, c *pgx.Conn, names ...string) []string {
	t.Helper()
	var out []string
	for _, n := range names {
		var v string
		if err := c.QueryRow(testCtx(t), "SHOW "+n).Scan(&v); err != nil {
			t.Fatalf("SHOW %s: %v", n, err)
		}
		out = append(out, v)
	}
	return out
}

// The server is configured for logical decoding, a row written with pgx reads back, and a
// pgoutput slot on a replication connection delivers the insert.
func TestPostgresSmoke(t *testing.T) {
	pg := sharedPostgres(t)
	ctx := testCtx(t)
	c := pgConnect(t, pg.ConnString())

	got := pgShow(t, c, "wal_level", "max_replication_slots", "max_wal_senders", "server_version_num")
	if diff := cmp.Diff([]string{"logical", "16", "16"}, got[:3]); diff != "" {
		t.Fatalf("settings (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(got[3], "15") {
		t.Fatalf("server_version_num = %s, want 15xxxx", got[3])
	}

	for _, q := range []string{
		"CREATE TABLE smoke (id int PRIMARY KEY, name text)",
		"INSERT INTO smoke VALUES (1, 'alpha')",
		"CREATE PUBLICATION smoke_pub FOR TABLE smoke",
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var name string
	if err := c.QueryRow(ctx, "SELECT name FROM smoke WHERE id = 1").Scan(&name); err != nil || name != "alpha" {
		t.Fatalf("select = %q, %v; want alpha", name, err)
	}

	// the CDC role, not the superuser, streams
	rc, err := pgconn.Connect(ctx, pg.ConnStringFor(pg.ReplUser, pg.Database, true))
	if err != nil {
		t.Fatalf("replication connection: %v", err)
	}
	defer rc.Close(context.Background())
	const slot = "smoke_slot"
	if _, err := pglogrepl.CreateReplicationSlot(ctx, rc, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication}); err != nil {
		t.Fatalf("create slot: %v", err)
	}
	// inactive slots keep WAL forever: drop it whatever happens
	t.Cleanup(func() {
		// the walsender may outlive the closed connection for a moment: the slot stays
		// active until it exits, so retry until a deadline
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := pg.Exec(context.Background(), "SELECT pg_drop_replication_slot('"+slot+"')")
			if err == nil {
				return
			}
			if !strings.Contains(err.Error(), "is active") || time.Now().After(deadline) {
				t.Errorf("drop slot: %v", err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	if err := pglogrepl.StartReplication(ctx, rc, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'smoke_pub'"},
	}); err != nil {
		t.Fatalf("start replication: %v", err)
	}
	if _, err := c.Exec(ctx, "INSERT INTO smoke VALUES (2, 'beta')"); err != nil {
		t.Fatal(err)
	}

	rel := map[uint32]*pglogrepl.RelationMessage{}
	for {
		msg, err := rc.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok {
			t.Fatalf("unexpected message %T", msg)
		}
		if cd.Data[0] != pglogrepl.XLogDataByteID {
			continue // keepalive
		}
		xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
		if err != nil {
			t.Fatal(err)
		}
		m, err := pglogrepl.Parse(xld.WALData)
		if err != nil {
			t.Fatal(err)
		}
		switch m := m.(type) {
		case *pglogrepl.RelationMessage:
			rel[m.RelationID] = m
		case *pglogrepl.InsertMessage:
			r := rel[m.RelationID]
			if r == nil {
				t.Fatalf("insert for unknown relation %d", m.RelationID)
			}
			var cols []string
			for i, col := range m.Tuple.Columns {
				cols = append(cols, r.Columns[i].Name+"="+string(col.Data))
			}
			if diff := cmp.Diff("public.smoke [id=2 name=beta]", r.Namespace+"."+r.RelationName+" "+"["+strings.Join(cols, " ")+"]"); diff != "" {
				t.Fatalf("insert (-want +got):\n%s", diff)
			}
			// the flush position becomes the slot's confirmed_flush_lsn
			if err := pglogrepl.SendStandbyStatusUpdate(ctx, rc, pglogrepl.StandbyStatusUpdate{
				WALWritePosition: xld.WALStart + pglogrepl.LSN(len(xld.WALData)),
			}); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
}

// Settings win over the harness's own lines: a server can be misconfigured on purpose, and
// logical decoding then fails with the server's own words.
func TestPostgresSettings(t *testing.T) {
	pg := NewPostgres(t, PostgresOptions{Settings: []string{"wal_level = replica", "max_wal_senders = 2"}})
	c := pgConnect(t, pg.ConnString())
	if diff := cmp.Diff([]string{"replica", "2"}, pgShow(t, c, "wal_level", "max_wal_senders")); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	_, err := c.Exec(testCtx(t), "SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
	if err == nil || !strings.Contains(err.Error(), "logical decoding requires wal_level >= logical") {
		t.Fatalf("create slot on wal_level=replica: %v", err)
	}
	// ALTER SYSTEM and a restart fix it: settings live in postgresql.conf, not on the command line
	if err := pg.Exec(testCtx(t), "ALTER SYSTEM SET wal_level = logical"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Restart(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	c = pgConnect(t, pg.ConnString())
	if got := pgShow(t, c, "wal_level"); got[0] != "logical" {
		t.Fatalf("wal_level after ALTER SYSTEM and restart = %s", got[0])
	}
}

// Data survives Stop/Start and Kill/Start; the address stays.
func TestPostgresRestart(t *testing.T) {
	pg := sharedPostgres(t)
	if err := pg.Exec(testCtx(t), "CREATE TABLE restart (id int PRIMARY KEY)", "INSERT INTO restart VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T) {
		c := pgConnect(t, pg.ConnString())
		var id int
		if err := c.QueryRow(testCtx(t), "SELECT id FROM restart").Scan(&id); err != nil || id != 7 {
			t.Fatalf("after restart: id %d, %v; want 7", id, err)
		}
	}
	checkRestart(t, pg.Server, pg.Addr, check)
	checkKill(t, pg.Server, pg.Addr, check)
	// a client waiting on the old server sees its connection end, not a hang
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := pgConnect(t, pg.ConnString())
	if err := pg.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx); err == nil {
		t.Fatal("ping after Kill succeeded")
	}
	if err := pg.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	check(t)
}
