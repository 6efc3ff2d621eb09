package snapshot

import (
	"context"
	"testing"
	"time"
)

// Every read runs, each result lands at its index, and Wait gives them once all returned.
func TestReadAheadWait(t *testing.T) {
	release := make(chan struct{})
	ra := StartReadAhead(3, func(ctx context.Context, i int) int {
		<-release
		return i * 10
	})
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := ra.Wait(short); err != context.DeadlineExceeded {
		t.Fatalf("Wait while the reads run: %v, want the deadline", err)
	}
	close(release)
	got, err := ra.Wait(context.Background())
	if err != nil || len(got) != 3 || got[0] != 0 || got[1] != 10 || got[2] != 20 {
		t.Fatalf("Wait: %v %v, want [0 10 20]", got, err)
	}
}

// Drop cancels the reads' context and returns only once every read returned.
func TestReadAheadDrop(t *testing.T) {
	returned := make(chan int, 2)
	ra := StartReadAhead(2, func(ctx context.Context, i int) int {
		<-ctx.Done()
		returned <- i
		return i
	})
	ra.Drop()
	if len(returned) != 2 {
		t.Fatalf("Drop returned with %d of 2 reads still running", 2-len(returned))
	}
}
