package postgres

import (
	"bufio"
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/sluice-cdc/sluice/connect"
)

// Every position ever written decodes, and encodes back to the same text.
func TestPositionGolden(t *testing.T) {
	f, err := os.Open("testdata/positions_v1.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n++
		p, err := decodePosition(connect.Position{State: []byte(line)})
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if got := string(p.appendState(nil)); got != line {
			t.Errorf("re-encoded\n got %s\nwant %s", got, line)
		}
	}
	if n == 0 {
		t.Fatal("no positions in the golden file")
	}
}

// Orders follow the documented layout: epoch, then snapshot before stream, then table/row or
// commit LSN/index; a transaction's end position is not below any of its records; a
// heartbeat at the WAL end sorts after the transactions before it.
func TestPositionOrder(t *testing.T) {
	snap := func(epoch, table uint32, rows uint64) position {
		return position{Epoch: epoch, Snapshot: &snapshotPos{LSN: 100, TableIndex: table, Rows: rows}}
	}
	rec := func(epoch uint32, lsn pglogrepl.LSN, change uint64, record uint16) position {
		return position{Epoch: epoch, LSN: lsn, Change: change, Record: record}
	}
	inOrder := []position{
		snap(0, 0, 1), snap(0, 0, 2), snap(0, 1, 1),
		{Epoch: 0, LSN: 100, End: 100}, // snapshot done: the stream starts at 100
		rec(0, 100, 1, 0), rec(0, 100, 1, 1), rec(0, 100, 2, 0),
		{Epoch: 0, LSN: 100, Change: 2, Record: recordEnd, End: 180},
		{Epoch: 0, LSN: 200, End: 200}, // heartbeat
		rec(0, 200, 1, 0),
		snap(1, 0, 1), // a new snapshot after a lost position
		rec(1, 50, 1, 0),
	}
	for i := 1; i < len(inOrder); i++ {
		a, b := inOrder[i-1].order(), inOrder[i].order()
		if bytes.Compare(a, b) >= 0 {
			t.Errorf("order %d (%x) not below order %d (%x)", i-1, a, i, b)
		}
	}
}

// Resume points and flush LSNs of positions.
func TestPositionResume(t *testing.T) {
	cases := []struct {
		p     position
		lsn   pglogrepl.LSN
		skip  uint64
		flush pglogrepl.LSN
	}{
		{position{LSN: 100, Change: 3, Record: 1}, 100, 3<<16 | 1, 100},
		{position{LSN: 100, Change: 3, Record: recordEnd, End: 180}, 180, 0, 180},
		{position{LSN: 200, End: 200}, 200, 0, 200},
		{position{Snapshot: &snapshotPos{LSN: 100}}, 0, 0, 0},
	}
	for _, c := range cases {
		if c.p.Snapshot == nil {
			lsn, skip := c.p.resumeLSN()
			if lsn != c.lsn || skip != c.skip {
				t.Errorf("%s: resume %s %d, want %s %d", c.p.appendState(nil), lsn, skip, c.lsn, c.skip)
			}
		}
		if got := c.p.flushLSN(); got != c.flush {
			t.Errorf("%s: flush %s, want %s", c.p.appendState(nil), got, c.flush)
		}
	}
}

func TestPositionRejects(t *testing.T) {
	for _, s := range []string{
		``, `{}`, `{"v":2,"lsn":"0/1"}`, `{"v":1,"lsn":"nope"}`, `{"v":1,"lsn":"0/1","end":"x"}`,
		`{"v":1,"snapshot":{"lsn":"zz"}}`, `[1]`,
	} {
		if _, err := decodePosition(connect.Position{State: []byte(s)}); err == nil {
			t.Errorf("%q decoded without error", s)
		}
	}
}

func FuzzDecodePosition(f *testing.F) {
	f.Add([]byte(`{"v":1,"epoch":0,"lsn":"0/16B3748","change":3,"record":1}`))
	f.Add([]byte(`{"v":1,"epoch":0,"snapshot":{"lsn":"0/16B2000","schema":"public","table":"t","table_index":2,"rows":10,"key":["42"]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodePosition(connect.Position{State: b})
		if err != nil {
			return
		}
		// whatever decodes re-encodes to something that decodes to the same position
		q, err := decodePosition(p.encode())
		if err != nil {
			t.Fatalf("re-encoded %s: %v", p.appendState(nil), err)
		}
		if !bytes.Equal(p.order(), q.order()) || string(p.appendState(nil)) != string(q.appendState(nil)) {
			t.Fatalf("round trip changed %s into %s", p.appendState(nil), q.appendState(nil))
		}
	})
}
