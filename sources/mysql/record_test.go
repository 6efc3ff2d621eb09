package mysql

import (
	"bytes"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
)

// offlineSource is a Source with one captured table (id INT key, v INT, s VARCHAR, d
// DATETIME(3)) and a streamer inside a transaction, without a server.
func offlineSource(tb testing.TB, extra map[string]string) (*Source, *streamer, *table) {
	tb.Helper()
	raw := map[string]string{KeyHostname: "h", KeyUser: "u", KeyServerID: "5", KeyTopicPrefix: "p"}
	for k, v := range extra {
		raw[k] = v
	}
	s := newSource(tb, raw, nil)
	t := &table{db: "db", name: "t", cols: []column{
		{name: "id", kind: kindInt}, {name: "v", kind: kindInt, nullable: true},
		{name: "s", kind: kindText, nullable: true}, {name: "d", kind: kindDateTime, fsp: 3, nullable: true},
	}}
	s.finishTable(t, []int{0})
	m := newStreamer(s, &state{V: stateVersion, File: "mariadb-bin.000007", Pos: 4})
	m.starting = false
	m.file, m.seq = "mariadb-bin.000007", 7
	m.curHdr = &replication.EventHeader{ServerID: 1, Timestamp: 1700000000}
	if err := m.beginTx(1200, m.curHdr, "0-1-42"); err != nil {
		tb.Fatal(err)
	}
	m.setThread(9)
	m.nowMs = int64(1700000000123)
	return s, m, t
}

// TestStreamRecordShape: the records built from shared templates and position chunks are
// exactly the records the plain constructors describe (envelope, source block, key, version,
// Order and State), for an insert, an update, a key-changing update and a delete.
func TestStreamRecordShape(t *testing.T) {
	s, m, tbl := offlineSource(t, nil)
	row := func(id int32, v any) []any { return []any{id, v, "x", "2024-01-31 13:45:30.123"} }
	b := &batch{}
	m.curRow = 0
	if _, err := m.emitImages(b, tbl, connect.OpCreate, 1, [][]any{row(1, int32(10)), row(300, nil)}); err != nil {
		t.Fatal(err)
	}
	m.curRow = 0
	if _, err := m.emitImages(b, tbl, connect.OpUpdate, 2, [][]any{row(1, int32(10)), row(1, int32(11)), row(300, nil), row(5000, nil)}); err != nil {
		t.Fatal(err)
	}
	m.curRow = 0
	if _, err := m.emitImages(b, tbl, connect.OpDelete, 1, [][]any{row(1, int32(11))}); err != nil {
		t.Fatal(err)
	}
	type want struct {
		op      connect.Op // 0: tombstone
		key     int64
		before  any
		after   any
		txRow   uint32
		part    byte
		inEvent int64
	}
	d := int64(1706708730123)
	img := func(id int64, v any) connect.Row {
		return connect.Row{{Name: "id", Value: id}, {Name: "v", Value: v}, {Name: "s", Value: "x"}, {Name: "d", Value: d}}
	}
	wants := []want{
		{connect.OpCreate, 1, nil, img(1, int64(10)), 1, 0, 0},
		{connect.OpCreate, 300, nil, img(300, nil), 2, 0, 1},
		{connect.OpUpdate, 1, img(1, int64(10)), img(1, int64(11)), 3, 0, 0},
		{connect.OpDelete, 300, img(300, nil), nil, 4, 0, 1},
		{0, 300, nil, nil, 4, 1, 0},
		{connect.OpCreate, 5000, nil, img(5000, nil), 4, 2, 1},
		{connect.OpDelete, 1, img(1, int64(11)), nil, 5, 0, 0},
		{0, 1, nil, nil, 5, 1, 0},
	}
	if len(b.recs) != len(wants) {
		t.Fatalf("got %d records, want %d", len(b.recs), len(wants))
	}
	for i, w := range wants {
		r := b.recs[i]
		wr := connect.Record{
			Topic: "p.db.t", Partition: -1, Offset: -1, Timestamp: time.Unix(1700000000, 0),
			Key: connect.Row{{Name: "id", Value: w.key}}, Version: version(7, 1200),
			Position: connect.Position{
				Order: appendStreamOrder(nil, 0, 7, 1200, w.txRow, w.part),
				State: appendStreamState(nil, 0, "mariadb-bin.000007", 1200, w.txRow, "0-1-42"),
			},
		}
		if w.op != 0 {
			var before, after connect.Row
			if w.before != nil {
				before = w.before.(connect.Row)
			}
			if w.after != nil {
				after = w.after.(connect.Row)
			}
			ev := connect.ChangeEvent{Before: before, After: after, Op: w.op, TsMs: 1700000000123,
				Source: s.sourceBlock(1700000000000, "false", "db", "t", 1, "0-1-42", "mariadb-bin.000007", 1200, int(w.inEvent), int64(9))}
			wr.Value = ev.Row()
		}
		gotJSON, err := connect.AppendJSON(nil, []any{r.Topic, r.Key, r.Value, r.Version, r.Timestamp.UnixMilli(), r.Partition, r.Offset})
		if err != nil {
			t.Fatal(err)
		}
		wantJSON, _ := connect.AppendJSON(nil, []any{wr.Topic, wr.Key, wr.Value, wr.Version, wr.Timestamp.UnixMilli(), wr.Partition, wr.Offset})
		if !bytes.Equal(gotJSON, wantJSON) {
			t.Errorf("record %d:\n got %s\nwant %s", i, gotJSON, wantJSON)
		}
		if !bytes.Equal(r.Position.Order, wr.Position.Order) || !bytes.Equal(r.Position.State, wr.Position.State) {
			t.Errorf("record %d position: got %s, want %s", i, r.Position, wr.Position)
		}
		if i > 0 && bytes.Compare(r.Position.Order, b.recs[i-1].Position.Order) <= 0 {
			t.Errorf("record %d: Order not above the one before", i)
		}
		if cap(r.Position.Order) != len(r.Position.Order) || cap(r.Position.State) != len(r.Position.State) {
			t.Errorf("record %d: position slices are not capped", i)
		}
	}
}

