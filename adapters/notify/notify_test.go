package notify_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

var (
	resize = domain.QueueRef{Host: "task.example.com", Queue: "resize"}
	thumbs = domain.QueueRef{Host: "task.example.com", Queue: "thumbnail"}
)

// event is an event of task id in q; n goes into attempts so that tests can
// tell events apart and check their order.
func event(q domain.QueueRef, id string, kind domain.EventKind, n int) domain.Event {
	return domain.Event{Kind: kind, Task: domain.Task{Host: q.Host, Queue: q.Queue, ID: id, Attempts: n}}
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
			h := notify.NewHub()
			// Joined before the publish, as a claim does before it looks for
			// a task: the publish must not slip in between unnoticed.
			first, second := h.Wait(resize), h.Wait(resize)
			other := h.Wait(thumbs)

			h.Publish(event(resize, "9f2c1a0b7d4e6f83", tc.kind, 0))

			if got := closed(first.Woken()); got != tc.wake {
				t.Fatalf("first waiter woken = %v, want %v", got, tc.wake)
			}
			if closed(second.Woken()) {
				t.Fatal("one task woke two waiters")
			}
			if closed(other.Woken()) {
				t.Fatal("another queue's waiter was woken")
			}
			if got := first.Leave(); got != tc.wake {
				t.Errorf("first.Leave() = %v, want %v", got, tc.wake)
			}
			if second.Leave() || other.Leave() {
				t.Error("Leave reports a wake that did not happen")
			}
		})
	}
}

// A wake passed on goes to the next waiter that joined before the task came,
// never to one that joined after it (that one looked with the task there).
func TestPassOnSkipsLaterJoiners(t *testing.T) {
	h := notify.NewHub()
	a, b := h.Wait(resize), h.Wait(resize)
	h.Publish(event(resize, "9f2c1a0b7d4e6f83", domain.EventPosted, 0))
	late := h.Wait(resize)
	if !a.Leave() {
		t.Fatal("the first waiter was not woken")
	}
	a.PassOn()
	if !closed(b.Woken()) {
		t.Fatal("the wake passed on did not reach the next waiter")
	}
	b.Leave()
	b.PassOn()
	if closed(late.Woken()) {
		t.Fatal("the wake reached a waiter that joined after the task came")
	}
	// Passing on is idempotent in effect: nobody is left who joined before.
	a.PassOn()
	if closed(late.Woken()) {
		t.Fatal("a second PassOn woke a later waiter")
	}
	late.Leave()
}

// A poster and claimers race, and each claimer takes only tasks of one
// kind, so many wakes land on a claimer that cannot use them. Each claimer
// follows the protocol of app.Await: join, look, wait; pass on a wake that
// took nothing. The poster posts the next task only when the last one is
// taken, so a wake lost anywhere leaves every claimer asleep with a task
// pending, past the deadline.
func TestLineLosesNoTask(t *testing.T) {
	const posts, perKind = 2000, 2
	h := notify.NewHub()
	var available atomic.Int64 // the pending task's number + 1; 0 for none
	took := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	takeIfMine := func(kind int64) bool {
		n := available.Load()
		return n > 0 && (n-1)%2 == kind && available.CompareAndSwap(n, 0)
	}
	passOn := func(w ports.Waiter) {
		if available.Load() > 0 {
			w.PassOn()
		}
	}
	var wg sync.WaitGroup
	for c := range 2 * perKind {
		kind := int64(c % 2)
		wg.Go(func() {
			var acting ports.Waiter
			for {
				w := h.Wait(resize)
				got := takeIfMine(kind)
				if acting != nil && !got {
					passOn(acting)
				}
				acting = nil
				if got {
					if w.Leave() {
						passOn(w)
					}
					select {
					case took <- struct{}{}:
					case <-ctx.Done():
						return
					}
					continue
				}
				select {
				case <-w.Woken():
					w.Leave()
					acting = w
				case <-ctx.Done():
					w.Leave()
					return
				}
			}
		})
	}
	for i := range posts {
		available.Store(int64(i) + 1)                                       // the task is stored...
		h.Publish(event(resize, "9f2c1a0b7d4e6f83", domain.EventPosted, i)) // ...then announced
		select {
		case <-took:
		case <-ctx.Done():
			t.Fatalf("task %d of %d not taken by the deadline: a wake-up was lost", i, posts)
		}
	}
	cancel()
	wg.Wait()
}

