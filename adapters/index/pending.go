package index

import (
	"iter"
	"slices"
	"time"

	"github.com/google/btree"
)

// pendingSet is a queue's pending tasks, each in exactly one tree, so that a
// task that uses no priority and no delay costs one tree slot, as before
// SPEC §11:
//
//   - levels: the claimable tasks, one tree per priority (highest first),
//     each by (EligibleAt, id). Claim order is the levels in turn, so the
//     first claimable task is the first of the first level: O(log n)
//     however many tasks wait at lower priorities or behind a delay.
//   - delayed: the tasks with a notBefore after the latest now a claim or
//     Due has looked at (seen), by (notBefore, id). A look moves the ones
//     whose time has come into their level (promote), where the views meet
//     them as they meet a re-queued task.
//
// Each walks the union by (EligibleAt, id), merging the trees.
//
// A claim's now may be a little behind seen (two claims read the clock in
// one order and take the lock in the other), so a level may hold a task
// that is not claimable at that now: claims skip it (entry.claimable).
type pendingSet struct {
	levels  []level // by priority, highest first; none empty
	delayed *btree.BTreeG[*entry]
	n       int   // tasks in the set
	seen    int64 // the latest now (ms) looked at; 0: none yet
	// promoted counts the tasks with a notBefore that became claimable
	// since Due last asked (so waiting claims can be woken for them).
	promoted int
}

type level struct {
	prio  int
	tasks *btree.BTreeG[*entry]
}

func newPendingSet() pendingSet {
	return pendingSet{delayed: btree.NewG(degree, eligibleBefore)}
}

func (ps *pendingSet) len() int { return ps.n }

// level is the tree of priority p, made when create is set.
func (ps *pendingSet) level(p int, create bool) *btree.BTreeG[*entry] {
	i, ok := slices.BinarySearchFunc(ps.levels, p, func(l level, p int) int { return p - l.prio })
	if ok {
		return ps.levels[i].tasks
	}
	if !create {
		return nil
	}
	tasks := btree.NewG(degree, eligibleBefore)
	ps.levels = slices.Insert(ps.levels, i, level{prio: p, tasks: tasks})
	return tasks
}

// add puts e in the set. It reports whether e is claimable (in a level),
// so that the views must be shown it.
func (ps *pendingSet) add(e *entry) bool {
	ps.n++
	if e.flags&hasNotBefore != 0 {
		if e.notBefore > ps.seen {
			ps.delayed.ReplaceOrInsert(e)
			return false
		}
		ps.promoted++
	}
	ps.level(e.prio(), true).ReplaceOrInsert(e)
	return true
}

// drop takes e out of the set. It reports whether e was claimable (in a
// level), so that it must leave the views.
func (ps *pendingSet) drop(e *entry) bool {
	if e.flags&hasNotBefore != 0 {
		if _, ok := ps.delayed.Delete(e); ok {
			ps.n--
			return false
		}
	}
	p := e.prio()
	tasks := ps.level(p, false)
	if tasks == nil {
		return false
	}
	if _, ok := tasks.Delete(e); !ok {
		return false
	}
	ps.n--
	if tasks.Len() == 0 {
		i, _ := slices.BinarySearchFunc(ps.levels, p, func(l level, p int) int { return p - l.prio })
		ps.levels = slices.Delete(ps.levels, i, i+1)
	}
	return true
}

// promote notes a look at ms and moves every delayed task whose time has
// come into its level, calling entered for each.
func (ps *pendingSet) promote(ms int64, entered func(*entry)) {
	ps.seen = max(ps.seen, ms)
	for {
		e, ok := ps.delayed.Min()
		if !ok || e.notBefore > ps.seen {
			return
		}
		ps.delayed.DeleteMin()
		ps.level(e.prio(), true).ReplaceOrInsert(e)
		ps.promoted++
		entered(e)
	}
}

// ahead is the claimable tasks whose notBefore is after ms: those a look
// at a later now made claimable.
func (ps *pendingSet) ahead(ms int64) []*entry {
	var found []*entry
	from := &entry{flags: hasNotBefore, notBefore: ms + 1} // first by (EligibleAt, id)
	for _, l := range ps.levels {
		l.tasks.AscendGreaterOrEqual(from, func(e *entry) bool {
			if e.flags&hasNotBefore != 0 {
				found = append(found, e)
			}
			return true
		})
	}
	return found
}

