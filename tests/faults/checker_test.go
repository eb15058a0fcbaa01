package faults

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// report is the checker's verdict. The counters named in SPEC §5's promise
// (lost, double-finished) and the agreement of store and log must be zero.
// cut counts the transitions a crash left stored but unlogged: a server's
// start-up repair appends those lines again (mended counts them), so once
// a server has started after the last kill, cut must be zero too; read
// between a kill and the next start, it is bounded (see check).
type report struct {
	Seed          uint64
	Cycles        int
	Kills         int // SIGKILLs, all of them
	StartupKills  int // of those, the ones that landed before the server listened
	ShutdownKills int // of those, the ones that came during a clean shutdown

	Tasks        int // distinct task ids seen anywhere
	Acked        int // posts answered 201
	Unacked      int // posts without an answer (or with an error)
	UnackedExist int // of those, the ones that exist all the same

	Lost           int            // a task that must exist is gone
	DoubleFinished int            // two results (or a result and a timeout) for one task, or the wrong one kept
	Twins          int            // one posted item stored as two tasks
	Unfinished     int            // a task not terminal after the drain
	Disagree       int            // store and log (or a client's promise) disagree
	Cut            int            // a crash cut a transition's log line; nobody was told of it
	CutKinds       map[string]int // the cut lines by the event they would have been
	Mended         int            // cut lines a server's start-up repair appended again
	MendedKinds    map[string]int // the mended lines by event

	Requeues int // requeue events
	Accepted int // result sends answered accepted
	Refused  int // result sends answered accepted: false
	Unknown  int // result sends without an answer
	Late     int // accepted results from a worker that no longer held the lease
	Torn     int // event log lines that do not parse
	Debris   int // files in the store that should not be there

	// SPEC §11. A task ends exactly once: finished, failed by its worker,
	// out of attempts (a dead letter) or timed out.
	Finished        int            // tasks stored finished
	FailedByWorker  int            // tasks stored failed with error "failed"
	DeadLetters     int            // tasks stored failed with error "attempts"
	TimedOut        int            // tasks stored failed with error "timeout"
	FailsAccepted   int            // failure sends answered accepted
	Releases        int            // give-backs answered accepted
	ReleasesRefused int            // give-backs answered accepted: false
	ReleasesUnknown int            // give-backs without an answer
	Waited          int            // claims that had to wait for a notBefore (delay, set time, give-back delay, backoff)
	Early           int            // a claim before the task's time
	OverAttempts    int            // a task handed out more than its queue's maxAttempts times
	Starved         int            // priority classes with a task left after the drain
	Priorities      map[int][2]int // by priority: tasks, of which drained

	// SPEC §12.
	Keyed          int // keyed post sends answered with an id (201 or 200)
	Replays        int // of those, the ones answered 200 (an earlier send made the task)
	KeyTwins       int // a key with two tasks, or two ids told for one key
	Batches        int // batch posts answered 201
	BatchesUnacked int // batch posts without an answer
	Phantoms       int // a stored task whose item nobody sent
	Cancels        int // cancels answered accepted
	CancelsRefused int // cancels answered accepted: false (the task was terminal)
	CancelsUnknown int // cancels without an answer
	CancelsHeld    int // cancelled lines of a task a worker held (processing)
	Cancelled      int // tasks stored failed with error "cancelled"
	Retries        int // retries answered 200
	RetriesRefused int // retries answered 409 not_failed
	AfterCancel    int // a result accepted after an accepted cancel, with no retry between
	Pauses         int // pauses answered
	PausedClaims   int // a task claimed while the queue was known to be paused

	// Backwards counts lines stamped earlier than their task's line before
	// them. It is a known server bug (see TestReproClaimStampedBeforeItsTask),
	// counted here rather than failed, so that the run stays about the
	// promise; it fails a run only through what it breaks (a cut line the
	// start-up repair then misses).
	Backwards int

	Problems []string // one line per thing that is wrong
}

