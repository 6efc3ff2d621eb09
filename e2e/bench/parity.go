package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// row is one row of a benchmark table in canonical form: ts in microseconds since the epoch
// (UTC).
type row struct {
	ID int64
	V  int64
	S  string
	TS int64
}

// rowColumns are the columns a view row must have, no more and no fewer.
var rowColumns = []string{"id", "v", "s", "ts"}

// viewRow reads a view's row (a Redis hash's fields or an Elasticsearch document's _source):
// integers as JSON numbers or decimal strings, ts as epoch microseconds (MariaDB DATETIME(6))
// or an ISO-8601 string (PostgreSQL timestamptz).
func viewRow(fields map[string]any) (row, error) {
	var r row
	if len(fields) != len(rowColumns) {
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		return r, fmt.Errorf("columns %v, want %v", keys, rowColumns)
	}
	var err error
	if r.ID, err = intField(fields, "id"); err != nil {
		return r, err
	}
	if r.V, err = intField(fields, "v"); err != nil {
		return r, err
	}
	s, ok := fields["s"].(string)
	if !ok {
		return r, fmt.Errorf("column s: %v is not a string", fields["s"])
	}
	r.S = s
	switch ts := fields["ts"].(type) {
	case string:
		if n, err := strconv.ParseInt(ts, 10, 64); err == nil {
			r.TS = n
		} else if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			r.TS = t.UnixMicro()
		} else {
			return r, fmt.Errorf("column ts: %q is neither epoch microseconds nor ISO-8601", ts)
		}
	case json.Number:
		n, err := ts.Int64()
		if err != nil {
			return r, fmt.Errorf("column ts: %w", err)
		}
		r.TS = n
	default:
		return r, fmt.Errorf("column ts: %v (%T)", fields["ts"], fields["ts"])
	}
	return r, nil
}

func intField(fields map[string]any, name string) (int64, error) {
	switch v := fields[name].(type) {
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("column %s: %w", name, err)
		}
		return n, nil
	case json.Number:
		n, err := v.Int64()
		if err != nil {
			return 0, fmt.Errorf("column %s: %w", name, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("column %s: %v (%T) is not an integer", name, fields[name], fields[name])
}

// diffChunk compares a chunk of source rows with the view's rows of the same ids (nil: the
// view has no such row) and returns one line per difference.
func diffChunk(src []row, view []map[string]any) []string {
	var out []string
	for i, s := range src {
		v := view[i]
		if v == nil {
			out = append(out, fmt.Sprintf("id %d: missing from the view", s.ID))
			continue
		}
		got, err := viewRow(v)
		if err != nil {
			out = append(out, fmt.Sprintf("id %d: %v", s.ID, err))
			continue
		}
		if got != s {
			out = append(out, fmt.Sprintf("id %d: view %+v, table %+v", s.ID, got, s))
		}
	}
	return out
}

// sourceRows reads rows of a benchmark table with id > after, in id order, at most limit.
type sourceRows func(ctx context.Context, after int64, limit int) ([]row, error)

func (b *bench) mySource(db string) sourceRows {
	return func(ctx context.Context, after int64, limit int) ([]row, error) {
		c, err := b.myConn(db)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		r, err := c.Execute(fmt.Sprintf("SELECT id, v, s, CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ts) AS SIGNED) FROM %s.t WHERE id > %d ORDER BY id LIMIT %d", db, after, limit))
		if err != nil {
			return nil, err
		}
		out := make([]row, r.RowNumber())
		for i := range out {
			out[i].ID, _ = r.GetInt(i, 0)
			out[i].V, _ = r.GetInt(i, 1)
			out[i].S, _ = r.GetString(i, 2)
			out[i].TS, _ = r.GetInt(i, 3)
		}
		return out, nil
	}
}

func (b *bench) pgSource(schema string) sourceRows {
	return func(ctx context.Context, after int64, limit int) ([]row, error) {
		c, err := b.pgConn(ctx)
		if err != nil {
			return nil, err
		}
		defer c.Close(ctx)
		rs, err := c.Query(ctx, fmt.Sprintf("SELECT id, v, s, (extract(epoch FROM ts) * 1000000)::bigint FROM %s.t WHERE id > $1 ORDER BY id LIMIT $2", schema), after, limit)
		if err != nil {
			return nil, err
		}
		defer rs.Close()
		var out []row
		for rs.Next() {
			var r row
			var v int32
			if err := rs.Scan(&r.ID, &v, &r.S, &r.TS); err != nil {
				return nil, err
			}
			r.V = int64(v)
			out = append(out, r)
		}
		return out, rs.Err()
	}
}

// viewReader fetches the view's rows of the given ids (nil where absent) and counts the rows
// the view holds in all.
type viewReader interface {
	name() string
	fetch(ctx context.Context, ids []int64) ([]map[string]any, error)
	count(ctx context.Context) (int64, error)
}

type redisView struct {
	rc     *redis.Client
	prefix string // <topic>:
}

func (v redisView) name() string { return "redis " + v.prefix + "*" }

func (v redisView) fetch(ctx context.Context, ids []int64) ([]map[string]any, error) {
	p := v.rc.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = p.HGetAll(ctx, v.prefix+strconv.FormatInt(id, 10))
	}
	if _, err := p.Exec(ctx); err != nil {
		return nil, err
	}
	out := make([]map[string]any, len(ids))
	for i, c := range cmds {
		m := c.Val()
		if len(m) == 0 {
			continue
		}
		out[i] = make(map[string]any, len(m))
		for k, val := range m {
			out[i][k] = val
		}
	}
	return out, nil
}

func (v redisView) count(ctx context.Context) (int64, error) {
	var n int64
	var cursor uint64
	for {
		keys, next, err := v.rc.Scan(ctx, cursor, v.prefix+"*", 10000).Result()
		if err != nil {
			return 0, err
		}
		n += int64(len(keys))
		if cursor = next; cursor == 0 {
			return n, nil
		}
	}
}

type esView struct {
	url   string
	index string
}

func (v esView) name() string { return "elasticsearch " + v.index }

func (v esView) fetch(ctx context.Context, ids []int64) ([]map[string]any, error) {
	var body bytes.Buffer
	body.WriteString(`{"ids":[`)
	for i, id := range ids {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `"%d"`, id)
	}
	body.WriteString(`]}`)
	resp, err := httpDo(ctx, "POST", v.url+"/"+v.index+"/_mget", body.Bytes(), 200)
	if err != nil {
		return nil, err
	}
	var got struct {
		Docs []struct {
			Found  bool           `json:"found"`
			Source map[string]any `json:"_source"`
		} `json:"docs"`
	}
	dec := json.NewDecoder(bytes.NewReader(resp))
	dec.UseNumber()
	if err := dec.Decode(&got); err != nil {
		return nil, err
	}
	if len(got.Docs) != len(ids) {
		return nil, fmt.Errorf("_mget returned %d docs for %d ids", len(got.Docs), len(ids))
	}
	out := make([]map[string]any, len(ids))
	for i, d := range got.Docs {
		if d.Found {
			out[i] = d.Source
		}
	}
	return out, nil
}

