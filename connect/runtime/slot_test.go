package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
)

// A position waits for the flush interval unless it is urgent: an urgent one (an incremental
// snapshot's chunk awaiting its acknowledgement) is taken at once, also while an earlier
// non-urgent one is pending.
func TestPositionSlotUrgent(t *testing.T) {
	s := newPositionSlot(connect.Position{})
	got := make(chan connect.Position, 4)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		for {
			pos, ok := s.take(ctx, time.Now().Add(time.Hour)) // the interval: an hour
			if !ok {
				return
			}
			got <- pos
		}
	}()
	s.offer(connect.Position{Order: []byte{1}}, false)
	select {
	case p := <-got:
		t.Fatalf("position %x taken before its interval passed", p.Order)
	case <-time.After(50 * time.Millisecond):
	}
	s.offer(connect.Position{Order: []byte{2}}, false)
	s.offer(connect.Position{Order: []byte{3}}, true)
	select {
	case p := <-got:
		if len(p.Order) != 1 || p.Order[0] != 3 {
			t.Fatalf("took %x, want the newest position 03", p.Order)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an urgent position was not taken while a non-urgent one waited for the interval")
	}
	s.close()
}
