package snapshot

import (
	"context"
	"sync"
)

// ReadAhead is a set of chunk reads running in the background, one goroutine each, while the
// source goes on emitting the last chunk: the sources start it once the engine knows the next
// chunks (Engine.Prefetch) and collect it before the stream goes on.
type ReadAhead[R any] struct {
	results []R
	cancel  context.CancelFunc
	done    chan struct{}
}

// StartReadAhead runs read(ctx, i) for every i in [0, n) in the background. Their ctx is
// cancelled by Wait (once they returned) and by Drop; it does not depend on the caller's.
func StartReadAhead[R any](n int, read func(ctx context.Context, i int) R) *ReadAhead[R] {
	ctx, cancel := context.WithCancel(context.Background())
	ra := &ReadAhead[R]{results: make([]R, n), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(ra.done)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ra.results[i] = read(ctx, i)
			}()
		}
		wg.Wait()
	}()
	return ra
}

// Wait returns the results once every read returned. A cancelled ctx returns its error and
// leaves the reads running: Wait may be called again, or Drop.
func (ra *ReadAhead[R]) Wait(ctx context.Context) ([]R, error) {
	select {
	case <-ra.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	ra.cancel()
	return ra.results, nil
}

// Drop cancels the reads and returns once they all returned.
func (ra *ReadAhead[R]) Drop() {
	ra.cancel()
	<-ra.done
}
