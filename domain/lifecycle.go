package domain

import (
	"encoding/json"
	"errors"
	"time"
)

// EventKind names a transition in the durable event log (SPEC §8).
type EventKind string

const (
	EventPosted    EventKind = "posted"
	EventClaimed   EventKind = "claimed"
	EventProgress  EventKind = "progress"
	EventResult    EventKind = "result"
	EventFailed    EventKind = "failed" // failed by its worker, out of attempts, or a corrupt file
	EventTimeout   EventKind = "timeout"
	EventRequeue   EventKind = "requeue"
	EventFetched   EventKind = "fetched"
	EventCleaned   EventKind = "cleaned"
	EventReleased  EventKind = "released"  // given back by its worker
	EventCancelled EventKind = "cancelled" // cancelled by a user (SPEC §12)
	EventRetried   EventKind = "retried"   // a failed task put back to pending (SPEC §12)
)

// Event is what one transition caused: its kind, the worker involved (if
// any), when, and the task as it is afterwards.
type Event struct {
	Kind   EventKind
	At     time.Time
	Worker string
	Task   Task
	// Cause says why a re-queue happened (CauseLease, CauseSocket). It feeds
	// metrics; the event log line has no field for it.
	Cause string
}

// Causes of a re-queue.
const (
	CauseLease  = "lease"  // the sweep found the lease lapsed
	CauseSocket = "socket" // the worker's socket closed
)

// PostOptions are what a post may ask beyond its item (SPEC §11).
type PostOptions struct {
	NotBefore *int64 // not claimable before this (Unix ms); nil: at once
	Priority  int    // claims take higher priorities first
	Key       string // an idempotency key (SPEC §12); "" for none
}

// MaxKeyLength is the longest idempotency key (SPEC §12).
const MaxKeyLength = 200