func TestEverySubscriberGetsEveryEventInOrder(t *testing.T) {
	const subscribers, events = 16, 500
	h := notify.NewHub()
	k := domain.Key{Host: resize.Host, Queue: resize.Queue, ID: "9f2c1a0b7d4e6f83"}
	subs := make([]*notify.Subscription, subscribers)
	for i := range subs {
		subs[i] = h.Subscribe(k, events) // room for all: none may be cut off
	}
	// Another task of the same queue, and another subscriber's own task.
	otherSub := h.Subscribe(domain.Key{Host: resize.Host, Queue: resize.Queue, ID: "3a71bd0c5e2f9481"}, events)

	got := make([][]int, subscribers)
	var wg sync.WaitGroup
	for i, s := range subs {
		wg.Go(func() {
			timeout := time.After(10 * time.Second)
			for len(got[i]) < events {
				select {
				case ev, ok := <-s.C():
					if !ok {
						t.Errorf("subscriber %d closed after %d events, lost=%v", i, len(got[i]), s.Lost())
						return
					}
					if ev.Task.ID != k.ID {
						t.Errorf("subscriber %d got an event of task %s", i, ev.Task.ID)
					}
					got[i] = append(got[i], ev.Task.Attempts)
				case <-timeout:
					t.Errorf("subscriber %d has %d of %d events at the deadline", i, len(got[i]), events)
					return
				}
			}
		})
	}
	want := make([]int, events)
	for n := range events {
		want[n] = n
		h.Publish(event(resize, k.ID, domain.EventProgress, n))
		h.Publish(event(resize, "0000000000000000", domain.EventProgress, n))
	}
	wg.Wait()

	for i := range subs {
		if diff := cmp.Diff(want, got[i]); diff != "" {
			t.Errorf("subscriber %d events (-want +got):\n%s", i, diff)
		}
		subs[i].Close()
		if _, ok := <-subs[i].C(); ok || subs[i].Lost() {
			t.Errorf("subscriber %d after Close: channel open %v, lost %v", i, ok, subs[i].Lost())
		}
	}
	select {
	case ev := <-otherSub.C():
		t.Errorf("subscriber of another task got %+v", ev)
	default:
	}
	otherSub.Close()
}

func TestSlowSubscriberIsCutOffWithoutBlocking(t *testing.T) {
	const events = 10
	h := notify.NewHub()
	k := domain.Key{Host: resize.Host, Queue: resize.Queue, ID: "9f2c1a0b7d4e6f83"}
	slow := h.Subscribe(k, 2) // never read while publishing
	fast := h.Subscribe(k, events)
	defer fast.Close()

	published := make(chan struct{})
	go func() {
		defer close(published)
		for n := range events {
			h.Publish(event(resize, k.ID, domain.EventProgress, n))
		}
	}()
	select {
	case <-published:
	case <-time.After(10 * time.Second):
		t.Fatal("Publish blocked on a full subscriber")
	}

	// The slow one keeps what fit, then finds its channel closed.
	var slowGot []int
	for ev := range slow.C() {
		slowGot = append(slowGot, ev.Task.Attempts)
	}
	if diff := cmp.Diff([]int{0, 1}, slowGot); diff != "" {
		t.Errorf("slow subscriber events (-want +got):\n%s", diff)
	}
	if !slow.Lost() {
		t.Error("slow subscriber not marked lost")
	}
	slow.Close() // after being cut off: harmless
	slow.Close()

	// The fast one missed nothing and is still subscribed.
	for n := range events {
		if ev := <-fast.C(); ev.Task.Attempts != n {
			t.Fatalf("fast subscriber event %d has attempts %d", n, ev.Task.Attempts)
		}
	}
	if fast.Lost() {
		t.Error("fast subscriber marked lost")
	}
	h.Publish(event(resize, k.ID, domain.EventResult, events))
	if ev := <-fast.C(); ev.Kind != domain.EventResult {
		t.Errorf("fast subscriber got %s after the cut-off, want result", ev.Kind)
	}
}
