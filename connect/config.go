package connect

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Type is a configuration value's type, with Kafka Connect's names (ConfigDef.Type).
type Type int

const (
	TypeString Type = iota
	TypeInt
	TypeLong
	TypeDouble
	TypeBoolean
	TypeList
	TypePassword
	TypeClass
)

// String returns Kafka Connect's name of the type, as the REST API shows it.
func (t Type) String() string {
	switch t {
	case TypeString:
		return "STRING"
	case TypeInt:
		return "INT"
	case TypeLong:
		return "LONG"
	case TypeDouble:
		return "DOUBLE"
	case TypeBoolean:
		return "BOOLEAN"
	case TypeList:
		return "LIST"
	case TypePassword:
		return "PASSWORD"
	case TypeClass:
		return "CLASS"
	}
	return fmt.Sprintf("Type(%d)", int(t))
}

// Importance is Kafka Connect's importance of a key, shown by the REST API.
type Importance string

const (
	High   Importance = "HIGH"
	Medium Importance = "MEDIUM"
	Low    Importance = "LOW"
)

// ConfigKey declares one configuration key of a plugin. One declaration serves parsing,
// validation, the REST config/validate endpoint, the plugin listing and secret redaction.
type ConfigKey struct {
	// Name is the key, e.g. "database.port". With Prefix set, Name ends in "." and the key
	// stands for every key that starts with it (e.g. "column.mask.with."); the plugin's
	// Validate checks those.
	Name   string
	Prefix bool
	Type   Type
	// Default is the value used when the key is absent, as text ("" with HasDefault for an
	// explicit empty default).
	Default    string
	HasDefault bool
	Required   bool
	// Secret keys (and every TypePassword key) are never shown or logged: they render as "****".
	Secret bool
	// Enum, when set, lists the allowed values (compared case-insensitively, as Debezium does).
	Enum []string
	// Check validates a present value after type checking; its message completes
	// "<key>: " (e.g. "must be 1..65535 (got 0)").
	Check func(value string) error
	Doc   string
	Group string
	// Importance defaults to Medium.
	Importance Importance
	// Ignored keys are accepted so that existing Debezium / Kafka Connect configs load
	// unchanged, but have no effect in sluice; Doc says why.
	Ignored bool
}

// IsSecret reports whether the key's value must never be shown.
func (k ConfigKey) IsSecret() bool { return k.Secret || k.Type == TypePassword }

// ConfigDef is the set of keys a plugin accepts.
type ConfigDef []ConfigKey

// Lookup returns the declaration that governs name (exact or by prefix).
func (d ConfigDef) Lookup(name string) (ConfigKey, bool) {
	for _, k := range d {
		if !k.Prefix && k.Name == name {
			return k, true
		}
	}
	for _, k := range d {
		if k.Prefix && strings.HasPrefix(name, k.Name) {
			return k, true
		}
	}
	return ConfigKey{}, false
}

// IsSecret reports whether the value of name must never be shown.
func (d ConfigDef) IsSecret(name string) bool {
	k, ok := d.Lookup(name)
	return ok && k.IsSecret()
}

// Merge returns d followed by the keys of other that d does not declare.
func (d ConfigDef) Merge(other ConfigDef) ConfigDef {
	out := append(ConfigDef(nil), d...)
	for _, k := range other {
		dup := false
		for _, have := range d {
			if have.Name == k.Name && have.Prefix == k.Prefix {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, k)
		}
	}
	return out
}

// FieldError is one problem with one configuration key.
type FieldError struct {
	Key     string
	Message string
}

func (e FieldError) Error() string { return e.Key + ": " + e.Message }

// Redacted is how secret values are shown.
const Redacted = "****"

// Config is a validated configuration: raw text values plus the declaration that types them.
// Accessors return the value or its default; they panic on a key the definition does not
// declare with that type, which is a programming error caught by the plugin's own tests.
type Config struct {
	def ConfigDef
	raw map[string]string
}

