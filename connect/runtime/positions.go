package runtime

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/connect"
)

// Source positions as the API shows and accepts them.
//
// A source position's State is its source's JSON (see connect.Position). The offsets API shows
// it as the connector's one offset and accepts an edited one, or Debezium's offset fields for
// the mysql and postgres sources; the wait API takes a position a client got from its database
// after a write. The runtime knows the documented State formats of the sources it ships:
//
//	mysql     {"v":1,"epoch":0,"file":"mariadb-bin.000003","pos":1234,"row":2,"gtid":"0-1-42"}
//	          (both add "incremental": the incremental snapshot queue, see sources/snapshot)
//	          Debezium: {"file":"mariadb-bin.000003","pos":1234}; wait: "mariadb-bin.000003:1234"
//	          (SHOW MASTER STATUS after the write)
//	postgres  {"v":1,"epoch":0,"lsn":"0/16B3748","change":3,"record":1,"end":"0/16B37B0"}
//	          Debezium: {"lsn":23803720} or {"lsn":"0/16B3748"}; wait: "0/16B3748"
//	          (SELECT pg_current_wal_lsn() after the write)
//	datagen   {"v":1,"next":42}; wait: "42" (the first 42 events)
//
// Other sources take any JSON object, and wait takes "order:<hex>", compared with the Orders
// of the positions the source reports. A Source may implement PositionChecker to check an
// offset against its server before it is stored.

// PositionChecker is an optional capability of a connect.Source (discovered by type assertion
// on an instance built with the connector's configuration and never opened): it checks that
// the source can resume after pos, e.g. that a binlog file is still on the server or that a
// replication slot can still deliver an LSN. It may connect to the server but must not change
// anything there. The offsets API calls it before storing an altered offset; a returned error
// is shown to the user.
type PositionChecker interface {
	CheckPosition(ctx context.Context, pos connect.Position) error
}

// sourceFormat is what the runtime knows of one source's positions.
type sourceFormat struct {
	// state turns an offset given through the API into the source's State, given the
	// current State (nil if none).
	state func(offset map[string]json.RawMessage, current []byte) ([]byte, []connect.FieldError)
	// target parses a wait position.
	target func(text string) (waitTarget, error)
	// example is a wait position shown in errors.
	example string
}

// waitTarget says whether a source position is at or past a position given to wait.
type waitTarget func(pos connect.Position) bool

var sourceFormats = map[string]sourceFormat{
	"mysql":    {state: mysqlState, target: mysqlTarget, example: "mariadb-bin.000003:1234"},
	"postgres": {state: postgresState, target: postgresTarget, example: "0/16B3748"},
	"datagen":  {state: datagenState, target: datagenTarget, example: "42"},
}

func fieldErr(key, format string, args ...any) []connect.FieldError {
	return []connect.FieldError{{Key: key, Message: fmt.Sprintf(format, args...)}}
}

// SourceOffsetState turns an offset given through the API (a JSON object) into the State of a
// position of the named source plugin; current is the connector's committed State. Problems
// name the offset's field ("offset.file").
func SourceOffsetState(plugin string, offset json.RawMessage, current []byte) ([]byte, []connect.FieldError) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(offset, &fields); err != nil || fields == nil {
		return nil, fieldErr("offset", "must be a JSON object (the source's position)")
	}
	f, ok := sourceFormats[plugin]
	if !ok {
		return bytes.Clone(offset), nil
	}
	return f.state(fields, current)
}

// ParseWaitTarget parses a position given to wait for a source of the named plugin.
func ParseWaitTarget(plugin, text string) (func(connect.Position) bool, error) {
	text = strings.TrimSpace(text)
	if h, ok := strings.CutPrefix(text, "order:"); ok {
		order, err := hex.DecodeString(h)
		if err != nil || len(order) == 0 {
			return nil, fmt.Errorf("order:%s is not a hexadecimal Order", h)
		}
		return func(pos connect.Position) bool {
			return len(pos.Order) > 0 && bytes.Compare(pos.Order, order) >= 0
		}, nil
	}
	f, ok := sourceFormats[plugin]
	if !ok {
		return nil, fmt.Errorf("a %s source's positions are given as order:<hex> (got %q)", plugin, text)
	}
	t, err := f.target(text)
	if err != nil {
		return nil, fmt.Errorf("%w (a %s position looks like %q)", err, plugin, f.example)
	}
	return t, nil
}

