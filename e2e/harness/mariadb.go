package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
)

const mariadbInstall = "apt-get install -y mariadb-server mariadb-client"

// MariaDBOptions configures StartMariaDB. The zero value is a CDC-ready server.
type MariaDBOptions struct {
	// ServerID is the server's server_id (default 1). Binlog readers must use another id.
	ServerID uint32
	// Durable turns on sync_binlog=1 and innodb_flush_log_at_trx_commit=1, for benchmarks;
	// the default trades durability for speed (sync_binlog=0, innodb_flush_log_at_trx_commit=2).
	Durable bool
	// ExtraArgs are appended to the mariadbd command line; a later option wins, so they can
	// misconfigure the server on purpose: "--skip-log-bin", "--binlog-format=STATEMENT",
	// "--binlog-row-image=MINIMAL".
	ExtraArgs []string
	// StartTimeout bounds each start (default 60 s).
	StartTimeout time.Duration
}

// MariaDB is a private mariadbd: ROW binlog with FULL row image and FULL row metadata, GTID
// strict mode, CRC32 checksums, utf8mb4. Its users are made with sql_log_bin=0, so a fresh
// server's binlog holds no transaction.
type MariaDB struct {
	*Server

	Host     string // 127.0.0.1
	Port     int
	Socket   string // unix socket; root connects here without a password
	ServerID uint32

	// ReplUser has REPLICATION SLAVE, REPLICATION CLIENT (BINLOG MONITOR), SELECT, RELOAD and
	// SHOW DATABASES on *.*: what a CDC reader needs.
	ReplUser, ReplPassword string
	// AppUser has all privileges (with grant option), for test DDL and DML.
	AppUser, AppPassword string
	// Database is a database created empty for tests ("app").
	Database string
}

// StartMariaDB initialises a datadir with mariadb-install-db, starts mariadbd on a free
// loopback port and returns once it answers and its users exist. The caller must Close it.
//
// mariadbd is found through SLUICE_MARIADBD, else PATH, /usr/sbin and /usr/bin.
func StartMariaDB(ctx context.Context, opts MariaDBOptions) (*MariaDB, error) {
	mariadbd, err := findProgram("mariadbd", "SLUICE_MARIADBD", []string{"/usr/sbin", "/usr/bin"}, mariadbInstall)
	if err != nil {
		return nil, fmt.Errorf("start mariadb: %w", err)
	}
	installDB, err := findProgram("mariadb-install-db", "SLUICE_MARIADB_INSTALL_DB", []string{"/usr/bin", "/usr/sbin"}, mariadbInstall)
	if err != nil {
		return nil, fmt.Errorf("start mariadb: %w", err)
	}
	dir, err := makeDir("mariadb")
	if err != nil {
		return nil, fmt.Errorf("start mariadb: %w", err)
	}
	m := &MariaDB{
		Server:       newServer("mariadb", dir),
		Host:         "127.0.0.1",
		Socket:       filepath.Join(dir, "mysqld.sock"),
		ServerID:     opts.ServerID,
		ReplUser:     "cdc",
		ReplPassword: "cdcpass",
		AppUser:      "app",
		AppPassword:  "apppass",
		Database:     "app",
	}
	if m.ServerID == 0 {
		m.ServerID = 1
	}
	if opts.StartTimeout > 0 {
		m.startTimeout = opts.StartTimeout
	}
	data := filepath.Join(dir, "data")
	// install-db first: it is the slow half and needs no port
	// A second try on a fresh datadir: under heavy load the bootstrap server has been seen to
	// fail once (its log, kept in install.log, says why) and succeed when run again.
	for try := 1; try <= 2; try++ {
		err = runQuiet(ctx, []string{installDB, "--no-defaults", "--user=root", "--datadir=" + data,
			"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve",
			"--innodb-log-file-size=16M"}, dir, baseEnv(), nil, filepath.Join(dir, "install.log"))
		if err == nil || ctx.Err() != nil {
			break
		}
		if rmErr := os.RemoveAll(data); rmErr != nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("start mariadb: %w", errJoinClose(err, m.Server))
	}
	if m.Port, err = pickPort(); err != nil {
		return nil, fmt.Errorf("start mariadb: %w", errJoinClose(err, m.Server))
	}
	m.repick = func() (err error) { m.Port, err = pickPort(); return err }
	// The server's temporary tables live in its own directory, not in the shared /tmp, where
	// a cleanup by another process has removed them under a running query.
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("start mariadb: %w", errJoinClose(err, m.Server))
	}
	m.launch = func() ([]string, *proc, error) {
		argv := []string{mariadbd, "--no-defaults", "--user=root",
			"--datadir=" + data, "--socket=" + m.Socket, "--pid-file=" + filepath.Join(dir, "mysqld.pid"),
			"--tmpdir=" + tmp,
			"--port=" + strconv.Itoa(m.Port), "--bind-address=127.0.0.1", "--skip-name-resolve",
			"--server-id=" + strconv.FormatUint(uint64(m.ServerID), 10),
			"--log-bin=" + filepath.Join(data, "mariadb-bin"), "--binlog-format=ROW",
			"--binlog-row-image=FULL", "--binlog-row-metadata=FULL", "--binlog-checksum=CRC32",
			"--gtid-domain-id=0", "--gtid-strict-mode=ON",
			"--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci",
			"--innodb-log-file-size=16M", "--innodb-buffer-pool-size=128M",
			"--performance-schema=OFF", "--max-connections=200",
		}
		if opts.Durable {
			argv = append(argv, "--sync-binlog=1", "--innodb-flush-log-at-trx-commit=1")
		} else {
			argv = append(argv, "--sync-binlog=0", "--innodb-flush-log-at-trx-commit=2")
		}
		argv = append(argv, opts.ExtraArgs...)
		p, err := spawn(argv, dir, baseEnv(), nil, m.logPath, syscall.SIGTERM)
		return argv, p, err
	}
	m.ready = func(ctx context.Context) error {
		c, err := m.rootConn(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Execute("SELECT 1")
		return err
	}
	m.onFirst = func(ctx context.Context) error {
		return m.Exec(ctx,
			"SET SESSION sql_log_bin = 0",
			fmt.Sprintf("CREATE USER '%[1]s'@'127.0.0.1' IDENTIFIED BY '%[2]s', '%[1]s'@'localhost' IDENTIFIED BY '%[2]s'", m.ReplUser, m.ReplPassword),
			fmt.Sprintf("GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT, RELOAD, SHOW DATABASES ON *.* TO '%[1]s'@'127.0.0.1', '%[1]s'@'localhost'", m.ReplUser),
			fmt.Sprintf("CREATE USER '%[1]s'@'127.0.0.1' IDENTIFIED BY '%[2]s', '%[1]s'@'localhost' IDENTIFIED BY '%[2]s'", m.AppUser, m.AppPassword),
			fmt.Sprintf("GRANT ALL PRIVILEGES ON *.* TO '%[1]s'@'127.0.0.1', '%[1]s'@'localhost' WITH GRANT OPTION", m.AppUser),
			"CREATE DATABASE "+m.Database,
		)
	}
	if err := startOrClean(ctx, m.Server); err != nil {
		return nil, err
	}
	return m, nil
}

