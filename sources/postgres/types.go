package postgres

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluice-cdc/sluice/connect"

	"github.com/sluice-cdc/sluice/sources/snapshot"
)

// Values arrive in PostgreSQL's text form on both paths: pgoutput sends the text form, and the
// snapshot asks for text results, except for timestamptz columns outside its chunk key, which
// it reads in binary form and decodes to what their text gives (table.decodeBinary). One
// decoder per (type, typmod) turns the text into a value of sluice's data model, so a row
// reads the same from the snapshot and from the stream.
//
// The decoders are chosen through pgx's type map: its codecs classify the built-in types and
// parse the structured text forms (arrays, dates, timestamps, intervals, hstore). Types the
// map does not know are looked up in pg_type: a domain decodes as its base type, an enum as
// its label, an array of them element by element; anything else passes as its text form.
//
// The sessions that produce the text run with DateStyle=ISO, IntervalStyle=postgres,
// TimeZone=UTC, bytea_output=hex and extra_float_digits=1, whatever the server's defaults.

// decodeFunc turns a non-NULL text value into a data-model value.
type decodeFunc func(src []byte) (any, error)

// sessionParams are the run-time parameters of every connection of the source.
var sessionParams = map[string]string{
	"DateStyle":          "ISO, MDY",
	"IntervalStyle":      "postgres",
	"TimeZone":           "UTC",
	"bytea_output":       "hex",
	"extra_float_digits": "1",
	"application_name":   "sluice",
}

// Type OIDs pgx has no constant for.
const (
	oidMoney   = 790
	oidTimetz  = 1266
	oidBit     = 1560
	oidVarbit  = 1562
	oidMacaddr = 829
)

// pgTypeInfo is a row of pg_type.
type pgTypeInfo struct {
	OID      uint32
	Name     string
	Schema   string
	Type     byte // typtype: b base, d domain, e enum, c composite, r range, m multirange, p pseudo
	Base     uint32
	BaseMod  int32
	Elem     uint32
	Category byte
	Delim    byte
}

// typeLookup reads a type's pg_type row.
type typeLookup func(ctx context.Context, oid uint32) (pgTypeInfo, error)

type typeKey struct {
	oid    uint32
	typmod int32
}

// typeDecoders builds and caches decoders. It is used by one goroutine at a time.
type typeDecoders struct {
	m      *pgtype.Map
	set    *settings
	lookup typeLookup
	cache  map[typeKey]decodeFunc
	infos  map[uint32]pgTypeInfo
}

func newTypeDecoders(set *settings, lookup typeLookup) *typeDecoders {
	return &typeDecoders{m: pgtype.NewMap(), set: set, lookup: lookup, cache: map[typeKey]decodeFunc{}, infos: map[uint32]pgTypeInfo{}}
}

// decoder returns the decoder of a column of type oid with modifier typmod (-1 for none).
func (d *typeDecoders) decoder(ctx context.Context, oid uint32, typmod int32) (decodeFunc, error) {
	k := typeKey{oid, typmod}
	if f, ok := d.cache[k]; ok {
		return f, nil
	}
	f, err := d.build(ctx, oid, typmod, 0)
	if err != nil {
		return nil, err
	}
	d.cache[k] = f
	return f, nil
}

