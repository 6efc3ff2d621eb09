package transforms

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/connect"
)

// side is the part of a record a Kafka Connect "$Key" / "$Value" transform works on.
type side bool

const (
	onValue side = false
	onKey   side = true
)

func (s side) get(r connect.Record) any {
	if s == onKey {
		return r.Key
	}
	return r.Value
}

func (s side) set(r connect.Record, v any) connect.Record {
	if s == onKey {
		r.Key = v
	} else {
		r.Value = v
	}
	return r
}

func (s side) String() string {
	if s == onKey {
		return "key"
	}
	return "value"
}

// keyValuePlugins makes the two plugins of a Kafka Connect transform that has $Key and $Value
// variants: <name> works on the value (class <java>$Value) and <name>_key on the key
// (class <java>$Key).
func keyValuePlugins(name, java, doc string, def connect.ConfigDef, validate func(connect.Config) []connect.FieldError,
	build func(cfg connect.Config, s side, name string) (connect.Transform, error)) []connect.Plugin {
	mk := func(s side) connect.Plugin {
		n, suffix := name, "$Value"
		if s == onKey {
			n, suffix = name+"_key", "$Key"
		}
		return connect.Plugin{
			Name:     n,
			Aliases:  []string{java + suffix},
			Kind:     connect.KindTransform,
			Doc:      strings.ReplaceAll(doc, "{side}", s.String()),
			Config:   def,
			Validate: validate,
			NewTransform: func(cfg connect.Config) (connect.Transform, error) {
				return build(cfg, s, n)
			},
		}
	}
	return []connect.Plugin{mk(onValue), mk(onKey)}
}

func replaceNullKey() connect.ConfigKey {
	return connect.ConfigKey{Name: "replace.null.with.default", Type: connect.TypeBoolean, Default: "true", HasDefault: true, Ignored: true,
		Doc: "Accepted for compatibility; sluice records carry no schema defaults, so nulls stay null."}
}

// ---- replace_field

func replaceFieldPlugins() []connect.Plugin {
	def := connect.ConfigDef{
		{Name: "exclude", Type: connect.TypeList, HasDefault: true, Doc: "Fields to remove."},
		{Name: "include", Type: connect.TypeList, HasDefault: true, Doc: "Fields to keep; when set, all others are removed."},
		{Name: "renames", Type: connect.TypeList, HasDefault: true, Check: checkList(func(it string) error {
			_, err := renamePairs([]string{it})
			return err
		}), Doc: "Renames as old:new pairs, e.g. foo:bar,abc:xyz."},
		{Name: "blacklist", Type: connect.TypeList, HasDefault: true, Importance: connect.Low, Doc: "Old name of exclude."},
		{Name: "whitelist", Type: connect.TypeList, HasDefault: true, Importance: connect.Low, Doc: "Old name of include."},
		replaceNullKey(),
	}
	validate := func(cfg connect.Config) []connect.FieldError {
		var errs []connect.FieldError
		for _, p := range [][2]string{{"exclude", "blacklist"}, {"include", "whitelist"}} {
			if cfg.Has(p[0]) && cfg.Has(p[1]) {
				errs = append(errs, connect.FieldError{Key: p[1], Message: fmt.Sprintf("is the old name of %s; set only one of them", p[0])})
			}
		}
		return errs
	}
	doc := "Removes, keeps and renames fields of the record's {side} (Kafka Connect's ReplaceField). " +
		"On the value it also updates the list of undelivered columns that sinks read."
	return keyValuePlugins("replace_field", "org.apache.kafka.connect.transforms.ReplaceField", doc, def, validate,
		func(cfg connect.Config, s side, name string) (connect.Transform, error) {
			t := &replaceField{side: s, name: name, exclude: cfg.List("exclude"), include: cfg.List("include")}
			if cfg.Has("blacklist") {
				t.exclude = cfg.List("blacklist")
			}
			if cfg.Has("whitelist") {
				t.include = cfg.List("whitelist")
			}
			var err error
			if t.renames, err = renamePairs(cfg.List("renames")); err != nil {
				return nil, err
			}
			return t, nil
		})
}

