package transforms

import (
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/connect"
)

var castTypes = []string{"int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string"}

func castPlugins() []connect.Plugin {
	def := connect.ConfigDef{
		{Name: "spec", Type: connect.TypeList, Required: true, Check: checkList(func(it string) error {
			_, _, err := parseCastItem(it)
			return err
		}), Doc: "field:type pairs, or a single type to cast the whole " +
			"key or value. Types: int8, int16, int32, int64, float32, float64, boolean, string."},
		replaceNullKey(),
	}
	validate := func(cfg connect.Config) []connect.FieldError {
		items := cfg.List("spec")
		whole := 0
		for _, it := range items {
			if f, _, _ := parseCastItem(it); f == "" {
				whole++
			}
		}
		if whole > 0 && len(items) > 1 {
			return []connect.FieldError{{Key: "spec", Message: "a whole-value cast must be the only item"}}
		}
		return nil
	}
	doc := "Casts fields of the record's {side}, or the whole {side}, to another type (Kafka Connect's " +
		"Cast, with Java's conversions: integers narrow by wrapping, floats to integers truncate, " +
		"strings parse, numbers to boolean are != 0, bytes to string are base64). Nulls stay null; a " +
		"listed field that is absent is added as null, as Kafka Connect does."
	return keyValuePlugins("cast", "org.apache.kafka.connect.transforms.Cast", doc, def, validate,
		func(cfg connect.Config, s side, name string) (connect.Transform, error) {
			t := &cast{side: s, name: name}
			for _, it := range cfg.List("spec") {
				f, typ, err := parseCastItem(it)
				if err != nil {
					return nil, err
				}
				if f == "" {
					t.whole = typ
				} else {
					t.fields = append(t.fields, castField{f, typ})
				}
			}
			return t, nil
		})
}

func parseCastItem(it string) (field, typ string, err error) {
	f, t, ok := strings.Cut(it, ":")
	if !ok {
		t, f = f, ""
	}
	f, t = strings.TrimSpace(f), strings.ToLower(strings.TrimSpace(t))
	if ok && f == "" {
		return "", "", fmt.Errorf("item %q: empty field name", it)
	}
	if !hasName(castTypes, t) {
		return "", "", fmt.Errorf("item %q: unknown type %q (types: %s)", it, t, strings.Join(castTypes, ", "))
	}
	return f, t, nil
}

type castField struct{ field, typ string }

type cast struct {
	side   side
	name   string
	whole  string
	fields []castField
}

func (t *cast) Apply(r connect.Record) (connect.Record, bool, error) {
	v := t.side.get(r)
	if v == nil {
		return r, true, nil
	}
	if t.whole != "" {
		out, err := castValue(v, t.whole)
		if err != nil {
			return r, false, fmt.Errorf("%s: %w", t.name, err)
		}
		return t.side.set(r, out), true, nil
	}
	row, err := rowOf(v, t.name)
	if err != nil {
		return r, false, err
	}
	out := make(connect.Row, len(row), len(row)+len(t.fields))
	copy(out, row)
	for _, c := range t.fields {
		old, _ := row.Get(c.field)
		nv, err := castValue(old, c.typ)
		if err != nil {
			return r, false, fmt.Errorf("%s: field %s: %w", t.name, c.field, err)
		}
		out = out.Set(c.field, nv)
	}
	return t.side.set(r, out), true, nil
}

// castValue converts v as Kafka Connect's Cast does.
func castValue(v any, typ string) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch typ {
	case "int8", "int16", "int32", "int64":
		bits := map[string]int{"int8": 8, "int16": 16, "int32": 32, "int64": 64}[typ]
		var n int64
		switch x := v.(type) {
		case int64:
			n = x
		case uint64:
			n = int64(x)
		case float64:
			n = saturate(x)
		case bool:
			if x {
				n = 1
			}
		case string:
			p, err := strconv.ParseInt(strings.TrimSpace(x), 10, bits)
			if err != nil {
				return nil, fmt.Errorf("cannot cast %q to %s", x, typ)
			}
			return p, nil
		default:
			return nil, fmt.Errorf("cannot cast %s to %s", typeName(v), typ)
		}
		return wrapInt(n, bits), nil
	case "float32", "float64":
		var f float64
		switch x := v.(type) {
		case int64:
			f = float64(x)
		case uint64:
			f = float64(x)
		case float64:
			f = x
		case bool:
			if x {
				f = 1
			}
		case string:
			p, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
			if err != nil {
				return nil, fmt.Errorf("cannot cast %q to %s", x, typ)
			}
			f = p
		default:
			return nil, fmt.Errorf("cannot cast %s to %s", typeName(v), typ)
		}
		if typ == "float32" {
			f = float64(float32(f))
		}
		return f, nil
	case "boolean":
		switch x := v.(type) {
		case int64:
			return x != 0, nil
		case uint64:
			return x != 0, nil
		case float64:
			return saturate(x) != 0, nil
		case bool:
			return x, nil
		case string:
			return strings.EqualFold(strings.TrimSpace(x), "true"), nil
		}
		return nil, fmt.Errorf("cannot cast %s to boolean", typeName(v))
	case "string":
		switch x := v.(type) {
		case []byte:
			return base64.StdEncoding.EncodeToString(x), nil
		case connect.Row, []any:
			return nil, fmt.Errorf("cannot cast %s to string", typeName(v))
		}
		s, _ := textOf(v)
		return s, nil
	}
	return nil, fmt.Errorf("unknown type %s", typ)
}

