package rest

import (
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strconv"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
)

// Offsets, in Kafka Connect's shape (KIP-875):
//
//	{"offsets": [{"partition": {...}, "offset": {...}}]}
//
// A source connector has one partition, {"server": <topic.prefix, else the connector name>} as
// Debezium names it, and its offset is its position's State (the source's JSON). A sink
// connector has one entry per topic partition: {"kafka_topic", "kafka_partition"} and
// {"kafka_offset"}, the next offset it reads.

type offsetEntry struct {
	Partition map[string]any `json:"partition"`
	Offset    any            `json:"offset"`
}

type offsetsBody struct {
	Offsets []offsetEntry `json:"offsets"`
}

// sourcePartition is the one partition of a source connector.
func (s *Server) sourcePartition(name string) (map[string]any, error) {
	cfg, err := s.displayConfig(name)
	if err != nil {
		return nil, err
	}
	server := name
	if p := cfg["topic.prefix"]; p != "" {
		server = p
	}
	return map[string]any{"server": server}, nil
}

func (s *Server) getOffsets(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	name := p["c"]
	kind, err := s.rt.Kind(name)
	if err != nil {
		return err
	}
	out := offsetsBody{Offsets: []offsetEntry{}}
	switch kind {
	case connect.KindSource:
		pos, err := s.rt.SourceOffset(r.Context(), name)
		if err != nil {
			return err
		}
		if !pos.IsZero() {
			part, err := s.sourcePartition(name)
			if err != nil {
				return err
			}
			var state any = json.RawMessage(pos.State)
			if !json.Valid(pos.State) {
				state = map[string]any{"order": pos.String()}
			}
			out.Offsets = append(out.Offsets, offsetEntry{Partition: part, Offset: state})
		}
	case connect.KindSink:
		offs, err := s.rt.SinkOffsets(name)
		if err != nil {
			return err
		}
		tps := make([]runtime.TopicPartition, 0, len(offs))
		for tp := range offs {
			tps = append(tps, tp)
		}
		sort.Slice(tps, func(i, j int) bool {
			return tps[i].Topic < tps[j].Topic || tps[i].Topic == tps[j].Topic && tps[i].Partition < tps[j].Partition
		})
		for _, tp := range tps {
			out.Offsets = append(out.Offsets, offsetEntry{
				Partition: map[string]any{"kafka_topic": tp.Topic, "kafka_partition": tp.Partition},
				Offset:    map[string]any{"kafka_offset": offs[tp]},
			})
		}
	}
	return writeJSON(w, r, http.StatusOK, out)
}

