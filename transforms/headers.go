package transforms

import (
	"fmt"
	"strings"

	"github.com/sluice-cdc/sluice/connect"
)

func insertHeaderPlugin() connect.Plugin {
	return connect.Plugin{
		Name:    "insert_header",
		Aliases: []string{"org.apache.kafka.connect.transforms.InsertHeader"},
		Kind:    connect.KindTransform,
		Doc:     "Adds a header with a literal value to every record (Kafka Connect's InsertHeader).",
		Config: connect.ConfigDef{
			{Name: "header", Type: connect.TypeString, Required: true, Check: notSluiceHeader, Doc: "The header name."},
			{Name: "value.literal", Type: connect.TypeString, Required: true, Doc: "The header value."},
		},
		NewTransform: func(cfg connect.Config) (connect.Transform, error) {
			return &insertHeader{name: cfg.String("header"), value: []byte(cfg.Raw()["value.literal"])}, nil
		},
	}
}

type insertHeader struct {
	name  string
	value []byte
}

func (t *insertHeader) Apply(r connect.Record) (connect.Record, bool, error) {
	r.Headers = append(r.Headers.Clone(), connect.Header{Key: t.name, Value: t.value})
	return r, true, nil
}

func dropHeadersPlugin() connect.Plugin {
	return connect.Plugin{
		Name:    "drop_headers",
		Aliases: []string{"org.apache.kafka.connect.transforms.DropHeaders"},
		Kind:    connect.KindTransform,
		Doc:     "Removes every header with one of the listed names (Kafka Connect's DropHeaders).",
		Config: connect.ConfigDef{
			{Name: "headers", Type: connect.TypeList, Required: true, Check: checkList(notSluiceHeader), Doc: "Header names to remove."},
		},
		NewTransform: func(cfg connect.Config) (connect.Transform, error) {
			return &dropHeaders{names: cfg.List("headers")}, nil
		},
	}
}

type dropHeaders struct{ names []string }

func (t *dropHeaders) Apply(r connect.Record) (connect.Record, bool, error) {
	for _, n := range t.names {
		r.Headers = r.Headers.Del(n)
	}
	return r, true, nil
}

func headerFromPlugins() []connect.Plugin {
	def := connect.ConfigDef{
		{Name: "fields", Type: connect.TypeList, Required: true, Doc: "Fields to copy or move into headers."},
		{Name: "headers", Type: connect.TypeList, Required: true, Check: checkList(notSluiceHeader),
			Doc: "Header names, one per field, in the same order."},
		{Name: "operation", Type: connect.TypeString, Required: true, Enum: []string{"move", "copy"},
			Doc: "move removes the fields from the record; copy keeps them."},
		replaceNullKey(),
	}
	validate := func(cfg connect.Config) []connect.FieldError {
		if nf, nh := len(cfg.List("fields")), len(cfg.List("headers")); nf != nh {
			return []connect.FieldError{{Key: "headers", Message: fmt.Sprintf("must name as many headers as fields (%d fields, %d headers)", nf, nh)}}
		}
		return nil
	}
	doc := "Copies or moves fields of the record's {side} into headers (Kafka Connect's HeaderFrom). " +
		"Text is written as is, numbers and booleans as text, objects and arrays as JSON, an absent " +
		"or null field as a null header. A null {side} passes unchanged."
	return keyValuePlugins("header_from", "org.apache.kafka.connect.transforms.HeaderFrom", doc, def, validate,
		func(cfg connect.Config, s side, name string) (connect.Transform, error) {
			return &headerFrom{side: s, name: name, fields: cfg.List("fields"), headers: cfg.List("headers"),
				move: strings.EqualFold(cfg.String("operation"), "move")}, nil
		})
}

type headerFrom struct {
	side    side
	name    string
	fields  []string
	headers []string
	move    bool
}

func (t *headerFrom) Apply(r connect.Record) (connect.Record, bool, error) {
	v := t.side.get(r)
	if v == nil {
		return r, true, nil
	}
	row, err := rowOf(v, t.name)
	if err != nil {
		return r, false, err
	}
	hs := r.Headers.Clone()
	for i, f := range t.fields {
		fv, _ := row.Get(f)
		b, err := headerBytes(fv)
		if err != nil {
			return r, false, fmt.Errorf("%s: field %s: %w", t.name, f, err)
		}
		hs = append(hs, connect.Header{Key: t.headers[i], Value: b})
	}
	r.Headers = hs
	if t.move {
		r = t.side.set(r, withoutFields(row, t.fields))
	}
	return r, true, nil
}
