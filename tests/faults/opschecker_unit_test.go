package faults

import (
	"strings"
	"testing"
)

// opsOnce is the ops queue (SPEC §12) at the end of a clean run: a keyed
// post answered 201 and its replay 200, both with id k; a batch of two
// (b0, b1); b0 cancelled while pending, retried, claimed and finished;
// b1 claimed, cancelled while processing (its worker's result refused);
// the queue paused and resumed with nothing claimed between; a cancel of
// the finished k refused. Nothing to report.
func opsOnce() *scenario {
	ev := func(id, kind, status string, attempts int, worker string, at int64) event {
		return event{ID: id, Queue: opsQueue, Event: kind, Status: status, Attempts: attempts, Worker: worker, At: at}
	}
	return &scenario{
		h: histories{
			posts: []postRecord{
				{Client: "kp", Queue: opsQueue, Tag: "kp-0", Key: "k-kp-0", Outcome: acked, ID: "k", Status: 201, SentAt: 1000},
				{Client: "kp", Queue: opsQueue, Tag: "kp-0", Key: "k-kp-0", Outcome: acked, ID: "k", Status: 200, SentAt: 1100},
				{Client: "bp", Queue: opsQueue, Tag: "bp-0-0", Batch: "bp-0", Outcome: acked, ID: "b0", Status: 201, SentAt: 1200},
				{Client: "bp", Queue: opsQueue, Tag: "bp-0-1", Batch: "bp-0", Outcome: acked, ID: "b1", Status: 201, SentAt: 1200},
			},
			claims: []claimRecord{{Client: "w", ID: "k", Attempts: 1}, {Client: "w", ID: "b1", Attempts: 1}, {Client: "w", ID: "b0", Attempts: 1}},
			results: []resultRecord{
				{Client: "w", ID: "k", Tag: "r1", Outcome: accepted, SentAt: 1500, AckAt: 1510},
				{Client: "w", ID: "b1", Tag: "r3", Outcome: rejected, Status: "failed", SentAt: 2100, AckAt: 2110},
				{Client: "w", ID: "b0", Tag: "r2", Outcome: accepted, SentAt: 2500, AckAt: 2510},
			},
			ops: []opRecord{
				{Client: "m", Kind: opCancel, Queue: opsQueue, ID: "b0", Outcome: accepted, Status: "failed", Code: 200, SentAt: 1300, AckAt: 1310},
				{Client: "m", Kind: opRetry, Queue: opsQueue, ID: "b0", Outcome: accepted, Code: 200, SentAt: 1400, AckAt: 1410},
				{Client: "m", Kind: opCancel, Queue: opsQueue, ID: "b1", Outcome: accepted, Status: "failed", Code: 200, SentAt: 2000, AckAt: 2010},
				{Client: "m", Kind: opPause, Queue: opsQueue, Outcome: accepted, Code: 200, SentAt: 3000, AckAt: 3010},
				{Client: "m", Kind: opResume, Queue: opsQueue, Outcome: accepted, Code: 200, SentAt: 4000, AckAt: 4010},
				{Client: "m", Kind: opCancel, Queue: opsQueue, ID: "k", Outcome: rejected, Status: "finished", Code: 200, SentAt: 4100, AckAt: 4110},
			},
		},
		store: store{tasks: map[string]storedTask{
			"k":  {ID: "k", Queue: opsQueue, Dir: "done", Status: "finished", ItemTag: "kp-0", ResultTag: "r1", Attempts: 1, Key: "k-kp-0"},
			"b0": {ID: "b0", Queue: opsQueue, Dir: "done", Status: "finished", ItemTag: "bp-0-0", ResultTag: "r2", Attempts: 1},
			"b1": {ID: "b1", Queue: opsQueue, Dir: "done", Status: "failed", Error: "cancelled", ItemTag: "bp-0-1", Attempts: 1},
		}},
		events: []event{
			ev("k", "posted", "pending", 0, "", 1001),
			ev("b0", "posted", "pending", 0, "", 1201),
			ev("b1", "posted", "pending", 0, "", 1201),
			ev("b0", "cancelled", "failed", 0, "", 1305),
			ev("b0", "retried", "pending", 0, "", 1405),
			ev("k", "claimed", "processing", 1, "w", 1450),
			ev("k", "result", "finished", 1, "w", 1505),
			ev("b1", "claimed", "processing", 1, "w", 1900),
			ev("b1", "cancelled", "failed", 1, "w", 2005),
			ev("b0", "claimed", "processing", 1, "w", 2400),
			ev("b0", "result", "finished", 1, "w", 2505),
		},
		kills:   1,
		settled: true,
	}
}

