package domain

import (
	"bytes"
	"fmt"
	"strings"
)

// CheckTransition reports whether next may be stored in place of cur: whether
// one move of the state machine leads from cur to next. It is the one place
// that knows every legal stored change, whoever made it; the repository calls
// it on what an update left before anything is stored. The moves are
//
//   - claim, pending → processing: a lease, and attempts up by exactly one;
//   - progress or heartbeat, processing → processing: a new progress record
//     or lease, held by the same worker, in the same attempt;
//   - requeue or give-back, processing → pending: the lease dropped, maybe a
//     notBefore (backoff, delay) and a failure (the give-back's reason);
//   - result, pending or processing → finished: a result and finishedAt, no lease;
//   - failure, pending or processing → failed: an error and finishedAt, no
//     lease, maybe a failure (timeout, dead letter, failed by its worker);
//   - fetch, finished → finished or failed → failed: fetchedAt, set once;
//   - retry, failed → pending: attempts back to 0, and no error, failure,
//     lease, finishedAt, fetchedAt or notBefore;
//   - and no change at all, in any state.
//
// No move changes a task's identity (id, host, queue, item, postedBy,
// postedAt, priority, idempotency key), and only a claim (up by one) and a
// retry (back to 0) change attempts. Removal (retention) is not a
// change of the record and does not come here; nor does loading records from
// disc, which is not a move. An illegal move is a bug of the caller's, not a
// state a client raced into (those the transitions refuse first, with
// ErrTerminal and the like), so the error is KindInternal, code
// "illegal_transition".
func CheckTransition(cur, next Task) error {
	changed := changes(cur, next)
	if changed == 0 {
		return nil
	}
	if c := changed & identity; c != 0 {
		return illegal(cur, "a move changes its %s", c)
	}
	m, ok := moveBetween(cur.Status, next.Status)
	if !ok {
		return illegal(cur, "no move leads from %q to %q", cur.Status, next.Status)
	}
	if c := changed &^ m.may; c != 0 {
		return illegal(cur, "a %s may not change its %s", m.name, c)
	}
	if m.check != nil {
		if why := m.check(cur, next); why != "" {
			return illegal(cur, "a %s %s", m.name, why)
		}
	}
	return nil
}

func illegal(cur Task, format string, args ...any) error {
	return E(KindInternal, CodeIllegalTransition, "task %s, %s: "+format, append([]any{cur.ID, cur.Status}, args...)...)
}

// move is one kind of stored change: the fields it may change and what
// must hold of the task after it ("" when all is well).
type move struct {
	name  string
	may   fields
	check func(cur, next Task) string
}

var (
	stay = move{name: "pending task"} // may change nothing
	// Claim keeps a re-queued task's last progress and leases it afresh.
	claim = move{name: "claim", may: fStatus | fAttempts | fLease | fUpdatedAt,
		check: func(cur, next Task) string {
			switch {
			case next.Attempts != cur.Attempts+1:
				return fmt.Sprintf("makes attempts %d, want %d", next.Attempts, cur.Attempts+1)
			case next.Lease == nil:
				return "leaves no lease"
			}
			return ""
		}}
	progress = move{name: "progress report", may: fProgress | fLease | fUpdatedAt,
		check: func(cur, next Task) string {
			if cur.Lease == nil || next.Lease == nil || next.Lease.Worker != cur.Lease.Worker {
				return "changes who holds the lease"
			}
			return ""
		}}
	requeue = move{name: "requeue", may: fStatus | fLease | fUpdatedAt | fNotBefore | fFailure,
		check: func(_, next Task) string { return noLease(next) }}
	result = move{name: "result", may: fStatus | fResult | fLease | fUpdatedAt | fFinishedAt,
		check: func(_, next Task) string { return ended(next) }}
	failure = move{name: "failure", may: fStatus | fError | fLease | fUpdatedAt | fFinishedAt | fFailure,
		check: func(_, next Task) string {
			if next.Error == nil {
				return "leaves no error"
			}
			return ended(next)
		}}
	retry = move{name: "retry", may: fStatus | fAttempts | fError | fFailure | fLease | fFinishedAt | fFetchedAt | fNotBefore | fUpdatedAt,
		check: func(_, next Task) string {
			switch {
			case next.Attempts != 0:
				return "leaves attempts, want 0"
			case next.Error != nil || next.Failure != nil || next.Lease != nil || next.FinishedAt != nil || next.FetchedAt != nil:
				return "leaves what the failure was"
			case next.NotBefore == nil || *next.NotBefore != next.UpdatedAt:
				return "does not start the queue timeout again (notBefore, the retry's time)"
			}
			return ""
		}}
	fetch = move{name: "terminal task", may: fFetchedAt, // but for its fetch
		check: func(cur, next Task) string {
			if cur.FetchedAt != nil || next.FetchedAt == nil {
				return "changes fetchedAt, which is set once"
			}
			return ""
		}}
)

