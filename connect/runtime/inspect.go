package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice/wal"
)

// TailOptions say what Tail reads.
type TailOptions struct {
	// FromBeginning starts at each partition's log start instead of its end.
	FromBeginning bool
	// Partition selects one partition; negative means all.
	Partition int32
	// Max stops after this many records; 0 never stops (Tail then returns when ctx ends).
	Max int
	// Follow keeps waiting for new records at the end; without it Tail returns at the end.
	Follow bool
}

// Tail renders a topic's records as JSON lines (see RenderJSON), calling emit with each line
// (without its newline). Partitions are read concurrently; records of one partition come in
// order. emit is never called concurrently. Tail returns nil at ctx's end, after Max records
// or, without Follow, once every partition was read to its end.
func Tail(ctx context.Context, log Log, topic string, opts TailOptions, emit func(line []byte) error) error {
	info, err := log.Describe(topic)
	if err != nil {
		return fmt.Errorf("tail %s: %w", topic, err)
	}
	var parts []int32
	for _, p := range info.Partitions {
		if opts.Partition < 0 || p.Partition == opts.Partition {
			parts = append(parts, p.Partition)
		}
	}
	if len(parts) == 0 {
		return fmt.Errorf("tail %s: no partition %d (the topic has %d)", topic, opts.Partition, len(info.Partitions))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		count int
		first error
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		cancel()
	}
	for _, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var off int64
			var err error
			if opts.FromBeginning {
				off, err = log.EarliestOffset(topic, p)
			} else {
				off, err = log.LatestOffset(topic, p)
			}
			if err != nil {
				fail(fmt.Errorf("tail %s-%d: %w", topic, p, err))
				return
			}
			wait := time.Duration(0)
			if opts.Follow {
				wait = time.Second
			}
			var line []byte
			for {
				res, err := log.Fetch(ctx, topic, p, off, wal.FetchOptions{MaxBytes: 1 << 20, MaxWait: wait})
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
						fail(fmt.Errorf("tail %s-%d at %d: %w", topic, p, off, err))
					}
					return
				}
				for i := range res.Records {
					line = RenderJSON(line[:0], topic, p, &res.Records[i])
					mu.Lock()
					if opts.Max > 0 && count >= opts.Max {
						mu.Unlock()
						cancel()
						return
					}
					count++
					err := emit(line)
					done := opts.Max > 0 && count >= opts.Max
					mu.Unlock()
					if err != nil {
						fail(err)
						return
					}
					if done {
						cancel()
						return
					}
				}
				if res.NextOffset > off {
					off = res.NextOffset
				}
				if !opts.Follow && off >= res.HighWatermark {
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}
