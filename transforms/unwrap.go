package transforms

import (
	"fmt"
	"strings"

	"github.com/sluice-cdc/sluice/connect"
)

// Delete handling modes of unwrap (Debezium's delete.tombstone.handling.mode).
const (
	modeDrop                 = "drop"
	modeTombstone            = "tombstone"
	modeRewrite              = "rewrite"
	modeRewriteWithTombstone = "rewrite-with-tombstone"
	modeDeleteToTombstone    = "delete-to-tombstone"
)

// DeletedField is the field that unwrap's rewrite modes add: "true" on a rewritten delete,
// "false" on every other row (strings, as Debezium writes them).
const DeletedField = "__deleted"

// The __deleted values, boxed once so that adding them does not allocate.
var deletedTrue, deletedFalse any = "true", "false"

func unwrapPlugin() connect.Plugin {
	return connect.Plugin{
		Name:    "unwrap",
		Aliases: []string{"io.debezium.transforms.ExtractNewRecordState"},
		Kind:    connect.KindTransform,
		Doc: "Replaces a change event by its row image (after; before for a rewritten delete), " +
			"Debezium's event flattening. Values that are not change events pass unchanged.",
		Config: connect.ConfigDef{
			{Name: "delete.tombstone.handling.mode", Type: connect.TypeString, Default: modeTombstone, HasDefault: true,
				Enum: []string{modeDrop, modeTombstone, modeRewrite, modeRewriteWithTombstone, modeDeleteToTombstone},
				Doc: "What happens to delete events and tombstones. drop: both are dropped. tombstone: a delete " +
					"becomes a tombstone (null value), the source's tombstone is dropped. rewrite: a delete becomes " +
					"its before row with __deleted=\"true\", every other row gets __deleted=\"false\", tombstones " +
					"are dropped. rewrite-with-tombstone: as rewrite, and tombstones are kept. delete-to-tombstone: " +
					"as tombstone."},
			{Name: "drop.tombstones", Type: connect.TypeBoolean, Default: "true", HasDefault: true, Importance: connect.Low,
				Doc: "Deprecated by Debezium: used only when delete.tombstone.handling.mode is not set and " +
					"delete.handling.mode or drop.tombstones is. Drops the source's tombstones."},
			{Name: "delete.handling.mode", Type: connect.TypeString, Default: "drop", HasDefault: true, Importance: connect.Low,
				Enum: []string{"drop", "none", "rewrite"},
				Doc: "Deprecated by Debezium: used only when delete.tombstone.handling.mode is not set. drop: " +
					"drop deletes; none: a delete becomes a tombstone; rewrite: as in delete.tombstone.handling.mode."},
			{Name: "add.fields", Type: connect.TypeList, HasDefault: true,
				Doc: "Change event fields to add to the row, e.g. op,table,source.ts_ms,ts_ms. op and ts_ms come " +
					"from the envelope, transaction fields (id, total_order, data_collection_order) from " +
					"transaction, any other plain name from source; struct.field names one explicitly. " +
					"Named <prefix><field> or <prefix><struct>_<field>; field:name renames to <prefix><name>. " +
					"A field absent from the event is added as null."},
			{Name: "add.fields.prefix", Type: connect.TypeString, Default: "__", HasDefault: true,
				Doc: "Prefix of the added fields' names."},
			{Name: "add.headers", Type: connect.TypeList, HasDefault: true,
				Doc: "Change event fields to add as headers, named like add.fields. A field absent from the " +
					"event adds no header; a tombstone gets only the op header (\"d\")."},
			{Name: "add.headers.prefix", Type: connect.TypeString, Default: "__", HasDefault: true,
				Doc: "Prefix of the added headers' names."},
			{Name: "route.by.field", Type: connect.TypeString, HasDefault: true,
				Doc: "A row field whose value becomes the topic (the after row, or the before row of a delete). " +
					"A null value keeps the topic."},
			{Name: "drop.fields.header.name", Type: connect.TypeString, HasDefault: true,
				Doc: "A header listing (comma-separated, or a JSON array) fields to remove from the row."},
			{Name: "drop.fields.from.key", Type: connect.TypeBoolean, Default: "false", HasDefault: true,
				Doc: "Also remove the fields listed in drop.fields.header.name from the key."},
			{Name: "drop.fields.keep.schema.compatible", Type: connect.TypeBoolean, Default: "true", HasDefault: true, Ignored: true,
				Doc: "Accepted for compatibility; sluice records carry no schema, so listed fields are always removed."},
			{Name: "replace.null.with.default", Type: connect.TypeBoolean, Default: "true", HasDefault: true, Ignored: true,
				Doc: "Accepted for compatibility; sluice records carry no schema defaults, so nulls stay null."},
		},
		Validate: func(cfg connect.Config) []connect.FieldError {
			var errs []connect.FieldError
			for _, key := range []string{"add.fields", "add.headers"} {
				for _, f := range cfg.List(key) {
					if _, err := parseFieldRef("", f); err != nil {
						errs = append(errs, connect.FieldError{Key: key, Message: err.Error()})
					}
				}
			}
			for _, f := range cfg.List("add.headers") {
				ref, _ := parseFieldRef(cfg.String("add.headers.prefix"), f)
				if err := notSluiceHeader(ref.name); err != nil {
					errs = append(errs, connect.FieldError{Key: "add.headers", Message: err.Error()})
				}
			}
			return errs
		},
		NewTransform: func(cfg connect.Config) (connect.Transform, error) { return newUnwrap(cfg) },
	}
}