// ValidKey reports whether k may be an idempotency key: 1 to 200 visible
// ASCII characters.
func ValidKey(k string) bool {
	if len(k) == 0 || len(k) > MaxKeyLength {
		return false
	}
	for i := range len(k) {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// Limits of PostOptions (SPEC §11).
const (
	MaxPriority     = 1000
	MaxDelaySeconds = 31536000
)

// Post makes a new pending task. At most one PostOptions applies.
func Post(id, host, queue string, item json.RawMessage, postedBy string, now time.Time, opts ...PostOptions) (Task, Event) {
	ms := Millis(now)
	t := Task{
		ID: id, Host: host, Queue: queue, Status: Pending, Item: item,
		PostedAt: ms, UpdatedAt: ms,
	}
	if postedBy != "" {
		t.PostedBy = ptr(postedBy)
	}
	for _, o := range opts[:min(len(opts), 1)] {
		if o.NotBefore != nil && *o.NotBefore > ms {
			t.NotBefore = ptr(*o.NotBefore)
		}
		t.Priority = o.Priority
		t.IdempotencyKey = o.Key
	}
	return t, Event{Kind: EventPosted, At: now, Task: t}
}

// Claim leases a pending task to worker for lease, counting one more attempt.
// A task whose notBefore has not come yet cannot be claimed.
func (t Task) Claim(worker string, lease time.Duration, now time.Time) (Task, Event, error) {
	switch {
	case t.Status != Pending:
		return t, Event{}, ErrNotPending
	case !t.Claimable(now):
		return t, Event{}, ErrNotYet
	}
	t.Status = Processing
	t.Attempts++
	t.Lease = &Lease{Worker: worker, Until: Millis(now.Add(lease))}
	t.UpdatedAt = Millis(now)
	return t, Event{Kind: EventClaimed, At: now, Worker: worker, Task: t}, nil
}

// ErrAttemptsSpent refuses the claim of a pending task whose attempts its
// queue's maxAttempts has already spent (ClaimUnder): a reload lowered
// maxAttempts below them while it waited. The claim's caller makes it a
// dead letter (Exhaust) and takes the next task; no client sees this.
var ErrAttemptsSpent = errors.New("the task's attempts are spent")

// ErrQueueTimeUp refuses the claim of a pending task older than its
// queue's queueSeconds (ClaimUnder): the sweep, which runs every second or
// so, has not failed it yet. Handed out, it would be failed under its
// worker, whose result would then be refused. The claim's caller times it
// out (Timeout) and takes the next task; no client sees this.
var ErrQueueTimeUp = errors.New("the task outlived its queue")

// ClaimUnder is Claim under a queue's settings s: its lease, no claim past
// maxAttempts (SPEC §11: no task is handed out more than maxAttempts
// times, whatever maxAttempts is now), and none past queueSeconds.
func (t Task) ClaimUnder(worker string, s Settings, now time.Time) (Task, Event, error) {
	switch {
	case t.Status != Pending:
	case DueAt(t, s, now) == DueTimeout:
		return t, Event{}, ErrQueueTimeUp
	case s.Exhausted(t.Attempts):
		return t, Event{}, ErrAttemptsSpent
	}
	return t.Claim(worker, s.Lease(), now)
}

// Exhaust makes a pending task whose attempts s has spent a dead letter,
// as a task that comes back after its last attempt is (error "attempts",
// event failed): what a claim finds instead of a task to hand out
// (ErrAttemptsSpent).
func (t Task) Exhaust(s Settings, now time.Time) (Task, Event, error) {
	switch {
	case t.Status != Pending:
		return t, Event{}, ErrNotPending
	case !s.Exhausted(t.Attempts):
		return t, Event{}, E(KindConflict, CodeNotPending, "task %s has attempts left", t.ID)
	}
	return t.failWith(AttemptsError, EventFailed, now)
}

// Holder names who reports on a processing task: its worker and, when the
// caller knows it (a worker socket does), the claim it holds. A worker's
// name alone cannot tell a stale holder from a newer claim by the same name
// (its lease lapsed, it claimed the task again, and the old claim's report
// arrives late); the claim's attempt number can, and since a retry (SPEC
// §12) counts attempts from 0 again, so does the notBefore the claim was
// made under: a retry sets it to its own time, and nothing else changes it
// while the task is processing (CheckTransition). Only a task claimed,
// ended and retried within one millisecond of its notBefore would repeat
// both.
type Holder struct {
	Worker    string
	Attempt   int    // the claim's attempts; 0: any claim of Worker's
	NotBefore *int64 // with Attempt: the task's notBefore when claimed
	// AnyNotBefore says the caller knows its claim's attempt but not the
	// notBefore it was made under (an HTTP worker: a claim reply has no
	// notBefore), so only the attempt names the claim. Without it, such a
	// caller's report on a delayed, backed-off or retried task, whose
	// notBefore is set, would never name its own claim.
	AnyNotBefore bool
}

// HolderOf names the claim t is processing under (t must be processing).
func HolderOf(t Task) Holder {
	h := Holder{Attempt: t.Attempts, NotBefore: t.NotBefore}
	if t.Lease != nil {
		h.Worker = t.Lease.Worker
	}
	return h
}

// Equal reports whether h and o name the same holder and claim (notBefore
// compared by value).
func (h Holder) Equal(o Holder) bool {
	return h.Worker == o.Worker && h.Attempt == o.Attempt && samePtr(h.NotBefore, o.NotBefore) && h.AnyNotBefore == o.AnyNotBefore
}

// Names reports whether h's claim is the one whose number t carries
// (attempts and notBefore), whatever t's status: a claim h names that
// ended (finished, failed, re-queued) leaves them in place.
func (h Holder) Names(t Task) bool {
	return h.Attempt == t.Attempts && (h.AnyNotBefore || samePtr(h.NotBefore, t.NotBefore))
}

// HeldBy reports whether h holds t's lease: t is processing, leased to
// h.Worker and, if h names a claim, under that claim.
func (t Task) HeldBy(h Holder) error {
	switch {
	case t.Status != Processing:
		return ErrNotProcessing
	case t.Lease == nil || t.Lease.Worker != h.Worker:
		return ErrNotLeaseHolder
	case h.Attempt != 0 && !h.Names(t):
		return ErrNotLeaseHolder
	}
	return nil
}

// ReportProgress stores worker's progress record and extends its lease. Only the
// worker holding the lease of a processing task may report progress.
func (t Task) ReportProgress(worker string, progress json.RawMessage, lease time.Duration, now time.Time) (Task, Event, error) {
	switch {
	case t.Status != Processing:
		return t, Event{}, ErrNotProcessing
	case t.Lease == nil || t.Lease.Worker != worker:
		return t, Event{}, ErrNotLeaseHolder
	}
	t.Progress = progress
	t.Lease = &Lease{Worker: worker, Until: Millis(now.Add(lease))}
	t.UpdatedAt = Millis(now)
	return t, Event{Kind: EventProgress, At: now, Worker: worker, Task: t}, nil
}

// Finish accepts worker's result. Any non-terminal task takes it, whoever
// holds the lease: a slow worker's late result still counts if nobody beat it.
// The first result wins; every later one gets ErrTerminal.
func (t Task) Finish(worker string, result json.RawMessage, now time.Time) (Task, Event, error) {
	if t.Status.Terminal() {
		return t, Event{}, ErrTerminal
	}
	t = t.end(Finished, now)
	t.Result = result
	return t, Event{Kind: EventResult, At: now, Worker: worker, Task: t}, nil
}

// Retry is what decides the fate of a task that comes back from a worker:
// the queue's settings (maxAttempts, the backoff) and a random draw in
// [0, 1] for the backoff's jitter, which the caller makes (the domain
// draws nothing, so its rules repeat exactly in tests).
type Retry struct {
	Settings Settings
	Jitter   float64
}

// Requeue puts a processing task back to pending: its lease lapsed or its
// worker's socket closed (cause). The event names the worker that lost it.
// On a queue with a backoff the task is pending at once but claimable only
// after it; a task that came back after its last allowed attempt fails
// instead, with error "attempts" (a dead letter).
func (t Task) Requeue(cause string, r Retry, now time.Time) (Task, Event, error) {
	if t.Status != Processing {
		return t, Event{}, ErrNotProcessing
	}
	t, ev := t.comeBack(EventRequeue, cause, 0, nil, r, now)
	return t, ev, nil
}

// Release gives a processing task back at its worker's request (beanstalkd's
// release, Faktory's FAIL): as a re-queue, but it may also wait delay before
// it is claimable (the longer of delay and the backoff) and say why
// (reason, kept in failure).
func (t Task) Release(worker string, delay time.Duration, reason json.RawMessage, r Retry, now time.Time) (Task, Event, error) {
	switch {
	case t.Status != Processing:
		return t, Event{}, ErrNotProcessing
	case t.Lease == nil || t.Lease.Worker != worker:
		return t, Event{}, ErrNotLeaseHolder
	}
	t, ev := t.comeBack(EventReleased, "", delay, reason, r, now)
	return t, ev, nil
}

// comeBack is the end of a claim that did not finish the task: pending
// again (after the backoff or delay), or failed for good once its attempts
// are spent. reason, when given, replaces the task's failure.
func (t Task) comeBack(kind EventKind, cause string, delay time.Duration, reason json.RawMessage, r Retry, now time.Time) (Task, Event) {
	worker := t.leaseHolder()
	if !IsNull(reason) {
		t.Failure = reason
	}
	t.Lease = nil
	t.UpdatedAt = Millis(now)
	if r.Settings.Exhausted(t.Attempts) {
		t.Status = Failed
		t.Error = ptr(AttemptsError)
		t.FinishedAt = ptr(Millis(now))
		return t, Event{Kind: EventFailed, At: now, Worker: worker, Task: t, Cause: cause}
	}
	t.Status = Pending
	if wait := max(delay, r.Settings.Backoff(t.Attempts, r.Jitter)); wait > 0 {
		t.NotBefore = ptr(Millis(now.Add(wait)))
	}
	return t, Event{Kind: kind, At: now, Worker: worker, Task: t, Cause: cause}
}

// Heartbeat extends the lease of the worker holding a processing task, as a
// progress report does but without a record: the task's visible state does
// not change, so there is no event.
func (t Task) Heartbeat(worker string, lease time.Duration, now time.Time) (Task, error) {
	switch {
	case t.Status != Processing:
		return t, ErrNotProcessing
	case t.Lease == nil || t.Lease.Worker != worker:
		return t, ErrNotLeaseHolder
	}
	t.Lease = &Lease{Worker: worker, Until: Millis(now.Add(lease))}
	return t, nil
}

// Fail ends a task for good at a worker's word, with error "failed" and the
// worker's reason in failure. Like a result, it is accepted whenever the
// task is not terminal, whoever holds the lease, and the first of a result
// or a failure wins.
func (t Task) Fail(worker string, reason json.RawMessage, now time.Time) (Task, Event, error) {
	if t.Status.Terminal() {
		return t, Event{}, ErrTerminal
	}
	t = t.end(Failed, now)
	t.Error = ptr(FailedError)
	if !IsNull(reason) {
		t.Failure = reason
	}
	return t, Event{Kind: EventFailed, At: now, Worker: worker, Task: t}, nil
}

// Cancel ends a pending or processing task at a user's word: failed with
// error "cancelled". Its worker, if any, can no longer report on it: every
// later progress, heartbeat, give-back or result is refused.
func (t Task) Cancel(now time.Time) (Task, Event, error) {
	return t.failWith(CancelledError, EventCancelled, now)
}

// Retry puts a failed task back to pending with a fresh attempts budget:
// attempts 0, no error, failure, lease, finish or fetch; the item and the
// priority unchanged. Its history stays in the event log. It is claimable
// at once, with notBefore now: the queue timeout counts from notBefore, so
// a task that timed out, or a dead letter older than queueSeconds, gets a
// whole queueSeconds again rather than timing out at the next sweep; and it
// queues behind the tasks already waiting.
func (t Task) Retry(now time.Time) (Task, Event, error) {
	if t.Status != Failed {
		return t, Event{}, ErrNotFailed
	}
	t.Status = Pending
	t.Attempts = 0
	t.Error, t.Failure, t.Lease = nil, nil, nil
	t.FinishedAt, t.FetchedAt = nil, nil
	t.NotBefore = ptr(Millis(now))
	t.UpdatedAt = Millis(now)
	return t, Event{Kind: EventRetried, At: now, Task: t}, nil
}

// end makes t terminal in status st at now.
func (t Task) end(st Status, now time.Time) Task {
	t.Status = st
	t.Lease = nil
	t.UpdatedAt = Millis(now)
	t.FinishedAt = ptr(Millis(now))
	return t
}

// The errors a task can end with (its error field, a short code; SPEC §11).
// Application errors travel in the result instead.
const (
	TimeoutError   = "timeout"   // older than queueSeconds (the sweep)
	AttemptsError  = "attempts"  // came back after its maxAttempts-th claim: a dead letter
	FailedError    = "failed"    // its worker failed it (Fail); the reason is in failure
	CancelledError = "cancelled" // cancelled by a user (SPEC §12)
	CorruptError   = "corrupt"   // its file could not be read; logged, never stored
)

// Timeout fails a task that outlived its queue: the one failure the server
// itself declares. It is final; a later result is refused.
func (t Task) Timeout(now time.Time) (Task, Event, error) {
	return t.failWith(TimeoutError, EventTimeout, now)
}

// failWith ends a task that is not terminal yet as failed with error code,
// for a reason of the server's or a user's (not its worker's): the event
// names the worker that held it, if one did.
func (t Task) failWith(code string, kind EventKind, now time.Time) (Task, Event, error) {
	if t.Status.Terminal() {
		return t, Event{}, ErrTerminal
	}
	worker := t.leaseHolder()
	t = t.end(Failed, now)
	t.Error = ptr(code)
	return t, Event{Kind: kind, At: now, Worker: worker, Task: t}, nil
}

// leaseHolder is the worker holding t's lease, "" for none.
func (t Task) leaseHolder() string {
	if t.Lease == nil {
		return ""
	}
	return t.Lease.Worker
}

// Fetch records the first read of a terminal task by a producer, which starts
// retention under retainFrom "fetched". It reports false, and changes nothing,
// when the task is not terminal or was read before.
func (t Task) Fetch(now time.Time) (Task, Event, bool) {
	if !t.Status.Terminal() || t.FetchedAt != nil {
		return t, Event{}, false
	}
	t.FetchedAt = ptr(Millis(now))
	return t, Event{Kind: EventFetched, At: now, Task: t}, true
}

// Clean is the event for deleting a task whose retention ran out.
func (t Task) Clean(now time.Time) Event {
	return Event{Kind: EventCleaned, At: now, Task: t}
}

// Due is what the sweep must do to a task now.
type Due int

const (
	DueNothing Due = iota
	DueTimeout     // older than queueSeconds: fail it
	DueRequeue     // lease lapsed: back to pending
	DueClean       // retention ran out: delete it
)

// DueAt tells what the sweep must do to t at now under s. The queue timeout
// is tested before the lease, so a task that outlived the whole queue fails
// rather than being pointlessly re-queued. It counts from the task's
// EligibleAt: a task delayed two days does not time out on the way (and a
// backoff, which moves notBefore too, starts it again: maxAttempts is what
// bounds a task that keeps failing on a queue with a backoff).
func DueAt(t Task, s Settings, now time.Time) Due {
	ms := Millis(now)
	switch {
	case !t.Status.Terminal() && ms-t.EligibleAt() > s.QueueSeconds*1000:
		return DueTimeout
	case t.Status == Processing && (t.Lease == nil || ms > t.Lease.Until):
		return DueRequeue
	case t.Status.Terminal():
		if from := RetentionStart(t, s); from != nil && ms-*from > s.RetainSeconds*1000 {
			return DueClean
		}
	}
	return DueNothing
}

// TooYoungToClean reports whether a task posted at postedAt (milliseconds)
// cannot be due for retention at now, whatever became of it: retention
// starts at its finish or its fetch, neither of which comes before its post,
// so a task posted retainSeconds ago or less is not due yet. Nor is any
// task posted after it: the sweep walks done tasks oldest-posted first and
// stops at the first one this is true of, so it costs what it cleans (and
// the tasks finished late), not the number of tasks retained.
func TooYoungToClean(postedAt int64, s Settings, now time.Time) bool {
	return Millis(now)-postedAt <= s.RetainSeconds*1000
}

// RetentionStart is when t's retention countdown began, or nil if it has not.
func RetentionStart(t Task, s Settings) *int64 {
	if !t.Status.Terminal() {
		return nil
	}
	if s.RetainFrom == RetainFromFetched {
		return t.FetchedAt
	}
	return t.FinishedAt
}