type replaceField struct {
	side    side
	name    string
	exclude []string
	include []string
	renames map[string]string
}

func (t *replaceField) keeps(name string) bool {
	return !hasName(t.exclude, name) && (len(t.include) == 0 || hasName(t.include, name))
}

func (t *replaceField) renamed(name string) string {
	if to, ok := t.renames[name]; ok {
		return to
	}
	return name
}

func (t *replaceField) Apply(r connect.Record) (connect.Record, bool, error) {
	r, keep, _, err := t.applyOwned(r, false)
	return r, keep, err
}

func (t *replaceField) applyOwned(r connect.Record, owned bool) (connect.Record, bool, bool, error) {
	v := t.side.get(r)
	if v == nil {
		return r, true, owned, nil
	}
	row, err := rowOf(v, t.name)
	if err != nil {
		return r, false, false, err
	}
	if owned && t.side == onValue {
		// In place: kept fields move down, the names change.
		n := 0
		for _, f := range row {
			if t.keeps(f.Name) {
				row[n] = connect.Field{Name: t.renamed(f.Name), Value: f.Value}
				n++
			}
		}
		clear(row[n:])
		r = setOwned(r, row[:n])
	} else {
		out := make(connect.Row, 0, len(row))
		for _, f := range row {
			if t.keeps(f.Name) {
				out = append(out, connect.Field{Name: t.renamed(f.Name), Value: f.Value})
			}
		}
		r = t.side.set(r, out)
		owned = t.side == onValue
	}
	if t.side == onValue {
		if cols, ok := unchangedColumns(r.Headers); ok {
			var kept []string
			for _, c := range cols {
				if t.keeps(c) {
					kept = append(kept, t.renamed(c))
				}
			}
			if strings.Join(kept, ",") != strings.Join(cols, ",") {
				r.Headers = r.Headers.Set(connect.HeaderUnchanged, []byte(strings.Join(kept, ",")))
			}
		}
	}
	return r, true, owned, nil
}

// ---- mask_field

func maskFieldPlugins() []connect.Plugin {
	def := connect.ConfigDef{
		{Name: "fields", Type: connect.TypeList, Required: true, Doc: "Fields to mask."},
		{Name: "replacement", Type: connect.TypeString, HasDefault: true,
			Doc: "The mask, converted to each field's type (numbers parsed, booleans true/false); when " +
				"unset, each value becomes its type's empty value: 0, false, \"\", empty bytes, {} or []."},
		replaceNullKey(),
	}
	doc := "Replaces the listed fields of the record's {side} by a mask (Kafka Connect's MaskField). " +
		"Null values stay null; a listed field that is absent is added as null, as Kafka Connect does."
	return keyValuePlugins("mask_field", "org.apache.kafka.connect.transforms.MaskField", doc, def, nil,
		func(cfg connect.Config, s side, name string) (connect.Transform, error) {
			t := &maskField{side: s, name: name, fields: cfg.List("fields")}
			if cfg.Has("replacement") {
				rep := cfg.Raw()["replacement"]
				t.replacement = &rep
			}
			return t, nil
		})
}

type maskField struct {
	side        side
	name        string
	fields      []string
	replacement *string
}

func (t *maskField) Apply(r connect.Record) (connect.Record, bool, error) {
	v := t.side.get(r)
	if v == nil {
		return r, true, nil
	}
	row, err := rowOf(v, t.name)
	if err != nil {
		return r, false, err
	}
	out := make(connect.Row, len(row), len(row)+len(t.fields))
	copy(out, row)
	for _, name := range t.fields {
		old, _ := row.Get(name)
		m, err := t.mask(old)
		if err != nil {
			return r, false, fmt.Errorf("%s: field %s: %w", t.name, name, err)
		}
		out = out.Set(name, m)
	}
	return t.side.set(r, out), true, nil
}

