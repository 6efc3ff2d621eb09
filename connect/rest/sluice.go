package rest

import (
	"context"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
)

func (s *Server) root(w http.ResponseWriter, r *http.Request, _ params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	return writeJSON(w, r, http.StatusOK, map[string]string{
		"version": s.opts.Version, "commit": s.opts.Commit, "kafka_cluster_id": s.opts.ClusterID,
	})
}

func (s *Server) health(w http.ResponseWriter, r *http.Request, _ params) error {
	if s.opts.Ready != nil && !s.opts.Ready() {
		return writeJSON(w, r, http.StatusServiceUnavailable, map[string]string{"status": "starting", "message": "sluice is starting"})
	}
	return writeJSON(w, r, http.StatusOK, map[string]string{"status": "healthy", "message": "sluice is running and serving requests"})
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request, _ params) error {
	if s.opts.Metrics == nil {
		return notFound("metrics are not enabled")
	}
	s.opts.Metrics.handler.ServeHTTP(w, r)
	return nil
}

// Rebuild.

type rebuildInfo struct {
	Name     string `json:"name"`
	State    string `json:"state"`
	Phase    string `json:"phase"`
	Started  int64  `json:"started_ms"`
	Finished *int64 `json:"finished_ms,omitempty"`
	Replayed int64  `json:"replayed_records"`
	Target   int64  `json:"target_records"`
	Error    string `json:"error,omitempty"`
}

func rebuildJSON(name string, st runtime.RebuildStatus) rebuildInfo {
	ri := rebuildInfo{Name: name, State: st.State, Phase: st.Phase, Started: st.Started.UnixMilli(), Replayed: st.Replayed, Target: st.Target, Error: st.Error}
	if !st.Finished.IsZero() {
		f := st.Finished.UnixMilli()
		ri.Finished = &f
	}
	return ri
}

func (s *Server) startRebuild(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	st, err := s.rt.Rebuild(p["c"])
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/connectors/"+url.PathEscape(p["c"])+"/rebuild")
	return writeJSON(w, r, http.StatusAccepted, rebuildJSON(p["c"], st))
}

func (s *Server) rebuildStatus(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	st, ok, err := s.rt.RebuildState(p["c"])
	if err != nil {
		return err
	}
	if !ok {
		return notFound("connector %s has not been rebuilt since sluice started", p["c"])
	}
	return writeJSON(w, r, http.StatusOK, rebuildJSON(p["c"], st))
}

// Lag.

type partitionLag struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Committed int64  `json:"committed_offset"`
	End       int64  `json:"end_offset"`
	Lag       int64  `json:"lag"`
}

type lagInfo struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Sinks: records in the log not yet written to the view.
	Total      *int64         `json:"total_lag,omitempty"`
	Partitions []partitionLag `json:"partitions,omitempty"`
	// Sources: the committed position and how far behind the database the source reads.
	Position                 any    `json:"position,omitempty"`
	MilliSecondsBehindSource *int64 `json:"milliseconds_behind_source,omitempty"`
}

// sinkLag returns a sink connector's lag per partition of its active topics.
func sinkLag(rt *runtime.Runtime, name string) ([]partitionLag, int64, error) {
	topics, err := rt.ActiveTopics(name)
	if err != nil {
		return nil, 0, err
	}
	committed, err := rt.Log().FetchOffsets(runtime.SinkGroup(name))
	if err != nil {
		return nil, 0, err
	}
	var out []partitionLag
	var total int64
	for _, t := range topics {
		info, err := rt.Log().Describe(t)
		if err != nil {
			continue
		}
		for _, pi := range info.Partitions {
			c, ok := committed[runtime.TopicPartition{Topic: t, Partition: pi.Partition}]
			if !ok || c < pi.LogStartOffset {
				c = pi.LogStartOffset
			}
			l := max(pi.HighWatermark-c, 0)
			total += l
			out = append(out, partitionLag{Topic: t, Partition: pi.Partition, Committed: c, End: pi.HighWatermark, Lag: l})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Topic < out[j].Topic || out[i].Topic == out[j].Topic && out[i].Partition < out[j].Partition
	})
	return out, total, nil
}

func (s *Server) lag(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	name := p["c"]
	kind, err := s.rt.Kind(name)
	if err != nil {
		return err
	}
	out := lagInfo{Name: name, Type: kindName(kind)}
	switch kind {
	case connect.KindSink:
		parts, total, err := sinkLag(s.rt, name)
		if err != nil {
			return err
		}
		out.Partitions, out.Total = parts, &total
		if out.Partitions == nil {
			out.Partitions = []partitionLag{}
		}
	case connect.KindSource:
		pos, err := s.rt.SourceOffset(r.Context(), name)
		if err != nil {
			return err
		}
		if !pos.IsZero() {
			out.Position = pos
		}
		inst, _ := s.rt.Instance(name)
		for _, m := range statsOf(inst) {
			if m.name == "milliseconds_behind_source" && len(m.labels) == 0 {
				v := int64(m.value)
				out.MilliSecondsBehindSource = &v
			}
		}
	}
	return writeJSON(w, r, http.StatusOK, out)
}

