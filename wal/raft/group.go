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

// groupKey names a partition, hence its Raft group.
type groupKey struct {
	topic string
	part  int32
}

func (k groupKey) String() string { return fmt.Sprintf("%s-%d", k.topic, k.part) }

// sender takes a group's outgoing messages. It must not block: what it
// cannot queue it drops, returning the nodes it could not reach so that
// the group reports them to Raft.
type sender interface {
	send(key groupKey, msgs []*pb.Message) (unreachable []uint64)
}

// proposal is an append waiting to enter a group's log.
type proposal struct {
	ctx   context.Context
	batch *wal.PreparedBatch
	at    time.Time // log append time
	res   chan proposalResult

	term, index uint64 // set once proposed
	base        int64
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

// group is one partition's Raft group on this node: a RawNode over the
// partition's log, driven by one goroutine (run) or, in tests, by direct
// calls of tick, step, propose and processReady. All fields but the ones
// under mu belong to that goroutine.
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
	// apply, for internal topics, applies committed records to the node's
	// state (topics, producer ids, consumer offsets) in log order.
	apply func(recs []wal.Record) error
	// fence says whether a producer epoch is fenced cluster-wide.
	fence func(id int64, epoch int16) error

	inbox chan *pb.Message
	props chan *proposal
	tickc chan struct{}
	ctl   chan func()

	deferred       []*proposal
	taken          []*proposal // taken from props, proposed by drain
	throttled      bool
	pending        map[uint64]*proposal
	dups           []*dupWait
	confirms       []*confirmWait
	nextReadID     uint64
	state          etcdraft.StateType
	lead, term     uint64
	readyTerm      uint64
	hs             *pb.HardState // latest, saved or not
	lastCheckpoint time.Time
	staged         *stagedSnapshot // follower: segments fetched for a MsgSnap being stepped

	mu           sync.Mutex
	snapActivity map[uint64]time.Time // leader: follower → last snapshot chunk asked
	status       PartitionStatus
	changed      chan struct{} // closed and replaced when role, leader or readiness change
	failed       error
	done         chan struct{} // closed when run returns
}

