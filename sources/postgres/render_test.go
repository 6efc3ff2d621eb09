package postgres

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
)

// A snapshot row, rendered as JSON from the server's values, holds what the stream's Rows hold
// for the same row: masks (fixed, truncated, hashed) on the image and not on the key (ssn is
// masked and part of the key), a key column excluded from the image but kept in the key, a key
// whose columns come in another order than the table's, NULLs, text that needs escaping,
// timestamptz (read in binary form by the snapshot), the largest bigint and a float -0, also in
// the snapshot's last record; the envelope's ts_ms is when the row was read.
func TestSnapshotRenderMatchesStream(t *testing.T) {
	db := newDB(t, sharedPG(t))
	db.exec(t,
		"CREATE TABLE r (a int NOT NULL, s text, ssn text, note text, email text, k2 bigint NOT NULL, tz timestamptz, x float8, PRIMARY KEY (a, k2))",
		`INSERT INTO r VALUES
			(1, E'q"\\\n\t\u2028\u00e9', '123-45-6789', 'añbcdef', 'x@example.com', 10, '2024-01-31 13:45:30.12+02', '-0'),
			(2, NULL, NULL, NULL, NULL, -5, NULL, NULL),
			(3, 'plain', 'ssn', 'ab', 'e', 9223372036854775807, 'infinity', '-0')`)
	cfg := db.config(map[string]string{
		KeyMaskWith + "4.chars":                  "public.r.ssn",
		KeyTruncateTo + "3.chars":                "public.r.note",
		KeyMaskHash + "SHA-256.with.salt.pepper": "public.r.email",
		KeyColumnExclude:                         "public.r.k2",
		KeyMessageKeyColumns:                     "public.r:k2,a,ssn",
	})
	src := openSource(t, cfg, connect.Position{})
	log := newMemLog()
	t0 := time.Now().UnixMilli()
	readUntil(t, src, log, true, 30*time.Second, func() bool { return len(log.records) >= 3 })
	t1 := time.Now().UnixMilli()
	// the same rows again, through the stream's decoding
	db.exec(t, "UPDATE r SET a = a")
	readUntil(t, src, log, true, 30*time.Second, func() bool { return len(log.records) >= 6 })
	recs, _ := log.snapshot()
	snap := map[string]string{}
	raw := map[string]string{}
	for i, r := range recs[:3] {
		if _, ok := r.Value.(connect.RawJSON); !ok {
			t.Fatalf("snapshot record %d: value %T, want the rendered connect.RawJSON", i, r.Value)
		}
		ev := eventOf(t, r)
		if ev.TsMs < t0 || ev.TsMs > t1 {
			t.Errorf("snapshot record %d: ts_ms %d, want the time of its read, %d to %d", i, ev.TsMs, t0, t1)
		}
		if snapMark, _ := ev.Source.Get("snapshot"); snapMark != map[bool]string{true: "last", false: "true"}[i == 2] {
			t.Errorf("snapshot record %d: source.snapshot %v", i, snapMark)
		}
		snap[jsonOf(t, r.Key)] = harness.ZeroSigns(jsonOf(t, ev.After))
		raw[jsonOf(t, r.Key)] = jsonOf(t, r.Value)
	}
	for i, r := range recs[3:] {
		if ev := eventOf(t, r); ev.Op != connect.OpUpdate {
			t.Fatalf("record %d: op %v, want u", 3+i, ev.Op)
		}
		k := jsonOf(t, r.Key)
		want, ok := snap[k]
		if !ok {
			t.Fatalf("stream key %s: no snapshot row has it (snapshot keys %v)", k, snap)
		}
		if got := harness.ZeroSigns(jsonOf(t, eventOf(t, r).After)); got != want {
			t.Errorf("key %s:\nsnapshot %s\nstream   %s", k, want, got)
		}
	}
	// and what both must be
	first := snap[`{"k2":10,"a":1,"ssn":"123-45-6789"}`]
	for _, want := range []string{`"a":1,`, `"s":"q\"\\\n\t\u2028é"`, `"ssn":"****"`, `"note":"añb"`, `"tz":"2024-01-31T11:45:30.12Z"`} {
		if !strings.Contains(first, want) {
			t.Errorf("snapshot row 1 %s: want %s in it", first, want)
		}
	}
	if strings.Contains(first, "k2") || strings.Contains(first, "x@example.com") {
		t.Errorf("snapshot row 1 %s: holds the excluded k2 or the unhashed email", first)
	}
	if got := snap[`{"k2":9223372036854775807,"a":3,"ssn":"ssn"}`]; !strings.Contains(got, `"tz":"infinity"`) {
		t.Errorf("snapshot row 3: %q, want tz infinity", got)
	}
	// the float -0 keeps its sign in the log, in the last record too (marked "last")
	for _, k := range []string{`{"k2":10,"a":1,"ssn":"123-45-6789"}`, `{"k2":9223372036854775807,"a":3,"ssn":"ssn"}`} {
		if !strings.Contains(raw[k], `"x":-0}`) {
			t.Errorf("snapshot record of %s: %s, want x -0", k, raw[k])
		}
	}
}

