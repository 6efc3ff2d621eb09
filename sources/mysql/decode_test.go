package mysql

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/sluice-cdc/sluice/connect"
)

// edgeTables are the type matrix's tables plus the layouts where the row decoder's reading of
// the binary format could go wrong: every fractional precision of TIME, DATETIME and TIMESTAMP
// (negative times too), 3-byte integers, CHAR and VARCHAR long enough for two length bytes,
// every BLOB length size, an ENUM of more than 255 members, a SET of 64.
func edgeTables() []typeTable {
	var enum, set []string
	for i := range 300 {
		enum = append(enum, fmt.Sprintf("'e%d'", i))
	}
	for i := range 64 {
		set = append(set, fmt.Sprintf("'s%d'", i))
	}
	var tcols, tvals1, tvals2, tvals3 []string
	for fsp := 0; fsp <= 6; fsp++ {
		tcols = append(tcols, fmt.Sprintf("t%[1]d TIME(%[1]d), dt%[1]d DATETIME(%[1]d), ts%[1]d TIMESTAMP(%[1]d) NULL", fsp))
		tvals1 = append(tvals1, "'-838:59:58.999999', '1000-01-01 00:00:00.000001', '1970-01-01 00:00:01.000001'")
		tvals2 = append(tvals2, "'-00:00:00.010000', '2024-02-29 23:59:59.987654', '2038-01-19 03:14:07.999999'")
		tvals3 = append(tvals3, "'12:34:56.504', '9999-12-31 23:59:59.5', '2001-09-09 01:46:40.05'")
	}
	tables := append([]typeTable(nil), typeMatrix...)
	return append(tables,
		typeTable{name: "fsp", ddl: "(id INT PRIMARY KEY, " + strings.Join(tcols, ", ") + ")", rows: []string{
			"(1, " + strings.Join(tvals1, ", ") + ")", "(2, " + strings.Join(tvals2, ", ") + ")", "(3, " + strings.Join(tvals3, ", ") + ")",
		}},
		typeTable{name: "layouts", ddl: `(id MEDIUMINT PRIMARY KEY, mu MEDIUMINT UNSIGNED, c CHAR(100), vc VARCHAR(300), bn BINARY(200),
			tb TINYBLOB, mb MEDIUMBLOB, tt TINYTEXT, mt MEDIUMTEXT, lt LONGTEXT, e ENUM(` + strings.Join(enum, ",") + `), s SET(` + strings.Join(set, ",") + `), y YEAR) DEFAULT CHARSET=utf8mb4`,
			rows: []string{
				"(-8388608, 16777215, REPEAT('ü', 100), REPEAT('x', 300), X'00FF', X'01', REPEAT('m', 70000), 'tiny', REPEAT('é', 1000), 'long', 'e299', 's0,s31,s63', 0)",
				"(8388607, 0, '', '', '', '', '', '', '', '', 'e0', '', 2155)",
				"(0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
			}})
}

