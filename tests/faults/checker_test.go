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
		"requeues=%d results-accepted=%d results-refused=%d results-unknown=%d late-accepted=%d torn=%d debris=%d",
		r.Seed, r.Cycles, r.Kills, r.StartupKills, r.ShutdownKills, r.Tasks, r.Acked, r.Unacked, r.UnackedExist,
		r.Lost, r.DoubleFinished, r.Twins, r.Unfinished, r.Disagree, r.Cut, byKind(r.CutKinds), r.Mended, byKind(r.MendedKinds),
		r.Requeues, r.Accepted, r.Refused, r.Unknown, r.Late, r.Torn, r.Debris)
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
	h      histories
	store  store
	events map[string][]event // by task id, in log order
	r      *report

	sends    map[string][]resultRecord // result sends by task id
	terminal map[string]int            // result and timeout events by task id
	mended   map[mendedLine]int        // lines the start-up repairs appended
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

func check(h histories, s store, events []event, torn, kills int, mended []event, settled bool) *report {
	c := &checker{
		h: h, store: s, events: map[string][]event{},
		r:     &report{Kills: kills, CutKinds: map[string]int{}, MendedKinds: map[string]int{}},
		sends: map[string][]resultRecord{}, terminal: map[string]int{},
		mended: map[mendedLine]int{},
	}
	for _, m := range mended {
		c.mended[mendedLine{m.ID, m.Event}]++
		c.r.Mended++
		c.r.MendedKinds[m.Event]++
	}
	for _, ev := range events {
		c.events[ev.ID] = append(c.events[ev.ID], ev)
		switch ev.Event {
		case "result", "timeout":
			c.terminal[ev.ID]++
		case "requeue":
			c.r.Requeues++
		}
	}
	for _, rec := range h.results {
		c.sends[rec.ID] = append(c.sends[rec.ID], rec)
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
	c.claims()
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
	for tag, ids := range byTag {
		if len(ids) > 1 {
			c.r.fail(&c.r.Twins, "item %s is stored as %d tasks: %v", tag, len(ids), ids)
		}
	}
	for _, p := range c.h.posts {
		if p.Outcome != acked {
			c.r.Unacked++
			if ids := byTag[p.Tag]; len(ids) > 0 {
				c.r.UnackedExist++
				if p.Outcome == unsent {
					c.r.fail(&c.r.Disagree, "item %s was never sent (connection refused) but is stored as %v", p.Tag, ids)
				}
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

// results: at most one send per task was told accepted, the log has at most
// one terminal event per task, and the stored result is the accepted one
// (or, when nobody heard back, one that was sent and not refused).
func (c *checker) results() {
	for _, rec := range c.h.results {
		switch rec.Outcome {
		case accepted:
			c.r.Accepted++
		case rejected:
			c.r.Refused++
		default:
			c.r.Unknown++
		}
	}
	for id, n := range c.terminal {
		if n > 1 {
			c.r.fail(&c.r.DoubleFinished, "task %s has %d result/timeout events", id, n)
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
			c.r.fail(&c.r.DoubleFinished, "task %s accepted %d results: %v", id, len(won), won)
		}
		t, stored := c.store.tasks[id]
		if len(won) > 0 {
			if !c.logged(id, "result") {
				c.r.fail(&c.r.Disagree, "task %s: a result was accepted but no result event was logged", id)
			}
			if stored && (t.Status != "finished" || t.ResultTag != won[0].Tag) {
				c.r.fail(&c.r.DoubleFinished, "task %s accepted result %s from %s but holds %s result %q",
					id, won[0].Tag, won[0].Client, t.Status, t.ResultTag)
			}
		}
	}
	for id, t := range c.store.tasks {
		if t.Status != "finished" {
			continue
		}
		c.storedResult(id, t)
	}
}

// storedResult checks where a finished task's result came from.
func (c *checker) storedResult(id string, t storedTask) {
	var from []resultRecord
	for _, s := range c.sends[id] {
		if s.Tag == t.ResultTag {
			from = append(from, s)
		}
	}
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

// claims: every task handed to a worker was logged as claimed with the
// attempt number it was handed out with, and no claim was handed out twice.
func (c *checker) claims() {
	type claim struct {
		id       string
		attempts int
	}
	logged := map[claim]int{}
	for id, evs := range c.events {
		for _, ev := range evs {
			if ev.Event == "claimed" {
				logged[claim{id, ev.Attempts}]++
			}
		}
	}
	for k, n := range logged {
		if n > 1 {
			c.r.fail(&c.r.Disagree, "task %s logged %d claims with attempts %d", k.id, n, k.attempts)
		}
	}
	handed := map[claim][]string{}
	for _, rec := range c.h.claims {
		k := claim{rec.ID, rec.Attempts}
		handed[k] = append(handed[k], rec.Client)
		if logged[k] == 0 {
			c.r.fail(&c.r.Disagree, "task %s was handed to %s with attempts %d, which the log lacks", rec.ID, rec.Client, rec.Attempts)
		}
	}
	for k, clients := range handed {
		if len(clients) > 1 {
			c.r.fail(&c.r.DoubleFinished, "task %s was handed out twice with attempts %d: %v", k.id, k.attempts, clients)
		}
	}
}

func terminal(status string) bool { return status == "finished" || status == "failed" }

// lifecycle replays one task's events through the lifecycle of SPEC §5 and
// compares where they end with the store. A step the lifecycle does not
// allow from the state the log reached is a missing line: a crash cut it
// (counted as cut; whether anyone was told of it is checked in posts,
// results and claims). A step after the task was terminal (other than
// fetched and cleaned) is a bug whatever the crashes.
func (c *checker) lifecycle(id string) {
	status, attempts, claimer := "", 0, ""
	for _, ev := range c.events[id] {
		switch ev.Event {
		case "posted":
			if status != "" {
				c.r.fail(&c.r.Disagree, "task %s posted again after %s", id, status)
			}
		case "claimed", "progress", "requeue":
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
			if ev.Event == "claimed" {
				if ev.Attempts <= attempts {
					c.r.fail(&c.r.Disagree, "task %s claimed with attempts %d after attempts %d", id, ev.Attempts, attempts)
				}
				claimer = ev.Worker
			}
		case "result", "timeout":
			switch {
			case terminal(status):
				// Counted in results, as a second terminal event.
			case status == "":
				c.r.cut("posted")
			case c.mended[mendedLine{id, "result"}] > 0:
				// Its worker is the repair's guess: lateness is unknown.
			case ev.Event == "result" && (status == "pending" || claimer != ev.Worker):
				c.r.Late++
			}
		case "fetched", "cleaned":
			if !terminal(status) {
				c.r.cut("result")
			}
		default: // "failed": a task file was found corrupt
			c.r.fail(&c.r.Disagree, "task %s: %s event (status %s)", id, ev.Event, ev.Status)
		}
		status, attempts = ev.Status, ev.Attempts
	}

	t, ok := c.store.tasks[id]
	if !ok {
		return // presence has judged it
	}
	if t.Dir != "done" {
		c.r.fail(&c.r.Unfinished, "task %s is still %s after the drain", id, t.Status)
	}
	switch {
	case t.Status == status:
	case terminal(t.Status) && !terminal(status):
		// The terminal line is missing. If a client was told of the
		// result, results has already failed the run.
		if t.Status == "failed" {
			c.r.cut("timeout")
		} else {
			c.r.cut("result")
		}
	default:
		c.r.fail(&c.r.Disagree, "task %s is %s in the store but %q by its log (%s)", id, t.Status, status, c.trail(id))
	}
	if t.Fetched && !c.logged(id, "fetched") {
		c.r.cut("fetched")
	}
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
