package rest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/rest"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/sources/datagen"
	"github.com/sluice-cdc/sluice/wal"
	"github.com/sluice-cdc/sluice/wal/raft"
	"github.com/sluice-cdc/sluice/wal/raft/rafttest"
)

// With a replicated log, /metrics shows each partition's replication state: on the leader its
// role, that it serves, the term, itself as leader, the commit index that covers the appends,
// and both followers caught up; on a follower the follower role and the leader's id.
func TestMetricsReplication(t *testing.T) {
	logs := rafttest.Cluster(t, 3, 10*time.Millisecond)
	ctx := t.Context()
	if err := logs[0].CreateTopicReplicas(ctx, "t", wal.DefaultTopicConfig(), 3); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		actx, acancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := logs[0].Append(actx, "t", 0, []wal.Record{{Value: []byte(fmt.Sprint(i)), Timestamp: time.Now()}}, wal.AppendOptions{})
		acancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	leader := -1
	deadline := time.Now().Add(20 * time.Second)
	for leader < 0 {
		for i, l := range logs {
			for _, p := range l.Partitions() {
				if p.Topic == "t" && p.Serving && len(p.Followers) == 2 && p.Followers[0].Lag == 0 && p.Followers[1].Lag == 0 {
					leader = i
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader with both followers caught up")
		}
		time.Sleep(20 * time.Millisecond)
	}
	scrape := func(l *raft.Log) map[string]float64 {
		t.Helper()
		reg, err := connect.NewRegistry(datagen.Plugin())
		if err != nil {
			t.Fatal(err)
		}
		rt, err := runtime.New(runtime.Options{Log: l, Registry: reg})
		if err != nil {
			t.Fatal(err)
		}
		m := rest.NewMetrics()
		m.Attach(rt)
		got, err := m.Gather()
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	// The leader's view moves (a follower counts as active only if heard from within an
	// election timeout, which a slow machine can miss for a moment): compare a status and a
	// scrape taken together until they match, or report the last difference.
	var st raft.PartitionStatus
	id := fmt.Sprint(leader + 1)
	for deadline := time.Now().Add(10 * time.Second); ; {
		for _, p := range logs[leader].Partitions() {
			if p.Topic == "t" {
				st = p
			}
		}
		got := scrape(logs[leader])
		want := map[string]float64{
			`sluice_replication_role{partition="0",role="leader",topic="t"}`: 1,
			`sluice_replication_serving{partition="0",topic="t"}`:            1,
			`sluice_replication_term{partition="0",topic="t"}`:               float64(st.Term),
			`sluice_replication_leader{partition="0",topic="t"}`:             float64(leader + 1),
			`sluice_replication_commit_index{partition="0",topic="t"}`:       float64(st.CommitIndex),
			`sluice_replication_last_index{partition="0",topic="t"}`:         float64(st.LastIndex),
		}
		for _, f := range st.Followers {
			want[fmt.Sprintf(`sluice_replication_follower_lag_entries{follower="%d",partition="0",topic="t"}`, f.Node)] = 0
			want[fmt.Sprintf(`sluice_replication_follower_active{follower="%d",partition="0",topic="t"}`, f.Node)] = 1
		}
		var diffs []string
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				diffs = append(diffs, fmt.Sprintf("leader (node %s): %s = %v (present %v), want %v", id, k, g, ok, v))
			}
		}
		if len(diffs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, d := range diffs {
				t.Error(d)
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st.CommitIndex < 5 || st.Term == 0 {
		t.Errorf("leader status %+v: want a term and a commit index covering the 5 appends", st)
	}
	follower := (leader + 1) % 3
	got := scrape(logs[follower])
	for k, v := range map[string]float64{
		`sluice_replication_role{partition="0",role="follower",topic="t"}`: 1,
		`sluice_replication_serving{partition="0",topic="t"}`:              0,
		`sluice_replication_leader{partition="0",topic="t"}`:               float64(leader + 1),
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("follower (node %d): %s = %v (present %v), want %v", follower+1, k, g, ok, v)
		}
	}
	for k := range got {
		if strings.HasPrefix(k, "sluice_replication_follower_lag_entries{") && strings.Contains(k, `topic="t"`) {
			t.Errorf("a follower reports follower lag: %s", k)
		}
	}
}
