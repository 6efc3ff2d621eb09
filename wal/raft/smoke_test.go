package raft

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal"
)

func TestSmoke(t *testing.T) {
	ns := startCluster(t, 3, nil)
	ctx := ctxT(t, 30*time.Second)
	if err := ns[0].l.CreateTopicReplicas(ctx, "t", smallTopic(2), 3); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		res, err := ns[i%3].l.Append(ctx, "t", int32(i%2), []wal.Record{{Key: []byte("k"), Value: []byte(fmt.Sprint(i))}}, wal.AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = res
	}
	res, err := ns[2].l.Fetch(ctx, "t", 0, 0, wal.FetchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 25 {
		t.Fatalf("got %d records", len(res.Records))
	}
	t.Log(ns[0].l.Partitions())
}