// decodeFields decodes the known fields into dst (pointers by name); an unknown field is an
// error naming it, unless it is in ignore.
func decodeFields(fields map[string]json.RawMessage, dst map[string]any, ignore ...string) []connect.FieldError {
	var errs []connect.FieldError
	for k, raw := range fields {
		p, ok := dst[k]
		if !ok {
			if contains(ignore, k) {
				continue
			}
			known := make([]string, 0, len(dst))
			for n := range dst {
				known = append(known, n)
			}
			msg := "unknown field"
			if s, ok := connect.SuggestKey(k, known); ok {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			errs = append(errs, connect.FieldError{Key: "offset." + k, Message: msg})
			continue
		}
		if err := json.Unmarshal(raw, p); err != nil {
			errs = append(errs, connect.FieldError{Key: "offset." + k, Message: fmt.Sprintf("must be %s (got %s)", typeName(p), raw)})
		}
	}
	sortFieldErrors(errs)
	return errs
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func typeName(p any) string {
	switch p.(type) {
	case *string:
		return "a string"
	case *uint32, *uint64, *int64, *uint16:
		return "a non-negative integer"
	case *json.RawMessage:
		return "JSON"
	case *any:
		return "a number or a string"
	}
	return fmt.Sprintf("%T", p)
}

// currentEpoch reads "epoch" from a current State (0 when none).
func currentEpoch(current []byte) uint32 {
	var st struct {
		Epoch uint32 `json:"epoch"`
	}
	_ = json.Unmarshal(current, &st)
	return st.Epoch
}

// MySQL.

func binlogSeq(file string) (uint32, bool) {
	i := strings.LastIndexByte(file, '.')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(file[i+1:], 10, 32)
	return uint32(n), err == nil && i > 0
}

func mysqlState(fields map[string]json.RawMessage, current []byte) ([]byte, []connect.FieldError) {
	var (
		v, epoch, pos, row uint32
		file, gtid         string
		snapshot           json.RawMessage
	)
	if _, sluice := fields["v"]; sluice {
		var incremental json.RawMessage
		errs := decodeFields(fields, map[string]any{"v": &v, "epoch": &epoch, "file": &file, "pos": &pos, "row": &row, "gtid": &gtid, "snapshot": &snapshot, "incremental": &incremental})
		if len(errs) > 0 {
			return nil, errs
		}
		if v != 1 {
			return nil, fieldErr("offset.v", "must be 1 (got %d)", v)
		}
		if len(snapshot) > 0 && string(snapshot) != "null" {
			var obj map[string]json.RawMessage
			if json.Unmarshal(snapshot, &obj) != nil || obj == nil {
				return nil, fieldErr("offset.snapshot", "must be an object")
			}
		} else if errs := checkBinlog(fields, file, pos); errs != nil {
			return nil, errs
		}
		return canonical(fields), nil
	}
	// Debezium's MySQL offset: file and pos; the others are informational here.
	errs := decodeFields(fields, map[string]any{"file": &file, "pos": &pos},
		"row", "event", "gtids", "ts_sec", "server_id", "transaction_id", "snapshot", "snapshot_completed")
	if len(errs) > 0 {
		return nil, errs
	}
	if errs := checkBinlog(fields, file, pos); errs != nil {
		return nil, errs
	}
	st := fmt.Sprintf(`{"v":1,"epoch":%d,"file":%s,"pos":%d}`, currentEpoch(current), strconv.Quote(file), pos)
	return []byte(st), nil
}

func checkBinlog(fields map[string]json.RawMessage, file string, pos uint32) []connect.FieldError {
	if _, ok := fields["file"]; !ok {
		return fieldErr("offset.file", "is required (a binlog file name, e.g. \"mariadb-bin.000003\")")
	}
	if _, ok := binlogSeq(file); !ok {
		return fieldErr("offset.file", "must be a binlog file name ending in a number, e.g. \"mariadb-bin.000003\" (got %q)", file)
	}
	if _, ok := fields["pos"]; !ok {
		return fieldErr("offset.pos", "is required (a binlog position, at least 4)")
	}
	if pos < 4 {
		return fieldErr("offset.pos", "must be a binlog position, at least 4 (got %d)", pos)
	}
	return nil
}

// canonical re-encodes a JSON object compactly (keys sorted).
func canonical(fields map[string]json.RawMessage) []byte {
	b, _ := json.Marshal(fields)
	return b
}

func mysqlTarget(text string) (waitTarget, error) {
	file, p, ok := strings.Cut(text, ":")
	seq, okSeq := binlogSeq(file)
	pos, err := strconv.ParseUint(p, 10, 32)
	if !ok || !okSeq || err != nil {
		return nil, fmt.Errorf("%q is not a binlog file:position", text)
	}
	return func(cp connect.Position) bool {
		var st struct {
			File     string          `json:"file"`
			Pos      uint32          `json:"pos"`
			Snapshot json.RawMessage `json:"snapshot"`
		}
		if json.Unmarshal(cp.State, &st) != nil || len(st.Snapshot) > 0 {
			return false
		}
		s, ok := binlogSeq(st.File)
		return ok && (s > seq || s == seq && uint64(st.Pos) >= pos)
	}, nil
}

// Postgres.

// parseLSN parses PostgreSQL's text form of an LSN, "16/B374D848".
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%q is not an LSN like \"0/16B3748\"", s)
	}
	return h<<32 | l, nil
}

