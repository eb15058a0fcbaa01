package notify

import (
	"testing"

	"github.com/taskhoster/taskhoster/domain"
)

// These tests drive the line by hand, as Await does: join, look, wait;
// hand on a wake that took nothing.

var (
	resize = domain.QueueRef{Host: "task.example.com", Queue: "resize"}
	thumbs = domain.QueueRef{Host: "task.example.com", Queue: "thumbnail"}
)

// event is an event of task id in q, with the task pending after the kinds
// that leave it so; n goes into attempts so that tests can tell events apart
// and check their order.
func event(q domain.QueueRef, id string, kind domain.EventKind, n int) domain.Event {
	st := domain.Processing
	switch kind {
	case domain.EventPosted, domain.EventRequeue, domain.EventReleased:
		st = domain.Pending
	}
	return domain.Event{Kind: kind, Task: domain.Task{Host: q.Host, Queue: q.Queue, ID: id, Status: st, Attempts: n}}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestPostAndRequeueWakeTheFirstWaiterOnly(t *testing.T) {
	tests := []struct {
		kind domain.EventKind
		wake bool
	}{
		{domain.EventPosted, true},
		{domain.EventRequeue, true},
		{domain.EventClaimed, false},
		{domain.EventProgress, false},
		{domain.EventResult, false},
		{domain.EventFailed, false},
		{domain.EventTimeout, false},
		{domain.EventFetched, false},
		{domain.EventCleaned, false},
	}
	for _, tc := range tests {
		t.Run(string(tc.kind), func(t *testing.T) {
			h := NewHub()
			// Joined before the publish, as a claim does before it looks for
			// a task: the publish must not slip in between unnoticed.
			first, second := h.join(resize), h.join(resize)
			other := h.join(thumbs)

			h.Publish(event(resize, "9f2c1a0b7d4e6f83", tc.kind, 0))

			if got := closed(first.woken); got != tc.wake {
				t.Fatalf("first waiter woken = %v, want %v", got, tc.wake)
			}
			if closed(second.woken) {
				t.Fatal("one task woke two waiters")
			}
			if closed(other.woken) {
				t.Fatal("another queue's waiter was woken")
			}
			if got := first.unline(); got != tc.wake {
				t.Errorf("first.unline() = %v, want %v", got, tc.wake)
			}
			if second.unline() || other.unline() {
				t.Error("unline reports a wake that did not happen")
			}
		})
	}
}

// A wake passed on goes to the next waiter that joined before the task came,
// never to one that joined after it (that one looked with the task there).
func TestPassOnSkipsLaterJoiners(t *testing.T) {
	h := NewHub()
	a, b := h.join(resize), h.join(resize)
	h.Publish(event(resize, "9f2c1a0b7d4e6f83", domain.EventPosted, 0))
	late := h.join(resize)
	if !a.unline() {
		t.Fatal("the first waiter was not woken")
	}
	a.passOn()
	if !closed(b.woken) {
		t.Fatal("the wake passed on did not reach the next waiter")
	}
	b.unline()
	b.passOn()
	if closed(late.woken) {
		t.Fatal("the wake reached a waiter that joined after the task came")
	}
	// Passing on is idempotent in effect: nobody is left who joined before.
	a.passOn()
	if closed(late.woken) {
		t.Fatal("a second passOn woke a later waiter")
	}
	late.unline()
}
