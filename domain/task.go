// Package domain is Taskhoster's task state machine: the record, the legal
// moves between states, and the lease, timeout and retention rules. It is pure:
// every rule takes the current time as an argument, nothing here reads a clock,
// touches a disc or a network.
package domain

import (
	"encoding/json"
	"time"
)

// Status is where a task is in its life. It is also the directory its file
// sits in on disc (finished and failed share "done"). CheckTransition holds
// every stored change to the moves between them described here.
type Status string

const (
	// Pending: waiting to be claimed. A producer's post (Post, through the
	// HTTP API) puts a task here, and a requeue puts it back: the sweep's
	// when a lease lapsed, the worker socket's when it closed. A worker's
	// claim (Claim) takes it to processing, a worker's result (Finish, a late
	// one after a requeue) to finished, the sweep's queue timeout (Timeout) to
	// failed; retention never sees it.
	Pending Status = "pending"
	// Processing: leased to one worker by its claim (Claim), the only move
	// that counts an attempt. That worker's progress (ReportProgress) keeps it
	// here and extends the lease. A result (Finish) takes it to finished, the
	// sweep's queue timeout (Timeout) to failed, a lapsed lease (the sweep)
	// or a dropped worker socket back to pending (Requeue).
	Processing Status = "processing"
	// Finished: terminal, in done/. The first accepted result (Finish) put it
	// here; nothing changes it any more but a producer's first read, which
	// sets fetchedAt (Fetch). Only retention (the sweep, Clean) takes it out,
	// by deleting it.
	Finished Status = "finished"
	// Failed: terminal, in done/. The sweep's queue timeout (Timeout) put it
	// here; nothing changes it any more but a producer's first read (Fetch).
	// Only retention (the sweep, Clean) takes it out. A file found corrupt at
	// start-up is logged as failed too, but moved aside to corrupt/, never
	// stored in this state.
	Failed Status = "failed"
)

// Valid reports whether s is one of the four statuses.
func (s Status) Valid() bool {
	switch s {
	case Pending, Processing, Finished, Failed:
		return true
	}
	return false
}

// Terminal reports whether no result can change the task any more.
func (s Status) Terminal() bool { return s == Finished || s == Failed }

// Dir is the state directory a task with this status lives in.
func (s Status) Dir() string {
	if s.Terminal() {
		return "done"
	}
	return string(s)
}

// Dirs lists the state directories in the order of the lifecycle. When a task
// is found in two of them after a crash, the later one holds the newer copy.
var Dirs = []string{"pending", "processing", "done"}

// Lease says who holds a processing task and until when (Unix milliseconds).
type Lease struct {
	Worker string `json:"worker"`
	Until  int64  `json:"until"`
}

// Task is the full record of one task, exactly as stored on disc (seed
// "Store", "The item object"). Field order is the order of the seed.
type Task struct {
	ID         string          `json:"id"`
	Host       string          `json:"host"`
	Queue      string          `json:"queue"`
	Status     Status          `json:"status"`
	Item       json.RawMessage `json:"item"`
	PostedBy   *string         `json:"postedBy"`
	PostedAt   int64           `json:"postedAt"`
	UpdatedAt  int64           `json:"updatedAt"`
	Attempts   int             `json:"attempts"`
	Lease      *Lease          `json:"lease"`
	Progress   json.RawMessage `json:"progress"`
	Result     json.RawMessage `json:"result"`
	Error      *string         `json:"error"`
	FinishedAt *int64          `json:"finishedAt"`
	FetchedAt  *int64          `json:"fetchedAt"`

	// The fields of SPEC §11, on disc only when used, so that a task that
	// uses none of them is exactly the seed's record.

	// NotBefore is when the task may first be claimed (Unix ms): a delayed
	// post's time, or a retry's after a backoff or a give-back.
	NotBefore *int64 `json:"notBefore,omitempty"`
	// Priority orders claims: higher first. 0 unless posted with one.
	Priority int `json:"priority,omitempty"`
	// Failure is the reason of the last give-back or failure.
	Failure json.RawMessage `json:"failure,omitempty"`
	// IdempotencyKey is the key the task was posted with (SPEC §12): a
	// later post with the same key to the same queue gets this task back
	// instead of making another, for as long as this one is kept.
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
}

// View is what a producer reads: the record without host, item, postedBy,
// lease and fetchedAt (SPEC §3).
type View struct {
	ID         string          `json:"id"`
	Queue      string          `json:"queue"`
	Status     Status          `json:"status"`
	Attempts   int             `json:"attempts"`
	Progress   json.RawMessage `json:"progress"`
	Result     json.RawMessage `json:"result"`
	Error      *string         `json:"error"`
	PostedAt   int64           `json:"postedAt"`
	UpdatedAt  int64           `json:"updatedAt"`
	FinishedAt *int64          `json:"finishedAt"`
	// Shown only when set (SPEC §11).
	NotBefore *int64          `json:"notBefore,omitempty"`
	Priority  int             `json:"priority,omitempty"`
	Failure   json.RawMessage `json:"failure,omitempty"`
}

// View returns the producer's view of t.
func (t Task) View() View {
	return View{
		ID: t.ID, Queue: t.Queue, Status: t.Status, Attempts: t.Attempts,
		Progress: nullIfEmpty(t.Progress), Result: nullIfEmpty(t.Result), Error: t.Error,
		PostedAt: t.PostedAt, UpdatedAt: t.UpdatedAt, FinishedAt: t.FinishedAt,
		NotBefore: t.NotBefore, Priority: t.Priority, Failure: t.Failure,
	}
}

// EligibleAt is when t became, or becomes, claimable (Unix ms): its
// notBefore when it has one, else its post. Claims take tasks of one
// priority in this order, and the queue timeout counts from it.
func (t Task) EligibleAt() int64 {
	if t.NotBefore != nil {
		return *t.NotBefore
	}
	return t.PostedAt
}

// Claimable reports whether a claim at now may take t: it is pending and
// its notBefore, if any, has come. (A task without one is claimable even
// at a now before its post, so a clock that steps back holds nothing up.)
func (t Task) Claimable(now time.Time) bool {
	return t.Status == Pending && (t.NotBefore == nil || *t.NotBefore <= Millis(now))
}

// Clone returns a copy of t that shares no pointers with it, so that a
// repository can hand out records without callers mutating its index.
func (t Task) Clone() Task {
	c := t
	if t.PostedBy != nil {
		v := *t.PostedBy
		c.PostedBy = &v
	}
	if t.Lease != nil {
		v := *t.Lease
		c.Lease = &v
	}
	if t.Error != nil {
		v := *t.Error
		c.Error = &v
	}
	if t.FinishedAt != nil {
		v := *t.FinishedAt
		c.FinishedAt = &v
	}
	if t.FetchedAt != nil {
		v := *t.FetchedAt
		c.FetchedAt = &v
	}
	if t.NotBefore != nil {
		v := *t.NotBefore
		c.NotBefore = &v
	}
	// Item, Progress, Result and Failure are never mutated in place, only replaced,
	// so sharing their backing arrays is safe.
	return c
}

// ValidID reports whether id has the form of a task id: 16 lower-case hex
// characters (^[0-9a-f]{16}$). Anything else can never name a task (or a
// file).
func ValidID(id string) bool {
	if len(id) != 16 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Millis converts a time to the record's millisecond timestamps.
func Millis(t time.Time) int64 { return t.UnixMilli() }

func nullIfEmpty(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

func ptr[T any](v T) *T { return &v }
