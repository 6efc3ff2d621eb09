package runtime

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/wal"
)

// Source positions live in SourceOffsetsTopic (compacted): one record per commit, key the
// connector name, value the connect.Position in its binary encoding. The commit is appended by
// the connector's producer with the same bytes as its source position, so the committed
// position is read back from the producer state without scanning the topic; a scan for the
// newest record of the key is the fallback.

var offsetsSpec = TopicSpec{Partitions: 1, Config: map[string]string{"cleanup.policy": "compact"}}

func offsetsPartition(tps *topics, connector string) (TopicPartition, error) {
	n, err := tps.partitions(SourceOffsetsTopic, offsetsSpec)
	if err != nil {
		return TopicPartition{}, err
	}
	return TopicPartition{Topic: SourceOffsetsTopic, Partition: wal.Partition([]byte(connector), n)}, nil
}

// commitPosition durably records pos as the connector's committed source position.
func commitPosition(ctx context.Context, tps *topics, prod *producer, connector string, pos connect.Position) error {
	tp, err := offsetsPartition(tps, connector)
	if err != nil {
		return err
	}
	enc, err := pos.MarshalBinary()
	if err != nil {
		return fmt.Errorf("encode position: %w", err)
	}
	rec := []LogRecord{{Key: []byte(connector), Value: enc}}
	if _, err := prod.append(ctx, tp, rec, enc, nil); err != nil {
		return fmt.Errorf("commit source position: %w", err)
	}
	return nil
}

// committedPosition returns the connector's committed source position (zero if none). With
// prod (the connector's producer) it reads the producer state, else it scans the topic.
func committedPosition(ctx context.Context, log Log, connector string, prod *producer) (connect.Position, error) {
	var pos connect.Position
	n, err := partitionCount(log, SourceOffsetsTopic)
	if errors.Is(err, wal.ErrUnknownTopic) {
		return pos, nil
	}
	if err != nil {
		return pos, fmt.Errorf("read committed position: %w", err)
	}
	tp := TopicPartition{Topic: SourceOffsetsTopic, Partition: wal.Partition([]byte(connector), n)}
	if prod != nil {
		// a log that could not tell: the scan below answers, or fails
		st, ok, err := producerState(ctx, log, tp.Topic, tp.Partition, prod.id)
		if err == nil && ok && len(st.SourcePosition) > 0 {
			if err := pos.UnmarshalBinary(st.SourcePosition); err != nil {
				return pos, connect.Permanentf("committed position of %s in %s: %w", connector, SourceOffsetsTopic, err)
			}
			return pos, nil
		}
	}
	var found []byte
	start, end, err := bounds(ctx, log, tp.Topic, tp.Partition)
	if err != nil {
		return pos, fmt.Errorf("read committed position: %w", err)
	}
	for off := start; off < end; {
		res, err := log.Fetch(ctx, tp.Topic, tp.Partition, off, FetchOptions{MaxBytes: 1 << 20})
		if err != nil {
			return pos, fmt.Errorf("read committed position: %w", err)
		}
		for i := range res.Records {
			r := &res.Records[i]
			if r.Offset < end && string(r.Key) == connector {
				found = r.Value
			}
		}
		if res.NextOffset <= off {
			break
		}
		off = res.NextOffset
	}
	if found == nil {
		return pos, nil
	}
	if err := pos.UnmarshalBinary(found); err != nil {
		return pos, connect.Permanentf("committed position of %s in %s: %w", connector, SourceOffsetsTopic, err)
	}
	return pos, nil
}