// moveBetween is the one move from status from to status to, if any.
func moveBetween(from, to Status) (move, bool) {
	if !from.Valid() || !to.Valid() {
		return move{}, false
	}
	switch {
	case from == Failed && to == Pending:
		return retry, true
	case from.Terminal():
		return fetch, to == from // a terminal task stays as it is
	case to == Finished:
		return result, true
	case to == Failed:
		return failure, true
	case from == Pending && to == Processing:
		return claim, true
	case from == Processing && to == Processing:
		return progress, true
	case from == Processing && to == Pending:
		return requeue, true
	}
	return stay, true
}

func noLease(next Task) string {
	if next.Lease != nil {
		return "keeps a lease"
	}
	return ""
}

// ended is what a move to a terminal state must leave.
func ended(next Task) string {
	if next.FinishedAt == nil {
		return "leaves no finishedAt"
	}
	return noLease(next)
}

// fields is a set of Task's fields, for what a move changed and may change.
type fields uint32

const (
	fID fields = 1 << iota
	fHost
	fQueue
	fStatus
	fItem
	fPostedBy
	fPostedAt
	fUpdatedAt
	fAttempts
	fLease
	fProgress
	fResult
	fError
	fFinishedAt
	fFetchedAt
	fNotBefore
	fPriority
	fFailure
	fKey
)

// identity is what no move changes.
const identity = fID | fHost | fQueue | fItem | fPostedBy | fPostedAt | fPriority | fKey

// fieldNames are the record's names of the fields, in the order of the bits.
var fieldNames = [...]string{"id", "host", "queue", "status", "item", "postedBy", "postedAt",
	"updatedAt", "attempts", "lease", "progress", "result", "error", "finishedAt", "fetchedAt",
	"notBefore", "priority", "failure", "idempotencyKey"}

func (f fields) String() string {
	var names []string
	for i, name := range fieldNames {
		if f&(1<<i) != 0 {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}

// changes is the set of fields in which a and b differ. Payloads compare by
// their bytes, pointers by what they point to.
func changes(a, b Task) fields {
	var f fields
	set := func(differ bool, bit fields) {
		if differ {
			f |= bit
		}
	}
	set(a.ID != b.ID, fID)
	set(a.Host != b.Host, fHost)
	set(a.Queue != b.Queue, fQueue)
	set(a.Status != b.Status, fStatus)
	set(!bytes.Equal(a.Item, b.Item), fItem)
	set(!samePtr(a.PostedBy, b.PostedBy), fPostedBy)
	set(a.PostedAt != b.PostedAt, fPostedAt)
	set(a.UpdatedAt != b.UpdatedAt, fUpdatedAt)
	set(a.Attempts != b.Attempts, fAttempts)
	set(!samePtr(a.Lease, b.Lease), fLease)
	set(!bytes.Equal(a.Progress, b.Progress), fProgress)
	set(!bytes.Equal(a.Result, b.Result), fResult)
	set(!samePtr(a.Error, b.Error), fError)
	set(!samePtr(a.FinishedAt, b.FinishedAt), fFinishedAt)
	set(!samePtr(a.FetchedAt, b.FetchedAt), fFetchedAt)
	set(!samePtr(a.NotBefore, b.NotBefore), fNotBefore)
	set(a.Priority != b.Priority, fPriority)
	set(!bytes.Equal(a.Failure, b.Failure), fFailure)
	set(a.IdempotencyKey != b.IdempotencyKey, fKey)
	return f
}

func samePtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
