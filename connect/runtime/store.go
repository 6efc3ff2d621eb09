package runtime

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/wal"
)

// store is a connector's connect.Store: the topic StoreTopicPrefix+connector, one partition,
// kept forever, appended by the connector's producer (so a fenced zombie task cannot write).
type store struct {
	log    Log
	topics *topics
	prod   *producer
	topic  string
}

var storeSpec = TopicSpec{Partitions: 1, Config: map[string]string{"retention.ms": "-1", "retention.bytes": "-1"}}

// Append implements connect.Store.
func (s *store) Append(ctx context.Context, key, value []byte) error {
	if _, err := s.topics.partitions(s.topic, storeSpec); err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	_, err := s.prod.append(ctx, TopicPartition{Topic: s.topic}, []LogRecord{{Key: key, Value: value}}, nil, nil)
	return err
}

// Scan implements connect.Store: every entry stored when Scan started, in order.
func (s *store) Scan(ctx context.Context, fn func(key, value []byte) error) error {
	start, end, err := bounds(ctx, s.log, s.topic, 0)
	if errors.Is(err, wal.ErrUnknownTopic) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("scan %s: %w", s.topic, err)
	}
	for off := start; off < end; {
		res, err := s.log.Fetch(ctx, s.topic, 0, off, FetchOptions{MaxBytes: 1 << 20})
		if err != nil {
			return fmt.Errorf("scan %s: %w", s.topic, err)
		}
		for i := range res.Records {
			if r := &res.Records[i]; r.Offset < end {
				if err := fn(r.Key, r.Value); err != nil {
					return err
				}
			}
		}
		if res.NextOffset <= off {
			break
		}
		off = res.NextOffset
	}
	return nil
}

var _ connect.Store = (*store)(nil)