// TestRowDecoderMatchesGoMySQL: the row decoder's values are exactly what the source makes of
// go-mysql's own decoding, for every table of edgeTables, through inserts, updates (before and
// after images) and deletes; a decoder that captures none of the tables walks the same number
// of images; and the tables with a column type outside the decoder's plan are left to go-mysql.
func TestRowDecoderMatchesGoMySQL(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	c := appConn(t, m, db)
	r, err := c.Execute("SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	file, _ := r.GetString(0, 0)
	pos, _ := r.GetUint(0, 1)
	stmts := []string{"SET SESSION sql_mode = ''", "SET SESSION time_zone = '+00:00'", "USE " + quoteName(db)}
	tables := edgeTables()
	for _, tt := range tables {
		stmts = append(stmts, "CREATE TABLE "+quoteName(tt.name)+" "+tt.ddl)
		for _, row := range tt.rows {
			stmts = append(stmts, "INSERT INTO "+quoteName(tt.name)+" VALUES "+row)
		}
	}
	// before and after images of every row; then deletes
	stmts = append(stmts, "UPDATE fsp SET t6 = '-00:00:01.5', dt3 = '2020-01-01 00:00:00.5'", "UPDATE layouts SET vc = 'changed', y = 1999",
		"UPDATE temporal SET y = 2000", "DELETE FROM fsp", "DELETE FROM layouts", "DELETE FROM strings")
	exec(t, m, stmts...)
	r, err = c.Execute("SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	end, _ := r.GetUint(0, 1)

	src := newSource(t, baseConfig(m, db, nil), nil)
	if src.collations, err = loadCollations(c); err != nil {
		t.Fatal(err)
	}
	d := newRowDecoder(src)
	// a decoder for which no table is captured only walks the images: it must count the same
	walker := newRowDecoder(newSource(t, baseConfig(m, db, map[string]string{KeyTableExclude: db + `\..*`}), nil))
	walked := 0
	compared := map[string]int{} // values compared per table
	slow := map[string]bool{}    // tables decoded by go-mysql
	var failure error
	handle := func(e *replication.BinlogEvent) error {
		re, ok := e.Event.(*replication.RowsEvent)
		if !ok {
			if _, err := walker.finish(e); err != nil {
				return err
			}
			_, err := d.finish(e)
			return err
		}
		d.mu.Lock()
		p := d.pending[re]
		delete(d.pending, re)
		d.mu.Unlock()
		name := string(re.Table.Table)
		plan := d.plans[re.TableID]
		if plan == nil || !plan.fast {
			slow[name] = true
			return re.DecodeData(p.pos, p.data)
		}
		fast, err := d.decodeRows(plan, re, p.data[p.pos:])
		if err != nil {
			failure = fmt.Errorf("table %s: %w", name, err)
			return err
		}
		if wp := walker.plans[re.TableID]; wp == nil || !wp.fast || wp.t != nil {
			failure = fmt.Errorf("table %s: the walker has no walk-only plan", name)
			return failure
		}
		walk, err := walker.decodeRows(walker.plans[re.TableID], re, p.data[p.pos:])
		if err != nil || len(walk) != len(fast) {
			failure = fmt.Errorf("table %s: walked %d images (%v), decoded %d", name, len(walk), err, len(fast))
			return failure
		}
		walked += len(walk)
		if err := re.DecodeData(p.pos, p.data); err != nil {
			return err
		}
		if len(fast) != len(re.Rows) {
			failure = fmt.Errorf("table %s: %d images, go-mysql %d", name, len(fast), len(re.Rows))
			return failure
		}
		for i, row := range re.Rows {
			for j, v := range row {
				col := &plan.t.cols[j]
				want, err := col.binlogValue(v, &src.opts, nil)
				if err != nil {
					return err
				}
				w, _ := connect.AppendJSON(nil, want)
				g, _ := connect.AppendJSON(nil, fast[i][j])
				if string(w) != string(g) || fmt.Sprintf("%T", want) != fmt.Sprintf("%T", fast[i][j]) {
					failure = fmt.Errorf("table %s image %d column %s: decoder %T %s, go-mysql %T %s", name, i, col.name, fast[i][j], g, want, w)
					return failure
				}
				compared[name]++
			}
		}
		return nil
	}
	// the handler runs in step with the parser, as the source's does
	done := make(chan error, 1)
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 1000 + serverIDs.Add(1), Flavor: "mariadb", Host: m.Host, Port: uint16(m.Port),
		User: m.ReplUser, Password: m.ReplPassword, Charset: "utf8mb4", TimestampStringLocation: time.UTC,
		RenderJSONAsMySQLText: true, Logger: slog.New(slog.DiscardHandler), RowsEventDecodeFunc: d.decode,
		SynchronousEventHandler: handlerFunc(func(e *replication.BinlogEvent) error {
			err := handle(e)
			if err == nil && e.Header.LogPos < uint32(end) {
				return nil
			}
			if err == nil {
				err = errStopped
			}
			select {
			case done <- err:
			default:
			}
			return err
		}),
	})
	defer syncer.Close()
	if _, err := syncer.StartSync(gomysql.Position{Name: file, Pos: uint32(pos)}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != errStopped {
			t.Fatalf("%v (%v)", err, failure)
		}
	case <-time.After(time.Minute):
		t.Fatal("the binlog was not read to its end within a minute")
	}
	for _, tt := range tables {
		wantSlow := tt.name == "nums" || tt.name == "geo" // DECIMAL and BIT, GEOMETRY
		if slow[tt.name] != wantSlow {
			t.Errorf("table %s decoded by go-mysql: %v, want %v", tt.name, slow[tt.name], wantSlow)
		}
		if !wantSlow && compared[tt.name] == 0 {
			t.Errorf("table %s: no value compared", tt.name)
		}
	}
	if walked == 0 {
		t.Error("no image walked")
	}
	t.Logf("values compared per table: %v; %d images walked", compared, walked)
}

type handlerFunc func(*replication.BinlogEvent) error

func (f handlerFunc) HandleEvent(e *replication.BinlogEvent) error { return f(e) }
