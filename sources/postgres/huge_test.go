package postgres

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
)

// hugeRows is the size of the single transaction of TestHugeTransaction (SLUICE_PG_HUGE_ROWS
// overrides it for a quick run).
func hugeRows(t *testing.T) int {
	if v := os.Getenv("SLUICE_PG_HUGE_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SLUICE_PG_HUGE_ROWS=%q: want a positive number", v)
		}
		return n
	}
	return 2_000_000
}

// procStatus reads a field of /proc/self/status in KiB.
func procStatus(t *testing.T, field string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// The RSS bound of TestHugeTransaction: the source holds a bounded queue of messages and one
// batch, never the transaction (its 2 million rows are about 250 MB as records).
const hugeRSSBoundMiB = 96

// One transaction of 2 million inserts with protocol 2: the server streams it while it
// runs, the source spills it to a file and emits it after the commit; every row arrives
// exactly once, in bounded batches, and the process's peak RSS stays under the bound.
func TestHugeTransaction(t *testing.T) {
	rows := hugeRows(t)
	db := newDB(t, sharedPG(t))
	db.exec(t, "CREATE TABLE big (id int PRIMARY KEY, pad text NOT NULL)")
	src := openSource(t, db.config(map[string]string{KeySnapshotMode: SnapshotNoData, KeyProtocolVersion: "2", KeyMaxBatchSize: "2048"}), connect.Position{})

	inserted := make(chan error, 1)
	go func() {
		_, err := db.conn.Exec(context.Background(), "INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, "+strconv.Itoa(rows)+") g")
		inserted <- err
	}()
	seen := make([]bool, rows+1)
	var n, batches int
	var last []byte
	deadline := time.Now().Add(10 * time.Minute)
	for n < rows {
		if time.Now().After(deadline) {
			t.Fatalf("timed out with %d of %d rows", n, rows)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		b, err := src.Read(ctx)
		expired := ctx.Err() != nil
		cancel()
		if err != nil {
			if expired {
				continue
			}
			t.Fatal(err)
		}
		if len(b.Records) > 2048 {
			t.Fatalf("batch of %d records, want at most 2048", len(b.Records))
		}
		for _, r := range b.Records {
			if last != nil && bytes.Compare(r.Position.Order, last) <= 0 {
				t.Fatalf("order %x not above %x", r.Position.Order, last)
			}
			last = r.Position.Order
			id := keyOf(t, r)[0].Value.(int64)
			if id < 1 || int(id) > rows || seen[id] {
				t.Fatalf("row %d emitted twice or out of range", id)
			}
			seen[id] = true
			n++
		}
		batches++
		if !b.Position.IsZero() {
			if err := src.Ack(context.Background(), b.Position); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := <-inserted; err != nil {
		t.Fatal(err)
	}
	st := src.Stats()
	hwm := procStatus(t, "VmHWM") / 1024
	t.Logf("%d rows in %d batches; streamed transactions %d, spilled %d MiB; peak RSS %d MiB (bound %d MiB)",
		n, batches, st.StreamedTransactions, st.SpilledBytes>>20, hwm, hugeRSSBoundMiB)
	if rows >= 1_000_000 && st.StreamedTransactions == 0 {
		t.Error("the server did not stream the transaction: protocol 2 streaming was not used")
	}
	if hwm > hugeRSSBoundMiB {
		t.Errorf("peak RSS %d MiB, bound %d MiB", hwm, hugeRSSBoundMiB)
	}
}
