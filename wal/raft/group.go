package raft

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/sluice-cdc/sluice/wal"
)

// inflightBatch is a producer's newest batch that this node proposed and
// has not written yet.
type inflightBatch struct {
	term, index uint64
	epoch       int16
	lastSeq     int32
}

// groupKey names a partition, hence its Raft group.
type groupKey struct {
	topic string
	part  int32
}

func (k groupKey) String() string { return fmt.Sprintf("%s-%d", k.topic, k.part) }

// sender takes a group's outgoing messages. It must not block: what it
// cannot queue it drops, returning the nodes it could not reach so that
// the group reports them to Raft. It is called from the group's loop and
// from its appender and applier.
type sender interface {
	send(key groupKey, msgs []*pb.Message) (unreachable []uint64)
}

// proposal is an append waiting to enter a group's log.
type proposal struct {
	ctx   context.Context
	batch *wal.PreparedBatch
	at    time.Time // log append time
	res   chan proposalResult
	// written, if set, is called once the batch has its place in the log:
	// proposed by this leader, or found there (a retry); see
	// wal.AppendOptions.Written.
	written func()

	// Set once proposed (term, index) and once written (base, placed).
	term, index uint64
	base        int64
	placed      bool
	// confirmed is set once a quorum confirmed this node's leadership
	// after the batch was refused: the refusal then stands.
	confirmed bool
}

type proposalResult struct {
	res  wal.AppendResult
	term uint64 // the leader's term that accepted it
	err  error
}

func (p *proposal) reply(r proposalResult) {
	select {
	case p.res <- r:
	default:
	}
}

// dupWait is a retried batch found in the log, answered once it commits.
type dupWait struct {
	p    *proposal
	res  wal.AppendResult
	term uint64
}

// confirmWait is a batch the producer checks refused, waiting for a
// quorum to confirm that this node still leads (a ReadIndex) before the
// refusal is answered: a leader cut off from the others may not have
// seen the producer's latest batches, committed by a newer leader.
type confirmWait struct {
	p     *proposal
	id    uint64
	index uint64 // commit index to apply first; valid once read
	read  bool
}

// localItem is what the appender and applier hand back to the loop.
type localItem struct {
	m           *pb.Message // a response to this node, to step
	unreachable uint64      // a node a response could not be sent to
	persisted   uint64      // entries up to this index are written
	truncated   uint64      // entries after this index were removed (0: none)
	applied     bool        // committed entries were applied
}

// group is one partition's Raft group on this node, using Raft's
// asynchronous storage writes: the loop goroutine owns the RawNode and
// never waits for the disk; the appender persists entries, HardState and
// snapshots in order (several Readies per fsync) and only then delivers
// the responses that depend on them (Raft attaches them to its storage
// messages); the applier applies committed entries in order. In tests
// (inline) the three run on the caller's goroutine inside processReady.
type group struct {
	key    groupKey
	self   uint64
	voters []uint64
	cfg    *Config
	rl     *wal.ReplicaLog
	st     *storage
	rn     *etcdraft.RawNode
	out    sender
	logger *slog.Logger
	now    func() time.Time
	inline bool
	// apply, for internal topics, applies committed records to the node's
	// state (topics, producer ids, consumer offsets) in log order; replay
	// rebuilds that state from the whole log after a snapshot install.
	apply  func(recs []wal.Record) error
	replay func() error
	// fence says whether a producer epoch is fenced cluster-wide.
	fence func(id int64, epoch int16) error

	inbox  chan *pb.Message
	props  chan *proposal
	tickc  chan struct{}
	ctl    chan func()
	localc chan struct{} // signalled when local holds items

	// The queues between the loop, the appender and the applier.
	qmu     sync.Mutex
	local   []localItem
	appendQ []*pb.Message
	applyQ  []*pb.Message
	appendc chan struct{}
	applyc  chan struct{}

	// Owned by the loop.
	deferred   []*proposal
	taken      []*proposal
	throttled  bool
	dups       []*dupWait
	confirms   []*confirmWait
	nextReadID uint64
	inflight   map[int64]inflightBatch // producer → its newest batch not yet written
	tailIdx    uint64                  // index of the last entry in Raft's log, written or not
	state      etcdraft.StateType
	lead, term uint64
	snapQueued bool

	// Owned by the appender.
	latestHS       *pb.HardState
	lastCheckpoint time.Time

	// pmu guards pending (loop, appender, applier).
	pmu     sync.Mutex
	pending map[uint64]*proposal

	mu           sync.Mutex
	snapActivity map[uint64]time.Time // leader: follower → last snapshot chunk asked
	staged       *stagedSnapshot      // follower: segments fetched for a MsgSnap being stepped
	leaderTerm   uint64               // the term this node leads in (0: not leading)
	readyTerm    uint64               // leaderTerm once an entry of it is applied
	status       PartitionStatus
	changed      chan struct{} // closed and replaced when role, leader or readiness change
	failed       error
	cancel       context.CancelFunc
	done         chan struct{} // closed when run returns
}