// fieldRef is one add.fields / add.headers item.
type fieldRef struct {
	struct_ string // "" for the envelope itself
	field   string
	name    string // output name, with prefix
}

func parseFieldRef(prefix, item string) (fieldRef, error) {
	spec, rename, renamed := strings.Cut(item, ":")
	if renamed && (rename == "" || strings.Contains(rename, ":")) {
		return fieldRef{}, fmt.Errorf("field %q: want field or field:new_name", item)
	}
	var ref fieldRef
	parts := strings.Split(spec, ".")
	switch len(parts) {
	case 1:
		ref.field = parts[0]
		switch ref.field {
		case connect.FieldOp, connect.FieldTsMs, "ts_us", "ts_ns":
		case "id", "total_order", "data_collection_order":
			ref.struct_ = "transaction"
		default:
			ref.struct_ = connect.FieldSource
		}
		ref.name = prefix + ref.field
	case 2:
		ref.struct_, ref.field = parts[0], parts[1]
		ref.name = prefix + ref.struct_ + "_" + ref.field
	default:
		return fieldRef{}, fmt.Errorf("field %q: want field, struct.field or field:new_name", item)
	}
	if ref.field == "" || (len(parts) == 2 && ref.struct_ == "") {
		return fieldRef{}, fmt.Errorf("field %q: empty name", item)
	}
	if renamed {
		ref.name = prefix + rename
	}
	return ref, nil
}

// get reads the referenced field from an envelope row.
func (f fieldRef) get(env connect.Row) (any, bool) {
	if f.struct_ == "" {
		return env.Get(f.field)
	}
	s, _ := env.Get(f.struct_)
	row, ok := s.(connect.Row)
	if !ok {
		return nil, false
	}
	return row.Get(f.field)
}

type unwrap struct {
	mode          string
	legacy        bool // drop.tombstones / delete.handling.mode semantics
	dropTombstone bool
	legacyDelete  string
	fields        []fieldRef
	headers       []fieldRef
	routeBy       string
	dropHeader    string
	dropFromKey   bool
	rewrite       bool
}

func newUnwrap(cfg connect.Config) (*unwrap, error) {
	u := &unwrap{
		mode:        cfg.Enum("delete.tombstone.handling.mode"),
		routeBy:     cfg.String("route.by.field"),
		dropHeader:  cfg.String("drop.fields.header.name"),
		dropFromKey: cfg.Bool("drop.fields.from.key"),
	}
	if !cfg.Has("delete.tombstone.handling.mode") && (cfg.Has("drop.tombstones") || cfg.Has("delete.handling.mode")) {
		u.legacy = true
		u.dropTombstone = cfg.Bool("drop.tombstones")
		u.legacyDelete = cfg.Enum("delete.handling.mode")
		u.rewrite = u.legacyDelete == "rewrite"
	} else {
		u.rewrite = u.mode == modeRewrite || u.mode == modeRewriteWithTombstone
	}
	for _, f := range cfg.List("add.fields") {
		ref, err := parseFieldRef(cfg.String("add.fields.prefix"), f)
		if err != nil {
			return nil, err
		}
		u.fields = append(u.fields, ref)
	}
	for _, f := range cfg.List("add.headers") {
		ref, err := parseFieldRef(cfg.String("add.headers.prefix"), f)
		if err != nil {
			return nil, err
		}
		u.headers = append(u.headers, ref)
	}
	return u, nil
}

