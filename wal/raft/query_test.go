package raft_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal"
	"github.com/sluice-cdc/sluice/wal/raft/linktest"
	"github.com/sluice-cdc/sluice/wal/raft/rafttest"
)

// A read forwarded to the leader whose connection breaks while it waits for the answer is
// asked again, not failed: a producer's state, asked through a follower whose link to the
// leader stalls with the question in it and is then reset, is still answered, and right.
func TestReadAskedAgainAfterALostConnection(t *testing.T) {
	logs, links := rafttest.ProxiedCluster(t, 3, 10*time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := logs[0].CreateTopicReplicas(ctx, "q", wal.DefaultTopicConfig(), 3); err != nil {
		t.Fatal(err)
	}
	pid, epoch, err := logs[0].InitProducer(ctx, "q-producer")
	if err != nil {
		t.Fatal(err)
	}
	res, err := logs[0].Append(ctx, "q", 0, []wal.Record{{Value: []byte("a")}, {Value: []byte("b")}},
		wal.AppendOptions{ProducerID: pid, ProducerEpoch: epoch, SourcePosition: []byte("pos-1")})
	if err != nil {
		t.Fatal(err)
	}
	leader := -1
	for leader < 0 {
		for i, l := range logs {
			for _, tp := range l.Leads() {
				if tp.Topic == "q" {
					leader = i
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatal("no leader for q-0")
		}
		time.Sleep(5 * time.Millisecond)
	}
	follower := (leader + 1) % 3
	links.Set(uint64(follower+1), uint64(leader+1), linktest.Stall)
	type answer struct {
		st  wal.ProducerState
		ok  bool
		err error
	}
	done := make(chan answer, 1)
	go func() {
		st, ok, err := logs[follower].ProducerStateContext(ctx, "q", 0, pid)
		done <- answer{st, ok, err}
	}()
	time.Sleep(200 * time.Millisecond) // the question waits in the stalled link
	links.Set(uint64(follower+1), uint64(leader+1), linktest.Reset)
	time.Sleep(100 * time.Millisecond)
	links.Set(uint64(follower+1), uint64(leader+1), linktest.Up)
	a := <-done
	if a.err != nil || !a.ok {
		t.Fatalf("producer state through node %d: ok %v, %v; want the state", follower+1, a.ok, a.err)
	}
	if a.st.Epoch != epoch || a.st.LastOffset != res.LastOffset || string(a.st.SourcePosition) != "pos-1" {
		t.Fatalf("producer state %+v; want epoch %d, last offset %d, source position pos-1", a.st, epoch, res.LastOffset)
	}
}