// fail counts one problem under counter and says what it is.
func (r *report) fail(counter *int, format string, args ...any) {
	*counter++
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// Summary is the one line a run prints.
func (r *report) Summary() string {
	return fmt.Sprintf("faults: seed=%d cycles=%d kills=%d startup-kills=%d shutdown-kills=%d tasks=%d acked=%d unacked=%d unacked-exist=%d "+
		"lost=%d double-finished=%d twins=%d unfinished=%d disagree=%d cut=%d (%s) mended=%d (%s) "+
		"requeues=%d results-accepted=%d results-refused=%d results-unknown=%d late-accepted=%d torn=%d debris=%d "+
		"finished=%d failed-by-worker=%d dead-letters=%d timed-out=%d fails-accepted=%d releases=%d (refused:%d unknown:%d) "+
		"waited-claims=%d early=%d over-attempts=%d starved=%d priorities=(%s) "+
		"keyed=%d replays=%d key-twins=%d batches=%d (unacked:%d) phantoms=%d cancels=%d (refused:%d unknown:%d held:%d) cancelled=%d "+
		"retries=%d (refused:%d) after-cancel=%d pauses=%d paused-claims=%d stamped-backwards=%d",
		r.Seed, r.Cycles, r.Kills, r.StartupKills, r.ShutdownKills, r.Tasks, r.Acked, r.Unacked, r.UnackedExist,
		r.Lost, r.DoubleFinished, r.Twins, r.Unfinished, r.Disagree, r.Cut, byKind(r.CutKinds), r.Mended, byKind(r.MendedKinds),
		r.Requeues, r.Accepted, r.Refused, r.Unknown, r.Late, r.Torn, r.Debris,
		r.Finished, r.FailedByWorker, r.DeadLetters, r.TimedOut, r.FailsAccepted, r.Releases, r.ReleasesRefused, r.ReleasesUnknown,
		r.Waited, r.Early, r.OverAttempts, r.Starved, drained(r.Priorities),
		r.Keyed, r.Replays, r.KeyTwins, r.Batches, r.BatchesUnacked, r.Phantoms, r.Cancels, r.CancelsRefused, r.CancelsUnknown, r.CancelsHeld, r.Cancelled,
		r.Retries, r.RetriesRefused, r.AfterCancel, r.Pauses, r.PausedClaims, r.Backwards)
}

// drained is "priority:drained/tasks" for each priority, sorted.
func drained(counts map[int][2]int) string {
	var classes []string
	for _, p := range slices.Sorted(maps.Keys(counts)) {
		classes = append(classes, fmt.Sprintf("%d:%d/%d", p, counts[p][1], counts[p][0]))
	}
	return strings.Join(classes, " ")
}

// byKind is "kind:n" for each kind, sorted.
func byKind(counts map[string]int) string {
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		kinds = append(kinds, fmt.Sprintf("%s:%d", k, counts[k]))
	}
	return strings.Join(kinds, " ")
}

// cut counts a log line a crash cut: the transition to kind is stored, or
// later lines show it happened, but it has no line of its own.
func (r *report) cut(kind string) {
	r.Cut++
	r.CutKinds[kind]++
}

// checker holds the three witnesses, indexed: what the clients were told,
// what the store holds and what the log says.
type checker struct {
	opts   checkOptions
	h      histories
	store  store
	rules  map[string]queueRules // by queue
	events map[string][]event    // by task id, in log order
	r      *report

	sends    map[string][]resultRecord    // result and failure sends by task id
	releases map[claimKey][]releaseRecord // give-backs by the claim they gave back
	postOf   map[string]postRecord        // the post of each task id, where known
	terminal map[string]int               // the most terminal events of one life (up to a retried line) by task id
	retried  map[string]int               // retried events by task id
	mended   map[mendedLine]int           // lines the start-up repairs appended
}

// claimKey names one claim of a task: its id and attempt number.
type claimKey struct {
	id       string
	attempts int
}

// mendedLine names a line a start-up repair appended: the task and event.
type mendedLine struct{ id, event string }

// check compares the histories, the store and the event log after a run
// with kills SIGKILLs. mended are the lines the servers' start-up repairs
// appended, as they logged them. settled says a server has started since
// the last kill (so its repair has run) and was then stopped cleanly: the
// log must lack no line. Unsettled, as read between a kill and the next
// start, it may lack one line per kill. It assumes no task was cleaned by
// retention or timed out except as the log says.
// maxInFlight bounds the changes a run's clients and sweep can have under
// way at once: one request per HTTP client, the socket workers' claims and
// reports, the sweep's one change. Generous, as it only bounds the cuts.
const maxInFlight = 64

func check(h histories, s store, rules map[string]queueRules, events []event, torn, kills int, mended []event, settled bool) *report {
	return checkWith(checkOptions{pauseSlack: pauseSlack}, h, s, rules, events, torn, kills, mended, settled)
}

// checkOptions are the allowances a run's setup calls for.
type checkOptions struct {
	// pauseSlack (ms) is how long after a pause's answer a claim may still
	// be logged: pauseSlack on one server; more where a pause set through
	// one server reaches the others only after a while.
	pauseSlack int64
	// clockSlack (ms) is how far the servers' clock may be from the
	// clients': servers on PostgreSQL judge by the database's clock, as
	// measured over round trips, within the bound each logged at start.
	clockSlack int64
}

