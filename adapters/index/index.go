package index

import (
	"sync"

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
	// dirs holds each state directory's tasks (dirPending, dirProcessing,
	// dirDone) in claim order, which for pending is the order claims take.
	dirs [3]*btree.BTreeG[*entry]
	// views are the claim queries seen lately, each with the pending tasks
	// it accepts (see views.go).
	views views
	// busy holds the tasks with a change being written, each with a
	// channel closed once the change is stored or refused.
	busy map[uint64]chan struct{}
}

// degree is the B-trees' degree: nodes of up to 63 pointers keep the trees
// shallow and their overhead near 8 bytes a task.
const degree = 32

func newTree() *btree.BTreeG[*entry] { return btree.NewG(degree, before) }

func newQueue(ref domain.QueueRef) *queue {
	q := &queue{ref: ref, byID: make(map[uint64]*entry), views: newViews(), busy: make(map[uint64]chan struct{})}
	for i := range q.dirs {
		q.dirs[i] = newTree()
	}
	return q
}

func (q *queue) pending() *btree.BTreeG[*entry] { return q.dirs[dirPending] }

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
	for {
		done := q.busy[n]
		if done == nil {
			e, ok := q.byID[n]
			return e, ok
		}
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
		q.pending().Delete(e)
		q.views.leave(e)
	}
}

func (q *queue) unhide(e *entry) {
	if e.state == statePending {
		q.pending().ReplaceOrInsert(e)
		q.views.enter(e, q.pending().Len())
	}
}

// put indexes e in place of old (nil for a new task). A task that leaves
// pending leaves every view; one that enters it is shown to them.
func (q *queue) put(old, e *entry) {
	if old != nil {
		q.dirs[old.state.dir()].Delete(old)
		if old.state == statePending {
			q.views.leave(old)
		}
	}
	q.byID[e.id] = e
	q.dirs[e.state.dir()].ReplaceOrInsert(e)
	if e.state == statePending {
		q.views.enter(e, q.pending().Len())
	}
}

// remove forgets e.
func (q *queue) remove(e *entry) {
	delete(q.byID, e.id)
	q.dirs[e.state.dir()].Delete(e)
	if e.state == statePending {
		q.views.leave(e)
	}
}

// firstMatch is the oldest pending task that m accepts (nil m: any).
func (q *queue) firstMatch(m ports.Matcher) (*entry, bool) {
	switch {
	case m == nil:
		return q.pending().Min()
	case m.Key() == "":
		// A matcher without a key cannot say which others agree with it,
		// so nothing it says can be kept: it tests the pending tasks in
		// order until one matches.
		var found *entry
		q.pending().Ascend(func(e *entry) bool {
			if m.Match(e.item) {
				found = e
				return false
			}
			return true
		})
		return found, found != nil
	default:
		return q.views.of(m).first(q.pending())
	}
}

func (q *queue) counts() ports.Counts {
	return ports.Counts{
		Pending:    q.dirs[dirPending].Len(),
		Processing: q.dirs[dirProcessing].Len(),
		Done:       q.dirs[dirDone].Len(),
	}
}

// task is the full record of e, a fresh copy the caller may change.
func (q *queue) task(e *entry) domain.Task { return e.task(q.ref.Host, q.ref.Queue) }
