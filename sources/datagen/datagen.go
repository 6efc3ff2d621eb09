// Package datagen is a source that needs no database: a deterministic stream of Debezium
// change events (inserts, updates, deletes followed by tombstones) for a few tables, at a
// configured rate over a configured key space. It serves demos and the runtime's own tests.
//
// Event n (0, 1, 2, ...) is a pure function of the settings and n: slot n mod keys picks a
// key (through a fixed permutation), the key's table and id follow from it, and the key's
// occurrence n / keys picks the operation in the cycle insert, update, update, delete. So a
// restarted source re-emits exactly the records it emitted before, and a test can compute
// what the log must hold.
//
// Positions: each record's Order is n (8 bytes, big-endian) followed by 0 for the event and 1
// for the tombstone after it, so Orders grow strictly in emission order. A batch's Position
// State is {"v":1,"next":N}: the next event to emit.
//
//	connectors:
//	  - name: gen
//	    class: datagen
//	    config:
//	      topic.prefix: demo
//	      datagen.keys: 100
//	      datagen.rate: 50
package datagen

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/connect"
)

// Config keys.
const (
	KeyTopicPrefix = "topic.prefix"
	KeyDatabase    = "datagen.database"
	KeyTables      = "datagen.tables"
	KeyKeys        = "datagen.keys"
	KeyRate        = "datagen.rate"
	KeyBatchSize   = "datagen.batch.size"
	KeyMaxEvents   = "datagen.max.events"
	KeySeed        = "datagen.seed"
	KeyTombstones  = "tombstones.on.delete"
)

// Tables lists the tables datagen can generate.
var Tables = []string{"customers", "orders", "products"}

// Version is the plugin's version.
const Version = "1.0.0"

// Plugin returns the datagen source plugin.
func Plugin() connect.Plugin {
	return connect.Plugin{
		Name:    "datagen",
		Kind:    connect.KindSource,
		Version: Version,
		Doc:     "Generates a deterministic stream of change events (inserts, updates, deletes and tombstones) for demos and tests.",
		Config: connect.ConfigDef{
			{Name: KeyTopicPrefix, Type: connect.TypeString, Default: "datagen", HasDefault: true, Check: checkPrefix, Importance: connect.High,
				Doc: "Prefix of the topic names: <topic.prefix>.<datagen.database>.<table>."},
			{Name: KeyDatabase, Type: connect.TypeString, Default: "inventory", HasDefault: true, Check: checkPrefix,
				Doc: "The database name in topic names and in the source block."},
			{Name: KeyTables, Type: connect.TypeList, Default: strings.Join(Tables, ","), HasDefault: true, Check: checkTables,
				Doc: "Tables to generate, among customers, orders, products."},
			{Name: KeyKeys, Type: connect.TypeLong, Default: "1000", HasDefault: true, Check: connect.InRange(1, 1<<40),
				Doc: "Number of distinct keys (rows) across the tables."},
			{Name: KeyRate, Type: connect.TypeDouble, Default: "0", HasDefault: true, Check: checkRate,
				Doc: "Events per second; 0 generates as fast as the log takes them."},
			{Name: KeyBatchSize, Type: connect.TypeInt, Default: "100", HasDefault: true, Check: connect.InRange(1, 100000),
				Doc: "Most events returned by one read."},
			{Name: KeyMaxEvents, Type: connect.TypeLong, Default: "0", HasDefault: true, Check: connect.AtLeast(0),
				Doc: "Stop generating after this many events (the source then idles); 0 never stops."},
			{Name: KeySeed, Type: connect.TypeLong, Default: "1", HasDefault: true,
				Doc: "Seed of the generated values and of the key order."},
			{Name: KeyTombstones, Type: connect.TypeBoolean, Default: "true", HasDefault: true,
				Doc: "Emit a tombstone (null value) after each delete event."},
		},
		NewSource: func(cfg connect.Config, env connect.Env) (connect.Source, error) {
			return New(SettingsFrom(cfg)), nil
		},
	}
}

func checkPrefix(v string) error {
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return fmt.Errorf("must use only A-Z a-z 0-9 . _ - (got %q)", v)
		}
	}
	if v == "" {
		return fmt.Errorf("must not be empty")
	}
	return nil
}

func checkTables(v string) error {
	items := connect.SplitList(v)
	if len(items) == 0 {
		return fmt.Errorf("must name at least one of %s", strings.Join(Tables, ", "))
	}
	seen := map[string]bool{}
	for _, t := range items {
		if tableIndex(t) < 0 {
			return fmt.Errorf("must name tables among %s (got %q)", strings.Join(Tables, ", "), t)
		}
		if seen[t] {
			return fmt.Errorf("names %q twice", t)
		}
		seen[t] = true
	}
	return nil
}