func (v esView) count(ctx context.Context) (int64, error) {
	if _, err := httpDo(ctx, "POST", v.url+"/"+v.index+"/_refresh", nil, 200); err != nil {
		return 0, err
	}
	resp, err := httpDo(ctx, "GET", v.url+"/"+v.index+"/_count", nil, 200)
	if err != nil {
		return 0, err
	}
	var c struct {
		Count int64 `json:"count"`
	}
	return c.Count, json.Unmarshal(resp, &c)
}

// checkParity compares every row of the source table with the view, in id order, and the
// number of rows; it records the result in the report.
func (b *bench) checkParity(ctx context.Context, workload, table string, src sourceRows, view viewReader) parity {
	p := parity{Workload: workload, View: view.name(), Table: table}
	defer func() {
		b.rep.Parity = append(b.rep.Parity, p)
		if p.ok() {
			b.progress("parity %s %s = %s: %d rows, no difference", workload, view.name(), table, p.Rows)
		} else {
			b.progress("parity %s %s = %s: FAILED: %d differences %v %s", workload, view.name(), table, p.Diffs, p.Examples, p.Err)
		}
	}()
	var after int64 = -1 << 62
	for {
		rows, err := src(ctx, after, 5000)
		if err != nil {
			p.Err = "read table: " + err.Error()
			return p
		}
		if len(rows) == 0 {
			break
		}
		ids := make([]int64, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		got, err := view.fetch(ctx, ids)
		if err != nil {
			p.Err = "read view: " + err.Error()
			return p
		}
		for _, d := range diffChunk(rows, got) {
			p.Diffs++
			if len(p.Examples) < 5 {
				p.Examples = append(p.Examples, d)
			}
		}
		p.Rows += int64(len(rows))
		after = rows[len(rows)-1].ID
	}
	n, err := view.count(ctx)
	if err != nil {
		p.Err = "count view: " + err.Error()
		return p
	}
	if n != p.Rows {
		p.Diffs += abs(n - p.Rows)
		p.Examples = append(p.Examples, fmt.Sprintf("the view holds %d rows, the table %d", n, p.Rows))
	}
	return p
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// checkViews runs the parity check of both views of a pipe against its table.
func (b *bench) checkViews(ctx context.Context, workload string, p pipe) bool {
	var src sourceRows
	table := p.DB + ".t"
	if p.Kind == "mysql" {
		src = b.mySource(p.DB)
		table = "mariadb " + table
	} else {
		src = b.pgSource(p.DB)
		table = "postgres " + table
	}
	rc := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", b.rds.Port)})
	defer rc.Close()
	r1 := b.checkParity(ctx, workload, table, src, redisView{rc: rc, prefix: p.topic() + ":"})
	r2 := b.checkParity(ctx, workload, table, src, esView{url: b.es.URL(), index: strings.ToLower(p.topic())})
	return r1.ok() && r2.ok()
}
