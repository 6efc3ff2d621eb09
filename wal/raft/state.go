package raft

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"sync"

	"github.com/sluice-cdc/sluice/wal"
)

// MetaTopic is the internal topic holding the cluster's topics: which
// exist, their configuration and the replicas of each partition. Like the
// other internal topics it has one partition replicated on every node.
const MetaTopic = "__sluice_cluster"

// internalTopics are replicated on every node.
var internalTopics = []string{MetaTopic, wal.ProducersTopic, wal.OffsetsTopic}

func isInternal(name string) bool {
	for _, t := range internalTopics {
		if t == name {
			return true
		}
	}
	return false
}

func internalConfig() wal.TopicConfig {
	c := wal.DefaultTopicConfig()
	c.Delete, c.Compact = false, true
	c.SegmentBytes = 16 << 20
	return c
}

// topicMeta is a topic as the cluster knows it.
type topicMeta struct {
	name     string
	cfg      wal.TopicConfig
	rf       int
	replicas [][]uint64 // per partition, sorted
}

// The MetaTopic record of a topic: key "t" + name, value
//
//	version u8 (1) | replication factor u8 | partitions u32 |
//	per partition: count u8, node ids u64… | settings count u16 |
//	(key string, value string)… (Kafka names, see wal.TopicConfig.Map)
func encodeTopicMeta(tm *topicMeta) wal.Record {
	e := enc{}
	e.u8(1)
	e.u8(uint8(tm.rf))
	e.u32(uint32(len(tm.replicas)))
	for _, r := range tm.replicas {
		e.u8(uint8(len(r)))
		for _, id := range r {
			e.u64(id)
		}
	}
	m := tm.cfg.Map()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	e.u16(uint16(len(keys)))
	for _, k := range keys {
		e.str(k)
		e.str(m[k])
	}
	return wal.Record{Key: append([]byte("t"), tm.name...), Value: e.b}
}

func decodeTopicMeta(r wal.Record) (*topicMeta, error) {
	if len(r.Key) < 2 || r.Key[0] != 't' {
		return nil, fmt.Errorf("unknown cluster record key %q", r.Key)
	}
	d := dec{b: r.Value}
	if v := d.u8(); v != 1 {
		return nil, fmt.Errorf("cluster record version %d", v)
	}
	tm := &topicMeta{name: string(r.Key[1:]), rf: int(d.u8())}
	n := d.u32()
	if n > math.MaxInt32 || uint64(n) > uint64(len(d.b)) {
		return nil, errShortFrame
	}
	for i := uint32(0); i < n && d.err == nil; i++ {
		k := int(d.u8())
		ids := make([]uint64, 0, k)
		for j := 0; j < k; j++ {
			ids = append(ids, d.u64())
		}
		tm.replicas = append(tm.replicas, ids)
	}
	kv := map[string]string{}
	for i, c := 0, int(d.u16()); i < c && d.err == nil; i++ {
		k := d.str()
		kv[k] = d.str()
	}
	if d.err != nil {
		return nil, fmt.Errorf("cluster record of %s: %w", tm.name, d.err)
	}
	cfg, err := wal.ParseTopicConfig(wal.DefaultTopicConfig(), kv)
	if err != nil {
		return nil, fmt.Errorf("cluster record of %s: %w", tm.name, err)
	}
	tm.cfg = cfg
	return tm, nil
}

// assign places each partition's replicas on rf consecutive nodes of the
// sorted node list, starting at a place derived from the topic's name, so
// that topics spread over the nodes.
func assign(name string, partitions int32, rf int, nodes []uint64) [][]uint64 {
	h := fnv.New32a()
	h.Write([]byte(name))
	start := int(h.Sum32() % uint32(len(nodes)))
	out := make([][]uint64, partitions)
	for p := range out {
		r := make([]uint64, rf)
		for i := range r {
			r[i] = nodes[(start+p+i)%len(nodes)]
		}
		sort.Slice(r, func(i, j int) bool { return r[i] < r[j] })
		out[p] = r
	}
	return out
}