// saturate converts a float to int64 as Java's (long) cast does: truncation toward zero,
// clamped to the range, NaN as 0.
func saturate(f float64) int64 {
	switch {
	case math.IsNaN(f):
		return 0
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f <= math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}

func wrapInt(n int64, bits int) int64 {
	switch bits {
	case 8:
		return int64(int8(n))
	case 16:
		return int64(int16(n))
	case 32:
		return int64(int32(n))
	}
	return n
}

// ---- timestamp_converter

var timestampTargets = []string{"string", "unix", "Date", "Time", "Timestamp"}

func timestampConverterPlugins() []connect.Plugin {
	def := connect.ConfigDef{
		{Name: "target.type", Type: connect.TypeString, Required: true, Enum: timestampTargets,
			Doc: "string (formatted with format, in UTC), unix (epoch in unix.precision units), Timestamp " +
				"(epoch milliseconds), Date (days since the epoch) or Time (milliseconds since midnight UTC): " +
				"the JSON forms of Kafka Connect's logical types."},
		{Name: "field", Type: connect.TypeString, HasDefault: true,
			Doc: "The field to convert; empty converts the whole key or value."},
		{Name: "format", Type: connect.TypeString, HasDefault: true, Check: func(v string) error {
			_, err := javaTimeLayout(v)
			return err
		}, Doc: "A java.text.SimpleDateFormat pattern, e.g. yyyy-MM-dd'T'HH:mm:ss.SSSXXX; required to parse or produce strings."},
		{Name: "unix.precision", Type: connect.TypeString, Default: "milliseconds", HasDefault: true,
			Enum: []string{"seconds", "milliseconds", "microseconds", "nanoseconds"},
			Doc:  "The unit of integer timestamps, read and written."},
		replaceNullKey(),
	}
	validate := func(cfg connect.Config) []connect.FieldError {
		if cfg.Enum("target.type") == "string" && cfg.String("format") == "" {
			return []connect.FieldError{{Key: "format", Message: "is required when target.type is string"}}
		}
		return nil
	}
	doc := "Converts a timestamp in the record's {side} between strings, integers and Kafka " +
		"Connect's Date, Time and Timestamp forms (Kafka Connect's TimestampConverter). Integers are " +
		"read as epoch times in unix.precision, strings parsed with format, in UTC."
	return keyValuePlugins("timestamp_converter", "org.apache.kafka.connect.transforms.TimestampConverter", doc, def, validate,
		func(cfg connect.Config, s side, name string) (connect.Transform, error) {
			t := &timestampConverter{side: s, name: name, field: cfg.String("field"), target: cfg.Enum("target.type")}
			if f := cfg.Raw()["format"]; f != "" {
				layout, err := javaTimeLayout(f)
				if err != nil {
					return nil, err
				}
				t.layout = layout
			}
			t.unit = map[string]time.Duration{"seconds": time.Second, "milliseconds": time.Millisecond,
				"microseconds": time.Microsecond, "nanoseconds": time.Nanosecond}[cfg.Enum("unix.precision")]
			return t, nil
		})
}

type timestampConverter struct {
	side   side
	name   string
	field  string
	target string
	layout string
	unit   time.Duration
}

func (t *timestampConverter) Apply(r connect.Record) (connect.Record, bool, error) {
	v := t.side.get(r)
	if t.field == "" {
		out, err := t.convert(v)
		if err != nil {
			return r, false, fmt.Errorf("%s: %w", t.name, err)
		}
		return t.side.set(r, out), true, nil
	}
	if v == nil {
		return r, true, nil
	}
	row, err := rowOf(v, t.name)
	if err != nil {
		return r, false, err
	}
	old, _ := row.Get(t.field)
	nv, err := t.convert(old)
	if err != nil {
		return r, false, fmt.Errorf("%s: field %s: %w", t.name, t.field, err)
	}
	out := make(connect.Row, len(row), len(row)+1)
	copy(out, row)
	return t.side.set(r, out.Set(t.field, nv)), true, nil
}

func (t *timestampConverter) convert(v any) (any, error) {
	var ts time.Time
	switch x := v.(type) {
	case nil:
		return nil, nil
	case int64:
		ts = fromUnit(x, t.unit)
	case uint64:
		if x > math.MaxInt64 {
			return nil, fmt.Errorf("timestamp %d is out of range", x)
		}
		ts = fromUnit(int64(x), t.unit)
	case string:
		if t.layout == "" {
			return nil, fmt.Errorf("cannot parse the string %q without format", x)
		}
		p, err := time.ParseInLocation(t.layout, x, time.UTC)
		if err != nil {
			return nil, fmt.Errorf("cannot parse %q with format %s", x, t.layout)
		}
		ts = p
	default:
		return nil, fmt.Errorf("cannot convert %s to a timestamp", typeName(v))
	}
	ts = ts.UTC()
	switch t.target {
	case "string":
		return ts.Format(t.layout), nil
	case "unix":
		return toUnit(ts, t.unit), nil
	case "Date":
		return floorDiv(ts.UnixMilli(), 86400000), nil
	case "Time":
		ms := ts.UnixMilli() % 86400000
		if ms < 0 {
			ms += 86400000
		}
		return ms, nil
	default:
		return ts.UnixMilli(), nil
	}
}

func fromUnit(n int64, unit time.Duration) time.Time {
	switch unit {
	case time.Second:
		return time.Unix(n, 0)
	case time.Millisecond:
		return time.UnixMilli(n)
	case time.Microsecond:
		return time.UnixMicro(n)
	}
	return time.Unix(0, n)
}

func toUnit(t time.Time, unit time.Duration) int64 {
	switch unit {
	case time.Second:
		return t.Unix()
	case time.Millisecond:
		return t.UnixMilli()
	case time.Microsecond:
		return t.UnixMicro()
	}
	return t.UnixNano()
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// javaTimeLayout converts a java.text.SimpleDateFormat pattern into a Go time layout.
func javaTimeLayout(p string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(p); {
		c := p[i]
		if c == '\'' {
			j := i + 1
			if j < len(p) && p[j] == '\'' {
				b.WriteByte('\'')
				i += 2
				continue
			}
			for j < len(p) && p[j] != '\'' {
				j++
			}
			if j == len(p) {
				return "", fmt.Errorf("unterminated quote in format %q", p)
			}
			lit := p[i+1 : j]
			if strings.ContainsAny(lit, "0123456789") || containsLayoutWord(lit) {
				return "", fmt.Errorf("quoted text %q in format %q cannot be represented", lit, p)
			}
			b.WriteString(lit)
			i = j + 1
			continue
		}
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			if c >= '0' && c <= '9' {
				return "", fmt.Errorf("digits in format %q cannot be represented", p)
			}
			b.WriteByte(c)
			i++
			continue
		}
		n := 1
		for i+n < len(p) && p[i+n] == c {
			n++
		}
		i += n
		var s string
		switch c {
		case 'y':
			s = map[bool]string{true: "06", false: "2006"}[n == 2]
		case 'M':
			s = [...]string{"1", "01", "Jan", "January"}[min(n, 4)-1]
		case 'd':
			s = map[bool]string{true: "2", false: "02"}[n == 1]
		case 'H':
			s = "15"
		case 'h':
			s = map[bool]string{true: "3", false: "03"}[n == 1]
		case 'm':
			s = map[bool]string{true: "4", false: "04"}[n == 1]
		case 's':
			s = map[bool]string{true: "5", false: "05"}[n == 1]
		case 'S':
			s = strings.Repeat("0", n)
			if str := b.String(); !strings.HasSuffix(str, ".") && !strings.HasSuffix(str, ",") {
				return "", fmt.Errorf("fractional seconds (S) in format %q must follow a '.' or ','", p)
			}
		case 'a':
			s = "PM"
		case 'E':
			s = map[bool]string{true: "Monday", false: "Mon"}[n >= 4]
		case 'D':
			s = "002"
		case 'z':
			s = "MST"
		case 'Z':
			s = "-0700"
		case 'X':
			s = [...]string{"Z07", "Z0700", "Z07:00"}[min(n, 3)-1]
		default:
			return "", fmt.Errorf("pattern letter %q in format %q is not supported", string(c), p)
		}
		b.WriteString(s)
	}
	return b.String(), nil
}

// containsLayoutWord reports whether literal text would be read as a Go layout element.
func containsLayoutWord(s string) bool {
	for _, w := range []string{"Jan", "Mon", "MST", "PM", "pm"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}