func (d *typeDecoders) build(ctx context.Context, oid uint32, typmod int32, depth int) (decodeFunc, error) {
	if depth > 8 {
		return decodeText, nil
	}
	if f := d.builtin(oid, typmod); f != nil {
		return f, nil
	}
	if t, ok := d.m.TypeForOID(oid); ok {
		if ac, ok := t.Codec.(*pgtype.ArrayCodec); ok {
			elem, err := d.build(ctx, ac.ElementType.OID, typmod, depth+1)
			if err != nil {
				return nil, err
			}
			return d.arrayDecoder(oid, elem), nil
		}
		if _, ok := t.Codec.(*pgtype.HstoreCodec); ok {
			return d.hstoreDecoder(oid), nil
		}
		return decodeText, nil
	}
	info, ok := d.infos[oid]
	if !ok {
		if d.lookup == nil {
			return decodeText, nil
		}
		var err error
		if info, err = d.lookup(ctx, oid); err != nil {
			if errors.Is(err, errNoType) {
				// dropped since: its values still arrive as text
				return decodeText, nil
			}
			return nil, fmt.Errorf("look up type %d: %w", oid, err)
		}
		d.infos[oid] = info
	}
	switch {
	case info.Type == 'd' && info.Base != 0:
		mod := typmod
		if mod < 0 {
			mod = info.BaseMod
		}
		return d.build(ctx, info.Base, mod, depth+1)
	case info.Category == 'A' && info.Elem != 0:
		elem, err := d.build(ctx, info.Elem, typmod, depth+1)
		if err != nil {
			return nil, err
		}
		// register the array so pgx's array parser can read it; its elements are scanned as
		// raw text and decoded by elem
		et := &pgtype.Type{Name: "sluice_elem_" + strconv.FormatUint(uint64(info.Elem), 10), OID: info.Elem, Codec: pgtype.TextCodec{}}
		if t, ok := d.m.TypeForOID(info.Elem); ok {
			et = t
		}
		var delim byte
		if ei, ok := d.infos[info.Elem]; ok {
			delim = ei.Delim
		}
		d.m.RegisterType(&pgtype.Type{Name: info.Schema + "." + info.Name, OID: oid, Codec: &pgtype.ArrayCodec{ElementType: et, Delimiter: delim}})
		return d.arrayDecoder(oid, elem), nil
	case info.Name == "hstore" && info.Type == 'b':
		d.m.RegisterType(&pgtype.Type{Name: "hstore", OID: oid, Codec: pgtype.HstoreCodec{}})
		return d.hstoreDecoder(oid), nil
	}
	// enums, citext, ranges, geometric types, ...: the text form
	return decodeText, nil
}

// builtin returns the decoder of a scalar built-in type, or nil.
func (d *typeDecoders) builtin(oid uint32, typmod int32) decodeFunc {
	switch oid {
	case pgtype.BoolOID:
		return decodeBool
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.OIDOID, pgtype.XIDOID, pgtype.CIDOID:
		return decodeInt
	case pgtype.Float4OID, pgtype.Float8OID:
		return decodeFloat
	case pgtype.NumericOID, oidMoney:
		if d.set.decimalMode == "double" {
			if oid == oidMoney {
				return decodeMoneyFloat
			}
			return decodeFloat
		}
		return decodeText
	case pgtype.ByteaOID:
		return d.byteaDecoder()
	case pgtype.DateOID:
		return d.dateDecoder()
	case pgtype.TimeOID:
		return d.timeDecoder(typmod)
	case oidTimetz:
		return decodeTimetz
	case pgtype.TimestampOID:
		return d.timestampDecoder(typmod, false)
	case pgtype.TimestamptzOID:
		return d.timestampDecoder(typmod, true)
	case pgtype.IntervalOID:
		return d.intervalDecoder()
	case oidBit:
		if typmod == 1 {
			return decodeBit1
		}
		return decodeText
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.BPCharOID, pgtype.NameOID, pgtype.QCharOID, pgtype.JSONOID, pgtype.JSONBOID,
		pgtype.UUIDOID, pgtype.InetOID, pgtype.CIDROID, oidMacaddr, pgtype.XMLOID, oidVarbit:
		return decodeText
	}
	return nil
}

func decodeText(src []byte) (any, error) { return string(src), nil }

// Columns whose decoder is decodeText or decodeInt, and timestamptz columns, are decoded in
// place by table.decode, boxing from the source's slab instead of allocating per value.
const (
	fastText = 1 + iota
	fastInt
	fastTimestamptz
)

// fastKind returns fastText or fastInt for those two decoders, fastTimestamptz for the type
// timestamptz (whose decoder's common case appendUTCInstant does), 0 for any other.
func fastKind(dec decodeFunc, oid uint32) byte {
	if oid == pgtype.TimestamptzOID {
		return fastTimestamptz
	}
	switch reflect.ValueOf(dec).Pointer() {
	case reflect.ValueOf(decodeText).Pointer():
		return fastText
	case reflect.ValueOf(decodeInt).Pointer():
		return fastInt
	}
	return 0
}

