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
func dateParts[T string | []byte](s T) (y, mo, d, h, mi, sec, usec int, zero bool, err error) {
	if len(s) < 10 || s[4] != '-' || s[7] != '-' {
		return 0, 0, 0, 0, 0, 0, 0, false, badDate(s)
	}
	y1, ok1 := digits2(s, 0)
	y2, ok2 := digits2(s, 2)
	mo, ok3 := digits2(s, 5)
	d, ok4 := digits2(s, 8)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return 0, 0, 0, 0, 0, 0, 0, false, badDate(s)
	}
	y = y1*100 + y2
	if len(s) > 10 {
		if s[10] != ' ' && s[10] != 'T' || len(s) < 19 || s[13] != ':' || s[16] != ':' {
			return 0, 0, 0, 0, 0, 0, 0, false, badDate(s)
		}
		h, ok1 = digits2(s, 11)
		mi, ok2 = digits2(s, 14)
		sec, ok3 = digits2(s, 17)
		if !ok1 || !ok2 || !ok3 {
			return 0, 0, 0, 0, 0, 0, 0, false, badDate(s)
		}
		if len(s) > 19 {
			if s[19] != '.' {
				return 0, 0, 0, 0, 0, 0, 0, false, badDate(s)
			}
			if usec, ok1 = fraction(s[20:]); !ok1 {
				return 0, 0, 0, 0, 0, 0, 0, false, badDate(s)
			}
		}
	}
	zero = mo == 0 || d == 0
	return y, mo, d, h, mi, sec, usec, zero, nil
}

func badDate[T string | []byte](s T) error { return fmt.Errorf("malformed date/time %q", string(s)) }

// digits2 parses the two decimal digits at s[i:i+2].
func digits2[T string | []byte](s T, i int) (int, bool) {
	a, b := s[i]-'0', s[i+1]-'0' // a non-digit wraps to more than 9
	return int(a)*10 + int(b), a <= 9 && b <= 9
}

