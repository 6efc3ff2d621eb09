package raft

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sluice-cdc/sluice/wal"
)

// FollowerStatus is a leader's view of one follower.
type FollowerStatus struct {
	Node   uint64
	Match  uint64 // last index known replicated there
	Lag    uint64 // entries behind the leader's last index
	State  string // "probe", "replicate" or "snapshot"
	Active bool   // heard from within an election timeout
}

// PartitionStatus is one partition's replication state on this node.
type PartitionStatus struct {
	Topic     string
	Partition int32
	// Role is "leader", "follower", "candidate", "pre-candidate" or
	// "failed" (see Error).
	Role string
	// Serving is set on a leader that committed an entry of its term: it
	// serves appends and reads.
	Serving        bool
	Term           uint64
	Leader         uint64 // 0: none known
	CommitIndex    uint64
	LastIndex      uint64
	HighWatermark  int64
	LogStartOffset int64
	Followers      []FollowerStatus // on the leader
	Error          string
}

// Partitions returns the replication state of every partition this node
// replicates, sorted by topic and partition: what the metrics export.
func (l *Log) Partitions() []PartitionStatus {
	l.mu.RLock()
	gs := make([]*group, 0, len(l.groups))
	for _, g := range l.groups {
		gs = append(gs, g)
	}
	l.mu.RUnlock()
	out := make([]PartitionStatus, 0, len(gs))
	for _, g := range gs {
		g.mu.Lock()
		st := g.status
		st.Followers = append([]FollowerStatus(nil), st.Followers...)
		g.mu.Unlock()
		st.HighWatermark = g.rl.HighWatermark()
		st.LogStartOffset, _ = l.wal.EarliestOffset(g.key.topic, g.key.part)
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// Leads returns the partitions this node leads and serves.
func (l *Log) Leads() []wal.TopicPartition {
	var out []wal.TopicPartition
	for _, st := range l.Partitions() {
		if st.Serving {
			out = append(out, wal.TopicPartition{Topic: st.Topic, Partition: st.Partition})
		}
	}
	return out
}

func encodeStatus(e *enc, sts []PartitionStatus) {
	e.u32(uint32(len(sts)))
	for _, st := range sts {
		e.str(st.Topic)
		e.u32(uint32(st.Partition))
		e.str(st.Role)
		e.bool(st.Serving)
		e.u64(st.Term)
		e.u64(st.Leader)
		e.u64(st.CommitIndex)
		e.u64(st.LastIndex)
		e.i64(st.HighWatermark)
		e.i64(st.LogStartOffset)
		e.str(st.Error)
		e.u32(uint32(len(st.Followers)))
		for _, f := range st.Followers {
			e.u64(f.Node)
			e.u64(f.Match)
			e.u64(f.Lag)
			e.str(f.State)
			e.bool(f.Active)
		}
	}
}

func decodeStatus(d *dec) []PartitionStatus {
	n := d.u32()
	var out []PartitionStatus
	for i := uint32(0); i < n && d.err == nil; i++ {
		st := PartitionStatus{Topic: d.str(), Partition: int32(d.u32()), Role: d.str(), Serving: d.bool(),
			Term: d.u64(), Leader: d.u64(), CommitIndex: d.u64(), LastIndex: d.u64(),
			HighWatermark: d.i64(), LogStartOffset: d.i64(), Error: d.str()}
		fn := d.u32()
		for j := uint32(0); j < fn && d.err == nil; j++ {
			st.Followers = append(st.Followers, FollowerStatus{Node: d.u64(), Match: d.u64(), Lag: d.u64(), State: d.str(), Active: d.bool()})
		}
		out = append(out, st)
	}
	return out
}

// leaderGroup returns the local group of a partition once it serves, or
// why not (*NotLeaderError, ErrNotReplica, wal.ErrUnknownTopic).
func (l *Log) leaderGroup(ctx context.Context, topic string, part int32) (*group, error) {
	if _, err := l.partition(ctx, topic, part); err != nil {
		return nil, err
	}
	g := l.group(groupKey{topic, part})
	if g == nil {
		return nil, fmt.Errorf("%s-%d at node %d: %w", topic, part, l.self, ErrNotReplica)
	}
	sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if err := g.serving(sctx); err != nil {
		return nil, err
	}
	return g, nil
}

// request implements handler: it serves a request from another node or a
// client here, without forwarding it.
func (l *Log) request(ctx context.Context, from uint64, op uint8, body []byte) ([]byte, error) {
	d := dec{b: body}
	ctx, cancel := context.WithTimeout(ctx, reqTimeout(&d))
	defer cancel()
	e := enc{}
	switch op {
	case opAppend:
		topic, part, raw := d.str(), int32(d.u32()), d.bytes()
		if d.err != nil {
			return nil, d.err
		}
		g, err := l.leaderGroup(ctx, topic, part)
		if err != nil {
			return nil, err
		}
		tm, err := l.topic(topic)
		if err != nil {
			return nil, err
		}
		b, err := wal.ParsePreparedBatch(raw) // refuses a batch over the 64 MiB any batch may take
		if err != nil {
			return nil, fmt.Errorf("append to %s-%d: %w", topic, part, err)
		}
		// A Client does not know the topic's codec; max.message.bytes bounds the stored batch.
		b.Compress(tm.cfg.Compression)
		if b.Size() > int(tm.cfg.MaxMessageBytes) {
			return nil, fmt.Errorf("append to %s-%d: %d bytes > %d: %w", topic, part, b.Size(), tm.cfg.MaxMessageBytes, wal.ErrRecordTooLarge)
		}
		r, err := g.submit(ctx, &proposal{ctx: ctx, batch: b, at: l.now(), res: make(chan proposalResult, 1)})
		if err != nil {
			return nil, err
		}
		e.u64(r.term)
		e.u64(l.self)
		e.i64(r.res.BaseOffset)
		e.i64(r.res.LastOffset)
		e.bool(r.res.Duplicate)
		e.i64(r.res.LogAppendTime.UnixMilli())
	case opFetch, opLocalRead:
		topic, part, offset, maxBytes, maxWait := d.str(), int32(d.u32()), d.i64(), int(d.u32()), time.Duration(d.u32())*time.Millisecond
		if d.err != nil {
			return nil, d.err
		}
		if op == opFetch {
			if _, err := l.leaderGroup(ctx, topic, part); err != nil {
				return nil, err
			}
		}
		res, err := l.wal.Fetch(ctx, topic, part, offset, wal.FetchOptions{MaxBytes: maxBytes, MaxWait: maxWait})
		if err != nil {
			return nil, err
		}
		encodeFetch(&e, &res)
	case opOffsets:
		topic, part := d.str(), int32(d.u32())
		if d.err != nil {
			return nil, d.err
		}
		if _, err := l.leaderGroup(ctx, topic, part); err != nil {
			return nil, err
		}
		start, err := l.wal.EarliestOffset(topic, part)
		if err != nil {
			return nil, err
		}
		hw, err := l.wal.LatestOffset(topic, part)
		if err != nil {
			return nil, err
		}
		e.i64(start)
		e.i64(hw)
	case opInitProducer:
		txn := d.str()
		if d.err != nil {
			return nil, d.err
		}
		g, err := l.leaderGroup(ctx, wal.ProducersTopic, 0)
		if err != nil {
			return nil, err
		}
		id, epoch, err := l.initProducerLocal(ctx, g, txn)
		if err != nil {
			return nil, err
		}
		e.i64(id)
		e.u16(uint16(epoch))
	case opProducerState:
		topic, part, id := d.str(), int32(d.u32()), d.i64()
		if d.err != nil {
			return nil, d.err
		}
		g, err := l.leaderGroup(ctx, topic, part)
		if err != nil {
			return nil, err
		}
		st, ok, err := l.committedProducerState(ctx, g, id)
		if err != nil {
			return nil, err
		}
		e.bool(ok)
		e.u16(uint16(st.Epoch))
		e.u32(uint32(st.LastSequence))
		e.i64(st.LastOffset)
		e.i64(st.LastTimestamp.UnixMilli())
		e.bytes(st.SourcePosition)
	case opFetchOffsets:
		group := d.str()
		if d.err != nil {
			return nil, d.err
		}
		if _, err := l.leaderGroup(ctx, wal.OffsetsTopic, 0); err != nil {
			return nil, err
		}
		offs := l.offs.get(group)
		e.u32(uint32(len(offs)))
		for tp, o := range offs {
			e.str(tp.Topic)
			e.u32(uint32(tp.Partition))
			e.i64(o)
		}
	case opCreateTopic:
		name, rf := d.str(), int(d.u8())
		kv := map[string]string{}
		for i, n := 0, int(d.u16()); i < n && d.err == nil; i++ {
			k := d.str()
			kv[k] = d.str()
		}
		if d.err != nil {
			return nil, d.err
		}
		cfg, err := wal.ParseTopicConfig(wal.DefaultTopicConfig(), kv)
		if err != nil {
			return nil, fmt.Errorf("create topic %s: %w", name, err)
		}
		g, err := l.leaderGroup(ctx, MetaTopic, 0)
		if err != nil {
			return nil, err
		}
		if err := l.createTopicLocal(ctx, g, name, cfg, rf); err != nil {
			return nil, err
		}
	case opDescribe:
		name := d.str()
		if d.err != nil {
			return nil, d.err
		}
		info, err := l.wal.Describe(name)
		if err != nil {
			return nil, err
		}
		e.u32(uint32(len(info.Partitions)))
		for _, p := range info.Partitions {
			e.i64(p.LogStartOffset)
			e.i64(p.HighWatermark)
			e.i64(p.SizeBytes)
			e.u32(uint32(p.Segments))
		}
	case opSnapshotChunk:
		topic, part, layout, base, off, n := d.str(), int32(d.u32()), d.u64(), d.i64(), d.i64(), int(d.u32())
		if d.err != nil {
			return nil, d.err
		}
		g := l.group(groupKey{topic, part})
		if g == nil {
			return nil, fmt.Errorf("%s-%d: %w", topic, part, ErrNotReplica)
		}
		g.snapshotFetched(from)
		buf := make([]byte, min(max(n, 1), 4<<20))
		k, err := g.rl.ReadSegment(layout, base, off, buf)
		if err != nil {
			return nil, err
		}
		e.bytes(buf[:k])
	case opSnapshotStatus:
		topic, part, ok := d.str(), int32(d.u32()), d.bool()
		if d.err != nil {
			return nil, d.err
		}
		g := l.group(groupKey{topic, part})
		if g == nil {
			return nil, fmt.Errorf("%s-%d: %w", topic, part, ErrNotReplica)
		}
		status := etcdraftSnapshotStatus(ok)
		if err := g.do(ctx, func() { g.rn.ReportSnapshot(from, status) }); err != nil {
			return nil, err
		}
	case opTopicMeta:
		name := d.str()
		if d.err != nil {
			return nil, d.err
		}
		if _, err := l.leaderGroup(ctx, MetaTopic, 0); err != nil {
			return nil, err
		}
		tm, err := l.topic(name)
		if err != nil {
			return nil, err
		}
		rec := encodeTopicMeta(tm)
		e.bytes(rec.Key)
		e.bytes(rec.Value)
	case opStatus:
		encodeStatus(&e, l.Partitions())
	case opTopics:
		names := l.Topics()
		e.u32(uint32(len(names)))
		for _, n := range names {
			e.str(n)
		}
	default:
		return nil, fmt.Errorf("unknown request op %d", op)
	}
	return e.b, nil
}

// stagedSnapshot holds the segments fetched for a MsgSnap while it is
// stepped into Raft; installSnapshot consumes it.
type stagedSnapshot struct {
	index, term uint64
	segs        []*wal.StagedSegment
}

func (s *stagedSnapshot) abort() {
	for _, g := range s.segs {
		g.Abort()
	}
}

// receiveSnapshot fetches the segments a leader's MsgSnap names, then
// steps the message into the group, which installs them. One at a time
// per group; a MsgSnap arriving meanwhile is dropped (the leader sends
// another if this one fails).
func (l *Log) receiveSnapshot(g *group, m *pb.Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.snapRecv[g.key] || l.runCtx == nil {
		return
	}
	l.snapRecv[g.key] = true
	l.goLocked(func(ctx context.Context) error {
		defer func() {
			l.mu.Lock()
			delete(l.snapRecv, g.key)
			l.mu.Unlock()
		}()
		l.fetchSnapshot(ctx, g, m)
		return nil
	})
}

func (l *Log) fetchSnapshot(ctx context.Context, g *group, m *pb.Message) {
	sd, err := decodeSnapData(m.GetSnapshot().GetData())
	if err != nil {
		g.logger.Error("snapshot from the leader is unreadable", "err", err)
		return
	}
	installed := false
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		e := enc{}
		putTimeout(&e, sctx)
		e.str(g.key.topic)
		e.u32(uint32(g.key.part))
		e.bool(installed)
		if _, err := l.tr.call(sctx, sd.From, opSnapshotStatus, e.b); err != nil {
			g.logger.Debug("snapshot status not delivered", "node", sd.From, "err", err)
		}
	}()
	st := &stagedSnapshot{index: sd.Snap.Index, term: sd.Snap.Term}
	g.logger.Info("fetching snapshot", "node", sd.From, "index", sd.Snap.Index, "segments", len(sd.Snap.Segments))
	if err := l.fetchSegments(ctx, g, sd, st); err != nil {
		st.abort()
		if ctx.Err() == nil {
			g.logger.Warn("snapshot fetch failed", "node", sd.From, "err", err)
		}
		return
	}
	err = g.do(ctx, func() {
		g.setStaged(st)
		g.snapQueued = false
		g.step(m)
		_ = g.processReady()
		// Queued: the appender installs it. Else Raft did not want it.
		installed = g.snapQueued
		if !installed {
			g.setStaged(nil)
		}
	})
	if !installed {
		st.abort()
		if err != nil && ctx.Err() == nil {
			g.logger.Warn("snapshot not installed", "err", err)
		}
	}
}

func (l *Log) fetchSegments(ctx context.Context, g *group, sd snapData, st *stagedSnapshot) error {
	return stageSegments(g.rl, sd.Snap, st, func(base, off int64, n int) ([]byte, error) {
		cctx, cancel := context.WithTimeout(ctx, l.cfg.RequestTimeout)
		defer cancel()
		e := enc{}
		putTimeout(&e, cctx)
		e.str(g.key.topic)
		e.u32(uint32(g.key.part))
		e.u64(sd.Snap.Layout)
		e.i64(base)
		e.i64(off)
		e.u32(uint32(n))
		body, err := l.tr.call(cctx, sd.From, opSnapshotChunk, e.b)
		if err != nil {
			return nil, fmt.Errorf("from node %d: %w", sd.From, err)
		}
		d := dec{b: body}
		b := d.bytes()
		return b, d.err
	})
}

// stageSegments copies the segments of snap into staged files of rl,
// reading them with read (base, offset, max bytes), and verifies them.
func stageSegments(rl *wal.ReplicaLog, snap wal.Snapshot, st *stagedSnapshot, read func(base, off int64, n int) ([]byte, error)) error {
	const chunk = 1 << 20
	for _, seg := range snap.Segments {
		s, err := rl.StageSegment(seg.Base)
		if err != nil {
			return err
		}
		st.segs = append(st.segs, s)
		for off := int64(0); off < seg.Size; {
			b, err := read(seg.Base, off, chunk)
			if err == nil && len(b) == 0 {
				err = errors.New("no bytes")
			}
			if err != nil {
				return fmt.Errorf("fetch segment %d at %d: %w", seg.Base, off, err)
			}
			if err := s.Write(b); err != nil {
				return err
			}
			off += int64(len(b))
		}
		if err := s.Finish(seg); err != nil {
			return err
		}
	}
	return nil
}

func etcdraftSnapshotStatus(ok bool) etcdraft.SnapshotStatus {
	if ok {
		return etcdraft.SnapshotFinish
	}
	return etcdraft.SnapshotFailure
}
