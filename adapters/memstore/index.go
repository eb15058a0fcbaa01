package memstore

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
	mu    sync.Mutex
	tasks map[string]domain.Task
	// dirs holds each state directory's tasks ordered by (postedAt, id),
	// which for pending is claim order.
	dirs map[string]*btree.BTreeG[order]
	// verdicts remembers what each matcher (by Key) said about each task's
	// item. An item never changes, so a waiting claim that rescans the
	// queue on every post only runs its query over the new tasks.
	verdicts map[string]map[string]bool
}

// maxMatcherKeys bounds the verdict cache: past this many distinct queries
// it starts over rather than grow with every query a client invents.
const maxMatcherKeys = 64

// order is a task's place in its state directory's tree.
type order struct {
	postedAt int64
	id       string
}

func orderOf(t domain.Task) order { return order{postedAt: t.PostedAt, id: t.ID} }

func lessOrder(a, b order) bool {
	if a.postedAt != b.postedAt {
		return a.postedAt < b.postedAt
	}
	return a.id < b.id
}

func newQueue() *queue {
	q := &queue{
		tasks:    make(map[string]domain.Task),
		dirs:     make(map[string]*btree.BTreeG[order], len(domain.Dirs)),
		verdicts: make(map[string]map[string]bool),
	}
	for _, d := range domain.Dirs {
		q.dirs[d] = btree.NewG(32, lessOrder)
	}
	return q
}

// put records t in the index, replacing old (if it existed) wherever it was.
func (q *queue) put(old *domain.Task, t domain.Task) {
	if old != nil {
		q.dirs[old.Status.Dir()].Delete(orderOf(*old))
	}
	q.tasks[t.ID] = t
	q.dirs[t.Status.Dir()].ReplaceOrInsert(orderOf(t))
}

// remove forgets t, and what every query said about it: the id may come
// back with another item.
func (q *queue) remove(t domain.Task) {
	delete(q.tasks, t.ID)
	q.dirs[t.Status.Dir()].Delete(orderOf(t))
	for _, byID := range q.verdicts {
		delete(byID, t.ID)
	}
}

// firstMatch is the oldest pending task that m accepts (nil m: any).
func (q *queue) firstMatch(m ports.Matcher) (domain.Task, bool) {
	var (
		found domain.Task
		ok    bool
	)
	match := q.matcher(m)
	q.dirs[domain.Pending.Dir()].Ascend(func(o order) bool {
		t := q.tasks[o.id]
		if match(t) {
			found, ok = t, true
			return false
		}
		return true
	})
	return found, ok
}

// matcher wraps m with the verdict cache. A matcher without a key cannot
// say which others agree with it, so its verdicts are not kept.
func (q *queue) matcher(m ports.Matcher) func(domain.Task) bool {
	if m == nil {
		return func(domain.Task) bool { return true }
	}
	key := m.Key()
	if key == "" {
		return func(t domain.Task) bool { return m.Match(t.Item) }
	}
	byID := q.verdicts[key]
	if byID == nil {
		if len(q.verdicts) >= maxMatcherKeys {
			clear(q.verdicts)
		}
		byID = make(map[string]bool)
		q.verdicts[key] = byID
	}
	return func(t domain.Task) bool {
		v, seen := byID[t.ID]
		if !seen {
			v = m.Match(t.Item)
			byID[t.ID] = v
		}
		return v
	}
}

func (q *queue) counts() ports.Counts {
	return ports.Counts{
		Pending:    q.dirs["pending"].Len(),
		Processing: q.dirs["processing"].Len(),
		Done:       q.dirs["done"].Len(),
	}
}
