package raft

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	etcdraft "go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-cdc/sluice/wal"
	"github.com/sluice-cdc/sluice/wal/vfs"
)

// The scenario tests run real Raft groups over real partition logs (on
// in-memory file systems) with a scripted network: every message goes
// through a queue the test delivers, drops, cuts or holds, and time moves
// only by explicit ticks. No goroutines, no sleeps.

type simNode struct {
	id   uint64
	fs   *vfs.Mem
	l    *wal.Log
	g    *group
	down bool
}

type simMsg struct {
	key groupKey
	m   *pb.Message
}

type sim struct {
	t     *testing.T
	cfg   Config
	tcfg  wal.TopicConfig
	nodes map[uint64]*simNode
	ids   []uint64
	queue []simMsg
	cut   map[[2]uint64]bool // from, to: dropped
	hold  map[uint64]bool    // to: kept aside until released
	held  []simMsg
	now   time.Time
	// drop, when set, drops the messages it returns true for.
	drop func(m *pb.Message) bool
	// frozen nodes do not tick: their clock stands still.
	frozen map[uint64]bool
}

type simSender struct {
	s    *sim
	from uint64
}

// send queues messages, checking Raft's persistence rules on the way out:
// a leader sends nothing in a term it has not saved, a node grants no
// vote it has not saved and acknowledges no entry it has not fsynced.
func (ss simSender) send(key groupKey, msgs []*pb.Message) []uint64 {
	nd := ss.s.nodes[ss.from]
	st := nd.g.rl.State()
	last, _, _ := nd.g.rl.Last()
	for _, m := range msgs {
		switch m.GetType() {
		case pb.MsgApp, pb.MsgHeartbeat, pb.MsgSnap:
			// Sent by a leader, which counted its own vote only once saved.
			if m.GetTerm() > st.Term {
				ss.s.t.Errorf("node %d sent %v in term %d before saving it (saved term %d)", ss.from, m.GetType(), m.GetTerm(), st.Term)
			}
		}
		if m.GetType() == pb.MsgVoteResp && !m.GetReject() && (st.Vote != m.GetTo() || st.Term != m.GetTerm()) {
			ss.s.t.Errorf("node %d granted its vote to %d in term %d before saving it (saved %d in term %d)", ss.from, m.GetTo(), m.GetTerm(), st.Vote, st.Term)
		}
		if m.GetType() == pb.MsgAppResp && !m.GetReject() && m.GetIndex() > last {
			ss.s.t.Errorf("node %d acknowledged entry %d with only %d persisted", ss.from, m.GetIndex(), last)
		}
		ss.s.queue = append(ss.s.queue, simMsg{key, proto.Clone(m).(*pb.Message)})
	}
	return nil
}

func newSim(t *testing.T, n int, tcfg wal.TopicConfig) *sim {
	s := &sim{t: t, nodes: map[uint64]*simNode{}, cut: map[[2]uint64]bool{}, hold: map[uint64]bool{}, frozen: map[uint64]bool{},
		tcfg: tcfg, now: time.UnixMilli(1_700_000_000_000)}
	s.cfg = Config{ElectionTicks: 10, HeartbeatTicks: 1, Logger: testLogger(t)}
	s.cfg.setDefaults()
	s.cfg.CommitCheckpoint = time.Hour
	for i := 1; i <= n; i++ {
		s.ids = append(s.ids, uint64(i))
	}
	for _, id := range s.ids {
		nd := &simNode{id: id, fs: vfs.NewMem()}
		s.nodes[id] = nd
		s.open(nd, true)
	}
	t.Cleanup(func() {
		for _, nd := range s.nodes {
			if !nd.down {
				nd.l.Close()
			}
		}
	})
	return s
}