// Apply implements connect.Transform.
func (u *unwrap) Apply(r connect.Record) (connect.Record, bool, error) {
	r, keep, _, err := u.applyOwned(r, false)
	return r, keep, err
}

// applyOwned reports the flattened row as owned when unwrap built it (fields were added and
// none dropped by header); the row then has room for a few more fields.
func (u *unwrap) applyOwned(r connect.Record, _ bool) (connect.Record, bool, bool, error) {
	in := r.Value
	r, keep, err := u.apply(r)
	built := err == nil && keep && (len(u.fields) > 0 || u.rewrite) && u.dropHeader == "" &&
		rowBox(r.Value) != nil && !sameBox(r.Value, in) // not a record passed on as it was
	return r, keep, built, err
}

func (u *unwrap) apply(r connect.Record) (connect.Record, bool, error) {
	if r.Value == nil {
		return u.tombstone(r)
	}
	env, ok := r.Value.(connect.Row)
	if !ok || env.Index(connect.FieldOp) < 0 {
		return r, true, nil // not a change event (heartbeat, already flat): unchanged
	}
	ev, err := parseEnvelope(env)
	if err != nil {
		return r, false, fmt.Errorf("unwrap: %w", err)
	}
	if len(u.headers) > 0 {
		hs, err := u.addHeaders(r.Headers, env)
		if err != nil {
			return r, false, err
		}
		r.Headers = hs
	}
	switch ev.Op {
	case connect.OpTruncate:
		return r, false, nil
	case connect.OpDelete:
		return u.deleteEvent(r, env, ev)
	}
	if u.routeBy != "" {
		if r.Topic, err = routeTopic(ev.After, u.routeBy, r.Topic); err != nil {
			return r, false, err
		}
	}
	row, value := u.withFields(ev.After, ev.afterAny, env, deletedFalse)
	if u.dropHeader != "" {
		if r = u.dropFields(r, &row); len(row) != len(ev.After) {
			value = row
		}
	}
	r.Value = value
	return r, true, nil
}

func (u *unwrap) tombstone(r connect.Record) (connect.Record, bool, error) {
	keep := false
	if u.legacy {
		keep = !u.dropTombstone
	} else {
		keep = u.mode == modeRewriteWithTombstone
	}
	if !keep {
		return r, false, nil
	}
	for _, h := range u.headers {
		if h.struct_ == "" && h.field == connect.FieldOp {
			r.Headers = append(r.Headers.Clone(), connect.Header{Key: h.name, Value: []byte("d")})
		}
	}
	return r, true, nil
}

func (u *unwrap) deleteEvent(r connect.Record, env connect.Row, ev envelope) (connect.Record, bool, error) {
	if u.routeBy != "" {
		var err error
		if r.Topic, err = routeTopic(ev.Before, u.routeBy, r.Topic); err != nil {
			return r, false, err
		}
	}
	mode := u.mode
	if u.legacy {
		switch u.legacyDelete {
		case "drop":
			mode = modeDrop
		case "none":
			mode = modeTombstone
		case "rewrite":
			mode = modeRewrite
		}
	}
	switch mode {
	case modeDrop:
		return r, false, nil
	case modeRewrite, modeRewriteWithTombstone:
		row, value := u.withFields(ev.Before, ev.beforeAny, env, deletedTrue)
		if u.dropHeader != "" {
			if r = u.dropFields(r, &row); len(row) != len(ev.Before) {
				value = row
			}
		}
		r.Value = value
		return r, true, nil
	default: // tombstone, delete-to-tombstone
		if u.dropHeader != "" && u.dropFromKey {
			var none connect.Row
			r = u.dropFields(r, &none)
		}
		r.Value = nil
		return r, true, nil
	}
}

// withFields returns row plus the add.fields and, in rewrite modes, __deleted, both as a Row
// and as the value to store; when nothing is added the row and its boxed form (boxed, taken
// from the envelope so that no allocation is needed) are returned as they are.
func (u *unwrap) withFields(row connect.Row, boxed any, env connect.Row, deleted any) (connect.Row, any) {
	n := len(u.fields)
	if u.rewrite {
		n++
	}
	if n == 0 {
		return row, boxed
	}
	out := make(connect.Row, len(row), len(row)+n+2) // room for later transforms (own.go)
	copy(out, row)
	for _, f := range u.fields {
		v, _ := f.get(env)
		out = out.Set(f.name, v)
	}
	if u.rewrite {
		out = out.Set(DeletedField, deleted)
	}
	return out, out
}

