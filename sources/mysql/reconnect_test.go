package mysql

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
)

// busyWriter changes the table ids in random transactions until stop is closed, reconnecting
// whenever the server goes away (its transactions then fail or not; the test compares with
// what the table holds in the end). It counts the transactions committed.
func busyWriter(m *harness.MariaDB, db string, stop <-chan struct{}, committed *atomic.Int64) {
	r := rand.New(rand.NewPCG(11, 12))
	var c *client.Conn
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		if c == nil {
			var err error
			if c, err = client.Connect(m.Addr(), m.AppUser, m.AppPassword, db); err != nil {
				c = nil
				time.Sleep(50 * time.Millisecond)
				continue
			}
		}
		stmts := []string{"BEGIN"}
		for range 1 + r.IntN(5) {
			id := 1 + r.IntN(2000)
			switch r.IntN(4) {
			case 0:
				stmts = append(stmts, fmt.Sprintf("INSERT INTO ids (v) VALUES (%d)", n))
			case 1:
				stmts = append(stmts, fmt.Sprintf("UPDATE ids SET v = v + 1 WHERE id = %d", id))
			case 2:
				stmts = append(stmts, fmt.Sprintf("DELETE FROM ids WHERE id = %d", id))
			case 3:
				stmts = append(stmts, fmt.Sprintf("UPDATE ids SET v = %d WHERE id BETWEEN %d AND %d", n, id, id+30))
			}
		}
		stmts = append(stmts, "COMMIT")
		ok := true
		for _, q := range stmts {
			if _, err := c.Execute(q); err != nil {
				c.Close()
				c, ok = nil, false
				break
			}
		}
		if ok {
			committed.Add(1)
		}
	}
}

// TestReconnectOnServerRestart: while a writer keeps changing a table, the server is restarted
// twice under a streaming source, once shut down cleanly and once killed (SIGKILL). Read never
// fails: the binlog reader reconnects with backoff and resumes where it was, so no change is
// emitted twice (nothing is even replayed for the log to drop), none is lost (the state derived
// from the topic equals the table), and Stats counts both reconnects. Then the server crashes
// once more while the source is stopped at the end of a binlog file, and a new source opened
// there reads the file the server started after it.
func TestReconnectOnServerRestart(t *testing.T) {
	m := harness.NewMariaDB(t, harness.MariaDBOptions{})
	db := m.Database
	stmts := []string{"USE " + db, "CREATE TABLE ids (id INT AUTO_INCREMENT PRIMARY KEY, v INT)"}
	for i := 0; i < 2; i++ {
		stmts = append(stmts, "INSERT INTO ids (v) SELECT seq FROM seq_1_to_1000")
	}
	exec(t, m, stmts...)

	cfg := baseConfig(m, db, map[string]string{KeyHeartbeatInterval: "100", KeyMaxBatchSize: "100", KeyReconnectTimeout: "120000"})
	src := newSource(t, cfg, &memStore{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var l testLog
	if err := src.Open(ctx, l.committed); err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	read := func() connect.Batch {
		t.Helper()
		b, err := src.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v (log holds %d records)", err, len(l.recs))
		}
		l.add(b)
		return b
	}
	for src.phase != phaseStreaming {
		read()
	}

	stop := make(chan struct{})
	var committed atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		busyWriter(m, db, stop, &committed)
	}()
	restarts := []struct {
		name string
		do   func(context.Context) error
	}{
		{"restart", m.Restart},
		{"kill and start", func(ctx context.Context) error {
			if err := m.Kill(); err != nil {
				return err
			}
			return m.Start(ctx)
		}},
	}
	for _, rs := range restarts {
		// stream a while, restart the server under the reader, stream on
		for n := committed.Load(); committed.Load() < n+30; {
			read()
		}
		done := make(chan error, 1)
		go func() { done <- rs.do(ctx) }()
		for restarted := false; !restarted; {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("%s: %v", rs.name, err)
				}
				restarted = true
			default:
				read()
			}
		}
		for n := committed.Load(); committed.Load() < n+30; {
			read()
		}
		t.Logf("%s: %d records in the log, %d transactions committed", rs.name, len(l.recs), committed.Load())
	}
	close(stop)
	wg.Wait()
	drain(t, ctx, m, src, &l)

	if l.dropped != 0 {
		t.Errorf("the source replayed %d records after reconnecting", l.dropped)
	}
	if st := src.Stats(); st.NumberOfReconnects != 2 || !st.Connected {
		t.Errorf("stats after two restarts: %d reconnects, connected %v; want 2, true", st.NumberOfReconnects, st.Connected)
	}

	// the stored position is now the end of the binlog file; a crash makes the server start a
	// new file after it, which a new source opened there must read
	src.Close(ctx)
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	exec(t, m, "USE "+db, "INSERT INTO ids (v) VALUES (-1), (-2)", "DELETE FROM ids WHERE v = -1")
	n := l.count("test." + db + ".ids")
	l.run(t, newSource(t, cfg, &memStore{}), time.Minute, func(l *testLog) bool { return l.count("test."+db+".ids") >= n+3 })

	want := tableState(t, m, db, "ids")
	if diff := diffStates(want, l.fold(t, "test."+db+".ids")); diff != "" {
		t.Errorf("derived state differs from the table:\n%s", diff)
	}
	checkExactlyOnce(t, &l, "test."+db+".ids")
}
