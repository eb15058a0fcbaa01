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
	// Delayed is how many of the pending tasks were not claimable yet when
	// the store last looked: those whose notBefore is after the latest now
	// that ClaimNext or Due has been given for the queue (before any such
	// call, every pending task with a notBefore). So it may still count a
	// task whose time has come since; the next look makes it claimable.
	Delayed int
	// Failed is how many of the done tasks failed (the rest finished).
	Failed int
	// Oldest is the EligibleAt of the claimable task that has waited
	// longest (the zero time when none waits): the queue's age, which a
	// dashboard and a metric show to say whether workers keep up.
	Oldest time.Time
}

// ClockStepBack is how far behind the latest now it looked at a Due's now
// must be for a TaskRepository to take it for a clock set back (by hand, or
// by NTP stepping a clock that ran fast), not for two callers that read the
// clock in one order and reached the store in the other.
const ClockStepBack = time.Second

// Matcher decides whether a worker's claim query accepts an item.
type Matcher interface {
	// Key identifies what the matcher accepts: two matchers with the same key
	// accept the same items, so a repository may remember past verdicts.
	Key() string
	Match(item json.RawMessage) bool
}

// TaskRepository stores tasks, one record per id. It is written so that a
// store with no index in memory (a database) can meet it as well as the file
// store does; tests/contract holds every store to it.
//
// Atomicity. Each change (Create, CreateAll, Update, ClaimNext, Delete) is
// one atomic step with respect to every other change of the same task: fn sees the
// current record and what it leaves is stored whole or not at all. A reader
// never sees half a record. Whoever wins a race (two claims of one task, a
// result against a timeout) is decided here, by fn running on the record
// that is current at that moment.
//
// Then. Each change may take a Then, called with the record just stored
// (for Delete, the record removed) once the change is stored. The Then
// calls of one queue run one at a time, in store order: the file store's
// index runs a Then before it stores the queue's next change; a database
// store may commit later changes first, as long as their Thens wait their
// turn. A Get (on the same server) sees a change only once its Then has
// returned. That is where a caller logs and announces a change, so that
// everyone sees a task's changes in store order, and a watcher that
// subscribes before it reads misses nothing (app.Service.Watch). If Then
// fails, the change stays stored and its error is returned. Neither fn nor
// Then may call back into the repository.
//
// Durability. A change is durable only once Syncer.Sync returns.
//
// Cost and contexts. Every call takes a context except Counts: a store
// across a network may block on any of them, and must give up when ctx
// ends. Get, Update, Create and Delete touch one task; ClaimNext may test
// many pending tasks against m before it finds one (the file store's index
// remembers verdicts per Matcher.Key); Each walks a whole stage and is for
// the sweep and the start-up repair, never for a request. Counts must be
// cheap (an index or a maintained count), as metrics and the claim line's
// hand-on call it often.
//
// Errors: domain.ErrNotFound for a missing task; whatever fn returns,
// unchanged; a store that cannot be reached, a domain.KindUnavailable error.
type TaskRepository interface {
	// Create stores a new task. It fails with domain.ErrExists if the id is
	// taken, and with domain.ErrKeyTaken, storing nothing, if t has an
	// IdempotencyKey that another task of the queue holds: of two posts
	// racing with one key, exactly one is stored.
	Create(ctx context.Context, t domain.Task, then Then) error
	// CreateAll stores the new tasks ts, all of one queue, as Create does,
	// but all or none (a batch post, SPEC §12): if one cannot be stored
	// (its id or key taken, as Create fails; the store failing), none is,
	// and no reader sees one before all are stored. then is called with
	// each, in order, once all are stored; if one Then fails, the tasks
	// stay stored, the later Thens still run, and the first error is
	// returned.
	CreateAll(ctx context.Context, ts []domain.Task, then Then) error
	// ByKey returns the task of q that holds idempotency key k, for as long
	// as that task is kept (domain.ErrNotFound once it is deleted).
	ByKey(ctx context.Context, q domain.QueueRef, k string) (domain.Task, error)
	// List returns a page of q's tasks in the order and status l asks for,
	// and the cursor of the next page ("" when there is none). It may
	// return fewer than l.Limit tasks with a next cursor when l.Match
	// rejected many (a page's work is bounded); the caller asks again from
	// there.
	List(ctx context.Context, q domain.QueueRef, l ListQuery) (tasks []domain.Task, next string, err error)
	// Get returns the current record of a task.
	Get(ctx context.Context, k domain.Key) (domain.Task, error)
	// Update applies fn to the current record and stores the result in the
	// state its status names, as one atomic step with respect to every other
	// change. If fn returns an error nothing is stored, and Update returns
	// the unchanged current record together with fn's error (callers read
	// the status from it to explain a refusal).
	Update(ctx context.Context, k domain.Key, fn func(*domain.Task) error, then Then) (domain.Task, error)
	// ClaimNext applies fn, as Update does, to the first pending task of q
	// in claim order that is claimable at now (domain.Task.Claimable) and
	// whose item m matches (nil m matches all). Claim order is the highest
	// priority first, then the earliest EligibleAt, then the id; without
	// priorities and delays, oldest posted first. It returns
	// domain.ErrNotFound when no such task is there. A store may apply fn
	// to more than one task in one call (the PostgreSQL store tries its
	// guess from a stale copy, then looks again, past rows others lock): a
	// refusal of one it then passes by is not returned, and only the task
	// it returns was stored.
	ClaimNext(ctx context.Context, q domain.QueueRef, m Matcher, now time.Time, fn func(*domain.Task) error, then Then) (domain.Task, error)
	// Due makes claimable the pending tasks of q whose notBefore has come
	// by now, and reports how many became so since the last call (made so
	// by this call or by a ClaimNext, which looks too, whether or not a
	// claim took them since) and when the next delayed one will (zero:
	// none is delayed). A second call at the same now reports 0. The
	// caller wakes that many waiting claims and looks again then;
	// ClaimNext does not depend on it. A now more than ClockStepBack
	// behind the latest one looked at means the clock was set back: the
	// tasks whose notBefore is after now are delayed again, so that next
	// names the first of them and a later call counts each when it comes.
	Due(ctx context.Context, q domain.QueueRef, now time.Time) (n int, next time.Time, err error)
	// Delete removes a task for good (retention), if check (when not nil)
	// approves of its current record; otherwise it returns check's error.
	Delete(ctx context.Context, k domain.Key, check func(domain.Task) error, then Then) error
	// Each calls fn with each task of q in stage st until fn returns false.
	// Pending tasks come by (EligibleAt, id), which is claim order without
	// priorities; the others by (postedAt, id). fn must not call back into
	// the repository.
	Each(ctx context.Context, q domain.QueueRef, st domain.Stage, fn func(domain.Task) bool) error
	// Counts reports how many tasks q holds in each stage.
	Counts(q domain.QueueRef) Counts
}