// appendUTCInstant appends a timestamptz text in the session's UTC ("2024-01-31
// 11:45:30.12+00") as Debezium's ZonedTimestamp ("2024-01-31T11:45:30.12Z"), or reports false
// for any other form (infinity, BC dates, another offset), which the decoder handles.
func appendUTCInstant(dst, src []byte) ([]byte, bool) {
	n := len(src)
	if n < 22 || src[n-3] != '+' || src[n-2] != '0' || src[n-1] != '0' {
		return dst, false
	}
	if _, ok := fastTimestamp(src[:n-3]); !ok {
		return dst, false
	}
	dst = append(dst, src[:10]...)
	dst = append(dst, 'T')
	dst = append(dst, src[11:n-3]...)
	return append(dst, 'Z'), true
}

func decodeBool(src []byte) (any, error) {
	switch string(src) {
	case "t":
		return true, nil
	case "f":
		return false, nil
	}
	return nil, fmt.Errorf("bool %q", src)
}

func decodeBit1(src []byte) (any, error) { return len(src) == 1 && src[0] == '1', nil }

func decodeInt(src []byte) (any, error) {
	n, err := snapshot.ParseInt(src)
	if err != nil {
		return nil, fmt.Errorf("integer %q: %w", src, err)
	}
	return n, nil
}

func decodeFloat(src []byte) (any, error) {
	f, err := strconv.ParseFloat(string(src), 64)
	if err != nil {
		return nil, fmt.Errorf("number %q: %w", src, err)
	}
	return f, nil
}

// decodeMoneyFloat reads money's text form ("$1,234.56", "-$5.00") as a number.
func decodeMoneyFloat(src []byte) (any, error) {
	s := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return -1
	}, string(src))
	return decodeFloat([]byte(s))
}

func (d *typeDecoders) byteaDecoder() decodeFunc {
	mode := d.set.binaryMode
	return func(src []byte) (any, error) {
		if len(src) < 2 || src[0] != '\\' || src[1] != 'x' {
			return nil, fmt.Errorf("bytea: not in hex format (set bytea_output = hex)")
		}
		b := make([]byte, hex.DecodedLen(len(src)-2))
		if _, err := hex.Decode(b, src[2:]); err != nil {
			return nil, fmt.Errorf("bytea: %w", err)
		}
		switch mode {
		case "base64":
			return base64.StdEncoding.EncodeToString(b), nil
		case "base64-url-safe":
			return base64.URLEncoding.EncodeToString(b), nil
		case "hex":
			return hex.EncodeToString(b), nil
		}
		return b, nil
	}
}

// Numeric stand-ins for ±infinity where a temporal value is a number.
const (
	infDays   = math.MaxInt32
	negDays   = math.MinInt32
	infMicros = math.MaxInt64
	negMicros = math.MinInt64
)

