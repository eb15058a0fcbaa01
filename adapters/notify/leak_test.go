package notify

import (
	"sync"
	"testing"

	"github.com/taskhoster/taskhoster/domain"
)

// Subscriptions come and go, some closed, some cut off, while events are
// published; afterwards the Hub holds nothing for them.
func TestSubscriptionsLeaveNothingBehind(t *testing.T) {
	h := NewHub()
	keys := []domain.Key{
		{Host: "h", Queue: "q", ID: "0000000000000001"},
		{Host: "h", Queue: "q", ID: "0000000000000002"},
	}
	stop := make(chan struct{})
	var publisher sync.WaitGroup
	publisher.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			for _, k := range keys {
				h.Publish(domain.Event{Kind: domain.EventProgress, Task: domain.Task{Host: k.Host, Queue: k.Queue, ID: k.ID, Attempts: n}})
			}
		}
	})

	var subscribers sync.WaitGroup
	for i := range 32 {
		subscribers.Go(func() {
			for j := range 100 {
				s := h.Subscribe(keys[(i+j)%len(keys)], 1+j%3)
				if j%2 == 0 {
					<-s.C() // blocks until an event or the cut-off; either ends the wait
				}
				s.Close()
			}
		})
	}
	subscribers.Wait()
	close(stop)
	publisher.Wait()

	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.subs) != 0 {
		t.Errorf("hub still holds subscriptions of %d tasks", len(h.subs))
	}
}

// A queue's line goes once nobody waits in it, woken or gone.
func TestLineGoesWhenEmpty(t *testing.T) {
	h := NewHub()
	q := domain.QueueRef{Host: "h", Queue: "q"}
	woken, gone := h.Wait(q), h.Wait(q)
	h.Publish(domain.Event{Kind: domain.EventPosted, Task: domain.Task{Host: q.Host, Queue: q.Queue, ID: "0000000000000001"}})
	woken.Leave()
	gone.Leave()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.lines) != 0 {
		t.Errorf("hub still holds %d lines", len(h.lines))
	}
}