func newGroup(key groupKey, self uint64, voters []uint64, cfg *Config, rl *wal.ReplicaLog, out sender, logger *slog.Logger) (*group, error) {
	st := newStorage(rl, voters, self, cfg.EntryCacheBytes)
	g := &group{
		key: key, self: self, voters: voters, cfg: cfg, rl: rl, st: st, out: out,
		logger:  logger.With("topic", key.topic, "partition", key.part),
		now:     time.Now,
		inbox:   make(chan *pb.Message, 4096),
		props:   make(chan *proposal, 1024),
		tickc:   make(chan struct{}, 1),
		ctl:     make(chan func(), 64),
		localc:  make(chan struct{}, 1),
		appendc: make(chan struct{}, 1),
		applyc:  make(chan struct{}, 1),

		inflight:     map[int64]inflightBatch{},
		pending:      map[uint64]*proposal{},
		snapActivity: map[uint64]time.Time{},
		changed:      make(chan struct{}),
		done:         make(chan struct{}),
	}
	hs, _, _ := st.InitialState()
	start, _ := rl.Start()
	rc := &etcdraft.Config{
		ID:                        self,
		ElectionTick:              cfg.ElectionTicks,
		HeartbeatTick:             cfg.HeartbeatTicks,
		Storage:                   st,
		Applied:                   max(hs.GetCommit(), start),
		AsyncStorageWrites:        true,
		MaxSizePerMsg:             cfg.MaxMessageBytes,
		MaxCommittedSizePerReady:  4 * cfg.MaxMessageBytes,
		MaxUncommittedEntriesSize: cfg.MaxUncommittedBytes,
		MaxInflightMsgs:           256,
		CheckQuorum:               true,
		PreVote:                   true,
		DisableProposalForwarding: true,
		Logger:                    raftLogger{g.logger},
	}
	rn, err := etcdraft.NewRawNode(rc)
	if err != nil {
		return nil, fmt.Errorf("start raft group %s: %w", key, err)
	}
	g.rn = rn
	g.latestHS = hs
	g.term = hs.GetTerm()
	g.tailIdx, _, _ = rl.Last()
	g.lastCheckpoint = g.now()
	g.status = PartitionStatus{Topic: key.topic, Partition: key.part, Role: "follower", Term: g.term}
	return g, nil
}

// run drives the group until ctx ends or the group fails: the loop on
// this goroutine, the appender and the applier on two more. It returns
// once all three exited.
func (g *group) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	g.mu.Lock()
	g.cancel = cancel
	g.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		g.guard(func() { g.appendLoop(ctx) })
	}()
	go func() {
		defer wg.Done()
		g.guard(func() { g.applyLoop(ctx) })
	}()
	g.guard(func() { g.loop(ctx) })
	cancel()
	wg.Wait()
	g.shutdown()
	close(g.done)
	return g.failedErr()
}

// runLogged is run for Log.Run: a failure was logged by fail already,
// and stops this group only.
func (g *group) runLogged(ctx context.Context) error {
	_ = g.run(ctx)
	return nil
}

// guard turns a panic (a broken invariant, in this package or in Raft)
// into a failure of this group alone.
func (g *group) guard(f func()) {
	defer func() {
		if r := recover(); r != nil {
			g.fail(fmt.Errorf("panic in raft group: %v\n%s", r, debug.Stack()))
		}
	}()
	f()
}

func (g *group) loop(ctx context.Context) {
	if len(g.voters) == 1 {
		// Alone: no need to wait for an election timeout.
		_ = g.rn.Campaign()
	}
	for {
		if err := g.processReady(); err != nil {
			return
		}
		if g.proposeDeferred() {
			continue
		}
		props := g.props
		if g.throttled {
			props = nil // wait for commits before taking more
		}
		select {
		case <-ctx.Done():
			return
		case <-g.tickc:
			g.tick()
		case m := <-g.inbox:
			g.step(m)
		case p := <-props:
			g.taken = append(g.taken, p)
		case f := <-g.ctl:
			f()
		case <-g.localc:
		}
		g.drain(props)
	}
}

// drain handles, without waiting, what else arrived: what the appender
// and applier report first, then messages, control functions and new
// appends, all proposed together.
func (g *group) drain(props chan *proposal) {
	g.stepLocal()
	for n := len(g.inbox); n > 0; n-- {
		g.step(<-g.inbox)
	}
	for n := len(g.ctl); n > 0; n-- {
		(<-g.ctl)()
	}
	if props != nil {
		for n := min(len(props), 256); n > 0; n-- {
			g.taken = append(g.taken, <-props)
		}
	}
	if len(g.taken) > 0 {
		batch := g.taken
		g.taken = nil
		g.propose(batch)
	}
}

