package mysql

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"golang.org/x/text/encoding"

	"github.com/sluice-cdc/sluice/connect"
)

// kind is a column's value family; both the snapshot (binary protocol result sets) and the
// binlog (row events) decode into it, so both paths give identical values.
type kind uint8

const (
	kindInt       kind = iota // integers that fit int64 (all but BIGINT UNSIGNED)
	kindUint64                // BIGINT UNSIGNED
	kindDecimal               // DECIMAL / NUMERIC
	kindFloat                 // FLOAT
	kindDouble                // DOUBLE / REAL
	kindBit                   // BIT(n)
	kindDate                  // DATE
	kindTime                  // TIME
	kindDateTime              // DATETIME
	kindTimestamp             // TIMESTAMP
	kindYear                  // YEAR
	kindText                  // CHAR / VARCHAR / TEXT (and MariaDB's JSON, a LONGTEXT)
	kindBinary                // BINARY / VARBINARY / BLOB
	kindEnum                  // ENUM
	kindSet                   // SET
	kindJSON                  // MySQL's binary JSON
	kindGeometry              // GEOMETRY and its subtypes
)

var kindNames = [...]string{"INT", "BIGINT UNSIGNED", "DECIMAL", "FLOAT", "DOUBLE", "BIT", "DATE", "TIME",
	"DATETIME", "TIMESTAMP", "YEAR", "TEXT", "BLOB", "ENUM", "SET", "JSON", "GEOMETRY"}

func (k kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// column is one column of a captured table.
type column struct {
	name     string
	kind     kind
	fsp      int // fractional seconds digits of TIME / DATETIME / TIMESTAMP
	bits     int // BIT(n)
	padTo    int // BINARY(n): values are right-padded with 0x00 to n bytes
	nullable bool
	values   []string          // ENUM / SET members
	dec      *encoding.Decoder // binlog bytes → UTF-8 for non-UTF-8 text columns; nil: UTF-8
	typeName string            // the column type as the server shows it, for schema change events
	charset  string

	// from the configuration
	excluded bool
	mask     func(any) any
	out      int // index in row images, -1 when excluded
}

// valueOptions are the configured value representations.
type valueOptions struct {
	decimalDouble bool
	binaryMode    string
	timeConnect   bool
	bigintPrecise bool
}

// epochDays is the number of days from 0000-03-01 (proleptic) used by civil-day arithmetic.
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y
	if era < 0 {
		era -= 399
	}
	era /= 400
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}