// Wait.

type waitResult struct {
	Name     string            `json:"name"`
	Source   string            `json:"source"`
	Position string            `json:"position"`
	WaitedMs int64             `json:"waited_ms"`
	Offsets  []committedOffset `json:"offsets"`
}

// committedOffset is a sink's committed offset in one partition.
type committedOffset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Committed int64  `json:"committed_offset"`
}

// parseTimeout reads a timeout given as a Go duration ("30s") or in milliseconds.
func parseTimeout(v string, maxWait time.Duration) (time.Duration, *apiError) {
	if v == "" {
		return min(30*time.Second, maxWait), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		ms, err2 := strconv.ParseInt(v, 10, 64)
		if err2 != nil {
			return 0, badRequest("query parameter timeout must be a duration like 30s or milliseconds (got %q)", v)
		}
		d = time.Duration(ms) * time.Millisecond
	}
	if d <= 0 || d > maxWait {
		return 0, badRequest("query parameter timeout must be above 0 and at most %s (got %q)", maxWait, v)
	}
	return d, nil
}

func (s *Server) wait(w http.ResponseWriter, r *http.Request, p params) error {
	q, aerr := query(r, "position", "timeout", "source")
	if aerr != nil {
		return aerr
	}
	for _, k := range []string{"position", "timeout", "source"} {
		if len(q[k]) > 1 {
			return badRequest("query parameter %s is given %d times", k, len(q[k]))
		}
	}
	position := strings.TrimSpace(q.Get("position"))
	if position == "" {
		return badRequest("query parameter position is required: the source position your write reached (e.g. SELECT pg_current_wal_lsn() on Postgres, SHOW MASTER STATUS on MySQL)")
	}
	timeout, aerr := parseTimeout(q.Get("timeout"), s.opts.MaxWait)
	if aerr != nil {
		return aerr
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	start := time.Now()
	res, err := s.rt.WaitFor(ctx, p["c"], q.Get("source"), position)
	if err != nil {
		return err
	}
	out := waitResult{Name: p["c"], Source: res.Source, Position: position, WaitedMs: time.Since(start).Milliseconds(), Offsets: []committedOffset{}}
	for tp, off := range res.Offsets {
		out.Offsets = append(out.Offsets, committedOffset{Topic: tp.Topic, Partition: tp.Partition, Committed: off})
	}
	sort.Slice(out.Offsets, func(i, j int) bool {
		a, b := out.Offsets[i], out.Offsets[j]
		return a.Topic < b.Topic || a.Topic == b.Topic && a.Partition < b.Partition
	})
	return writeJSON(w, r, http.StatusOK, out)
}

// Loggers.

func (s *Server) loggers(w http.ResponseWriter, r *http.Request, _ params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	return writeJSON(w, r, http.StatusOK, s.opts.Levels.all())
}

func (s *Server) getLogger(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	return writeJSON(w, r, http.StatusOK, s.opts.Levels.get(p["name"]))
}

func (s *Server) setLogger(w http.ResponseWriter, r *http.Request, p params) error {
	q, aerr := query(r, "scope")
	if aerr != nil {
		return aerr
	}
	scope := q.Get("scope")
	if scope != "" && scope != "worker" && scope != "cluster" {
		return badRequest("query parameter scope must be worker or cluster (got %q)", scope)
	}
	body, aerr := readBody(r)
	if aerr != nil {
		return aerr
	}
	fields, aerr := objectFields(body, "")
	if aerr != nil {
		return aerr
	}
	if aerr := checkFields(fields, "", "level"); aerr != nil {
		return aerr
	}
	if len(fields) == 0 {
		return badRequest("level is required: one of %s", levelList())
	}
	v, aerr := stringValue(fields[0], "")
	if aerr != nil {
		return aerr
	}
	lv, ok := parseLevel(v)
	if !ok {
		return badRequest("level must be one of %s (got %q)", levelList(), v)
	}
	name := p["name"]
	if len(name) > 200 {
		return badRequest("logger name is longer than 200 characters")
	}
	affected := s.opts.Levels.Set(name, lv)
	s.logger.Info("log level changed", "logger", name, "level", levelName(lv))
	if scope == "cluster" {
		return writeEmpty(w, http.StatusNoContent)
	}
	return writeJSON(w, r, http.StatusOK, affected)
}

func levelList() string {
	names := make([]string, len(levelNames))
	for i, n := range levelNames {
		names[i] = n.name
	}
	return strings.Join(names, ", ")
}