// NewConfig wraps raw values without validating them (for tests and for already validated
// maps). Prefer ConfigDef.Parse.
func NewConfig(def ConfigDef, raw map[string]string) Config {
	return Config{def: def, raw: raw}
}

// Parse validates raw against d and reports every problem at once, sorted by key: unknown keys
// (with a "did you mean" when a declared key is close), missing required keys, values of the
// wrong type or outside their range or enum. Values are the text form of each setting, as in
// Kafka Connect's JSON configs.
func (d ConfigDef) Parse(raw map[string]string) (Config, []FieldError) {
	var errs []FieldError
	for name, v := range raw {
		k, ok := d.Lookup(name)
		if !ok {
			errs = append(errs, FieldError{Key: name, Message: d.unknownMessage(name)})
			continue
		}
		if err := k.validate(v); err != nil {
			errs = append(errs, FieldError{Key: name, Message: err.Error()})
		}
	}
	for _, k := range d {
		if k.Required && !k.Prefix {
			if v, ok := raw[k.Name]; !ok || strings.TrimSpace(v) == "" {
				errs = append(errs, FieldError{Key: k.Name, Message: "is required" + docHint(k)})
			}
		}
	}
	sort.Slice(errs, func(i, j int) bool {
		if errs[i].Key != errs[j].Key {
			return errs[i].Key < errs[j].Key
		}
		return errs[i].Message < errs[j].Message
	})
	return Config{def: d, raw: raw}, errs
}

func docHint(k ConfigKey) string {
	if k.Doc == "" {
		return ""
	}
	doc := k.Doc
	if i := strings.IndexAny(doc, ".\n"); i > 0 {
		doc = doc[:i]
	}
	return " (" + strings.ToLower(doc[:1]) + doc[1:] + ")"
}

func (d ConfigDef) unknownMessage(name string) string {
	best, bestDist := "", math.MaxInt
	for _, k := range d {
		if k.Prefix || k.Ignored {
			continue
		}
		if dist := editDistance(name, k.Name); dist < bestDist {
			best, bestDist = k.Name, dist
		}
	}
	if best != "" && bestDist <= max(2, len(name)/4) {
		return fmt.Sprintf("unknown key; did you mean %q?", best)
	}
	return "unknown key"
}

// SuggestKey returns the candidate closest to name if it is close enough to be a likely typo.
func SuggestKey(name string, candidates []string) (string, bool) {
	best, bestDist := "", math.MaxInt
	for _, c := range candidates {
		if dist := editDistance(name, c); dist < bestDist {
			best, bestDist = c, dist
		}
	}
	return best, best != "" && bestDist <= max(2, len(name)/4)
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func (k ConfigKey) validate(v string) error {
	blank := strings.TrimSpace(v) == ""
	if blank && k.Required {
		return nil // reported once, as "is required"
	}
	if err := checkType(k.Type, v, k.IsSecret()); err != nil {
		return err
	}
	if blank {
		return nil
	}
	if len(k.Enum) > 0 {
		ok := false
		for _, e := range k.Enum {
			if strings.EqualFold(e, strings.TrimSpace(v)) {
				ok = true
				break
			}
		}
		if !ok {
			return fmt.Errorf("must be one of %s (got %q)", strings.Join(k.Enum, ", "), v)
		}
	}
	if k.Check != nil {
		return k.Check(v)
	}
	return nil
}

func checkType(t Type, v string, secret bool) error {
	got := func() string {
		if secret {
			return Redacted
		}
		return v
	}
	s := strings.TrimSpace(v)
	switch t {
	case TypeInt:
		if _, err := strconv.ParseInt(s, 10, 32); err != nil {
			return fmt.Errorf("must be an integer (got %q)", got())
		}
	case TypeLong:
		if _, err := strconv.ParseInt(s, 10, 64); err != nil {
			return fmt.Errorf("must be an integer (got %q)", got())
		}
	case TypeDouble:
		if _, err := strconv.ParseFloat(s, 64); err != nil {
			return fmt.Errorf("must be a number (got %q)", got())
		}
	case TypeBoolean:
		if !strings.EqualFold(s, "true") && !strings.EqualFold(s, "false") {
			return fmt.Errorf("must be true or false (got %q)", got())
		}
	}
	return nil
}

// InRange returns a Check that accepts integers in [lo, hi], with the message
// "must be lo..hi (got v)".
func InRange(lo, hi int64) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("must be %d..%d (got %s)", lo, hi, v)
		}
		return nil
	}
}

