package faults

import (
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
)

// The checks of SPEC §12: idempotent posts, batches, cancels, retries of
// dead letters and pauses, against the clients' histories, the store and
// the log.

// pauseSlack allows for a claim the server took before it paused the
// queue but logged with a time a little later than the pause's answer
// reached the manager (both clocks are this machine's).
const pauseSlack = 200 // ms

// keys: posts with one Idempotency-Key make one task. No two stored tasks
// share a key; every send answered with an id (201 for the first, 200 for
// a replay) was told the same id, the task that holds the key; a send with
// the key's own item is never a conflict.
func (c *checker) keys() {
	told := map[string][]string{} // the distinct ids told, by key
	for _, p := range c.h.posts {
		if p.Key == "" {
			continue
		}
		if p.Status == http.StatusConflict {
			c.r.fail(&c.r.Disagree, "a post of %s with key %s and its own item was answered 409 idempotency_conflict", p.Tag, p.Key)
		}
		if p.Outcome != acked {
			continue
		}
		c.r.Keyed++
		if p.Status == http.StatusOK {
			c.r.Replays++
		}
		if !slices.Contains(told[p.Key], p.ID) {
			told[p.Key] = append(told[p.Key], p.ID)
		}
	}
	held := map[string][]string{}
	for _, id := range slices.Sorted(maps.Keys(c.store.tasks)) {
		if t := c.store.tasks[id]; t.Key != "" {
			held[t.Key] = append(held[t.Key], id)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(held)) {
		if ids := held[key]; len(ids) > 1 {
			c.r.fail(&c.r.KeyTwins, "key %s is held by %d tasks: %v", key, len(ids), ids)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(told)) {
		ids := told[key]
		if len(ids) > 1 {
			c.r.fail(&c.r.KeyTwins, "posts with key %s were told %d different ids: %v", key, len(ids), ids)
		}
		for _, id := range ids {
			if t, ok := c.store.tasks[id]; ok && t.Key != key {
				c.r.fail(&c.r.KeyTwins, "task %s was told for key %s but holds key %q", id, key, t.Key)
			}
		}
	}
}

// batches: a batch answered 201 named an id for each item (posts then
// checks each, in order: the id at index i holds item i), all distinct;
// an unanswered batch may have made any of its tasks (posts counts them).
func (c *checker) batches() {
	type batch struct {
		outcome outcome
		status  int
		ids     []string
	}
	all := map[string]*batch{}
	for _, p := range c.h.posts {
		if p.Batch == "" {
			continue
		}
		b, ok := all[p.Batch]
		if !ok {
			b = &batch{outcome: p.Outcome, status: p.Status}
			all[p.Batch] = b
		}
		if p.Outcome == acked {
			b.ids = append(b.ids, p.ID)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(all)) {
		b := all[name]
		switch {
		case b.outcome == acked:
			c.r.Batches++
			seen := map[string]bool{}
			for _, id := range b.ids {
				if seen[id] {
					c.r.fail(&c.r.Disagree, "batch %s was told id %s twice", name, id)
				}
				seen[id] = true
			}
		case b.status == http.StatusCreated:
			c.r.fail(&c.r.Disagree, "batch %s was answered 201 without one id for each of its items", name)
		default:
			c.r.BatchesUnacked++
		}
	}
}

// opsOf lists the ops of kind on task id ("" for pause and resume), in the
// order they were sent.
func (c *checker) opsOf(kind, id string) []opRecord {
	var ops []opRecord
	for _, op := range c.h.ops {
		if op.Kind == kind && op.ID == id {
			ops = append(ops, op)
		}
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].SentAt < ops[j].SentAt })
	return ops
}

// retriedBetween reports whether a retry of id that may have happened was
// sent at or after from and before to (Unix ms).
func (c *checker) retriedBetween(id string, from, to int64) bool {
	return slices.ContainsFunc(c.opsOf(opRetry, id), func(op opRecord) bool {
		return op.Outcome != rejected && op.SentAt >= from && op.SentAt < to
	})
}

// loggedCount counts id's events of kind.
func (c *checker) loggedCount(id, kind string) int {
	n := 0
	for _, ev := range c.events[id] {
		if ev.Event == kind {
			n++
		}
	}
	return n
}

// cancelsAndRetries: an accepted cancel was logged and answered failed;
// unless a retry followed it, its task ends failed with error
// "cancelled", and no result sent after the cancel's answer was accepted.
// A refused cancel names a terminal status. An accepted retry was logged;
// a retry of a task whose cancel was accepted, with no retry since, finds
// it failed (a refusal then is a bug: nothing else takes a failed task out
// of failed). The log has no cancelled or retried line that no cancel or
// retry may have made.
func (c *checker) cancelsAndRetries() {
	for _, op := range c.h.ops {
		switch {
		case op.Kind == opCancel && op.Outcome == accepted:
			c.r.Cancels++
			c.acceptedCancel(op)
		case op.Kind == opCancel && op.Outcome == rejected:
			c.r.CancelsRefused++
			if !terminal(op.Status) {
				c.r.fail(&c.r.Disagree, "task %s: a cancel was refused with status %q", op.ID, op.Status)
			}
		case op.Kind == opCancel:
			c.r.CancelsUnknown++
		case op.Kind == opRetry && op.Outcome == accepted:
			c.r.Retries++
			if !c.logged(op.ID, "retried") {
				c.r.fail(&c.r.Disagree, "task %s: a retry was accepted but no retried line was logged", op.ID)
			}
		case op.Kind == opRetry && op.Outcome == rejected:
			c.r.RetriesRefused++
			c.refusedRetry(op)
		}
	}
	for _, evs := range c.events {
		for _, ev := range evs {
			if ev.Event == "cancelled" && ev.Worker != "" {
				c.r.CancelsHeld++
			}
		}
	}
	c.unasked(opCancel, "cancelled")
	c.unasked(opRetry, "retried")
}

// refusedRetry fails a retry refused as not failed after an accepted
// cancel with no retry since.
func (c *checker) refusedRetry(op opRecord) {
	var last *opRecord
	for _, cancel := range c.opsOf(opCancel, op.ID) {
		if cancel.Outcome == accepted && cancel.AckAt <= op.SentAt {
			last = &cancel
		}
	}
	if last != nil && !c.retriedBetween(op.ID, last.AckAt, op.SentAt) {
		c.r.fail(&c.r.Disagree, "task %s: a retry after an accepted cancel (and no retry since) was answered not_failed", op.ID)
	}
}

// unasked fails each task with more lines of event than it had sends of
// op kind that may have made them (all but the refused ones).
func (c *checker) unasked(kind, event string) {
	asked := map[string]int{}
	for _, op := range c.h.ops {
		if op.Kind == kind && op.Outcome != rejected {
			asked[op.ID]++
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.events)) {
		if n := c.loggedCount(id, event); n > asked[id] {
			c.r.fail(&c.r.Disagree, "task %s has %d %s lines, but only %d sends of %s may have made them", id, n, event, asked[id], kind)
		}
	}
}

func (c *checker) acceptedCancel(op opRecord) {
	id := op.ID
	if op.Status != "failed" {
		c.r.fail(&c.r.Disagree, "task %s: a cancel was accepted with status %q", id, op.Status)
	}
	if !c.logged(id, "cancelled") {
		c.r.fail(&c.r.Disagree, "task %s: a cancel was accepted but no cancelled line was logged", id)
	}
	for _, s := range c.sends[id] {
		if s.Outcome == accepted && s.SentAt > op.AckAt && !c.retriedBetween(id, op.AckAt, s.AckAt) {
			c.r.fail(&c.r.AfterCancel, "task %s: %s's %s %s, sent after a cancel was accepted and with no retry since, was accepted",
				id, s.Client, cmpOr(s.Kind, sendResult), s.Tag)
		}
	}
	if c.retriedBetween(id, op.AckAt, math.MaxInt64) {
		return
	}
	switch t, ok := c.store.tasks[id]; {
	case !ok:
	case t.Status == "finished":
		c.r.fail(&c.r.AfterCancel, "task %s was cancelled (accepted) and never retried, but holds result %s", id, t.ResultTag)
	case t.Status != "failed" || t.Error != "cancelled":
		c.r.fail(&c.r.Disagree, "task %s was cancelled (accepted) and never retried, but is %s with error %q", id, t.Status, t.Error)
	}
}

func cmpOr(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}

// pauses: from an answered pause until the next resume was sent, the
// queue hands out nothing: no claimed line of it is logged later than the
// pause's answer (give or take pauseSlack). That spans kills: the pause
// survives restarts.
func (c *checker) pauses() {
	toggles := append(c.opsOf(opPause, ""), c.opsOf(opResume, "")...)
	sort.SliceStable(toggles, func(i, j int) bool { return toggles[i].SentAt < toggles[j].SentAt })
	type span struct {
		queue      string
		from, till int64
	}
	var spans []span
	for i, op := range toggles {
		if op.Kind != opPause || op.Outcome != accepted {
			continue
		}
		c.r.Pauses++
		s := span{op.Queue, op.AckAt, math.MaxInt64}
		for _, next := range toggles[i+1:] {
			if next.Kind == opResume && next.Queue == op.Queue {
				s.till = next.SentAt
				break
			}
		}
		spans = append(spans, s)
	}
	for _, id := range slices.Sorted(maps.Keys(c.events)) {
		for _, ev := range c.events[id] {
			if ev.Event != "claimed" {
				continue
			}
			for _, s := range spans {
				if ev.Queue == s.queue && ev.At > s.from+c.opts.pauseSlack && ev.At < s.till {
					c.r.fail(&c.r.PausedClaims, "task %s was claimed (attempts %d, by %s) at %d, %d ms after the %s queue's pause was answered and before a resume was sent",
						id, ev.Attempts, ev.Worker, ev.At, ev.At-s.from, s.queue)
				}
			}
		}
	}
}