func checkRate(v string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || f < 0 || f > 1e9 {
		return fmt.Errorf("must be 0..1e9 events per second (got %s)", v)
	}
	return nil
}

func tableIndex(name string) int {
	for i, t := range Tables {
		if t == name {
			return i
		}
	}
	return -1
}

// Settings determine the generated stream.
type Settings struct {
	Prefix     string
	Database   string
	Tables     []string
	Keys       int64
	Seed       int64
	Tombstones bool
	// Rate is events per second (0: unlimited); BatchSize the most events per Read;
	// MaxEvents the count after which the source idles (0: never).
	Rate      float64
	BatchSize int
	MaxEvents int64
}

// SettingsFrom reads settings from a validated configuration.
func SettingsFrom(cfg connect.Config) Settings {
	return Settings{
		Prefix:     cfg.String(KeyTopicPrefix),
		Database:   cfg.String(KeyDatabase),
		Tables:     cfg.List(KeyTables),
		Keys:       cfg.Int(KeyKeys),
		Seed:       cfg.Int(KeySeed),
		Tombstones: cfg.Bool(KeyTombstones),
		Rate:       cfg.Float(KeyRate),
		BatchSize:  int(cfg.Int(KeyBatchSize)),
		MaxEvents:  cfg.Int(KeyMaxEvents),
	}
}

// Topic returns the topic of a table.
func (s Settings) Topic(table string) string { return s.Prefix + "." + s.Database + "." + table }

// baseMs is the synthetic commit time of event 0 (2024-01-01T00:00:00Z); event n commits n
// milliseconds later.
const baseMs = 1704067200000

// Ops in the cycle each key goes through.
var cycle = [4]connect.Op{connect.OpCreate, connect.OpUpdate, connect.OpUpdate, connect.OpDelete}

// Key identifies event n's row: its table and id.
func (s Settings) Key(n int64) (table string, id int64) {
	t, id := newGen(s).key(n)
	return s.Tables[t], id
}

// gen generates events of some Settings, with what every event needs computed once.
type gen struct {
	s          Settings
	mult, add  uint64 // the key permutation: slot → (slot*mult + add) mod Keys
	topics     []string
	tables     []any // table names, boxed once
	kinds      []int // index in Tables of each of s.Tables
	prefix, db any
}

func newGen(s Settings) *gen {
	g := &gen{s: s, prefix: s.Prefix, db: s.Database}
	a := int64(0x9E3779B1) % s.Keys
	if a == 0 {
		a = 1
	}
	for gcd(a, s.Keys) != 1 {
		a++
	}
	g.mult, g.add = uint64(a), uint64(s.Seed)%uint64(s.Keys)
	for _, t := range s.Tables {
		g.topics = append(g.topics, s.Topic(t))
		g.tables = append(g.tables, t)
		g.kinds = append(g.kinds, tableIndex(t))
	}
	return g
}

// key returns event n's table (an index in s.Tables) and id.
func (g *gen) key(n int64) (int, int64) {
	k := int64((uint64(n%g.s.Keys)*g.mult + g.add) % uint64(g.s.Keys))
	t := int64(len(g.s.Tables))
	return int(k % t), k/t + 1
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Op returns event n's operation.
func (s Settings) Op(n int64) connect.Op { return cycle[(n/s.Keys)%4] }

// Order returns the Order of event n's record (sub 0) or of its tombstone (sub 1).
func Order(n int64, sub byte) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 9), uint64(n))
	return append(b, sub)
}

// Records returns the records of event n: the change event, and for a delete the tombstone
// when Tombstones is set. They carry their Positions (Order only) and Version n+1.
func (s Settings) Records(n int64) []connect.Record {
	var b batchMem
	return newGen(s).appendRecords(nil, &b, n)
}

// batchMem is where one batch's records are built: values, rows and strings from a Slab,
// Orders cut from one byte chunk, so that a batch costs a few allocations, not a dozen per
// event. A new one per batch (see connect.Slab).
type batchMem struct {
	slab   connect.Slab
	orders []byte
	email  []byte // scratch
}

// order returns the Order of event n's record (sub 0) or of its tombstone (sub 1).
func (b *batchMem) order(n int64, sub byte) []byte {
	if cap(b.orders)-len(b.orders) < 9 {
		b.orders = make([]byte, 0, 9*max(b.slab.N/8, 16))
	}
	start := len(b.orders)
	b.orders = binary.BigEndian.AppendUint64(b.orders, uint64(n))
	b.orders = append(b.orders, sub)
	return b.orders[start : start+9 : start+9]
}