func (t *maskField) mask(v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	if t.replacement == nil {
		switch v.(type) {
		case bool:
			return false, nil
		case int64:
			return int64(0), nil
		case uint64:
			return uint64(0), nil
		case float64:
			return float64(0), nil
		case string:
			return "", nil
		case []byte:
			return []byte{}, nil
		case connect.Row:
			return connect.Row{}, nil
		case []any:
			return []any{}, nil
		}
		return nil, fmt.Errorf("cannot mask %s", typeName(v))
	}
	rep := *t.replacement
	switch v.(type) {
	case string:
		return rep, nil
	case int64:
		n, err := strconv.ParseInt(strings.TrimSpace(rep), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("replacement %q is not an integer", rep)
		}
		return n, nil
	case uint64:
		n, err := strconv.ParseUint(strings.TrimSpace(rep), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("replacement %q is not an unsigned integer", rep)
		}
		return n, nil
	case float64:
		f, err := strconv.ParseFloat(strings.TrimSpace(rep), 64)
		if err != nil {
			return nil, fmt.Errorf("replacement %q is not a number", rep)
		}
		return f, nil
	case bool:
		return strings.EqualFold(strings.TrimSpace(rep), "true"), nil
	}
	return nil, fmt.Errorf("cannot mask %s with a replacement", typeName(v))
}

// ---- insert_field

func insertFieldPlugins() []connect.Plugin {
	fieldDoc := func(what string) string {
		return "Field to put the record's " + what + " in; a trailing ? (the default) makes it optional, a trailing ! required."
	}
	def := connect.ConfigDef{
		{Name: "topic.field", Type: connect.TypeString, HasDefault: true, Doc: fieldDoc("topic")},
		{Name: "partition.field", Type: connect.TypeString, HasDefault: true, Doc: fieldDoc("partition (absent before the record is in the log)")},
		{Name: "offset.field", Type: connect.TypeString, HasDefault: true, Doc: fieldDoc("offset (sink side only)")},
		{Name: "timestamp.field", Type: connect.TypeString, HasDefault: true, Doc: fieldDoc("timestamp, as epoch milliseconds")},
		{Name: "static.field", Type: connect.TypeString, HasDefault: true, Doc: "Field to put static.value in."},
		{Name: "static.value", Type: connect.TypeString, HasDefault: true, Doc: "The static value (a string)."},
		replaceNullKey(),
	}
	validate := func(cfg connect.Config) []connect.FieldError {
		if cfg.Has("static.value") && cfg.String("static.field") == "" {
			return []connect.FieldError{{Key: "static.field", Message: "is required when static.value is set"}}
		}
		return nil
	}
	doc := "Adds fields to the record's {side}: its topic, partition, offset, timestamp or a static " +
		"value (Kafka Connect's InsertField). Tombstones pass unchanged."
	return keyValuePlugins("insert_field", "org.apache.kafka.connect.transforms.InsertField", doc, def, validate,
		func(cfg connect.Config, s side, name string) (connect.Transform, error) {
			t := &insertField{side: s, name: name}
			t.topic = parseInsertSpec(cfg.String("topic.field"))
			t.partition = parseInsertSpec(cfg.String("partition.field"))
			t.offset = parseInsertSpec(cfg.String("offset.field"))
			t.timestamp = parseInsertSpec(cfg.String("timestamp.field"))
			t.static = parseInsertSpec(cfg.String("static.field"))
			t.staticValue = cfg.String("static.value")
			return t, nil
		})
}

type insertSpec struct {
	name     string
	required bool
}

func parseInsertSpec(s string) insertSpec {
	switch {
	case s == "":
		return insertSpec{}
	case strings.HasSuffix(s, "!"):
		return insertSpec{name: s[:len(s)-1], required: true}
	case strings.HasSuffix(s, "?"):
		return insertSpec{name: s[:len(s)-1]}
	}
	return insertSpec{name: s}
}

type insertField struct {
	side                                        side
	name                                        string
	topic, partition, offset, timestamp, static insertSpec
	staticValue                                 any // a string, boxed once
}

func (t *insertField) Apply(r connect.Record) (connect.Record, bool, error) {
	r, keep, _, err := t.applyOwned(r, false)
	return r, keep, err
}

