package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A missing server program fails the start with the command that installs it; nothing is
// started and no dir is left.
func TestMissingProgramHint(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name  string
		env   string
		start func() error
		want  string
	}{
		{"mariadb", "SLUICE_MARIADBD", func() error { _, err := StartMariaDB(ctx, MariaDBOptions{}); return err },
			"start mariadb: mariadbd not found at /nonexistent/x (from SLUICE_MARIADBD): run `make setup` (bash e2e/setup/setup.sh) (apt-get install -y mariadb-server mariadb-client)"},
		{"postgres", "SLUICE_PG_BIN", func() error { _, err := StartPostgres(ctx, PostgresOptions{}); return err },
			"start postgres: initdb not found in /nonexistent/x (SLUICE_PG_BIN): run `make setup` (bash e2e/setup/setup.sh) (apt-get install -y postgresql-15 postgresql-client-15)"},
		{"redis", "SLUICE_REDIS_SERVER", func() error { _, err := StartRedis(ctx, RedisOptions{}); return err },
			"start redis: redis-server not found at /nonexistent/x (from SLUICE_REDIS_SERVER): run `make setup` (bash e2e/setup/setup.sh) (apt-get install -y redis-server)"},
		{"elasticsearch", "SLUICE_ES_HOME", func() error { _, err := StartElasticsearch(ctx, ElasticsearchOptions{}); return err },
			"start elasticsearch: elasticsearch not found in /nonexistent/x (SLUICE_ES_HOME): run `make setup` (bash e2e/setup/setup.sh) (bash e2e/setup/setup.sh fetches org.elasticsearch.distribution.integ-test-zip:elasticsearch:8.19.21:zip from Maven Central)"},
		{"kafka", "SLUICE_KAFKA_LIBS", func() error { _, err := StartKafka(ctx, KafkaOptions{}); return err },
			"start kafka: kafka_2.13 jar not found in /nonexistent/x (SLUICE_KAFKA_LIBS): run `make setup` (bash e2e/setup/setup.sh) (bash e2e/setup/setup.sh fetches org.apache.kafka:kafka_2.13:4.4.0 and its dependencies from Maven Central)"},
		{"java", "SLUICE_JAVA_HOME", func() error { _, err := StartKafka(ctx, KafkaOptions{}); return err },
			"start kafka: java not found in /nonexistent/x/bin (SLUICE_JAVA_HOME): run `make setup` (bash e2e/setup/setup.sh) (apt-get install -y openjdk-17-jdk-headless)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(ownDirs())
			t.Setenv(tc.env, "/nonexistent/x")
			err := tc.start()
			if err == nil {
				t.Fatal("started without its program")
			}
			if err.Error() != tc.want {
				t.Fatalf("error =\n%s\nwant\n%s", err, tc.want)
			}
			var nie *NotInstalledError
			if !errors.As(err, &nie) {
				t.Fatalf("error %T is not a *NotInstalledError", err)
			}
			if left := ownDirs(); len(left) != before {
				t.Fatalf("dirs after a failed start: %v, want %d", left, before)
			}
		})
	}
}