func (d *typeDecoders) dateDecoder() decodeFunc {
	plan := d.m.PlanScan(pgtype.DateOID, pgtype.TextFormatCode, &pgtype.Date{})
	iso := d.set.timeMode == "isostring"
	return func(src []byte) (any, error) {
		if days, ok := fastDate(src); ok && !iso {
			return days, nil
		}
		var v pgtype.Date
		if err := plan.Scan(src, &v); err != nil {
			return nil, fmt.Errorf("date %q: %w", src, err)
		}
		switch v.InfinityModifier {
		case pgtype.Infinity:
			if iso {
				return "infinity", nil
			}
			return int64(infDays), nil
		case pgtype.NegativeInfinity:
			if iso {
				return "-infinity", nil
			}
			return int64(negDays), nil
		}
		if iso {
			return v.Time.Format("2006-01-02"), nil
		}
		return floorDiv(v.Time.Unix(), 86400), nil
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// precisionMillis reports whether a time or timestamp column of this typmod is sent in
// milliseconds (Debezium's adaptive mode: precision 0..3).
func precisionMillis(typmod int32) bool { return typmod >= 0 && typmod <= 3 }

func (d *typeDecoders) timeDecoder(typmod int32) decodeFunc {
	plan := d.m.PlanScan(pgtype.TimeOID, pgtype.TextFormatCode, &pgtype.Time{})
	mode := d.set.timeMode
	millis := mode == "connect" || mode == "adaptive" && precisionMillis(typmod)
	return func(src []byte) (any, error) {
		var v pgtype.Time
		if err := plan.Scan(src, &v); err != nil {
			return nil, fmt.Errorf("time %q: %w", src, err)
		}
		switch {
		case mode == "isostring":
			return formatClock(v.Microseconds), nil
		case millis:
			return v.Microseconds / 1000, nil
		}
		return v.Microseconds, nil
	}
}

// formatClock renders microseconds since midnight as HH:MM:SS[.fraction], the fraction
// without trailing zeros.
func formatClock(us int64) string {
	h := us / 3_600_000_000
	m := us / 60_000_000 % 60
	s := us / 1_000_000 % 60
	frac := us % 1_000_000
	b := make([]byte, 0, 15)
	b = append2(b, h)
	b = append(b, ':')
	b = append2(b, m)
	b = append(b, ':')
	b = append2(b, s)
	return string(appendFraction(b, frac))
}

func append2(b []byte, n int64) []byte {
	if n < 10 {
		b = append(b, '0')
	}
	return strconv.AppendInt(b, n, 10)
}

// appendFraction appends .ffffff of micro (0..999999) without trailing zeros; nothing for 0.
func appendFraction(b []byte, micro int64) []byte {
	if micro == 0 {
		return b
	}
	digits := []byte(fmt.Sprintf("%06d", micro))
	for len(digits) > 0 && digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
	}
	b = append(b, '.')
	return append(b, digits...)
}

// decodeTimetz reads "HH:MM:SS[.ffffff]±HH[:MM[:SS]]" and renders it in UTC, as Debezium's
// ZonedTime: "08:15:30.5Z".
func decodeTimetz(src []byte) (any, error) {
	s := string(src)
	i := strings.LastIndexAny(s, "+-")
	if i < 8 {
		return nil, fmt.Errorf("timetz %q: no offset", s)
	}
	clock, err := parseClock(s[:i])
	if err != nil {
		return nil, fmt.Errorf("timetz %q: %w", s, err)
	}
	parts := strings.Split(s[i+1:], ":")
	var off int64
	for k, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || k > 2 {
			return nil, fmt.Errorf("timetz %q: bad offset", s)
		}
		off += n * []int64{3600, 60, 1}[k]
	}
	if s[i] == '-' {
		off = -off
	}
	const day = 86_400_000_000
	us := ((clock-off*1_000_000)%day + day) % day
	return formatClock(us) + "Z", nil
}

func (d *typeDecoders) timestampDecoder(typmod int32, tz bool) decodeFunc {
	mode := d.set.timeMode
	millis := mode == "connect" || mode != "isostring" && precisionMillis(typmod)
	if tz {
		plan := d.m.PlanScan(pgtype.TimestamptzOID, pgtype.TextFormatCode, &pgtype.Timestamptz{})
		return func(src []byte) (any, error) {
			// the session's TimeZone is UTC: "2024-01-31 11:45:30.12+00" needs no parsing
			if b, ok := appendUTCInstant(make([]byte, 0, len(src)), src); ok {
				return unsafe.String(unsafe.SliceData(b), len(b)), nil
			}
			var v pgtype.Timestamptz
			if err := plan.Scan(src, &v); err != nil {
				return nil, fmt.Errorf("timestamptz %q: %w", src, err)
			}
			switch v.InfinityModifier {
			case pgtype.Infinity:
				return "infinity", nil
			case pgtype.NegativeInfinity:
				return "-infinity", nil
			}
			return formatInstant(v.Time), nil
		}
	}
	plan := d.m.PlanScan(pgtype.TimestampOID, pgtype.TextFormatCode, &pgtype.Timestamp{})
	return func(src []byte) (any, error) {
		if us, ok := fastTimestamp(src); ok && mode != "isostring" {
			if millis {
				return floorDiv(us, 1000), nil
			}
			return us, nil
		}
		var v pgtype.Timestamp
		if err := plan.Scan(src, &v); err != nil {
			return nil, fmt.Errorf("timestamp %q: %w", src, err)
		}
		iso := mode == "isostring"
		switch v.InfinityModifier {
		case pgtype.Infinity:
			if iso {
				return "infinity", nil
			}
			return int64(infMicros), nil
		case pgtype.NegativeInfinity:
			if iso {
				return "-infinity", nil
			}
			return int64(negMicros), nil
		}
		switch {
		case iso:
			return formatInstant(v.Time), nil
		case millis:
			return v.Time.UnixMilli(), nil
		}
		return v.Time.UnixMicro(), nil
	}
}

