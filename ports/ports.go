// Package ports declares what the use cases in app need from the outside
// world. Adapters implement these; app and the tests depend only on them.
package ports

import (
	"context"
	"encoding/json"
	"time"

	"github.com/taskhoster/taskhoster/domain"
)

// Counts is how many tasks a queue holds in each stage.
type Counts struct {
	Pending    int
	Processing int
	Done       int
}

// Matcher decides whether a worker's claim query accepts an item.
type Matcher interface {
	// Key identifies what the matcher accepts: two matchers with the same key
	// accept the same items, so a repository may remember past verdicts.
	Key() string
	Match(item json.RawMessage) bool
}

// TaskRepository stores tasks, one record per id, and keeps them indexed in
// memory so that no call lists a directory. Writes are atomic (a reader never
// sees half a record) but are durable only once Syncer.Sync returns.
//
// Each change (Create, Update, ClaimNext, Delete) may take a Then, which is
// called with the record just stored (for Delete, the record removed) once
// the change is stored, before any later change of the queue is indexed:
// the Then calls of one queue run one at a time, in the order the changes
// were stored. That is where a caller logs and announces a change, so that
// everyone sees a task's changes in store order. If Then fails, the change
// stays stored and its error is returned. Neither fn nor Then may call back
// into the repository.
//
// Errors: domain.ErrNotFound for a missing task; whatever fn returns, unchanged.
type TaskRepository interface {
	// Create stores a new task. It fails if the id is already taken.
	Create(ctx context.Context, t domain.Task, then Then) error
	// Get returns the current record of a task.
	Get(ctx context.Context, k domain.Key) (domain.Task, error)
	// Update applies fn to the current record and stores the result in the
	// state its status names, as one atomic step with respect to every other
	// change. If fn returns an error nothing is stored, and Update returns
	// the unchanged current record together with fn's error (callers read
	// the status from it to explain a refusal).
	Update(ctx context.Context, k domain.Key, fn func(*domain.Task) error, then Then) (domain.Task, error)
	// ClaimNext applies fn, as Update does, to the oldest pending task of q
	// (by postedAt, then id) whose item m matches (nil m matches all). It
	// returns domain.ErrNotFound when no pending task matches.
	ClaimNext(ctx context.Context, q domain.QueueRef, m Matcher, fn func(*domain.Task) error, then Then) (domain.Task, error)
	// Delete removes a task for good (retention), if check (when not nil)
	// approves of its current record; otherwise it returns check's error.
	Delete(ctx context.Context, k domain.Key, check func(domain.Task) error, then Then) error
	// Each calls fn with each task of q in stage st until fn returns false.
	// Pending tasks come in claim order, the others by (postedAt, id). fn
	// must not call back into the repository.
	Each(ctx context.Context, q domain.QueueRef, st domain.Stage, fn func(domain.Task) bool) error
	// Counts reports how many tasks q holds in each state directory.
	Counts(q domain.QueueRef) Counts
}

// Then is told of a change once it is stored (see TaskRepository).
type Then func(domain.Task) error

// Call runs then on t; a nil Then does nothing.
func (then Then) Call(t domain.Task) error {
	if then == nil {
		return nil
	}
	return then(t)
}

// Syncer makes writes durable. Sync returns once every write that completed
// before it was called is on stable storage; concurrent callers may share one
// flush (group commit).
type Syncer interface {
	Sync(ctx context.Context) error
}

// EventLog is the durable record of every transition (SPEC §8). Append writes
// the event's line; it is durable once Syncer.Sync returns.
type EventLog interface {
	Append(ctx context.Context, ev domain.Event, archive bool) error
}

// Notifier tells waiting claims and watchers that something changed.
type Notifier interface {
	// Publish announces a transition that has been stored.
	Publish(ev domain.Event)
	// Wait puts a claim in q's line for work. Join before looking for a
	// task, so that one posted in between is not missed.
	Wait(q domain.QueueRef) Waiter
}

// Waiter is a claim in line for work. Each task that becomes pending
// (posted or re-queued) wakes one waiter, the one longest in line. The wake
// is then its claim's to use: if that claim takes no task (another claim was
// faster, or its query does not match) it must PassOn the wake, or a task
// could stay pending while a claim that would take it sleeps.
type Waiter interface {
	// Woken is closed once the waiter is woken.
	Woken() <-chan struct{}
	// Leave takes the waiter out of line and reports whether it had been
	// woken (possibly just now: the caller then owns that wake too).
	Leave() (woken bool)
	// PassOn gives the waiter's wake to the next waiter that joined before
	// the wake happened. Call it after Leave, for a wake not used.
	PassOn()
}

// Clock tells the time. The domain never reads it; app passes now in.
type Clock interface {
	Now() time.Time
}
