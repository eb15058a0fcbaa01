// Package notify is the in-process Notifier: for each task that becomes
// pending it wakes one claim waiting in its queue's line, and it feeds each
// watcher of a task that task's events. Everything happens in the
// publisher's call; there is no goroutine.
package notify

import (
	"container/list"
	"sync"
	"sync/atomic"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

var _ ports.Notifier = (*Hub)(nil)

// Hub implements ports.Notifier and per-task subscriptions. The zero Hub is
// not usable; call NewHub.
type Hub struct {
	mu sync.Mutex
	// lines holds, per queue, the claims waiting for a pending task, longest
	// waiting first. An entry exists only while someone waits, so queues
	// nobody waits on cost nothing.
	lines map[domain.QueueRef]*list.List
	// wakes numbers the tasks that became pending, across every queue; a
	// waiter remembers the number when it joined, so a wake is only ever
	// handed to waiters that joined before it (see Waiter.PassOn).
	wakes uint64
	// subs holds the live subscriptions of each task; an entry goes when its
	// last subscription closes or is cut off.
	subs map[domain.Key]map[*Subscription]struct{}
}

// NewHub returns an empty Hub.
func NewHub() *Hub {
	return &Hub{
		lines: make(map[domain.QueueRef]*list.List),
		subs:  make(map[domain.Key]map[*Subscription]struct{}),
	}
}

// Wait puts a claim in q's line for the next task to become pending.
func (h *Hub) Wait(q domain.QueueRef) ports.Waiter {
	w := &Waiter{hub: h, q: q, woken: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	w.since = h.wakes
	l, ok := h.lines[q]
	if !ok {
		l = list.New()
		h.lines[q] = l
	}
	w.elem = l.PushBack(w)
	return w
}

// Publish wakes one claim waiting on the event's queue if the event made its
// task pending, and hands the event to every subscription of its task.
// Delivery happens under the Hub's lock, so each subscription sees a task's
// events in the order they were published; it never blocks, because a
// subscription that cannot take an event is cut off instead (see Lost).
func (h *Hub) Publish(ev domain.Event) {
	k := domain.KeyOf(ev.Task)
	h.mu.Lock()
	defer h.mu.Unlock()
	if ev.Kind == domain.EventPosted || ev.Kind == domain.EventRequeue {
		// One task, one claim woken: waking every waiter would have all of
		// them queue up for the queue's lock to find one task.
		h.wakes++
		h.wakeNext(k.Ref(), h.wakes)
	}
	for s := range h.subs[k] {
		select {
		case s.ch <- ev:
		default:
			// A watcher that fell this far behind would show a stale view;
			// better it learns it lost track and starts over.
			s.lost.Store(true)
			h.drop(s)
		}
	}
}

// wakeNext gives wake n to the waiter longest in q's line, if it joined
// before the wake: one that joined later looked for tasks after this one
// was there. h.mu is held.
func (h *Hub) wakeNext(q domain.QueueRef, n uint64) {
	l := h.lines[q]
	if l == nil {
		return
	}
	w := l.Front().Value.(*Waiter)
	if w.since >= n {
		return
	}
	h.unline(w)
	w.wake = n
	close(w.woken)
}

// unline takes w out of its queue's line. h.mu is held.
func (h *Hub) unline(w *Waiter) {
	l := h.lines[w.q]
	l.Remove(w.elem)
	w.elem = nil
	if l.Len() == 0 {
		delete(h.lines, w.q)
	}
}

// Waiter is one claim in its queue's line (see ports.Waiter).
type Waiter struct {
	hub   *Hub
	q     domain.QueueRef
	since uint64        // the Hub's wakes when it joined
	elem  *list.Element // its place in line; nil once woken or gone
	woken chan struct{} // closed when woken
	wake  uint64        // the wake it got; 0 for none
}

// Woken is closed once the waiter is woken.
func (w *Waiter) Woken() <-chan struct{} { return w.woken }

// Leave takes the waiter out of line, if it is still in it, and reports
// whether it was woken.
func (w *Waiter) Leave() (woken bool) {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	if w.elem != nil {
		w.hub.unline(w)
	}
	return w.wake != 0
}

// PassOn gives the wake this waiter got to the next waiter in line that
// joined before that wake, if any. A chain of waiters passing one wake on
// visits each of them at most once: a waiter that joins again joins after it.
func (w *Waiter) PassOn() {
	if w.wake == 0 {
		return
	}
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	w.hub.wakeNext(w.q, w.wake)
}

// Subscribe starts delivering k's events to a new subscription, which holds
// up to buffer of them (at least 1) until they are read. Close it when done.
func (h *Hub) Subscribe(k domain.Key, buffer int) *Subscription {
	s := &Subscription{hub: h, key: k, ch: make(chan domain.Event, max(buffer, 1))}
	h.mu.Lock()
	defer h.mu.Unlock()
	set, ok := h.subs[k]
	if !ok {
		set = make(map[*Subscription]struct{})
		h.subs[k] = set
	}
	set[s] = struct{}{}
	return s
}

// drop removes s from the Hub and closes its channel, unless that is done
// already. The caller holds h.mu, which is also what every send on s.ch holds,
// so a send never meets a closed channel.
func (h *Hub) drop(s *Subscription) {
	set, ok := h.subs[s.key]
	if !ok {
		return
	}
	if _, ok := set[s]; !ok {
		return
	}
	delete(set, s)
	if len(set) == 0 {
		delete(h.subs, s.key)
	}
	close(s.ch)
}

// Subscription receives the events of one task, in publish order.
type Subscription struct {
	hub  *Hub
	key  domain.Key
	ch   chan domain.Event
	lost atomic.Bool
}

// C delivers the events. It is closed by Close, or when the subscription
// fell behind by more than its buffer (then Lost reports true).
func (s *Subscription) C() <-chan domain.Event { return s.ch }

// Lost reports whether the subscription was cut off for falling behind, so
// that events were missed. It is set before C is closed.
func (s *Subscription) Lost() bool { return s.lost.Load() }

// Close stops the deliveries and closes C. Closing twice, or after being
// cut off, is harmless.
func (s *Subscription) Close() {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	s.hub.drop(s)
}
