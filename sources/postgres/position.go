package postgres

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pglogrepl"

	"github.com/sluice-cdc/sluice/connect"
)

// Positions (connect.Position) of this source.
//
// Order is compared as bytes:
//
//	epoch (uint32) | phase (1 byte: 0 snapshot, 1 stream) | phase-specific fields
//
//	snapshot: table (uint64: index of the table in snapshot order), then either
//	            1 | the row's key, order-preserving encoded (keyed tables whose key types
//	                allow it: integers, uuid, date, timestamp(tz), bool, bytea, text in the
//	                C collation, ctid), or
//	            0 | attempt (uint32) | row (uint64: rows of the table emitted in this attempt)
//	          The key form makes a row's Order the same in every attempt, so the runtime's
//	          replay rule keeps each row once when a crashed snapshot resumes in a newer MVCC
//	          snapshot (where rows may have come and gone). The counter form cannot: a resumed
//	          attempt gets the next attempt number, so its rows sort after everything before
//	          and none is dropped, at the price of repeating the rows that were in flight.
//	stream:   a = commit LSN of the transaction (uint64), b = change << 16 | record: change counts the
//	          change messages of the transaction from 1 (whether their table is captured or
//	          not, so that a changed filter cannot shift it), record the records one change
//	          made (a delete and its tombstone, the three of a primary-key update); 0 for a
//	          heartbeat at LSN a, where no record is
//
// The epoch grows by one with every new snapshot that replaces a lost position
// (snapshot.mode=when_needed), so its records sort after everything before. Within an epoch
// the snapshot sorts before the stream, tables in snapshot order, and transactions in commit
// order: commit LSNs grow in commit order, while the LSNs of the changes do not.
//
// State is JSON, readable forever:
//
//	{"v":1,"epoch":0,"lsn":"0/16B3748","change":3,"record":1}
//	    the records up to the second one of the third change of the transaction committed at
//	    0/16B3748 are out
//	{"v":1,"epoch":0,"lsn":"0/16B3748","change":5,"record":0,"end":"0/16B37B0"}
//	    the whole transaction is out; resume at its end LSN
//	{"v":1,"epoch":0,"snapshot":{"lsn":"0/16B2000","schema":"public","table":"t","table_index":2,"rows":10,"key":["42"]}}
//	    snapshot: 10 rows of public.t are out, the last with chunk key 42; the stream starts
//	    at 0/16B2000 once the snapshot is done
//
// Once an incremental snapshot command was applied, every batch's State also carries
// "incremental": the snapshot queue and its progress (see sources/snapshot). Its rows and
// notifications are emitted between two transactions; their Orders extend the Order of the
// stream position there (sources/snapshot/order.go), and the batch that ends them has the
// Order of its last record.
//
// A heartbeat (an idle slot moved to the server's WAL end W) is {"lsn":W,"change":0,"record":0,"end":W}.

const (
	phaseSnapshot byte = 0
	phaseStream   byte = 1
	stateVersion       = 1
	orderLen           = 4 + 1 + 8 + 8
)

// position is the decoded form of a Position.
type position struct {
	Epoch uint32
	// Snapshot is set while the initial snapshot runs.
	Snapshot *snapshotPos
	// Stream: LSN is the commit LSN of the transaction the last record belongs to (or a
	// heartbeat LSN); Change and Record locate that record in it; End, when set, is where the
	// stream resumes because everything before it is out.
	LSN    pglogrepl.LSN
	Change uint64
	Record uint16
	End    pglogrepl.LSN
	// Incr is the incremental snapshot state ("incremental", see sources/snapshot); nil when
	// none was ever started
	Incr []byte
}

type snapshotPos struct {
	LSN        pglogrepl.LSN // where streaming starts once the snapshot is done
	Schema     string        // the table being read
	Table      string
	TableIndex uint32
	Rows       uint64
	Key        []string // text form of the last emitted row's chunk key; nil before the first
	Attempt    uint32   // counter form: the attempt, raised by every resume within the table
	// order is the key form of the Order (in memory only: it is made from Key by the table's
	// key encoders); nil for the counter form
	order []byte
}