// ListQuery is what a page of tasks is asked for (SPEC §12).
type ListQuery struct {
	Status domain.Status
	// Newest lists newest first; otherwise oldest first. Pending tasks are
	// ordered by (EligibleAt, id), the others by (postedAt, id).
	Newest bool
	Limit  int     // 1 to 1000
	After  string  // a cursor from an earlier page; "" for the first
	Match  Matcher // nil: every task; else the item must match
}

// Pauses keeps which queues are paused (SPEC §12). A pause lives with the
// server's data, not in the queue file, and survives restarts: SetPaused
// returns once the change is durable.
type Pauses interface {
	Paused(q domain.QueueRef) bool
	SetPaused(ctx context.Context, q domain.QueueRef, paused bool) error
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

// Notifier carries the news of stored changes to the claims waiting for
// work and to the watchers of a task. Publish is called in the change's
// Then, so news of one queue arrives in store order. A store shared by
// several servers needs a Notifier that carries news between them.
type Notifier interface {
	// Publish announces a transition that has been stored.
	Publish(ev domain.Event)
	// Await runs try, and again each time a task of q may have become
	// claimable, until try claims one (nil), fails (its error) or ctx ends
	// (ctx's error). Each task that becomes claimable wakes one waiting
	// claim; a wake its try does not use goes on to the next in line, so
	// no task stays pending while a claim that would take it sleeps. A try
	// that returns domain.ErrNotFound found nothing claimable in q at all
	// (not only nothing its query wants): Await waits on, and the Notifier
	// decides whether that wake still goes on (notify.WithEmptyLook).
	Await(ctx context.Context, q domain.QueueRef, try func() (claimed bool, err error)) error
	// Subscribe delivers every event of task k published from now on, in
	// publish order, holding up to buffer unread ones.
	Subscribe(k domain.Key, buffer int) Subscription
	// Wake wakes n claims waiting on q: n tasks became claimable without a
	// change of their own (their notBefore came; TaskRepository.Due).
	Wake(q domain.QueueRef, n int)
}

// Subscription receives the events of one task.
type Subscription interface {
	// C delivers the events. It is closed by Close, or when the subscriber
	// fell more than its buffer behind (then Lost reports true).
	C() <-chan domain.Event
	// Lost reports whether events were missed for falling behind.
	Lost() bool
	// Close stops the deliveries. Closing twice is harmless.
	Close()
}

// Clock tells the time. The domain never reads it; app passes now in.
// Servers that share a database share its clock (postgres.Clock), so that
// leases, delays, timeouts and retention are judged alike on every one.
type Clock interface {
	Now() time.Time
}
