package snapshot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/sluice-cdc/sluice/connect"
)

// Debezium's signal types that sluice acts on.
const (
	SignalExecute = "execute-snapshot"
	SignalStop    = "stop-snapshot"
	SignalPause   = "pause-snapshot"
	SignalResume  = "resume-snapshot"
	// signalAddTables is sluice's own command, stored when a configuration change adds
	// tables to a running pipeline (it is not accepted from users).
	signalAddTables = "add-tables"
)

// Origins of a command.
const (
	OriginAPI    = "api"
	OriginTopic  = "topic"
	OriginSource = "source"
	OriginConfig = "config"
)

// Request is the data of an execute-snapshot signal (Debezium's shape), also the body of
// POST /connectors/{c}/snapshots:
//
//	{"data-collections": ["public\\.orders", "public.customers"], "type": "incremental",
//	 "additional-conditions": [{"data-collection": "public.orders", "filter": "region = 'eu'"}],
//	 "surrogate-key": "order_no", "chunk-size": 2048}
//
// data-collections are regular expressions matching whole <schema|database>.<table> names of
// captured tables; type is incremental (the default) or blocking; each additional condition
// limits one table's rows with a WHERE clause; surrogate-key reads in the order of another
// unique column instead of the primary key; chunk-size overrides
// incremental.snapshot.chunk.size.
type Request struct {
	DataCollections      []string    `json:"data-collections"`
	Type                 string      `json:"type,omitempty"`
	AdditionalConditions []Condition `json:"additional-conditions,omitempty"`
	// AdditionalCondition is the older single condition for every table.
	AdditionalCondition string `json:"additional-condition,omitempty"`
	SurrogateKey        string `json:"surrogate-key,omitempty"`
	ChunkSize           int    `json:"chunk-size,omitempty"`
}

// Condition limits the rows of one table.
type Condition struct {
	DataCollection string `json:"data-collection"`
	Filter         string `json:"filter"`
}

// Table is a captured table as the source resolves it for a snapshot.
type Table struct {
	ID  string   // <schema|database>.<table>
	Key []string // the chunk key columns, in order
}

// command is an applied (or to be applied) signal, as stored in the connector's store.
type command struct {
	Seq    uint64      `json:"seq,omitempty"`
	ID     string      `json:"id"`
	Type   string      `json:"type"`
	Origin string      `json:"origin"`
	Kind   string      `json:"kind,omitempty"` // incremental or blocking
	Tables []tableSpec `json:"tables,omitempty"`
	At     int64       `json:"at_ms"`
	// Filters is the capture filter that add-tables leaves in force (see Engine.ConfigChanged).
	Filters map[string]string `json:"filters,omitempty"`
}

// tableSpec is one resolved table of a command.
type tableSpec struct {
	Table     string   `json:"table"`
	Filter    string   `json:"filter,omitempty"`
	Key       []string `json:"key,omitempty"`
	ChunkSize int      `json:"chunk_size,omitempty"`
}

// decodeStrict decodes a JSON object into dst, refusing unknown fields with a suggestion.
func decodeStrict(data []byte, dst any, known []string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		msg := err.Error()
		if name, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
			name = strings.Trim(name, `"`)
			msg = fmt.Sprintf("unknown field %q", name)
			if s, ok := connect.SuggestKey(name, known); ok {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			return errors.New(msg)
		}
		return fmt.Errorf("not a valid signal data object: %s", strings.TrimPrefix(msg, "json: "))
	}
	if dec.More() {
		return errors.New("trailing data after the signal data object")
	}
	return nil
}

var requestFields = []string{"data-collections", "type", "additional-conditions", "additional-condition", "surrogate-key", "chunk-size"}

// parseRequest parses an execute-snapshot or stop-snapshot data object.
func parseRequest(data []byte) (Request, error) {
	var r Request
	if len(bytes.TrimSpace(data)) == 0 {
		return r, nil
	}
	if err := decodeStrict(data, &r, requestFields); err != nil {
		return r, err
	}
	r.Type = strings.ToLower(strings.TrimSpace(r.Type))
	switch r.Type {
	case "":
		r.Type = TypeIncremental
	case TypeIncremental, TypeBlocking:
	default:
		return r, fmt.Errorf("type must be incremental or blocking (got %q)", r.Type)
	}
	if r.ChunkSize < 0 || r.ChunkSize > 1000000 {
		return r, fmt.Errorf("chunk-size must be 1..1000000 (got %d)", r.ChunkSize)
	}
	for i, p := range r.DataCollections {
		if strings.TrimSpace(p) == "" {
			return r, fmt.Errorf("data-collections[%d] is empty", i)
		}
		if _, err := compileName(p); err != nil {
			return r, fmt.Errorf("data-collections[%d]: %v", i, err)
		}
	}
	for i, c := range r.AdditionalConditions {
		if c.DataCollection == "" {
			return r, fmt.Errorf("additional-conditions[%d].data-collection is required", i)
		}
		if _, err := compileName(c.DataCollection); err != nil {
			return r, fmt.Errorf("additional-conditions[%d].data-collection: %v", i, err)
		}
		if strings.TrimSpace(c.Filter) == "" {
			return r, fmt.Errorf("additional-conditions[%d].filter is empty", i)
		}
		if strings.Contains(c.Filter, ";") {
			return r, fmt.Errorf("additional-conditions[%d].filter must be one condition, without ';' (got %q)", i, c.Filter)
		}
	}
	if strings.Contains(r.AdditionalCondition, ";") {
		return r, fmt.Errorf("additional-condition must be one condition, without ';' (got %q)", r.AdditionalCondition)
	}
	return r, nil
}

// compileName compiles a data-collection pattern: a regular expression matching a whole
// name, case-insensitively (Debezium's filters).
func compileName(p string) (*regexp.Regexp, error) {
	re, err := regexp.Compile(`(?i)^(?:` + p + `)$`)
	if err != nil {
		return nil, fmt.Errorf("bad regular expression %q: %v", p, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	return re, nil
}

// matchTables resolves a request's patterns against the captured tables. Every pattern must
// match at least one table.
func matchTables(patterns []string, captured []Table) ([]Table, error) {
	var out []Table
	seen := map[string]bool{}
	for i, p := range patterns {
		re, err := compileName(p)
		if err != nil {
			return nil, fmt.Errorf("data-collections[%d]: %v", i, err)
		}
		n := 0
		for _, t := range captured {
			if re.MatchString(t.ID) || strings.EqualFold(t.ID, p) {
				n++
				if !seen[t.ID] {
					seen[t.ID] = true
					out = append(out, t)
				}
			}
		}
		if n == 0 {
			names := make([]string, 0, len(captured))
			for _, t := range captured {
				names = append(names, t.ID)
			}
			sort.Strings(names)
			list := strings.Join(names, ", ")
			if len(names) > 20 {
				list = strings.Join(names[:20], ", ") + fmt.Sprintf(", and %d more", len(names)-20)
			}
			if list == "" {
				list = "none"
			}
			return nil, fmt.Errorf("data-collections[%d]: %q matches no captured table (captured: %s)", i, p, list)
		}
	}
	return out, nil
}

// filterFor returns the additional condition of a table.
func (r *Request) filterFor(table string) string {
	for _, c := range r.AdditionalConditions {
		re, err := compileName(c.DataCollection)
		if err == nil && (re.MatchString(table) || strings.EqualFold(c.DataCollection, table)) {
			return c.Filter
		}
	}
	return r.AdditionalCondition
}