// Close leaves nothing: every process of the server's group is gone and the dir is removed.
// PostgreSQL is the case that matters: the postmaster has children.
func TestCloseLeavesNothing(t *testing.T) {
	var pids []int
	var dir string
	var pgid int
	t.Run("server", func(t *testing.T) {
		pg := NewPostgres(t, PostgresOptions{})
		dir, pgid = pg.Dir(), pg.PID()
		// a client connection gives the postmaster one more child
		if err := pg.Exec(testCtx(t), "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		pids = append(descendants(pgid), pgid)
		if len(pids) < 4 {
			t.Fatalf("postgres %d has %d processes, want the postmaster and its children", pgid, len(pids))
		}
	})
	for _, pid := range pids {
		if !processGone(pid) {
			t.Errorf("process %d still running after Close", pid)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir %s after Close: %v, want it removed", dir, err)
	}
}

// A port taken between the pick and the server's bind makes the harness pick another one.
func TestPortTakenRetries(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	firstPick = func() (int, error) { firstPick = nil; return taken, nil }
	r := NewRedis(t, RedisOptions{})
	if r.Port == taken {
		t.Fatalf("redis on the taken port %d", taken)
	}
	if !addrInUse(r.LogPath(), 0) {
		t.Fatalf("redis log does not show the failed bind:\n%s", logTail(r.LogPath(), 20))
	}
}

// helperEnv makes the test binary a helper process that starts servers (its value lists their
// kinds, comma-separated), prints their pids and dirs, and waits to be killed.
const helperEnv = "SLUICE_HARNESS_TEST_HELPER"

func helperMain() {
	ctx := context.Background()
	for _, kind := range strings.Split(os.Getenv(helperEnv), ",") {
		var s *Server
		var err error
		switch kind {
		case "mariadb":
			var m *MariaDB
			m, err = StartMariaDB(ctx, MariaDBOptions{})
			s = serverOf(m, err)
		case "postgres":
			var pg *Postgres
			pg, err = StartPostgres(ctx, PostgresOptions{})
			s = serverOf(pg, err)
		case "redis":
			var r *Redis
			r, err = StartRedis(ctx, RedisOptions{})
			s = serverOf(r, err)
		case "elasticsearch":
			var es *Elasticsearch
			es, err = StartElasticsearch(ctx, ElasticsearchOptions{})
			s = serverOf(es, err)
		case "kafka":
			var k *Kafka
			k, err = StartKafka(ctx, KafkaOptions{})
			s = serverOf(k, err)
		default:
			err = fmt.Errorf("unknown server kind %q", kind)
		}
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("server", s.PID(), s.Dir())
	}
	fmt.Println("ready")
	select {}
}

func serverOf[T interface{ server() *Server }](s T, err error) *Server {
	if err != nil {
		return nil
	}
	return s.server()
}

// A test binary killed with SIGKILL (no cleanup runs) leaves no server running: each server
// gets SIGKILL when its parent dies. The next harness start removes the dirs left behind.
func TestKilledTestBinaryLeavesNoServer(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=redis,postgres")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	type srv struct {
		pid int
		dir string
	}
	var servers []srv
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && f[0] == "ready" {
			break
		}
		if len(f) == 3 && f[0] == "server" {
			pid, _ := strconv.Atoi(f[1])
			servers = append(servers, srv{pid, f[2]})
			continue
		}
		t.Fatalf("helper: %s", sc.Text())
	}
	if len(servers) != 2 {
		t.Fatalf("helper started %d servers, want 2", len(servers))
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for _, s := range servers {
		deadline := time.Now().Add(10 * time.Second)
		for !processGone(s.pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if !processGone(s.pid) {
			t.Errorf("server %d (dir %s) still running after its test binary was killed", s.pid, s.dir)
		}
		if _, err := os.Stat(s.dir); err != nil {
			t.Fatalf("dir %s of the killed helper: %v, want it still there before cleanup", s.dir, err)
		}
	}
	var shmIDs []int
	for _, s := range servers {
		if id := pgShmID(s.dir); id >= 0 {
			shmIDs = append(shmIDs, id)
		}
	}
	if len(shmIDs) == 0 {
		t.Fatal("no System V segment recorded by the killed postgres")
	}
	removeStale(os.TempDir())
	for _, id := range shmIDs {
		if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &unix.SysvShmDesc{}); err == nil {
			t.Errorf("System V segment %d of the killed postgres still exists", id)
		}
	}
	for _, s := range servers {
		if _, err := os.Stat(s.dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stale dir %s after removeStale: %v, want it removed", s.dir, err)
		}
		if left := processesIn(s.dir); len(left) > 0 {
			t.Errorf("processes %v still in %s", left, s.dir)
		}
	}
}

// pgShmID reads the System V segment id from a PostgreSQL data dir's postmaster.pid, -1 if none.
func pgShmID(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		return -1
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 7 {
		return -1
	}
	f := strings.Fields(lines[6])
	if len(f) != 2 {
		return -1
	}
	id, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return id
}

// A server that does not come up fails the start with its command line and its own log; its
// dir is removed.
func TestStartFailureShowsServerLog(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name  string
		start func() error
		want  []string
	}{
		{"mariadb", func() error {
			_, err := StartMariaDB(ctx, MariaDBOptions{ExtraArgs: []string{"--no-such-option"}})
			return err
		}, []string{"start mariadb: ", "mariadbd --no-defaults --user=root", "--no-such-option: exited before answering",
			"last lines of ", "unknown option '--no-such-option'"}},
		{"postgres", func() error {
			_, err := StartPostgres(ctx, PostgresOptions{Settings: []string{"no_such_setting = 1"}})
			return err
		}, []string{"start postgres: ", "/postgres -D ", "exited before answering", "last lines of ",
			`unrecognized configuration parameter "no_such_setting"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(ownDirs())
			err := tc.start()
			if err == nil {
				t.Fatal("started")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
			if left := ownDirs(); len(left) != before {
				t.Fatalf("dirs after a failed start: %v, want %d", left, before)
			}
		})
	}
}