// plainInt accepts exactly the texts that strconv.AppendInt would write back unchanged, so an
// integer column's text can be copied into the JSON as it is.
func TestPlainInt(t *testing.T) {
	cases := []string{"0", "-0", "00", "-", "", "+1", "007", "-007", "1", "-1", "9", "10", " 1", "1 ", "1a", "١",
		"123456789012345678", "-123456789012345678", "1234567890123456789", "9223372036854775807", "-9223372036854775808"}
	for i := range 10000 {
		n := int64(i*7919) << (i % 50)
		if i%2 == 1 {
			n = -n
		}
		cases = append(cases, strconv.FormatInt(n, 10))
	}
	for _, c := range cases {
		n, err := strconv.ParseInt(c, 10, 64)
		want := err == nil && strconv.FormatInt(n, 10) == c && len(strings.TrimPrefix(c, "-")) <= 18
		if got := plainInt([]byte(c)); got != want {
			t.Errorf("plainInt(%q) = %v, want %v", c, got, want)
		}
	}
}

// A connector with transforms gets its snapshot rows as Rows (connect.Env.RawJSON unset), which
// the transforms read without parsing; rendered, the same rows are the same JSON byte for byte:
// every type of the matrix, NULLs, masks, an excluded key column and a reordered key.
func TestSnapshotRowsAndRenderingAgree(t *testing.T) {
	db := newDB(t, sharedPG(t))
	db.exec(t, typeMatrixDDL()...)
	db.exec(t, typeMatrixInsert(0),
		"CREATE TABLE r (a int NOT NULL, s text, ssn text, note text, k2 bigint NOT NULL, PRIMARY KEY (a, k2))",
		`INSERT INTO r VALUES (1, 'x', '123-45-6789', 'añbcdef', 10), (2, NULL, NULL, NULL, -5)`)
	cfg := db.config(map[string]string{
		KeySnapshotMode:           SnapshotInitialOnly,
		KeyMaskWith + "4.chars":   "public.r.ssn",
		KeyTruncateTo + "3.chars": "public.r.note",
		KeyColumnExclude:          "public.r.k2",
		KeyMessageKeyColumns:      "public.r:k2,a",
	})
	read := func(rawJSON bool) []string {
		t.Helper()
		src := openSourceEnv(t, cfg, connect.Position{}, rawJSON)
		log := newMemLog()
		readUntil(t, src, log, false, 30*time.Second, func() bool { return len(log.records) >= 5 })
		recs, _ := log.snapshot()
		var out []string
		for i, r := range recs {
			_, raw := r.Value.(connect.RawJSON)
			if _, row := r.Value.(connect.Row); row == raw || raw != rawJSON {
				t.Fatalf("RawJSON %v: record %d has a value of %T", rawJSON, i, r.Value)
			}
			// the source block and the envelope's ts_ms tell the two snapshots apart (their
			// start and LSN): the key and the envelope up to the source block must agree
			v := jsonOf(t, r.Value)
			out = append(out, r.Topic+" "+jsonOf(t, r.Key)+" "+v[:strings.LastIndex(v, `,"source":`)])
		}
		return out
	}
	rows, rendered := read(false), read(true)
	if len(rows) != 5 || len(rendered) != 5 {
		t.Fatalf("%d records as Rows, %d rendered, want 5", len(rows), len(rendered))
	}
	for i := range rows {
		if rows[i] != rendered[i] {
			t.Errorf("record %d:\nrows     %s\nrendered %s", i, rows[i], rendered[i])
		}
	}
}

// One huge row does not make the rows after it take memory of its size: a 4 MiB text and then
// 2,000 small rows render right, in about the memory of the rows themselves.
func TestSnapshotHugeRowThenSmallRows(t *testing.T) {
	sn, cur := benchSnapshot(t, true)
	huge := strings.Repeat("0123456789abcdef", 1<<18)
	var recs []connect.Record
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range 2001 {
		text := "row " + strconv.Itoa(i)
		if i == 0 {
			text = huge
		}
		vals := [][]byte{[]byte(strconv.Itoa(i)), []byte("7"), []byte(text), nil}
		r, err := sn.row(cur, vals)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 24<<20 {
		t.Errorf("rendering allocated %d MiB, want about the 4 MiB row and the small ones", got>>20)
	}
	for _, i := range []int{0, 1, 2000} {
		want := `{"before":null,"after":{"id":` + strconv.Itoa(i) + `,"v":7,"s":"row ` + strconv.Itoa(i) + `","t":null},"source":`
		if i == 0 {
			want = `{"before":null,"after":{"id":0,"v":7,"s":"` + huge + `","t":null},"source":`
		}
		if v := jsonOf(t, recs[i].Value); !strings.HasPrefix(v, want) {
			t.Errorf("record %d: %.200s", i, v)
		}
		if k := jsonOf(t, recs[i].Key); k != `{"id":`+strconv.Itoa(i)+`}` {
			t.Errorf("record %d: key %s", i, k)
		}
	}
}