func (s *Server) alterOffsets(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	name := p["c"]
	kind, err := s.rt.Kind(name)
	if err != nil {
		return err
	}
	body, aerr := readBody(r)
	if aerr != nil {
		return aerr
	}
	fields, aerr := objectFields(body, "")
	if aerr != nil {
		return aerr
	}
	if aerr := checkFields(fields, "", "offsets"); aerr != nil {
		return aerr
	}
	if len(fields) == 0 {
		return badRequest("offsets is required: a list of {\"partition\": {...}, \"offset\": {...}}")
	}
	var list []json.RawMessage
	if rawKind(fields[0].raw) != "an array" || json.Unmarshal(fields[0].raw, &list) != nil {
		return badRequest("offsets must be an array (got %s)", rawKind(fields[0].raw))
	}
	if len(list) == 0 {
		return badRequest("offsets must not be empty")
	}
	type entry struct {
		partition []field
		offset    json.RawMessage
		null      bool
	}
	entries := make([]entry, len(list))
	for i, raw := range list {
		path := "offsets[" + strconv.Itoa(i) + "]"
		ef, aerr := objectFields(raw, path)
		if aerr != nil {
			return aerr
		}
		if aerr := checkFields(ef, path, "partition", "offset"); aerr != nil {
			return aerr
		}
		var e entry
		hasPart, hasOff := false, false
		for _, f := range ef {
			switch f.key {
			case "partition":
				if e.partition, aerr = objectFields(f.raw, path+".partition"); aerr != nil {
					return aerr
				}
				hasPart = true
			case "offset":
				hasOff = true
				if rawKind(f.raw) == "null" {
					e.null = true
				} else if rawKind(f.raw) != "an object" {
					return badRequest("%s.offset must be an object or null (got %s)", path, rawKind(f.raw))
				} else {
					e.offset = f.raw
				}
			}
		}
		if !hasPart {
			return badRequest("%s.partition is required", path)
		}
		if !hasOff {
			return badRequest("%s.offset is required (null resets the partition)", path)
		}
		entries[i] = e
	}
	switch kind {
	case connect.KindSource:
		if len(entries) != 1 {
			return badRequest("offsets: a source connector has one partition; give one entry (got %d)", len(entries))
		}
		want, err := s.sourcePartition(name)
		if err != nil {
			return err
		}
		e := entries[0]
		if aerr := checkFields(e.partition, "offsets[0].partition", "server"); aerr != nil {
			return aerr
		}
		if len(e.partition) != 1 {
			return badRequest("offsets[0].partition must be %s", mustJSON(want))
		}
		server, aerr := stringValue(e.partition[0], "offsets[0].partition")
		if aerr != nil {
			return aerr
		}
		if server != want["server"] {
			return badRequest("offsets[0].partition.server must be %q, the connector's only source partition (got %q)", want["server"], server)
		}
		if e.null {
			if err := s.rt.ResetSourceOffset(r.Context(), name); err != nil {
				return err
			}
			return writeJSON(w, r, http.StatusOK, map[string]string{"message": "The offsets for this connector have been reset successfully"})
		}
		plugin, err := s.rt.Plugin(name)
		if err != nil {
			return err
		}
		cur, err := s.rt.SourceOffset(r.Context(), name)
		if err != nil {
			return err
		}
		state, errs := runtime.SourceOffsetState(plugin.Name, e.offset, cur.State)
		if len(errs) > 0 {
			return badRequest("offsets[0].%s", errs[0].Error())
		}
		if err := s.rt.AlterSourceOffset(r.Context(), name, connect.Position{State: state}); err != nil {
			return err
		}
	case connect.KindSink:
		offs := map[runtime.TopicPartition]int64{}
		for i, e := range entries {
			path := "offsets[" + strconv.Itoa(i) + "]"
			if aerr := checkFields(e.partition, path+".partition", "kafka_topic", "kafka_partition"); aerr != nil {
				return aerr
			}
			var tp runtime.TopicPartition
			var hasTopic, hasPart bool
			for _, f := range e.partition {
				switch f.key {
				case "kafka_topic":
					if tp.Topic, aerr = stringValue(f, path+".partition"); aerr != nil {
						return aerr
					}
					hasTopic = true
				case "kafka_partition":
					n, aerr := intValue(f, path+".partition", 0, 1<<31-1)
					if aerr != nil {
						return aerr
					}
					tp.Partition, hasPart = int32(n), true
				}
			}
			if !hasTopic || !hasPart {
				return badRequest("%s.partition must have kafka_topic and kafka_partition", path)
			}
			if _, dup := offs[tp]; dup {
				return badRequest("%s.partition: %s-%d is given twice", path, tp.Topic, tp.Partition)
			}
			if e.null {
				offs[tp] = -1
				continue
			}
			of, aerr := objectFields(e.offset, path+".offset")
			if aerr != nil {
				return aerr
			}
			if aerr := checkFields(of, path+".offset", "kafka_offset"); aerr != nil {
				return aerr
			}
			if len(of) != 1 {
				return badRequest("%s.offset must have kafka_offset", path)
			}
			n, aerr := intValue(of[0], path+".offset", 0, 1<<63-1)
			if aerr != nil {
				return aerr
			}
			offs[tp] = n
		}
		if err := s.rt.AlterSinkOffsets(r.Context(), name, offs); err != nil {
			var soe *runtime.SinkOffsetError
			if errors.As(err, &soe) {
				for i, e := range entries {
					if partitionIs(e.partition, soe.TP) {
						soe.Index = i
					}
				}
			}
			return err
		}
	default:
		return badRequest("connector %s is neither a source nor a sink", name)
	}
	return writeJSON(w, r, http.StatusOK, map[string]string{"message": "The offsets for this connector have been altered successfully"})
}

func partitionIs(fields []field, tp runtime.TopicPartition) bool {
	var topic string
	var part int64 = -1
	for _, f := range fields {
		switch f.key {
		case "kafka_topic":
			_ = json.Unmarshal(f.raw, &topic)
		case "kafka_partition":
			_ = json.Unmarshal(f.raw, &part)
		}
	}
	return topic == tp.Topic && part == int64(tp.Partition)
}

func (s *Server) resetOffsets(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	name := p["c"]
	kind, err := s.rt.Kind(name)
	if err != nil {
		return err
	}
	switch kind {
	case connect.KindSource:
		err = s.rt.ResetSourceOffset(r.Context(), name)
	case connect.KindSink:
		err = s.rt.ResetSinkOffsets(r.Context(), name)
	default:
		return badRequest("connector %s is neither a source nor a sink", name)
	}
	if err != nil {
		return err
	}
	return writeJSON(w, r, http.StatusOK, map[string]string{"message": "The offsets for this connector have been reset successfully"})
}

// intValue decodes an integer field within [lo, hi].
func intValue(f field, path string, lo, hi int64) (int64, *apiError) {
	name := join(path, f.key)
	if rawKind(f.raw) != "a number" {
		return 0, badRequest("%s must be an integer (got %s)", name, rawKind(f.raw))
	}
	n, err := strconv.ParseInt(string(f.raw), 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, badRequest("%s must be an integer in %d..%d (got %s)", name, lo, hi, f.raw)
	}
	return n, nil
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
