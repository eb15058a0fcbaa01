package index

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"unique"

	"github.com/taskhoster/taskhoster/domain"
)

// entry is the index's form of one task record: every field of domain.Task,
// packed so that a queue of a million pending tasks costs little more than
// their items (the target: at most 300 bytes a task beyond the item).
//
//   - Host and queue are the queue's own, so an entry does not repeat them.
//   - The id, 16 hex digits, is 8 bytes as a big-endian number: ids compare
//     in the same order either way.
//   - postedBy and the lease's worker are interned (unique.Make): a queue
//     has few users and workers, and a name nobody holds any more is freed.
//   - Pointers of the record (postedBy, lease, finishedAt, fetchedAt,
//     notBefore) become a flag bit and a plain value; progress, result,
//     error and failure, which a pending task never has (but for a
//     given-back one's failure), live in a separate, optional outcome.
//   - attempts and priority are small numbers (int32, int16) packed with
//     the state and flags into one word; a record whose values do not fit
//     keeps them whole in its outcome's rare part (hasWide). So a record
//     that uses none of SPEC §11 costs what it did before: 112 bytes.
//
// An entry is never changed once indexed: an update indexes a new one. So a
// record handed out is built from a value no later change can touch, and
// the trees and views holding an entry never see its order or item change.
type entry struct {
	item       json.RawMessage
	postedAt   int64
	updatedAt  int64
	leaseUntil int64
	finishedAt int64
	fetchedAt  int64
	notBefore  int64 // valid when the entry has hasNotBefore
	postedBy   unique.Handle[string]
	worker     unique.Handle[string]
	more       *outcome
	id         uint64
	attempts   int32
	priority   int16
	state      state
	flags      flags
}

// outcome holds what a worker or the sweep wrote back.
type outcome struct {
	progress json.RawMessage
	result   json.RawMessage
	error    unique.Handle[string] // valid when the entry has hasError
	rare     *rare
}

// rare holds what few records have: a failure reason, and attempts or a
// priority too large for the entry's packed fields.
type rare struct {
	failure  json.RawMessage
	attempts int // valid when the entry has hasWide
	priority int // likewise
}

type flags uint8

const (
	hasPostedBy flags = 1 << iota
	hasLease
	hasError
	hasFinishedAt
	hasFetchedAt
	hasNotBefore
	hasWide
)

// state is a task's status, as a small number that also indexes the state
// directory trees.
type state uint8

const (
	statePending state = iota
	stateProcessing
	stateFinished
	stateFailed
)

var statuses = [...]domain.Status{domain.Pending, domain.Processing, domain.Finished, domain.Failed}

func stateOf(s domain.Status) (state, bool) {
	for i, st := range statuses {
		if st == s {
			return state(i), true
		}
	}
	return 0, false
}

func (s state) status() domain.Status { return statuses[s] }

// dir is the state directory tree an entry sits in (finished and failed
// share "done").
func (s state) dir() int { return min(int(s), dirDone) }

// Indexes of a queue's state directory trees, in the order of domain.Dirs.
const (
	dirPending = iota
	dirProcessing
	dirDone
)

// parseID turns a task id into its number. Only a valid id (16 lower-case
// hex digits, domain.ValidID) has one; any other string names no task. It
// reads the digits itself rather than ask ValidID's regexp first: every
// lookup and every file loaded at start-up parses an id.
func parseID(id string) (uint64, bool) {
	if len(id) != 16 {
		return 0, false
	}
	var n uint64
	for i := range len(id) {
		c := id[i]
		switch {
		case '0' <= c && c <= '9':
			n = n<<4 | uint64(c-'0')
		case 'a' <= c && c <= 'f':
			n = n<<4 | uint64(c-'a'+10)
		default:
			return 0, false
		}
	}
	return n, true
}

func formatID(n uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	return hex.EncodeToString(b[:])
}