// index is the in-transaction part of the order.
func (p *position) index() uint64 { return p.Change<<16 | uint64(p.Record) }

// resumeLSN is the LSN streaming resumes at, and the index up to which the records of the
// transaction committed there are already out (0: none).
func (p *position) resumeLSN() (pglogrepl.LSN, uint64) {
	if p.End != 0 {
		return p.End, 0
	}
	return p.LSN, p.index()
}

// flushLSN is the LSN the slot may confirm once p is durable: everything committed before it
// is in the log. A snapshot position confirms nothing: the stream must start at its LSN.
func (p *position) flushLSN() pglogrepl.LSN {
	if p.Snapshot != nil {
		return 0
	}
	if p.End != 0 {
		return p.End
	}
	return p.LSN
}

func (p *position) order() []byte {
	if s := p.Snapshot; s != nil {
		b := make([]byte, 0, 4+1+8+1+max(12, len(s.order)))
		b = binary.BigEndian.AppendUint32(b, p.Epoch)
		b = append(b, phaseSnapshot)
		b = binary.BigEndian.AppendUint64(b, uint64(s.TableIndex))
		if s.order != nil {
			b = append(b, 1)
			return append(b, s.order...)
		}
		b = append(b, 0)
		b = binary.BigEndian.AppendUint32(b, s.Attempt)
		return binary.BigEndian.AppendUint64(b, s.Rows)
	}
	b := make([]byte, orderLen)
	binary.BigEndian.PutUint32(b, p.Epoch)
	{
		b[4] = phaseStream
		binary.BigEndian.PutUint64(b[5:], uint64(p.LSN))
		binary.BigEndian.PutUint64(b[13:], p.index())
	}
	return b
}

// appendState appends the JSON state of p to dst.
func (p *position) appendState(dst []byte) []byte {
	dst = append(dst, `{"v":1,"epoch":`...)
	dst = strconv.AppendUint(dst, uint64(p.Epoch), 10)
	if s := p.Snapshot; s != nil {
		dst = append(dst, `,"snapshot":{"lsn":"`...)
		dst = appendLSN(dst, s.LSN)
		dst = append(dst, `","schema":`...)
		dst, _ = connect.AppendJSON(dst, s.Schema)
		dst = append(dst, `,"table":`...)
		dst, _ = connect.AppendJSON(dst, s.Table)
		dst = append(dst, `,"table_index":`...)
		dst = strconv.AppendUint(dst, uint64(s.TableIndex), 10)
		dst = append(dst, `,"rows":`...)
		dst = strconv.AppendUint(dst, s.Rows, 10)
		if s.Key != nil {
			dst = append(dst, `,"key":[`...)
			for i, k := range s.Key {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst, _ = connect.AppendJSON(dst, k)
			}
			dst = append(dst, ']')
		}
		if s.Attempt != 0 {
			dst = append(dst, `,"attempt":`...)
			dst = strconv.AppendUint(dst, uint64(s.Attempt), 10)
		}
		dst = append(dst, '}')
		return appendIncr(dst, p.Incr)
	}
	dst = append(dst, `,"lsn":"`...)
	dst = appendLSN(dst, p.LSN)
	dst = append(dst, `","change":`...)
	dst = strconv.AppendUint(dst, p.Change, 10)
	dst = append(dst, `,"record":`...)
	dst = strconv.AppendUint(dst, uint64(p.Record), 10)
	if p.End != 0 {
		dst = append(dst, `,"end":"`...)
		dst = appendLSN(dst, p.End)
		dst = append(dst, '"')
	}
	return appendIncr(dst, p.Incr)
}

// appendIncr closes a state object, with the incremental snapshot state when there is one.
func appendIncr(dst, incr []byte) []byte {
	if len(incr) > 0 {
		dst = append(dst, `,"incremental":`...)
		dst = append(dst, incr...)
	}
	return append(dst, '}')
}