func (u *unwrap) addHeaders(hs connect.Headers, env connect.Row) (connect.Headers, error) {
	out := hs.Clone()
	for _, h := range u.headers {
		v, ok := h.get(env)
		if !ok {
			continue
		}
		b, err := headerBytes(v)
		if err != nil {
			return nil, fmt.Errorf("unwrap: header %s: %w", h.name, err)
		}
		out = append(out, connect.Header{Key: h.name, Value: b})
	}
	return out, nil
}

// dropFields removes the fields that the drop.fields.header.name header lists from *row and,
// with drop.fields.from.key, from the key.
func (u *unwrap) dropFields(r connect.Record, row *connect.Row) connect.Record {
	hv, ok := r.Headers.Get(u.dropHeader)
	if !ok || hv == nil {
		return r
	}
	names := headerList(hv)
	if len(names) == 0 {
		return r
	}
	*row = withoutFields(*row, names)
	if u.dropFromKey {
		if k, ok := r.Key.(connect.Row); ok {
			r.Key = withoutFields(k, names)
		}
	}
	return r
}

// headerList parses a header listing names: a JSON array of strings or comma-separated text.
func headerList(b []byte) []string {
	s := strings.TrimSpace(string(b))
	if strings.HasPrefix(s, "[") {
		if v, err := connect.ParseJSON([]byte(s)); err == nil {
			if arr, ok := v.([]any); ok {
				var out []string
				for _, e := range arr {
					if name, ok := e.(string); ok {
						out = append(out, name)
					}
				}
				return out
			}
		}
	}
	return connect.SplitList(s)
}

// withoutFields returns row without the named fields (a new Row when any is present).
func withoutFields(row connect.Row, names []string) connect.Row {
	drop := 0
	for _, f := range row {
		if hasName(names, f.Name) {
			drop++
		}
	}
	if drop == 0 {
		return row
	}
	out := make(connect.Row, 0, len(row)-drop)
	for _, f := range row {
		if !hasName(names, f.Name) {
			out = append(out, f)
		}
	}
	return out
}

// routeTopic returns the topic named by a row field: null keeps the topic; a missing field
// or a non-text value is an error, as in Debezium.
func routeTopic(row connect.Row, field, topic string) (string, error) {
	v, ok := row.Get(field)
	if !ok {
		return topic, fmt.Errorf("route.by.field: the row has no field %q", field)
	}
	if v == nil {
		return topic, nil
	}
	s, ok := v.(string)
	if !ok {
		return topic, fmt.Errorf("route.by.field: field %q is %s, want a string", field, typeName(v))
	}
	return s, nil
}

// envelope is the part of a change event that transforms read, parsed without allocating.
type envelope struct {
	Op     connect.Op
	Before connect.Row
	After  connect.Row
	// beforeAny and afterAny are the images as stored in the envelope, so that storing one
	// as a record value needs no new interface box.
	beforeAny, afterAny any
}

// parseEnvelope reads op, before and after from a change event row and checks that the
// images match the op.
func parseEnvelope(env connect.Row) (envelope, error) {
	var ev envelope
	for _, f := range env {
		switch f.Name {
		case connect.FieldOp:
			s, ok := f.Value.(string)
			if !ok {
				return ev, fmt.Errorf("change event: field op: want a string, got %s", typeName(f.Value))
			}
			op, err := connect.ParseOp(s)
			if err != nil {
				return ev, fmt.Errorf("change event: %w", err)
			}
			ev.Op = op
		case connect.FieldBefore, connect.FieldAfter:
			var row connect.Row
			switch x := f.Value.(type) {
			case nil:
			case connect.Row:
				row = x
			default:
				return ev, fmt.Errorf("change event: field %s: want an object or null, got %s", f.Name, typeName(f.Value))
			}
			if f.Name == connect.FieldBefore {
				ev.Before, ev.beforeAny = row, f.Value
			} else {
				ev.After, ev.afterAny = row, f.Value
			}
		}
	}
	switch ev.Op {
	case connect.OpCreate, connect.OpRead, connect.OpUpdate:
		if ev.After == nil {
			return ev, fmt.Errorf("change event: op %v needs an after image", ev.Op)
		}
	case connect.OpDelete:
		if ev.Before == nil {
			return ev, fmt.Errorf("change event: op d needs a before image")
		}
	}
	return ev, nil
}
