package index

import (
	"time"

	"github.com/google/btree"

	"github.com/taskhoster/taskhoster/ports"
)

// A view is what one claim query (a matcher, by its Key) knows about a
// queue's pending tasks. Items never change, so a task a query has tested
// need not be tested again while it stays pending: the view remembers how
// far down the pending tree (in claim order) the query has looked — its
// frontier — and, of the pending tasks up to there, the ones it accepts.
// Claim order is SPEC §11's (rank): the highest priority first, then the
// earliest EligibleAt, then the id; "pending" here is the claimable ones
// (pendingSet's levels): a delayed task enters when its time comes.
//
// Invariant: matches holds exactly the claimable pending tasks at or before
// the frontier that the query accepts. So:
//   - a claim takes the first of matches when there is one (everything
//     after the frontier comes later in claim order), and otherwise tests
//     tasks beyond the frontier, moving it on, until one matches;
//   - a task entering pending (posted, re-queued) at or before the frontier
//     is tested at once; one beyond it waits for a claim to get there;
//   - a task leaving pending leaves matches.
//
// A claim is then O(log n) once the query has looked at the backlog, and
// the backlog is tested once per query, not once per claim, however much of
// it the query rejects. New posts usually land beyond every frontier (they
// are the newest), so a post costs the views nothing and is tested by the
// first claim that gets to it; and a view holds only what its claims have
// looked at, not every pending task its query accepts.
type view struct {
	m       ports.Matcher // the latest matcher with this key; all agree
	matches *btree.BTreeG[*entry]
	// frontier is the rank of the last task tested by a claim's scan (by
	// order only: it may have left pending since). Until begun, nothing
	// has been.
	frontier rank
	begun    bool
	// lastUsed is when (in the views' clock) a claim last used the view;
	// idle counts the tests run for it since then.
	lastUsed uint64
	idle     int
}

// covers reports whether e is at or before the frontier, so that the view
// must know what its query says about e.
func (v *view) covers(e *entry) bool {
	return v.begun && !v.frontier.less(rankOf(e))
}

// scan is how a view's look for a claim ended.
type scan int

const (
	scanFound scan = iota // a task to claim
	scanNone              // none: the query accepts no claimable task
	scanMore              // the budget ran out first: look again
)

// first is the first task in claim order, claimable at ms, that the view's
// query accepts. It moves the frontier as far as it has to and no further,
// testing at most budget tasks, and none after deadline: past that it
// reports scanMore, and the
// caller lets go of the queue's lock before it asks again (the invariant
// holds meanwhile, so the scan goes on where it stopped, whoever asks).
func (v *view) first(ps *pendingSet, ms int64, budget int, deadline time.Time) (*entry, scan) {
	var found *entry
	v.matches.Ascend(func(e *entry) bool {
		if e.claimable(ms) {
			found = e
			return false
		}
		return true // due only at a later now than this claim's
	})
	if found != nil {
		return found, scanFound
	}
	tested, out := 0, false
	ps.ascend(v.frontier, v.begun, func(e *entry) bool {
		if tested == budget || tested%16 == 15 && time.Now().After(deadline) {
			out = true
			return false
		}
		tested++
		v.frontier, v.begun = rankOf(e), true
		if v.m.Match(e.item) {
			v.matches.ReplaceOrInsert(e)
			if e.claimable(ms) {
				found = e
				return false
			}
		}
		return true
	})
	switch {
	case found != nil:
		return found, scanFound
	case out:
		return nil, scanMore
	}
	return nil, scanNone
}

// views are a queue's views by matcher key, at most maxViews of them.
type views struct {
	byKey map[string]*view
	clock uint64 // ticks once per claim that uses a view
}

// maxViews bounds the views of a queue: past this many distinct queries the
// least recently used one goes (and is rebuilt if its query comes back).
// A task leaving pending leaves every view, and one coming back (a
// re-queue) is tested for each view whose frontier is past it, so this
// also bounds what those cost.
const maxViews = 64

// minIdle is the fewest tests a view is run for without being used before
// it may be dropped (see enter).
const minIdle = 1024

func newViews() views { return views{byKey: make(map[string]*view)} }

// of returns m's view, making an empty one for a new query.
func (vs *views) of(m ports.Matcher) *view {
	vs.clock++
	key := m.Key()
	v := vs.byKey[key]
	if v == nil {
		if len(vs.byKey) >= maxViews {
			vs.evictOldest()
		}
		v = &view{matches: btree.NewG(degree, claimBefore)}
		vs.byKey[key] = v
	}
	v.m = m
	v.lastUsed = vs.clock
	v.idle = 0
	return v
}

func (vs *views) evictOldest() {
	var oldest string
	var at uint64
	first := true
	for k, v := range vs.byKey {
		if first || v.lastUsed < at {
			oldest, at, first = k, v.lastUsed, false
		}
	}
	delete(vs.byKey, oldest)
}

// enter shows every view a task that has just become pending; pending is
// how many tasks are pending now. A view that has tested more tasks since
// a claim last used it than there are pending tasks is dropped: rebuilding
// it, should its query come back, costs at most one test per pending task,
// no more than keeping it up to date has already cost, so a query whose
// workers have gone stops taxing every re-queue.
func (vs *views) enter(e *entry, pending int) {
	for key, v := range vs.byKey {
		if !v.covers(e) {
			continue
		}
		if v.m.Match(e.item) {
			v.matches.ReplaceOrInsert(e)
		}
		if v.idle++; v.idle > max(minIdle, pending) {
			delete(vs.byKey, key)
		}
	}
}

// leave takes a task that is no longer pending out of every view.
func (vs *views) leave(e *entry) {
	for _, v := range vs.byKey {
		v.matches.Delete(e)
	}
}
