// Package raft replicates sluice's log (package wal) over a static
// cluster of nodes: one Raft group (go.etcd.io/raft/v3) per partition,
// whose Raft log is the partition's segment log itself. A Log is one node;
// its methods mirror *wal.Log's and may be called on any node.
//
// # Contract
//
//   - Append returns once the batch is committed: written and fsynced on a
//     majority of the partition's replicas (2 of 3; the only one with a
//     replication factor of 1). Offsets are dense and identical on every
//     replica.
//   - Readers (Fetch, LatestOffset, EarliestOffset, ProducerState,
//     FetchOffsets) are served by the partition's leader, and only once it
//     applied an entry of its own term: before that, its committed end may
//     trail what an earlier leader committed. A reader never sees past the
//     committed end, so nothing it saw is ever taken back.
//   - A committed entry is never removed. A replica told to truncate below
//     its commit index, or whose storage fails, stops (ErrGroupFailed) and
//     logs why; the other replicas go on.
//   - Idempotent producers work across leader changes: the producer state
//     (id, epoch, last five batches' sequences and offsets, source
//     position) lives in the batch headers, so every replica rebuilds the
//     same state from the same log, and a new leader answers a retry of a
//     batch an old leader wrote with the batch's original offsets.
//   - Topics, producer ids and consumer offsets are replicated too: in the
//     internal topics __sluice_cluster, __sluice_producers and
//     __consumer_offsets, each one partition replicated on every node.
//
// Example:
//
//	l, err := raft.Open(raft.Config{
//		Dir: "/var/lib/sluice", NodeID: 1,
//		Nodes: []raft.Node{{1, "10.0.0.1:9400"}, {2, "10.0.0.2:9400"}, {3, "10.0.0.3:9400"}},
//	})
//	...
//	go l.Run(ctx) // transport, Raft groups, retention and compaction
//	err = l.CreateTopic("db.inventory.orders", cfg) // replication factor 3
//	res, err := l.Append(ctx, "db.inventory.orders", 0, recs, wal.AppendOptions{})
//	// cancel ctx, wait for Run to return, then:
//	l.Close()
//
// # Storage: the partition log is the Raft log
//
// One Raft entry is one record batch; the entry's Data is the batch's
// bytes, whose header holds the entry's term and index (see package wal,
// "Batch format"), so nothing is written twice. The raft.Storage adapter
// (storage.go) reads entries by index from the segments (recent ones from
// memory), answers Term(FirstIndex-1) from the log's start recorded in the
// partition's replica state file, and keeps the HardState there. A Raft
// no-op (a new leader's empty entry) is written as a control batch, which
// takes no offset. The leader proposes a batch without an offset; each
// replica places it at its log's next offset as it writes it
// (wal.PlaceBatch), which is the same on every replica because their logs
// agree up to it (Raft's log matching).
//
// The Raft snapshot is a small descriptor (wal.Snapshot) of the sealed,
// committed segment files of the leader's log. A follower behind the
// leader's log start (retention removed what it lacks) fetches those files
// in chunks over the transport, verifies them, and only then steps the
// snapshot into Raft, which makes the follower replace its log by them
// (ReplicaLog.InstallSnapshot, crash-safe).
//
// # The Ready loop
//
// Each group uses Raft's asynchronous storage writes. Three goroutines:
//
//   - The loop owns the RawNode: it ticks, steps messages, proposes, and
//     handles each Ready. Messages to other nodes leave at once; Raft
//     attaches those that depend on durable state (append
//     acknowledgements, votes) to its storage messages instead.
//   - The appender handles the storage-append messages in order: snapshot
//     install, entries (contiguous entries of several messages under one
//     fsync), a new term or vote (fsynced to the replica state file). Only
//     then does it deliver their attached responses: nothing is
//     acknowledged, and no vote granted, before it is durable. The commit
//     index is written at most every Config.CommitCheckpoint; a restarted
//     replica serves up to what it wrote until the leader tells it more.
//   - The applier handles the apply messages in order: it moves the
//     partition's committed end (readers wake), applies internal topics'
//     records, and answers the appends that committed (inline in the loop
//     for data partitions, whose apply is only that).
//
// Before proposing a batch with a producer id, the leader checks it
// against the producer state of its written log: a retry of a batch in
// the log waits for that batch to commit and gets its offsets. A
// producer's batch that directly follows (same epoch, next sequence) the
// newest one this leader proposed for it in its term, not yet written, is
// proposed at once without the log check (the epoch fence still applies):
// it can be neither a retry nor after a gap, and Raft commits it only with
// that one. Any other batch of the producer waits until that newest one
// is written, so that the check sees it. An idempotent append made on the
// leader's node reports its placement (Written) when proposed, so that a
// source task sends its next batch without waiting for the commit. A
// refusal (fenced epoch, sequence gap) is answered only after a quorum
// confirmed the leadership (a Raft ReadIndex): a leader cut off from the
// others still believes it leads until its election timeout passes, and
// its view of the producer may be stale.
//
// # Transport
//
// One TCP connection per node pair, dialed by the node with the smaller
// id, carries the Raft messages of every group and the requests between
// nodes; TLS (Config.TLS) authenticates both ends with one CA. A node
// redials a peer that is down or unreachable with backoff (50ms doubling
// to 2s, jittered); messages to it are dropped meanwhile (Raft resends).
// Frames are: length u32 | kind u8 | payload, kinds hello, raft (topic,
// partition, protobuf raftpb.Message), request, response, ping.
//
// A node that does not lead a partition forwards calls to the leader (Log
// methods), or answers with a *NotLeaderError naming it (to a Client,
// which redirects). While a partition has no leader (an election, no
// majority) calls wait and retry until their deadline, then fail with a
// NotLeaderError that matches ErrNoLeader.
//
// # Failover
//
// With the defaults (100ms ticks, ElectionTicks 10) a leader's death is
// noticed after 10 to 20 ticks without heartbeats (randomised per node),
// then PreVote and a vote take one round trip and the new leader commits
// its no-op: appends resume after about 1 to 2.5 seconds. Fewer ticks (or a
// shorter tick) fail over faster but risk needless elections when a node
// pauses (GC, disk stalls). CheckQuorum makes a leader cut off from the
// majority step down after an election timeout; until then writes sent to
// it never commit (their callers time out, ErrOutcomeUnknown; an
// idempotent producer's retry is safe) and it may still serve reads of
// what it knew committed (never wrong, possibly behind).
//
// # Limits
//
// The membership is static: the nodes come from the configuration, and a
// topic's replicas are chosen at creation (replication factor 1 or 3).
// Adding or replacing nodes, moving replicas and deleting topics are not
// supported. A replica whose files were lost must not simply start empty
// (it could vote twice in a term): that needs a membership change.
// Describe reports this node's copy of a partition when it has one.
// Topics lists the topics this node has applied; a topic just created
// elsewhere is listed a moment later (the other calls ask the meta
// partition's leader about a topic this node does not know yet).
// ProducerState, having no context in wal.Log's signature, waits up to
// Config.RequestTimeout and returns ok false (with an error logged) when
// no leader answers; ProducerStateContext tells the two apart. Memory per
// partition: the entry cache (Config.EntryCacheBytes), Raft's uncommitted
// and in-flight entries (bounded by MaxUncommittedBytes and 256 messages
// of MaxMessageBytes per follower) and the wal's own.
package raft