func formatLSN(n uint64) string { return fmt.Sprintf("%X/%X", n>>32, uint32(n)) }

func postgresState(fields map[string]json.RawMessage, current []byte) ([]byte, []connect.FieldError) {
	if _, sluice := fields["v"]; sluice {
		var (
			v, epoch    uint32
			change      uint64
			record      uint16
			lsn, end    string
			snapshotRaw json.RawMessage
		)
		var incremental json.RawMessage
		errs := decodeFields(fields, map[string]any{"v": &v, "epoch": &epoch, "lsn": &lsn, "change": &change, "record": &record, "end": &end, "snapshot": &snapshotRaw, "incremental": &incremental})
		if len(errs) > 0 {
			return nil, errs
		}
		if v != 1 {
			return nil, fieldErr("offset.v", "must be 1 (got %d)", v)
		}
		if len(snapshotRaw) > 0 && string(snapshotRaw) != "null" {
			var obj map[string]json.RawMessage
			if json.Unmarshal(snapshotRaw, &obj) != nil || obj == nil {
				return nil, fieldErr("offset.snapshot", "must be an object")
			}
			return canonical(fields), nil
		}
		if _, err := parseLSN(lsn); err != nil {
			return nil, fieldErr("offset.lsn", "must be an LSN like \"0/16B3748\" (got %q)", lsn)
		}
		if end != "" {
			if _, err := parseLSN(end); err != nil {
				return nil, fieldErr("offset.end", "must be an LSN like \"0/16B37B0\" (got %q)", end)
			}
		}
		return canonical(fields), nil
	}
	// Debezium's Postgres offset: lsn as a number (or sluice's text); the rest is informational.
	var lsnRaw any
	errs := decodeFields(fields, map[string]any{"lsn": &lsnRaw},
		"txId", "ts_usec", "lsn_proc", "lsn_commit", "last_snapshot_record", "snapshot", "messageType")
	if len(errs) > 0 {
		return nil, errs
	}
	var lsn uint64
	switch x := lsnRaw.(type) {
	case float64:
		if x < 0 || x != float64(uint64(x)) {
			return nil, fieldErr("offset.lsn", "must be a non-negative integer or an LSN like \"0/16B3748\" (got %v)", x)
		}
		lsn = uint64(x)
	case string:
		n, err := parseLSN(x)
		if err != nil {
			return nil, fieldErr("offset.lsn", "must be a non-negative integer or an LSN like \"0/16B3748\" (got %q)", x)
		}
		lsn = n
	case nil:
		return nil, fieldErr("offset.lsn", "is required (where streaming resumes, e.g. \"0/16B3748\")")
	default:
		return nil, fieldErr("offset.lsn", "must be a non-negative integer or an LSN like \"0/16B3748\"")
	}
	l := formatLSN(lsn)
	st := fmt.Sprintf(`{"v":1,"epoch":%d,"lsn":%q,"change":0,"record":0,"end":%q}`, currentEpoch(current), l, l)
	return []byte(st), nil
}

func postgresTarget(text string) (waitTarget, error) {
	want, err := parseLSN(text)
	if err != nil {
		return nil, err
	}
	return func(cp connect.Position) bool {
		var st struct {
			LSN      string          `json:"lsn"`
			End      string          `json:"end"`
			Snapshot json.RawMessage `json:"snapshot"`
		}
		if json.Unmarshal(cp.State, &st) != nil || len(st.Snapshot) > 0 {
			return false
		}
		// Transactions come in commit order: everything committed before the resume point
		// (the end of the last whole transaction, else the commit LSN of the one in progress)
		// is out.
		at := st.LSN
		if st.End != "" {
			at = st.End
		}
		n, err := parseLSN(at)
		return err == nil && n >= want
	}, nil
}

// datagen.

func datagenState(fields map[string]json.RawMessage, _ []byte) ([]byte, []connect.FieldError) {
	var v uint32
	var next int64 = -1
	if errs := decodeFields(fields, map[string]any{"v": &v, "next": &next}); len(errs) > 0 {
		return nil, errs
	}
	if v != 1 {
		return nil, fieldErr("offset.v", "must be 1 (got %d)", v)
	}
	if next < 0 {
		return nil, fieldErr("offset.next", "is required: the number of the next event, at least 0")
	}
	return []byte(fmt.Sprintf(`{"v":1,"next":%d}`, next)), nil
}

func datagenTarget(text string) (waitTarget, error) {
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("%q is not an event count", text)
	}
	return func(cp connect.Position) bool {
		var st struct {
			Next int64 `json:"next"`
		}
		return json.Unmarshal(cp.State, &st) == nil && st.Next >= n
	}, nil
}
