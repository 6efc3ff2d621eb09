package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/sluice-cdc/sluice/connect"
)

// Pos is a place in a pipeline file.
type Pos struct {
	File      string
	Line, Col int
}

// Fsync policies of the log.
const (
	FsyncAlways      = "always"       // fsync before acknowledging, with group commit (default)
	FsyncUnsafeNever = "unsafe-never" // never fsync: a machine crash loses acknowledged data
)

// Pipeline is a loaded set of pipeline files.
type Pipeline struct {
	Log LogSettings
	// REST is the admin API's settings (defaults when the files have no rest section).
	REST       RESTSettings
	Connectors []*Connector
	// Files are the files read, in order.
	Files []string
}

// LogSettings are the log's settings (the "log" section).
type LogSettings struct {
	// Dir is the log's data directory, made absolute (relative to the working directory,
	// like every relative path in a pipeline).
	Dir string
	// Fsync is FsyncAlways or FsyncUnsafeNever.
	Fsync string
	// Partitions is the partition count of topics created on first use (default 1).
	Partitions int32
	// Topic holds Kafka topic settings (retention.ms, segment.bytes, ...) of topics created
	// on first use.
	Topic map[string]string
	// Cluster makes the log replicated (log.cluster); see ClusterSettings.
	Cluster ClusterSettings

	pos  Pos            // of the "log" key
	keys map[string]Pos // of each setting: "dir", "topic.retention.ms", ...
}

// Connector is one connector entry.
type Connector struct {
	Name  string
	Class string
	// Config holds the values as written (placeholders unresolved); lists are joined with
	// commas and numbers and booleans kept as written.
	Config map[string]string

	Pos       Pos // of the entry
	index     int
	namePos   Pos
	classPos  Pos
	configPos Pos
	keys      map[string]Pos

	resolved map[string]Secret // nil until Resolve; Secret so that printing a Connector shows no value
	secret   map[string]bool   // keys whose value came from a placeholder
	bad      map[string]bool   // keys whose value did not decode (reported already)
}

// Path is the connector's path in error messages: connectors[name], or connectors[index]
// when it has no usable name.
func (c *Connector) Path() string {
	if c.Name != "" && !strings.ContainsAny(c.Name, "[]\n") {
		return "connectors[" + c.Name + "]"
	}
	return "connectors[" + strconv.Itoa(c.index) + "]"
}

// String describes the connector with its configuration as written, never a resolved value.
func (c Connector) String() string {
	keys := make([]string, 0, len(c.Config))
	for k := range c.Config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "connector %s (class %s) {", c.Name, c.Class)
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %s", k, c.Config[k])
	}
	b.WriteString("}")
	return b.String()
}

// GoString is String, so that %#v shows no resolved value either.
func (c Connector) GoString() string { return c.String() }

// Resolved returns the configuration with placeholders substituted; Resolve must have
// succeeded. The map is a copy.
func (c *Connector) Resolved() map[string]string {
	out := make(map[string]string, len(c.resolved))
	for k, v := range c.resolved {
		out[k] = v.Reveal()
	}
	return out
}

// Load reads pipeline files. Each path is a file or a directory, whose *.yaml and *.yml files
// are read in name order. The log section may appear in one file only; connector names are
// unique across all files. It reports every problem at once as Errors.
func Load(paths ...string) (*Pipeline, error) {
	var files []string
	var errs Errors
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			errs = append(errs, Error{File: p, Msg: fmt.Sprintf("cannot read: %v", unwrapPathError(err))})
			continue
		}
		if !fi.IsDir() {
			files = append(files, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			errs = append(errs, Error{File: p, Msg: fmt.Sprintf("cannot read: %v", unwrapPathError(err))})
			continue
		}
		var found []string
		for _, e := range entries {
			if n := e.Name(); !e.IsDir() && !strings.HasPrefix(n, ".") && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				found = append(found, filepath.Join(p, n))
			}
		}
		sort.Strings(found)
		if len(found) == 0 {
			errs = append(errs, Error{File: p, Msg: "the directory holds no .yaml or .yml file"})
		}
		files = append(files, found...)
	}
	if len(paths) == 0 {
		errs = append(errs, Error{Msg: "no pipeline file given"})
	}
	var parts []*Pipeline
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, Error{File: f, Msg: fmt.Sprintf("cannot read: %v", unwrapPathError(err))})
			continue
		}
		p, err := parse(f, data)
		var fe Errors
		if errors.As(err, &fe) {
			errs = append(errs, fe...)
		}
		parts = append(parts, p)
	}
	if len(errs) > 0 && len(parts) == 0 {
		return nil, errs.orNil()
	}
	p, merr := merge(parts, len(errs) > 0)
	errs = append(errs, merr...)
	if err := errs.orNil(); err != nil {
		return p, err
	}
	return p, nil
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Parse parses one pipeline file's contents; name is used in errors and to resolve relative
// paths. It also checks that log.dir is set.
func Parse(name string, data []byte) (*Pipeline, error) {
	p, err := parse(name, data)
	var errs Errors
	errors.As(err, &errs)
	mp, merr := merge([]*Pipeline{p}, len(errs) > 0)
	errs = append(errs, merr...)
	if err := errs.orNil(); err != nil {
		return mp, err
	}
	return mp, nil
}