// proposeDeferred proposes the batches put aside (a producer's batch
// behind one not yet written, a confirmed refusal, a full uncommitted
// budget) and reports whether there were any.
func (g *group) proposeDeferred() bool {
	if len(g.deferred) == 0 || g.throttled {
		return false
	}
	d := g.deferred
	g.deferred = nil
	g.propose(d)
	return len(g.deferred) < len(d)
}

// shutdown saves the commit index and answers what is waiting. Called
// once the three goroutines exited.
func (g *group) shutdown() {
	if g.failedErr() == nil && g.latestHS != nil {
		if err := g.st.saveHardState(g.latestHS); err != nil && !errors.Is(err, wal.ErrClosed) {
			g.logger.Warn("save replica state on shutdown failed", "err", err)
		}
	}
	err := g.failedErr()
	if err == nil {
		err = fmt.Errorf("%s: node shutting down", g.key)
	}
	g.failWaiting(err)
}

func (g *group) tick() {
	g.rn.Tick()
	g.mu.Lock()
	n := len(g.snapActivity)
	g.mu.Unlock()
	if g.state == etcdraft.StateLeader && n > 0 {
		// A follower that stopped fetching its snapshot gets a new one.
		now := g.now()
		var stale []uint64
		g.mu.Lock()
		g.rn.WithProgress(func(id uint64, _ etcdraft.ProgressType, pr tracker.Progress) {
			at, ok := g.snapActivity[id]
			if !ok {
				return
			}
			if pr.State != tracker.StateSnapshot {
				delete(g.snapActivity, id)
			} else if now.Sub(at) > g.cfg.SnapshotTimeout {
				delete(g.snapActivity, id)
				stale = append(stale, id)
			}
		})
		g.mu.Unlock()
		for _, id := range stale {
			g.logger.Warn("follower stopped fetching its snapshot; sending a new one", "node", id)
			g.rn.ReportSnapshot(id, etcdraft.SnapshotFailure)
		}
	}
}

// snapshotFetched notes that a follower asked for a snapshot chunk.
func (g *group) snapshotFetched(from uint64) {
	g.mu.Lock()
	if _, ok := g.snapActivity[from]; ok {
		g.snapActivity[from] = g.now()
	}
	g.mu.Unlock()
}

func (g *group) step(m *pb.Message) {
	if err := g.rn.Step(m); err != nil && !errors.Is(err, etcdraft.ErrStepPeerNotFound) {
		g.logger.Debug("raft step", "type", m.GetType().String(), "from", m.GetFrom(), "err", err)
	}
}

// pushLocal hands an item to the loop.
func (g *group) pushLocal(it localItem) {
	g.qmu.Lock()
	g.local = append(g.local, it)
	g.qmu.Unlock()
	select {
	case g.localc <- struct{}{}:
	default:
	}
}

// stepLocal handles what the appender and applier handed back.
func (g *group) stepLocal() {
	g.qmu.Lock()
	items := g.local
	g.local = nil
	g.qmu.Unlock()
	for _, it := range items {
		switch {
		case it.m != nil:
			g.step(it.m)
		case it.unreachable != 0:
			g.rn.ReportUnreachable(it.unreachable)
		case it.applied:
			g.throttled = false
			g.resolveDups()
			g.resolveConfirms()
		default:
			for id, in := range g.inflight {
				if in.index <= it.persisted || it.truncated != 0 && in.index > it.truncated {
					delete(g.inflight, id)
				}
			}
		}
	}
}

// processReady handles Ready structs until the node has none: Raft's
// messages to other nodes leave at once (those that depend on durable
// state are attached to the storage messages as responses), the storage
// messages go to the appender and the applier.
func (g *group) processReady() error {
	for {
		if err := g.failedErr(); err != nil {
			return err
		}
		g.stepLocal()
		if !g.rn.HasReady() {
			if g.inline && g.hasLocal() {
				continue
			}
			return nil
		}
		g.onReady(g.rn.Ready())
		if g.inline {
			g.runInline()
		}
	}
}

func (g *group) hasLocal() bool {
	g.qmu.Lock()
	defer g.qmu.Unlock()
	return len(g.local) > 0
}