// formatInstant renders t in UTC as ISO-8601 with the fraction's trailing zeros cut and a Z,
// as Debezium's ZonedTimestamp: "2024-01-31T08:15:30.12Z".
func formatInstant(t time.Time) string {
	t = t.UTC()
	b := make([]byte, 0, 32)
	b = t.AppendFormat(b, "2006-01-02T15:04:05")
	b = appendFraction(b, int64(t.Nanosecond()/1000))
	return string(append(b, 'Z'))
}

// microsPerMonth is Debezium's average month: 30.4375 days.
const microsPerMonth = 2_629_800_000_000

func (d *typeDecoders) intervalDecoder() decodeFunc {
	plan := d.m.PlanScan(pgtype.IntervalOID, pgtype.TextFormatCode, &pgtype.Interval{})
	asString := d.set.intervalMode == "string"
	return func(src []byte) (any, error) {
		var v pgtype.Interval
		if err := plan.Scan(src, &v); err != nil {
			return nil, fmt.Errorf("interval %q: %w", src, err)
		}
		if asString {
			return formatInterval(v), nil
		}
		return v.Microseconds + int64(v.Days)*86_400_000_000 + int64(v.Months)*microsPerMonth, nil
	}
}

// formatInterval renders an interval as ISO-8601 with every field: P1Y2M3DT4H5M6.78S.
func formatInterval(v pgtype.Interval) string {
	us := v.Microseconds
	h := us / 3_600_000_000
	us -= h * 3_600_000_000
	m := us / 60_000_000
	us -= m * 60_000_000
	sec := us / 1_000_000
	frac := us % 1_000_000
	secs := strconv.FormatInt(sec, 10)
	if frac != 0 {
		if frac < 0 {
			frac = -frac
			if sec == 0 {
				secs = "-0"
			}
		}
		secs = string(appendFraction([]byte(secs), frac))
	}
	return fmt.Sprintf("P%dY%dM%dDT%dH%dM%sS", v.Months/12, v.Months%12, v.Days, h, m, secs)
}

// arrayDecoder parses an array's text form with pgx (any number of dimensions, NULL
// elements) and decodes each element with elem. Multi-dimensional arrays become nested
// arrays; lower bounds other than 1 are not kept.
func (d *typeDecoders) arrayDecoder(oid uint32, elem decodeFunc) decodeFunc {
	var arr pgtype.Array[*string]
	plan := d.m.PlanScan(oid, pgtype.TextFormatCode, &arr)
	return func(src []byte) (any, error) {
		var a pgtype.Array[*string]
		if err := plan.Scan(src, &a); err != nil {
			return nil, fmt.Errorf("array %q: %w", truncateForError(src), err)
		}
		flat := make([]any, len(a.Elements))
		for i, e := range a.Elements {
			if e == nil {
				continue
			}
			v, err := elem([]byte(*e))
			if err != nil {
				return nil, fmt.Errorf("array element %d: %w", i, err)
			}
			flat[i] = v
		}
		if len(a.Dims) <= 1 {
			return flat, nil
		}
		out, _ := nest(flat, a.Dims)
		return out, nil
	}
}

