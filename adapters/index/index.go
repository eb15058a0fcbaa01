package index

import (
	"sync"
	"time"

	"github.com/google/btree"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// queue is one queue's index. Its mutex serialises every change to the
// queue, which is what makes a claim or a result one atomic step: the index,
// not the filesystem, decides who wins, and a Persister's files follow it.
type queue struct {
	mu   sync.Mutex
	ref  domain.QueueRef
	byID map[uint64]*entry
	// pending holds the pending tasks: by priority and EligibleAt those
	// claimable, apart those delayed (pending.go). dirs holds the other
	// state directories' tasks (dirProcessing, dirDone) by (postedAt, id);
	// dirs[dirPending] is unused.
	pending pendingSet
	dirs    [3]*btree.BTreeG[*entry]
	// views are the claim queries seen lately, each with the pending tasks
	// it accepts (see views.go).
	views views
	// busy holds the tasks with a change being written, each with a
	// channel closed once the change is stored or refused.
	busy map[uint64]chan struct{}
	// keys holds the idempotency keys of the queue's tasks, each with the
	// id of the task holding it: every indexed task with a key, and every
	// task with a key whose Create is being written (so that a key is
	// taken from the moment a Create decides to store it).
	keys map[string]uint64
	// failed counts the done tasks that failed (dirs[dirDone] holds both).
	failed int
}

// degree is the B-trees' degree: nodes of up to 63 pointers keep the trees
// shallow and their overhead near 8 bytes a task.
const degree = 32

func newTree() *btree.BTreeG[*entry] { return btree.NewG(degree, before) }

func newQueue(ref domain.QueueRef) *queue {
	q := &queue{ref: ref, byID: make(map[uint64]*entry), views: newViews(), busy: make(map[uint64]chan struct{}), keys: make(map[string]uint64), pending: newPendingSet()}
	for _, d := range []int{dirProcessing, dirDone} {
		q.dirs[d] = newTree()
	}
	return q
}

// get is the entry of the task named id, if the queue holds it.
func (q *queue) get(id string) (*entry, bool) {
	n, ok := parseID(id)
	if !ok {
		return nil, false
	}
	e, ok := q.byID[n]
	return e, ok
}

// idle is the entry of the task named id once no change of it is being
// written: the next change must be decided on the stored record. It may
// let go of q.mu while it waits.
func (q *queue) idle(id string) (*entry, bool) {
	n, ok := parseID(id)
	if !ok {
		return nil, false
	}
	q.settle(n)
	e, ok := q.byID[n]
	return e, ok
}

// settle waits until no change of task n is being written. It may let go
// of q.mu while it waits.
func (q *queue) settle(n uint64) {
	for done := q.busy[n]; done != nil; done = q.busy[n] {
		q.mu.Unlock()
		<-done
		q.mu.Lock()
	}
}

// reserve marks task id busy; release, with what reserve returned, ends it.
func (q *queue) reserve(id uint64) chan struct{} {
	done := make(chan struct{})
	q.busy[id] = done
	return done
}

func (q *queue) release(id uint64, done chan struct{}) {
	delete(q.busy, id)
	close(done)
}

// unlocked runs write without q.mu, which is held before and after.
func (q *queue) unlocked(write func() error) error {
	q.mu.Unlock()
	defer q.mu.Lock()
	return write()
}

// hide takes a pending task out of the claims' reach while it changes;
// unhide puts it back when the change fails. Tasks in other states are
// left alone.
func (q *queue) hide(e *entry) {
	if e.state == statePending {
		q.leavePending(e)
	}
}

func (q *queue) unhide(e *entry) {
	if e.state == statePending {
		q.enterPending(e)
	}
}

// enterPending adds e to the pending set; a claimable task is shown to the
// views, a delayed one waits for its time (promote).
func (q *queue) enterPending(e *entry) {
	if q.pending.add(e) {
		q.views.enter(e, q.pending.len())
	}
}

// leavePending takes e out of the pending set and every view.
func (q *queue) leavePending(e *entry) {
	if q.pending.drop(e) {
		q.views.leave(e)
	}
}

// look notes a claim's or Due's now: the delayed tasks whose time has come
// become claimable, and the views meet them as they meet a re-queue.
func (q *queue) look(now time.Time) {
	q.pending.promote(domain.Millis(now), func(e *entry) { q.views.enter(e, q.pending.len()) })
}

// rewind takes the clock back to ms, set back since the latest look (see
// ports.ClockStepBack): the claimable tasks whose notBefore is after ms
// leave the views and wait among the delayed again, so that Due names
// their time and counts them when it comes.
func (q *queue) rewind(ms int64) {
	ahead := q.pending.ahead(ms)
	for _, e := range ahead {
		q.leavePending(e)
	}
	q.pending.seen = ms
	for _, e := range ahead {
		q.enterPending(e)
	}
}

// put indexes e in place of old (nil for a new task). A task that leaves
// pending leaves every view; one that enters it is shown to them.
func (q *queue) put(old, e *entry) {
	if old != nil {
		q.unindex(old)
	}
	q.byID[e.id] = e
	if e.state == statePending {
		q.enterPending(e)
	} else {
		q.dirs[e.state.dir()].ReplaceOrInsert(e)
		if e.state == stateFailed {
			q.failed++
		}
	}
}

// unindex takes e out of its state's tree (and, if pending, the views).
// A pending task being written is already out (hide): then it does
// nothing.
func (q *queue) unindex(e *entry) {
	if e.state == statePending {
		q.leavePending(e)
	} else if _, had := q.dirs[e.state.dir()].Delete(e); had && e.state == stateFailed {
		q.failed--
	}
}

// remove forgets e, and frees its idempotency key.
func (q *queue) remove(e *entry) {
	delete(q.byID, e.id)
	q.unindex(e)
	q.freeKey(e.key(), e.id)
}

// freeKey frees key k if task id holds it.
func (q *queue) freeKey(k string, id uint64) {
	if holder, ok := q.keys[k]; ok && holder == id && k != "" {
		delete(q.keys, k)
	}
}

// Budgets of one hold of the queue's lock by a claim's scan for a new query:
// it tests at most scanBudget tasks, and none after scanSlice,
// then lets go of the lock, so that posts and claims on the queue wait for
// at most about that long however deep the backlog it must test.
const (
	scanBudget = 256
	scanSlice  = time.Millisecond
)

// firstMatch is the first pending task in claim order, claimable at ms,
// that m accepts (nil m: any). scanMore means that it ran out of budget:
// ask again, after letting go of the lock.
func (q *queue) firstMatch(m ports.Matcher, ms int64) (*entry, scan) {
	var found *entry
	switch {
	case m == nil:
		q.pending.ascend(rank{}, false, func(e *entry) bool {
			if e.claimable(ms) {
				found = e
				return false
			}
			return true
		})
	case m.Key() == "":
		// A matcher without a key cannot say which others agree with it,
		// so nothing it says can be kept: it tests the pending tasks in
		// order until one matches.
		q.pending.ascend(rank{}, false, func(e *entry) bool {
			if e.claimable(ms) && m.Match(e.item) {
				found = e
				return false
			}
			return true
		})
	default:
		return q.views.of(m).first(&q.pending, ms, scanBudget, time.Now().Add(scanSlice))
	}
	if found == nil {
		return nil, scanNone
	}
	return found, scanFound
}

func (q *queue) counts() ports.Counts {
	return ports.Counts{
		Pending:    q.pending.len(),
		Processing: q.dirs[dirProcessing].Len(),
		Done:       q.dirs[dirDone].Len(),
		Delayed:    q.pending.delayed.Len(),
		Failed:     q.failed,
		Oldest:     q.pending.oldest(),
	}
}

// task is the full record of e, a fresh copy the caller may change.
func (q *queue) task(e *entry) domain.Task { return e.task(q.ref.Host, q.ref.Queue) }