func (g *group) onReady(rd etcdraft.Ready) {
	if hs := rd.HardState; hs != nil {
		g.term = hs.GetTerm()
	}
	if rd.SoftState != nil {
		g.softState(rd.SoftState)
	}
	if n := len(rd.Entries); n > 0 {
		g.tailIdx = rd.Entries[n-1].GetIndex()
	}
	if !etcdraft.IsEmptySnap(rd.Snapshot) {
		g.snapQueued = true
		g.tailIdx = max(g.tailIdx, rd.Snapshot.GetMetadata().GetIndex())
	}
	for _, rs := range rd.ReadStates {
		if len(rs.RequestCtx) != 8 {
			continue
		}
		id := binary.BigEndian.Uint64(rs.RequestCtx)
		for _, c := range g.confirms {
			if c.id == id {
				c.index, c.read = rs.Index, true
			}
		}
	}
	var net, applyNow []*pb.Message
	var appends, applies bool
	g.qmu.Lock()
	for _, m := range rd.Messages {
		switch m.GetTo() {
		case etcdraft.LocalAppendThread:
			g.appendQ = append(g.appendQ, m)
			appends = true
		case etcdraft.LocalApplyThread:
			if g.apply == nil && !g.inline {
				// A data partition's apply only moves the committed end and
				// answers appends: done here, without a goroutine switch
				// (its applier never gets anything, so order is kept).
				applyNow = append(applyNow, m)
				continue
			}
			g.applyQ = append(g.applyQ, m)
			applies = true
		default:
			net = append(net, m)
		}
	}
	g.qmu.Unlock()
	if len(applyNow) > 0 {
		if err := g.applyMsgs(applyNow); err != nil {
			g.fail(err)
			return
		}
	}
	if appends {
		wake(g.appendc)
	}
	if applies {
		wake(g.applyc)
	}
	g.send(net)
	g.resolveConfirms()
	g.updateStatus()
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// runInline does the appender's and applier's work on this goroutine.
func (g *group) runInline() {
	g.qmu.Lock()
	appends, applies := g.appendQ, g.applyQ
	g.appendQ, g.applyQ = nil, nil
	g.qmu.Unlock()
	if len(appends) > 0 {
		if err := g.persist(appends); err != nil {
			g.fail(err)
			return
		}
	}
	if len(applies) > 0 {
		if err := g.applyMsgs(applies); err != nil {
			g.fail(err)
		}
	}
}

func (g *group) send(msgs []*pb.Message) {
	if len(msgs) == 0 {
		return
	}
	for _, m := range msgs {
		if m.GetType() == pb.MsgSnap {
			g.mu.Lock()
			g.snapActivity[m.GetTo()] = g.now()
			g.mu.Unlock()
		}
	}
	for _, to := range g.out.send(g.key, msgs) {
		g.rn.ReportUnreachable(to)
	}
}

// deliver sends a storage message's response: to this node through the
// loop, to another node over the network.
func (g *group) deliver(resps []*pb.Message) {
	var net []*pb.Message
	for _, r := range resps {
		if r.GetTo() == g.self {
			g.pushLocal(localItem{m: r})
		} else {
			net = append(net, r)
		}
	}
	if len(net) > 0 {
		for _, to := range g.out.send(g.key, net) {
			g.pushLocal(localItem{unreachable: to})
		}
	}
}

func (g *group) softState(ss *etcdraft.SoftState) {
	was := g.state
	g.state, g.lead = ss.RaftState, ss.Lead
	g.mu.Lock()
	if ss.RaftState == etcdraft.StateLeader {
		g.leaderTerm = g.term
	} else {
		g.leaderTerm, g.readyTerm = 0, 0
	}
	if was == etcdraft.StateLeader && ss.RaftState != etcdraft.StateLeader {
		clear(g.snapActivity)
	}
	g.mu.Unlock()
	if was == etcdraft.StateLeader && ss.RaftState != etcdraft.StateLeader {
		g.logger.Info("lost leadership", "term", g.term, "leader", ss.Lead)
		g.failDups(fmt.Errorf("%s: leadership lost: %w", g.key, ErrOutcomeUnknown))
		for _, c := range g.confirms {
			c.p.reply(proposalResult{err: &NotLeaderError{Topic: g.key.topic, Partition: g.key.part, Leader: ss.Lead}})
		}
		g.confirms = nil
		for _, p := range g.deferred {
			p.reply(proposalResult{err: &NotLeaderError{Topic: g.key.topic, Partition: g.key.part, Leader: ss.Lead}})
		}
		g.deferred = nil
		g.throttled = false
	}
	if ss.RaftState == etcdraft.StateLeader && was != etcdraft.StateLeader {
		g.logger.Info("became leader", "term", g.term)
	}
	g.notify()
}

// appendLoop is the appender: it persists what the loop queued, in order.
func (g *group) appendLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.appendc:
		}
		g.qmu.Lock()
		msgs := g.appendQ
		g.appendQ = nil
		g.qmu.Unlock()
		if len(msgs) == 0 {
			continue
		}
		if err := g.persist(msgs); err != nil {
			g.fail(err)
			return
		}
	}
}