// AtLeast returns a Check that accepts integers >= lo.
func AtLeast(lo int64) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < lo {
			return fmt.Errorf("must be at least %d (got %s)", lo, v)
		}
		return nil
	}
}

// Def returns the definition c was parsed with.
func (c Config) Def() ConfigDef { return c.def }

// Has reports whether key was set explicitly.
func (c Config) Has(key string) bool {
	_, ok := c.raw[key]
	return ok
}

// Raw returns the explicitly set values. Callers must not modify the map.
func (c Config) Raw() map[string]string { return c.raw }

// WithPrefix returns the explicitly set keys that start with prefix, with prefix removed.
func (c Config) WithPrefix(prefix string) map[string]string {
	out := map[string]string{}
	for k, v := range c.raw {
		if strings.HasPrefix(k, prefix) {
			out[strings.TrimPrefix(k, prefix)] = v
		}
	}
	return out
}

// Redacted returns the explicitly set values with every secret value replaced by "****".
func (c Config) Redacted() map[string]string {
	out := make(map[string]string, len(c.raw))
	for k, v := range c.raw {
		if c.def.IsSecret(k) {
			v = Redacted
		}
		out[k] = v
	}
	return out
}

func (c Config) text(key string, want ...Type) string {
	k, ok := c.def.Lookup(key)
	if !ok {
		panic(fmt.Sprintf("connect: config key %q is not declared", key))
	}
	if len(want) > 0 {
		match := false
		for _, t := range want {
			if k.Type == t {
				match = true
			}
		}
		if !match {
			panic(fmt.Sprintf("connect: config key %q is %v, not %v", key, k.Type, want))
		}
	}
	if v, ok := c.raw[key]; ok {
		return strings.TrimSpace(v)
	}
	return k.Default
}

// String returns a string, password or class value.
func (c Config) String(key string) string {
	return c.text(key, TypeString, TypePassword, TypeClass)
}

// Int returns an INT or LONG value (0 when absent without default).
func (c Config) Int(key string) int64 {
	s := c.text(key, TypeInt, TypeLong)
	if s == "" {
		return 0
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// Float returns a DOUBLE value.
func (c Config) Float(key string) float64 {
	s := c.text(key, TypeDouble)
	if s == "" {
		return 0
	}
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// Bool returns a BOOLEAN value.
func (c Config) Bool(key string) bool {
	return strings.EqualFold(c.text(key, TypeBoolean), "true")
}

// Millis returns an INT or LONG value counted in milliseconds as a duration.
func (c Config) Millis(key string) time.Duration {
	return time.Duration(c.Int(key)) * time.Millisecond
}

// List returns a LIST value: comma-separated, each item trimmed, empty items dropped.
func (c Config) List(key string) []string {
	return SplitList(c.text(key, TypeList))
}

// Enum returns a value of a key with Enum, in the declared spelling.
func (c Config) Enum(key string) string {
	v := c.text(key)
	k, _ := c.def.Lookup(key)
	for _, e := range k.Enum {
		if strings.EqualFold(e, v) {
			return e
		}
	}
	return v
}

// SplitList splits a Kafka Connect list value: comma-separated, items trimmed, empty dropped.
func SplitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	out := parts[:0]
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