// withIncr returns a State (a JSON object) with the incremental snapshot state added.
func withIncr(state, incr []byte) []byte {
	if len(incr) == 0 || len(state) == 0 || state[len(state)-1] != '}' {
		return state
	}
	out := make([]byte, 0, len(state)+len(incr)+16)
	out = append(out, state[:len(state)-1]...)
	return appendIncr(out, incr)
}

func (p *position) encode() connect.Position {
	return connect.Position{Order: p.order(), State: p.appendState(nil)}
}

type stateJSON struct {
	V        *int          `json:"v"`
	Epoch    uint32        `json:"epoch"`
	LSN      string        `json:"lsn"`
	Change   uint64        `json:"change"`
	Record   uint16        `json:"record"`
	End      string        `json:"end"`
	Snapshot *snapshotJSON `json:"snapshot"`
	// Incremental is the incremental snapshot state (sources/snapshot)
	Incremental json.RawMessage `json:"incremental"`
}

type snapshotJSON struct {
	LSN        string   `json:"lsn"`
	Schema     string   `json:"schema"`
	Table      string   `json:"table"`
	TableIndex uint32   `json:"table_index"`
	Rows       uint64   `json:"rows"`
	Key        []string `json:"key"`
	Attempt    uint32   `json:"attempt"`
}

var errBadPosition = errors.New("not a postgres source position")

// decodePosition parses a Position this source made. Only the State is read: the Order
// follows from it.
func decodePosition(cp connect.Position) (position, error) {
	var st stateJSON
	if err := json.Unmarshal(cp.State, &st); err != nil {
		return position{}, fmt.Errorf("%w: %v", errBadPosition, err)
	}
	if st.V == nil || *st.V != stateVersion {
		return position{}, fmt.Errorf("%w: want \"v\":1", errBadPosition)
	}
	p := position{Epoch: st.Epoch, Change: st.Change, Record: st.Record}
	if len(st.Incremental) > 0 && string(st.Incremental) != "null" {
		p.Incr = st.Incremental
	}
	var err error
	if st.Snapshot != nil {
		s := &snapshotPos{Schema: st.Snapshot.Schema, Table: st.Snapshot.Table, TableIndex: st.Snapshot.TableIndex, Rows: st.Snapshot.Rows, Key: st.Snapshot.Key, Attempt: st.Snapshot.Attempt}
		if s.LSN, err = pglogrepl.ParseLSN(st.Snapshot.LSN); err != nil {
			return position{}, fmt.Errorf("%w: snapshot.lsn %q: %v", errBadPosition, st.Snapshot.LSN, err)
		}
		p.Snapshot = s
		return p, nil
	}
	if p.LSN, err = pglogrepl.ParseLSN(st.LSN); err != nil {
		return position{}, fmt.Errorf("%w: lsn %q: %v", errBadPosition, st.LSN, err)
	}
	if st.End != "" {
		if p.End, err = pglogrepl.ParseLSN(st.End); err != nil {
			return position{}, fmt.Errorf("%w: end %q: %v", errBadPosition, st.End, err)
		}
	}
	return p, nil
}

// appendLSN appends an LSN as PostgreSQL prints it (%X/%X).
func appendLSN(dst []byte, l pglogrepl.LSN) []byte {
	dst = appendHexUpper(dst, uint64(l)>>32)
	dst = append(dst, '/')
	return appendHexUpper(dst, uint64(l)&0xFFFFFFFF)
}

func appendHexUpper(dst []byte, v uint64) []byte {
	const digits = "0123456789ABCDEF"
	var buf [16]byte
	i := len(buf)
	for {
		i--
		buf[i] = digits[v&0xF]
		v >>= 4
		if v == 0 {
			break
		}
	}
	return append(dst, buf[i:]...)
}