// merge joins the files' pipelines, checking what spans files.
func merge(parts []*Pipeline, broken bool) (*Pipeline, Errors) {
	out := &Pipeline{}
	var errs Errors
	var logFrom, restFrom *Pipeline
	seen := map[string]*Connector{}
	for _, p := range parts {
		out.Files = append(out.Files, p.Files...)
		if p.REST.pos.Line > 0 {
			if restFrom != nil {
				errs = append(errs, Error{File: p.REST.pos.File, Line: p.REST.pos.Line, Col: p.REST.pos.Col, Path: "rest",
					Msg: fmt.Sprintf("is already set in %s:%d:%d; set it in one file only", restFrom.REST.pos.File, restFrom.REST.pos.Line, restFrom.REST.pos.Col)})
			} else {
				restFrom = p
				out.REST = p.REST
			}
		}
		if p.Log.pos.Line > 0 {
			if logFrom != nil {
				errs = append(errs, Error{File: p.Log.pos.File, Line: p.Log.pos.Line, Col: p.Log.pos.Col, Path: "log",
					Msg: fmt.Sprintf("is already set in %s:%d:%d; set it in one file only", logFrom.Log.pos.File, logFrom.Log.pos.Line, logFrom.Log.pos.Col)})
			} else {
				logFrom = p
				out.Log = p.Log
			}
		}
		for _, c := range p.Connectors {
			c.index = len(out.Connectors)
			if c.Name != "" {
				if first, ok := seen[c.Name]; ok {
					errs = append(errs, Error{File: c.namePos.File, Line: c.namePos.Line, Col: c.namePos.Col, Path: c.Path() + ".name",
						Msg: fmt.Sprintf("duplicate connector name %q; first at %s:%d:%d", c.Name, first.namePos.File, first.namePos.Line, first.namePos.Col)})
				} else {
					seen[c.Name] = c
				}
			}
			out.Connectors = append(out.Connectors, c)
		}
	}
	if logFrom == nil && !broken {
		e := Error{Path: "log", Msg: "is required: set log.dir, the directory of the log's data"}
		if len(parts) > 0 && len(parts[0].Files) > 0 {
			e.File, e.Line, e.Col = parts[0].Files[0], 1, 1
		}
		errs = append(errs, e)
	} else if logFrom != nil && out.Log.Dir == "" {
		if _, ok := out.Log.keys["dir"]; !ok {
			errs = append(errs, Error{File: out.Log.pos.File, Line: out.Log.pos.Line, Col: out.Log.pos.Col, Path: "log.dir", Msg: "is required (the directory of the log's data)"})
		}
	}
	if out.Log.Fsync == "" {
		out.Log.Fsync = FsyncAlways
	}
	if out.Log.Partitions == 0 {
		out.Log.Partitions = 1
	}
	if !broken {
		errs = append(errs, out.REST.finish()...)
	} else if out.REST.Listeners == nil {
		out.REST.finish()
	}
	return out, errs
}

// decoder walks one file's YAML tree, collecting errors.
type decoder struct {
	file string
	errs Errors
}