// nest shapes flat (row-major) into nested arrays of the given dimensions.
func nest(flat []any, dims []pgtype.ArrayDimension) ([]any, []any) {
	if len(dims) == 1 {
		n := int(dims[0].Length)
		return flat[:n], flat[n:]
	}
	out := make([]any, dims[0].Length)
	for i := range out {
		out[i], flat = nest(flat, dims[1:])
	}
	return out, flat
}

func (d *typeDecoders) hstoreDecoder(oid uint32) decodeFunc {
	plan := d.m.PlanScan(oid, pgtype.TextFormatCode, &pgtype.Hstore{})
	asMap := d.set.hstoreMd == "map"
	return func(src []byte) (any, error) {
		var h pgtype.Hstore
		if err := plan.Scan(src, &h); err != nil {
			return nil, fmt.Errorf("hstore: %w", err)
		}
		keys := make([]string, 0, len(h))
		for k := range h {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		row := make(connect.Row, len(keys))
		for i, k := range keys {
			var v any
			if p := h[k]; p != nil {
				v = *p
			}
			row[i] = connect.Field{Name: k, Value: v}
		}
		if asMap {
			return row, nil
		}
		b, err := connect.MarshalJSONValue(row)
		if err != nil {
			return nil, err
		}
		return string(b), nil
	}
}

func truncateForError(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "..."
	}
	return string(b)
}

// parseClock reads HH:MM:SS[.ffffff] as microseconds since midnight.
func parseClock(s string) (int64, error) {
	if len(s) < 8 || s[2] != ':' || s[5] != ':' {
		return 0, errors.New("bad time of day")
	}
	var us int64
	for k, unit := range []int64{3_600_000_000, 60_000_000, 1_000_000} {
		n, err := strconv.ParseInt(s[k*3:k*3+2], 10, 64)
		if err != nil {
			return 0, errors.New("bad time of day")
		}
		us += n * unit
	}
	if len(s) > 8 {
		if s[8] != '.' || len(s) > 15 || len(s) == 9 {
			return 0, errors.New("bad fraction of a second")
		}
		frac := s[9:] + strings.Repeat("0", 6-len(s[9:]))
		n, err := strconv.ParseInt(frac, 10, 64)
		if err != nil {
			return 0, errors.New("bad fraction of a second")
		}
		us += n
	}
	return us, nil
}

var errNoType = errors.New("type not found")

// fastDate reads the common date text "YYYY-MM-DD" (years 1..9999 AD) as days since the Unix
// epoch; anything else (BC, wider years, infinity) is left to pgx.
func fastDate(b []byte) (int64, bool) {
	if len(b) != 10 || b[4] != '-' || b[7] != '-' {
		return 0, false
	}
	y, ok1 := digits(b[0:4])
	m, ok2 := digits(b[5:7])
	d, ok3 := digits(b[8:10])
	if !ok1 || !ok2 || !ok3 || y == 0 || m < 1 || m > 12 || d < 1 || d > 31 {
		return 0, false
	}
	return daysFromCivil(y, m, d), true
}

// fastTimestamp reads the common timestamp text "YYYY-MM-DD HH:MM:SS[.ffffff]" as
// microseconds since the Unix epoch.
func fastTimestamp(b []byte) (int64, bool) {
	if len(b) < 19 || b[10] != ' ' || b[13] != ':' || b[16] != ':' {
		return 0, false
	}
	days, ok := fastDate(b[:10])
	if !ok {
		return 0, false
	}
	h, ok1 := digits(b[11:13])
	mi, ok2 := digits(b[14:16])
	sec, ok3 := digits(b[17:19])
	if !ok1 || !ok2 || !ok3 || h > 24 || mi > 59 || sec > 60 {
		return 0, false
	}
	var frac int64
	if len(b) > 19 {
		if b[19] != '.' || len(b) == 20 || len(b) > 26 {
			return 0, false
		}
		f, ok := digits(b[20:])
		if !ok {
			return 0, false
		}
		for i := len(b) - 20; i < 6; i++ {
			f *= 10
		}
		frac = f
	}
	return days*86_400_000_000 + (h*3600+mi*60+sec)*1_000_000 + frac, true
}