// persist does what a run of MsgStorageAppend messages ask, in order: a
// snapshot install, entries (contiguous ones of several messages with one
// fsync), a changed term or vote (fsynced), then delivers their
// responses, which the durable state now backs.
func (g *group) persist(msgs []*pb.Message) error {
	var ents []*pb.Entry
	var persisted, truncated uint64
	flush := func() error {
		if len(ents) == 0 {
			return nil
		}
		trunc, err := g.st.append(context.Background(), ents)
		if trunc != 0 {
			g.entriesRemovedAfter(trunc)
			if truncated == 0 || trunc < truncated {
				truncated = trunc
			}
		}
		if err != nil {
			return err
		}
		g.notePlaced(ents)
		persisted = ents[len(ents)-1].GetIndex()
		ents = nil
		return nil
	}
	var hs *pb.HardState
	for _, m := range msgs {
		if s := m.GetSnapshot(); !etcdraft.IsEmptySnap(s) {
			if err := flush(); err != nil {
				return err
			}
			if err := g.installSnapshot(s); err != nil {
				return err
			}
			persisted = s.GetMetadata().GetIndex()
			// The log now ends at the snapshot: entries proposed after it
			// are gone.
			if truncated == 0 || persisted < truncated {
				truncated = persisted
			}
		}
		if len(m.Entries) > 0 {
			if n := len(ents); n > 0 && m.Entries[0].GetIndex() != ents[n-1].GetIndex()+1 {
				if err := flush(); err != nil {
					return err
				}
			}
			ents = append(ents, m.Entries...)
		}
		if m.Term != nil {
			hs = &pb.HardState{Term: new(m.GetTerm()), Vote: new(m.GetVote()), Commit: new(m.GetCommit())}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if hs != nil {
		g.latestHS = hs
		saved := g.st.hs
		if hs.GetTerm() != saved.GetTerm() || hs.GetVote() != saved.GetVote() ||
			hs.GetCommit() > saved.GetCommit() && g.now().Sub(g.lastCheckpoint) >= g.cfg.CommitCheckpoint {
			if err := g.st.saveHardState(hs); err != nil {
				return err
			}
			g.lastCheckpoint = g.now()
		}
	}
	if persisted != 0 || truncated != 0 {
		g.pushLocal(localItem{persisted: persisted, truncated: truncated})
	}
	for _, m := range msgs {
		g.deliver(m.GetResponses())
	}
	return nil
}

// notePlaced records where the pending appends among ents were written.
func (g *group) notePlaced(ents []*pb.Entry) {
	g.pmu.Lock()
	defer g.pmu.Unlock()
	if len(g.pending) == 0 {
		return
	}
	for _, e := range ents {
		if p := g.pending[e.GetIndex()]; p != nil && p.term == e.GetTerm() {
			if place, ok := wal.PeekBatch(g.st.placed(e)); ok {
				p.base, p.placed = place.BaseOffset, true
			}
		}
	}
}

// setStaged hands the appender the segments fetched for a MsgSnap.
func (g *group) setStaged(st *stagedSnapshot) {
	g.mu.Lock()
	g.staged = st
	g.mu.Unlock()
}

// installSnapshot replaces the log by the snapshot's segments, fetched
// before the MsgSnap was stepped.
func (g *group) installSnapshot(s *pb.Snapshot) error {
	sd, err := decodeSnapData(s.GetData())
	if err != nil {
		return fmt.Errorf("install snapshot: %w", err)
	}
	if sd.Snap.Index != s.GetMetadata().GetIndex() || sd.Snap.Term != s.GetMetadata().GetTerm() {
		return fmt.Errorf("install snapshot: descriptor names %d/%d, raft %d/%d", sd.Snap.Index, sd.Snap.Term, s.GetMetadata().GetIndex(), s.GetMetadata().GetTerm())
	}
	g.mu.Lock()
	staged := g.staged
	g.staged = nil
	g.mu.Unlock()
	if staged == nil || staged.index != sd.Snap.Index || staged.term != sd.Snap.Term {
		return fmt.Errorf("install snapshot %d/%d: its segments were not fetched", sd.Snap.Index, sd.Snap.Term)
	}
	if err := g.rl.InstallSnapshot(sd.Snap); err != nil {
		return err
	}
	g.st.cache.reset()
	g.entriesRemovedAfter(sd.Snap.Index)
	// The snapshot covers the other proposals of this node: whether their
	// entries or a newer leader's are in it is not known here.
	g.pmu.Lock()
	for i, p := range g.pending {
		delete(g.pending, i)
		p.reply(proposalResult{err: fmt.Errorf("%s: replaced by a snapshot: %w", g.key, ErrOutcomeUnknown)})
	}
	g.pmu.Unlock()
	if g.replay != nil {
		// The internal state misses the records the snapshot brought:
		// rebuild it from the whole log, in order, after what the applier
		// has queued.
		g.qmu.Lock()
		g.applyQ = append(g.applyQ, &pb.Message{Type: pb.MsgStorageApply.Enum(), Context: []byte("replay")})
		g.qmu.Unlock()
		wake(g.applyc)
	}
	return nil
}

// entriesRemovedAfter answers the proposals whose entries a newer leader
// replaced: they are not in the log.
func (g *group) entriesRemovedAfter(idx uint64) {
	g.pmu.Lock()
	defer g.pmu.Unlock()
	for i, p := range g.pending {
		if i > idx {
			delete(g.pending, i)
			p.reply(proposalResult{err: fmt.Errorf("%s: index %d: %w", g.key, i, ErrLost)})
		}
	}
}

// applyLoop is the applier: it applies what the loop queued, in order.
func (g *group) applyLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.applyc:
		}
		g.qmu.Lock()
		msgs := g.applyQ
		g.applyQ = nil
		g.qmu.Unlock()
		if len(msgs) == 0 {
			continue
		}
		if err := g.applyMsgs(msgs); err != nil {
			g.fail(err)
			return
		}
	}
}