// digits parses a non-empty run of decimal digits (at most 9).
func digits[T string | []byte](t T) (int, bool) {
	if len(t) == 0 || len(t) > 9 {
		return 0, false
	}
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

// fraction parses 1 to 6 fractional digits into microseconds.
func fraction[T string | []byte](t T) (int, bool) {
	f, ok := digits(t)
	if !ok || len(t) > 6 {
		return 0, false
	}
	for i := len(t); i < 6; i++ {
		f *= 10
	}
	return f, true
}

// timeMicros parses "[-]hhh:mm:ss[.ffffff]" into signed microseconds.
func timeMicros[T string | []byte](s T) (int64, error) {
	bad := func() (int64, error) { return 0, fmt.Errorf("malformed time %q", string(s)) }
	t := s
	neg := len(t) > 0 && t[0] == '-'
	if neg {
		t = t[1:]
	}
	colon := -1
	for i := 0; i < len(t); i++ {
		if t[i] == ':' {
			colon = i
			break
		}
	}
	if colon < 0 {
		return bad()
	}
	rest := t[colon+1:]
	if len(rest) < 5 || rest[2] != ':' {
		return bad()
	}
	h, ok1 := digits(t[:colon])
	m, ok2 := digits(rest[0:2])
	sec, ok3 := digits(rest[3:5])
	if !ok1 || !ok2 || !ok3 {
		return bad()
	}
	var usec int64
	if len(rest) > 5 {
		if rest[5] != '.' {
			return bad()
		}
		f, ok := fraction(rest[6:])
		if !ok {
			return bad()
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
func dateValue[T string | []byte](c *column, s T, bx *boxer) (any, error) {
	y, mo, d, _, _, _, _, _, err := dateParts(s)
	if err != nil {
		return nil, err
	}
	return c.dateFromParts(y, mo, d, bx), nil
}

// dateFromParts is a DATE as days since the epoch, or the zero value of a zero date.
func (c *column) dateFromParts(y, mo, d int, bx *boxer) any {
	if mo == 0 || d == 0 {
		return c.zeroValue()
	}
	return bx.int(daysFromCivil(y, mo, d))
}

// dateTimeValue converts a DATETIME text into epoch milliseconds or microseconds.
func dateTimeValue[T string | []byte](c *column, s T, o *valueOptions, bx *boxer) (any, error) {
	y, mo, d, h, mi, sec, usec, _, err := dateParts(s)
	if err != nil {
		return nil, err
	}
	return c.dateTimeFromParts(y, mo, d, h, mi, sec, usec, o, bx), nil
}

// dateTimeFromParts is a DATETIME as epoch milliseconds (fsp <= 3, or time.precision.mode
// connect) or microseconds, or the zero value of a zero date.
func (c *column) dateTimeFromParts(y, mo, d, h, mi, sec, usec int, o *valueOptions, bx *boxer) any {
	if mo == 0 || d == 0 {
		return c.zeroValue()
	}
	return bx.int(c.dateTimeNumber(y, mo, d, h, mi, sec, usec, o))
}

// dateTimeNumber is a DATETIME that is not a zero date as epoch milliseconds or microseconds
// (see dateTimeFromParts).
func (c *column) dateTimeNumber(y, mo, d, h, mi, sec, usec int, o *valueOptions) int64 {
	return c.dateTimeFromDays(daysFromCivil(y, mo, d), h, mi, sec, usec, o)
}

// dateTimeFromDays is dateTimeNumber of the date whose day number is days.
func (c *column) dateTimeFromDays(days int64, h, mi, sec, usec int, o *valueOptions) int64 {
	micros := (days*86400+int64(h)*3600+int64(mi)*60+int64(sec))*1_000_000 + int64(usec)
	if o.timeConnect || c.fsp <= 3 {
		return floorDiv(micros, 1000)
	}
	return micros
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
func timestampValue[T string | []byte](c *column, s T, bx *boxer) (any, error) {
	y, mo, d, h, mi, sec, usec, _, err := dateParts(s)
	if err != nil {
		return nil, err
	}
	return c.timestampFromParts(y, mo, d, h, mi, sec, usec, bx), nil
}

// timestampFromParts is a TIMESTAMP in UTC as an ISO-8601 string; a zero one is null in a
// nullable column, else the epoch.
func (c *column) timestampFromParts(y, mo, d, h, mi, sec, usec int, bx *boxer) any {
	if mo == 0 || d == 0 {
		if c.nullable {
			return nil
		}
		y, mo, d, h, mi, sec, usec = 1970, 1, 1, 0, 0, 0, 0
	}
	var buf [32]byte
	b := appendPadded(buf[:0], y, 4)
	b = appendPadded(append(b, '-'), mo, 2)
	b = appendPadded(append(b, '-'), d, 2)
	b = appendPadded(append(b, 'T'), h, 2)
	b = appendPadded(append(b, ':'), mi, 2)
	b = appendPadded(append(b, ':'), sec, 2)
	if c.fsp > 0 {
		var frac [6]byte
		f := appendPadded(frac[:0], usec, 6)
		b = append(append(b, '.'), f[:min(c.fsp, 6)]...)
	}
	return bx.str(bx.string(append(b, 'Z')))
}

// appendPadded appends n (>= 0) in decimal with leading zeros to width digits.
func appendPadded(dst []byte, n, width int) []byte {
	var d [20]byte
	i := len(d)
	for n >= 10 || i > len(d)-width+1 {
		i--
		d[i] = byte('0' + n%10)
		n /= 10
	}
	i--
	d[i] = byte('0' + n)
	return append(dst, d[i:]...)
}

// zeroValue is what a zero date becomes: null in a nullable column, else the epoch.
func (c *column) zeroValue() any {
	if c.nullable {
		return nil
	}
	return int64(0)
}

func timeValue[T string | []byte](s T, o *valueOptions, bx *boxer) (any, error) {
	us, err := timeMicros(s)
	if err != nil {
		return nil, err
	}
	return timeFromMicros(us, o, bx), nil
}

// timeFromMicros is a TIME as microseconds, or milliseconds with time.precision.mode connect.
func timeFromMicros(us int64, o *valueOptions, bx *boxer) any {
	if o.timeConnect {
		return bx.int(floorDiv(us, 1000))
	}
	return bx.int(us)
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

func (c *column) uintValue(v uint64, o *valueOptions, bx *boxer) any {
	if c.kind == kindUint64 && o.bigintPrecise {
		return strconv.FormatUint(v, 10)
	}
	if v > math.MaxInt64 {
		return v
	}
	return bx.int(int64(v))
}

func (c *column) decimalValue(s string, o *valueOptions, bx *boxer) (any, error) {
	if o.decimalDouble {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("malformed decimal %q", s)
		}
		return f, nil
	}
	return bx.str(s), nil
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

// textString converts a text column's value given as a string that the decoder made (it may
// share the event's memory, which is never written again).
func (c *column) textString(x string, bx *boxer) (any, error) {
	if c.dec == nil && utf8.ValidString(x) {
		return bx.str(x), nil
	}
	t, err := c.text([]byte(x))
	return bx.str(t), err
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
func (c *column) binlogValue(v any, o *valueOptions, bx *boxer) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch c.kind {
	case kindInt, kindUint64, kindYear:
		switch x := v.(type) {
		case int8:
			return bx.int(int64(x)), nil
		case int16:
			return bx.int(int64(x)), nil
		case int32:
			return bx.int(int64(x)), nil
		case int64:
			return bx.int(x), nil
		case int:
			return bx.int(int64(x)), nil
		case uint8:
			return bx.int(int64(x)), nil
		case uint16:
			return bx.int(int64(x)), nil
		case uint32:
			return bx.int(int64(x)), nil
		case uint64:
			return c.uintValue(x, o, bx), nil
		}
	case kindDecimal:
		switch x := v.(type) {
		case string:
			return c.decimalValue(x, o, bx)
		case fmt.Stringer:
			return c.decimalValue(x.String(), o, bx)
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
			return dateValue(c, x, bx)
		}
	case kindTime:
		if x, ok := v.(string); ok {
			return timeValue(x, o, bx)
		}
	case kindDateTime:
		if x, ok := v.(string); ok {
			return dateTimeValue(c, x, o, bx)
		}
	case kindTimestamp:
		if x, ok := v.(string); ok {
			return timestampValue(c, x, bx)
		}
	case kindText, kindJSON:
		switch x := v.(type) {
		case string:
			return c.textString(x, bx)
		case []byte:
			t, err := c.text(x)
			return bx.str(t), err
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
				return bx.str(c.values[x-1]), nil
			}
			return "", nil
		}
	case kindSet:
		if x, ok := v.(int64); ok {
			return bx.str(c.setValue(uint64(x))), nil
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

// snapshotValue converts a value of a result set row (text or binary protocol), fetched into a
// cell whose bytes never change.
func (c *column) snapshotValue(fv *cell, o *valueOptions, bx *boxer) (any, error) {
	if fv.Type == gomysql.FieldValueTypeNull {
		return nil, nil
	}
	switch c.kind {
	case kindInt, kindUint64, kindYear:
		switch fv.Type {
		case gomysql.FieldValueTypeSigned:
			return bx.int(fv.AsInt64()), nil
		case gomysql.FieldValueTypeUnsigned:
			return c.uintValue(fv.AsUint64(), o, bx), nil
		}
	case kindDecimal:
		if fv.Type == gomysql.FieldValueTypeString {
			return c.decimalValue(fv.stableString(), o, bx)
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
		return dateValue(c, fv.AsString(), bx)
	case kindTime:
		return timeValue(fv.AsString(), o, bx)
	case kindDateTime:
		return dateTimeValue(c, fv.AsString(), o, bx)
	case kindTimestamp:
		return timestampValue(c, fv.AsString(), bx)
	case kindText, kindJSON, kindEnum, kindSet:
		if fv.Type == gomysql.FieldValueTypeString {
			// the server converted the text to the connection's utf8mb4
			if utf8.Valid(fv.AsString()) {
				return bx.str(fv.stableString()), nil
			}
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
