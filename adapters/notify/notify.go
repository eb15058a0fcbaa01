// Package notify is the in-process Notifier: it wakes claims waiting for a
// pending task of their queue, and feeds each watcher of a task that task's
// events. Everything happens in the publisher's call; there is no goroutine.
package notify

import (
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
	// pending holds, per queue, the channel the next pending task closes.
	// An entry exists only between the first Pending after a wake-up and the
	// next wake-up, so queues nobody waits on cost nothing.
	pending map[ports.QueueRef]chan struct{}
	// subs holds the live subscriptions of each task; an entry goes when its
	// last subscription closes or is cut off.
	subs map[ports.Key]map[*Subscription]struct{}
}

// NewHub returns an empty Hub.
func NewHub() *Hub {
	return &Hub{
		pending: make(map[ports.QueueRef]chan struct{}),
		subs:    make(map[ports.Key]map[*Subscription]struct{}),
	}
}

// Pending returns the channel that the next task of q to become pending
// closes. Every caller until then gets the same channel.
func (h *Hub) Pending(q ports.QueueRef) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch, ok := h.pending[q]
	if !ok {
		ch = make(chan struct{})
		h.pending[q] = ch
	}
	return ch
}

// Publish wakes the claims waiting on the event's queue if the event made its
// task pending, and hands the event to every subscription of its task.
// Delivery happens under the Hub's lock, so each subscription sees a task's
// events in the order they were published; it never blocks, because a
// subscription that cannot take an event is cut off instead (see Lost).
func (h *Hub) Publish(ev domain.Event) {
	k := ports.KeyOf(ev.Task)
	h.mu.Lock()
	defer h.mu.Unlock()

	if ev.Kind == domain.EventPosted || ev.Kind == domain.EventRequeue {
		// Closing wakes every waiter at once; deleting the entry makes the
		// next Pending start a new generation.
		if ch, ok := h.pending[k.Ref()]; ok {
			close(ch)
			delete(h.pending, k.Ref())
		}
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

// Subscribe starts delivering k's events to a new subscription, which holds
// up to buffer of them (at least 1) until they are read. Close it when done.
func (h *Hub) Subscribe(k ports.Key, buffer int) *Subscription {
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
	key  ports.Key
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