// nextDue is the notBefore of the first delayed task, if any.
func (ps *pendingSet) nextDue() (int64, bool) {
	e, ok := ps.delayed.Min()
	if !ok {
		return 0, false
	}
	return e.notBefore, true
}

// ascend calls fn with the claimable tasks in claim order, from the first
// one after r (all of them when after is false), until fn returns false.
func (ps *pendingSet) ascend(r rank, after bool, fn func(*entry) bool) {
	goOn := true
	visit := func(e *entry) bool {
		goOn = fn(e)
		return goOn
	}
	for _, l := range ps.levels {
		switch {
		case !after || l.prio < r.prio:
			l.tasks.Ascend(visit)
		case l.prio == r.prio:
			l.tasks.AscendGreaterOrEqual(r.pivot(), func(e *entry) bool {
				if e.id == r.id && e.eligibleAt() == r.at {
					return true // r itself
				}
				return visit(e)
			})
		default:
			continue // all of this level comes before r
		}
		if !goOn {
			return
		}
	}
}

// each calls fn with every task of the set by (EligibleAt, id), until fn
// returns false.
func (ps *pendingSet) each(fn func(*entry) bool) { ps.walk(nil, false, fn) }

// walk calls fn with the tasks of the set by (EligibleAt, id), or in the
// reverse order when desc is set, from the first one past from (all of them
// when from is nil), until fn returns false. from sorts as a task does (it
// need not be in the set: a pivot, or a task gone since).
func (ps *pendingSet) walk(from *entry, desc bool, fn func(*entry) bool) {
	var trees []*btree.BTreeG[*entry]
	for _, l := range ps.levels {
		trees = append(trees, l.tasks)
	}
	if ps.delayed.Len() > 0 {
		trees = append(trees, ps.delayed)
	}
	switch len(trees) {
	case 0:
		return
	case 1:
		walkTree(trees[0], eligibleBefore, from, desc, fn)
		return
	}
	// Merge: the trees are few (one per priority in use, and delayed).
	first := eligibleBefore
	if desc {
		first = func(a, b *entry) bool { return eligibleBefore(b, a) }
	}
	heads := make([]*entry, len(trees))
	nexts := make([]func() (*entry, bool), len(trees))
	for i, tr := range trees {
		next, stop := iter.Pull(func(yield func(*entry) bool) { walkTree(tr, eligibleBefore, from, desc, yield) })
		defer stop()
		nexts[i] = next
		heads[i], _ = next()
	}
	for {
		best := -1
		for i, h := range heads {
			if h != nil && (best < 0 || first(h, heads[best])) {
				best = i
			}
		}
		if best < 0 || !fn(heads[best]) {
			return
		}
		heads[best], _ = nexts[best]()
	}
}

// walkTree calls fn with tr's entries in order (less is tr's), or in the
// reverse order when desc is set, from the first one past from (all when
// from is nil), until fn returns false.
func walkTree(tr *btree.BTreeG[*entry], less func(a, b *entry) bool, from *entry, desc bool, fn func(*entry) bool) {
	if from == nil {
		if desc {
			tr.Descend(fn)
		} else {
			tr.Ascend(fn)
		}
		return
	}
	past := func(e *entry) bool {
		if !less(e, from) && !less(from, e) {
			return true // from itself
		}
		return fn(e)
	}
	if desc {
		tr.DescendLessOrEqual(from, past)
	} else {
		tr.AscendGreaterOrEqual(from, past)
	}
}

// oldest is the EligibleAt of the first claimable task of all levels (the
// zero time when none): each level's first is its oldest, so this costs a
// look per priority in use.
func (ps *pendingSet) oldest() time.Time {
	var at int64
	for _, l := range ps.levels {
		if e, ok := l.tasks.Min(); ok && (at == 0 || e.eligibleAt() < at) {
			at = e.eligibleAt()
		}
	}
	if at == 0 {
		return time.Time{}
	}
	return time.UnixMilli(at).UTC()
}
