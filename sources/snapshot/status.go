package snapshot

import (
	"encoding/json"
	"math"
	"slices"
	"time"
)

// Status is the snapshot status document of GET /connectors/{c}/snapshots.
type Status struct {
	// State is IDLE (nothing queued), RUNNING, PAUSED or THROTTLED (chunks wait for
	// incremental.snapshot.max.rows.per.second or max.lag); STARTING while the source
	// has not yet restored its position.
	State     string `json:"state"`
	Throttled string `json:"throttled_by,omitempty"`
	// ChunkID counts the chunks read so far; RemainingTables the tables queued or being read.
	ChunkID         uint64        `json:"chunk_id"`
	RemainingTables int           `json:"remaining_table_count"`
	Tables          []TableStatus `json:"tables"`
}

// TableStatus is one table's progress.
type TableStatus struct {
	Table   string `json:"table"`
	Request string `json:"request"`
	Type    string `json:"type"`
	// State is PENDING (requested, not yet applied), QUEUED, RUNNING, then SUCCEEDED,
	// STOPPED or SKIPPED.
	State         string   `json:"state"`
	Filter        string   `json:"filter,omitempty"`
	ChunkSize     int      `json:"chunk_size,omitempty"`
	RowsScanned   int64    `json:"rows_scanned"`
	RowsEmitted   int64    `json:"rows_emitted"`
	TotalEstimate int64    `json:"total_estimate"`
	Percent       float64  `json:"percent"`
	RowsPerSecond float64  `json:"rows_per_second"`
	ETASeconds    *float64 `json:"eta_seconds,omitempty"`
	LastKey       []string `json:"last_key,omitempty"`
	StartedMs     int64    `json:"started_ms,omitempty"`
	FinishedMs    int64    `json:"finished_ms,omitempty"`
}

// Stats are the engine's metrics (Debezium's incremental snapshot metric names), for the
// source's Stats.
type Stats struct {
	IncrementalSnapshotRunning bool
	IncrementalSnapshotPaused  bool
	// RemainingTableCount counts the tables queued or being read.
	RemainingTableCount int64
	// ChunkID counts the chunks read.
	ChunkID int64
	// RowsScanned counts the rows read per table since the source started.
	RowsScanned map[string]int64
}

// Status returns the published status. Any goroutine.
func (e *Engine) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.status
	if !e.opened {
		// the source has not read its position yet
		return Status{State: "STARTING", Tables: []TableStatus{}}
	}
	st.Tables = append([]TableStatus(nil), st.Tables...)
	// commands stored but not yet applied by the Read goroutine (or applied, not yet published)
	for _, c := range slices.Concat(e.applying, e.pending) {
		if c.Type != SignalExecute && c.Type != signalAddTables {
			continue
		}
		for _, t := range c.Tables {
			st.Tables = append(st.Tables, TableStatus{Table: t.Table, Request: c.ID, Type: c.Kind, State: "PENDING", Filter: t.Filter, TotalEstimate: -1})
		}
	}
	if st.State == "IDLE" && len(e.pending)+len(e.applying) > 0 {
		st.State = "RUNNING"
	}
	return st
}

// StatusJSON returns Status as JSON. Any goroutine.
func (e *Engine) StatusJSON() []byte {
	b, err := json.Marshal(e.Status())
	if err != nil {
		panic(err) // plain data
	}
	return b
}

// Stats returns the engine's metrics. Any goroutine.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	s.RowsScanned = make(map[string]int64, len(e.stats.RowsScanned))
	for k, v := range e.stats.RowsScanned {
		s.RowsScanned[k] = v
	}
	return s
}

// publish rebuilds the status from the Read goroutine's state.
func (e *Engine) publish() {
	now := e.now()
	st := Status{State: "IDLE", ChunkID: e.st.Chunk, RemainingTables: len(e.st.Tables), Tables: []TableStatus{}}
	switch {
	case len(e.st.Tables) > 0 && e.st.Paused:
		st.State = "PAUSED"
	case len(e.st.Tables) > 0 && e.throttled != "":
		st.State, st.Throttled = "THROTTLED", e.throttled
	case len(e.st.Tables) > 0:
		st.State = "RUNNING"
	}
	for _, f := range e.st.Done {
		st.Tables = append(st.Tables, TableStatus{
			Table: f.Table, Request: f.Request, State: f.Status, RowsScanned: f.Rows, RowsEmitted: f.Emitted,
			TotalEstimate: f.Rows, Percent: 100, FinishedMs: f.Finished,
		})
	}
	for i, t := range e.st.Tables {
		ts := TableStatus{
			Table: t.Table, Request: t.Request, Type: t.Type, State: "QUEUED", Filter: t.Filter, ChunkSize: t.ChunkSize,
			RowsScanned: t.Rows, RowsEmitted: t.Emitted, TotalEstimate: t.Total, LastKey: t.After, StartedMs: t.Started,
		}
		if t.Rows > 0 || e.watch[t.Table] != nil || i == 0 && len(e.windows) > 0 {
			ts.State = "RUNNING"
		}
		ts.Percent = percent(t.Rows, t.Total)
		if r := e.rates[t.Table]; r != nil {
			ts.RowsPerSecond = math.Round(r.perSecond(now)*10) / 10
			if ts.RowsPerSecond > 0 && t.Total > t.Rows {
				eta := math.Round(float64(t.Total-t.Rows) / ts.RowsPerSecond)
				ts.ETASeconds = &eta
			}
		}
		st.Tables = append(st.Tables, ts)
	}
	e.mu.Lock()
	e.status = st
	e.applying = nil
	e.stats.IncrementalSnapshotRunning = len(e.st.Tables) > 0 && !e.st.Paused
	e.stats.IncrementalSnapshotPaused = e.st.Paused && len(e.st.Tables) > 0
	e.stats.RemainingTableCount = int64(len(e.st.Tables))
	e.stats.ChunkID = int64(e.st.Chunk)
	e.mu.Unlock()
}

