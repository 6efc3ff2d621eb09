package harness

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sys/unix"
)

const postgresInstall = "apt-get install -y postgresql-15 postgresql-client-15"

// PostgresOptions configures StartPostgres. The zero value is a CDC-ready server.
type PostgresOptions struct {
	// Settings are extra postgresql.conf lines ("name = value"), written after the harness's
	// own, so a later line wins: "wal_level = replica", "max_wal_senders = 1". They go into the
	// file, not the command line, so ALTER SYSTEM followed by a restart still works.
	Settings []string
	// Durable keeps fsync, synchronous_commit and full_page_writes on, for benchmarks; the
	// default turns them off for speed.
	Durable bool
	// StartTimeout bounds each start (default 60 s).
	StartTimeout time.Duration
}

// Postgres is a private PostgreSQL 15 cluster run by the unprivileged OS user "postgres" (the
// server refuses root): wal_level=logical, 16 replication slots and WAL senders, trust auth on
// 127.0.0.1 for every user, including replication connections.
type Postgres struct {
	*Server

	Host     string // 127.0.0.1
	Port     int
	User     string // "postgres", the superuser
	Database string // "postgres"
	// ReplUser is a login role with REPLICATION and pg_read_all_data but no superuser: what a
	// CDC reader needs beyond a publication made by someone else.
	ReplUser string
}

// StartPostgres runs initdb and starts postgres on a free loopback port, both as the OS user
// "postgres", and returns once the server accepts connections. The caller must Close it.
//
// The binaries are found in SLUICE_PG_BIN, else /usr/lib/postgresql/15/bin.
func StartPostgres(ctx context.Context, opts PostgresOptions) (*Postgres, error) {
	binDir := os.Getenv("SLUICE_PG_BIN")
	env := "SLUICE_PG_BIN"
	if binDir == "" {
		binDir, env = "/usr/lib/postgresql/15/bin", "SLUICE_PG_BIN to override"
	}
	for _, prog := range []string{"initdb", "postgres"} {
		if !isExecutable(filepath.Join(binDir, prog)) {
			return nil, fmt.Errorf("start postgres: %w", &NotInstalledError{
				What:    fmt.Sprintf("%s not found in %s (%s)", prog, binDir, env),
				Install: postgresInstall,
			})
		}
	}
	cred, err := osUser("postgres", postgresInstall)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	dir, err := makeDir("postgres")
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	pg := &Postgres{
		Server:   newServer("postgres", dir),
		Host:     "127.0.0.1",
		User:     "postgres",
		Database: "postgres",
		ReplUser: "cdc",
	}
	if opts.StartTimeout > 0 {
		pg.startTimeout = opts.StartTimeout
	}
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		return nil, fmt.Errorf("start postgres: %w", errJoinClose(err, pg.Server))
	}
	data := filepath.Join(dir, "data")
	err = runQuiet(ctx, []string{filepath.Join(binDir, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--no-sync", "--encoding=UTF8", "--locale=C"},
		dir, baseEnv(), cred, filepath.Join(dir, "initdb.log"))
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", errJoinClose(err, pg.Server))
	}
	if err := appendConf(filepath.Join(data, "postgresql.conf"), pg.conf(dir, opts)); err != nil {
		return nil, fmt.Errorf("start postgres: %w", errJoinClose(err, pg.Server))
	}
	if pg.Port, err = pickPort(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", errJoinClose(err, pg.Server))
	}
	pg.repick = func() (err error) { pg.Port, err = pickPort(); return err }
	pg.launch = func() ([]string, *proc, error) {
		// the port is the one setting on the command line: it changes when a port is taken
		argv := []string{filepath.Join(binDir, "postgres"), "-D", data, "-p", strconv.Itoa(pg.Port)}
		// SIGINT is the fast shutdown: abort transactions, disconnect clients (walsenders too)
		p, err := spawn(argv, dir, baseEnv(), cred, pg.logPath, syscall.SIGINT)
		return argv, p, err
	}
	pg.ready = func(ctx context.Context) error {
		c, err := pgconn.Connect(ctx, pg.ConnString())
		if err != nil {
			return err
		}
		return c.Close(ctx)
	}
	pg.onFirst = func(ctx context.Context) error {
		return pg.Exec(ctx,
			"CREATE ROLE "+pg.ReplUser+" WITH LOGIN REPLICATION",
			"GRANT pg_read_all_data TO "+pg.ReplUser,
		)
	}
	pg.onClose = func() { removeSysVShm(dir) }
	if err := startOrClean(ctx, pg.Server); err != nil {
		return nil, err
	}
	return pg, nil
}

