package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// percentile returns the q-th quantile (0..1) of xs by the nearest-rank rule: the smallest
// value with at least q of the values at or below it. xs need not be sorted; NaN if empty.
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(q * float64(len(s))))
	if rank < 1 {
		rank = 1
	}
	if rank > len(s) {
		rank = len(s)
	}
	return s[rank-1]
}

// visibility records when each row id first became visible in a view, and how many times a
// Redis row was written.
type visibility struct {
	mu     sync.Mutex
	first  map[int64]time.Time
	writes map[int64]int
	any    []time.Time // arrival times of every notification (Redis), for time-to-first-event
}

func newVisibility() *visibility {
	return &visibility{first: map[int64]time.Time{}, writes: map[int64]int{}}
}

func (v *visibility) saw(id int64, at time.Time, write bool) {
	v.mu.Lock()
	if _, ok := v.first[id]; !ok {
		v.first[id] = at
	}
	if write {
		v.writes[id]++
		v.any = append(v.any, at)
	}
	v.mu.Unlock()
}

func (v *visibility) has(id int64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.first[id]
	return ok
}

func (v *visibility) when(id int64) (time.Time, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	t, ok := v.first[id]
	return t, ok
}

// firstAfter is the first write notification at or after t.
func (v *visibility) firstAfter(t time.Time) (time.Time, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, a := range v.any {
		if !a.Before(t) {
			return a, true
		}
	}
	return time.Time{}, false
}

// duplicates is the number of writes beyond the first of each row.
func (v *visibility) duplicates() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, c := range v.writes {
		if c > 1 {
			n += c - 1
		}
	}
	return n
}

// watchRedis subscribes to the keyspace notifications of the topic's keys and records, for
// each row, the time its first HSET arrived. It returns once subscribed; the watch ends with ctx.
func (b *bench) watchRedis(ctx context.Context, topic string, vis *visibility) (func(), error) {
	rc := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", b.rds.Port)})
	if err := rc.ConfigSet(ctx, "notify-keyspace-events", "Kh").Err(); err != nil {
		rc.Close()
		return nil, err
	}
	prefix := "__keyspace@0__:" + topic + ":"
	ps := rc.PSubscribe(ctx, prefix+"*")
	if _, err := ps.Receive(ctx); err != nil {
		ps.Close()
		rc.Close()
		return nil, err
	}
	ch := ps.Channel(redis.WithChannelSize(100_000))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range ch {
			at := time.Now()
			if m.Payload != "hset" {
				continue
			}
			id, err := strconv.ParseInt(strings.TrimPrefix(m.Channel, prefix), 10, 64)
			if err != nil {
				continue
			}
			vis.saw(id, at, true)
		}
	}()
	stop := func() {
		ps.Close()
		<-done
		rc.Close()
	}
	return stop, nil
}

// watchES polls the index every 50 ms for documents with an id above the highest id below which
// every id has been seen, and records for each row the arrival time of the first response that
// held it (an upper bound of its visibility; resolution 50 ms plus the request's time).
func (b *bench) watchES(ctx context.Context, index string, firstID int64, vis *visibility) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		low := firstID - 1
		for ctx.Err() == nil {
			q := fmt.Sprintf(`{"size":10000,"_source":false,"query":{"range":{"id":{"gt":%d}}},"sort":[{"id":"asc"}]}`, low)
			body, err := httpDo(ctx, "POST", b.es.URL()+"/"+index+"/_search", []byte(q), 200, 404)
			at := time.Now()
			if err == nil {
				var r struct {
					Hits struct {
						Hits []struct {
							ID string `json:"_id"`
						} `json:"hits"`
					} `json:"hits"`
				}
				if json.NewDecoder(bytes.NewReader(body)).Decode(&r) == nil {
					for _, h := range r.Hits.Hits {
						if id, err := strconv.ParseInt(h.ID, 10, 64); err == nil {
							vis.saw(id, at, false)
						}
					}
					for vis.has(low + 1) {
						low++
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() { cancel(); <-done }
}

// latencies are commit-to-visible latencies of a range of rows, in milliseconds, in id order
// (NaN where the row was never seen).
func latencies(rows []row, vis *visibility) []float64 {
	out := make([]float64, len(rows))
	for i, r := range rows {
		t, ok := vis.when(r.ID)
		if !ok {
			out[i] = math.NaN()
			continue
		}
		out[i] = float64(t.UnixMicro()-r.TS) / 1000
	}
	return out
}

// seen drops NaNs.
func seen(xs []float64) []float64 {
	out := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			out = append(out, x)
		}
	}
	return out
}

// lagSlope is how fast the latency grew over a rung: the least-squares slope of latency
// (ms) against commit time (s), in ms per second; NaN without two seen rows.
func lagSlope(rows []row, lat []float64) float64 {
	var n, sx, sy, sxx, sxy float64
	for i, r := range rows {
		if math.IsNaN(lat[i]) {
			continue
		}
		x := float64(r.TS-rows[0].TS) / 1e6
		n++
		sx += x
		sy += lat[i]
		sxx += x * x
		sxy += x * lat[i]
	}
	den := n*sxx - sx*sx
	if n < 2 || den == 0 {
		return math.NaN()
	}
	return (n*sxy - sx*sy) / den
}

// maxSlope is the growth of latency above which a rung's lag is called unbounded: 50 ms per
// second, i.e. sluice applying less than about 95 % of the rate written.
const maxSlope = 50.0

// bounded reports whether every row was seen and the latency did not grow faster than maxSlope.
func bounded(rows []row, lat []float64) bool {
	for _, l := range lat {
		if math.IsNaN(l) {
			return false
		}
	}
	s := lagSlope(rows, lat)
	return math.IsNaN(s) || s <= maxSlope
}

// readRows reads the rows with ids in [lo, hi] of a benchmark table.
func readRows(ctx context.Context, src sourceRows, lo, hi int64) ([]row, error) {
	var out []row
	after := lo - 1
	for {
		rows, err := src(ctx, after, 10000)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			if r.ID > hi {
				return out, nil
			}
			out = append(out, r)
		}
		if len(rows) == 0 {
			return out, nil
		}
		after = rows[len(rows)-1].ID
	}
}
