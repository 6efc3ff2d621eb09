package transforms

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/connect"
)

func outboxPlugin() connect.Plugin {
	ignored := func(name, def, doc string) connect.ConfigKey {
		return connect.ConfigKey{Name: name, Type: connect.TypeString, Default: def, HasDefault: true, Ignored: true, Importance: connect.Low,
			Doc: "Accepted for compatibility; " + doc}
	}
	return connect.Plugin{
		Name:    "outbox",
		Aliases: []string{"io.debezium.transforms.outbox.EventRouter"},
		Kind:    connect.KindTransform,
		Doc: "Turns inserts into an outbox table into events (Debezium's outbox event router): key = the " +
			"event key column, value = the payload column, header id = the event id, topic from the " +
			"route.by.field column. Deletes and tombstones are dropped; updates follow " +
			"table.op.invalid.behavior; values that are not change events pass unchanged.",
		Config: connect.ConfigDef{
			{Name: "table.op.invalid.behavior", Type: connect.TypeString, Default: "warn", HasDefault: true, Enum: []string{"warn", "error", "fatal"},
				Doc: "What an update of an outbox row does: warn and error drop it, fatal fails the record (errors.tolerance decides)."},
			{Name: "table.field.event.id", Type: connect.TypeString, Default: "id", HasDefault: true,
				Doc: "Column with the unique event id, emitted as the header id."},
			{Name: "table.field.event.key", Type: connect.TypeString, Default: "aggregateid", HasDefault: true,
				Doc: "Column with the event key, emitted as the record key."},
			{Name: "table.field.event.type", Type: connect.TypeString, Default: "type", HasDefault: true,
				Doc: "Column with the event type; emit it with table.fields.additional.placement (e.g. type:header:eventType)."},
			{Name: "table.field.event.timestamp", Type: connect.TypeString, HasDefault: true,
				Doc: "Column with the event time in epoch milliseconds; default: the change event's ts_ms."},
			{Name: "table.field.event.payload", Type: connect.TypeString, Default: "payload", HasDefault: true,
				Doc: "Column with the event payload, emitted as the record value."},
			{Name: "table.expand.json.payload", Type: connect.TypeBoolean, Default: "false", HasDefault: true,
				Doc: "Parse a string payload as JSON; a payload that does not parse is kept as the string."},
			{Name: "table.fields.additional.placement", Type: connect.TypeList, HasDefault: true,
				Check: checkList(func(it string) error { _, err := parsePlacement(it); return err }),
				Doc: "column:header[:alias], column:envelope[:alias] or column:partition items. envelope " +
					"fields make the value an object {\"payload\": ..., \"<alias>\": ...}."},
			{Name: "table.fields.additional.error.on.missing", Type: connect.TypeBoolean, Default: "true", HasDefault: true,
				Doc: "Fail the record when an additional column is absent; false skips it."},
			{Name: "route.by.field", Type: connect.TypeString, Default: "aggregatetype", HasDefault: true,
				Doc: "Column whose value routes the event (the ${routedByValue} of route.topic.replacement)."},
			{Name: "route.topic.regex", Type: connect.TypeString, Default: "(?<routedByValue>.*)", HasDefault: true, Check: checkRegex,
				Doc: "Regular expression matched against the whole route.by.field value."},
			{Name: "route.topic.replacement", Type: connect.TypeString, Default: "outbox.event.${routedByValue}", HasDefault: true,
				Doc: "The topic; ${routedByValue} or $1 insert groups captured by route.topic.regex. When the regex does not match, the topic is the value itself."},
			{Name: "route.tombstone.on.empty.payload", Type: connect.TypeBoolean, Default: "false", HasDefault: true,
				Doc: "Emit a tombstone for a null or empty payload (a null payload gives a null value either way)."},
			ignored("table.json.payload.null.behavior", "ignore", "sluice records carry no schema, so a null in an expanded payload stays null."),
			ignored("table.field.event.schema.version", "", "sluice records carry no schema versions."),
			ignored("table.field.event.payload.id", "aggregateid", "removed by Debezium; use table.field.event.key."),
			ignored("tracing.span.context.field", "tracingspancontext", "sluice does not trace records."),
			ignored("tracing.operation.name", "debezium-read", "sluice does not trace records."),
			ignored("tracing.with.context.field.only", "false", "sluice does not trace records."),
			ignored("debezium.op.invalid.behavior", "warn", "use table.op.invalid.behavior."),
		},
		Validate: func(cfg connect.Config) []connect.FieldError {
			errs := checkReplacement(cfg, "route.topic.regex", "route.topic.replacement")
			for _, it := range cfg.List("table.fields.additional.placement") {
				if p, err := parsePlacement(it); err == nil && p.where == "header" {
					if err := notSluiceHeader(p.alias); err != nil {
						errs = append(errs, connect.FieldError{Key: "table.fields.additional.placement", Message: err.Error()})
					}
				}
			}
			return errs
		},
		NewTransform: func(cfg connect.Config) (connect.Transform, error) {
			t := &outbox{
				invalid:        cfg.Enum("table.op.invalid.behavior"),
				idField:        cfg.String("table.field.event.id"),
				keyField:       cfg.String("table.field.event.key"),
				tsField:        cfg.String("table.field.event.timestamp"),
				payloadField:   cfg.String("table.field.event.payload"),
				expand:         cfg.Bool("table.expand.json.payload"),
				errOnMissing:   cfg.Bool("table.fields.additional.error.on.missing"),
				routeBy:        cfg.String("route.by.field"),
				tombstoneEmpty: cfg.Bool("route.tombstone.on.empty.payload"),
			}
			var err error
			if t.route, err = newReplacer(cfg.String("route.topic.regex"), cfg.String("route.topic.replacement")); err != nil {
				return nil, err
			}
			for _, it := range cfg.List("table.fields.additional.placement") {
				p, err := parsePlacement(it)
				if err != nil {
					return nil, err
				}
				t.extra = append(t.extra, p)
				if p.where == "envelope" {
					t.envelope = true
				}
			}
			return t, nil
		},
	}
}

