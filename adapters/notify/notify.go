// Package notify is the in-process Notifier: for each task that becomes
// pending it wakes one claim waiting in its queue's line, and it feeds each
// watcher of a task that task's events. Everything happens in the
// publisher's call; there is no goroutine.
package notify

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

var _ ports.Notifier = (*Hub)(nil)

// Hub implements ports.Notifier. The zero Hub is not usable; call NewHub.
type Hub struct {
	mu sync.Mutex
	// lines holds, per queue, the claims waiting for a pending task, longest
	// waiting first. An entry exists only while someone waits, so queues
	// nobody waits on cost nothing.
	lines map[domain.QueueRef]*list.List
	// wakes numbers the tasks that became pending, across every queue; a
	// waiter remembers the number when it joined, so a wake is only ever
	// handed to waiters that joined before it (see waiter.passOn).
	wakes uint64
	// subs holds the live subscriptions of each task; an entry goes when its
	// last subscription closes or is cut off.
	subs map[domain.Key]map[*Subscription]struct{}
	// pending reports whether a queue has a pending task (WithPending).
	pending func(domain.QueueRef) bool
	// emptyLook decides on a wake whose look found nothing claimable at
	// all (WithEmptyLook); nil: as any wake not used.
	emptyLook func(domain.QueueRef) bool
	// woken and unused are told of each claim woken for a task newly
	// claimable, and of each wake no claim used (OnWake); nil: nobody is.
	woken, unused func()
}

// NewHub returns an empty Hub.
func NewHub(opts ...Option) *Hub {
	h := &Hub{
		lines: make(map[domain.QueueRef]*list.List),
		subs:  make(map[domain.Key]map[*Subscription]struct{}),
	}
	for _, o := range opts {
		o(h)
	}
	return h
}

// Option configures NewHub.
type Option func(*Hub)

// WithPending tells the Hub whether q has any pending task, so that a wake
// a claim did not use is handed on only while there is something to take.
// Without it every unused wake is handed on, which is correct but wakes
// claims to find nothing.
func WithPending(pending func(q domain.QueueRef) bool) Option {
	return func(h *Hub) { h.pending = pending }
}

// WithEmptyLook tells the Hub what to do with a wake whose look found
// nothing claimable in q at all (try returned domain.ErrNotFound), rather
// than nothing it wanted: it is handed on only if handOn(q). No other claim
// in line could use it then, provided every task the look could not see
// wakes a claim of its own once it is free (a store whose rows in a
// transaction wake a claim when let go unchanged). So a store that sees
// everything answers false, and spares the question WithPending's
// function would cost after every wake a faster claim took. Without this
// option such a wake is handed on as any other.
func WithEmptyLook(handOn func(q domain.QueueRef) bool) Option {
	return func(h *Hub) { h.emptyLook = handOn }
}

// OnWake has woken run each time a waiting claim is woken for a task that
// has just become claimable (Publish, Wake), not when a wake is handed on,
// and unused each time a wake ends with no claim having used it (none
// wanted the task, or nothing was pending any more): the durability
// adapter holds the commit the post is about to ask for a moment, for the
// claim to join it, unless it will not come (durable.Syncer.Expect,
// Unexpect). Both may run under the Hub's lock and must be quick. Call it
// before serving.
func (h *Hub) OnWake(woken, unused func()) { h.woken, h.unused = woken, unused }

// Await runs try, and again each time a task of q may have become
// claimable, until try reports it claimed one (Await returns nil), try
// fails (its error), or ctx ends (ctx's error). try runs in the caller's
// goroutine and is never interrupted by ctx.
//
// Claims wait in line, in the order they began to wait, and each task that
// becomes pending wakes only the claim longest in line: waking all would
// have every idle worker queue up for the store's lock to find one task. A
// claim woken in vain (another claim was faster, or its query does not
// match) hands the wake on to the next claim that began waiting before the
// task came; one that began later looked with the task already there. So a
// chain of hand-ons visits each claim at most once, and no task stays
// pending while a claim that would take it sleeps (TestLineLosesNoTask).
// try returning domain.ErrNotFound says it found nothing claimable in q at
// all: Await waits on, and the wake goes on only as WithEmptyLook says.
func (h *Hub) Await(ctx context.Context, q domain.QueueRef, try func() (claimed bool, err error)) error {
	var acting *waiter // the woken waiter whose wake this look uses
	for {
		if err := ctx.Err(); err != nil {
			if acting != nil {
				h.passOn(acting)
			}
			return err
		}
		// Join the line before looking, so a task posted between the look
		// and the wait still wakes us.
		w := h.join(q)
		claimed, err := try()
		empty := errors.Is(err, domain.ErrNotFound)
		if empty {
			err = nil
		}
		switch {
		case acting == nil || claimed:
		case empty && h.emptyLook != nil:
			if h.emptyLook(q) {
				acting.passOn()
			} else {
				h.wasted(acting)
			}
		default:
			h.passOn(acting) // woken in vain: the next in line may want it
		}
		acting = nil
		if claimed || err != nil {
			// Woken while looking, w hands its wake on: the task taken (if
			// any) may be an older one.
			h.leave(w)
			return err
		}
		select {
		case <-w.woken:
			w.unline()
			acting = w
		case <-ctx.Done():
			h.leave(w)
			return ctx.Err()
		}
	}
}