// newEntry packs t, which must be a record that reads back from its stored
// form (a valid id and status), as checkNew and DecodeTask make sure.
func newEntry(t domain.Task) (*entry, error) {
	id, ok := parseID(t.ID)
	if !ok {
		return nil, fmt.Errorf("index task: bad id %q", t.ID)
	}
	st, ok := stateOf(t.Status)
	if !ok {
		return nil, fmt.Errorf("index task %s: bad status %q", t.ID, t.Status)
	}
	e := &entry{
		item:      t.Item,
		postedAt:  t.PostedAt,
		updatedAt: t.UpdatedAt,
		attempts:  int32(t.Attempts),
		priority:  int16(t.Priority),
		id:        id,
		state:     st,
	}
	if t.PostedBy != nil {
		e.flags |= hasPostedBy
		e.postedBy = unique.Make(*t.PostedBy)
	}
	if t.Lease != nil {
		e.flags |= hasLease
		e.worker = unique.Make(t.Lease.Worker)
		e.leaseUntil = t.Lease.Until
	}
	if t.FinishedAt != nil {
		e.flags |= hasFinishedAt
		e.finishedAt = *t.FinishedAt
	}
	if t.FetchedAt != nil {
		e.flags |= hasFetchedAt
		e.fetchedAt = *t.FetchedAt
	}
	if t.NotBefore != nil {
		e.flags |= hasNotBefore
		e.notBefore = *t.NotBefore
	}
	wide := int(e.attempts) != t.Attempts || int(e.priority) != t.Priority
	if len(t.Progress) > 0 || len(t.Result) > 0 || t.Error != nil || len(t.Failure) > 0 || wide {
		e.more = &outcome{progress: t.Progress, result: t.Result}
		if t.Error != nil {
			e.flags |= hasError
			e.more.error = unique.Make(*t.Error)
		}
		if len(t.Failure) > 0 || wide {
			e.more.rare = &rare{failure: t.Failure}
		}
		if wide {
			e.flags |= hasWide
			e.more.rare.attempts, e.more.rare.priority = t.Attempts, t.Priority
		}
	}
	return e, nil
}

// task rebuilds the full record of e in queue (host, name). The record owns
// its pointers; it shares item, progress and result, which nobody changes
// in place (see domain.Task.Clone).
func (e *entry) task(host, queue string) domain.Task {
	t := domain.Task{
		ID:        formatID(e.id),
		Host:      host,
		Queue:     queue,
		Status:    e.state.status(),
		Item:      e.item,
		PostedAt:  e.postedAt,
		UpdatedAt: e.updatedAt,
		Attempts:  int(e.attempts),
		Priority:  int(e.priority),
	}
	if e.flags&hasPostedBy != 0 {
		t.PostedBy = ptr(e.postedBy.Value())
	}
	if e.flags&hasLease != 0 {
		t.Lease = &domain.Lease{Worker: e.worker.Value(), Until: e.leaseUntil}
	}
	if e.flags&hasFinishedAt != 0 {
		t.FinishedAt = ptr(e.finishedAt)
	}
	if e.flags&hasFetchedAt != 0 {
		t.FetchedAt = ptr(e.fetchedAt)
	}
	if e.flags&hasNotBefore != 0 {
		t.NotBefore = ptr(e.notBefore)
	}
	if e.more != nil {
		t.Progress = e.more.progress
		t.Result = e.more.result
		if e.flags&hasError != 0 {
			t.Error = ptr(e.more.error.Value())
		}
		if r := e.more.rare; r != nil {
			t.Failure = r.failure
			if e.flags&hasWide != 0 {
				t.Attempts, t.Priority = r.attempts, r.priority
			}
		}
	}
	return t
}

func ptr[T any](v T) *T { return &v }

// prio is e's priority.
func (e *entry) prio() int {
	if e.flags&hasWide != 0 {
		return e.more.rare.priority
	}
	return int(e.priority)
}

// eligibleAt is when e is claimable (domain.Task.EligibleAt).
func (e *entry) eligibleAt() int64 {
	if e.flags&hasNotBefore != 0 {
		return e.notBefore
	}
	return e.postedAt
}

// claimable reports whether a claim at ms may take pending e.
func (e *entry) claimable(ms int64) bool {
	return e.flags&hasNotBefore == 0 || e.notBefore <= ms
}

// before orders the processing and done trees: by postedAt, then id. A
// task keeps its postedAt and id for life.
func before(a, b *entry) bool {
	if a.postedAt != b.postedAt {
		return a.postedAt < b.postedAt
	}
	return a.id < b.id
}

// eligibleBefore orders pending tasks of one priority, and all of them for
// Each: by EligibleAt, then id. An entry's notBefore is fixed too (a new
// one is a new entry), so its place is.
func eligibleBefore(a, b *entry) bool {
	if x, y := a.eligibleAt(), b.eligibleAt(); x != y {
		return x < y
	}
	return a.id < b.id
}

// rank is a pending task's place in claim order (SPEC §11): the highest
// priority first, then the earliest EligibleAt, then the id.
type rank struct {
	prio int
	at   int64
	id   uint64
}

func rankOf(e *entry) rank { return rank{prio: e.prio(), at: e.eligibleAt(), id: e.id} }

// less reports whether r comes before o in claim order.
func (r rank) less(o rank) bool {
	if r.prio != o.prio {
		return r.prio > o.prio
	}
	if r.at != o.at {
		return r.at < o.at
	}
	return r.id < o.id
}

// pivot is an entry that sorts as r does within its priority's tree.
func (r rank) pivot() *entry { return &entry{postedAt: r.at, id: r.id} }

// claimBefore is claim order over entries (the views' matches).
func claimBefore(a, b *entry) bool { return rankOf(a).less(rankOf(b)) }