// BenchmarkStreamInsert is the per-row cost of turning a decoded insert (id, v, s, d) into a
// record with its position, without the decoding.
func BenchmarkStreamInsert(b *testing.B) {
	_, m, tbl := offlineSource(b, nil)
	rows := make([][]any, 100)
	for i := range rows {
		rows[i] = []any{int32(100000 + i), int32(i), "bulk 12345", "2024-01-31 13:45:30.123"}
	}
	bt := &batch{recs: make([]connect.Record, 0, 2048)}
	b.ReportAllocs()
	c0 := cpuTime()
	for b.Loop() {
		if len(bt.recs)+len(rows) > cap(bt.recs) {
			bt.recs = bt.recs[:0]
			m.newGeneration()
		}
		m.curRow = 0
		if _, err := m.emitImages(bt, tbl, connect.OpCreate, 1, rows); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rows)), "ns/row")
	b.ReportMetric(float64(cpuTime()-c0)/float64(b.N*len(rows)), "cpu_ns/row")
}

// cpuTime is the CPU time (user and system) the process has used: less disturbed than the
// elapsed time by other processes on a busy machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSnapshotRows is the per-row cost of turning fetched rows (id, v, s, d) into
// snapshot records with their positions, without the fetching.
func BenchmarkSnapshotRows(b *testing.B) {
	s, _, tbl := offlineSource(b, nil)
	sn := &snapshotter{s: s, plan: &snapPlan{Tables: []string{"db.t"}}, started: time.Now(), vfile: "mariadb-bin.000007", vpos: 4, vseq: 7}
	const n = 2048
	rs := &rowSet{t: tbl, mode: keyMode(tbl), src: s.sourceBlock(1, "true", "db", "t", 0, nil, "f", 4, 0, nil)}
	for i := range n {
		rs.cells = append(rs.cells,
			cell{Type: gomysql.FieldValueTypeSigned, bits: uint64(100000 + i)},
			cell{Type: gomysql.FieldValueTypeSigned, bits: uint64(i % 1000)},
			cell{Type: gomysql.FieldValueTypeString, str: []byte("row 123456")},
			cell{Type: gomysql.FieldValueTypeString, str: []byte("2024-01-31 13:45:30.123")})
		rs.n++
	}
	for _, recycled := range []bool{false, true} {
		b.Run(fmt.Sprintf("recycled=%v", recycled), func(b *testing.B) {
			cv := &converter{sn: sn}
			if recycled {
				cv.rc = &recycler{}
				cv.fields.rc, cv.bx.rc, cv.bx.vrc = cv.rc, cv.rc, cv.rc
			}
			b.ReportAllocs()
			c0 := cpuTime()
			for b.Loop() {
				_, release, err := cv.convert(rs)
				if err != nil {
					b.Fatal(err)
				}
				if release != nil {
					release()
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/row")
			b.ReportMetric(float64(cpuTime()-c0)/float64(b.N*n), "cpu_ns/row")
		})
	}
}

// TestSnapshotRecycledBatches: a converter that reuses the slabs of released batches (the
// string data its rendered rows live in, boxed values, the fetched text, the record slices) builds the
// very records a converter on fresh memory does, while batches are released out of step with
// their conversion as the runtime does; only a batch's last record carries a State, and every
// record an Order.
func TestSnapshotRecycledBatches(t *testing.T) {
	for _, raw := range []bool{true, false} {
		t.Run(fmt.Sprintf("RawJSON=%v", raw), func(t *testing.T) { testSnapshotRecycledBatches(t, raw) })
	}
}

// testSnapshotRecycledBatches is TestSnapshotRecycledBatches with the records' keys and values
// rendered (raw) or Rows.
func testSnapshotRecycledBatches(t *testing.T, raw bool) {
	s, _, tbl := offlineSource(t, nil)
	s.env.RawJSON = raw
	// and a TIMESTAMP: its values are strings made in the boxer's string data
	tbl.cols = append(tbl.cols, column{name: "ts", kind: kindTimestamp, fsp: 6, nullable: true})
	s.finishTable(tbl, []int{0})
	clock := time.Now()
	s.now = func() time.Time { return clock }
	sn := &snapshotter{s: s, plan: &snapPlan{Tables: []string{"db.t"}}, started: time.Now(), vfile: "mariadb-bin.000007", vpos: 4, vseq: 7}
	src := s.sourceBlock(1, "true", "db", "t", 0, nil, "f", 4, 0, nil)
	rc := &recycler{}
	long := bytes.Repeat([]byte("long text "), 150) // above maxSlabBytes: its own allocation
	// rows builds round r's row set, its text in the slabs of rc when given
	rows := func(r int, rc *recycler) *rowSet {
		rs := &rowSet{t: tbl, mode: keyMode(tbl), src: src, rc: rc, rows0: int64(r * 1000)}
		n := 1 + r*37%700
		for i := range n {
			id := r*1000 + i
			text := []byte(fmt.Sprintf("row %d of round %d", id, r))
			switch i % 7 {
			case 3:
				text = long
			case 5:
				text = nil
			}
			d := cell{Type: gomysql.FieldValueTypeString, str: rs.text([]byte(fmt.Sprintf("2024-01-%02d 13:45:30.%03d", 1+i%28, i%1000)))}
			if i%11 == 4 {
				d = cell{Type: gomysql.FieldValueTypeNull}
			}
			rs.cells = append(rs.cells,
				cell{Type: gomysql.FieldValueTypeSigned, bits: uint64(id)},
				cell{Type: gomysql.FieldValueTypeSigned, bits: uint64(id * 7919)},
				cell{Type: gomysql.FieldValueTypeString, str: rs.text(text)},
				d,
				cell{Type: gomysql.FieldValueTypeString, str: rs.text([]byte(fmt.Sprintf("2024-02-%02d 08:%02d:%02d.%06d", 1+id%28, id%60, r%60, id)))})
			rs.n++
		}
		return rs
	}
	render := func(recs []connect.Record) []string {
		var out []string
		for i, r := range recs {
			k, _ := connect.AppendJSON(nil, r.Key)
			v, _ := connect.AppendJSON(nil, r.Value)
			out = append(out, fmt.Sprintf("%s %s %s %x %s", r.Topic, k, v, r.Position.Order, r.Position.State))
			if len(r.Position.Order) == 0 || (len(r.Position.State) > 0) != (i == len(recs)-1) {
				t.Fatalf("record %d of %d: position %s: want an Order, and a State only on the last", i, len(recs), r.Position)
			}
		}
		return out
	}
	fresh := &converter{sn: sn}
	recycled := &converter{sn: sn, rc: rc}
	recycled.fields.rc, recycled.bx.rc, recycled.bx.vrc = rc, rc, rc
	// a batch is compared and released two batches late, as by a runtime with batches in
	// flight: its memory must hold while later batches are built
	type inFlight struct {
		want    []string
		got     []connect.Record
		release func()
	}
	var pending []inFlight
	check := func(r int, b inFlight) {
		g := render(b.got)
		if len(b.want) != len(g) {
			t.Fatalf("round %d: %d records, want %d", r, len(g), len(b.want))
		}
		for i := range g {
			if b.want[i] != g[i] {
				t.Fatalf("round %d, record %d:\n got %s\nwant %s", r, i, g[i], b.want[i])
			}
		}
		b.release()
		b.release() // a second call is a no-op
	}
	for r := range 40 {
		want, _, err := fresh.convert(rows(r, nil))
		if err != nil {
			t.Fatal(err)
		}
		got, release, err := recycled.convert(rows(r, rc))
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, inFlight{render(want), got, release})
		if len(pending) > 2 {
			check(r-2, pending[0])
			pending = pending[1:]
		}
	}
	for i, b := range pending {
		check(38+i, b)
	}
	// rendered rows live in the string data slabs, Rows in field slabs
	rc.bytes.mu.Lock()
	defer rc.bytes.mu.Unlock()
	rc.fields.mu.Lock()
	defer rc.fields.mu.Unlock()
	if len(rc.bytes.free) == 0 || !raw && len(rc.fields.free) == 0 {
		t.Fatalf("slabs that came back to the recycler: %d of string data, %d of fields", len(rc.bytes.free), len(rc.fields.free))
	}
}

// TestStreamRecycledBatches: a streamer that reuses the field and row slabs of released batches
// builds the very records one on fresh memory does (inserts, updates, deletes with their
// tombstones, key changes), while batches are released two batches late.
func TestStreamRecycledBatches(t *testing.T) {
	_, fresh, ftbl := offlineSource(t, nil)
	fresh.rc, fresh.fields.rc, fresh.bx.rc = nil, nil, nil
	_, m, tbl := offlineSource(t, nil)
	if m.rc == nil || m.fields.rc == nil || m.bx.rc == nil {
		t.Fatal("the streamer has no recycler")
	}
	row := func(id, v int) []any {
		return []any{int32(id), int32(v), fmt.Sprintf("text %d", id*v), "2024-01-31 13:45:30.123"}
	}
	// build makes round r's batch on streamer m
	build := func(m *streamer, tbl *table, r int) connect.Batch {
		m.newGeneration()
		b := &batch{recs: m.rc.records(64)}
		for k := range 1 + r%5 {
			base := r*100000 + k*1000
			var ins, upd, del [][]any
			for i := range 3 + (r+k)%40 {
				ins = append(ins, row(base+i, i))
				upd = append(upd, row(base+i, i), row(base+i+(i%3)*500, i+1)) // some change the key
				del = append(del, row(base+i, 7))
			}
			for _, ev := range []struct {
				op   connect.Op
				step int
				rows [][]any
			}{{connect.OpCreate, 1, ins}, {connect.OpUpdate, 2, upd}, {connect.OpDelete, 1, del}} {
				m.curRow = 0
				if _, err := m.emitImages(b, tbl, ev.op, ev.step, ev.rows); err != nil {
					t.Fatal(err)
				}
			}
		}
		return m.finish(b)
	}
	render := func(b connect.Batch) []string {
		var out []string
		for _, r := range b.Records {
			j, err := connect.AppendJSON(nil, []any{r.Topic, r.Key, r.Value, r.Version})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s %x %s", j, r.Position.Order, r.Position.State))
		}
		return out
	}
	type inFlight struct {
		want  []string
		batch connect.Batch
	}
	var pending []inFlight
	check := func(r int, p inFlight) {
		got := render(p.batch)
		if len(got) != len(p.want) {
			t.Fatalf("round %d: %d records, want %d", r, len(got), len(p.want))
		}
		for i := range got {
			if got[i] != p.want[i] {
				t.Fatalf("round %d, record %d:\n got %s\nwant %s", r, i, got[i], p.want[i])
			}
		}
		p.batch.Release()
	}
	const rounds = 30
	for r := range rounds {
		want := render(build(fresh, ftbl, r))
		b := build(m, tbl, r)
		if b.Release == nil {
			t.Fatal("a stream batch without Release")
		}
		pending = append(pending, inFlight{want, b})
		if len(pending) > 2 {
			check(r-2, pending[0])
			pending = pending[1:]
		}
	}
	for i, p := range pending {
		check(rounds-len(pending)+i, p)
	}
	m.rc.fields.mu.Lock()
	defer m.rc.fields.mu.Unlock()
	if len(m.rc.fields.free) == 0 {
		t.Fatal("no field slab came back to the recycler")
	}
}

// One huge row does not make the rows after it take memory of its size: a row set of a 4 MiB
// text and then 2,000 small rows converts into records whose renderings are right, in about
// the memory of the rows themselves.
func TestSnapshotHugeRowThenSmallRows(t *testing.T) {
	s, _, tbl := offlineSource(t, nil)
	sn := &snapshotter{s: s, plan: &snapPlan{Tables: []string{"db.t"}}, started: time.Now(), vfile: "mariadb-bin.000007", vpos: 4, vseq: 7}
	rs := &rowSet{t: tbl, mode: keyMode(tbl), src: s.sourceBlock(1, "true", "db", "t", 0, nil, "f", 4, 0, nil)}
	huge := bytes.Repeat([]byte("0123456789abcdef"), 1<<18)
	for i := range 2001 {
		text := []byte(fmt.Sprintf("row %d", i))
		if i == 0 {
			text = huge
		}
		rs.cells = append(rs.cells,
			cell{Type: gomysql.FieldValueTypeSigned, bits: uint64(i)},
			cell{Type: gomysql.FieldValueTypeSigned, bits: uint64(i * 3)},
			cell{Type: gomysql.FieldValueTypeString, str: text},
			cell{Type: gomysql.FieldValueTypeNull})
		rs.n++
	}
	rc := &recycler{}
	cv := &converter{sn: sn, rc: rc}
	cv.fields.rc, cv.bx.rc, cv.bx.vrc = rc, rc, rc
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	recs, release, err := cv.convert(rs)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if got := after.TotalAlloc - before.TotalAlloc; got > 24<<20 {
		t.Errorf("converting allocated %d MiB, want about the 4 MiB row and the small ones", got>>20)
	}
	for _, i := range []int{0, 1, 2000} {
		v, _ := connect.AppendJSON(nil, recs[i].Value)
		want := fmt.Sprintf(`"s":"row %d"`, i)
		if i == 0 {
			want = `"s":"` + string(huge) + `"`
		}
		if !bytes.Contains(v, []byte(want)) || !bytes.Contains(v, []byte(fmt.Sprintf(`{"id":%d,"v":%d,`, i, 3*i))) {
			t.Errorf("record %d: %.200s", i, v)
		}
		harness.CheckRendered(t, recs[i])
	}
}