func (g *group) applyMsgs(msgs []*pb.Message) error {
	for _, m := range msgs {
		if string(m.GetContext()) == "replay" {
			if err := g.replay(); err != nil {
				return fmt.Errorf("rebuild state after a snapshot: %w", err)
			}
			continue
		}
		if len(m.Entries) > 0 {
			if err := g.applyCommitted(m.Entries); err != nil {
				return err
			}
		}
		g.deliver(m.GetResponses())
	}
	g.pushLocal(localItem{applied: true})
	return nil
}

// applyCommitted moves the committed end, applies internal records and
// answers the appends that committed.
func (g *group) applyCommitted(ents []*pb.Entry) error {
	last := ents[len(ents)-1].GetIndex()
	if err := g.rl.Commit(last); err != nil {
		return err
	}
	if g.apply != nil {
		var recs []wal.Record
		for _, e := range ents {
			if len(e.GetData()) == 0 {
				continue
			}
			var err error
			var info wal.BatchInfo
			recs, info, err = wal.DecodeBatch(g.st.placed(e), recs[:0])
			if err != nil {
				return fmt.Errorf("apply entry %d: %w", e.GetIndex(), err)
			}
			if info.Control {
				continue
			}
			if err := g.apply(recs); err != nil {
				return fmt.Errorf("apply entry %d: %w", e.GetIndex(), err)
			}
		}
	}
	g.mu.Lock()
	if g.leaderTerm != 0 && g.readyTerm != g.leaderTerm {
		for _, e := range ents {
			if e.GetTerm() == g.leaderTerm {
				g.readyTerm = g.leaderTerm
				g.notifyLocked()
				break
			}
		}
	}
	g.mu.Unlock()
	g.pmu.Lock()
	defer g.pmu.Unlock()
	for _, e := range ents {
		p := g.pending[e.GetIndex()]
		if p == nil {
			continue
		}
		delete(g.pending, e.GetIndex())
		if e.GetTerm() != p.term || !p.placed {
			p.reply(proposalResult{err: fmt.Errorf("%s: index %d: %w", g.key, e.GetIndex(), ErrLost)})
			continue
		}
		p.reply(proposalResult{term: p.term, res: wal.AppendResult{
			BaseOffset: p.base, LastOffset: p.base + int64(p.batch.Records()) - 1, LogAppendTime: p.at,
		}})
	}
	return nil
}

// resolveDups answers the retried batches that are now committed.
func (g *group) resolveDups() {
	if len(g.dups) == 0 {
		return
	}
	hw := g.rl.HighWatermark()
	keep := g.dups[:0]
	for _, d := range g.dups {
		if hw > d.res.LastOffset {
			d.p.reply(proposalResult{res: d.res, term: d.term})
			continue
		}
		keep = append(keep, d)
	}
	clear(g.dups[len(keep):])
	g.dups = keep
}

func (g *group) failDups(err error) {
	for _, d := range g.dups {
		d.p.reply(proposalResult{err: err})
	}
	g.dups = nil
}

// confirm asks a quorum to confirm this node's leadership before a
// refused batch is answered.
func (g *group) confirm(p *proposal) {
	g.nextReadID++
	g.confirms = append(g.confirms, &confirmWait{p: p, id: g.nextReadID})
	g.rn.ReadIndex(binary.BigEndian.AppendUint64(nil, g.nextReadID))
}

// resolveConfirms checks again, now that its leadership is confirmed and
// what was committed then is applied, each refused batch.
func (g *group) resolveConfirms() {
	if len(g.confirms) == 0 {
		return
	}
	commit := g.rl.CommitIndex()
	keep := g.confirms[:0]
	for _, c := range g.confirms {
		if c.read && commit >= c.index {
			c.p.confirmed = true
			g.deferred = append(g.deferred, c.p)
			continue
		}
		if c.p.ctx.Err() != nil {
			c.p.reply(proposalResult{err: fmt.Errorf("append to %s: %w", g.key, c.p.ctx.Err())}) // nothing written
			continue
		}
		keep = append(keep, c)
	}
	clear(g.confirms[len(keep):])
	g.confirms = keep
}

