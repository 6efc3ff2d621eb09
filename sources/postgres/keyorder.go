package postgres

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluice-cdc/sluice/sources/snapshot"
)

// A keyEncoder appends an order-preserving encoding of a key column's text value: for two
// values a and b of the column, bytes.Compare(enc(a), enc(b)) has the sign of the column's
// ORDER BY comparison, and the encodings of composite keys (concatenated) compare like the
// keys. Snapshot chunks are read in that order, so a row's encoded key is a snapshot Order
// that increases with every row and is the same in every attempt.
type keyEncoder func(dst, src []byte) ([]byte, error)

// keyEncoderFor returns the encoder of a key column of type typ whose collation is
// collation (its name, for text types), or nil when the type's order cannot be encoded here.
func keyEncoderFor(m *pgtype.Map, typ uint32, collation string) keyEncoder {
	switch typ {
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.OIDOID:
		return encodeIntKey
	case pgtype.BoolOID:
		return func(dst, src []byte) ([]byte, error) {
			if len(src) == 1 && src[0] == 't' {
				return append(dst, 1), nil
			}
			return append(dst, 0), nil
		}
	case pgtype.UUIDOID:
		// the canonical text form (lower-case hex, fixed dashes) sorts like the 16 bytes
		return func(dst, src []byte) ([]byte, error) {
			if len(src) != 36 {
				return nil, fmt.Errorf("uuid key %q", src)
			}
			return append(dst, src...), nil
		}
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.NameOID:
		if typ != pgtype.NameOID && !byteOrderCollation(collation) {
			return nil
		}
		return func(dst, src []byte) ([]byte, error) { return appendEscaped(dst, src), nil }
	case pgtype.ByteaOID:
		return func(dst, src []byte) ([]byte, error) {
			if len(src) < 2 || src[0] != '\\' || src[1] != 'x' {
				return nil, fmt.Errorf("bytea key not in hex format")
			}
			b := make([]byte, hex.DecodedLen(len(src)-2))
			if _, err := hex.Decode(b, src[2:]); err != nil {
				return nil, fmt.Errorf("bytea key: %w", err)
			}
			return appendEscaped(dst, b), nil
		}
	case pgtype.DateOID:
		plan := m.PlanScan(pgtype.DateOID, pgtype.TextFormatCode, &pgtype.Date{})
		return func(dst, src []byte) ([]byte, error) {
			var d pgtype.Date
			if err := plan.Scan(src, &d); err != nil {
				return nil, fmt.Errorf("date key %q: %w", src, err)
			}
			return appendOrderedInt(dst, infinite(d.InfinityModifier, floorDiv(d.Time.Unix(), 86400))), nil
		}
	case pgtype.TimestampOID:
		plan := m.PlanScan(pgtype.TimestampOID, pgtype.TextFormatCode, &pgtype.Timestamp{})
		return func(dst, src []byte) ([]byte, error) {
			var ts pgtype.Timestamp
			if err := plan.Scan(src, &ts); err != nil {
				return nil, fmt.Errorf("timestamp key %q: %w", src, err)
			}
			return appendOrderedInt(dst, infinite(ts.InfinityModifier, ts.Time.UnixMicro())), nil
		}
	case pgtype.TimestamptzOID:
		plan := m.PlanScan(pgtype.TimestamptzOID, pgtype.TextFormatCode, &pgtype.Timestamptz{})
		return func(dst, src []byte) ([]byte, error) {
			var ts pgtype.Timestamptz
			if err := plan.Scan(src, &ts); err != nil {
				return nil, fmt.Errorf("timestamptz key %q: %w", src, err)
			}
			return appendOrderedInt(dst, infinite(ts.InfinityModifier, ts.Time.UnixMicro())), nil
		}
	case pgtype.TIDOID:
		return encodeTIDKey
	}
	return nil
}

// byteOrderCollation reports whether a collation sorts text by its UTF-8 bytes.
func byteOrderCollation(c string) bool {
	switch c {
	case "C", "POSIX", "ucs_basic", "C.UTF-8", "C.utf8":
		return true
	}
	return false
}

func infinite(mod pgtype.InfinityModifier, v int64) int64 {
	switch mod {
	case pgtype.Infinity:
		return 1<<63 - 1
	case pgtype.NegativeInfinity:
		return -1 << 63
	}
	return v
}

func encodeIntKey(dst, src []byte) ([]byte, error) {
	n, err := snapshot.ParseInt(src)
	if err != nil {
		return nil, fmt.Errorf("integer key %q: %w", src, err)
	}
	return appendOrderedInt(dst, n), nil
}

// appendOrderedInt appends n so that byte order is numeric order: big-endian with the sign
// bit flipped.
func appendOrderedInt(dst []byte, n int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(n)^(1<<63))
}

// appendEscaped appends a variable-length value so that concatenations compare like the
// sequence of values: 0x00 becomes 0x00 0xFF and the value ends with 0x00 0x01.
func appendEscaped(dst, b []byte) []byte {
	for _, c := range b {
		if c == 0 {
			dst = append(dst, 0, 0xFF)
		} else {
			dst = append(dst, c)
		}
	}
	return append(dst, 0, 1)
}

// encodeTIDKey encodes a ctid "(block,offset)".
func encodeTIDKey(dst, src []byte) ([]byte, error) {
	s := strings.TrimSuffix(strings.TrimPrefix(string(src), "("), ")")
	blk, off, ok := strings.Cut(s, ",")
	b, err1 := strconv.ParseUint(blk, 10, 32)
	o, err2 := strconv.ParseUint(off, 10, 16)
	if !ok || err1 != nil || err2 != nil {
		return nil, fmt.Errorf("ctid %q", src)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(b))
	return binary.BigEndian.AppendUint16(dst, uint16(o)), nil
}