// dateParts parses "YYYY-MM-DD[ hh:mm:ss[.ffffff]]". zero is true for a zero or partly zero
// date ("0000-00-00", "2020-00-10"), which MySQL allows outside strict mode.
func dateParts(s string) (y, mo, d, h, mi, sec, usec int, zero bool, err error) {
	bad := func() error { return fmt.Errorf("malformed date/time %q", s) }
	if len(s) < 10 || s[4] != '-' || s[7] != '-' {
		return 0, 0, 0, 0, 0, 0, 0, false, bad()
	}
	num := func(t string) (int, bool) {
		n := 0
		for i := 0; i < len(t); i++ {
			c := t[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	var ok1, ok2, ok3 bool
	y, ok1 = num(s[0:4])
	mo, ok2 = num(s[5:7])
	d, ok3 = num(s[8:10])
	if !ok1 || !ok2 || !ok3 {
		return 0, 0, 0, 0, 0, 0, 0, false, bad()
	}
	if len(s) > 10 {
		t := s[11:]
		if s[10] != ' ' && s[10] != 'T' || len(t) < 8 || t[2] != ':' || t[5] != ':' {
			return 0, 0, 0, 0, 0, 0, 0, false, bad()
		}
		h, ok1 = num(t[0:2])
		mi, ok2 = num(t[3:5])
		sec, ok3 = num(t[6:8])
		if !ok1 || !ok2 || !ok3 {
			return 0, 0, 0, 0, 0, 0, 0, false, bad()
		}
		if len(t) > 8 {
			if t[8] != '.' {
				return 0, 0, 0, 0, 0, 0, 0, false, bad()
			}
			frac := t[9:]
			f, ok := num(frac)
			if !ok || len(frac) > 6 {
				return 0, 0, 0, 0, 0, 0, 0, false, bad()
			}
			for i := len(frac); i < 6; i++ {
				f *= 10
			}
			usec = f
		}
	}
	zero = mo == 0 || d == 0
	return y, mo, d, h, mi, sec, usec, zero, nil
}

// timeMicros parses "[-]hhh:mm:ss[.ffffff]" into signed microseconds.
func timeMicros(s string) (int64, error) {
	neg := strings.HasPrefix(s, "-")
	t := strings.TrimPrefix(s, "-")
	hs, rest, ok := strings.Cut(t, ":")
	if !ok || len(rest) < 5 || rest[2] != ':' {
		return 0, fmt.Errorf("malformed time %q", s)
	}
	h, err1 := strconv.Atoi(hs)
	m, err2 := strconv.Atoi(rest[0:2])
	sec, err3 := strconv.Atoi(rest[3:5])
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, fmt.Errorf("malformed time %q", s)
	}
	var usec int64
	if len(rest) > 5 {
		frac := rest[6:]
		if rest[5] != '.' || len(frac) > 6 {
			return 0, fmt.Errorf("malformed time %q", s)
		}
		f, err := strconv.Atoi(frac)
		if err != nil {
			return 0, fmt.Errorf("malformed time %q", s)
		}
		for i := len(frac); i < 6; i++ {
			f *= 10
		}
		usec = int64(f)
	}
	v := (int64(h)*3600+int64(m)*60+int64(sec))*1_000_000 + usec
	if neg {
		v = -v
	}
	return v, nil
}

// dateValue converts "YYYY-MM-DD" (or the date of a datetime) into days since the epoch.
func (c *column) dateValue(s string) (any, error) {
	y, mo, d, _, _, _, _, zero, err := dateParts(s)
	if err != nil {
		return nil, err
	}
	if zero {
		return c.zeroValue(), nil
	}
	return daysFromCivil(y, mo, d), nil
}

// dateTimeValue converts a DATETIME text into epoch milliseconds or microseconds.
func (c *column) dateTimeValue(s string, o *valueOptions) (any, error) {
	y, mo, d, h, mi, sec, usec, zero, err := dateParts(s)
	if err != nil {
		return nil, err
	}
	if zero {
		return c.zeroValue(), nil
	}
	micros := (daysFromCivil(y, mo, d)*86400+int64(h)*3600+int64(mi)*60+int64(sec))*1_000_000 + int64(usec)
	if o.timeConnect || c.fsp <= 3 {
		return floorDiv(micros, 1000), nil
	}
	return micros, nil
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// timestampValue renders a TIMESTAMP (text in UTC) as an ISO-8601 string in UTC with the
// column's fractional digits, as Debezium's ZonedTimestamp.
func (c *column) timestampValue(s string) (any, error) {
	y, mo, d, h, mi, sec, usec, zero, err := dateParts(s)
	if err != nil {
		return nil, err
	}
	if zero {
		if c.nullable {
			return nil, nil
		}
		y, mo, d, h, mi, sec, usec = 1970, 1, 1, 0, 0, 0, 0
	}
	b := make([]byte, 0, 32)
	b = fmt.Appendf(b, "%04d-%02d-%02dT%02d:%02d:%02d", y, mo, d, h, mi, sec)
	if c.fsp > 0 {
		frac := fmt.Sprintf("%06d", usec)
		b = append(b, '.')
		b = append(b, frac[:c.fsp]...)
	}
	return string(append(b, 'Z')), nil
}

// zeroValue is what a zero date becomes: null in a nullable column, else the epoch.
func (c *column) zeroValue() any {
	if c.nullable {
		return nil
	}
	return int64(0)
}

func (c *column) timeValue(s string, o *valueOptions) (any, error) {
	us, err := timeMicros(s)
	if err != nil {
		return nil, err
	}
	if o.timeConnect {
		return floorDiv(us, 1000), nil
	}
	return us, nil
}

func (c *column) binaryValue(b []byte, o *valueOptions) any {
	if b == nil {
		b = []byte{} // empty, not null
	}
	if c.padTo > len(b) {
		p := make([]byte, c.padTo)
		copy(p, b)
		b = p
	}
	switch o.binaryMode {
	case "base64":
		return base64.StdEncoding.EncodeToString(b)
	case "base64-url-safe":
		return base64.URLEncoding.EncodeToString(b)
	case "hex":
		return hex.EncodeToString(b)
	}
	return b
}

// bitValue renders BIT(1) as a boolean and BIT(n) as n/8 rounded up bytes, least significant
// byte first (Debezium's io.debezium.data.Bits).
func (c *column) bitValue(v uint64) any {
	if c.bits == 1 {
		return v != 0
	}
	n := (c.bits + 7) / 8
	out := make([]byte, n)
	for i := 0; i < n; i++ {
		out[i] = byte(v >> (8 * i))
	}
	return out
}

func (c *column) uintValue(v uint64, o *valueOptions) any {
	if c.kind == kindUint64 && o.bigintPrecise {
		return strconv.FormatUint(v, 10)
	}
	if v > math.MaxInt64 {
		return v
	}
	return boxInt(int64(v))
}

func (c *column) decimalValue(s string, o *valueOptions) (any, error) {
	if o.decimalDouble {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("malformed decimal %q", s)
		}
		return f, nil
	}
	return s, nil
}

func float32Value(f float32) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
	return v
}

func (c *column) setValue(mask uint64) string {
	var b strings.Builder
	for i, name := range c.values {
		if mask&(1<<uint(i)) != 0 {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(name)
		}
	}
	return b.String()
}

func geometryValue(b []byte) any {
	if len(b) < 4 {
		return connect.Row{{Name: "wkb", Value: append([]byte(nil), b...)}, {Name: "srid", Value: nil}}
	}
	srid := int64(binary.LittleEndian.Uint32(b))
	return connect.Row{{Name: "wkb", Value: append([]byte(nil), b[4:]...)}, {Name: "srid", Value: srid}}
}

// text decodes column bytes into a UTF-8 string.
func (c *column) text(b []byte) (string, error) {
	if c.dec == nil {
		return utf8Text(b), nil
	}
	out, err := c.dec.Bytes(b)
	if err != nil {
		return "", fmt.Errorf("decode %s text: %w", c.charset, err)
	}
	return string(out), nil
}

func utf8Text(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// binlogValue converts a value decoded by go-mysql from a row event (see replication.RowsEvent
// for the Go types per column type).
func (c *column) binlogValue(v any, o *valueOptions) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch c.kind {
	case kindInt, kindUint64, kindYear:
		switch x := v.(type) {
		case int8:
			return boxInt(int64(x)), nil
		case int16:
			return boxInt(int64(x)), nil
		case int32:
			return boxInt(int64(x)), nil
		case int64:
			return boxInt(x), nil
		case int:
			return boxInt(int64(x)), nil
		case uint8:
			return boxInt(int64(x)), nil
		case uint16:
			return boxInt(int64(x)), nil
		case uint32:
			return boxInt(int64(x)), nil
		case uint64:
			return c.uintValue(x, o), nil
		}
	case kindDecimal:
		switch x := v.(type) {
		case string:
			return c.decimalValue(x, o)
		case fmt.Stringer:
			return c.decimalValue(x.String(), o)
		}
	case kindFloat:
		switch x := v.(type) {
		case float32:
			return float32Value(x), nil
		case float64:
			return float32Value(float32(x)), nil
		}
	case kindDouble:
		switch x := v.(type) {
		case float64:
			return x, nil
		case float32:
			return float64(x), nil
		}
	case kindBit:
		if x, ok := v.(int64); ok {
			return c.bitValue(uint64(x)), nil
		}
	case kindDate:
		if x, ok := v.(string); ok {
			return c.dateValue(x)
		}
	case kindTime:
		if x, ok := v.(string); ok {
			return c.timeValue(x, o)
		}
	case kindDateTime:
		if x, ok := v.(string); ok {
			return c.dateTimeValue(x, o)
		}
	case kindTimestamp:
		if x, ok := v.(string); ok {
			return c.timestampValue(x)
		}
	case kindText, kindJSON:
		switch x := v.(type) {
		case string:
			if c.dec == nil && utf8.ValidString(x) {
				return x, nil // the decoder's own copy: no conversion needed
			}
			return c.text([]byte(x))
		case []byte:
			return c.text(x)
		}
	case kindBinary:
		switch x := v.(type) {
		case string:
			return c.binaryValue([]byte(x), o), nil
		case []byte:
			return c.binaryValue(append([]byte(nil), x...), o), nil
		}
	case kindEnum:
		if x, ok := v.(int64); ok {
			if x >= 1 && int(x) <= len(c.values) {
				return c.values[x-1], nil
			}
			return "", nil
		}
	case kindSet:
		if x, ok := v.(int64); ok {
			return c.setValue(uint64(x)), nil
		}
	case kindGeometry:
		switch x := v.(type) {
		case []byte:
			return geometryValue(x), nil
		case string:
			return geometryValue([]byte(x)), nil
		}
	}
	return nil, fmt.Errorf("column %s (%s): unexpected binlog value of type %T", c.name, c.kind, v)
}

// snapshotValue converts a value of a binary-protocol result set row.
func (c *column) snapshotValue(fv *gomysql.FieldValue, o *valueOptions) (any, error) {
	if fv.Type == gomysql.FieldValueTypeNull {
		return nil, nil
	}
	str := func() string { return string(fv.AsString()) }
	switch c.kind {
	case kindInt, kindUint64, kindYear:
		switch fv.Type {
		case gomysql.FieldValueTypeSigned:
			return boxInt(fv.AsInt64()), nil
		case gomysql.FieldValueTypeUnsigned:
			return c.uintValue(fv.AsUint64(), o), nil
		}
	case kindDecimal:
		if fv.Type == gomysql.FieldValueTypeString {
			return c.decimalValue(str(), o)
		}
	case kindFloat:
		if fv.Type == gomysql.FieldValueTypeFloat {
			return float32Value(float32(fv.AsFloat64())), nil
		}
	case kindDouble:
		if fv.Type == gomysql.FieldValueTypeFloat {
			return fv.AsFloat64(), nil
		}
	case kindBit:
		if fv.Type == gomysql.FieldValueTypeString {
			var v uint64
			for _, b := range fv.AsString() {
				v = v<<8 | uint64(b)
			}
			return c.bitValue(v), nil
		}
	case kindDate:
		return c.dateValue(str())
	case kindTime:
		return c.timeValue(str(), o)
	case kindDateTime:
		return c.dateTimeValue(str(), o)
	case kindTimestamp:
		return c.timestampValue(str())
	case kindText, kindJSON, kindEnum, kindSet:
		if fv.Type == gomysql.FieldValueTypeString {
			// the server converted the text to the connection's utf8mb4
			return utf8Text(fv.AsString()), nil
		}
	case kindBinary:
		if fv.Type == gomysql.FieldValueTypeString {
			return c.binaryValue(append([]byte(nil), fv.AsString()...), o), nil
		}
	case kindGeometry:
		if fv.Type == gomysql.FieldValueTypeString {
			return geometryValue(fv.AsString()), nil
		}
	}
	return nil, fmt.Errorf("column %s (%s): unexpected result value of type %d", c.name, c.kind, fv.Type)
}