// Waiting is how many claims wait in q's line on this server.
func (h *Hub) Waiting(q domain.QueueRef) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l, ok := h.lines[q]; ok {
		return l.Len()
	}
	return 0
}

// join puts a claim at the end of q's line.
func (h *Hub) join(q domain.QueueRef) *waiter {
	w := &waiter{hub: h, q: q, woken: make(chan struct{})}
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

// leave takes w out of the line, handing on a wake it got and will not use.
func (h *Hub) leave(w *waiter) {
	if w.unline() {
		h.passOn(w)
	}
}

// passOn hands w's unused wake to the next claim in line, unless nothing is
// pending any more: then whoever took the task used the wake, and w's
// wake ends here (wasted). A claim that took it has met an expectation
// already, so this one withdraws another post's, if any is open: a
// shared commit lost, no wait added.
func (h *Hub) passOn(w *waiter) {
	if h.pending == nil || h.pending(w.q) {
		w.passOn()
	} else {
		h.wasted(w)
	}
}

// wasted says that w's wake, if woken was told of it, ends unused here.
func (h *Hub) wasted(w *waiter) {
	if w.told && h.unused != nil {
		h.unused()
	}
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
	if ev.Task.Claimable(ev.At) {
		// One task, one claim woken: waking every waiter would have all of
		// them queue up for the queue's lock to find one task. A task
		// delayed (a backoff, a delayed post) wakes nobody now; Wake does
		// once its time has come.
		h.wakes++
		h.wakeFresh(k.Ref())
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

// Wake wakes up to n claims waiting in q's line, one for each task that has
// just become claimable.
func (h *Hub) Wake(q domain.QueueRef, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for range n {
		if h.lines[q] == nil {
			return
		}
		h.wakes++
		h.wakeFresh(q)
	}
}

// wakeFresh gives the wake just numbered to the claim longest in q's line,
// telling woken if one took it. h.mu is held.
func (h *Hub) wakeFresh(q domain.QueueRef) {
	if h.wakeNext(q, h.wakes, h.woken != nil) && h.woken != nil {
		h.woken()
	}
}

// Interrupt says news may have been missed (a Notifier that carries news
// between servers lost its connection for a while): it wakes every claim
// waiting in every line once, so each looks again, and cuts off every
// subscription (Lost), so each watcher starts over from a fresh read.
func (h *Hub) Interrupt() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wakes++
	for _, l := range h.lines {
		for e := l.Front(); e != nil; e = l.Front() {
			w := e.Value.(*waiter)
			h.unline(w)
			w.wake = h.wakes
			close(w.woken)
		}
	}
	for _, set := range h.subs {
		for s := range set {
			s.lost.Store(true)
			h.drop(s)
		}
	}
}

// CutOff cuts off every subscription of task k (Lost), so each watcher
// starts over from a fresh read: news of k was missed (a Notifier that
// carries news between servers could not read a record it was told of).
func (h *Hub) CutOff(k domain.Key) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[k] {
		s.lost.Store(true)
		h.drop(s)
	}
}

// wakeNext gives wake n to the waiter longest in q's line, if it joined
// before the wake: one that joined later looked for tasks after this one
// was there, and reports whether one did. told says woken was told of the
// wake, so that its end unused is told too (wasted). h.mu is held.
func (h *Hub) wakeNext(q domain.QueueRef, n uint64, told bool) bool {
	l := h.lines[q]
	if l == nil {
		return false
	}
	w := l.Front().Value.(*waiter)
	if w.since >= n {
		return false
	}
	h.unline(w)
	w.wake, w.told = n, told
	close(w.woken)
	return true
}

// unline takes w out of its queue's line. h.mu is held.
func (h *Hub) unline(w *waiter) {
	l := h.lines[w.q]
	l.Remove(w.elem)
	w.elem = nil
	if l.Len() == 0 {
		delete(h.lines, w.q)
	}
}

// waiter is one claim in its queue's line.
type waiter struct {
	hub   *Hub
	q     domain.QueueRef
	since uint64        // the Hub's wakes when it joined
	elem  *list.Element // its place in line; nil once woken or gone
	woken chan struct{} // closed when woken
	wake  uint64        // the wake it got; 0 for none
	told  bool          // woken was told of that wake (or of the one it was handed on from)
}

// unline takes the waiter out of line, if it is still in it, and reports
// whether it was woken (possibly just now).
func (w *waiter) unline() (woken bool) {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	if w.elem != nil {
		w.hub.unline(w)
	}
	return w.wake != 0
}

// passOn gives the wake this waiter got to the next waiter in line that
// joined before that wake, if any; with none, the wake ends unused. A
// waiter that joins again joins after it.
func (w *waiter) passOn() {
	if w.wake == 0 {
		return
	}
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	if !w.hub.wakeNext(w.q, w.wake, w.told) {
		w.hub.wasted(w)
	}
}

// Subscribe starts delivering k's events to a new subscription, which holds
// up to buffer of them (at least 1) until they are read. Close it when done.
func (h *Hub) Subscribe(k domain.Key, buffer int) ports.Subscription {
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