// TestCheckerCatchesOpsRules: each rule of SPEC §12 the harness checks is
// broken in a small scenario and must be caught.
func TestCheckerCatchesOpsRules(t *testing.T) {
	t.Parallel()
	storeTask := func(s *scenario, id string, f func(t *storedTask)) {
		t := s.store.tasks[id]
		f(&t)
		s.store.tasks[id] = t
	}
	catches(t, opsOnce, []plantCase{
		// Idempotent posts.
		{"a replay names another id", func(s *scenario) {
			s.h.posts[1].ID = "k2"
			s.store.tasks["k2"] = storedTask{ID: "k2", Queue: opsQueue, Dir: "done", Status: "finished", ItemTag: "kp-0", Key: "k-kp-0"}
		}, func(r *report) int { return r.KeyTwins }},
		{"two tasks hold one key", func(s *scenario) {
			storeTask(s, "b1", func(t *storedTask) { t.Key = "k-kp-0" })
		}, func(r *report) int { return r.KeyTwins }},
		{"the acknowledged task lacks its key", func(s *scenario) {
			storeTask(s, "k", func(t *storedTask) { t.Key = "" })
		}, func(r *report) int { return r.KeyTwins }},
		{"a resend of the same item is a conflict", func(s *scenario) {
			s.h.posts[1].Outcome, s.h.posts[1].ID, s.h.posts[1].Status = unknown, "", 409
		}, func(r *report) int { return r.Disagree }},
		{"a lost post resent with its key made a twin", func(s *scenario) {
			s.h.posts[0].Outcome, s.h.posts[0].ID, s.h.posts[0].Status = unknown, "", 0
			s.store.tasks["k2"] = storedTask{ID: "k2", Queue: opsQueue, Dir: "done", Status: "finished", ItemTag: "kp-0", Key: "k-kp-0"}
		}, func(r *report) int { return r.Twins }},
		// Batches.
		{"a batch's ids out of order", func(s *scenario) {
			s.h.posts[2].ID, s.h.posts[3].ID = "b1", "b0"
		}, func(r *report) int { return r.Disagree }},
		{"a task of an acknowledged batch gone", func(s *scenario) {
			delete(s.store.tasks, "b1")
		}, func(r *report) int { return r.Lost }},
		{"a batch answered 201 with too few ids", func(s *scenario) {
			for i := 2; i < 4; i++ {
				s.h.posts[i].Outcome, s.h.posts[i].ID = unknown, "" // still Status 201
			}
		}, func(r *report) int { return r.Disagree }},
		{"a task nobody posted", func(s *scenario) {
			s.store.tasks["x"] = storedTask{ID: "x", Queue: opsQueue, Dir: "done", Status: "failed", Error: "cancelled", ItemTag: "bp-0-7"}
		}, func(r *report) int { return r.Phantoms }},
		// Cancels.
		{"a result accepted after an accepted cancel", func(s *scenario) {
			s.h.results[1].Outcome, s.h.results[1].Status = accepted, ""
		}, func(r *report) int { return r.AfterCancel }},
		{"a cancelled task, never retried, finished", func(s *scenario) {
			storeTask(s, "b1", func(t *storedTask) { t.Status, t.Error, t.ResultTag = "finished", "", "r3" })
			s.events[find(s, "b1", "cancelled")] = event{ID: "b1", Queue: opsQueue, Event: "result", Status: "finished", Attempts: 1, Worker: "w", At: 2005}
			s.h.results[1].Outcome = unknown
		}, func(r *report) int { return r.AfterCancel }},
		{"an accepted cancel unlogged", func(s *scenario) {
			i := find(s, "b1", "cancelled")
			s.events[i].Event, s.events[i].Error = "failed", "failed"
			storeTask(s, "b1", func(t *storedTask) { t.Error = "failed" })
		}, func(r *report) int { return r.Disagree }},
		{"a cancelled line nobody asked for", func(s *scenario) {
			s.h.ops[2].Outcome = rejected
		}, func(r *report) int { return r.Disagree }},
		{"a cancel of a finished task logged", func(s *scenario) {
			s.events = append(s.events, event{ID: "k", Queue: opsQueue, Event: "cancelled", Status: "failed", Attempts: 1, At: 4105})
			s.h.ops[5].Outcome, s.h.ops[5].Status = accepted, "failed"
		}, func(r *report) int { return r.DoubleFinished }},
		{"a cancel refused for a task not terminal", func(s *scenario) {
			s.h.ops[5].Status = "processing"
		}, func(r *report) int { return r.Disagree }},
		{"store and log disagree on the error", func(s *scenario) {
			storeTask(s, "b1", func(t *storedTask) { t.Error = "attempts" })
		}, func(r *report) int { return r.Disagree }},
		// Retries.
		{"a retry of a cancelled task refused", func(s *scenario) {
			s.h.ops = append(s.h.ops, opRecord{Client: "m", Kind: opRetry, Queue: opsQueue, ID: "b1", Outcome: rejected, Code: 409, SentAt: 5000, AckAt: 5010})
		}, func(r *report) int { return r.Disagree }},
		{"an accepted retry unlogged", func(s *scenario) {
			s.h.ops = append(s.h.ops, opRecord{Client: "m", Kind: opRetry, Queue: opsQueue, ID: "b1", Outcome: accepted, Code: 200, SentAt: 5000, AckAt: 5010})
		}, func(r *report) int { return r.Disagree }},
		{"a retried line nobody asked for", func(s *scenario) {
			s.h.ops[1].Outcome = rejected
		}, func(r *report) int { return r.Disagree }},
		{"a retried task finished twice", func(s *scenario) {
			s.events = append(s.events, event{ID: "b0", Queue: opsQueue, Event: "result", Status: "finished", Attempts: 1, Worker: "v", At: 2600})
		}, func(r *report) int { return r.DoubleFinished }},
		{"a finished task retried", func(s *scenario) {
			s.events = append(s.events, event{ID: "k", Queue: opsQueue, Event: "retried", Status: "pending", At: 4200})
			s.h.ops = append(s.h.ops, opRecord{Client: "m", Kind: opRetry, Queue: opsQueue, ID: "k", Outcome: accepted, Code: 200, SentAt: 4150, AckAt: 4210})
		}, func(r *report) int { return r.DoubleFinished }},
		{"a claim handed out twice in one life", func(s *scenario) {
			s.h.claims = append(s.h.claims, claimRecord{Client: "v", ID: "k", Attempts: 1})
		}, func(r *report) int { return r.DoubleFinished }},
		// Pauses.
		{"claimed while paused", func(s *scenario) {
			s.events[find(s, "k", "claimed")].At = 3500
			s.events[find(s, "k", "result")].At = 3600
		}, func(r *report) int { return r.PausedClaims }},
		{"claimed after a restart while paused", func(s *scenario) {
			s.h.ops = s.h.ops[:4] // no resume until the end: the pause spans the rest
			s.events[find(s, "k", "claimed")].At = 9000
		}, func(r *report) int { return r.PausedClaims }},
	})
}

