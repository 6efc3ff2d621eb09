package mysql

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/sluice-cdc/sluice/connect"
)

// history is the source's durable state besides the position, kept in env.Store (an internal
// topic of the log, replayed in order on Open):
//
//	key "snapshot/<epoch>"       value snapPlan: the tables and start point of a snapshot
//	key "ddl/<file>/<pos>"       value ddlEntry: a DDL statement and the definitions it left
//
// A DDL's entry is appended (durably) before any record decoded after that DDL is emitted. A
// restart that replays the binlog from before a stored DDL finds the entry and does not store
// it twice. Row events are decoded with the table map metadata of their own position, so the
// history is what schema change events and restarts report about table definitions, not what
// decoding depends on.
type history struct {
	store connect.Store
	mu    sync.Mutex
	plans map[uint32]*snapPlan
	ddls  map[string]*ddlEntry
	order []string
}

// ddlEntry is one DDL statement of the binlog.
type ddlEntry struct {
	V      int        `json:"v"`
	File   string     `json:"file"`
	Pos    uint32     `json:"pos"`
	GTID   string     `json:"gtid,omitempty"`
	TsMs   int64      `json:"ts_ms"`
	DB     string     `json:"db"`
	DDL    string     `json:"ddl"`
	Tables []tableDef `json:"tables,omitempty"`
}

// tableDef is a table definition as schema change events carry it.
type tableDef struct {
	Type    string      `json:"type"` // CREATE, ALTER or DROP
	ID      string      `json:"id"`   // db.table
	Columns []columnDef `json:"columns,omitempty"`
	PK      []string    `json:"pk,omitempty"`
}

type columnDef struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Charset  string `json:"charset,omitempty"`
	Optional bool   `json:"optional"`
}

func newHistory(store connect.Store) *history {
	if store == nil {
		store = &memStore{}
	}
	return &history{store: store, plans: map[uint32]*snapPlan{}, ddls: map[string]*ddlEntry{}}
}

func ddlKey(file string, pos uint32) string {
	return "ddl/" + file + "/" + strconv.FormatUint(uint64(pos), 10)
}

func (h *history) load(ctx context.Context) error {
	return h.store.Scan(ctx, func(key, value []byte) error {
		k := string(key)
		switch {
		case strings.HasPrefix(k, "snapshot/"):
			var p snapPlan
			if err := json.Unmarshal(value, &p); err != nil {
				return connect.Permanentf("schema history entry %s: %w", k, err)
			}
			h.plans[p.Epoch] = &p
		case strings.HasPrefix(k, "ddl/"):
			var e ddlEntry
			if err := json.Unmarshal(value, &e); err != nil {
				return connect.Permanentf("schema history entry %s: %w", k, err)
			}
			if _, dup := h.ddls[k]; !dup {
				h.order = append(h.order, k)
			}
			h.ddls[k] = &e
		}
		return nil
	})
}

func (h *history) plan(epoch uint32) (*snapPlan, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.plans[epoch], nil
}

func (h *history) putPlan(ctx context.Context, p *snapPlan) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if err := h.store.Append(ctx, []byte(fmt.Sprintf("snapshot/%d", p.Epoch)), b); err != nil {
		return fmt.Errorf("store snapshot plan: %w", err)
	}
	h.mu.Lock()
	h.plans[p.Epoch] = p
	h.mu.Unlock()
	return nil
}

// has reports whether the DDL at file/pos is stored.
func (h *history) has(file string, pos uint32) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.ddls[ddlKey(file, pos)]
	return ok
}

func (h *history) get(file string, pos uint32) *ddlEntry {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ddls[ddlKey(file, pos)]
}

func (h *history) putDDL(ctx context.Context, e *ddlEntry) error {
	k := ddlKey(e.File, e.Pos)
	if h.has(e.File, e.Pos) {
		return nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if err := h.store.Append(ctx, []byte(k), b); err != nil {
		return fmt.Errorf("store schema history: %w", err)
	}
	h.mu.Lock()
	h.ddls[k] = e
	h.order = append(h.order, k)
	h.mu.Unlock()
	return nil
}

// entries returns the stored DDL entries in the order they were stored.
func (h *history) entries() []*ddlEntry {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*ddlEntry, 0, len(h.order))
	for _, k := range h.order {
		out = append(out, h.ddls[k])
	}
	return out
}

// memStore is a connect.Store in memory, for a source used without the runtime.
type memStore struct {
	mu      sync.Mutex
	entries [][2][]byte
}

func (m *memStore) Append(ctx context.Context, key, value []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries = append(m.entries, [2][]byte{append([]byte(nil), key...), append([]byte(nil), value...)})
	return nil
}

func (m *memStore) Scan(ctx context.Context, fn func(key, value []byte) error) error {
	m.mu.Lock()
	es := append([][2][]byte(nil), m.entries...)
	m.mu.Unlock()
	for _, e := range es {
		if err := fn(e[0], e[1]); err != nil {
			return err
		}
	}
	return nil
}
