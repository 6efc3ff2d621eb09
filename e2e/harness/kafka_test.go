package harness

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func kafkaProduceConsume(t *testing.T, k *Kafka, topic, key, value string) {
	t.Helper()
	ctx := testCtx(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Bootstrap()), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(value)}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	for {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("fetch: %v", err)
		}
		var got []string
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Key)+"="+string(r.Value)) })
		if len(got) == 0 {
			continue
		}
		if len(got) != 1 || got[0] != key+"="+value {
			t.Fatalf("consumed %q, want [%s=%s]", got, key, value)
		}
		return
	}
}

// A record produced with franz-go is consumed back.
func TestKafkaSmoke(t *testing.T) {
	kafkaProduceConsume(t, sharedKafka(t), "smoke", "k1", "alpha")
}

// A stopped or killed broker starts again on the same address with its topics and records.
func TestKafkaRestart(t *testing.T) {
	k := sharedKafka(t)
	kafkaProduceConsume(t, k, "restart", "k7", "seven")
	check := func(t *testing.T) {
		ctx := testCtx(t)
		cl, err := kgo.NewClient(kgo.SeedBrokers(k.Bootstrap()), kgo.ConsumeTopics("restart"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for {
			fs := cl.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				t.Fatalf("fetch after restart: %v", err)
			}
			if recs := fs.Records(); len(recs) > 0 {
				if got := string(recs[0].Key) + "=" + string(recs[0].Value); got != "k7=seven" {
					t.Fatalf("after restart consumed %q, want k7=seven", got)
				}
				return
			}
		}
	}
	checkRestart(t, k.Server, k.Bootstrap, check)
	checkKill(t, k.Server, k.Bootstrap, check)
}
