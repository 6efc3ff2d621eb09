package mysql

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/connect"
)

// TestColumnFiltersMasksAndKeys: excluded columns are absent from the images, masked columns
// are masked in the images but not in keys, and message.key.columns makes keys of any columns
// (in its order, excluded or masked ones with their real values), the same way through the
// snapshot and through the binlog (inserts, updates and deletes).
func TestColumnFiltersMasksAndKeys(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	rows := []string{
		"INSERT INTO people VALUES (1, 'A1', 'topsecret', 'h1', 5), (2, 'B2', 'x', 'h2', 6)",
		"INSERT INTO nokey VALUES (7, 'bee')",
		"INSERT INTO ex VALUES (1, 42)",
	}
	exec(t, m, append([]string{"USE " + quoteName(db),
		"CREATE TABLE people (id INT PRIMARY KEY, code VARCHAR(10), secret VARCHAR(20), hashed VARCHAR(20), skipme INT)",
		"CREATE TABLE nokey (a INT, b VARCHAR(10))",
		"CREATE TABLE ex (id INT PRIMARY KEY, hidden INT)",
	}, rows...)...)
	q := func(s string) string { return db + `\.` + s }
	cfg := baseConfig(m, db, map[string]string{
		KeyColumnExclude:                      q(`people\.skipme`) + "," + q(`ex\.hidden`),
		KeyMaskWith + "3.chars":               q(`people\.secret`) + "," + q(`nokey\.b`),
		KeyMaskHash + "SHA-256.with.salt.pep": q(`people\.hashed`),
		KeyMessageKeyColumns:                  db + ".people:code,id;" + db + ".nokey:b;" + db + ".ex:hidden",
	})
	var l testLog
	src := newSource(t, cfg, &memStore{})
	l.run(t, src, time.Minute, func(*testLog) bool { return src.phase == phaseStreaming })
	snapshot := keyedImages(t, &l, connect.OpRead)

	hash := func(v string) string {
		s := sha256.Sum256([]byte("pep" + v))
		return hex.EncodeToString(s[:])
	}
	want := map[string]string{
		`{"code":"A1","id":1}`: `{"id":1,"code":"A1","secret":"***","hashed":"` + hash("h1") + `"}`,
		`{"code":"B2","id":2}`: `{"id":2,"code":"B2","secret":"***","hashed":"` + hash("h2") + `"}`,
		`{"b":"bee"}`:          `{"a":7,"b":"***"}`,
		`{"hidden":42}`:        `{"id":1}`,
	}
	if diff := cmp.Diff(want, snapshot); diff != "" {
		t.Fatalf("snapshot keys and after images (-want +got):\n%s", diff)
	}

	// the same rows through the binlog, then an update and deletes
	exec(t, m, append([]string{"USE " + quoteName(db), "DELETE FROM people", "DELETE FROM nokey", "DELETE FROM ex"}, rows...)...)
	exec(t, m, "USE "+quoteName(db), "UPDATE people SET secret = 'other', skipme = 9 WHERE id = 1", "DELETE FROM ex", "DELETE FROM nokey")
	src = newSource(t, baseConfigWith(cfg, KeyServerID, src.cfgServerID()), &memStore{})
	n := len(l.recs)
	// 4 deletes and their tombstones, 4 inserts, 1 update, 2 deletes and their tombstones
	l.run(t, src, time.Minute, func(l *testLog) bool { return len(l.recs) >= n+8+4+1+4 })
	streamed := l.recs[n:]
	created := keyedImages(t, &testLog{recs: streamed}, connect.OpCreate)
	if diff := cmp.Diff(want, created); diff != "" {
		t.Errorf("binlog keys and after images (-want +got):\n%s", diff)
	}
	var got []string
	for _, r := range streamed[8+4:] {
		k, _ := connect.AppendJSON(nil, r.Key)
		if r.Value == nil {
			got = append(got, "tombstone "+string(k))
			continue
		}
		ev := event(t, r)
		if ev.Op != connect.OpUpdate && ev.Op != connect.OpDelete {
			continue
		}
		b, _ := connect.AppendJSON(nil, ev.Before)
		a, _ := connect.AppendJSON(nil, ev.After)
		got = append(got, ev.Op.String()+" "+string(k)+" "+string(b)+" "+string(a))
	}
	wantChanges := []string{
		`u {"code":"A1","id":1} {"id":1,"code":"A1","secret":"***","hashed":"` + hash("h1") + `"} {"id":1,"code":"A1","secret":"***","hashed":"` + hash("h1") + `"}`,
		`d {"hidden":42} {"id":1} null`, `tombstone {"hidden":42}`,
		`d {"b":"bee"} {"a":7,"b":"***"} null`, `tombstone {"b":"bee"}`,
	}
	if diff := cmp.Diff(wantChanges, got); diff != "" {
		t.Errorf("binlog updates and deletes (-want +got):\n%s", diff)
	}
}

// keyedImages returns the after images of the records with op, as JSON by key JSON.
func keyedImages(t *testing.T, l *testLog, op connect.Op) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, r := range l.recs {
		if r.Value == nil {
			continue
		}
		ev := event(t, r)
		if ev.Op != op {
			continue
		}
		k, _ := connect.AppendJSON(nil, r.Key)
		a, _ := connect.AppendJSON(nil, ev.After)
		out[string(k)] = string(a)
	}
	return out
}

// baseConfigWith returns a copy of cfg with key set to value.
func baseConfigWith(cfg map[string]string, key, value string) map[string]string {
	out := make(map[string]string, len(cfg))
	for k, v := range cfg {
		out[k] = v
	}
	out[key] = value
	return out
}