func (s *sim) open(nd *simNode, create bool) {
	s.t.Helper()
	l, err := wal.Open("/d", wal.Options{FS: nd.fs, Clock: func() time.Time { return s.now }})
	if err != nil {
		s.t.Fatal(err)
	}
	if create {
		if err := l.CreateTopic(memTopic, s.tcfg); err != nil {
			s.t.Fatal(err)
		}
	}
	rl, err := l.OpenReplica(memTopic, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	g, err := newGroup(groupKey{memTopic, 0}, nd.id, s.ids, &s.cfg, rl, simSender{s, nd.id}, s.cfg.Logger.With("node", nd.id))
	if err != nil {
		s.t.Fatal(err)
	}
	g.now = func() time.Time { return s.now }
	g.inline = true
	nd.l, nd.g, nd.down = l, g, false
}

// crash loses the node's process: what it did not fsync is lost (torn).
func (s *sim) crash(id uint64) {
	nd := s.nodes[id]
	nd.down = true
	nd.fs.Crash(vfs.CrashOptions{Tear: true})
	nd.l.Close()
}

func (s *sim) restart(id uint64) { s.open(s.nodes[id], false) }

func (s *sim) process(nd *simNode) {
	s.t.Helper()
	for {
		if err := nd.g.processReady(); err != nil {
			s.t.Fatalf("node %d: %v", nd.id, err)
		}
		if !nd.g.proposeDeferred() {
			return
		}
	}
}

// deliver delivers queued messages until none is left.
func (s *sim) deliver() {
	s.t.Helper()
	for n := 0; len(s.queue) > 0; n++ {
		if n > 100000 {
			s.t.Fatal("messages never settle")
		}
		sm := s.queue[0]
		s.queue = s.queue[1:]
		from, to := sm.m.GetFrom(), sm.m.GetTo()
		nd := s.nodes[to]
		switch {
		case nd == nil || nd.down || s.nodes[from].down || s.cut[[2]uint64{from, to}] || s.drop != nil && s.drop(sm.m):
			continue
		case s.hold[to]:
			s.held = append(s.held, sm)
			continue
		}
		if sm.m.GetType() == pb.MsgSnap {
			s.stepSnapshot(nd, sm.m)
			continue
		}
		nd.g.step(sm.m)
		s.process(nd)
	}
}

// stepSnapshot does what Log.fetchSnapshot does, reading the sender's
// segment files directly.
func (s *sim) stepSnapshot(nd *simNode, m *pb.Message) {
	s.t.Helper()
	sd, err := decodeSnapData(m.GetSnapshot().GetData())
	if err != nil {
		s.t.Fatal(err)
	}
	src := s.nodes[sd.From].g.rl
	st := &stagedSnapshot{index: sd.Snap.Index, term: sd.Snap.Term}
	if err := stageSegments(nd.g.rl, sd.Snap, st, func(base, off int64, n int) ([]byte, error) {
		buf := make([]byte, n)
		k, err := src.ReadSegment(sd.Snap.Layout, base, off, buf)
		return buf[:k], err
	}); err != nil {
		s.t.Fatal(err)
	}
	nd.g.setStaged(st)
	nd.g.step(m)
	s.process(nd)
	nd.g.mu.Lock()
	left := nd.g.staged
	nd.g.staged = nil
	nd.g.mu.Unlock()
	if left != nil {
		left.abort()
	}
}

func (s *sim) release(id uint64) {
	delete(s.hold, id)
	s.queue = append(s.queue, s.held...)
	s.held = nil
	s.deliver()
}

func (s *sim) tick(n int) {
	s.t.Helper()
	for i := 0; i < n; i++ {
		s.now = s.now.Add(100 * time.Millisecond)
		for _, id := range s.ids {
			if nd := s.nodes[id]; !nd.down && !s.frozen[id] {
				nd.g.tick()
				s.process(nd)
			}
		}
		s.deliver()
	}
}

// leader ticks until a live node serves (has committed in its term);
// with ids, one of those.
func (s *sim) leader(ids ...uint64) *simNode {
	s.t.Helper()
	if len(ids) == 0 {
		ids = s.ids
	}
	for i := 0; i < 200; i++ {
		for _, id := range ids {
			nd := s.nodes[id]
			if !nd.down && nd.g.status.Serving {
				return nd
			}
		}
		s.tick(1)
	}
	s.t.Fatalf("no leader among %v within 200 ticks", ids)
	return nil
}

// appendAt proposes a batch at a node and delivers what follows.
func (s *sim) appendAt(nd *simNode, value string, opts wal.AppendOptions) *proposal {
	s.t.Helper()
	b, err := wal.PrepareBatch([]wal.Record{{Key: []byte("k"), Value: []byte(value)}}, opts, s.now)
	if err != nil {
		s.t.Fatal(err)
	}
	p := &proposal{ctx: context.Background(), batch: b, at: s.now, res: make(chan proposalResult, 1)}
	nd.g.propose([]*proposal{p})
	s.process(nd)
	s.deliver()
	return p
}

func outcome(p *proposal) (proposalResult, bool) {
	select {
	case r := <-p.res:
		p.res <- r
		return r, true
	default:
		return proposalResult{}, false
	}
}

func mustAck(t *testing.T, p *proposal) wal.AppendResult {
	t.Helper()
	r, ok := outcome(p)
	if !ok || r.err != nil {
		t.Fatalf("append not acknowledged: done %v, %v", ok, r.err)
	}
	return r.res
}

type simRec struct {
	Offset int64
	Value  string
}

// committed reads a node's committed records.
func (s *sim) committed(id uint64) []simRec {
	s.t.Helper()
	l := s.nodes[id].l
	off, err := l.EarliestOffset(memTopic, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	var out []simRec
	for {
		res, err := l.Fetch(context.Background(), memTopic, 0, off, wal.FetchOptions{})
		if err != nil {
			s.t.Fatal(err)
		}
		for _, r := range res.Records {
			out = append(out, simRec{r.Offset, string(r.Value)})
		}
		if res.NextOffset >= res.HighWatermark {
			return out
		}
		off = res.NextOffset
	}
}

// sameLogs checks that every live node committed the same records at the
// same offsets as the leader, and that the acknowledged ones are there.
func (s *sim) sameLogs(acked map[string]int64) {
	s.t.Helper()
	ld := s.leader()
	s.tick(3) // the commit index reaches the followers
	want := s.committed(ld.id)
	for _, id := range s.ids {
		if nd := s.nodes[id]; !nd.down {
			if d := cmp.Diff(want, s.committed(id)); d != "" {
				s.t.Fatalf("node %d's committed log differs from leader %d's (-leader +node):\n%s", id, ld.id, d)
			}
		}
	}
	at := map[string][]int64{}
	for _, r := range want {
		at[r.Value] = append(at[r.Value], r.Offset)
	}
	for v, off := range acked {
		if got := at[v]; len(got) != 1 || got[0] != off {
			s.s(v, off, got)
		}
	}
}

func (s *sim) s(v string, off int64, got []int64) {
	s.t.Helper()
	s.t.Fatalf("acknowledged %q at offset %d: found at %v", v, off, got)
}

func TestScenarioLeaderLoss(t *testing.T) {
	s := newSim(t, 3, memTopicConfig())
	ld := s.leader()
	acked := map[string]int64{}
	for i := 0; i < 10; i++ {
		v := fmt.Sprint("a", i)
		acked[v] = mustAck(t, s.appendAt(ld, v, wal.AppendOptions{})).BaseOffset
	}
	// The leader writes three more batches that reach nobody, then dies.
	for _, id := range s.ids {
		s.cut[[2]uint64{ld.id, id}] = true
	}
	var lost []*proposal
	for i := 0; i < 3; i++ {
		lost = append(lost, s.appendAt(ld, fmt.Sprint("lost", i), wal.AppendOptions{}))
	}
	for _, p := range lost {
		if _, done := outcome(p); done {
			r, _ := outcome(p)
			t.Fatalf("an append that reached no follower was answered: %+v", r)
		}
	}
	if last, _, _ := ld.g.rl.Last(); last < 14 {
		t.Fatalf("old leader's log ends at %d: the lost batches were not written", last)
	}
	s.crash(ld.id)
	clear(s.cut)
	nl := s.leader()
	if nl.id == ld.id {
		t.Fatal("dead node leads")
	}
	for i := 0; i < 5; i++ {
		v := fmt.Sprint("b", i)
		acked[v] = mustAck(t, s.appendAt(nl, v, wal.AppendOptions{})).BaseOffset
	}
	// The old leader comes back: its three entries are replaced.
	s.restart(ld.id)
	s.tick(5)
	s.sameLogs(acked)
	for _, r := range s.committed(ld.id) {
		if len(r.Value) > 4 && r.Value[:4] == "lost" {
			t.Fatalf("uncommitted batch %q of the dead leader is in the log", r.Value)
		}
	}
}

func TestScenarioSlowFollower(t *testing.T) {
	s := newSim(t, 3, memTopicConfig())
	ld := s.leader()
	var slow uint64
	for _, id := range s.ids {
		if id != ld.id {
			slow = id
		}
	}
	s.hold[slow] = true
	acked := map[string]int64{}
	for i := 0; i < 20; i++ {
		v := fmt.Sprint("v", i)
		acked[v] = mustAck(t, s.appendAt(ld, v, wal.AppendOptions{})).BaseOffset
	}
	if hw := s.nodes[slow].g.rl.HighWatermark(); hw != 0 {
		t.Fatalf("slow follower's high watermark %d before it got anything", hw)
	}
	// The leader's status names the slow follower's lag: every entry after
	// what it acknowledged (the no-op at most).
	lagOf := func() (FollowerStatus, PartitionStatus) {
		ld.g.mu.Lock()
		defer ld.g.mu.Unlock()
		st := ld.g.status
		for _, f := range st.Followers {
			if f.Node == slow {
				return f, st
			}
		}
		t.Fatalf("leader's status has no follower %d: %+v", slow, st.Followers)
		return FollowerStatus{}, st
	}
	f, st := lagOf()
	if st.Role != "leader" || st.Term != ld.g.term || st.CommitIndex != st.LastIndex || f.Lag != st.LastIndex-f.Match || f.Lag < 20 {
		t.Fatalf("leader status with a held follower: %+v, follower %+v; want role leader, commit = last, lag >= 20 = last - match", st, f)
	}
	s.release(slow)
	s.tick(3)
	s.sameLogs(acked)
	s.process(ld)
	if f, st := lagOf(); f.Lag != 0 || f.Match != st.LastIndex {
		t.Fatalf("caught-up follower: %+v (leader's last index %d), want lag 0", f, st.LastIndex)
	}
}

func TestScenarioFollowerFarBehind(t *testing.T) {
	cfg := memTopicConfig() // 1 KiB segments: many
	s := newSim(t, 3, cfg)
	ld := s.leader()
	var behind uint64
	for _, id := range s.ids {
		if id != ld.id {
			behind = id
		}
	}
	s.crash(behind)
	acked := map[string]int64{}
	for i := 0; i < 120; i++ {
		v := fmt.Sprintf("v%03d-%0200d", i, 0)
		acked[v] = mustAck(t, s.appendAt(ld, v, wal.AppendOptions{})).BaseOffset
	}
	// Retention on the live nodes removes the segments the dead one lacks.
	s.tick(2)
	s.now = s.now.Add(2 * time.Hour)
	for _, id := range s.ids {
		if !s.nodes[id].down {
			if err := s.nodes[id].l.EnforceRetention(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	start, _ := ld.g.rl.Start()
	if start < 10 {
		t.Fatalf("leader's log start %d: retention removed too little for the test", start)
	}
	// Retention also removed acknowledged records: they are no longer
	// expected anywhere.
	first, _ := ld.l.EarliestOffset(memTopic, 0)
	for v, off := range acked {
		if off < first {
			delete(acked, v)
		}
	}
	s.restart(behind)
	s.tick(10)
	b := s.nodes[behind]
	if bs, _ := b.g.rl.Start(); bs < start {
		t.Fatalf("far-behind follower's log starts after %d, leader's after %d: no snapshot installed", bs, start)
	}
	s.sameLogs(acked)
	// And it keeps up afterwards.
	for i := 0; i < 5; i++ {
		v := fmt.Sprint("after", i)
		acked[v] = mustAck(t, s.appendAt(s.leader(), v, wal.AppendOptions{})).BaseOffset
	}
	s.sameLogs(acked)
}

func TestScenarioTermChangeMidAppend(t *testing.T) {
	s := newSim(t, 3, memTopicConfig())
	ld := s.leader()
	var f1, f2 uint64
	for _, id := range s.ids {
		if id != ld.id {
			if f1 == 0 {
				f1 = id
			} else {
				f2 = id
			}
		}
	}
	acked := map[string]int64{}
	acked["first"] = mustAck(t, s.appendAt(ld, "first", wal.AppendOptions{})).BaseOffset

	// A producer's batch reaches one follower only, then the leader is cut
	// off before anyone hears that it committed.
	opts := wal.AppendOptions{ProducerID: 7, ProducerEpoch: 0, BaseSequence: 0}
	s.cut[[2]uint64{ld.id, f2}] = true
	s.cut[[2]uint64{f1, ld.id}] = true // the ack never returns
	p := s.appendAt(ld, "half", opts)
	if _, done := outcome(p); done {
		t.Fatal("answered before a majority acknowledged")
	}
	for _, id := range []uint64{f1, f2} {
		s.cut[[2]uint64{ld.id, id}] = true
		s.cut[[2]uint64{id, ld.id}] = true
	}
	nl := s.leader(f1, f2)
	if nl.id != f1 {
		t.Fatalf("node %d won; only node %d holds the newest entry and can", nl.id, f1)
	}
	// The new leader committed the entry with its own no-op: the producer's
	// retry is answered with the original offsets, not written again.
	b, _ := wal.PrepareBatch([]wal.Record{{Key: []byte("k"), Value: []byte("half")}}, opts, s.now)
	retry := &proposal{ctx: context.Background(), batch: b, at: s.now, res: make(chan proposalResult, 1)}
	nl.g.propose([]*proposal{retry})
	s.process(nl)
	s.deliver()
	r := mustAck(t, retry)
	if !r.Duplicate {
		t.Fatal("retry after failover written again")
	}
	acked["half"] = r.BaseOffset
	// The old leader rejoins and learns its entry committed in its term:
	// its own caller gets the same answer.
	clear(s.cut)
	s.tick(5)
	if orig := mustAck(t, p); orig.BaseOffset != r.BaseOffset {
		t.Fatalf("old leader answered offset %d, new leader %d", orig.BaseOffset, r.BaseOffset)
	}
	s.sameLogs(acked)

	// The other case: a batch that reached nobody is replaced, and its
	// caller learns it is not in the log.
	ld = s.leader()
	for _, id := range s.ids {
		s.cut[[2]uint64{ld.id, id}] = true
		s.cut[[2]uint64{id, ld.id}] = true
	}
	gone := s.appendAt(ld, "gone", wal.AppendOptions{})
	var others []uint64
	for _, id := range s.ids {
		if id != ld.id {
			others = append(others, id)
		}
	}
	nl2 := s.leader(others...)
	acked["replacement"] = mustAck(t, s.appendAt(nl2, "replacement", wal.AppendOptions{})).BaseOffset
	clear(s.cut)
	s.tick(5)
	res, done := outcome(gone)
	if !done || !errors.Is(res.err, ErrLost) {
		t.Fatalf("replaced batch answered %v (done %v), want ErrLost", res.err, done)
	}
	s.sameLogs(acked)
}

// TestScenarioLatestOnlyAfterOwnTermCommit: a new leader does not serve
// (and so answers no "latest offset") until an entry of its own term is
// committed; before that its high watermark may trail the committed log.
func TestScenarioLatestOnlyAfterOwnTermCommit(t *testing.T) {
	s := newSim(t, 3, memTopicConfig())
	ld := s.leader()
	for i := 0; i < 4; i++ {
		mustAck(t, s.appendAt(ld, fmt.Sprint("v", i), wal.AppendOptions{}))
	}
	// The last batch reaches the followers, but not the news that it
	// committed: a follower that becomes leader has a stale committed end.
	last, _, _ := ld.g.rl.Last()
	s.drop = func(m *pb.Message) bool { return m.GetFrom() == ld.id && m.GetCommit() > last }
	mustAck(t, s.appendAt(ld, "v4", wal.AppendOptions{}))
	committedHW := ld.g.rl.HighWatermark()
	for _, id := range s.ids {
		s.cut[[2]uint64{ld.id, id}] = true
		s.cut[[2]uint64{id, ld.id}] = true
	}
	// Whoever wins next never hears its no-op acknowledged, for now.
	s.drop = func(m *pb.Message) bool { return m.GetType() == pb.MsgAppResp && m.GetTo() != ld.id }
	var cand *simNode
	for i := 0; i < 200 && cand == nil; i++ {
		s.tick(1)
		for _, id := range s.ids {
			if nd := s.nodes[id]; id != ld.id && nd.g.state == etcdraft.StateLeader {
				cand = nd
			}
		}
	}
	if cand == nil {
		t.Fatal("no new leader")
	}
	stale := cand.g.rl.HighWatermark()
	if stale >= committedHW {
		t.Fatalf("setup: the new leader already knew the committed end %d", committedHW)
	}
	s.tick(1)
	if cand.g.status.Serving {
		t.Fatalf("leader serves before committing an entry of its term (high watermark %d, committed %d)", cand.g.rl.HighWatermark(), committedHW)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := cand.g.serving(ctx); err == nil {
		t.Fatal("serving() succeeded before the own-term commit")
	}
	s.drop = nil
	s.tick(2)
	if !cand.g.status.Serving {
		t.Fatal("leader does not serve after its no-op committed")
	}
	if hw := cand.g.rl.HighWatermark(); hw != committedHW {
		t.Fatalf("serving leader's high watermark %d (stale one was %d), committed %d", hw, stale, committedHW)
	}
}

// TestScenarioStaleLeaderProducerCheck: a leader cut off from the others
// still believes it leads until its election timeout passes. It must not
// refuse a producer's batch from its stale view of the producer (a newer
// leader committed the producer's later batches): refusals wait for a
// quorum to confirm the leadership. A real gap is still refused.
func TestScenarioStaleLeaderProducerCheck(t *testing.T) {
	s := newSim(t, 3, memTopicConfig())
	old := s.leader()
	opts := func(seq int32) wal.AppendOptions {
		return wal.AppendOptions{ProducerID: 9, ProducerEpoch: 0, BaseSequence: seq}
	}
	mustAck(t, s.appendAt(old, "s0", opts(0)))
	var others []uint64
	for _, id := range s.ids {
		if id != old.id {
			others = append(others, id)
			s.cut[[2]uint64{old.id, id}] = true
			s.cut[[2]uint64{id, old.id}] = true
		}
	}
	s.frozen[old.id] = true // it does not notice it lost its quorum yet
	nl := s.leader(others...)
	mustAck(t, s.appendAt(nl, "s1", opts(1)))
	if !old.g.status.Serving {
		t.Fatal("setup: the old leader already stepped down")
	}
	stale := s.appendAt(old, "s2", opts(2))
	if r, done := outcome(stale); done {
		t.Fatalf("stale leader answered at once: %v", r.err)
	}
	delete(s.frozen, old.id)
	s.tick(30) // the old leader's election timeout passes
	r, done := outcome(stale)
	var nle *NotLeaderError
	if !done || !errors.As(r.err, &nle) {
		t.Fatalf("stale leader answered %v (done %v), want a NotLeaderError once it stepped down", r.err, done)
	}
	// The real leader refuses a real gap, once confirmed.
	gap := s.appendAt(nl, "s5", opts(5))
	s.tick(2)
	if r, done := outcome(gap); !done || !errors.Is(r.err, wal.ErrOutOfOrderSequence) {
		t.Fatalf("gap answered %v (done %v), want ErrOutOfOrderSequence", r.err, done)
	}
	mustAck(t, s.appendAt(nl, "s2", opts(2)))
}

// TestScenarioProducerPipelined: a producer's batches that follow one
// another without a gap are proposed at once, each before the one before
// is written, and each is placed (Written) when proposed; one that does
// not follow waits until the one before is written and is then checked
// against the log.
func TestScenarioProducerPipelined(t *testing.T) {
	s := newSim(t, 3, memTopicConfig())
	ld := s.leader()
	var placed []string
	prop := func(value string, epoch int16, seq int32) *proposal {
		b, err := wal.PrepareBatch([]wal.Record{{Key: []byte("k"), Value: []byte(value)}},
			wal.AppendOptions{ProducerID: 9, ProducerEpoch: epoch, BaseSequence: seq}, s.now)
		if err != nil {
			t.Fatal(err)
		}
		return &proposal{ctx: context.Background(), batch: b, at: s.now, res: make(chan proposalResult, 1),
			written: func() { placed = append(placed, value) }}
	}
	written, _, _ := ld.g.rl.Last()
	tail := ld.g.tailIdx
	a, b, c := prop("a", 0, 0), prop("b", 0, 1), prop("c", 0, 2)
	ld.g.propose([]*proposal{a, b, c})
	if got := ld.g.tailIdx - tail; got != 3 {
		t.Fatalf("%d of 3 batches proposed before the first was written, want all", got)
	}
	if last, _, _ := ld.g.rl.Last(); last != written {
		t.Fatalf("setup: entries written during propose (last %d, was %d)", last, written)
	}
	if d := cmp.Diff([]string{"a", "b", "c"}, placed); d != "" {
		t.Fatalf("placed before commit (-want +got):\n%s", d)
	}
	if _, done := outcome(a); done {
		t.Fatal("acknowledged before it was committed")
	}
	s.process(ld)
	s.deliver()
	ra, rb, rc := mustAck(t, a), mustAck(t, b), mustAck(t, c)
	if ra.BaseOffset >= rb.BaseOffset || rb.BaseOffset >= rc.BaseOffset {
		t.Fatalf("offsets %d, %d, %d: not in the order proposed", ra.BaseOffset, rb.BaseOffset, rc.BaseOffset)
	}

	// While d is in flight: a batch after a gap, and a first batch of a
	// new epoch that does not start at 0 although it follows d's
	// sequence, wait for d and are refused; a retry of c is found.
	placed = nil
	d, gap, epoch1, retry := prop("d", 0, 3), prop("gap", 0, 5), prop("e1", 1, 4), prop("c", 0, 2)
	proposeTogether(t, s, ld, 1, d, gap, epoch1, retry)
	mustAck(t, d)
	for name, p := range map[string]*proposal{"gap": gap, "new epoch": epoch1} {
		if r, done := outcome(p); !done || !errors.Is(r.err, wal.ErrOutOfOrderSequence) {
			t.Fatalf("%s answered %v (done %v), want ErrOutOfOrderSequence", name, r.err, done)
		}
	}
	if r := mustAck(t, retry); !r.Duplicate || r.BaseOffset != rc.BaseOffset {
		t.Fatalf("retry of c answered %+v, want c's offset %d", r, rc.BaseOffset)
	}
	if d := cmp.Diff([]string{"d", "c"}, placed); d != "" {
		t.Fatalf("placed (-want +got):\n%s", d)
	}
	var values []string
	for _, r := range s.committed(ld.id) {
		values = append(values, r.Value)
	}
	if d := cmp.Diff([]string{"a", "b", "c", "d"}, values); d != "" {
		t.Fatalf("committed (-want +got):\n%s", d)
	}
}

// proposeTogether proposes ps in one call at the leader ld, checks that
// want of them entered Raft's log at once (before any was written), then
// lets the cluster run until they are answered.
func proposeTogether(t *testing.T, s *sim, ld *simNode, want uint64, ps ...*proposal) {
	t.Helper()
	tail := ld.g.tailIdx
	ld.g.propose(ps)
	if got := ld.g.tailIdx - tail; got != want {
		t.Fatalf("%d of %d batches proposed at once, want %d", got, len(ps), want)
	}
	s.process(ld)
	s.deliver()
	s.tick(2)
}

// pipelineProp returns a proposal of n records valued value by producer 9,
// whose Written appends value to *placed.
func pipelineProp(t *testing.T, s *sim, placed *[]string, value string, n int, epoch int16, seq int32) *proposal {
	t.Helper()
	recs := make([]wal.Record, n)
	for i := range recs {
		recs[i] = wal.Record{Key: []byte("k"), Value: []byte(value)}
	}
	b, err := wal.PrepareBatch(recs, wal.AppendOptions{ProducerID: 9, ProducerEpoch: epoch, BaseSequence: seq}, s.now)
	if err != nil {
		t.Fatal(err)
	}
	return &proposal{ctx: context.Background(), batch: b, at: s.now, res: make(chan proposalResult, 1),
		written: func() { *placed = append(*placed, value) }}
}

// TestScenarioProducerPipelinedGuards: with a producer's batch in flight
// (proposed, not written), only the batch that follows its last record is
// proposed at once, also when the producer has batches in the log; a
// retry of the batch in flight and a batch overlapping it wait for it to
// be written, then are found or refused; the epoch fence still applies to
// the batch that follows.
func TestScenarioProducerPipelinedGuards(t *testing.T) {
	s := newSim(t, 3, memTopicConfig())
	ld := s.leader()
	var placed []string
	prop := func(value string, n int, epoch int16, seq int32) *proposal {
		return pipelineProp(t, s, &placed, value, n, epoch, seq)
	}
	a := prop("a", 2, 0, 0) // sequences 0-1, written before the rest
	ld.g.propose([]*proposal{a})
	s.process(ld)
	s.deliver()
	mustAck(t, a)

	placed = nil
	b := prop("b", 2, 0, 2) // 2-3
	retry := prop("b", 2, 0, 2)
	overlap := prop("overlap", 1, 0, 3)
	c := prop("c", 1, 0, 4)
	proposeTogether(t, s, ld, 2, b, retry, overlap, c)
	// b and c when proposed, the retry of b once found in the log
	if d := cmp.Diff([]string{"b", "c", "b"}, placed); d != "" {
		t.Fatalf("placed (-want +got):\n%s", d)
	}
	rb := mustAck(t, b)
	mustAck(t, c)
	if r := mustAck(t, retry); !r.Duplicate || r.BaseOffset != rb.BaseOffset {
		t.Fatalf("retry of b answered %+v, want b's offset %d", r, rb.BaseOffset)
	}
	if r, done := outcome(overlap); !done || !errors.Is(r.err, wal.ErrOutOfOrderSequence) {
		t.Fatalf("batch overlapping b answered %v (done %v), want ErrOutOfOrderSequence", r.err, done)
	}

	// A fence raised once d is proposed (d is checked first) refuses e,
	// which follows d. Both come in one propose: a later one would find d
	// written already (the simulated groups write inline).
	placed = nil
	checks := 0
	ld.g.fence = func(id int64, epoch int16) error {
		if checks++; checks > 1 {
			return fmt.Errorf("epoch %d: %w", epoch, wal.ErrProducerFenced)
		}
		return nil
	}
	d, e := prop("d", 1, 0, 5), prop("e", 1, 0, 6)
	proposeTogether(t, s, ld, 1, d, e)
	mustAck(t, d)
	if r, done := outcome(e); !done || !errors.Is(r.err, wal.ErrProducerFenced) {
		t.Fatalf("e answered %v (done %v), want ErrProducerFenced", r.err, done)
	}
	if d := cmp.Diff([]string{"d"}, placed); d != "" {
		t.Fatalf("placed (-want +got):\n%s", d)
	}
	var values []string
	for _, r := range s.committed(ld.id) {
		values = append(values, r.Value)
	}
	if d := cmp.Diff([]string{"a", "a", "b", "b", "c", "d"}, values); d != "" {
		t.Fatalf("committed (-want +got):\n%s", d)
	}
}

// TestScenarioProducerThrottledNotPlaced: a batch the leader cannot
// propose yet (its uncommitted budget is full) is not reported placed
// until it is proposed, once.
func TestScenarioProducerThrottledNotPlaced(t *testing.T) {
	s := newSim(t, 3, memTopicConfig())
	s.cfg.MaxUncommittedBytes = 1 // one uncommitted entry at a time
	for _, id := range s.ids {
		nd := s.nodes[id]
		nd.l.Close()
		s.open(nd, false)
	}
	ld := s.leader()
	var placed []string
	f := pipelineProp(t, s, &placed, "f", 1, 0, 0)
	g := pipelineProp(t, s, &placed, "g", 1, 0, 1)
	ld.g.propose([]*proposal{f, g})
	if !ld.g.throttled {
		t.Fatal("setup: the second batch was not throttled")
	}
	if d := cmp.Diff([]string{"f"}, placed); d != "" {
		t.Fatalf("placed while throttled (-want +got):\n%s", d)
	}
	s.process(ld)
	s.deliver()
	s.process(ld)
	s.deliver()
	mustAck(t, f)
	mustAck(t, g)
	if d := cmp.Diff([]string{"f", "g"}, placed); d != "" {
		t.Fatalf("placed (-want +got):\n%s", d)
	}
}