// TestCheckerCountsOps: the clean scenario's operations are counted where
// the summary shows them, and what the checker allows is allowed: a claim
// within pauseSlack of the pause's answer (taken before it), a second
// claim with attempts 1 after a retry, a batch without an answer of which
// one task exists.
func TestCheckerCountsOps(t *testing.T) {
	t.Parallel()
	r := opsOnce().check()
	if r.Keyed != 2 || r.Replays != 1 || r.Batches != 1 || r.Cancels != 2 || r.CancelsRefused != 1 ||
		r.Retries != 1 || r.Cancelled != 1 || r.Pauses != 1 || r.Finished != 2 {
		t.Errorf("counts: %s", r.Summary())
	}

	s := opsOnce()
	s.events[5].At = 3010 + pauseSlack // k's claim, taken as the pause came
	s.events[find(s, "k", "result")].At = 3300
	// b0 was claimed with attempts 1 before its cancel as well.
	s.h.claims = append(s.h.claims, claimRecord{Client: "v", ID: "b0", Attempts: 1})
	s.events = append(s.events[:3:3], append([]event{{ID: "b0", Queue: opsQueue, Event: "claimed", Status: "processing", Attempts: 1, Worker: "v", At: 1250}}, s.events[3:]...)...)
	s.h.posts = append(s.h.posts,
		postRecord{Client: "bp", Queue: opsQueue, Tag: "bp-1-0", Batch: "bp-1", Outcome: unknown},
		postRecord{Client: "bp", Queue: opsQueue, Tag: "bp-1-1", Batch: "bp-1", Outcome: unknown})
	s.store.tasks["c"] = storedTask{ID: "c", Queue: opsQueue, Dir: "done", Status: "failed", Error: "cancelled", ItemTag: "bp-1-1"}
	s.h.ops = append(s.h.ops, opRecord{Client: "m", Kind: opCancel, Queue: opsQueue, ID: "c", Outcome: unknown, SentAt: 1260, AckAt: 1270})
	s.events = append(s.events,
		event{ID: "c", Queue: opsQueue, Event: "posted", Status: "pending", At: 1250},
		event{ID: "c", Queue: opsQueue, Event: "cancelled", Status: "failed", At: 1265})
	if r := s.check(); len(r.Problems) > 0 {
		t.Errorf("problems: %v", r.Problems)
	} else if r.BatchesUnacked != 1 || r.UnackedExist != 1 || r.CancelsUnknown != 1 {
		t.Errorf("counts: %s", r.Summary())
	}
}

// TestStampedBackwards: a line stamped before its task's line before it is
// found, whatever lines of other tasks come between.
func TestStampedBackwards(t *testing.T) {
	t.Parallel()
	evs := []event{{ID: "a", Event: "posted", At: 10}, {ID: "b", Event: "posted", At: 5}, {ID: "a", Event: "claimed", At: 9}, {ID: "b", Event: "claimed", At: 5}}
	if got := stampedBackwards(evs); len(got) != 1 || !strings.Contains(got[0], "task a") {
		t.Errorf("got %v, want task a's claim", got)
	}
	if r := opsOnce().check(); r.Backwards != 0 {
		t.Errorf("the clean scenario counts %d lines stamped backwards", r.Backwards)
	}
}

// find is the index of task id's first line of kind in s.
func find(s *scenario, id, kind string) int {
	for i, ev := range s.events {
		if ev.ID == id && ev.Event == kind {
			return i
		}
	}
	panic("no " + kind + " line of " + id)
}
