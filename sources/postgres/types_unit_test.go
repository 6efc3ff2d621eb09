package postgres

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// The fast paths of date and timestamp text agree with time.Time over a wide range.
func TestFastDateTime(t *testing.T) {
	for _, s := range []string{"0001-01-01", "1582-10-15", "1900-02-28", "1969-12-31", "1970-01-01", "2000-02-29", "2024-01-31", "9999-12-31"} {
		tm, _ := time.Parse("2006-01-02", s)
		got, ok := fastDate([]byte(s))
		if !ok || got != floorDiv(tm.Unix(), 86400) {
			t.Errorf("%s: %d %v, want %d", s, got, ok, floorDiv(tm.Unix(), 86400))
		}
	}
	for _, s := range []string{"0001-01-01 00:00:00", "1969-12-31 23:59:59.999999", "1970-01-01 00:00:00.5", "2024-01-31 13:45:30.123456", "9999-12-31 23:59:59.1"} {
		tm, err := time.Parse("2006-01-02 15:04:05.999999", s)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := fastTimestamp([]byte(s))
		if !ok || got != tm.UnixMicro() {
			t.Errorf("%s: %d %v, want %d", s, got, ok, tm.UnixMicro())
		}
	}
	for _, s := range []string{"infinity", "0044-03-15 BC", "12345-01-01", "2024-01-31 13:45:30.1234567", "2024-01-31T13:45:30"} {
		if _, ok := fastTimestamp([]byte(s)); ok {
			t.Errorf("%s: fast path taken", s)
		}
	}
}

// A chunk query whose binary column no longer is a timestamptz in binary form (its type
// changed during the snapshot) is refused with the fix; the expected descriptions pass.
func TestChunkQueryCheckBinary(t *testing.T) {
	q := chunkQuery{ncols: 3, nsel: 3, formats: []int16{pgtype.TextFormatCode, pgtype.BinaryFormatCode, pgtype.TextFormatCode}}
	fds := []pgconn.FieldDescription{
		{Name: "id", DataTypeOID: pgtype.Int4OID, Format: pgtype.TextFormatCode},
		{Name: "t", DataTypeOID: pgtype.TimestamptzOID, Format: pgtype.BinaryFormatCode},
		{Name: "s", DataTypeOID: pgtype.TextOID, Format: pgtype.TextFormatCode},
	}
	if err := q.checkBinary(fds); err != nil {
		t.Fatal(err)
	}
	fds[1].DataTypeOID = pgtype.Int8OID
	want := "column 2 of the chunk query is no longer a timestamptz in binary form; the table's type changed during the snapshot: restart the connector to read it again"
	if err := q.checkBinary(fds); err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	if err := q.checkBinary(fds[:1]); err == nil || err.Error() != want {
		t.Fatalf("fewer columns: got %v, want %q", err, want)
	}
}