func (g *gen) appendRecords(dst []connect.Record, b *batchMem, n int64) []connect.Record {
	s := g.s
	sl := &b.slab
	t, id := g.key(n)
	idv := sl.Int(id)
	kind := g.kinds[t]
	j := n / s.Keys
	op := s.Op(n)
	ts := int64(baseMs) + n
	tsv := sl.Int(ts)
	key := sl.Fields(1)
	key[0] = connect.Field{Name: "id", Value: idv}
	var before, after any
	if op != connect.OpCreate {
		before = sl.Row(g.row(b, kind, id, idv, j-1))
	}
	if op != connect.OpDelete {
		after = sl.Row(g.row(b, kind, id, idv, j))
	}
	source := sl.Fields(8)
	source[0] = connect.Field{Name: "version", Value: Version}
	source[1] = connect.Field{Name: "connector", Value: "datagen"}
	source[2] = connect.Field{Name: "name", Value: g.prefix}
	source[3] = connect.Field{Name: "ts_ms", Value: tsv}
	source[4] = connect.Field{Name: "snapshot", Value: "false"}
	source[5] = connect.Field{Name: "db", Value: g.db}
	source[6] = connect.Field{Name: "table", Value: g.tables[t]}
	source[7] = connect.Field{Name: "seq", Value: sl.Int(n)}
	// The envelope, as connect.ChangeEvent.Row builds it.
	value := sl.Fields(5)
	value[0] = connect.Field{Name: connect.FieldBefore, Value: before}
	value[1] = connect.Field{Name: connect.FieldAfter, Value: after}
	value[2] = connect.Field{Name: connect.FieldSource, Value: sl.Row(source)}
	value[3] = connect.Field{Name: connect.FieldOp, Value: op.Boxed()}
	value[4] = connect.Field{Name: connect.FieldTsMs, Value: tsv}
	topic := g.topics[t]
	at := time.UnixMilli(ts).UTC()
	keyv, valuev := sl.Row(key), sl.Row(value)
	dst = append(dst, connect.Record{
		Topic: topic, Partition: -1, Offset: -1, Timestamp: at,
		Key: keyv, Value: valuev, Version: n + 1,
		Position: connect.Position{Order: b.order(n, 0)},
	})
	if op == connect.OpDelete && s.Tombstones {
		dst = append(dst, connect.Record{
			Topic: topic, Partition: -1, Offset: -1, Timestamp: at,
			Key: keyv, Version: n + 1,
			Position: connect.Position{Order: b.order(n, 1)},
		})
	}
	return dst
}

// row returns the image of row id (boxed: idv) of table Tables[kind] after its j-th change.
func (g *gen) row(b *batchMem, kind int, id int64, idv any, j int64) connect.Row {
	sl := &b.slab
	h := mix(uint64(g.s.Seed)*0x9E3779B97F4A7C15 ^ uint64(id)*0xBF58476D1CE4E5B9 ^ uint64(j)*0x94D049BB133111EB ^ uint64(kind))
	switch Tables[kind] {
	case "customers":
		f := h % uint64(len(firstNames))
		l := (h >> 8) % uint64(len(lastNames))
		email := append(b.email[:0], lowerFirst[f]...)
		email = append(email, '.')
		email = append(email, lowerLast[l]...)
		email = strconv.AppendInt(email, id, 10)
		email = append(email, "@example.com"...)
		b.email = email
		r := sl.Fields(5)
		r[0] = connect.Field{Name: "id", Value: idv}
		r[1] = connect.Field{Name: "first_name", Value: firstAny[f]}
		r[2] = connect.Field{Name: "last_name", Value: lastAny[l]}
		r[3] = connect.Field{Name: "email", Value: sl.String(sl.Text(email))}
		r[4] = connect.Field{Name: "revision", Value: sl.Int(j)}
		return r
	case "orders":
		r := sl.Fields(6)
		r[0] = connect.Field{Name: "id", Value: idv}
		r[1] = connect.Field{Name: "customer_id", Value: sl.Int(int64(h%1000) + 1)}
		r[2] = connect.Field{Name: "quantity", Value: sl.Int(int64((h>>10)%20) + 1)}
		r[3] = connect.Field{Name: "price", Value: sl.String(strconv.FormatInt(int64((h>>20)%100000), 10) + "." + fmt.Sprintf("%02d", (h>>40)%100))}
		r[4] = connect.Field{Name: "status", Value: statuses[(h>>48)%uint64(len(statuses))]}
		r[5] = connect.Field{Name: "revision", Value: sl.Int(j)}
		return r
	default:
		r := sl.Fields(5)
		r[0] = connect.Field{Name: "id", Value: idv}
		r[1] = connect.Field{Name: "name", Value: sl.String(adjectives[h%uint64(len(adjectives))] + " " + nouns[(h>>8)%uint64(len(nouns))])}
		r[2] = connect.Field{Name: "weight", Value: sl.Float(float64((h>>16)%10000) / 100)}
		r[3] = connect.Field{Name: "in_stock", Value: (h>>32)&1 == 1}
		r[4] = connect.Field{Name: "revision", Value: sl.Int(j)}
		return r
	}
}

