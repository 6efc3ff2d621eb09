// Package raft replicates sluice's log (package wal) over a static
// cluster of nodes with one Raft group per partition (go.etcd.io/raft/v3),
// whose Raft log is the partition's segment log itself.
package raft
