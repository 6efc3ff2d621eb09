package mysql

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/connect"
)

// Positions.
//
// Order (compared bytewise; strictly increasing per emitted record, across restarts):
//
//	epoch (4 bytes) | phase (1 byte) | phase fields
//	phase 0, snapshot:  table index (4) | 0x01 | encoded primary key        (tables keyed by integers or bytes)
//	                    table index (4) | 0x02 | run (4) | row number (8)    (other tables)
//	phase 1, streaming: binlog file number (4) | transaction start (4) | row (4) | part (1)
//
// The epoch grows by one with each new initial snapshot (snapshot.mode=when_needed after a
// purged binlog), so that a new snapshot's records sort after everything before. In streaming,
// "transaction start" is the binlog position of the transaction's first event (its GTID event),
// "row" counts the row changes of the transaction from 1 (0 is a transaction boundary, used by
// heartbeats), and "part" is 0 for the change event and 1 for the tombstone after a delete.
//
// State is JSON, version 1:
//
//	{"v":1,"epoch":0,"file":"mariadb-bin.000003","pos":1234,"row":2,"gtid":"0-1-42"}
//
// The position of a stream batch adds "incremental" once an incremental snapshot command was
// applied: the snapshot queue and its progress (sources/snapshot, incremental.go). The Orders
// of its chunk rows extend the stream Order of the transaction boundary they follow.
//
// resumes in the transaction that starts at file/pos, after its first row changes (row), and
// checks that the transaction there still has the GTID gtid. An unfinished snapshot adds
// "snapshot": where the snapshot's rows went up to, and where streaming starts after it.

const (
	phaseSnapshot  = 0
	phaseStreaming = 1
	stateVersion   = 1
)

// state is the JSON form of a position's State.
type state struct {
	V     int    `json:"v"`
	Epoch uint32 `json:"epoch"`
	File  string `json:"file,omitempty"`
	Pos   uint32 `json:"pos,omitempty"`
	Row   uint32 `json:"row,omitempty"`
	GTID  string `json:"gtid,omitempty"`
	// Snapshot is set while the initial snapshot has not finished.
	Snapshot *snapState `json:"snapshot,omitempty"`
	// Incr is the incremental snapshot state (sources/snapshot), in the States of stream
	// batches once a snapshot command was applied.
	Incr json.RawMessage `json:"incremental,omitempty"`
}

// snapState is the progress of an unfinished snapshot. File/Pos in the enclosing state are
// where streaming starts once the snapshot is done (its first consistent point).
type snapState struct {
	Tables []string `json:"tables"`          // db.table, in snapshot order
	Table  int      `json:"table"`           // index of the table in progress
	After  []string `json:"after,omitempty"` // primary key of the last row read, encoded by encodeKeyArg
	Rows   int64    `json:"rows"`            // rows read of the table in progress
	Run    uint32   `json:"run,omitempty"`   // restarts of the table in progress (Order of tables without an encodable key)
	// VFile/VPos is the consistent point of the snapshot transaction that read the rows so
	// far, the version of the table's rows.
	VFile string `json:"vfile,omitempty"`
	VPos  uint32 `json:"vpos,omitempty"`
}

func parseState(b []byte) (*state, error) {
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%w: %v", connect.ErrPositionFormat, err)
	}
	if st.V != stateVersion {
		return nil, fmt.Errorf("%w: unknown state version %d", connect.ErrPositionFormat, st.V)
	}
	if st.Snapshot == nil && st.File == "" {
		return nil, fmt.Errorf("%w: state names no binlog file", connect.ErrPositionFormat)
	}
	return &st, nil
}

func (st *state) marshal() []byte {
	b, _ := json.Marshal(st)
	return b
}

// appendStreamState appends the State of a streaming position without reflection (it is built
// for every record).
func appendStreamState(dst []byte, epoch uint32, file string, pos, row uint32, gtid string) []byte {
	dst = append(dst, `{"v":1,"epoch":`...)
	dst = strconv.AppendUint(dst, uint64(epoch), 10)
	dst = append(dst, `,"file":`...)
	dst = strconv.AppendQuote(dst, file)
	dst = append(dst, `,"pos":`...)
	dst = strconv.AppendUint(dst, uint64(pos), 10)
	if row > 0 {
		dst = append(dst, `,"row":`...)
		dst = strconv.AppendUint(dst, uint64(row), 10)
	}
	if gtid != "" {
		dst = append(dst, `,"gtid":`...)
		dst = strconv.AppendQuote(dst, gtid)
	}
	return append(dst, '}')
}

// appendStreamOrder appends a streaming Order.
func appendStreamOrder(dst []byte, epoch, fileSeq, pos, row uint32, part byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, epoch)
	dst = append(dst, phaseStreaming)
	dst = binary.BigEndian.AppendUint32(dst, fileSeq)
	dst = binary.BigEndian.AppendUint32(dst, pos)
	dst = binary.BigEndian.AppendUint32(dst, row)
	return append(dst, part)
}

// fileSeq is the number at the end of a binlog file name ("mariadb-bin.000042" → 42).
func fileSeq(name string) (uint32, error) {
	i := strings.LastIndexByte(name, '.')
	n, err := strconv.ParseUint(name[i+1:], 10, 32)
	if i < 0 || err != nil {
		return 0, fmt.Errorf("binlog file name %q does not end in a number", name)
	}
	return uint32(n), nil
}

// version is the record version of a binlog position (DESIGN.md §2): file number << 32 | pos.
func version(fileSeq, pos uint32) int64 { return int64(fileSeq)<<32 | int64(pos) }

// Snapshot key encoding: order-preserving bytes of a primary key tuple, for the Order of
// snapshot rows (so a restarted snapshot re-reads rows with the same Orders and the runtime
// drops the ones the log holds). Only integer and binary-string keys are encoded; other key
// types use the run/row layout.

// appendKeyInt appends an order-preserving encoding of a signed integer.
func appendKeyInt(dst []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(v)^(1<<63))
}

// appendKeyBytes appends an order-preserving, self-delimiting encoding of a byte string:
// 0x00 becomes 0x00 0xFF and the string ends with 0x00 0x00.
func appendKeyBytes(dst, b []byte) []byte {
	for _, c := range b {
		if c == 0 {
			dst = append(dst, 0, 0xFF)
		} else {
			dst = append(dst, c)
		}
	}
	return append(dst, 0, 0)
}
