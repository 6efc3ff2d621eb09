package waltest_test

import (
	"context"
	"testing"

	"github.com/sluice-cdc/sluice/wal"
	"github.com/sluice-cdc/sluice/wal/waltest"
)

func TestCrashKeepsAcknowledged(t *testing.T) {
	l := waltest.New(t, wal.Options{})
	if err := l.CreateTopic("t", wal.DefaultTopicConfig()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.Append(ctx, "t", 0, []wal.Record{{Key: []byte("k"), Value: []byte("v")}}, wal.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	l.Crash(true)
	res, err := l.Fetch(ctx, "t", 0, 0, wal.FetchOptions{})
	if err != nil || len(res.Records) != 1 || string(res.Records[0].Value) != "v" {
		t.Fatalf("after crash: %+v %v", res.Records, err)
	}
	l.Reopen()
	if hw, _ := l.LatestOffset("t", 0); hw != 1 {
		t.Fatalf("hw %d after reopen", hw)
	}
}
