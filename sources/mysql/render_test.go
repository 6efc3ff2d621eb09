package mysql

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
)

// A snapshot row, rendered as JSON from the fetched values, holds what the binlog's Rows hold
// for the same row: masks (fixed and hashed) on the image and not on the key (ssn is masked and
// part of the key), a key column excluded from the image but kept in the key, a key whose
// columns come in another order than the table's, NULLs, text that needs escaping, the extreme
// integers and DATETIMEs of 3 and 6 digits, in both time.precision.modes that tell them apart;
// the envelope's ts_ms is when the row was read, and the last record is marked "last". So do
// the Rows a connector with transforms gets (connect.Env.RawJSON unset).
func TestSnapshotRenderMatchesStream(t *testing.T) {
	for _, mode := range []string{"adaptive_time_microseconds", "connect"} {
		for _, raw := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/RawJSON=%v", mode, raw), func(t *testing.T) { testSnapshotRenderMatchesStream(t, mode, raw) })
		}
	}
}

func testSnapshotRenderMatchesStream(t *testing.T, mode string, raw bool) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	exec(t, m, "USE "+quoteName(db),
		"CREATE TABLE r (a INT NOT NULL, s TEXT, ssn VARCHAR(20), email VARCHAR(40), k2 BIGINT NOT NULL, u BIGINT UNSIGNED, d DATETIME(3), d6 DATETIME(6), PRIMARY KEY (a, k2))",
		renderRows)
	opts := func(extra map[string]string) map[string]string {
		o := map[string]string{
			KeyMaskWith + "4.chars":                  db + ".r.ssn",
			KeyMaskHash + "SHA-256.with.salt.pepper": db + ".r.email",
			KeyColumnExclude:                         db + ".r.k2",
			KeyMessageKeyColumns:                     db + ".r:k2,a,ssn",
			KeyTimePrecisionMode:                     mode,
		}
		for k, v := range extra {
			o[k] = v
		}
		return baseConfig(m, db, o)
	}
	store := &memStore{}
	src := newSource(t, opts(nil), store)
	src.env.RawJSON = raw
	var l testLog
	t0 := time.Now().UnixMilli()
	l.run(t, src, time.Minute, func(l *testLog) bool { return src.phase == phaseStreaming })
	t1 := time.Now().UnixMilli()
	topic := "test." + db + ".r"
	snap := map[string]string{}
	var recs []connect.Record
	for _, r := range l.recs {
		if r.Topic == topic {
			recs = append(recs, r)
		}
	}
	for i, r := range recs {
		if _, ok := r.Value.(connect.RawJSON); ok != raw {
			t.Fatalf("snapshot record %d: value %T, want a rendering %v", i, r.Value, raw)
		}
		if ts := event(t, r).TsMs; ts < t0 || ts > t1 {
			t.Errorf("snapshot record %d: ts_ms %d, want the time of its read, %d to %d", i, ts, t0, t1)
		}
		if mark, _ := event(t, r).Source.Get("snapshot"); mark != map[bool]string{true: "last", false: "true"}[i == len(recs)-1] {
			t.Errorf("snapshot record %d of %d: source.snapshot %v", i, len(recs), mark)
		}
		k, _ := connect.AppendJSON(nil, r.Key)
		v, _ := connect.AppendJSON(nil, event(t, r).After)
		snap[string(k)] = string(v)
	}
	if len(snap) != 3 {
		t.Fatalf("snapshot rows %v, want 3", snap)
	}
	// the same rows again, through the binlog
	exec(t, m, "USE "+quoteName(db), "DELETE FROM r", renderRows)
	src = newSource(t, opts(map[string]string{KeyServerID: src.cfgServerID()}), store)
	stream := map[string]string{}
	l.run(t, src, time.Minute, func(l *testLog) bool {
		for _, r := range l.recs {
			if r.Topic == topic && r.Value != nil && event(t, r).Op == connect.OpCreate {
				k, _ := connect.AppendJSON(nil, r.Key)
				v, _ := connect.AppendJSON(nil, event(t, r).After)
				stream[string(k)] = string(v)
			}
		}
		return len(stream) == 3
	})
	for k, want := range snap {
		if got, ok := stream[k]; !ok || got != want {
			t.Errorf("key %s:\nsnapshot %s\nbinlog   %s", k, want, got)
		}
	}
	first := snap[`{"k2":10,"a":1,"ssn":"123-45-6789"}`]
	d6 := map[string]string{"connect": `"d6":1706708730120`, "adaptive_time_microseconds": `"d6":1706708730120456`}[mode]
	for _, want := range []string{`"a":1,`, `"s":"q\"\\\n\t\u2028é"`, `"ssn":"****"`, `"u":18446744073709551615`, `"d":1706708730120,`, d6} {
		if !strings.Contains(first, want) {
			t.Errorf("snapshot row 1 %s: want %s in it", first, want)
		}
	}
	if strings.Contains(first, "k2") || strings.Contains(first, "x@example.com") {
		t.Errorf("snapshot row 1 %s: holds the excluded k2 or the unhashed email", first)
	}
	if _, ok := snap[`{"k2":-9223372036854775808,"a":2,"ssn":null}`]; !ok {
		t.Errorf("snapshot keys %v: no key of row 2", snap)
	}
}

// renderRows are the rows of TestSnapshotRenderMatchesStream (<LS> is U+2028, which JSON
// output escapes).
var renderRows = strings.ReplaceAll(`INSERT INTO r VALUES
	(1, 'q"\\\n\t<LS>é', '123-45-6789', 'x@example.com', 10, 18446744073709551615, '2024-01-31 13:45:30.120', '2024-01-31 13:45:30.120456'),
	(2, NULL, NULL, NULL, -9223372036854775808, NULL, NULL, NULL),
	(3, '', 'ssn', 'e', 9223372036854775807, 0, '1970-01-01 00:00:00', '1969-12-31 23:59:59.999999')`, "<LS>", "\u2028")
