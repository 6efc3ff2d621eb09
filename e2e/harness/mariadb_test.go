package harness

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/go-cmp/cmp"
)

func appConn(t *testing.T, m *MariaDB) *client.Conn {
	t.Helper()
	c, err := client.Connect(m.Addr(), m.AppUser, m.AppPassword, m.Database)
	if err != nil {
		t.Fatalf("connect as %s: %v", m.AppUser, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func queryStrings(t *testing.T, c *client.Conn, q string) [][]string {
	t.Helper()
	r, err := c.Execute(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer r.Close()
	var rows [][]string
	for i := range r.RowNumber() {
		var row []string
		for j := range r.ColumnNumber() {
			s, err := r.GetString(i, j)
			if err != nil {
				t.Fatalf("%s: row %d col %d: %v", q, i, j, err)
			}
			row = append(row, s)
		}
		rows = append(rows, row)
	}
	return rows
}

// The server is configured as CDC needs, and a row written over TCP by the app user comes back
// both from a SELECT and from the binlog, read by the replication user with its own server id.
func TestMariaDBSmoke(t *testing.T) {
	m := sharedMariaDB(t)
	c := appConn(t, m)

	vars := queryStrings(t, c, "SELECT @@binlog_format, @@binlog_row_image, @@binlog_row_metadata, "+
		"@@gtid_strict_mode, @@binlog_checksum, @@server_id, @@log_bin")
	want := [][]string{{"ROW", "FULL", "FULL", "1", "CRC32", "1", "1"}}
	if diff := cmp.Diff(want, vars); diff != "" {
		t.Fatalf("server variables (-want +got):\n%s", diff)
	}

	for _, q := range []string{
		"CREATE TABLE smoke (id INT PRIMARY KEY, name VARCHAR(20))",
		"INSERT INTO smoke VALUES (1, 'alpha')",
	} {
		if _, err := c.Execute(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if diff := cmp.Diff([][]string{{"1", "alpha"}}, queryStrings(t, c, "SELECT id, name FROM smoke")); diff != "" {
		t.Fatalf("select (-want +got):\n%s", diff)
	}

	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 1001,
		Flavor:   mysql.MariaDBFlavor,
		Host:     m.Host,
		Port:     uint16(m.Port),
		User:     m.ReplUser,
		Password: m.ReplPassword,
		Logger:   slog.New(slog.DiscardHandler),
	})
	defer syncer.Close()
	gset, err := mysql.ParseMariadbGTIDSet("")
	if err != nil {
		t.Fatal(err)
	}
	stream, err := syncer.StartSyncGTID(gset)
	if err != nil {
		t.Fatalf("start binlog sync as %s: %v", m.ReplUser, err)
	}
	ctx := testCtx(t)
	for {
		ev, err := stream.GetEvent(ctx)
		if err != nil {
			t.Fatalf("read binlog: %v", err)
		}
		rows, ok := ev.Event.(*replication.RowsEvent)
		if !ok {
			continue
		}
		if ev.Header.EventType != replication.WRITE_ROWS_EVENTv1 && ev.Header.EventType != replication.WRITE_ROWS_EVENTv2 {
			t.Fatalf("first rows event is %v, want a write", ev.Header.EventType)
		}
		got := fmt.Sprintf("%s.%s %v %v", rows.Table.Schema, rows.Table.Table, rows.Table.ColumnNameString(), rows.Rows)
		if want := "app.smoke [id name] [[1 alpha]]"; got != want {
			t.Fatalf("row event = %q, want %q", got, want)
		}
		return
	}
}

// The replication user has exactly the privileges a CDC reader needs.
func TestMariaDBGrants(t *testing.T) {
	m := sharedMariaDB(t)
	c := appConn(t, m)
	for _, host := range []string{"127.0.0.1", "localhost"} {
		got := queryStrings(t, c, fmt.Sprintf("SHOW GRANTS FOR '%s'@'%s'", m.ReplUser, host))
		if len(got) != 1 || len(got[0]) != 1 {
			t.Fatalf("grants = %v, want one line", got)
		}
		grant, _, _ := strings.Cut(got[0][0], " IDENTIFIED BY") // the password hash is not worth pinning
		want := "GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `cdc`@`" + host + "`"
		if grant != want {
			t.Fatalf("grants = %q, want %q", grant, want)
		}
	}
}

// Data and the binlog survive Stop/Start and Kill/Start; the address stays.
func TestMariaDBRestart(t *testing.T) {
	m := sharedMariaDB(t)
	if err := m.Exec(testCtx(t), "CREATE TABLE app.restart (id INT PRIMARY KEY)", "INSERT INTO app.restart VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T) {
		c := appConn(t, m)
		if diff := cmp.Diff([][]string{{"7"}}, queryStrings(t, c, "SELECT id FROM restart")); diff != "" {
			t.Fatalf("after restart (-want +got):\n%s", diff)
		}
		if pos := queryStrings(t, c, "SELECT @@gtid_binlog_pos"); pos[0][0] == "" {
			t.Fatal("gtid_binlog_pos empty after restart: binlog lost")
		}
	}
	checkRestart(t, m.Server, m.Addr, check)
	checkKill(t, m.Server, m.Addr, check)
}

// ExtraArgs win over the harness's flags (tests start misconfigured servers this way), and the
// users made at start stay out of the binlog.
func TestMariaDBExtraArgs(t *testing.T) {
	m := NewMariaDB(t, MariaDBOptions{ServerID: 7, ExtraArgs: []string{"--binlog-format=STATEMENT", "--binlog-row-image=MINIMAL"}})
	c := appConn(t, m)
	got := queryStrings(t, c, "SELECT @@binlog_format, @@binlog_row_image, @@server_id, @@gtid_binlog_pos")
	if diff := cmp.Diff([][]string{{"STATEMENT", "MINIMAL", "7", ""}}, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}
