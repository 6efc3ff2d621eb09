package transforms

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/connect"
)

// sluiceHeaderPrefix starts the headers sluice itself uses (connect.HeaderVersion,
// connect.HeaderUnchanged); no transform may add, drop or overwrite them.
const sluiceHeaderPrefix = "__sluice."

// typeName names a data-model value's type in error messages.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case int64, int, uint64:
		return "integer"
	case float64:
		return "number"
	case string:
		return "string"
	case []byte:
		return "bytes"
	case connect.Row:
		return "object"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}

// headerBytes renders a data-model value as a header value, the way Kafka Connect's
// SimpleHeaderConverter renders it: text as is, numbers and booleans as their text,
// objects and arrays as JSON, null as a null header.
func headerBytes(v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		return []byte(x), nil
	case []byte:
		return x, nil
	case bool:
		return strconv.AppendBool(nil, x), nil
	case int64:
		return strconv.AppendInt(nil, x, 10), nil
	case int:
		return strconv.AppendInt(nil, int64(x), 10), nil
	case uint64:
		return strconv.AppendUint(nil, x, 10), nil
	default:
		return connect.MarshalJSONValue(v)
	}
}

// textOf renders a scalar as text for topic names and keys built from fields.
func textOf(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case int64:
		return strconv.FormatInt(x, 10), true
	case uint64:
		return strconv.FormatUint(x, 10), true
	case bool:
		return strconv.FormatBool(x), true
	case float64:
		return javaDouble(x), true
	}
	return "", false
}

// javaDouble formats f as Java's Double.toString does, since Kafka Connect's Cast and the
// records Debezium users compare against were produced by it: "1.0", "0.001", "1.0E7".
func javaDouble(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case f == 0:
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	abs := math.Abs(f)
	if abs >= 1e-3 && abs < 1e7 {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return s
	}
	s := strconv.FormatFloat(f, 'E', -1, 64) // 1.2345E+07
	mant, exp, _ := strings.Cut(s, "E")
	if !strings.Contains(mant, ".") {
		mant += ".0"
	}
	exp = strings.TrimPrefix(exp, "+")
	neg := strings.HasPrefix(exp, "-")
	exp = strings.TrimLeft(strings.TrimPrefix(exp, "-"), "0")
	if neg {
		exp = "-" + exp
	}
	return mant + "E" + exp
}

// fullMatch compiles a Java-style pattern that must match a whole string, as Java's
// Matcher.matches() does (Kafka Connect's RegexRouter and TopicNameMatches use it).
func fullMatch(pattern string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + pattern + `)$`)
}

// checkRegex is a ConfigKey.Check for regular expressions.
func checkRegex(v string) error {
	if _, err := fullMatch(v); err != nil {
		return fmt.Errorf("must be a valid regular expression: %v", unwrapRegexErr(err))
	}
	return nil
}

func unwrapRegexErr(err error) string {
	s := err.Error()
	return strings.TrimPrefix(s, "error parsing regexp: ")
}

