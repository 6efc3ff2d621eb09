package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sluice-cdc/sluice/wal"
)

// ConfigsTopic holds the durable state of connectors (compacted, one partition): one record
// per change, key the connector name, value a storedConnector in JSON. Connectors created
// through the API keep their whole configuration there; connectors of pipeline files keep
// only their target state and offsets generation (their configuration is the file's).
const ConfigsTopic = "__sluice_connect_configs"

var configsSpec = TopicSpec{Partitions: 1, Config: map[string]string{"cleanup.policy": "compact"}}

// Origins of a connector.
const (
	// OriginAPI marks a connector created through the REST API: its configuration is stored in
	// ConfigsTopic and restored at start.
	OriginAPI = "api"
	// OriginFile marks a connector of a pipeline file: re-applied from the file at every start.
	OriginFile = "file"
)

// storedVersion is the version of the stored connector record.
const storedVersion = 1

// storedConnector is one record of ConfigsTopic, version 1:
//
//	{"v":1,"name":"inventory","origin":"api","class":"mysql","config":{...},"state":"PAUSED","generation":2}
//	{"v":1,"name":"orders","origin":"file","state":"STOPPED","generation":1}
//	{"v":1,"name":"old","deleted":true,"generation":3}
//
// config is the configuration as submitted: placeholders unresolved, values written inline
// (secrets included) as given. generation counts the offset alterations and resets of a source
// connector; a deleted connector keeps its record (with deleted set) so that a connector created
// again under the name continues the generation.
type storedConnector struct {
	V          int               `json:"v"`
	Name       string            `json:"name"`
	Origin     string            `json:"origin,omitempty"`
	Class      string            `json:"class,omitempty"`
	Config     map[string]string `json:"config,omitempty"`
	State      State             `json:"state,omitempty"`
	Generation int64             `json:"generation,omitempty"`
	Deleted    bool              `json:"deleted,omitempty"`
}

func (s *storedConnector) encode() []byte {
	s.V = storedVersion
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("runtime: encode stored connector: %v", err)) // maps of strings always encode
	}
	return b
}

// decodeStored parses a stored connector record; every version ever written stays readable.
func decodeStored(key, value []byte) (storedConnector, error) {
	var s storedConnector
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("stored connector %q: %w", key, err)
	}
	if s.V != storedVersion {
		return s, fmt.Errorf("stored connector %q: unknown version %d", key, s.V)
	}
	if s.Name != string(key) {
		return s, fmt.Errorf("stored connector %q: the record names %q", key, s.Name)
	}
	switch s.State {
	case "", StateRunning, StatePaused, StateStopped:
	default:
		return s, fmt.Errorf("stored connector %q: unknown target state %q", key, s.State)
	}
	if s.Generation < 0 {
		return s, fmt.Errorf("stored connector %q: negative generation %d", key, s.Generation)
	}
	if !s.Deleted && s.Origin != OriginAPI && s.Origin != OriginFile {
		return s, fmt.Errorf("stored connector %q: unknown origin %q", key, s.Origin)
	}
	return s, nil
}

// configStore reads and writes ConfigsTopic.
type configStore struct {
	log    Log
	topics *topics
}

// put durably stores s.
func (cs *configStore) put(ctx context.Context, s *storedConnector) error {
	if _, err := cs.topics.partitions(ConfigsTopic, configsSpec); err != nil {
		return err
	}
	rec := []LogRecord{{Key: []byte(s.Name), Value: s.encode()}}
	if _, err := cs.log.Append(ctx, ConfigsTopic, 0, rec, AppendOptions{}); err != nil {
		return fmt.Errorf("store connector %s: %w", s.Name, err)
	}
	return nil
}

// load returns the newest record of every connector, in the order of their last change.
func (cs *configStore) load(ctx context.Context) ([]storedConnector, error) {
	start, end, err := bounds(ctx, cs.log, ConfigsTopic, 0)
	if errors.Is(err, wal.ErrUnknownTopic) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", ConfigsTopic, err)
	}
	latest := map[string]int{}
	var out []storedConnector
	for off := start; off < end; {
		res, err := cs.log.Fetch(ctx, ConfigsTopic, 0, off, FetchOptions{MaxBytes: 1 << 20})
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", ConfigsTopic, err)
		}
		for i := range res.Records {
			r := &res.Records[i]
			if r.Offset >= end || r.Value == nil {
				continue
			}
			s, err := decodeStored(r.Key, r.Value)
			if err != nil {
				return nil, fmt.Errorf("read %s at offset %d: %w", ConfigsTopic, r.Offset, err)
			}
			if j, ok := latest[s.Name]; ok {
				out[j].Name = "" // superseded
			}
			latest[s.Name] = len(out)
			out = append(out, s)
		}
		if res.NextOffset <= off {
			break
		}
		off = res.NextOffset
	}
	kept := out[:0]
	for _, s := range out {
		if s.Name != "" {
			kept = append(kept, s)
		}
	}
	return kept, nil
}
