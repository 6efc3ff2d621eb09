package mysql

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
)

// One MariaDB for the package, started on first use; tests use their own databases.
var shared struct {
	mu sync.Mutex
	db *harness.MariaDB
}

var serverIDs atomic.Uint32

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.db != nil {
		if err := shared.db.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close mariadb:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func sharedMariaDB(t testing.TB) *harness.MariaDB {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.db == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		db, err := harness.StartMariaDB(ctx, harness.MariaDBOptions{})
		if err != nil {
			t.Fatal(err)
		}
		shared.db = db
	}
	return shared.db
}

// testDB creates a fresh database for one test and returns its name.
func testDB(t testing.TB, m *harness.MariaDB) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "_", "-", "_").Replace(t.Name()))
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	exec(t, m, "DROP DATABASE IF EXISTS "+quoteName(name), "CREATE DATABASE "+quoteName(name))
	return name
}

// exec runs statements as root on one connection.
func exec(t testing.TB, m *harness.MariaDB, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.Exec(ctx, stmts...); err != nil {
		t.Fatal(err)
	}
}

// appConn connects as the app user.
func appConn(t testing.TB, m *harness.MariaDB, db string) *client.Conn {
	t.Helper()
	c, err := client.Connect(m.Addr(), m.AppUser, m.AppPassword, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// baseConfig is a configuration for the replication user, capturing db only.
func baseConfig(m *harness.MariaDB, db string, extra map[string]string) map[string]string {
	cfg := map[string]string{
		KeyHostname:        m.Host,
		KeyPort:            strconv.Itoa(m.Port),
		KeyUser:            m.ReplUser,
		KeyPassword:        m.ReplPassword,
		KeyServerID:        strconv.FormatUint(uint64(1000+serverIDs.Add(1)), 10),
		KeyTopicPrefix:     "test",
		KeyDatabaseInclude: db,
	}
	for k, v := range extra {
		if v == "" {
			delete(cfg, k)
			continue
		}
		cfg[k] = v
	}
	return cfg
}

// newSource builds a source from raw config through the plugin, as the runtime does.
func newSource(t testing.TB, raw map[string]string, store connect.Store) *Source {
	t.Helper()
	p := Plugin()
	cfg, errs := p.ParseConfig(raw)
	if len(errs) > 0 {
		t.Fatalf("config: %v", errs)
	}
	if store == nil {
		store = &memStore{}
	}
	// as the runtime builds a source without transforms: snapshot rows rendered as JSON
	src, err := New(cfg, connect.Env{Connector: "test", Store: store, RawJSON: true})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// testLog is an in-test log: it keeps the records a source emits and drops replayed ones as
// the runtime does (a record whose Order is not above the last stored one), and keeps the
// position of the last batch as the committed position.
type testLog struct {
	recs      []connect.Record
	committed connect.Position
	floor     []byte
	dropped   int
}

func (l *testLog) add(b connect.Batch) {
	for _, r := range b.Records {
		if len(r.Position.Order) > 0 && l.floor != nil && string(r.Position.Order) <= string(l.floor) {
			l.dropped++
			continue
		}
		if len(r.Position.Order) > 0 {
			l.floor = r.Position.Order
		}
		l.recs = append(l.recs, r)
	}
	if !b.Position.IsZero() {
		l.committed = b.Position
	}
}

// run opens a source at the log's committed position and reads until cond holds of the log.
func (l *testLog) run(t testing.TB, src *Source, timeout time.Duration, cond func(*testLog) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := src.Open(ctx, l.committed); err != nil {
		src.Close(ctx)
		t.Fatalf("open: %v", err)
	}
	defer src.Close(context.Background())
	for !cond(l) {
		b, err := src.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v (log holds %d records)", err, len(l.recs))
		}
		for _, r := range b.Records {
			harness.CheckRendered(t, r)
		}
		l.add(b)
	}
}

// value returns a record's change event.
func event(t testing.TB, r connect.Record) *connect.ChangeEvent {
	t.Helper()
	ev, err := connect.ParseChangeEvent(r.Value)
	if err != nil {
		t.Fatalf("record of %s: %v", r.Topic, err)
	}
	return ev
}

// count returns the number of change records of topic (tombstones excluded).
func (l *testLog) count(topic string) int {
	n := 0
	for _, r := range l.recs {
		if r.Topic == topic && r.Value != nil {
			n++
		}
	}
	return n
}

// fold derives a table's rows from the log: the last after image per key; deletes, tombstones
// and truncates remove rows. Rows are rendered as JSON, keyed by the JSON of the key.
func (l *testLog) fold(t testing.TB, topic string) map[string]string {
	t.Helper()
	state := map[string]string{}
	for _, r := range l.recs {
		if r.Topic != topic {
			continue
		}
		k, _ := connect.AppendJSON(nil, r.Key)
		if r.Value == nil {
			delete(state, string(k))
			continue
		}
		ev := event(t, r)
		switch ev.Op {
		case connect.OpTruncate:
			clear(state)
		case connect.OpDelete:
			delete(state, string(k))
		default:
			v, _ := connect.AppendJSON(nil, ev.After)
			state[string(k)] = string(v)
		}
	}
	return state
}

// diffStates describes the differences between two folded states.
func diffStates(want, got map[string]string) string {
	var out []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			out = append(out, "missing "+k+" = "+v)
		} else if g != v {
			out = append(out, "key "+k+": want "+v+", got "+g)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			out = append(out, "extra "+k+" = "+v)
		}
	}
	sort.Strings(out)
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("... and %d more", len(out)-10))
	}
	return strings.Join(out, "\n")
}

// tableState reads a table through a fresh snapshot-mode source view: rows as the source
// would render them, keyed by primary key. It uses a separate source (snapshot.mode=initial,
// one table) so the comparison covers the exact JSON.
func tableState(t testing.TB, m *harness.MariaDB, db, tbl string) map[string]string {
	t.Helper()
	src := newSource(t, baseConfig(m, db, map[string]string{KeyTableInclude: db + "\\." + tbl, KeySnapshotMode: SnapshotInitialOnly, KeySnapshotLocking: "none"}), nil)
	var l testLog
	done := false
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := src.Open(ctx, connect.Position{}); err != nil {
		t.Fatal(err)
	}
	defer src.Close(ctx)
	for !done {
		b, err := src.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		l.add(b)
		done = src.phase == phaseIdle
	}
	return l.fold(t, "test."+db+"."+tbl)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// drain reads from src into l until a heartbeat batch is at or past the server's binlog head
// as it is now: every change committed before the call is in l. (Heartbeats made before the
// last changes may still be queued, so an empty batch alone does not say that.)
func drain(t testing.TB, ctx context.Context, m *harness.MariaDB, src *Source, l *testLog) {
	t.Helper()
	c, err := client.Connect(m.Addr(), m.AppUser, m.AppPassword, "")
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Execute("SHOW MASTER STATUS")
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	file, _ := r.GetString(0, 0)
	pos, _ := r.GetUint(0, 1)
	headSeq, _ := fileSeq(file)
	for {
		b, err := src.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		l.add(b)
		if len(b.Records) > 0 || b.Position.IsZero() {
			continue
		}
		st, err := parseState(b.Position.State)
		if err != nil || st.Snapshot != nil {
			continue
		}
		if seq, _ := fileSeq(st.File); seq > headSeq || seq == headSeq && uint64(st.Pos) >= pos {
			return
		}
	}
}