// propose places each batch after the end of Raft's log (written or not)
// and proposes it. Only a leader that applied an entry of its term
// proposes: its log then holds every committed entry, so that its
// producer checks see every committed batch. A producer's batch waits
// while an earlier one of the same producer is not written yet, so that
// the check (against the written log) sees that one too.
func (g *group) propose(props []*proposal) {
	if g.rn.HasReady() {
		if err := g.processReady(); err != nil {
			for _, p := range props {
				p.reply(proposalResult{err: err})
			}
			return
		}
	}
	bs := g.rn.BasicStatus()
	term := bs.GetTerm()
	g.mu.Lock()
	leader := bs.RaftState == etcdraft.StateLeader && g.readyTerm == term && term != 0
	g.mu.Unlock()
	for i, p := range props {
		if err := p.ctx.Err(); err != nil {
			p.reply(proposalResult{err: fmt.Errorf("append to %s: %w", g.key, err)}) // nothing written
			continue
		}
		if !leader {
			p.reply(proposalResult{err: &NotLeaderError{Topic: g.key.topic, Partition: g.key.part, Leader: g.leaderHint()}})
			continue
		}
		id, epoch, seq := p.batch.Producer()
		if id > 0 {
			in, busy := g.inflight[id]
			// The next batch of a producer whose previous one this leader
			// proposed in its term and has not written yet follows it
			// without a gap, and cannot be a retry of a batch in the log
			// (those come before that one): it is proposed at once, after
			// the fence check. Raft commits it only with that one, which
			// stays in this leader's log while its term lasts. Any other
			// batch of the producer waits until that one is written.
			next := busy && in.term == term && epoch == in.epoch && seq == wal.NextSequence(in.lastSeq)
			if busy && !next {
				g.deferred = append(g.deferred, p)
				continue
			}
			var err error
			if g.fence != nil {
				err = g.fence(id, epoch)
			}
			var dup *wal.AppendResult
			if err == nil && !next {
				dup, err = g.rl.CheckProducer(id, epoch, seq, p.batch.Records())
			}
			if err != nil {
				if p.confirmed {
					p.reply(proposalResult{err: fmt.Errorf("append to %s: %w", g.key, err)})
				} else {
					g.confirm(p)
				}
				continue
			}
			if dup != nil {
				g.dups = append(g.dups, &dupWait{p: p, res: *dup, term: term})
				if p.written != nil {
					p.written()
				}
				continue
			}
		}
		idx := g.tailIdx + 1
		data := p.batch.Finish(0, term, idx) // the offset is placed when written
		p.term, p.index = term, idx
		g.pmu.Lock()
		g.pending[idx] = p
		g.pmu.Unlock()
		if err := g.rn.Propose(data); err != nil {
			g.pmu.Lock()
			delete(g.pending, idx)
			g.pmu.Unlock()
			if errors.Is(err, etcdraft.ErrProposalDropped) && g.rn.BasicStatus().RaftState == etcdraft.StateLeader {
				// Too much uncommitted: retry after the next commit.
				g.throttled = true
				g.deferred = append(g.deferred, props[i:]...)
				return
			}
			p.reply(proposalResult{err: &NotLeaderError{Topic: g.key.topic, Partition: g.key.part, Leader: g.leaderHint()}})
			continue
		}
		g.tailIdx = idx
		if id > 0 {
			g.inflight[id] = inflightBatch{term: term, index: idx, epoch: epoch, lastSeq: p.batch.LastSequence()}
		}
		if p.written != nil {
			p.written()
		}
	}
	g.resolveDups()
}

func (g *group) leaderHint() uint64 {
	if g.lead == g.self {
		return 0
	}
	return g.lead
}

// notify wakes the callers waiting for a change of role, leader or
// readiness, and refreshes the status. Loop goroutine only.
func (g *group) notify() {
	g.mu.Lock()
	g.status.Leader, g.status.Term = g.lead, g.term
	g.status.Role = roleName(g.state)
	g.notifyLocked()
	g.mu.Unlock()
}

// notifyLocked is notify's part that any goroutine may do, holding mu.
func (g *group) notifyLocked() {
	g.status.Serving = g.leaderTerm != 0 && g.readyTerm == g.leaderTerm
	close(g.changed)
	g.changed = make(chan struct{})
}

func roleName(s etcdraft.StateType) string {
	switch s {
	case etcdraft.StateLeader:
		return "leader"
	case etcdraft.StateCandidate:
		return "candidate"
	case etcdraft.StatePreCandidate:
		return "pre-candidate"
	}
	return "follower"
}

// updateStatus refreshes the metrics after a Ready.
func (g *group) updateStatus() {
	var fol []FollowerStatus
	if g.state == etcdraft.StateLeader {
		g.rn.WithProgress(func(id uint64, _ etcdraft.ProgressType, pr tracker.Progress) {
			if id == g.self {
				return
			}
			fol = append(fol, FollowerStatus{Node: id, Match: pr.Match, Lag: g.tailIdx - min(pr.Match, g.tailIdx),
				State: strings.ToLower(strings.TrimPrefix(pr.State.String(), "State")), Active: pr.RecentActive})
		})
	}
	bs := g.rn.BasicStatus()
	g.mu.Lock()
	g.status.Term = g.term
	g.status.Leader = g.lead
	if g.failed == nil {
		g.status.Role = roleName(g.state)
	}
	g.status.CommitIndex = bs.GetCommit()
	g.status.LastIndex = g.tailIdx
	g.status.Followers = fol
	g.mu.Unlock()
}