// NewMariaDB is StartMariaDB for one test: it fails t when the server does not start and
// closes the server in t.Cleanup.
func NewMariaDB(t testing.TB, opts MariaDBOptions) *MariaDB {
	t.Helper()
	m, err := StartMariaDB(context.Background(), opts)
	return mustStart(t, m, err)
}

// Addr is host:port of the server's TCP listener.
func (m *MariaDB) Addr() string { return fmt.Sprintf("%s:%d", m.Host, m.Port) }

// DSN is a go-sql-driver/mysql data source name for AppUser on Database over TCP.
func (m *MariaDB) DSN() string {
	return fmt.Sprintf("%s:%s@tcp(%s)/%s", m.AppUser, m.AppPassword, m.Addr(), m.Database)
}

// Exec runs each statement in order as root over the unix socket, on one connection (so a
// session setting such as sql_log_bin=0 applies to the statements after it).
func (m *MariaDB) Exec(ctx context.Context, stmts ...string) error {
	c, err := m.rootConn(ctx)
	if err != nil {
		return fmt.Errorf("mariadb exec: %w", err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	for _, q := range stmts {
		if _, err := c.Execute(q); err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return fmt.Errorf("mariadb exec %q: %w", q, err)
		}
	}
	return nil
}

// rootConn connects as root (no password) over the unix socket.
func (m *MariaDB) rootConn(ctx context.Context) (*client.Conn, error) {
	d := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		d = time.Until(dl)
	}
	return client.ConnectWithContext(ctx, m.Socket, "root", "", "", d)
}

// errJoinClose closes a server whose first start failed and returns err with any close error.
func errJoinClose(err error, s *Server) error {
	if cerr := s.Close(); cerr != nil {
		return fmt.Errorf("%w (and %w)", err, cerr)
	}
	return err
}