// javaReplacement converts a java.util.regex replacement string ("$1", "${name}", "\$")
// into a template for regexp.Expand. It checks group references against re.
func javaReplacement(re *regexp.Regexp, repl string) (string, error) {
	var b strings.Builder
	groups := re.NumSubexp()
	for i := 0; i < len(repl); i++ {
		c := repl[i]
		switch c {
		case '\\':
			i++
			if i == len(repl) {
				return "", fmt.Errorf("character to be escaped is missing")
			}
			if repl[i] == '$' {
				b.WriteString("$$")
			} else {
				b.WriteByte(repl[i])
			}
		case '$':
			i++
			if i == len(repl) {
				return "", fmt.Errorf("illegal group reference: group index is missing")
			}
			if repl[i] == '{' {
				end := strings.IndexByte(repl[i:], '}')
				if end < 0 {
					return "", fmt.Errorf("named capturing group is missing trailing '}'")
				}
				name := repl[i+1 : i+end]
				if re.SubexpIndex(name) < 0 {
					return "", fmt.Errorf("no group with name {%s}", name)
				}
				b.WriteString("${" + name + "}")
				i += end
				continue
			}
			if repl[i] < '0' || repl[i] > '9' {
				return "", fmt.Errorf("illegal group reference")
			}
			// Java takes the first digit, then more digits while the number stays a valid group.
			n := int(repl[i] - '0')
			if n > groups {
				return "", fmt.Errorf("no group %d", n)
			}
			for i+1 < len(repl) && repl[i+1] >= '0' && repl[i+1] <= '9' {
				next := n*10 + int(repl[i+1]-'0')
				if next > groups {
					break
				}
				n = next
				i++
			}
			b.WriteString("${" + strconv.Itoa(n) + "}")
		default:
			if c == '$' {
				b.WriteString("$$")
			} else {
				b.WriteByte(c)
			}
		}
	}
	return b.String(), nil
}

// replacer applies a Java-style full-match regex replacement to a topic name.
type replacer struct {
	re       *regexp.Regexp
	template string
}

func newReplacer(pattern, replacement string) (*replacer, error) {
	re, err := fullMatch(pattern)
	if err != nil {
		return nil, fmt.Errorf("invalid regular expression: %v", unwrapRegexErr(err))
	}
	t, err := javaReplacement(re, replacement)
	if err != nil {
		return nil, fmt.Errorf("invalid replacement %q: %v", replacement, err)
	}
	return &replacer{re: re, template: t}, nil
}

// replace returns the replacement when s matches as a whole, and ok=false otherwise.
func (r *replacer) replace(s string) (string, bool) {
	m := r.re.FindStringSubmatchIndex(s)
	if m == nil {
		return s, false
	}
	return string(r.re.ExpandString(nil, r.template, s, m)), true
}

// checkReplacement returns a Validate step checking a replacement against its pattern.
func checkReplacement(cfg connect.Config, patternKey, replacementKey string) []connect.FieldError {
	if _, err := newReplacer(cfg.String(patternKey), cfg.String(replacementKey)); err != nil {
		return []connect.FieldError{{Key: replacementKey, Message: err.Error()}}
	}
	return nil
}

// rowOf returns v as a Row for transforms that need an object, with Kafka Connect's error
// wording for everything else.
func rowOf(v any, purpose string) (connect.Row, error) {
	r, ok := v.(connect.Row)
	if !ok {
		return nil, fmt.Errorf("%s needs an object, got %s", purpose, typeName(v))
	}
	return r, nil
}

// renamePairs parses "old:new" list items.
func renamePairs(items []string) (map[string]string, error) {
	out := make(map[string]string, len(items))
	for _, it := range items {
		from, to, ok := strings.Cut(it, ":")
		from, to = strings.TrimSpace(from), strings.TrimSpace(to)
		if !ok || from == "" || to == "" {
			return nil, fmt.Errorf("must be a list of old:new pairs (got %q)", it)
		}
		out[from] = to
	}
	return out, nil
}

// checkList returns a Check that validates each item of a list value.
func checkList(each func(item string) error) func(string) error {
	return func(v string) error {
		for _, it := range connect.SplitList(v) {
			if err := each(it); err != nil {
				return err
			}
		}
		return nil
	}
}

// notSluiceHeader rejects header names that sluice reserves.
func notSluiceHeader(name string) error {
	if strings.HasPrefix(name, sluiceHeaderPrefix) {
		return fmt.Errorf("header names starting with %q are reserved for sluice (got %q)", sluiceHeaderPrefix, name)
	}
	return nil
}

// unchangedColumns returns the HeaderUnchanged column list of hs and whether it is present.
func unchangedColumns(hs connect.Headers) ([]string, bool) {
	v, ok := hs.Get(connect.HeaderUnchanged)
	if !ok {
		return nil, false
	}
	return connect.SplitList(string(v)), true
}