type placement struct {
	column, where, alias string
}

func parsePlacement(it string) (placement, error) {
	parts := strings.Split(it, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
		return placement{}, fmt.Errorf("item %q: want column:placement[:alias]", it)
	}
	p := placement{column: parts[0], where: strings.ToLower(parts[1]), alias: parts[0]}
	if len(parts) == 3 && parts[2] != "" {
		p.alias = parts[2]
	}
	switch p.where {
	case "header", "envelope", "partition":
	default:
		return placement{}, fmt.Errorf("item %q: placement must be header, envelope or partition", it)
	}
	return p, nil
}

type outbox struct {
	invalid        string
	idField        string
	keyField       string
	tsField        string
	payloadField   string
	expand         bool
	extra          []placement
	envelope       bool
	errOnMissing   bool
	routeBy        string
	route          *replacer
	tombstoneEmpty bool
}

func (t *outbox) Apply(r connect.Record) (connect.Record, bool, error) {
	if r.Value == nil {
		return r, false, nil
	}
	env, ok := r.Value.(connect.Row)
	if !ok || env.Index(connect.FieldOp) < 0 {
		return r, true, nil
	}
	ev, err := parseEnvelope(env)
	if err != nil {
		return r, false, fmt.Errorf("outbox: %w", err)
	}
	switch ev.Op {
	case connect.OpCreate, connect.OpRead:
	case connect.OpUpdate:
		if t.invalid == "fatal" {
			return r, false, fmt.Errorf("outbox: an outbox row was updated; outbox tables take inserts only (table.op.invalid.behavior=fatal)")
		}
		return r, false, nil
	default: // deletes and truncates
		return r, false, nil
	}
	row := ev.After
	need := func(field string) (any, error) {
		v, ok := row.Get(field)
		if !ok {
			return nil, fmt.Errorf("outbox: the outbox row has no column %q", field)
		}
		return v, nil
	}
	id, err := need(t.idField)
	if err != nil {
		return r, false, err
	}
	key, err := need(t.keyField)
	if err != nil {
		return r, false, err
	}
	routed, err := need(t.routeBy)
	if err != nil {
		return r, false, err
	}
	routedText, ok := textOf(routed)
	if !ok {
		return r, false, fmt.Errorf("outbox: column %q (route.by.field) is %s, want text", t.routeBy, typeName(routed))
	}
	payload, err := need(t.payloadField)
	if err != nil {
		return r, false, err
	}
	if s, ok := payload.(string); ok && t.expand && s != "" {
		if v, err := connect.ParseJSON([]byte(s)); err == nil {
			payload = v
		}
	}

	out := connect.Record{
		Topic:     routedText,
		Partition: r.Partition,
		Offset:    r.Offset,
		Timestamp: r.Timestamp,
		Key:       key,
		Headers:   r.Headers.Clone(),
		Version:   r.Version,
		Position:  r.Position,
	}
	if topic, ok := t.route.replace(routedText); ok {
		out.Topic = topic
	}
	if t.tsField != "" {
		v, err := need(t.tsField)
		if err != nil {
			return r, false, err
		}
		if v != nil {
			ms, err := connect.AsInt64(v)
			if err != nil {
				return r, false, fmt.Errorf("outbox: column %q (table.field.event.timestamp): %w", t.tsField, err)
			}
			out.Timestamp = time.UnixMilli(ms).UTC()
		}
	} else if tv, ok := env.Get(connect.FieldTsMs); ok && tv != nil {
		if ms, err := connect.AsInt64(tv); err == nil {
			out.Timestamp = time.UnixMilli(ms).UTC()
		}
	}
	idb, err := headerBytes(id)
	if err != nil {
		return r, false, fmt.Errorf("outbox: event id: %w", err)
	}
	out.Headers = append(out.Headers, connect.Header{Key: "id", Value: idb})

	var value any = payload
	var envRow connect.Row
	if t.envelope {
		envRow = connect.Row{{Name: "payload", Value: payload}}
	}
	for _, p := range t.extra {
		v, ok := row.Get(p.column)
		if !ok {
			if t.errOnMissing {
				return r, false, fmt.Errorf("outbox: the outbox row has no column %q (table.fields.additional.placement)", p.column)
			}
			continue
		}
		switch p.where {
		case "header":
			b, err := headerBytes(v)
			if err != nil {
				return r, false, fmt.Errorf("outbox: column %s: %w", p.column, err)
			}
			out.Headers = append(out.Headers, connect.Header{Key: p.alias, Value: b})
		case "envelope":
			envRow = envRow.Set(p.alias, v)
		case "partition":
			n, err := connect.AsInt64(v)
			if err != nil || n < 0 || n > 1<<31-1 {
				return r, false, fmt.Errorf("outbox: column %s (partition placement) must be a partition number, got %v", p.column, v)
			}
			out.Partition = int32(n)
		}
	}
	if envRow != nil {
		value = envRow
	}
	if t.tombstoneEmpty && (payload == nil || payload == "") {
		value = nil
	}
	out.Value = value
	return out, true, nil
}