// fail stops the group: its goroutines exit and every waiting caller
// gets ErrGroupFailed. Any goroutine may call it.
func (g *group) fail(err error) error {
	g.mu.Lock()
	if g.failed == nil {
		g.failed = fmt.Errorf("%s: %w: %w", g.key, err, ErrGroupFailed)
		g.status.Role = "failed"
		g.status.Error = err.Error()
		g.status.Serving = false
		close(g.changed)
		g.changed = make(chan struct{})
		g.logger.Error("replica stopped; restart the node to recover it", "err", err)
		if g.cancel != nil {
			g.cancel()
		}
	}
	ferr := g.failed
	g.mu.Unlock()
	return ferr
}

// failWaiting answers everything waiting. The loop's goroutine, or after
// the goroutines exited.
func (g *group) failWaiting(err error) {
	g.pmu.Lock()
	for i, p := range g.pending {
		delete(g.pending, i)
		p.reply(proposalResult{err: fmt.Errorf("%w: %w", err, ErrOutcomeUnknown)})
	}
	g.pmu.Unlock()
	for _, p := range append(g.deferred, g.taken...) {
		p.reply(proposalResult{err: err})
	}
	g.deferred, g.taken = nil, nil
	for _, c := range g.confirms {
		c.p.reply(proposalResult{err: err})
	}
	g.confirms = nil
	g.failDups(err)
}

func (g *group) failedErr() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failed
}

// serving waits until this node leads the group and has applied an entry
// of its term (so that it knows the whole committed log). It returns a
// *NotLeaderError naming the leader if another node leads, at once, or
// when ctx ends without a leader.
func (g *group) serving(ctx context.Context) error {
	for {
		g.mu.Lock()
		st, ch, failed := g.status, g.changed, g.failed
		g.mu.Unlock()
		if failed != nil {
			return failed
		}
		if st.Serving {
			return nil
		}
		if st.Role == "follower" && st.Leader != 0 && st.Leader != g.self {
			return &NotLeaderError{Topic: g.key.topic, Partition: g.key.part, Leader: st.Leader}
		}
		select {
		case <-ch:
		case <-g.done:
			return fmt.Errorf("%s: %w", g.key, wal.ErrClosed)
		case <-ctx.Done():
			return &NotLeaderError{Topic: g.key.topic, Partition: g.key.part}
		}
	}
}

// submit hands a batch to the loop and waits for its outcome.
func (g *group) submit(ctx context.Context, p *proposal) (proposalResult, error) {
	select {
	case g.props <- p:
	case <-g.done:
		return proposalResult{}, fmt.Errorf("%s: %w", g.key, wal.ErrClosed)
	case <-ctx.Done():
		return proposalResult{}, fmt.Errorf("append to %s: %w", g.key, ctx.Err()) // not queued: nothing written
	}
	select {
	case r := <-p.res:
		return r, r.err
	case <-g.done:
		select {
		case r := <-p.res:
			return r, r.err
		default:
		}
		return proposalResult{}, fmt.Errorf("append to %s: replica stopped: %w", g.key, ErrOutcomeUnknown)
	case <-ctx.Done():
		return proposalResult{}, fmt.Errorf("append to %s: %w: %w", g.key, ctx.Err(), ErrOutcomeUnknown)
	}
}

// do runs f on the loop goroutine and waits for it.
func (g *group) do(ctx context.Context, f func()) error {
	done := make(chan struct{})
	select {
	case g.ctl <- func() { f(); close(done) }:
	case <-g.done:
		return fmt.Errorf("%s: %w", g.key, wal.ErrClosed)
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-g.done:
		return fmt.Errorf("%s: %w", g.key, wal.ErrClosed)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// raftLogger sends raft's own messages to slog: its info is debug here
// (this package logs the leadership changes itself).
type raftLogger struct{ l *slog.Logger }

func (r raftLogger) Debug(v ...any)              { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Debugf(f string, v ...any)   { r.l.Debug(fmt.Sprintf(f, v...)) }
func (r raftLogger) Info(v ...any)               { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Infof(f string, v ...any)    { r.l.Debug(fmt.Sprintf(f, v...)) }
func (r raftLogger) Warning(v ...any)            { r.l.Warn(fmt.Sprint(v...)) }
func (r raftLogger) Warningf(f string, v ...any) { r.l.Warn(fmt.Sprintf(f, v...)) }
func (r raftLogger) Error(v ...any)              { r.l.Error(fmt.Sprint(v...)) }
func (r raftLogger) Errorf(f string, v ...any)   { r.l.Error(fmt.Sprintf(f, v...)) }
func (r raftLogger) Fatal(v ...any)              { panic(fmt.Sprint(v...)) }
func (r raftLogger) Fatalf(f string, v ...any)   { panic(fmt.Sprintf(f, v...)) }
func (r raftLogger) Panic(v ...any)              { panic(fmt.Sprint(v...)) }
func (r raftLogger) Panicf(f string, v ...any)   { panic(fmt.Sprintf(f, v...)) }