// checkWith is check with the allowances of opts.
func checkWith(opts checkOptions, h histories, s store, rules map[string]queueRules, events []event, torn, kills int, mended []event, settled bool) *report {
	c := &checker{opts: opts,
		h: h, store: s, rules: rules, events: map[string][]event{},
		r:     &report{Kills: kills, CutKinds: map[string]int{}, MendedKinds: map[string]int{}, Priorities: map[int][2]int{}},
		sends: map[string][]resultRecord{}, releases: map[claimKey][]releaseRecord{}, postOf: map[string]postRecord{},
		terminal: map[string]int{}, retried: map[string]int{}, mended: map[mendedLine]int{},
	}
	for _, m := range mended {
		c.mended[mendedLine{m.ID, m.Event}]++
		c.r.Mended++
		c.r.MendedKinds[m.Event]++
	}
	// A task's lines are stamped in the order of its changes: the start-up
	// repair relies on it (TestClaimsAreStampedAfterTheirTasksLastChange).
	for _, bad := range stampedBackwards(events) {
		c.r.fail(&c.r.Backwards, "stamped backwards: %s", bad)
	}
	life := map[string]int{} // terminal events since the task's last retried line
	for _, ev := range events {
		c.events[ev.ID] = append(c.events[ev.ID], ev)
		switch {
		case ev.Event == "result" || ev.Event == "timeout" || ev.Event == "cancelled" || ev.Event == "failed" && ev.Error != "corrupt":
			life[ev.ID]++
			c.terminal[ev.ID] = max(c.terminal[ev.ID], life[ev.ID])
		case ev.Event == "retried":
			life[ev.ID] = 0
			c.retried[ev.ID]++
		case ev.Event == "requeue":
			c.r.Requeues++
		}
	}
	for _, rec := range h.results {
		c.sends[rec.ID] = append(c.sends[rec.ID], rec)
	}
	for _, rec := range h.releases {
		k := claimKey{rec.ID, rec.Attempts}
		c.releases[k] = append(c.releases[k], rec)
	}
	byTag := map[string]postRecord{}
	for _, p := range h.posts {
		byTag[p.Tag] = p
		if p.Outcome == acked {
			c.postOf[p.ID] = p
		}
	}
	for id, t := range s.tasks {
		if p, ok := byTag[t.ItemTag]; ok {
			if _, known := c.postOf[id]; !known {
				c.postOf[id] = p
			}
		}
	}
	for range torn {
		c.r.fail(&c.r.Torn, "an event log line does not parse")
	}
	for _, d := range s.debris {
		c.r.fail(&c.r.Debris, "store debris: %s", d)
	}

	c.posts()
	c.presence()
	c.results()
	c.giveBacks()
	c.claims()
	c.outcomes()
	c.keys()
	c.batches()
	c.cancelsAndRetries()
	c.pauses()
	for _, id := range c.ids() {
		c.lifecycle(id)
	}
	// A change is written to the task's file and then, under its queue's
	// lock, logged; the files of different tasks are written side by side,
	// and a task's next change waits for the last one's line. So a crash can
	// cut one line per task whose write was under way (at most maxInFlight),
	// and the next start-up appends them again. More cuts or repairs than
	// that, or two for one task from one kill, mean lines go missing some
	// other way, and a cut left once a server has started since the last
	// kill means the repair missed it.
	switch {
	case settled && c.r.Cut > 0:
		c.r.fail(&c.r.Disagree, "%d log lines are still cut after a clean start and stop: the start-up repair missed them", c.r.Cut)
	case c.r.Cut > kills*maxInFlight:
		c.r.fail(&c.r.Disagree, "%d log lines cut by %d kills: at most %d per kill are possible", c.r.Cut, kills, maxInFlight)
	}
	if c.r.Mended > kills*maxInFlight {
		c.r.fail(&c.r.Disagree, "%d log lines mended after %d kills: at most %d per kill can have been cut", c.r.Mended, kills, maxInFlight)
	}
	perTask := map[string]int{}
	for line, n := range c.mended {
		perTask[line.id] += n
	}
	for id, n := range perTask {
		if n > kills {
			c.r.fail(&c.r.Disagree, "task %s had %d log lines mended after %d kills: at most one per kill can have been cut", id, n, kills)
		}
	}
	return c.r
}

