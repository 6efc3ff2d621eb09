package rest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/wal"
)

// sluice's own endpoints for the log: topics, partitions and their records.

type topicSummary struct {
	Name       string `json:"name"`
	Partitions int    `json:"partitions"`
	Records    int64  `json:"records"`
	SizeBytes  int64  `json:"size_bytes"`
	Internal   bool   `json:"internal"`
}

type partitionInfo struct {
	Partition      int32 `json:"partition"`
	LogStartOffset int64 `json:"log_start_offset"`
	HighWatermark  int64 `json:"high_watermark"`
	SizeBytes      int64 `json:"size_bytes"`
	Segments       int   `json:"segments"`
}

type topicInfo struct {
	Name       string            `json:"name"`
	Internal   bool              `json:"internal"`
	Config     map[string]string `json:"config"`
	Partitions []partitionInfo   `json:"partitions"`
}

// internalTopic reports the log's and the runtime's own topics.
func internalTopic(name string) bool { return strings.HasPrefix(name, "__") }

func (s *Server) describe(name string) (wal.TopicInfo, error) {
	info, err := s.rt.Log().Describe(name)
	if errors.Is(err, wal.ErrUnknownTopic) {
		return info, notFound("topic %s not found", name)
	}
	return info, err
}

func (s *Server) listTopics(w http.ResponseWriter, r *http.Request, _ params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	out := []topicSummary{}
	for _, name := range s.rt.Log().Topics() {
		info, err := s.rt.Log().Describe(name)
		if err != nil {
			continue // deleted meanwhile
		}
		ts := topicSummary{Name: name, Partitions: len(info.Partitions), Internal: internalTopic(name)}
		for _, p := range info.Partitions {
			ts.Records += p.HighWatermark - p.LogStartOffset
			ts.SizeBytes += p.SizeBytes
		}
		out = append(out, ts)
	}
	return writeJSON(w, r, http.StatusOK, out)
}

func (s *Server) getTopic(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	info, err := s.describe(p["t"])
	if err != nil {
		return err
	}
	out := topicInfo{Name: info.Name, Internal: internalTopic(info.Name), Config: info.Config.Map(), Partitions: []partitionInfo{}}
	for _, pi := range info.Partitions {
		out.Partitions = append(out.Partitions, partitionInfo{
			Partition: pi.Partition, LogStartOffset: pi.LogStartOffset, HighWatermark: pi.HighWatermark,
			SizeBytes: pi.SizeBytes, Segments: pi.Segments,
		})
	}
	return writeJSON(w, r, http.StatusOK, out)
}

type recordsPage struct {
	Topic         string            `json:"topic"`
	Partition     int32             `json:"partition"`
	Records       []json.RawMessage `json:"records"`
	NextOffset    int64             `json:"next_offset"`
	HighWatermark int64             `json:"high_watermark"`
}

// maxRecords bounds one page of records.
const maxRecords = 1000

func (s *Server) records(w http.ResponseWriter, r *http.Request, p params) error {
	q, aerr := query(r, "offset", "limit")
	if aerr != nil {
		return aerr
	}
	topic := p["t"]
	if topic == runtime.ConfigsTopic {
		return errorf(http.StatusForbidden, "topic %s holds connector configurations, secrets included; read them with GET /connectors/{name}/config", topic)
	}
	info, err := s.describe(topic)
	if err != nil {
		return err
	}
	part, err := strconv.ParseInt(p["p"], 10, 32)
	if err != nil || part < 0 {
		return badRequest("partition must be a partition number (got %q)", p["p"])
	}
	if int(part) >= len(info.Partitions) {
		return notFound("topic %s has no partition %d (it has %d)", topic, part, len(info.Partitions))
	}
	pi := info.Partitions[part]
	offset := pi.LogStartOffset
	if v := q.Get("offset"); v != "" {
		if offset, err = strconv.ParseInt(v, 10, 64); err != nil {
			return badRequest("query parameter offset must be an integer (got %q)", v)
		}
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxRecords {
			return badRequest("query parameter limit must be 1..%d (got %q)", maxRecords, v)
		}
		limit = n
	}
	if offset < pi.LogStartOffset || offset > pi.HighWatermark {
		return errorf(http.StatusRequestedRangeNotSatisfiable, "query parameter offset %d is outside %s-%d: it holds offsets %d..%d", offset, topic, part, pi.LogStartOffset, pi.HighWatermark)
	}
	page := recordsPage{Topic: topic, Partition: int32(part), Records: []json.RawMessage{}, NextOffset: offset, HighWatermark: pi.HighWatermark}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	for len(page.Records) < limit && page.NextOffset < page.HighWatermark {
		res, err := s.rt.Log().Fetch(ctx, topic, int32(part), page.NextOffset, wal.FetchOptions{MaxBytes: 1 << 20})
		if err != nil {
			return err
		}
		for i := range res.Records {
			if len(page.Records) == limit {
				break
			}
			rec := &res.Records[i]
			page.Records = append(page.Records, runtime.RenderJSON(nil, topic, int32(part), rec))
			page.NextOffset = rec.Offset + 1
		}
		if len(res.Records) == 0 {
			if res.NextOffset <= page.NextOffset {
				break
			}
			page.NextOffset = res.NextOffset
		}
		page.HighWatermark = res.HighWatermark
	}
	return writeJSON(w, r, http.StatusOK, page)
}
