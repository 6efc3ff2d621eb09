package mysql

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
)

// openErr opens a source and returns the error of Open.
func openErr(t *testing.T, raw map[string]string) error {
	t.Helper()
	src := newSource(t, raw, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := src.Open(ctx, connect.Position{})
	src.Close(ctx)
	return err
}

func wantPermanent(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("Open succeeded, want an error containing %q", parts)
	}
	if !connect.IsPermanent(err) {
		t.Errorf("error is not permanent: %v", err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q\ndoes not contain %q", err, p)
		}
	}
}

// TestPreflightBinlogSettings: a server with STATEMENT format, MINIMAL row image and MINIMAL row
// metadata is refused with every problem and its fix; fixing them one by one leaves the rest.
func TestPreflightBinlogSettings(t *testing.T) {
	m := harness.NewMariaDB(t, harness.MariaDBOptions{ExtraArgs: []string{
		"--binlog-format=STATEMENT", "--binlog-row-image=MINIMAL", "--binlog-row-metadata=MINIMAL"}})
	cfg := baseConfig(m, m.Database, nil)
	wantPermanent(t, openErr(t, cfg),
		"binlog_format is STATEMENT, not ROW: run SET GLOBAL binlog_format = 'ROW'",
		"binlog_row_image is MINIMAL, not FULL: run SET GLOBAL binlog_row_image = 'FULL'",
		"binlog_row_metadata is MINIMAL, not FULL: run SET GLOBAL binlog_row_metadata = 'FULL'")
	exec(t, m, "SET GLOBAL binlog_format = 'ROW'", "SET GLOBAL binlog_row_image = 'FULL'")
	err := openErr(t, cfg)
	wantPermanent(t, err, "binlog_row_metadata is MINIMAL, not FULL")
	if strings.Contains(err.Error(), "binlog_format") || strings.Contains(err.Error(), "binlog_row_image") {
		t.Errorf("fixed settings still reported: %v", err)
	}
	exec(t, m, "SET GLOBAL binlog_row_metadata = 'FULL'")
	if err := openErr(t, cfg); err != nil {
		t.Fatalf("Open after the fixes: %v", err)
	}
}

// TestPreflightBinlogOff: a server without a binlog is refused.
func TestPreflightBinlogOff(t *testing.T) {
	m := harness.NewMariaDB(t, harness.MariaDBOptions{ExtraArgs: []string{"--skip-log-bin"}})
	wantPermanent(t, openErr(t, baseConfig(m, m.Database, nil)),
		"the binlog is off (log_bin=OFF): start the server with --log-bin")
}

// TestPreflightGrants: each missing privilege is named with the GRANT statement to run.
func TestPreflightGrants(t *testing.T) {
	m := sharedMariaDB(t)
	tests := []struct {
		grants string
		extra  map[string]string
		want   string
	}{
		{"SELECT, RELOAD, BINLOG MONITOR", nil, "lacks the privilege REPLICATION SLAVE: run GRANT REPLICATION SLAVE ON *.* TO 'pf0'@'127.0.0.1'"},
		{"SELECT, RELOAD, REPLICATION SLAVE", nil, "lacks the privilege BINLOG MONITOR: run GRANT BINLOG MONITOR ON *.* TO 'pf1'@'127.0.0.1'"},
		{"RELOAD, REPLICATION SLAVE, BINLOG MONITOR", nil, "lacks the privilege SELECT: run GRANT SELECT ON *.* TO 'pf2'@'127.0.0.1'"},
		{"SELECT, REPLICATION SLAVE, BINLOG MONITOR", nil, "lacks the privilege RELOAD (RELOAD is for the snapshot's brief global read lock; snapshot.locking.mode=none does without it): run GRANT RELOAD ON *.* TO 'pf3'@'127.0.0.1'"},
		{"USAGE", nil, "lacks the privileges REPLICATION SLAVE, BINLOG MONITOR, SELECT, RELOAD"},
		{"SELECT, REPLICATION SLAVE, BINLOG MONITOR", map[string]string{KeySnapshotLocking: "none"}, ""},
	}
	for i, tt := range tests {
		user := "pf" + strconv.Itoa(i)
		exec(t, m, "SET SESSION sql_log_bin = 0", "DROP USER IF EXISTS '"+user+"'@'127.0.0.1'",
			"CREATE USER '"+user+"'@'127.0.0.1' IDENTIFIED BY 'pw'", "GRANT "+tt.grants+" ON *.* TO '"+user+"'@'127.0.0.1'")
		extra := map[string]string{KeyUser: user, KeyPassword: "pw"}
		for k, v := range tt.extra {
			extra[k] = v
		}
		err := openErr(t, baseConfig(m, m.Database, extra))
		if tt.want == "" {
			if err != nil {
				t.Errorf("grants %s: Open: %v", tt.grants, err)
			}
			continue
		}
		wantPermanent(t, err, tt.want)
	}
	// a wrong password is permanent too
	wantPermanent(t, openErr(t, baseConfig(m, m.Database, map[string]string{KeyPassword: "wrong"})), "Access denied")
}

// TestPreflightServerID: the server's own id is refused; a second reader with the id of a
// running one ends the first with an error naming database.server.id.
func TestPreflightServerID(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	wantPermanent(t, openErr(t, baseConfig(m, db, map[string]string{KeyServerID: "1"})),
		"database.server.id 1 is the server's own server_id")

	cfg := baseConfig(m, db, map[string]string{KeySnapshotMode: SnapshotNoData, KeyHeartbeatInterval: "200"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := newSource(t, cfg, nil)
	if err := a.Open(ctx, connect.Position{}); err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	b := newSource(t, cfg, nil)
	if err := b.Open(ctx, connect.Position{}); err != nil {
		t.Fatalf("second reader: %v", err)
	}
	defer b.Close(ctx)
	exec(t, m, "CREATE TABLE "+quoteName(db)+".x (id INT PRIMARY KEY)", "INSERT INTO "+quoteName(db)+".x VALUES (1)")
	var errA, errB error
	for errA == nil && errB == nil {
		if _, errA = a.Read(ctx); errA != nil {
			break
		}
		_, errB = b.Read(ctx)
	}
	err := errA
	if err == nil {
		err = errB
	}
	wantPermanent(t, err, "database.server.id "+cfg[KeyServerID]+" is already used by another binlog reader")
}