func (d *decoder) pos(n ast.Node) Pos {
	tk := n.GetToken()
	if tk == nil || tk.Position == nil {
		return Pos{File: d.file}
	}
	return Pos{File: d.file, Line: tk.Position.Line, Col: tk.Position.Column}
}

func (d *decoder) errorf(n ast.Node, path, format string, args ...any) {
	p := d.pos(n)
	d.errs = append(d.errs, Error{File: p.File, Line: p.Line, Col: p.Col, Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) errorAt(p Pos, path, format string, args ...any) {
	d.errs = append(d.errs, Error{File: p.File, Line: p.Line, Col: p.Col, Path: path, Msg: fmt.Sprintf(format, args...)})
}

func parse(name string, data []byte) (*Pipeline, error) {
	p := &Pipeline{Files: []string{name}}
	d := &decoder{file: name}
	f, err := parser.ParseBytes(data, 0, parser.AllowDuplicateMapKey())
	if err != nil {
		var se *yaml.SyntaxError
		if errors.As(err, &se) && se.Token != nil && se.Token.Position != nil {
			d.errorAt(Pos{File: name, Line: se.Token.Position.Line, Col: se.Token.Position.Column}, "", "invalid YAML: %s", controlChars.Replace(se.Message))
		} else {
			d.errorAt(Pos{File: name, Line: 1, Col: 1}, "", "invalid YAML: %s", firstLine(err.Error()))
		}
		return p, d.errs
	}
	var bodies []ast.Node
	for _, doc := range f.Docs {
		if doc != nil && doc.Body != nil {
			bodies = append(bodies, doc.Body)
		}
	}
	if len(bodies) == 0 {
		d.errorAt(Pos{File: name, Line: 1, Col: 1}, "", "the file is empty: want a mapping with log and connectors")
		return p, d.errs
	}
	if len(bodies) > 1 {
		d.errorf(bodies[1], "", "more than one YAML document; put each pipeline part in its own file")
	}
	d.top(bodies[0], p)
	if len(d.errs) > 0 {
		return p, d.errs
	}
	return p, nil
}

var controlChars = strings.NewReplacer("\t", `\t`, "\r", `\r`, "\x00", `\x00`)

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// entry is one key of a mapping.
type entry struct {
	key   string
	keyN  ast.Node
	value ast.Node
}

// mapping returns the entries of a mapping node, reporting duplicates and non-string keys;
// ok is false when n is not a mapping.
func (d *decoder) mapping(n ast.Node, path string) ([]entry, bool) {
	n = d.unwrap(n, path)
	if n == nil {
		return nil, false
	}
	var values []*ast.MappingValueNode
	switch x := n.(type) {
	case *ast.MappingNode:
		values = x.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{x}
	default:
		d.errorf(n, path, "must be a mapping (got %s)", kind(n))
		return nil, false
	}
	var out []entry
	first := map[string]ast.Node{}
	for _, mv := range values {
		if _, ok := mv.Key.(*ast.MergeKeyNode); ok {
			d.errorf(mv.Key, path, "merge keys (<<) are not supported; write the keys out")
			continue
		}
		key, ok := scalarText(mv.Key)
		if !ok {
			d.errorf(mv.Key, path, "keys must be strings (got %s)", kind(mv.Key))
			continue
		}
		if f, dup := first[key]; dup {
			p := d.pos(f)
			d.errorf(mv.Key, join(path, key), "duplicate key; first at line %d", p.Line)
			continue
		}
		first[key] = mv.Key
		out = append(out, entry{key: key, keyN: mv.Key, value: mv.Value})
	}
	return out, true
}

// unwrap strips tags and comments and rejects anchors and aliases.
func (d *decoder) unwrap(n ast.Node, path string) ast.Node {
	for {
		switch x := n.(type) {
		case *ast.TagNode:
			n = x.Value
		case *ast.CommentGroupNode:
			return nil
		case *ast.AnchorNode, *ast.AliasNode:
			d.errorf(n, path, "anchors and aliases are not supported; write the value out")
			return nil
		default:
			return n
		}
	}
}

func kind(n ast.Node) string {
	switch n.(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.NullNode:
		return "null"
	case *ast.IntegerNode, *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "a number"
	case *ast.BoolNode:
		return "a boolean"
	case *ast.StringNode, *ast.LiteralNode:
		return "a string"
	case nil:
		return "nothing"
	}
	return "a " + strings.ToLower(n.Type().String())
}

// scalarText returns a scalar's text as written (strings unquoted).
func scalarText(n ast.Node) (string, bool) {
	switch x := n.(type) {
	case *ast.StringNode:
		return x.Value, true
	case *ast.LiteralNode:
		if x.Value != nil {
			return x.Value.Value, true
		}
		return "", true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		return n.GetToken().Value, true
	case *ast.TagNode:
		return scalarText(x.Value)
	}
	return "", false
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var topKeys = []string{"log", "rest", "connectors"}

func (d *decoder) top(n ast.Node, p *Pipeline) {
	entries, ok := d.mapping(n, "")
	if !ok {
		return
	}
	for _, e := range entries {
		switch e.key {
		case "log":
			p.Log.pos = d.pos(e.keyN)
			d.log(e.value, &p.Log)
		case "rest":
			p.REST.pos = d.pos(e.keyN)
			d.rest(e.value, &p.REST)
		case "connectors":
			d.connectors(e.value, p)
		default:
			d.unknown(e.keyN, "", e.key, topKeys)
		}
	}
}

func (d *decoder) unknown(n ast.Node, path, key string, known []string) {
	msg := "unknown key"
	if s, ok := connect.SuggestKey(key, known); ok {
		msg += fmt.Sprintf("; did you mean %q?", s)
	} else {
		msg += "; known keys: " + strings.Join(known, ", ")
	}
	d.errorf(n, join(path, key), "%s", msg)
}

var logKeys = []string{"dir", "fsync", "partitions", "topic", "cluster"}

func (d *decoder) log(n ast.Node, l *LogSettings) {
	l.keys = map[string]Pos{}
	entries, ok := d.mapping(n, "log")
	if !ok {
		return
	}
	for _, e := range entries {
		path := "log." + e.key
		l.keys[e.key] = d.pos(e.keyN)
		switch e.key {
		case "dir":
			v, ok := d.str(e.value, e.keyN, path)
			if !ok {
				continue
			}
			switch {
			case strings.TrimSpace(v) == "":
				d.errorf(e.value, path, "must not be empty")
			case strings.Contains(v, "${"):
				d.errorf(e.value, path, "placeholders are resolved only in connector config values")
			case filepath.IsAbs(v):
				l.Dir = filepath.Clean(v)
			default:
				abs, err := filepath.Abs(v)
				if err != nil {
					d.errorf(e.value, path, "%v", err)
					continue
				}
				l.Dir = abs
			}
		case "fsync":
			v, ok := d.str(e.value, e.keyN, path)
			if !ok {
				continue
			}
			switch v {
			case FsyncAlways, FsyncUnsafeNever:
				l.Fsync = v
			default:
				d.errorf(e.value, path, "must be %s or %s (got %q)", FsyncAlways, FsyncUnsafeNever, v)
			}
		case "partitions":
			v, ok := d.str(e.value, e.keyN, path)
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil || n < 1 || n > 10000 {
				d.errorf(e.value, path, "must be 1..10000 (got %s)", v)
				continue
			}
			l.Partitions = int32(n)
		case "topic":
			tentries, ok := d.mapping(e.value, path)
			if !ok {
				continue
			}
			l.Topic = map[string]string{}
			for _, te := range tentries {
				tpath := path + "." + te.key
				l.keys["topic."+te.key] = d.pos(te.keyN)
				if v, ok := d.str(te.value, te.keyN, tpath); ok {
					l.Topic[te.key] = v
				}
			}
		case "cluster":
			d.cluster(e.value, path, &l.Cluster, l.keys)
		default:
			d.unknown(e.keyN, "log", e.key, logKeys)
		}
	}
}

// str returns a scalar's text; null, a list or a mapping is an error (a missing value is
// reported at its key, keyN).
func (d *decoder) str(n, keyN ast.Node, path string) (string, bool) {
	n = d.unwrap(n, path)
	if n == nil {
		return "", false
	}
	if _, null := n.(*ast.NullNode); null {
		at := n
		if keyN != nil {
			at = keyN
		}
		d.errorf(at, path, "must have a value (write \"\" for an empty one)")
		return "", false
	}
	v, ok := scalarText(n)
	if !ok {
		d.errorf(n, path, "must be a single value (got %s)", kind(n))
		return "", false
	}
	return v, true
}

// list returns the texts of a list of scalars.
func (d *decoder) list(n ast.Node, path string) ([]string, bool) {
	n = d.unwrap(n, path)
	if n == nil {
		return nil, false
	}
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		d.errorf(n, path, "must be a list (got %s)", kind(n))
		return nil, false
	}
	out := []string{}
	good := true
	for i, item := range seq.Values {
		v, ok := d.str(item, nil, fmt.Sprintf("%s[%d]", path, i))
		if !ok {
			good = false
			continue
		}
		out = append(out, v)
	}
	return out, good
}

var connectorKeys = []string{"name", "class", "config"}

func (d *decoder) connectors(n ast.Node, p *Pipeline) {
	n = d.unwrap(n, "connectors")
	if n == nil {
		return
	}
	if _, null := n.(*ast.NullNode); null {
		return
	}
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		d.errorf(n, "connectors", "must be a list of connectors (got %s)", kind(n))
		return
	}
	for i, item := range seq.Values {
		c := &Connector{Pos: d.entryPos(item), index: i, Config: map[string]string{}, keys: map[string]Pos{}, bad: map[string]bool{}}
		d.connector(item, c, i)
		p.Connectors = append(p.Connectors, c)
	}
}

// entryPos is where a list entry starts: its first key for a mapping.
func (d *decoder) entryPos(n ast.Node) Pos {
	switch x := n.(type) {
	case *ast.MappingNode:
		if len(x.Values) > 0 {
			return d.pos(x.Values[0].Key)
		}
	case *ast.MappingValueNode:
		return d.pos(x.Key)
	}
	return d.pos(n)
}

func (d *decoder) connector(n ast.Node, c *Connector, i int) {
	idx := fmt.Sprintf("connectors[%d]", i)
	entries, ok := d.mapping(n, idx)
	if !ok {
		return
	}
	// The name first, so that other errors can use it in their path.
	for _, e := range entries {
		if e.key == "name" {
			c.namePos = d.pos(e.keyN)
			if v, ok := d.str(e.value, e.keyN, idx+".name"); ok {
				c.Name = v
			}
		}
	}
	path := c.Path()
	var configN ast.Node
	for _, e := range entries {
		switch e.key {
		case "name":
		case "class":
			c.classPos = d.pos(e.keyN)
			if v, ok := d.str(e.value, e.keyN, path+".class"); ok {
				c.Class = v
			}
		case "config":
			c.configPos = d.pos(e.keyN)
			configN = e.value
		default:
			d.unknown(e.keyN, path, e.key, connectorKeys)
		}
	}
	if c.namePos.Line == 0 {
		d.errorAt(c.Pos, path+".name", "is required")
	}
	if configN != nil {
		d.config(configN, c, path+".config")
	}
}

func (d *decoder) config(n ast.Node, c *Connector, path string) {
	if u := d.unwrap(n, path); u != nil {
		if _, null := u.(*ast.NullNode); null {
			return
		}
	}
	entries, ok := d.mapping(n, path)
	if !ok {
		return
	}
	for _, e := range entries {
		kpath := path + "." + e.key
		c.keys[e.key] = d.pos(e.keyN)
		before := len(d.errs)
		d.configValue(e, c, kpath)
		if len(d.errs) > before {
			c.bad[e.key] = true
		}
	}
}

func (d *decoder) configValue(e entry, c *Connector, kpath string) {
	{
		v := d.unwrap(e.value, kpath)
		if v == nil {
			return
		}
		switch v.(type) {
		case *ast.SequenceNode:
			items, ok := d.list(v, kpath)
			if ok {
				c.Config[e.key] = strings.Join(items, ",")
			}
		case *ast.MappingNode, *ast.MappingValueNode:
			d.errorf(v, kpath, "must be a single value or a list; write nested keys with dots, e.g. %s.<key>: value", e.key)
		default:
			if s, ok := d.str(v, e.keyN, kpath); ok {
				if err := checkPlaceholders(s); err != nil {
					d.errorf(v, kpath, "%v", err)
					return
				}
				c.Config[e.key] = s
			}
		}
	}
}
