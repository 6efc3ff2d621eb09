// Package wal is sluice's embedded log: Kafka's model (topics, partitions,
// offsets, compaction, idempotent producers, consumer-group offsets) in one
// process, built so that an acknowledged record is never lost and a damaged
// file is never silently repaired.
//
// # Contract
//
//   - Append writes a batch of records atomically (all visible or none), with
//     dense offsets, and returns only once the batch is durable: under the
//     default FsyncGroupCommit policy the segment was fdatasynced after the
//     write. Concurrent appends to a partition share fsyncs (group commit):
//     the first waiter runs one fsync for everything written before it; the
//     waiters that arrive meanwhile run the next one. UnsafeFsyncNever is the
//     only weaker mode, opt-in and named so.
//   - Readers (Fetch, OffsetForTime, LatestOffset) never see past the high
//     watermark, the committed end. On one node it is the durable end: a
//     batch written but not yet fsynced is invisible. A Fetch at the high
//     watermark with MaxWait waits on a channel closed at each commit, so it
//     wakes at once, without polling.
//   - With a producer id, a retried batch (same epoch, same sequences as one
//     of the producer's last five batches in the partition) returns its
//     original offsets and writes nothing; a gap in sequences is refused; an
//     older epoch is fenced. The partition's producer state, including the
//     SourcePosition stored with the producer's last batch, is rebuilt from
//     the log on open.
//   - The log's own topics, OffsetsTopic and ProducersTopic, are written
//     only by CommitOffsets and InitProducer: Append to them fails with
//     ErrInternalTopic, so that no record the next Open cannot decode gets
//     in. (Other topics whose names start with "__" are ordinary topics.)
//   - All file I/O goes through vfs.FS; vfs.Mem simulates crashes for tests.
//
// Example:
//
//	l, err := wal.Open(dir, wal.Options{Logger: logger})
//	...
//	go l.Run(ctx) // retention and compaction
//	defer l.Close()
//	err = l.CreateTopic("db.inventory.orders", cfg)
//	res, err := l.Append(ctx, "db.inventory.orders", wal.Partition(key, 6), recs, wal.AppendOptions{})
//	out, err := l.Fetch(ctx, "db.inventory.orders", 0, next, wal.FetchOptions{MaxWait: time.Second})
//
// # Files
//
//	<dir>/LOCK                                   flock: one process per log
//	<dir>/topics/<topic>/topic.conf              "sluice-topic 1", then key=value (Kafka names)
//	<dir>/topics/<topic>/<partition>/
//	    <base offset, 20 digits>.log             segment: batches back to back
//	    <base>.index, <base>.timeindex           sparse indexes (a rebuildable cache)
//	    <offset>.snapshot                        producer state as of offset (a cache)
//	    <base>.log.cleaned, <base>.log.swap      compaction output (see Recovery)
//	    clean-shutdown                           written by a clean Close
//	    replica-state                            Raft HardState and log start (replicated)
//	    <base>.log.staged, snapshot-install      a snapshot being installed
//	<dir>/topics/+<topic>                        a topic being created (its
//	                                             partition directories are
//	                                             made and fsynced inside it
//	                                             before the rename)
//	<dir>/trash/                                 topics being deleted
//
// A segment is named by the offset of its first batch. Its disk space is
// preallocated ahead of the written end, 64 MiB at a time up to
// segment.bytes (fallocate keeping the file size, so the file size is
// always the written end and appends do not allocate blocks). It is rolled
// when the next batch would pass segment.bytes, when the segment is older
// than segment.ms, or when the batch's last offset would be 2^31 or more
// above the segment's base (index entries hold offsets relative to it):
// rolling fsyncs it, writes its indexes and a producer snapshot, creates
// the next segment and fsyncs the directory. A segment's age counts from
// the roll that created it; after a reopen, from the largest timestamp of
// its first batch (as Kafka's does), or from the open if that is later.
// Segments are contiguous: each ends at the offset where the next begins.
//
// # Batch format (version 1)
//
// Integers are big-endian. The layout follows Kafka's record batch v2, with
// the replication term and index, a delete horizon and the source position
// added to the header, and one checksum over everything but the framing.
//
//	offset size field
//	     0    8 base offset          offset of the first record
//	     8    4 length               bytes after this field
//	    12    1 magic                format version, 1
//	    13    4 crc                  CRC-32C (Castagnoli), see below
//	    17    2 attributes           bits 0-2: compression of the records
//	                                 (0 none, 1 gzip, 2 snappy, 3 lz4,
//	                                 4 zstd); bit 5: control batch
//	                                 (replication entry, no records, takes
//	                                 no offset, never compressed); others 0
//	    19    4 last offset delta    last record's offset - base (-1: control)
//	    23    8 base timestamp       ms since the epoch, first record
//	    31    8 max timestamp        ms, largest of the batch
//	    39    8 producer id          -1: none
//	    47    2 producer epoch       -1: none
//	    49    4 base sequence        -1: none
//	    53    8 term                 replication term (0 on a single node)
//	    61    8 index                replication log index (0 on a single node)
//	    69    8 delete horizon       ms after which compaction may drop this
//	                                 batch's tombstones; -1: compaction has
//	                                 not kept a tombstone of it yet
//	    77    4 record count
//	    81    4 source position len  -1: none
//	    85    n source position      opaque bytes of the producer
//	  85+n    … records
//
// Each record is Kafka's v2 record; varints are zigzag (as Kafka's):
//
//	length varint | attributes int8 (0) | timestamp delta varint |
//	offset delta varint | key length varint (-1: null) | key |
//	value length varint (-1: null = tombstone) | value |
//	header count varint | { key length varint | key | value length varint
//	(-1: null) | value } …
//
// A compressed batch holds, in place of the records, their size (uvarint)
// and then the codec's output for them: a snappy block, an LZ4 block, a
// zstd frame or a gzip stream. An append compresses with its topic's
// compression.type, and only when that makes the records smaller; each
// batch says its own codec, so a partition may mix them. A reader refuses
// a size over 64 MiB before it allocates, and one the codec does not give
// back exactly. Compaction inflates a batch, keeps what it keeps and
// compresses that again with the same codec.
//
// The crc is CRC-32C over the records (from 85+n to the end), then the
// header bytes 17 to 85+n, then the base offset (bytes 0 to 8). Records come
// first so that an appender checksums them before it takes the partition
// lock; the header is finished under the lock once the offset is known.
// A batch is valid when its length is in range, its magic is 1, its crc
// matches, its header is consistent (record count <= last offset delta + 1,
// control batches without records) and its records fill it exactly with
// increasing offset deltas.
//
// Index files (both kinds):
//
//	"SLIX" | version u8 (1) | kind u8 (1 offset, 2 time) | 0 u16 |
//	segment base i64 | segment size covered i64 | entry count u32 |
//	entries | CRC-32C u32 of all before
//	offset entry: batch base offset - segment base u32 | byte position u32
//	time entry:   largest timestamp so far i64 | batch base - segment base u32
//
// An entry is added every index.interval.bytes (a time entry only when the
// largest timestamp grew). When a segment is sealed or closed, a last time
// entry is added if the segment's largest timestamp is above the last
// entry's: it holds that timestamp and the segment's last offset (not a
// batch base) - segment base. An index file whose checksum, base or
// covered size does not match its segment is stale and rebuilt by
// scanning the segment; so is one whose last offset entry does not point
// at a valid batch with that offset, checked on open (see Recovery).
//
// Producer snapshots: "SLPS" | version u8 (1) | offset i64 | count u32 |
// per producer: id i64, epoch i16, last timestamp i64, n u8, n recent
// batches (first seq i32, last seq i32, first offset i64, last offset i64,
// timestamp i64), source position length i32 (-1 none), bytes | CRC-32C.
//
// # Recovery (Open)
//
//  1. Topic directories named +<topic> (an unfinished create) and trash/ are
//     removed.
//  2. In each partition, *.cleaned and *.tmp files are deleted (rolled back);
//     a <base>.log.swap is renamed over <base>.log (completed).
//  3. Every segment but the last is sealed: it was fsynced when rolled. If
//     its index files match it, and the batches from the last offset-index
//     entry to the end of the file are valid (the first with the entry's
//     offset) and end exactly at its size, the indexes are trusted and the
//     rest of the segment is not read; otherwise it is scanned, and any
//     invalid batch in it is a *CorruptionError naming the file and byte
//     position. The open fails. Each segment must end (the last batch's
//     end offset) where the next one begins: a missing or misplaced
//     segment is a *CorruptionError naming the segment before the gap.
//  4. The last (active) segment is scanned and verified batch by batch. At
//     the first invalid batch, the rest of the file is searched for any
//     valid batch with a higher offset. If one exists, the invalid batch was
//     followed by later writes, so it is damage to data once written, not a
//     torn write: *CorruptionError, the open fails. If none exists, the
//     invalid bytes are the torn tail of writes never acknowledged: the file
//     is truncated there, and the truncation fsynced, with a warning.
//     (A power loss that persisted a later page of an unsynced write but not
//     an earlier one is reported as corruption: the log refuses to guess.
//     Options.UnsafeTruncateCorruptTail lets an operator truncate there.
//     A durable-end checkpoint, like Kafka's recovery point, would tell the
//     two apart only if it were never behind the acknowledged end: written
//     lazily (at rolls or on a timer), damage between it and the true
//     durable end would be acknowledged data truncated as a torn tail;
//     written with every group commit, it costs a second fsync per commit.
//     The log keeps neither; its checkpoints are the sealed segments and
//     the clean-shutdown marker, below which nothing is ever truncated.)
//     A cleanly closed active segment (the marker names it at its size)
//     is treated like a sealed one: any invalid batch is corruption.
//  5. The producer state is loaded from the newest snapshot at or below the
//     recovered end and at or above the log start (snapshots above the end
//     are deleted; those below the start, left by retention, are ignored)
//     and the batch headers after it are applied; without a usable
//     snapshot every header is read.
//  6. The high watermark is the recovered end.
//
// A clean Close fsyncs, writes the active segment's indexes, a producer
// snapshot at the end and a clean-shutdown marker ("SLCS" | version 1 |
// segment base i64 | size i64 | next offset i64 | CRC-32C) naming the
// active segment's size. If the next open finds the active segment at
// exactly that size with valid indexes (checked as in step 3), it trusts it
// like a sealed segment and reads only its last indexed stretch: a clean
// reopen costs the index files and a few KiB per segment. The marker
// is removed on open. After a clean close every byte was durable, so
// damage found later in the last batch is corruption, not a torn write.
//
// # Retention and compaction
//
// Retention (delete policy) removes whole sealed segments from the start,
// oldest first, while the newest record of the segment is older than
// retention.ms or the partition without it is still at least
// retention.bytes; the active segment is never removed. Index files are
// removed before the segment, so a crash leaves at worst a segment whose
// indexes are rebuilt.
//
// Compaction (compact policy) runs from Run, never on the active segment,
// and never changes an offset; see (*partition).compact for the steps. It
// keeps the newest record of each key (the key map also covers the active
// segment up to the high watermark), keeps a tombstone until
// delete.retention.ms after compaction first kept it (the batch's delete
// horizon), and swaps each rewritten segment in with a crash-safe
// .cleaned → .swap → .log sequence. Reading, rewriting, fsyncing and the
// renames hold no lock that readers or appenders take (only maintMu, and
// filesMu for reading); the final switch of the segment takes mu, then
// filesMu for writing, so it waits for fsyncs and reads in flight on the
// partition's files and holds appenders and readers for that switch (a
// file close and a slice copy). A batch left without records is dropped
// unless it is the last batch of its producer in the partition or the
// last batch of its segment: the first is kept, empty, so that the
// producer's sequence and source position survive compaction even if
// every snapshot is lost (Kafka keeps such batches for the same reason);
// the second so that the segment still ends where the next begins.
// Retention, in contrast, may delete a producer's last batch; the snapshot
// then still holds its state, as Kafka's does.
//
// # Replication (package wal/raft)
//
// One Raft group per partition uses the partition's segments as its Raft
// log, one batch per entry: the term and index fields of the batch header
// hold the entry's term and index, so no second copy is written.
// ReplicaLog (OpenReplica) is that storage. The leader prepares a batch
// (PrepareBatch, EncodeBatch) without knowing its offset; every replica
// places it at its next offset as it writes it (PlaceBatch: the offset and
// the checksum change, after the old checksum was verified) and persists
// the entries Raft hands it with ReplicaLog.Append (verified, dense
// offsets, consecutive indexes, fsynced before it returns).
// ReplicaLog.Entries, Batch and Term read entries back by index: the
// latest few thousand are located from memory, older ones by a binary
// search over a segment's sparse offset index reading batch headers.
// ReplicaLog.TruncateAfter removes a deposed leader's suffix and refuses
// (ErrTruncateCommitted) to touch a committed entry; ReplicaLog.Commit
// moves the committed end, which readers already stop at. The written end
// and the committed end are kept apart: on one node the committed end
// follows fsyncs; once a ReplicaLog owns a partition it moves only by
// Commit. Leader no-ops and configuration changes are control batches
// (attribute bit 5, EncodeControlBatch): no records, last offset delta
// -1, payload in the source-position field, so they take no offset and
// offsets stay dense and identical on every replica.
//
// The replica state file (replica-state, next to the segments) holds
// Raft's HardState and the log's start, the index and term of the entry
// just before the first one held (0, 0 for a log held from the start):
//
//	two slots of 64 bytes: "SLRS" | version u8 (1) | 0 0 0 |
//	    sequence u64 | term u64 | vote u64 | commit u64 |
//	    start index u64 | start term u64 | CRC-32C u32 | 0 0 0 0
//
// Each write goes to the slot the previous one did not use and is fsynced
// before the call returns; the valid slot with the higher sequence is the
// state, so a torn write leaves the previous state. A file with no valid
// slot is corruption (term and vote must never go back). The file is
// created whole by an atomic write. On open the committed end is the end
// of the entry the state names as committed, never below the log's start.
//
// Retention of a replicated partition records the new start (the last
// entry it removes) in the state file before removing segments, so that
// Raft can still ask the term at FirstIndex-1. Compaction keeps every
// replication entry, emptied if need be, so that the log stays readable by
// index (a batch of a single node's log left empty is dropped, unless it
// is its producer's or its segment's last, as above).
// Retention and compaction only touch segments wholly below the committed
// end.
//
// A snapshot (ReplicaLog.Snapshot) describes the sealed, committed
// segments of a log; encoded (Snapshot.MarshalBinary):
//
//	"SLSN" | version u8 (1) | index u64 | term u64 | start index u64 |
//	start term u64 | next offset i64 | layout u64 | count u32 |
//	count × (base i64, size i64, last index u64, last term u64) | CRC-32C u32
//
// ReadSegment serves their bytes while the sender's sealed segments stay
// as they were (layout, a per-process random value changed by every
// compaction swap, retention, truncation and install); a receiver stages
// them as <base>.log.staged files (StageSegment, verified by Finish) and
// InstallSnapshot replaces its whole log by them: it writes the
// descriptor to a snapshot-install marker, removes every other segment,
// index and producer snapshot, renames the staged files into place,
// creates the empty active segment at the next offset, records the new
// start and commit in the state file and removes the marker. Every step is
// idempotent: an open that finds the marker completes the install; an
// open without one removes staged files.
//
// # Limits
//
// Memory per partition is the in-memory sparse indexes (8 + 12 bytes per
// index.interval.bytes of data), the producer state (bounded by the number
// of producers) and one file handle per segment. Compaction's key map is
// bounded to 64 MiB per run; a larger dirty section takes several runs.
// Compaction does not merge small segments. segment.ms counts from when
// the active segment was created, or after a reopen from the largest
// timestamp of its first batch: records whose timestamps are far in the
// past make the active segment roll at the first append after a reopen.
package wal