// percent is the progress of a table being read: rows over the estimate, below 100 until the
// table is done (the estimate is a guess; rows that exceed it hold the percent at 99.9).
// It never goes down while rows grow and the estimate stays.
func percent(rows, total int64) float64 {
	if rows <= 0 {
		return 0
	}
	est := max(total, rows)
	p := 100 * float64(rows) / float64(est)
	p = math.Floor(p*10) / 10
	return min(p, 99.9)
}

// rate measures rows per second over the last few seconds.
type rate struct {
	samples [16]sample
	n, next int
}

type sample struct {
	at   time.Time
	rows int64
}

const rateWindow = 10 * time.Second

func (r *rate) add(at time.Time, rows int64) {
	r.samples[r.next] = sample{at, rows}
	r.next = (r.next + 1) % len(r.samples)
	if r.n < len(r.samples) {
		r.n++
	}
}

// perSecond is the rate between the newest sample and the oldest within rateWindow of it
// (or the oldest kept).
func (r *rate) perSecond(now time.Time) float64 {
	if r.n < 2 {
		return 0
	}
	newest := r.samples[(r.next-1+len(r.samples))%len(r.samples)]
	if now.Sub(newest.at) > rateWindow {
		return 0
	}
	oldest := newest
	for i := 2; i <= r.n; i++ {
		s := r.samples[(r.next-i+len(r.samples))%len(r.samples)]
		if newest.at.Sub(s.at) > rateWindow {
			break
		}
		oldest = s
	}
	d := newest.at.Sub(oldest.at).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(newest.rows-oldest.rows) / d
}

// noteRate adds a progress sample of a task and counts its rows for the metrics.
func (e *Engine) noteRate(t *Task) {
	r := e.rates[t.Table]
	if r == nil {
		r = &rate{}
		e.rates[t.Table] = r
		// the first sample is the start of this run's reading
		r.add(e.now(), t.Rows)
		return
	}
	r.add(e.now(), t.Rows)
}

// addScanned counts rows read for the rows_scanned metric.
func (e *Engine) addScanned(table string, n int64) {
	e.mu.Lock()
	if e.stats.RowsScanned == nil {
		e.stats.RowsScanned = map[string]int64{}
	}
	e.stats.RowsScanned[table] += n
	e.mu.Unlock()
}

// throttle says whether chunks must wait, why and for how long.
func (e *Engine) throttle() (string, time.Duration) {
	if e.set.MaxLag > 0 && e.opts.Lag != nil {
		if lag := e.opts.Lag(); lag > e.set.MaxLag {
			return "max.lag.ms", 200 * time.Millisecond
		}
	}
	if e.opts.LagBytes != nil {
		if lag, limit := e.opts.LagBytes(); limit > 0 && lag > limit {
			return "max.slot.lag.bytes", 200 * time.Millisecond
		}
	}
	if d := e.paceWait(); d > 0 {
		return "max.rows.per.second", d
	}
	return "", 0
}

// paceWait is how long the rate limit keeps the next chunk waiting: a token bucket of one
// chunk's rows filled at MaxRowsPerSec, which reads may overdraw.
func (e *Engine) paceWait() time.Duration {
	r := e.set.MaxRowsPerSec
	if r <= 0 {
		return 0
	}
	e.refill()
	if e.tokens >= 0 {
		return 0
	}
	return time.Duration(-e.tokens / r * float64(time.Second))
}

func (e *Engine) refill() {
	now := e.now()
	capacity := float64(e.set.ChunkSize)
	if e.tokensAt.IsZero() {
		e.tokens, e.tokensAt = capacity, now
		return
	}
	e.tokens = min(capacity, e.tokens+now.Sub(e.tokensAt).Seconds()*e.set.MaxRowsPerSec)
	e.tokensAt = now
}

// consume takes read rows from the rate limit and counts them.
func (e *Engine) consume(read int) {
	if e.set.MaxRowsPerSec > 0 {
		e.refill()
		e.tokens -= float64(read)
	}
}

func (e *Engine) setThrottled(why string) {
	if e.throttled != why {
		e.throttled = why
		e.publish()
	}
}
