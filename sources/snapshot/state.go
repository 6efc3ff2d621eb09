package snapshot

import (
	"encoding/json"
	"errors"
	"fmt"
)

// The persisted state: what a source stores under "incremental" in the State of every
// position it emits while it has ever applied a snapshot command, so that a restarted source
// goes on where the log left it. Version 1:
//
//	{"v":1,"seq":3,"chunk":41,"emit":45,"paused":false,
//	 "tables":[{"table":"public.orders","request":"api-1","type":"incremental","filter":"region = 'eu'",
//	            "chunk_size":4096,"key":["id"],"after":["167936"],"rows":167936,"emitted":167901,
//	            "total":200000,"started_ms":1764470000000}],
//	 "done":[{"table":"public.customers","request":"api-1","rows":5000,"emitted":5000,"status":"SUCCEEDED","finished_ms":1764469990000}]}
//
// seq is the last command of the connector's store that was applied (commands after it are
// applied at the next start), chunk the chunks emitted so far (the chunk_id metric), emit the
// emission units (a chunk or a notification) so far (part of the records' Orders), tables the
// queue: the first Parallel incremental tables (or the one blocking table) are read, in
// order; after is the chunk key of the last row read, as the source's text values; done the
// last few finished tables. Unknown fields are ignored, so newer versions may add some.

const stateVersion = 1

// maxDone bounds the finished tables kept in the state.
const maxDone = 16

// Task is one table of a snapshot: queued, or being read.
type Task struct {
	Table     string   `json:"table"`
	Request   string   `json:"request"`
	Type      string   `json:"type"`
	Filter    string   `json:"filter,omitempty"`
	ChunkSize int      `json:"chunk_size"`
	Key       []string `json:"key,omitempty"`   // the chunk key columns
	After     []string `json:"after,omitempty"` // chunk key of the last row read; nil: from the start
	Rows      int64    `json:"rows"`            // rows read
	Emitted   int64    `json:"emitted"`         // rows emitted (read minus those the stream delivered)
	Total     int64    `json:"total"`           // estimated rows to read; -1 until known
	Started   int64    `json:"started_ms"`
}

// Finished is a table whose snapshot ended.
type Finished struct {
	Table    string `json:"table"`
	Request  string `json:"request"`
	Rows     int64  `json:"rows"`
	Emitted  int64  `json:"emitted"`
	Status   string `json:"status"` // SUCCEEDED, STOPPED, SKIPPED
	Finished int64  `json:"finished_ms"`
}

// Types of snapshot.
const (
	TypeIncremental = "incremental"
	TypeBlocking    = "blocking"
)

// state is the persisted state.
type state struct {
	V      int        `json:"v"`
	Seq    uint64     `json:"seq"`
	Chunk  uint64     `json:"chunk"`
	Emit   uint64     `json:"emit"`
	Paused bool       `json:"paused,omitempty"`
	Tables []*Task    `json:"tables,omitempty"`
	Done   []Finished `json:"done,omitempty"`
}

// ErrStateFormat is wrapped by errors from decoding a malformed state.
var ErrStateFormat = errors.New("malformed incremental snapshot state")

// decodeState parses a state; an empty input is the zero state.
func decodeState(b []byte) (state, error) {
	st := state{V: stateVersion}
	if len(b) == 0 || string(b) == "null" {
		return st, nil
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return state{}, fmt.Errorf("%w: %v", ErrStateFormat, err)
	}
	if st.V != stateVersion {
		return state{}, fmt.Errorf("%w: unknown version %d", ErrStateFormat, st.V)
	}
	if len(st.Tables) == 0 {
		st.Tables = nil
	}
	if len(st.Done) == 0 {
		st.Done = nil
	}
	for i, t := range st.Tables {
		if t == nil || t.Table == "" {
			return state{}, fmt.Errorf("%w: tables[%d] names no table", ErrStateFormat, i)
		}
		if t.Type != TypeIncremental && t.Type != TypeBlocking {
			return state{}, fmt.Errorf("%w: tables[%d]: unknown type %q", ErrStateFormat, i, t.Type)
		}
		if t.ChunkSize <= 0 {
			return state{}, fmt.Errorf("%w: tables[%d]: chunk_size %d", ErrStateFormat, i, t.ChunkSize)
		}
		if len(t.Key) == 0 {
			t.Key = nil
		}
		if len(t.After) == 0 {
			t.After = nil
		}
	}
	return st, nil
}

func (st *state) encode() []byte {
	st.V = stateVersion
	b, err := json.Marshal(st)
	if err != nil {
		panic(fmt.Sprintf("encode incremental snapshot state: %v", err)) // plain data: cannot fail
	}
	return b
}

// zero reports whether the state says nothing worth storing (no command ever applied).
func (st *state) zero() bool {
	return st.Seq == 0 && st.Chunk == 0 && st.Emit == 0 && !st.Paused && len(st.Tables) == 0 && len(st.Done) == 0
}

// addDone records a finished table, keeping the newest maxDone.
func (st *state) addDone(f Finished) {
	st.Done = append(st.Done, f)
	if n := len(st.Done); n > maxDone {
		st.Done = append(st.Done[:0:0], st.Done[n-maxDone:]...)
	}
}
