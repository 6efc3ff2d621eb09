package raft

import (
	"errors"
	"fmt"
)

var (
	// ErrNoLeader is returned when a partition has no leader reachable
	// before the call's deadline (an election in progress, no majority, or
	// the network cut). Retriable.
	ErrNoLeader = errors.New("no leader")
	// ErrNotReplica is returned by node-local calls on a partition this
	// node does not replicate.
	ErrNotReplica = errors.New("not a replica of the partition")
	// ErrOutcomeUnknown is returned by an append whose leader lost its
	// leadership, or whose wait ended, after the batch entered the log but
	// before it was known committed: it may or may not be in the log.
	// Retry with the same producer sequence to find out (a retry is then
	// answered with the original offsets); without a producer id a retry
	// may duplicate the batch.
	ErrOutcomeUnknown = errors.New("outcome unknown: the batch may or may not be in the log")
	// ErrLost is returned by an append whose entry was replaced by a newer
	// leader's before it committed: it is not in the log. Safe to retry.
	ErrLost = errors.New("batch not committed: replaced by a newer leader's entries")
	// ErrGroupFailed is returned by every call on a partition whose replica
	// stopped after an error it must not work around (an I/O error, a
	// request to truncate committed entries, a broken invariant). The node
	// must be restarted; the other replicas go on.
	ErrGroupFailed = errors.New("replica stopped")
)

// NotLeaderError is returned by a node asked to serve a partition it does
// not lead. Leader is the leader it knows of (0: none known). Callers
// going through Log retry at the leader themselves.
type NotLeaderError struct {
	Topic     string
	Partition int32
	Leader    uint64
}

func (e *NotLeaderError) Error() string {
	if e.Leader == 0 {
		return fmt.Sprintf("%s-%d: not the leader and no leader known", e.Topic, e.Partition)
	}
	return fmt.Sprintf("%s-%d: not the leader; node %d is", e.Topic, e.Partition, e.Leader)
}

// Is lets errors.Is(err, ErrNoLeader) match a NotLeaderError that knows no
// leader.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNoLeader && e.Leader == 0 }

// retriable reports whether a call may be retried elsewhere or later
// without risk: the request was not applied.
func retriable(err error) bool {
	var nl *NotLeaderError
	return errors.As(err, &nl) || errors.Is(err, ErrNoLeader) || errors.Is(err, errUnreachable) || errors.Is(err, ErrLost)
}