func digits(b []byte) (int64, bool) {
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// daysFromCivil is the number of days from 1970-01-01 to the proleptic Gregorian date y-m-d.
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// A binary timestamptz is microseconds since 2000-01-01 00:00:00 UTC; the two extremes of
// int64 are -infinity and infinity.
const (
	pgEpochMicros   = 946_684_800_000_000 // 2000-01-01 in Unix microseconds
	microsPerDay    = 86_400_000_000
	pgInfinity      = math.MaxInt64
	pgMinusInfinity = math.MinInt64
)

// appendUTCMicros appends a binary timestamptz of years 1 to 9999 as appendUTCInstant renders
// the server's text of it ("2024-01-31T11:45:30.12Z": fraction digits up to the last non-zero
// one), or reports false for any other.
func appendUTCMicros(dst []byte, us int64) ([]byte, bool) {
	if us == pgInfinity || us == pgMinusInfinity {
		return dst, false
	}
	y, mo, d, h, mi, s, f := civilMicros(us)
	if y < 1 || y > 9999 {
		return dst, false
	}
	dst = appendDateTime(dst, y, mo, d, h, mi, s, f, 'T')
	return append(dst, 'Z'), true
}

// appendTimestamptzText appends what the server sends as the text of a binary timestamptz in
// the source's sessions (DateStyle ISO, TimeZone UTC): "2024-01-31 11:45:30.12+00",
// "0044-03-15 12:00:00+00 BC", "10000-01-01 00:00:00+00", "infinity".
func appendTimestamptzText(dst []byte, us int64) []byte {
	switch us {
	case pgInfinity:
		return append(dst, "infinity"...)
	case pgMinusInfinity:
		return append(dst, "-infinity"...)
	}
	y, mo, d, h, mi, s, f := civilMicros(us)
	bc := y < 1
	if bc {
		y = 1 - y // the year before 1 AD is 1 BC
	}
	dst = appendDateTime(dst, y, mo, d, h, mi, s, f, ' ')
	dst = append(dst, "+00"...)
	if bc {
		dst = append(dst, " BC"...)
	}
	return dst
}

// civilMicros splits a binary timestamptz into the proleptic Gregorian calendar (year 0 is
// 1 BC) and the time of day.
func civilMicros(us int64) (y, mo, d, h, mi, s, f int64) {
	days, rem := us/microsPerDay, us%microsPerDay
	if rem < 0 {
		days, rem = days-1, rem+microsPerDay
	}
	days += pgEpochMicros / microsPerDay // days since 1970-01-01
	y, mo, d = civilFromDays(days)
	secs := rem / 1_000_000
	return y, mo, d, secs / 3600, secs / 60 % 60, secs % 60, rem % 1_000_000
}

// civilFromDays is the inverse of daysFromCivil.
func civilFromDays(z int64) (y, m, d int64) {
	z += 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	if mp < 10 {
		m = mp + 3
	} else {
		m = mp - 9
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}

// appendDateTime appends "YYYY-MM-DD<sep>HH:MM:SS[.ffffff]", the year with at least four
// digits and the fraction without its trailing zeros (as the server writes them).
func appendDateTime(dst []byte, y, mo, d, h, mi, s, f int64, sep byte) []byte {
	if y < 10000 { // four digits, zero-padded, without strconv's copy
		dst = append(dst, byte('0'+y/1000), byte('0'+y/100%10), byte('0'+y/10%10), byte('0'+y%10))
	} else {
		dst = strconv.AppendInt(dst, y, 10)
	}
	dst = append(dst, '-', byte('0'+mo/10), byte('0'+mo%10), '-', byte('0'+d/10), byte('0'+d%10), sep,
		byte('0'+h/10), byte('0'+h%10), ':', byte('0'+mi/10), byte('0'+mi%10), ':', byte('0'+s/10), byte('0'+s%10))
	if f == 0 {
		return dst
	}
	var frac [6]byte
	for i := 5; i >= 0; i-- {
		frac[i] = byte('0' + f%10)
		f /= 10
	}
	n := 6
	for frac[n-1] == '0' {
		n--
	}
	dst = append(dst, '.')
	return append(dst, frac[:n]...)
}