func (t *insertField) applyOwned(r connect.Record, owned bool) (connect.Record, bool, bool, error) {
	v := t.side.get(r)
	if v == nil {
		return r, true, owned, nil
	}
	row, err := rowOf(v, t.name)
	if err != nil {
		return r, false, false, err
	}
	// Required fields the record lacks fail before the row changes.
	switch {
	case t.partition.required && r.Partition < 0:
		return r, false, false, fmt.Errorf("%s: partition.field %s is required but the record has no partition yet", t.name, t.partition.name)
	case t.offset.required && r.Offset < 0:
		return r, false, false, fmt.Errorf("%s: offset.field %s is required but the record has no offset (offsets exist on the sink side only)", t.name, t.offset.name)
	case t.timestamp.required && r.Timestamp.IsZero():
		return r, false, false, fmt.Errorf("%s: timestamp.field %s is required but the record has no timestamp", t.name, t.timestamp.name)
	}
	inPlace := owned && t.side == onValue
	out := row // an owned row gets the fields in place (appended within its capacity)
	if !inPlace {
		out = make(connect.Row, len(row), len(row)+5)
		copy(out, row)
	}
	if t.topic.name != "" {
		out = out.Set(t.topic.name, r.Topic)
	}
	if t.partition.name != "" {
		if r.Partition >= 0 {
			out = out.Set(t.partition.name, int64(r.Partition))
		}
	}
	if t.offset.name != "" {
		if r.Offset >= 0 {
			out = out.Set(t.offset.name, r.Offset)
		}
	}
	if t.timestamp.name != "" {
		if !r.Timestamp.IsZero() {
			out = out.Set(t.timestamp.name, r.Timestamp.UnixMilli())
		} else {
			out = out.Set(t.timestamp.name, nil)
		}
	}
	if t.static.name != "" {
		out = out.Set(t.static.name, t.staticValue)
	}
	if inPlace {
		return setOwned(r, out), true, true, nil
	}
	return t.side.set(r, out), true, t.side == onValue, nil
}

// ---- value_to_key

func valueToKeyPlugin() connect.Plugin {
	return connect.Plugin{
		Name:    "value_to_key",
		Aliases: []string{"org.apache.kafka.connect.transforms.ValueToKey"},
		Kind:    connect.KindTransform,
		Doc: "Replaces the key by an object of the listed value fields, in the listed order " +
			"(Kafka Connect's ValueToKey). An absent field is null. Tombstones pass unchanged.",
		Config: connect.ConfigDef{
			{Name: "fields", Type: connect.TypeList, Required: true, Doc: "Value fields that form the key."},
			replaceNullKey(),
		},
		NewTransform: func(cfg connect.Config) (connect.Transform, error) {
			return &valueToKey{fields: cfg.List("fields")}, nil
		},
	}
}

type valueToKey struct{ fields []string }

func (t *valueToKey) Apply(r connect.Record) (connect.Record, bool, error) {
	if r.Value == nil {
		return r, true, nil
	}
	row, err := rowOf(r.Value, "value_to_key")
	if err != nil {
		return r, false, err
	}
	key := make(connect.Row, len(t.fields))
	for i, f := range t.fields {
		v, _ := row.Get(f)
		key[i] = connect.Field{Name: f, Value: v}
	}
	r.Key = key
	return r, true, nil
}

// ---- extract_field

func extractFieldPlugins() []connect.Plugin {
	def := connect.ConfigDef{
		{Name: "field", Type: connect.TypeString, Required: true,
			Doc: "The field to extract; with field.syntax.version=V2 a dotted path into nested objects (quote names containing dots with backticks)."},
		{Name: "field.syntax.version", Type: connect.TypeString, Default: "V1", HasDefault: true, Enum: []string{"V1", "V2"},
			Doc: "V1: field is a plain name. V2: field is a dotted path."},
		replaceNullKey(),
	}
	doc := "Replaces the record's {side} by one of its fields (Kafka Connect's ExtractField). An " +
		"absent field, or a null {side}, gives null."
	return keyValuePlugins("extract_field", "org.apache.kafka.connect.transforms.ExtractField", doc, def,
		func(cfg connect.Config) []connect.FieldError {
			if _, err := fieldPath(cfg.String("field"), cfg.Enum("field.syntax.version")); err != nil {
				return []connect.FieldError{{Key: "field", Message: err.Error()}}
			}
			return nil
		},
		func(cfg connect.Config, s side, name string) (connect.Transform, error) {
			path, err := fieldPath(cfg.String("field"), cfg.Enum("field.syntax.version"))
			if err != nil {
				return nil, err
			}
			return &extractField{side: s, name: name, path: path}, nil
		})
}