// NewPostgres is StartPostgres for one test: it fails t when the server does not start and
// closes the server in t.Cleanup.
func NewPostgres(t testing.TB, opts PostgresOptions) *Postgres {
	t.Helper()
	pg, err := StartPostgres(context.Background(), opts)
	return mustStart(t, pg, err)
}

func (pg *Postgres) conf(dir string, opts PostgresOptions) []string {
	lines := []string{
		"",
		"# written by the sluice e2e harness",
		"listen_addresses = '127.0.0.1'",
		"unix_socket_directories = '" + dir + "'",
		"wal_level = logical",
		"max_replication_slots = 16",
		"max_wal_senders = 16",
		"max_connections = 100",
		"shared_buffers = 128MB",
		"logging_collector = off",
		"log_min_messages = warning",
		// dynamic shared memory in the data directory, not /dev/shm: a server the tests kill
		// with SIGKILL would leave its segments there for good
		"dynamic_shared_memory_type = mmap",
	}
	if !opts.Durable {
		lines = append(lines, "fsync = off", "synchronous_commit = off", "full_page_writes = off")
	}
	return append(lines, opts.Settings...)
}

// Addr is host:port of the server.
func (pg *Postgres) Addr() string { return fmt.Sprintf("%s:%d", pg.Host, pg.Port) }

// ConnString is a pgx connection string for the superuser on Database.
func (pg *Postgres) ConnString() string {
	return pg.ConnStringFor(pg.User, pg.Database, false)
}

// ReplicationConnString is ConnString with replication=database, for pglogrepl.
func (pg *Postgres) ReplicationConnString() string {
	return pg.ConnStringFor(pg.User, pg.Database, true)
}

// ConnStringFor is a pgx connection string for any user and database (auth is trust).
func (pg *Postgres) ConnStringFor(user, database string, replication bool) string {
	s := fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", user, pg.Addr(), database)
	if replication {
		s += "&replication=database"
	}
	return s
}

// Exec runs each statement in order as the superuser, on one connection, each on its own (so
// ALTER SYSTEM and CREATE DATABASE work).
func (pg *Postgres) Exec(ctx context.Context, stmts ...string) error {
	c, err := pgconn.Connect(ctx, pg.ConnString())
	if err != nil {
		return fmt.Errorf("postgres exec: %w", err)
	}
	defer c.Close(context.Background())
	for _, q := range stmts {
		if _, err := c.Exec(ctx, q).ReadAll(); err != nil {
			return fmt.Errorf("postgres exec %q: %w", q, err)
		}
	}
	return nil
}

func appendConf(path string, lines []string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("write postgresql.conf: %w", err)
	}
	if _, err := f.WriteString(strings.Join(lines, "\n") + "\n"); err != nil {
		_ = f.Close()
		return fmt.Errorf("write postgresql.conf: %w", err)
	}
	return f.Close()
}

// osUser looks up an unprivileged OS user that a server runs as.
func osUser(name, install string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, &NotInstalledError{What: fmt.Sprintf("OS user %q not found", name), Install: install}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("OS user %q: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("OS user %q: gid %q: %w", name, u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// removeSysVShm removes the System V shared memory segment of a PostgreSQL data dir under dir
// whose postmaster was killed (a clean shutdown removes it; SIGKILL leaves it to the kernel's
// limit forever). postmaster.pid line 7 is "<key> <id>".
func removeSysVShm(dir string) {
	f, err := os.Open(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for i := 1; sc.Scan(); i++ {
		if i != 7 {
			continue
		}
		fs := strings.Fields(sc.Text())
		if len(fs) == 2 {
			if id, err := strconv.Atoi(fs[1]); err == nil {
				var ds unix.SysvShmDesc
				// only a segment nobody is attached to: the id may have been reused
				if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &ds); err == nil && ds.Nattch == 0 {
					_, _ = unix.SysvShmCtl(id, unix.IPC_RMID, nil)
				}
			}
		}
		return
	}
}