func newGroup(key groupKey, self uint64, voters []uint64, cfg *Config, rl *wal.ReplicaLog, out sender, logger *slog.Logger) (*group, error) {
	st := newStorage(rl, voters, self, cfg.EntryCacheBytes)
	g := &group{
		key: key, self: self, voters: voters, cfg: cfg, rl: rl, st: st, out: out,
		logger: logger.With("topic", key.topic, "partition", key.part),
		now:    time.Now,
		inbox:  make(chan *pb.Message, 4096),
		props:  make(chan *proposal, 1024),
		tickc:  make(chan struct{}, 1),
		ctl:    make(chan func(), 64),

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
	g.hs = hs
	g.term = hs.GetTerm()
	g.lastCheckpoint = g.now()
	g.status = PartitionStatus{Topic: key.topic, Partition: key.part, Role: "follower", Term: g.term}
	return g, nil
}

// run drives the group until ctx ends or the group fails.
func (g *group) run(ctx context.Context) (err error) {
	defer close(g.done)
	defer func() {
		if r := recover(); r != nil {
			err = g.fail(fmt.Errorf("panic in raft group: %v\n%s", r, debug.Stack()))
		}
	}()
	if len(g.voters) == 1 {
		// Alone: no need to wait for an election timeout.
		_ = g.rn.Campaign()
	}
	for {
		if err := g.processReady(); err != nil {
			return err
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
			g.shutdown()
			return nil
		case <-g.tickc:
			g.tick()
		case m := <-g.inbox:
			g.step(m)
		case p := <-props:
			g.take(p)
		case f := <-g.ctl:
			f()
		}
		g.drain(props)
	}
}

// drain handles, without waiting, what else arrived: messages first (an
// acknowledgement commits entries and answers their appends in the Ready
// about to be handled), then control functions, then new appends, all
// proposed together.
func (g *group) drain(props chan *proposal) {
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

// take queues an append for the next proposal round.
func (g *group) take(p *proposal) { g.taken = append(g.taken, p) }

// proposeDeferred proposes the batches put aside (a second batch of a
// producer, a confirmed refusal, a full uncommitted budget) and reports
// whether there were any.
func (g *group) proposeDeferred() bool {
	if len(g.deferred) == 0 || g.throttled {
		return false
	}
	d := g.deferred
	g.deferred = nil
	g.propose(d)
	return true
}

// shutdown persists the commit index and answers what is waiting.
func (g *group) shutdown() {
	if g.hs != nil {
		if err := g.st.saveHardState(g.hs); err != nil && !errors.Is(err, wal.ErrClosed) {
			g.logger.Warn("save replica state on shutdown failed", "err", err)
		}
	}
	g.failWaiting(fmt.Errorf("%s: %w: node shutting down", g.key, ErrOutcomeUnknown))
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

// isResponse reports whether a message acknowledges this Ready's
// persisted state (entries, vote): it may leave only after that state is
// durable. Every other message may leave before this Ready's entries are
// written (the leader writes in parallel with its followers); a new term
// or vote is always saved first.
func isResponse(m *pb.Message) bool {
	switch m.GetType() {
	case pb.MsgAppResp, pb.MsgVoteResp, pb.MsgPreVoteResp:
		return true
	}
	return false
}

// processReady handles Ready structs until the node has none.
func (g *group) processReady() error {
	if g.failedErr() != nil {
		return g.failedErr()
	}
	for g.rn.HasReady() {
		if err := g.handleReady(); err != nil {
			return g.fail(err)
		}
	}
	return nil
}

// handleReady follows Raft's rules: install a snapshot, save a changed
// term or vote (fsynced) before any message, send the messages that do
// not depend on this Ready's entries, persist the entries (fsynced), send
// the rest, apply the committed entries, advance.
func (g *group) handleReady() error {
	rd := g.rn.Ready()
	if rd.SoftState != nil {
		g.softState(rd.SoftState)
	}
	if !etcdraft.IsEmptySnap(rd.Snapshot) {
		if err := g.installSnapshot(rd.Snapshot); err != nil {
			return err
		}
	}
	if hs := rd.HardState; hs != nil {
		if hs.GetTerm() != g.st.hs.GetTerm() || hs.GetVote() != g.st.hs.GetVote() || !etcdraft.IsEmptySnap(rd.Snapshot) {
			if err := g.st.saveHardState(hs); err != nil {
				return err
			}
			g.lastCheckpoint = g.now()
		}
		g.hs = hs
		g.term = hs.GetTerm()
	}
	var after []*pb.Message
	var early []*pb.Message
	for _, m := range rd.Messages {
		if isResponse(m) {
			after = append(after, m)
		} else {
			early = append(early, m)
		}
	}
	g.send(early)
	// Committed entries this node already holds are applied (and their
	// appends answered) before the new entries are written, so that the
	// answers do not wait for that fsync; the rest after.
	committed := rd.CommittedEntries
	if stable, _, _ := g.rl.Last(); len(committed) > 0 && len(rd.Entries) > 0 {
		n := 0
		for n < len(committed) && committed[n].GetIndex() <= stable && committed[n].GetIndex() < rd.Entries[0].GetIndex() {
			n++
		}
		if n > 0 {
			if err := g.applyCommitted(committed[:n]); err != nil {
				return err
			}
			committed = committed[n:]
		}
	}
	trunc, err := g.st.append(context.Background(), rd.Entries)
	if trunc != 0 {
		g.entriesRemovedAfter(trunc)
	}
	if err != nil {
		return err
	}
	g.send(after)
	if len(committed) > 0 {
		if err := g.applyCommitted(committed); err != nil {
			return err
		}
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
	g.resolveConfirms()
	if g.hs != nil && g.hs.GetCommit() > g.st.hs.GetCommit() && g.now().Sub(g.lastCheckpoint) >= g.cfg.CommitCheckpoint {
		if err := g.st.saveHardState(g.hs); err != nil {
			return err
		}
		g.lastCheckpoint = g.now()
	}
	g.rn.Advance(rd)
	g.updateStatus()
	return nil
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

func (g *group) softState(ss *etcdraft.SoftState) {
	was := g.state
	g.state, g.lead = ss.RaftState, ss.Lead
	if was == etcdraft.StateLeader && ss.RaftState != etcdraft.StateLeader {
		g.logger.Info("lost leadership", "term", g.term, "leader", ss.Lead)
		g.readyTerm = 0
		g.failDups(fmt.Errorf("%s: %w: leadership lost", g.key, ErrOutcomeUnknown))
		for _, c := range g.confirms {
			c.p.reply(proposalResult{err: &NotLeaderError{Topic: g.key.topic, Partition: g.key.part, Leader: ss.Lead}})
		}
		g.confirms = nil
		g.mu.Lock()
		clear(g.snapActivity)
		g.mu.Unlock()
	}
	if ss.RaftState == etcdraft.StateLeader && was != etcdraft.StateLeader {
		g.logger.Info("became leader", "term", g.rn.BasicStatus().GetTerm())
	}
	g.notify()
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
	staged := g.staged
	g.staged = nil
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
	for i, p := range g.pending {
		delete(g.pending, i)
		p.reply(proposalResult{err: fmt.Errorf("%s: %w: replaced by a snapshot", g.key, ErrOutcomeUnknown)})
	}
	return nil
}

// entriesRemovedAfter answers the proposals whose entries a newer leader
// replaced: they are not in the log.
func (g *group) entriesRemovedAfter(idx uint64) {
	for i, p := range g.pending {
		if i > idx {
			delete(g.pending, i)
			p.reply(proposalResult{err: fmt.Errorf("%s: %w (index %d)", g.key, ErrLost, i)})
		}
	}
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
			recs, info, err = wal.DecodeBatch(e.GetData(), recs[:0])
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
	for _, e := range ents {
		if g.state == etcdraft.StateLeader && e.GetTerm() == g.term && g.readyTerm != g.term {
			g.readyTerm = g.term
			g.notify()
		}
		if p := g.pending[e.GetIndex()]; p != nil {
			delete(g.pending, e.GetIndex())
			if e.GetTerm() != p.term {
				p.reply(proposalResult{err: fmt.Errorf("%s: %w (index %d)", g.key, ErrLost, e.GetIndex())})
				continue
			}
			p.reply(proposalResult{term: p.term, res: wal.AppendResult{
				BaseOffset: p.base, LastOffset: p.base + int64(p.batch.Records()) - 1, LogAppendTime: p.at,
			}})
		}
	}
	g.throttled = false
	g.resolveDups()
	return nil
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

// propose places each batch after the log's end and proposes it. Only a
// leader that committed an entry of its term proposes: it then knows the
// whole committed log, so its producer checks and offsets are right.
// Two batches of one producer are not proposed in the same round: the
// second waits until the first is written, so that its check sees it.
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
	leader := bs.RaftState == etcdraft.StateLeader && g.readyTerm == bs.GetTerm()
	last, _, next := g.rl.Last()
	seen := map[int64]bool{}
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
			if seen[id] {
				g.deferred = append(g.deferred, props[i:]...)
				return
			}
			var err error
			if g.fence != nil {
				err = g.fence(id, epoch)
			}
			var dup *wal.AppendResult
			if err == nil {
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
				g.dups = append(g.dups, &dupWait{p: p, res: *dup, term: bs.GetTerm()})
				continue
			}
			seen[id] = true
		}
		data := p.batch.Finish(next, bs.GetTerm(), last+1)
		if err := g.rn.Propose(data); err != nil {
			if errors.Is(err, etcdraft.ErrProposalDropped) && g.rn.BasicStatus().RaftState == etcdraft.StateLeader {
				// Too much uncommitted: retry after the next commit.
				g.throttled = true
				g.deferred = append(g.deferred, props[i:]...)
				return
			}
			p.reply(proposalResult{err: &NotLeaderError{Topic: g.key.topic, Partition: g.key.part, Leader: g.leaderHint()}})
			continue
		}
		p.term, p.index, p.base = bs.GetTerm(), last+1, next
		g.pending[p.index] = p
		last++
		next += int64(p.batch.Records())
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
// readiness. Loop goroutine only.
func (g *group) notify() {
	g.mu.Lock()
	close(g.changed)
	g.changed = make(chan struct{})
	g.status.Leader, g.status.Term = g.lead, g.term
	g.status.Role = roleName(g.state)
	g.status.Serving = g.state == etcdraft.StateLeader && g.readyTerm == g.term && g.term != 0
	g.mu.Unlock()
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
	last, _, _ := g.rl.Last()
	var fol []FollowerStatus
	if g.state == etcdraft.StateLeader {
		g.rn.WithProgress(func(id uint64, _ etcdraft.ProgressType, pr tracker.Progress) {
			if id == g.self {
				return
			}
			fol = append(fol, FollowerStatus{Node: id, Match: pr.Match, Lag: last - min(pr.Match, last),
				State: strings.ToLower(strings.TrimPrefix(pr.State.String(), "State")), Active: pr.RecentActive})
		})
	}
	g.mu.Lock()
	g.status.Term = g.term
	g.status.Leader = g.lead
	g.status.Role = roleName(g.state)
	g.status.CommitIndex = g.hs.GetCommit()
	g.status.LastIndex = last
	g.status.Followers = fol
	g.status.Serving = g.state == etcdraft.StateLeader && g.readyTerm == g.term && g.term != 0
	g.mu.Unlock()
}

// fail stops the group: every waiting caller gets ErrGroupFailed.
func (g *group) fail(err error) error {
	g.mu.Lock()
	if g.failed == nil {
		g.failed = fmt.Errorf("%s: %w: %w", g.key, ErrGroupFailed, err)
		g.status.Role = "failed"
		g.status.Error = err.Error()
		close(g.changed)
		g.changed = make(chan struct{})
		g.logger.Error("replica stopped; restart the node to recover it", "err", err)
	}
	ferr := g.failed
	g.mu.Unlock()
	g.failWaiting(ferr)
	return ferr
}

func (g *group) failWaiting(err error) {
	for i, p := range g.pending {
		delete(g.pending, i)
		p.reply(proposalResult{err: fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)})
	}
	for _, p := range g.deferred {
		p.reply(proposalResult{err: err})
	}
	g.deferred = nil
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

// serving waits until this node leads the group and has committed an
// entry of its term (so that it knows the whole committed log). It
// returns a *NotLeaderError naming the leader if another node leads, at
// once, or when ctx ends without a leader.
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
		return proposalResult{}, fmt.Errorf("append to %s: %w: replica stopped", g.key, ErrOutcomeUnknown)
	case <-ctx.Done():
		return proposalResult{}, fmt.Errorf("append to %s: %w: %w", g.key, ErrOutcomeUnknown, ctx.Err())
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