// metaState is the applied content of MetaTopic.
type metaState struct {
	mu      sync.RWMutex
	topics  map[string]*topicMeta
	changed chan struct{}
	// created is called (from the meta group's loop) for each topic added.
	created func(tm *topicMeta) error
}

func newMetaState() *metaState {
	return &metaState{topics: map[string]*topicMeta{}, changed: make(chan struct{})}
}

func (m *metaState) apply(recs []wal.Record) error {
	for _, r := range recs {
		if r.Value == nil {
			continue
		}
		tm, err := decodeTopicMeta(r)
		if err != nil {
			return err
		}
		m.mu.RLock()
		_, exists := m.topics[tm.name]
		m.mu.RUnlock()
		if exists {
			continue
		}
		// The local replicas first: once the topic is known here, this
		// node can serve it.
		if m.created != nil {
			if err := m.created(tm); err != nil {
				return err
			}
		}
		m.mu.Lock()
		m.topics[tm.name] = tm
		close(m.changed)
		m.changed = make(chan struct{})
		m.mu.Unlock()
	}
	return nil
}

func (m *metaState) get(name string) (*topicMeta, chan struct{}) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.topics[name], m.changed
}

func (m *metaState) names() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]string, 0, len(m.topics))
	for n := range m.topics {
		out = append(out, n)
	}
	return out
}

// producerIDs is the applied content of ProducersTopic.
type producerIDs struct {
	mu     sync.RWMutex
	txn    map[string]idEpoch
	epochs map[int64]int16
	next   int64
}

type idEpoch struct {
	id    int64
	epoch int16
}

func newProducerIDs() *producerIDs {
	return &producerIDs{txn: map[string]idEpoch{}, epochs: map[int64]int16{}, next: 1}
}

func (s *producerIDs) apply(recs []wal.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		txn, id, epoch, ok, err := wal.ParseProducerIDRecord(r)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if id >= s.next {
			s.next = id + 1
		}
		if txn != "" {
			s.txn[txn] = idEpoch{id, epoch}
			s.epochs[id] = epoch
		}
	}
	return nil
}

// allocate returns the id and epoch the next InitProducer of txn gets.
func (s *producerIDs) allocate(txn string) (int64, int16, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if txn != "" {
		if cur, ok := s.txn[txn]; ok {
			if cur.epoch == math.MaxInt16 {
				return 0, 0, errors.New("producer epoch exhausted")
			}
			return cur.id, cur.epoch + 1, nil
		}
	}
	return s.next, 0, nil
}

// fenced refuses an epoch older than the newest allocated to the id.
func (s *producerIDs) fenced(id int64, epoch int16) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if cur, ok := s.epochs[id]; ok && epoch < cur {
		return fmt.Errorf("epoch %d, current %d: %w", epoch, cur, wal.ErrProducerFenced)
	}
	return nil
}

// groupOffsets is the applied content of OffsetsTopic.
type groupOffsets struct {
	mu      sync.RWMutex
	offsets map[string]map[wal.TopicPartition]int64
}

func newGroupOffsets() *groupOffsets {
	return &groupOffsets{offsets: map[string]map[wal.TopicPartition]int64{}}
}

func (s *groupOffsets) apply(recs []wal.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		group, tp, off, deleted, err := wal.ParseOffsetCommit(r)
		if err != nil {
			return err
		}
		if deleted {
			delete(s.offsets[group], tp)
			continue
		}
		m := s.offsets[group]
		if m == nil {
			m = map[wal.TopicPartition]int64{}
			s.offsets[group] = m
		}
		m[tp] = off
	}
	return nil
}

func (s *groupOffsets) get(group string) map[wal.TopicPartition]int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[wal.TopicPartition]int64, len(s.offsets[group]))
	for tp, o := range s.offsets[group] {
		out[tp] = o
	}
	return out
}