func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return x
}

var (
	firstNames = []string{"Anne", "Sally", "George", "Edward", "Maria", "Kenji", "Aiko", "Lars", "Ines", "Tomas", "Priya", "Omar"}
	lastNames  = []string{"Kretchmar", "Thomas", "Bailey", "Walker", "Garcia", "Tanaka", "Nilsson", "Silva", "Novak", "Rao", "Haddad"}
	statuses   = []string{"new", "paid", "shipped", "delivered", "returned"}
	adjectives = []string{"small", "large", "red", "blue", "heavy", "light", "spare", "fine"}
	nouns      = []string{"scooter", "drill", "hammer", "rocks", "battery", "screws", "spanner", "ladder"}

	firstAny, lastAny     = boxAll(firstNames), boxAll(lastNames)
	lowerFirst, lowerLast = lowerAll(firstNames), lowerAll(lastNames)
)

func boxAll(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func lowerAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.ToLower(s)
	}
	return out
}

// Source is the datagen source.
type Source struct {
	s     Settings
	g     *gen
	next  int64
	start time.Time // when rate limiting began
	sent  int64     // events emitted since start
	now   func() time.Time
}

// New returns a source for settings s.
func New(s Settings) *Source {
	if s.BatchSize <= 0 {
		s.BatchSize = 100
	}
	return &Source{s: s, g: newGen(s), now: time.Now}
}

// Open implements connect.Source: it resumes at the event after the position.
func (src *Source) Open(ctx context.Context, after connect.Position) error {
	src.next = 0
	if len(after.State) > 0 {
		v, err := connect.ParseJSON(after.State)
		if err != nil {
			return connect.Permanentf("datagen position %s: %w", after.State, err)
		}
		row, _ := v.(connect.Row)
		nv, ok := row.Get("next")
		if !ok {
			return connect.Permanentf("datagen position %s: no \"next\"", after.State)
		}
		n, err := connect.AsInt64(nv)
		if err != nil || n < 0 {
			return connect.Permanentf("datagen position %s: bad \"next\"", after.State)
		}
		src.next = n
	}
	src.start, src.sent = src.now(), 0
	return nil
}

// Read implements connect.Source.
func (src *Source) Read(ctx context.Context) (connect.Batch, error) {
	n := int64(src.s.BatchSize)
	if src.s.MaxEvents > 0 {
		n = min(n, src.s.MaxEvents-src.next)
		if n <= 0 {
			<-ctx.Done()
			return connect.Batch{}, ctx.Err()
		}
	}
	if src.s.Rate > 0 {
		for {
			allowed := int64(src.now().Sub(src.start).Seconds()*src.s.Rate) + 1 - src.sent
			if allowed > 0 {
				n = min(n, allowed)
				break
			}
			wait := time.Duration(float64(src.sent)/src.s.Rate*float64(time.Second)) - src.now().Sub(src.start)
			t := time.NewTimer(max(wait, time.Millisecond))
			select {
			case <-ctx.Done():
				t.Stop()
				return connect.Batch{}, ctx.Err()
			case <-t.C:
			}
		}
	}
	recs := make([]connect.Record, 0, n+n/4+1)
	// a new batchMem per batch: the runtime owns the records once Read returns
	b := &batchMem{slab: connect.Slab{N: 2 * int(n)}}
	for i := int64(0); i < n; i++ {
		recs = src.g.appendRecords(recs, b, src.next+i)
	}
	src.next += n
	src.sent += n
	last := recs[len(recs)-1].Position.Order
	state := strconv.AppendInt([]byte(`{"v":1,"next":`), src.next, 10)
	state = append(state, '}')
	return connect.Batch{Records: recs, Position: connect.Position{Order: last, State: state}}, nil
}

// Ack implements connect.Source; datagen holds nothing to release.
func (src *Source) Ack(ctx context.Context, upTo connect.Position) error { return nil }

// Close implements connect.Source.
func (src *Source) Close(ctx context.Context) error { return nil }