// ids is every task id any witness knows, sorted so that problems come out
// in a stable order.
func (c *checker) ids() []string {
	seen := map[string]bool{}
	for id := range c.store.tasks {
		seen[id] = true
	}
	for id := range c.events {
		seen[id] = true
	}
	for _, p := range c.h.posts {
		if p.Outcome == acked {
			seen[p.ID] = true
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	c.r.Tasks = len(ids)
	return ids
}

// posts: every acknowledged post was logged before it was answered; an
// unacknowledged one may exist or not; no item is stored twice.
func (c *checker) posts() {
	byTag := map[string][]string{}
	for _, t := range c.store.tasks {
		byTag[t.ItemTag] = append(byTag[t.ItemTag], t.ID)
	}
	// A keyed post may be sent several times: its item reached a server
	// if any of its sends did.
	sent := map[string]bool{}
	posted := map[string]bool{}
	for _, p := range c.h.posts {
		posted[p.Tag] = true
		sent[p.Tag] = sent[p.Tag] || p.Outcome != unsent
	}
	for _, tag := range slices.Sorted(maps.Keys(byTag)) {
		ids := byTag[tag]
		if len(ids) > 1 {
			c.r.fail(&c.r.Twins, "item %s is stored as %d tasks: %v", tag, len(ids), ids)
		}
		switch {
		case !posted[tag]:
			c.r.fail(&c.r.Phantoms, "item %s is stored as %v, but no post or batch sent it", tag, ids)
		case !sent[tag]:
			c.r.fail(&c.r.Disagree, "item %s was never sent (connection refused) but is stored as %v", tag, ids)
		}
	}
	for _, p := range c.h.posts {
		if p.Outcome != acked {
			c.r.Unacked++
			if ids := byTag[p.Tag]; len(ids) > 0 {
				c.r.UnackedExist++
			}
			continue
		}
		c.r.Acked++
		if !c.logged(p.ID, "posted") {
			c.r.fail(&c.r.Disagree, "post of %s was acknowledged but has no posted event", p.ID)
		}
		if t, ok := c.store.tasks[p.ID]; ok && t.ItemTag != p.Tag {
			c.r.fail(&c.r.Disagree, "task %s holds item %s, but was acknowledged for %s", p.ID, t.ItemTag, p.Tag)
		}
	}
}

// presence: a task that existed stays until retention cleans it (with a
// cleaned event). An acknowledged post, or a task with any logged event,
// whose file is gone without one is lost. (The brief also accepts a logged
// result or timeout in place of the file; with retention an hour away no
// file may go at all, so this is stricter.) A status read that found no
// task counts too.
func (c *checker) presence() {
	seen := map[string]bool{}
	need := func(id, why string) {
		if seen[id] {
			return
		}
		seen[id] = true
		if _, ok := c.store.tasks[id]; ok || c.logged(id, "cleaned") {
			return
		}
		c.r.fail(&c.r.Lost, "task %s (%s) is not in the store and was never cleaned", id, why)
	}
	for _, p := range c.h.posts {
		if p.Outcome == acked {
			need(p.ID, "acknowledged post")
		}
	}
	for id := range c.events {
		need(id, "logged")
	}
	for _, rd := range c.h.reads {
		if rd.Status == 404 && !c.logged(rd.ID, "cleaned") {
			c.r.fail(&c.r.Lost, "a status read of acknowledged task %s answered 404", rd.ID)
		}
	}
}

// results: at most one result or failure send per task was told
// accepted, the log has at most one terminal event per task, and the
// stored result (or a worker's failure) is the accepted one (or, when
// nobody heard back, one that was sent and not refused).
func (c *checker) results() {
	for _, rec := range c.h.results {
		switch {
		case rec.Kind == sendFail:
			if rec.Outcome == accepted {
				c.r.FailsAccepted++
			}
		case rec.Outcome == accepted:
			c.r.Accepted++
		case rec.Outcome == rejected:
			c.r.Refused++
		default:
			c.r.Unknown++
		}
	}
	for id, n := range c.terminal {
		if n > 1 {
			c.r.fail(&c.r.DoubleFinished, "task %s has %d terminal (result, failed, timeout) events", id, n)
		}
	}
	for id, sends := range c.sends {
		var won []resultRecord
		for _, s := range sends {
			if s.Outcome == accepted {
				won = append(won, s)
			}
		}
		if len(won) > 1 {
			c.r.fail(&c.r.DoubleFinished, "task %s accepted %d results or failures: %v", id, len(won), won)
		}
		if len(won) == 0 {
			continue
		}
		t, stored := c.store.tasks[id]
		switch w := won[0]; {
		case w.Kind == sendFail:
			if !c.loggedFailed(id, "failed") {
				c.r.fail(&c.r.Disagree, "task %s: a failure was accepted but no failed event (error failed) was logged", id)
			}
			if stored && (t.Status != "failed" || t.Error != "failed" || t.FailureTag != w.Tag) {
				c.r.fail(&c.r.DoubleFinished, "task %s accepted failure %s from %s but holds %s (error %q) failure %q",
					id, w.Tag, w.Client, t.Status, t.Error, t.FailureTag)
			}
		default:
			if !c.logged(id, "result") {
				c.r.fail(&c.r.Disagree, "task %s: a result was accepted but no result event was logged", id)
			}
			if stored && (t.Status != "finished" || t.ResultTag != w.Tag) {
				c.r.fail(&c.r.DoubleFinished, "task %s accepted result %s from %s but holds %s result %q",
					id, w.Tag, w.Client, t.Status, t.ResultTag)
			}
		}
	}
	for id, t := range c.store.tasks {
		switch {
		case t.Status == "finished":
			c.storedResult(id, t)
		case t.Status == "failed" && t.Error == "failed":
			c.storedFailure(id, t)
		}
	}
}

// storedResult checks where a finished task's result came from.
func (c *checker) storedResult(id string, t storedTask) {
	from := c.sentAs(id, sendResult, t.ResultTag)
	if len(from) == 0 {
		c.r.fail(&c.r.Disagree, "task %s holds result %q, which nobody sent for it", id, t.ResultTag)
		return
	}
	if !slices.ContainsFunc(from, func(s resultRecord) bool { return s.Outcome != rejected }) {
		c.r.fail(&c.r.DoubleFinished, "task %s kept result %s, whose sender was told it was refused", id, t.ResultTag)
	}
	if c.mended[mendedLine{id, "result"}] > 0 {
		// The store does not keep who sent a result, so a repaired result
		// line names the claim's holder (or nobody), not always the sender.
		return
	}
	for _, ev := range c.events[id] {
		if ev.Event == "result" && ev.Worker != from[0].Client {
			c.r.fail(&c.r.Disagree, "task %s: result event names %q, but the stored result came from %q", id, ev.Worker, from[0].Client)
		}
	}
}

// storedFailure checks where a task a worker failed got its failure.
func (c *checker) storedFailure(id string, t storedTask) {
	from := c.sentAs(id, sendFail, t.FailureTag)
	if len(from) == 0 {
		c.r.fail(&c.r.Disagree, "task %s is failed by a worker with failure %q, which no worker sent as a failure of it", id, t.FailureTag)
		return
	}
	if !slices.ContainsFunc(from, func(s resultRecord) bool { return s.Outcome != rejected }) {
		c.r.fail(&c.r.DoubleFinished, "task %s kept failure %s, whose sender was told it was refused", id, t.FailureTag)
	}
}

// sentAs lists the sends of kind for task id that carried tag.
func (c *checker) sentAs(id, kind, tag string) []resultRecord {
	var from []resultRecord
	for _, s := range c.sends[id] {
		if s.Tag == tag && (s.Kind == kind || kind == sendResult && s.Kind == "") {
			from = append(from, s)
		}
	}
	return from
}

// giveBacks: a give-back told accepted went where its answer said, as the
// log and the store agree: pending again (a released line, or a re-queue
// where a start-up repair could not tell the two apart), or, after the
// queue's last allowed attempt and only then, failed with error
// "attempts". A give-back after which a claim with a lower or equal
// attempt number came is caught by lifecycle.
func (c *checker) giveBacks() {
	for _, rel := range c.h.releases {
		switch rel.Outcome {
		case accepted:
			c.r.Releases++
		case rejected:
			c.r.ReleasesRefused++
			continue
		default:
			c.r.ReleasesUnknown++
			continue
		}
		maxAttempts := c.rules[c.queueOf(rel.ID)].MaxAttempts
		last := maxAttempts > 0 && rel.Attempts >= maxAttempts
		t, stored := c.store.tasks[rel.ID]
		switch {
		case rel.Status == "pending" && last:
			c.r.fail(&c.r.OverAttempts, "task %s: the give-back of its claim %d of at most %d was told pending, not failed", rel.ID, rel.Attempts, maxAttempts)
		case rel.Status == "pending":
			if !c.loggedAt(rel.ID, rel.Attempts, "released", "requeue") {
				c.r.fail(&c.r.Disagree, "task %s: the give-back of claim %d was accepted but not logged", rel.ID, rel.Attempts)
			}
			if stored && t.Attempts < rel.Attempts {
				c.r.fail(&c.r.Disagree, "task %s was given back at attempts %d but holds attempts %d", rel.ID, rel.Attempts, t.Attempts)
			}
		case rel.Status == "failed" && !last:
			c.r.fail(&c.r.Disagree, "task %s: the give-back of its claim %d (of at most %d) was told failed", rel.ID, rel.Attempts, maxAttempts)
		case rel.Status == "failed":
			if !c.loggedFailed(rel.ID, "attempts") {
				c.r.fail(&c.r.Disagree, "task %s: its last give-back was told failed but no failed event (error attempts) was logged", rel.ID)
			}
			if stored && (t.Status != "failed" || t.Error != "attempts" || t.Attempts != rel.Attempts) {
				c.r.fail(&c.r.Disagree, "task %s: its last give-back (attempts %d) was told failed, but it holds %s (error %q, attempts %d)",
					rel.ID, rel.Attempts, t.Status, t.Error, t.Attempts)
			}
		default:
			c.r.fail(&c.r.Disagree, "task %s: a give-back was accepted with status %q", rel.ID, rel.Status)
		}
	}
}

// outcomes counts how the stored tasks ended, and by priority how many
// drained. A dead letter must have used exactly its queue's attempts.
func (c *checker) outcomes() {
	for id, t := range c.store.tasks {
		switch {
		case t.Status == "finished":
			c.r.Finished++
		case t.Status == "failed" && t.Error == "failed":
			c.r.FailedByWorker++
		case t.Status == "failed" && t.Error == "timeout":
			c.r.TimedOut++
		case t.Status == "failed" && t.Error == "cancelled":
			c.r.Cancelled++
		case t.Status == "failed" && t.Error == "attempts":
			c.r.DeadLetters++
			if maxAttempts := c.rules[t.Queue].MaxAttempts; maxAttempts == 0 || t.Attempts != maxAttempts {
				c.r.fail(&c.r.Disagree, "task %s is a dead letter after %d attempts, on a queue that allows %d", id, t.Attempts, maxAttempts)
			}
		case t.Status == "failed":
			c.r.fail(&c.r.Disagree, "task %s failed with error %q", id, t.Error)
		}
		n := c.r.Priorities[t.Priority]
		n[0]++
		if terminal(t.Status) {
			n[1]++
		}
		c.r.Priorities[t.Priority] = n
	}
	for p, n := range c.r.Priorities {
		if n[1] < n[0] {
			c.r.fail(&c.r.Starved, "priority %d: %d of its %d tasks were left after the drain", p, n[0]-n[1], n[0])
		}
	}
}

// claims: every task handed to a worker was logged as claimed with the
// attempt number it was handed out with, and no claim was handed out twice.
// On a queue with maxAttempts no task was handed out (to the clients, in
// the log, by the store's count) more than that many times, and every claim
// handed out is in the store's count: it was durable before it was answered.
func (c *checker) claims() {
	logged := map[claimKey]int{}
	perTask := map[string]int{}
	for id, evs := range c.events {
		for _, ev := range evs {
			if ev.Event == "claimed" {
				logged[claimKey{id, ev.Attempts}]++
				perTask[id]++
			}
		}
	}
	// A retry starts a task's attempts again from 0: each life may claim
	// it once with each number.
	for k, n := range logged {
		if n > 1+c.retried[k.id] {
			c.r.fail(&c.r.Disagree, "task %s logged %d claims with attempts %d", k.id, n, k.attempts)
		}
	}
	handed := map[claimKey][]string{}
	for _, rec := range c.h.claims {
		k := claimKey{rec.ID, rec.Attempts}
		handed[k] = append(handed[k], rec.Client)
		if logged[k] == 0 {
			c.r.fail(&c.r.Disagree, "task %s was handed to %s with attempts %d, which the log lacks", rec.ID, rec.Client, rec.Attempts)
		}
	}
	seen := map[string][]int{} // the attempt numbers handed out, by task
	for k, clients := range handed {
		if len(clients) > 1+c.retried[k.id] {
			c.r.fail(&c.r.DoubleFinished, "task %s was handed out twice with attempts %d: %v", k.id, k.attempts, clients)
		}
		seen[k.id] = append(seen[k.id], k.attempts)
	}
	for _, id := range slices.Sorted(maps.Keys(seen)) {
		maxAttempts := c.rules[c.queueOf(id)].MaxAttempts
		if maxAttempts == 0 {
			continue
		}
		got := seen[id]
		slices.Sort(got)
		switch t, stored := c.store.tasks[id]; {
		case len(got) > maxAttempts || got[len(got)-1] > maxAttempts:
			c.r.fail(&c.r.OverAttempts, "task %s was handed out %d times, attempts %v, on a queue that allows %d", id, len(got), got, maxAttempts)
		case stored && t.Attempts < got[len(got)-1]:
			c.r.fail(&c.r.OverAttempts, "task %s was handed out with attempts %d but the store counts %d: the claim was not durable", id, got[len(got)-1], t.Attempts)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(perTask)) {
		if maxAttempts := c.rules[c.queueOf(id)].MaxAttempts; maxAttempts > 0 && perTask[id] > maxAttempts {
			c.r.fail(&c.r.OverAttempts, "task %s was claimed %d times by the log, on a queue that allows %d", id, perTask[id], maxAttempts)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.store.tasks)) {
		t := c.store.tasks[id]
		if maxAttempts := c.rules[t.Queue].MaxAttempts; maxAttempts > 0 && t.Attempts > maxAttempts {
			c.r.fail(&c.r.OverAttempts, "task %s holds attempts %d, on a queue that allows %d", id, t.Attempts, maxAttempts)
		}
	}
}

func terminal(status string) bool { return status == "finished" || status == "failed" }

// lifecycle replays one task's events through the lifecycle of SPEC §5
// and §11 and compares where they end with the store. A step the lifecycle
// does not allow from the state the log reached is a missing line: a crash
// cut it (counted as cut; whether anyone was told of it is checked in
// posts, results and claims). A step after the task was terminal (other
// than fetched and cleaned) is a bug whatever the crashes.
//
// On the way it checks that no claim came before the task's time: the
// earliest its post allowed (the client's clock before it sent a delayed
// post, plus the delay; or the time it named), and after each return to
// pending the backoff's shortest wait, or a give-back's delay, from the
// return's logged time. The first claim after the last return must also
// come at or after the notBefore the store holds.
func (c *checker) lifecycle(id string) {
	status, attempts, claimer, lastErr := "", 0, "", ""
	rules := c.rules[c.queueOf(id)]
	var notBefore, returned int64 // the earliest claim the client's knowledge allows, and when it became pending
	why := "its post"
	if p, ok := c.postOf[id]; ok {
		notBefore, returned = p.earliest(), p.SentAt
	}
	firstClaim := int64(-1) // the first claim since the last return to pending
	for _, ev := range c.events[id] {
		switch ev.Event {
		case "posted":
			if status != "" {
				c.r.fail(&c.r.Disagree, "task %s posted again after %s", id, status)
			}
		case "claimed", "progress", "requeue", "released":
			want := "processing"
			if ev.Event == "claimed" {
				want = "pending"
			}
			switch {
			case terminal(status):
				c.r.fail(&c.r.DoubleFinished, "task %s: %s event after it was %s", id, ev.Event, status)
			case status == "":
				c.r.cut("posted")
			case status != want && want == "pending":
				c.r.cut("requeue") // claimed while processing
			case status != want:
				c.r.cut("claimed") // progress or requeue while pending
			}
			switch ev.Event {
			case "claimed":
				if ev.Attempts <= attempts {
					c.r.fail(&c.r.Disagree, "task %s claimed with attempts %d after attempts %d", id, ev.Attempts, attempts)
				}
				claimer = ev.Worker
				c.claimedInTime(id, ev, notBefore, returned, why)
				if firstClaim < 0 {
					firstClaim = ev.At
				}
			case "requeue", "released":
				notBefore, returned, why = c.returnedUntil(id, ev, rules)
				firstClaim = -1
			}
		case "result", "timeout", "failed":
			switch {
			case ev.Event == "failed" && ev.Error != "failed" && ev.Error != "attempts":
				c.r.fail(&c.r.Disagree, "task %s: %s event with error %q (status %s)", id, ev.Event, ev.Error, ev.Status)
			case terminal(status):
				// Counted in results, as a second terminal event.
			case status == "":
				c.r.cut("posted")
			case ev.Error == "attempts" && status != "processing":
				c.r.cut("claimed") // out of attempts comes back from a claim
			case c.mended[mendedLine{id, ev.Event}] > 0:
				// Its worker is the repair's guess: lateness is unknown.
			case ev.Event == "result" && (status == "pending" || claimer != ev.Worker):
				c.r.Late++
			}
		case "cancelled":
			switch {
			case terminal(status):
				// Counted in results, as a second terminal event.
			case status == "":
				c.r.cut("posted")
			}
			// Only a failed line carries "error" (SPEC §8): the event is
			// the cause.
			if ev.Error != "" || ev.Status != "failed" {
				c.r.fail(&c.r.Disagree, "task %s: cancelled event with status %s, error %q", id, ev.Status, ev.Error)
			}
		case "retried":
			switch {
			case status == "finished":
				c.r.fail(&c.r.DoubleFinished, "task %s: retried after it was finished", id)
			case status == "":
				c.r.cut("posted")
			case status != "failed":
				c.r.cut("failed")
			}
			if ev.Status != "pending" || ev.Attempts != 0 {
				c.r.fail(&c.r.Disagree, "task %s: retried event with status %s, attempts %d", id, ev.Status, ev.Attempts)
			}
			notBefore, returned, why = 0, ev.At, "its retry"
			firstClaim = -1
		case "fetched", "cleaned":
			if !terminal(status) {
				c.r.cut("result")
			}
		default:
			c.r.fail(&c.r.Disagree, "task %s: %s event (status %s)", id, ev.Event, ev.Status)
		}
		switch ev.Event {
		case "result", "failed", "cancelled", "timeout":
			if !terminal(status) {
				lastErr = ev.Error
				switch ev.Event {
				case "timeout":
					lastErr = "timeout"
				case "cancelled":
					lastErr = "cancelled"
				}
			}
		}
		status, attempts = ev.Status, ev.Attempts
	}

	t, ok := c.store.tasks[id]
	if !ok {
		return // presence has judged it
	}
	if t.NotBefore != nil && firstClaim >= 0 && firstClaim < *t.NotBefore {
		c.r.fail(&c.r.Early, "task %s was claimed at %d, %d ms before the notBefore %d it holds", id, firstClaim, *t.NotBefore-firstClaim, *t.NotBefore)
	}
	if t.Dir != "done" {
		c.r.fail(&c.r.Unfinished, "task %s is still %s after the drain", id, t.Status)
	}
	switch {
	case t.Status == status && status == "failed" && t.Error != lastErr:
		c.r.fail(&c.r.Disagree, "task %s is failed with error %q in the store but %q by its log (%s)", id, t.Error, lastErr, c.trail(id))
	case t.Status == status:
	case terminal(t.Status) && !terminal(status):
		// The terminal line is missing. If a client was told of the
		// result, results has already failed the run.
		switch {
		case t.Status == "finished":
			c.r.cut("result")
		case t.Error == "timeout":
			c.r.cut("timeout")
		case t.Error == "cancelled":
			c.r.cut("cancelled")
		default:
			c.r.cut("failed")
		}
	default:
		c.r.fail(&c.r.Disagree, "task %s is %s in the store but %q by its log (%s)", id, t.Status, status, c.trail(id))
	}
	if t.Fetched && !c.logged(id, "fetched") {
		c.r.cut("fetched")
	}
}

// claimedInTime fails a claim that came before notBefore (Unix ms, 0:
// none), which the task was told of by why; returned is when it became
// pending, to count the claims that had to wait.
func (c *checker) claimedInTime(id string, ev event, notBefore, returned int64, why string) {
	if notBefore == 0 || notBefore <= returned {
		return
	}
	c.r.Waited++
	if ev.At+c.opts.clockSlack < notBefore {
		c.r.fail(&c.r.Early, "task %s was claimed (attempts %d, by %s) at %d, %d ms before %s allowed",
			id, ev.Attempts, ev.Worker, ev.At, notBefore-ev.At, why)
	}
}

// returnedUntil is the earliest a task that came back to pending at ev may
// be claimed again: the backoff's shortest wait after its ev.Attempts-th
// claim, or the delay its holder gave it back with, if longer. A give-back
// the holder was told of counts even where the line is a re-queue (a
// repair cannot tell a give-back without a new reason from one); one it
// was not told of counts only when the line says released.
func (c *checker) returnedUntil(id string, ev event, rules queueRules) (notBefore, returned int64, why string) {
	notBefore, why = ev.At+rules.minBackoff(ev.Attempts), fmt.Sprintf("the backoff after claim %d", ev.Attempts)
	for _, rel := range c.releases[claimKey{id, ev.Attempts}] {
		if rel.Delay > 0 && (rel.Outcome == accepted || rel.Outcome == unknown && ev.Event == "released") && ev.At+rel.Delay-1 > notBefore {
			notBefore, why = ev.At+rel.Delay-1, fmt.Sprintf("the give-back of claim %d with delay %d ms", ev.Attempts, rel.Delay)
		}
	}
	if notBefore == ev.At {
		return 0, ev.At, why
	}
	return notBefore, ev.At, why
}

// queueOf is the queue of task id, as the store or the log has it.
func (c *checker) queueOf(id string) string {
	if t, ok := c.store.tasks[id]; ok {
		return t.Queue
	}
	if evs := c.events[id]; len(evs) > 0 {
		return evs[0].Queue
	}
	return c.postOf[id].Queue
}

// loggedFailed reports whether id has a failed event with error code.
func (c *checker) loggedFailed(id, code string) bool {
	return slices.ContainsFunc(c.events[id], func(ev event) bool { return ev.Event == "failed" && ev.Error == code })
}

// loggedAt reports whether id has an event of one of kinds at attempts.
func (c *checker) loggedAt(id string, attempts int, kinds ...string) bool {
	return slices.ContainsFunc(c.events[id], func(ev event) bool {
		return ev.Attempts == attempts && slices.Contains(kinds, ev.Event)
	})
}

// logged reports whether id has an event of kind.
func (c *checker) logged(id, kind string) bool {
	return slices.ContainsFunc(c.events[id], func(ev event) bool { return ev.Event == kind })
}

// trail is a task's events as one short string, for problem messages.
func (c *checker) trail(id string) string {
	var names []string
	for _, ev := range c.events[id] {
		names = append(names, ev.Event)
	}
	return strings.Join(names, ",")
}
