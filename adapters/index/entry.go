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
// their items (issue 6: at most 300 bytes a task beyond the item).
//
//   - Host and queue are the queue's own, so an entry does not repeat them.
//   - The id, 16 hex digits, is 8 bytes as a big-endian number: ids compare
//     in the same order either way.
//   - postedBy and the lease's worker are interned (unique.Make): a queue
//     has few users and workers, and a name nobody holds any more is freed.
//   - Pointers of the record (postedBy, lease, finishedAt, fetchedAt) become
//     a flag bit and a plain value; progress, result and error, which a
//     pending task never has, live in a separate, optional outcome.
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
	attempts   int
	postedBy   unique.Handle[string]
	worker     unique.Handle[string]
	more       *outcome
	id         uint64
	state      state
	flags      flags
}

// outcome holds what a worker or the sweep wrote back.
type outcome struct {
	progress json.RawMessage
	result   json.RawMessage
	error    string // valid when the entry has hasError
}

type flags uint8

const (
	hasPostedBy flags = 1 << iota
	hasLease
	hasError
	hasFinishedAt
	hasFetchedAt
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
		attempts:  t.Attempts,
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
	if len(t.Progress) > 0 || len(t.Result) > 0 || t.Error != nil {
		e.more = &outcome{progress: t.Progress, result: t.Result}
		if t.Error != nil {
			e.flags |= hasError
			e.more.error = *t.Error
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
		Attempts:  e.attempts,
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
	if e.more != nil {
		t.Progress = e.more.progress
		t.Result = e.more.result
		if e.flags&hasError != 0 {
			t.Error = ptr(e.more.error)
		}
	}
	return t
}

func ptr[T any](v T) *T { return &v }

// before is claim order: by postedAt, then id. A task keeps its postedAt and
// id for life, so its place in every tree is fixed.
func before(a, b *entry) bool {
	if a.postedAt != b.postedAt {
		return a.postedAt < b.postedAt
	}
	return a.id < b.id
}