// streamPosition encodes the position of a record of the current transaction in one
// allocation (Order and State share it); prefix is the transaction's state prefix, see
// txStatePrefix.
func streamPosition(epoch uint32, commit pglogrepl.LSN, change uint64, record uint16, prefix []byte) connect.Position {
	b := make([]byte, orderLen, orderLen+len(prefix)+32)
	binary.BigEndian.PutUint32(b, epoch)
	b[4] = phaseStream
	binary.BigEndian.PutUint64(b[5:], uint64(commit))
	binary.BigEndian.PutUint64(b[13:], change<<16|uint64(record))
	b = append(b, prefix...)
	b = strconv.AppendUint(b, change, 10)
	b = append(b, `,"record":`...)
	b = strconv.AppendUint(b, uint64(record), 10)
	b = append(b, '}')
	return connect.Position{Order: b[:orderLen:orderLen], State: b[orderLen:]}
}

// txStatePrefix is the start of the states of a transaction's records, up to "change":.
func txStatePrefix(epoch uint32, commit pglogrepl.LSN) []byte {
	b := append([]byte(nil), `{"v":1,"epoch":`...)
	b = strconv.AppendUint(b, uint64(epoch), 10)
	b = append(b, `,"lsn":"`...)
	b = appendLSN(b, commit)
	return append(b, `","change":`...)
}

// snapshotStatePrefix is the start of the states of a snapshot table's rows, up to "rows":.
func snapshotStatePrefix(epoch uint32, lsn pglogrepl.LSN, schema, table string, tableIndex uint32) []byte {
	b := append([]byte(nil), `{"v":1,"epoch":`...)
	b = strconv.AppendUint(b, uint64(epoch), 10)
	b = append(b, `,"snapshot":{"lsn":"`...)
	b = appendLSN(b, lsn)
	b = append(b, `","schema":`...)
	b, _ = connect.AppendJSON(b, schema)
	b = append(b, `,"table":`...)
	b, _ = connect.AppendJSON(b, table)
	b = append(b, `,"table_index":`...)
	b = strconv.AppendUint(b, uint64(tableIndex), 10)
	return append(b, `,"rows":`...)
}

// snapshotOrder encodes the Order of a snapshot row: keyOrder is the key form (nil: the
// counter form, by attempt and rows).
// Its memory comes from slab (nil: an allocation of its own).
func snapshotOrder(slab *connect.Slab, epoch, tableIndex uint32, keyOrder []byte, attempt uint32, rows uint64) []byte {
	n := 4 + 1 + 8 + 1 + 12
	if keyOrder != nil {
		n = 4 + 1 + 8 + 1 + len(keyOrder)
	}
	var b []byte
	if slab != nil {
		b = slab.Bytes(n)
	} else {
		b = make([]byte, 0, n)
	}
	b = binary.BigEndian.AppendUint32(b, epoch)
	b = append(b, phaseSnapshot)
	b = binary.BigEndian.AppendUint64(b, uint64(tableIndex))
	if keyOrder != nil {
		b = append(b, 1)
		return append(b, keyOrder...)
	}
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, attempt)
	return binary.BigEndian.AppendUint64(b, rows)
}

// snapshotState encodes the State of the position after a snapshot row: prefix is its table's
// snapshotStatePrefix, rows the rows read so far, key the chunk key's text values.
func snapshotState(prefix []byte, rows uint64, key [][]byte, attempt uint32) []byte {
	size := len(prefix) + 48
	for _, k := range key {
		size += len(k) + 8
	}
	b := make([]byte, 0, size)
	b = append(b, prefix...)
	b = strconv.AppendUint(b, rows, 10)
	b = append(b, `,"key":[`...)
	for i, k := range key {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONBytes(b, k)
	}
	b = append(b, ']')
	if attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendUint(b, uint64(attempt), 10)
	}
	return append(b, `}}`...)
}

// appendJSONBytes appends text (UTF-8) as a JSON string.
func appendJSONBytes(dst, s []byte) []byte {
	simple := true
	for _, c := range s {
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			simple = false
			break
		}
	}
	if !simple {
		out, _ := connect.AppendJSON(dst, string(s))
		return out
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
