package runtime

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/wal"
)

// producer appends for one task instance as an idempotent producer: one producer id per
// connector, a new epoch per task start (fencing a zombie instance), sequences per partition.
// Appends to one partition must be made in order: the next one starts after the previous
// one's Written callback or return (see append); appends to different partitions may run
// concurrently.
type producer struct {
	log   Log
	id    int64
	epoch int16

	mu    sync.Mutex
	parts map[TopicPartition]*partSeq
}

type partSeq struct {
	order  sync.Mutex // held by an append until the log placed its batch
	mu     sync.Mutex
	next   int32
	broken bool // an append failed: what the log holds is unknown until a new epoch
}

// producerName is the producer name of a connector's tasks in an offsets generation: a
// source whose offsets were altered or reset appends under a new producer, so that the records
// it reads again are not taken for replays of what the old producer appended (the runtime drops
// a record whose Order is not above the last one its producer stored in the partition).
// Generation 0 is "connect-<name>"; later ones add "#<generation>" ('#' is not allowed in
// connector names, so no two connectors share a producer).
func producerName(connector string, generation int64) string {
	if generation == 0 {
		return "connect-" + connector
	}
	return "connect-" + connector + "#" + strconv.FormatInt(generation, 10)
}

func newProducer(ctx context.Context, log Log, connector string) (*producer, error) {
	return newGenProducer(ctx, log, connector, 0)
}

// newGenProducer is newProducer for an offsets generation.
func newGenProducer(ctx context.Context, log Log, connector string, generation int64) (*producer, error) {
	name := producerName(connector, generation)
	id, epoch, err := log.InitProducer(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("init producer %s: %w", name, err)
	}
	return &producer{log: log, id: id, epoch: epoch, parts: map[TopicPartition]*partSeq{}}, nil
}

// append stores recs in one atomic append carrying sourcePos. After a failed append the
// partition refuses further appends: the task must restart with a new epoch. written, if not
// nil, is passed to the log as AppendOptions.Written: an append to the same partition may
// start once it was called (the log then places it after this one); otherwise only once this
// one returned.
func (p *producer) append(ctx context.Context, tp TopicPartition, recs []LogRecord, sourcePos []byte, written func()) (AppendResult, error) {
	p.mu.Lock()
	ps := p.parts[tp]
	if ps == nil {
		ps = &partSeq{}
		p.parts[tp] = ps
	}
	p.mu.Unlock()
	// order is held until the log placed this batch, so that appends to the partition reach
	// the log in the order of their sequences.
	ps.order.Lock()
	var once sync.Once
	placed := func() { once.Do(ps.order.Unlock) }
	defer placed()
	ps.mu.Lock()
	if ps.broken {
		ps.mu.Unlock()
		return AppendResult{}, fmt.Errorf("append to %s-%d: an earlier append failed; the task must restart", tp.Topic, tp.Partition)
	}
	seq := ps.next
	ps.next += int32(len(recs))
	ps.mu.Unlock()
	res, err := p.log.Append(ctx, tp.Topic, tp.Partition, recs, AppendOptions{
		ProducerID: p.id, ProducerEpoch: p.epoch, BaseSequence: seq, SourcePosition: sourcePos,
		Written: func() {
			placed()
			if written != nil {
				written()
			}
		},
	})
	if err != nil {
		// Marked before order is released: an append waiting for it fails too. One that
		// started after this batch was placed fails in the log (the partition failed) or with
		// a sequence gap.
		ps.mu.Lock()
		ps.broken = true
		ps.mu.Unlock()
		if errors.Is(err, wal.ErrProducerFenced) {
			return res, connect.Permanentf("append to %s-%d: another instance of this connector took over (producer epoch %d fenced): %w", tp.Topic, tp.Partition, p.epoch, err)
		}
		return res, fmt.Errorf("append to %s-%d: %w", tp.Topic, tp.Partition, err)
	}
	return res, nil
}

// lastPosition returns the source position stored with this producer's last batch in tp
// (the zero Position when it never wrote there). A log that cannot tell (a replicated log
// whose partition leader did not answer) is an error, never "it never wrote there": the
// records of a replay would be appended again.
func (p *producer) lastPosition(ctx context.Context, tp TopicPartition) (connect.Position, error) {
	var pos connect.Position
	st, ok, err := producerState(ctx, p.log, tp.Topic, tp.Partition, p.id)
	if err != nil {
		return pos, fmt.Errorf("last source position in %s-%d: %w", tp.Topic, tp.Partition, err)
	}
	if !ok || len(st.SourcePosition) == 0 {
		return pos, nil
	}
	if err := pos.UnmarshalBinary(st.SourcePosition); err != nil {
		return pos, connect.Permanentf("source position stored in %s-%d: %w", tp.Topic, tp.Partition, err)
	}
	return pos, nil
}