// fieldPath splits a field reference per field.syntax.version.
func fieldPath(field, version string) ([]string, error) {
	if version != "V2" {
		return []string{field}, nil
	}
	var out []string
	var cur strings.Builder
	quoted := false
	for i := 0; i < len(field); i++ {
		c := field[i]
		switch {
		case c == '`':
			quoted = !quoted
		case c == '.' && !quoted:
			out = append(out, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	if quoted {
		return nil, fmt.Errorf("unbalanced backtick in %q", field)
	}
	out = append(out, cur.String())
	for _, p := range out {
		if p == "" {
			return nil, fmt.Errorf("empty path element in %q", field)
		}
	}
	return out, nil
}

type extractField struct {
	side side
	name string
	path []string
}

func (t *extractField) Apply(r connect.Record) (connect.Record, bool, error) {
	v := t.side.get(r)
	for _, p := range t.path {
		if v == nil {
			break
		}
		row, err := rowOf(v, t.name)
		if err != nil {
			return r, false, err
		}
		v, _ = row.Get(p)
	}
	return t.side.set(r, v), true, nil
}

// ---- hoist_field

func hoistFieldPlugins() []connect.Plugin {
	def := connect.ConfigDef{
		{Name: "field", Type: connect.TypeString, Required: true, Doc: "The name of the single field of the new object."},
	}
	doc := "Wraps the record's {side} in an object with one field (Kafka Connect's HoistField); a " +
		"null {side} becomes {\"<field>\": null}, as in Kafka Connect."
	return keyValuePlugins("hoist_field", "org.apache.kafka.connect.transforms.HoistField", doc, def, nil,
		func(cfg connect.Config, s side, name string) (connect.Transform, error) {
			return &hoistField{side: s, field: cfg.String("field")}, nil
		})
}

type hoistField struct {
	side  side
	field string
}

func (t *hoistField) Apply(r connect.Record) (connect.Record, bool, error) {
	return t.side.set(r, connect.Row{{Name: t.field, Value: t.side.get(r)}}), true, nil
}

// ---- flatten

func flattenPlugins() []connect.Plugin {
	def := connect.ConfigDef{
		{Name: "delimiter", Type: connect.TypeString, Default: ".", HasDefault: true,
			Doc: "Joins the names of nested fields, e.g. address.city."},
	}
	doc := "Flattens nested objects of the record's {side} into top-level fields named by their path " +
		"(Kafka Connect's Flatten). Arrays and nulls are kept as they are; a null {side} passes unchanged."
	return keyValuePlugins("flatten", "org.apache.kafka.connect.transforms.Flatten", doc, def, nil,
		func(cfg connect.Config, s side, name string) (connect.Transform, error) {
			return &flatten{side: s, name: name, delim: cfg.Raw()["delimiter"], hasDelim: cfg.Has("delimiter")}, nil
		})
}

type flatten struct {
	side     side
	name     string
	delim    string
	hasDelim bool
}

func (t *flatten) Apply(r connect.Record) (connect.Record, bool, error) {
	v := t.side.get(r)
	if v == nil {
		return r, true, nil
	}
	row, err := rowOf(v, t.name)
	if err != nil {
		return r, false, err
	}
	delim := "."
	if t.hasDelim {
		delim = t.delim
	}
	out := make(connect.Row, 0, len(row))
	var walk func(prefix string, row connect.Row)
	walk = func(prefix string, row connect.Row) {
		for _, f := range row {
			name := f.Name
			if prefix != "" {
				name = prefix + delim + f.Name
			}
			if nested, ok := f.Value.(connect.Row); ok {
				walk(name, nested)
				continue
			}
			out = append(out, connect.Field{Name: name, Value: f.Value})
		}
	}
	walk("", row)
	return t.side.set(r, out), true, nil
}
