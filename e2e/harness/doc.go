// Package harness starts the real servers that sluice's tests and benchmarks run against:
// MariaDB, PostgreSQL 15, Redis, Elasticsearch 8 and Apache Kafka 4 (KRaft). It is the only
// code in the project that knows how a server is installed, configured, started or stopped.
//
// # Contract
//
// Each server is a child process in a fresh dir under os.TempDir() named
// sluice-harness-<kind>-<test pid>-<random>, listening on 127.0.0.1 on a port picked at
// random in 20000-31999 (a port taken before the server binds is replaced and the start
// retried). A start returns once the server answers its own protocol (a query, PING, cluster
// health, a metadata request), with its address and credentials in the returned struct.
//
//   - StartX(ctx, opts) returns a running server that the caller must Close; it suits a
//     server shared by a package's tests from TestMain.
//   - NewX(t, opts) does the same for one test: it fails t on error and closes the server in
//     t.Cleanup.
//
// Every server embeds *Server: Stop (graceful), Kill (SIGKILL, as a crash), Start (again, on
// the same ports, keeping the data dir), Restart, and Close (kill the process group and all
// descendants, remove the dir). A server that does not come up fails the start with the exact
// command line and the last lines of its log; a missing program fails it with a
// *NotInstalledError naming the command that installs it ("run `make setup` ..."). Nothing is
// ever skipped.
//
// Nothing outlives the test binary: servers run in their own process group with a parent-death
// signal (SIGKILL), so a `go test` killed with SIGKILL takes its servers with it. The dirs it
// could not remove, and any process still running in one, are removed by the next harness
// start in any test binary, and by e2e/setup/setup.sh, once the owner recorded in the dir's
// "owner" file is gone.
//
// # Requirements
//
// The tests run as root (PostgreSQL and Elasticsearch refuse root, so they run as the OS
// users "postgres" and "sluice"). e2e/setup/setup.sh installs everything: the Debian packages,
// those users, and from Maven Central the Elasticsearch integ-test distribution and Kafka's
// jars into /var/cache/sluice. Environment variables override where things are found:
// SLUICE_MARIADBD, SLUICE_MARIADB_INSTALL_DB, SLUICE_PG_BIN (a dir), SLUICE_REDIS_SERVER,
// SLUICE_ES_HOME, SLUICE_KAFKA_LIBS, SLUICE_JAVA_HOME and SLUICE_CACHE.
//
// # Example
//
//	func TestSnapshot(t *testing.T) {
//		db := harness.NewMariaDB(t, harness.MariaDBOptions{})
//		if err := db.Exec(ctx, "CREATE TABLE app.t (id INT PRIMARY KEY)"); err != nil {
//			t.Fatal(err)
//		}
//		src := mysql.New(mysql.Config{Addr: db.Addr(), User: db.ReplUser, Password: db.ReplPassword, ServerID: 1001})
//		// ... read, then test the source across a server restart:
//		if err := db.Restart(ctx); err != nil {
//			t.Fatal(err)
//		}
//	}
//
// A package that shares one server:
//
//	var pg *harness.Postgres
//
//	func TestMain(m *testing.M) {
//		var err error
//		pg, err = harness.StartPostgres(context.Background(), harness.PostgresOptions{})
//		if err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		code := m.Run()
//		pg.Close()
//		os.Exit(code)
//	}
package harness
