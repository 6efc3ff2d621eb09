package postgres

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluice-cdc/sluice/connect"
)

// benchSource is a Source with one table (id int, v int, s text, t timestamptz) and a
// transaction in progress, without a server.
func benchSource(b testing.TB) (*Source, *table) {
	cfg, errs := Plugin().ParseConfig(map[string]string{KeyHostname: "h", KeyUser: "u", KeyDBName: "d", KeyTopicPrefix: "pg"})
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	set, err := settingsFrom(cfg)
	if err != nil {
		b.Fatal(err)
	}
	s := New(set, connect.Env{})
	s.types = newTypeDecoders(set, nil)
	s.tables = map[uint32]*table{}
	defs := []colDef{{"id", pgtype.Int4OID, -1}, {"v", pgtype.Int4OID, -1}, {"s", pgtype.TextOID, -1}, {"t", pgtype.TimestamptzOID, -1}}
	t, err := s.newTable(context.Background(), 16384, "public", "items", defs, []string{"id"})
	if err != nil {
		b.Fatal(err)
	}
	s.tables[16384] = t
	s.stream = newStreamState(100, 0)
	s.stream.inTx = true
	s.stream.tx = s.newTx(777, 200, 0, time.Now())
	s.nowMs = int64(1)
	return s, t
}

// The per-record cost of the stream path: parse an Insert message, decode the row, build
// the record and its position.
func BenchmarkStreamInsert(b *testing.B) {
	s, _ := benchSource(b)
	msg := []byte{'I'}
	msg = binary.BigEndian.AppendUint32(msg, 16384)
	msg = append(msg, 'N')
	msg = append(msg, buildTuple([]tupleCol{
		{kind: 't', data: []byte("123456")}, {kind: 't', data: []byte("456")},
		{kind: 't', data: []byte("row 123456")}, {kind: 't', data: []byte("2024-01-31 13:45:30.123456+00")},
	})...)
	recs := make([]connect.Record, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		if len(recs) == cap(recs) {
			recs = recs[:0]
		}
		if err := parseRowChange(msg, false, &s.rc); err != nil {
			b.Fatal(err)
		}
		if err := s.changeRow(context.Background(), &s.rc, 300, &recs, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// The per-row cost of the snapshot path: rows rendered as JSON (a connector without
// transforms) or built as Rows.
func BenchmarkSnapshotRow(b *testing.B) {
	for _, raw := range []bool{true, false} {
		b.Run(map[bool]string{true: "rendered", false: "rows"}[raw], func(b *testing.B) {
			sn, cur := benchSnapshot(b, raw)
			vals := [][]byte{[]byte("123456"), []byte("456"), []byte("row 123456"), []byte("2024-01-31 13:45:30.123456+00")}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := sn.row(cur, vals); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchSnapshot is a snapshot of benchSource's table, its rows rendered as JSON when raw.
func benchSnapshot(b testing.TB, raw bool) (*snapshotter, *snapTable) {
	s, t := benchSource(b)
	s.env.RawJSON = raw
	sn := &snapshotter{s: s, lsn: 100, started: time.Now()}
	cur := &snapTable{ref: tableRef{OID: 16384, Schema: "public", Name: "items"}, t: t,
		chunk: newChunkQuery("public", "items", []colDef{{"id", pgtype.Int4OID, -1}, {"v", pgtype.Int4OID, -1}, {"s", pgtype.TextOID, -1}, {"t", pgtype.TimestamptzOID, -1}}, []string{"id"}, map[string]uint32{"id": pgtype.Int4OID}, 10240),
		enc:   []keyEncoder{encodeIntKey}}
	cur.statePrefix = snapshotStatePrefix(0, 100, "public", "items", 0)
	cur.source = s.sourceRow(t, int64(1), "true", nil, nil, int64(100))
	cur.sourceJSON, _ = connect.AppendJSON(nil, cur.source) // as openTable renders it
	return sn, cur
}
