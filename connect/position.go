package connect

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// Position is a source's resume point, opaque to everything but the source that made it,
// except for its order.
//
// Order is a byte string that compares (bytes.Compare) in the order the source emitted its
// records: every record a source task emits has a strictly greater Order than the one before,
// also across restarts and re-snapshots (a source that starts over, e.g. a when_needed
// re-snapshot, must begin its Orders with a greater prefix, such as an incremented epoch). The
// runtime relies on it to append each record exactly once: after a crash it drops the replayed
// records whose Order is not above what the log already holds for their partition.
//
// An Order must name what was emitted, not how many things were: a source that resumes and
// reads newer data (a snapshot restarted in a fresh MVCC snapshot) must not give a different
// row an Order already used, or the runtime would drop that row as a replay. Snapshot rows
// therefore take their primary key (in an encoding whose byte order is the key order) as the
// tail of their Order, not a row counter.
//
// State is what the source needs to resume right after the position: by convention a JSON
// object carrying a format version, e.g. {"v":1,"file":"mariadb-bin.000003","pos":1234,"row":2}.
// The REST API shows it as JSON and accepts an edited one, so it must stay readable forever.
// The runtime resumes only from a Batch's Position and uses a record's Position only for its
// Order, so records may leave State empty: a source need build State once per batch, not per
// record.
type Position struct {
	Order []byte
	State []byte
}

// IsZero reports whether p is the zero position ("nothing consumed yet").
func (p Position) IsZero() bool { return len(p.Order) == 0 && len(p.State) == 0 }

// Compare orders positions by Order.
func (p Position) Compare(q Position) int { return bytes.Compare(p.Order, q.Order) }

// String renders the position for logs: the order in hex and the state as text.
func (p Position) String() string {
	if p.IsZero() {
		return "(start)"
	}
	return fmt.Sprintf("%s %s", hex.EncodeToString(p.Order), p.State)
}

// Clone returns a copy of p that shares no memory with it.
func (p Position) Clone() Position {
	return Position{Order: bytes.Clone(p.Order), State: bytes.Clone(p.State)}
}

// positionVersion is the first byte of an encoded Position.
const positionVersion = 1

// ErrPositionFormat is wrapped by errors from decoding a malformed Position.
var ErrPositionFormat = errors.New("malformed position")

// MarshalBinary encodes p for storage in the log:
//
//	version (1 byte, = 1) | uvarint len(Order) | Order | State (the rest)
//
// The zero Position encodes as an empty slice.
func (p Position) MarshalBinary() ([]byte, error) {
	if p.IsZero() {
		return []byte{}, nil
	}
	out := make([]byte, 0, 1+binary.MaxVarintLen64+len(p.Order)+len(p.State))
	out = append(out, positionVersion)
	out = binary.AppendUvarint(out, uint64(len(p.Order)))
	out = append(out, p.Order...)
	return append(out, p.State...), nil
}

// UnmarshalBinary decodes what MarshalBinary produced; every version ever written stays
// readable. The result does not share memory with b.
func (p *Position) UnmarshalBinary(b []byte) error {
	if len(b) == 0 {
		*p = Position{}
		return nil
	}
	if b[0] != positionVersion {
		return fmt.Errorf("%w: unknown version %d", ErrPositionFormat, b[0])
	}
	n, w := binary.Uvarint(b[1:])
	if w <= 0 {
		return fmt.Errorf("%w: bad order length", ErrPositionFormat)
	}
	rest := b[1+w:]
	if n > uint64(len(rest)) {
		return fmt.Errorf("%w: order length %d exceeds the %d bytes left", ErrPositionFormat, n, len(rest))
	}
	*p = Position{Order: bytes.Clone(rest[:n]), State: bytes.Clone(rest[n:])}
	if len(p.Order) == 0 {
		p.Order = nil
	}
	if len(p.State) == 0 {
		p.State = nil
	}
	return nil
}

// MarshalJSON renders p as {"order": "<hex>", "state": <state JSON, or a string if not JSON>}.
func (p Position) MarshalJSON() ([]byte, error) {
	if p.IsZero() {
		return []byte("null"), nil
	}
	var state json.RawMessage
	if json.Valid(p.State) {
		state = p.State
	} else {
		s, _ := json.Marshal(string(p.State))
		state = s
	}
	return json.Marshal(struct {
		Order string          `json:"order"`
		State json.RawMessage `json:"state"`
	}{hex.EncodeToString(p.Order), state})
}

// UnmarshalJSON parses what MarshalJSON produced. The state is kept as the raw JSON text.
func (p *Position) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		*p = Position{}
		return nil
	}
	var v struct {
		Order *string         `json:"order"`
		State json.RawMessage `json:"state"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%w: %v", ErrPositionFormat, err)
	}
	if v.Order == nil {
		return fmt.Errorf("%w: missing \"order\"", ErrPositionFormat)
	}
	order, err := hex.DecodeString(*v.Order)
	if err != nil {
		return fmt.Errorf("%w: order is not hex: %v", ErrPositionFormat, err)
	}
	*p = Position{Order: order, State: bytes.Clone(v.State)}
	if len(p.Order) == 0 {
		p.Order = nil
	}
	if len(p.State) == 0 || string(p.State) == "null" {
		p.State = nil
	}
	return nil
}
