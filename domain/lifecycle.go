package domain

import (
	"encoding/json"
	"time"
)

// EventKind names a transition in the durable event log (SPEC §8).
type EventKind string

const (
	EventPosted   EventKind = "posted"
	EventClaimed  EventKind = "claimed"
	EventProgress EventKind = "progress"
	EventResult   EventKind = "result"
	EventFailed   EventKind = "failed" // a task file found corrupt
	EventTimeout  EventKind = "timeout"
	EventRequeue  EventKind = "requeue"
	EventFetched  EventKind = "fetched"
	EventCleaned  EventKind = "cleaned"
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

// Post makes a new pending task.
func Post(id, host, queue string, item json.RawMessage, postedBy string, now time.Time) (Task, Event) {
	ms := Millis(now)
	t := Task{
		ID: id, Host: host, Queue: queue, Status: Pending, Item: item,
		PostedAt: ms, UpdatedAt: ms,
	}
	if postedBy != "" {
		t.PostedBy = ptr(postedBy)
	}
	return t, Event{Kind: EventPosted, At: now, Task: t}
}

// Claim leases a pending task to worker for lease, counting one more attempt.
func (t Task) Claim(worker string, lease time.Duration, now time.Time) (Task, Event, error) {
	if t.Status != Pending {
		return t, Event{}, ErrNotPending
	}
	t.Status = Processing
	t.Attempts++
	t.Lease = &Lease{Worker: worker, Until: Millis(now.Add(lease))}
	t.UpdatedAt = Millis(now)
	return t, Event{Kind: EventClaimed, At: now, Worker: worker, Task: t}, nil
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
	t.Status = Finished
	t.Result = result
	t.Lease = nil
	t.UpdatedAt = Millis(now)
	t.FinishedAt = ptr(Millis(now))
	return t, Event{Kind: EventResult, At: now, Worker: worker, Task: t}, nil
}

// Requeue puts a processing task back to pending: its lease lapsed or its
// worker's socket closed (cause). The event names the worker that lost it.
func (t Task) Requeue(cause string, now time.Time) (Task, Event, error) {
	if t.Status != Processing {
		return t, Event{}, ErrNotProcessing
	}
	worker := ""
	if t.Lease != nil {
		worker = t.Lease.Worker
	}
	t.Status = Pending
	t.Lease = nil
	t.UpdatedAt = Millis(now)
	return t, Event{Kind: EventRequeue, At: now, Worker: worker, Task: t, Cause: cause}, nil
}

// TimeoutError is the error a queue timeout leaves on a task.
const TimeoutError = "timeout"

// CorruptError is the error logged for a task file that cannot be read.
const CorruptError = "corrupt"

// Timeout fails a task that outlived its queue: the one failure the server
// itself declares. It is final; a later result is refused.
func (t Task) Timeout(now time.Time) (Task, Event, error) {
	if t.Status.Terminal() {
		return t, Event{}, ErrTerminal
	}
	worker := ""
	if t.Lease != nil {
		worker = t.Lease.Worker
	}
	t.Status = Failed
	t.Error = ptr(TimeoutError)
	t.Lease = nil
	t.UpdatedAt = Millis(now)
	t.FinishedAt = ptr(Millis(now))
	return t, Event{Kind: EventTimeout, At: now, Worker: worker, Task: t}, nil
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
// rather than being pointlessly re-queued.
func DueAt(t Task, s Settings, now time.Time) Due {
	ms := Millis(now)
	switch {
	case !t.Status.Terminal() && ms-t.PostedAt > s.QueueSeconds*1000:
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
