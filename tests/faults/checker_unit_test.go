package faults

import (
	"slices"
	"strings"
	"testing"
)

// scenario is a checker's input, built small by hand. Unless a test says
// otherwise it is the end of a run: settled, nothing mended.
type scenario struct {
	h       histories
	store   store
	events  []event
	torn    int
	kills   int
	mended  []event
	settled bool
}

// finishedOnce is one task posted, claimed and finished by worker w with
// result r1, everyone told so, everything logged: nothing to report.
func finishedOnce() *scenario {
	return &scenario{
		h: histories{
			posts:   []postRecord{{Client: "p", Tag: "p-0", Outcome: acked, ID: "a"}},
			claims:  []claimRecord{{Client: "w", ID: "a", Attempts: 1}},
			results: []resultRecord{{Client: "w", ID: "a", Tag: "r1", Outcome: accepted}},
		},
		store: store{tasks: map[string]storedTask{
			"a": {ID: "a", Dir: "done", Status: "finished", ItemTag: "p-0", ResultTag: "r1", Attempts: 1},
		}},
		events: []event{
			{ID: "a", Event: "posted", Status: "pending"},
			{ID: "a", Event: "claimed", Status: "processing", Attempts: 1, Worker: "w"},
			{ID: "a", Event: "result", Status: "finished", Attempts: 1, Worker: "w"},
		},
		kills:   1,
		settled: true,
	}
}

func (s *scenario) check() *report {
	return check(s.h, s.store, runQueues, s.events, s.torn, s.kills, s.mended, s.settled)
}

// TestCheckerCatches: a checker that never complains proves nothing, so
// each way of breaking the promise is planted in a small scenario and must
// be counted where the summary shows it.
func TestCheckerCatches(t *testing.T) {
	t.Parallel()
	catches(t, finishedOnce, []plantCase{
		{"acked task gone", func(s *scenario) {
			delete(s.store.tasks, "a")
		}, func(r *report) int { return r.Lost }},
		{"acked task read as 404", func(s *scenario) {
			s.h.reads = append(s.h.reads, readRecord{Client: "p", ID: "a", Status: 404})
		}, func(r *report) int { return r.Lost }},
		{"two accepted results", func(s *scenario) {
			s.h.results = append(s.h.results, resultRecord{Client: "v", ID: "a", Tag: "r2", Outcome: accepted})
		}, func(r *report) int { return r.DoubleFinished }},
		{"two result events", func(s *scenario) {
			s.events = append(s.events, event{ID: "a", Event: "result", Status: "finished", Attempts: 1, Worker: "v"})
		}, func(r *report) int { return r.DoubleFinished }},
		{"result and timeout", func(s *scenario) {
			s.events = append(s.events, event{ID: "a", Event: "timeout", Status: "failed", Attempts: 1})
		}, func(r *report) int { return r.DoubleFinished }},
		{"stored result is not the accepted one", func(s *scenario) {
			s.h.results = append(s.h.results, resultRecord{Client: "v", ID: "a", Tag: "r2", Outcome: unknown})
			t := s.store.tasks["a"]
			t.ResultTag = "r2"
			s.store.tasks["a"] = t
		}, func(r *report) int { return r.DoubleFinished }},
		{"refused result kept", func(s *scenario) {
			s.h.results = []resultRecord{
				{Client: "w", ID: "a", Tag: "r1", Outcome: unknown},
				{Client: "v", ID: "a", Tag: "r2", Outcome: rejected, Status: "finished"},
			}
			t := s.store.tasks["a"]
			t.ResultTag = "r2"
			s.store.tasks["a"] = t
		}, func(r *report) int { return r.DoubleFinished }},
		{"claimed after finished", func(s *scenario) {
			s.events = append(s.events, event{ID: "a", Event: "claimed", Status: "processing", Attempts: 2, Worker: "v"})
		}, func(r *report) int { return r.DoubleFinished }},
		{"claim handed out twice", func(s *scenario) {
			s.h.claims = append(s.h.claims, claimRecord{Client: "v", ID: "a", Attempts: 1})
		}, func(r *report) int { return r.DoubleFinished }},
		{"task not terminal", func(s *scenario) {
			s.store.tasks["a"] = storedTask{ID: "a", Dir: "processing", Status: "processing", ItemTag: "p-0", Attempts: 1}
			s.h.results = nil
			s.events = s.events[:2]
		}, func(r *report) int { return r.Unfinished }},
		{"item stored twice", func(s *scenario) {
			s.store.tasks["b"] = storedTask{ID: "b", Dir: "done", Status: "finished", ItemTag: "p-0", ResultTag: "r1"}
		}, func(r *report) int { return r.Twins }},
		{"accepted result unlogged", func(s *scenario) {
			s.events = s.events[:2]
		}, func(r *report) int { return r.Disagree }},
		{"acknowledged post unlogged", func(s *scenario) {
			s.events = s.events[1:]
		}, func(r *report) int { return r.Disagree }},
		{"handed-out claim unlogged", func(s *scenario) {
			s.h.claims[0].Attempts = 2
		}, func(r *report) int { return r.Disagree }},
		{"store and log disagree", func(s *scenario) {
			t := s.store.tasks["a"]
			t.Status, t.ResultTag = "failed", ""
			s.store.tasks["a"] = t
			s.h.results = nil
		}, func(r *report) int { return r.Disagree }},
		{"more cuts than kills", func(s *scenario) {
			s.events = s.events[:2]
			s.h.results[0].Outcome = unknown
			s.kills = 0
		}, func(r *report) int { return r.Disagree }},
		{"stored result nobody sent", func(s *scenario) {
			t := s.store.tasks["a"]
			t.ResultTag = "r9"
			s.store.tasks["a"] = t
			s.h.results[0].Outcome = unknown
		}, func(r *report) int { return r.Disagree }},
		{"torn log line", func(s *scenario) { s.torn = 1 }, func(r *report) int { return r.Torn }},
		{"result event names another worker", func(s *scenario) {
			s.events[2].Worker = "v"
		}, func(r *report) int { return r.Disagree }},
		{"a line still cut at the end", func(s *scenario) {
			s.events = s.events[:2]
			s.h.results[0].Outcome = unknown
		}, func(r *report) int { return r.Disagree }},
		{"two lines of one task mended after one kill", func(s *scenario) {
			s.mended = []event{{ID: "a", Event: "result"}, {ID: "a", Event: "claimed"}}
		}, func(r *report) int { return r.Disagree }},
		{"debris in the store", func(s *scenario) {
			s.store.debris = []string{"jobs/pending/.a.json.tmp-1"}
		}, func(r *report) int { return r.Debris }},
	})
}

// plantCase is one way of breaking a rule, planted in a clean scenario,
// and the counter of the report that must show it.
type plantCase struct {
	name    string
	plant   func(s *scenario)
	counter func(r *report) int
}

// catches checks that base is clean and that each case, planted in it, is
// caught: counted where the summary shows it and told as a problem.
func catches(t *testing.T, base func() *scenario, cases []plantCase) {
	t.Helper()
	if r := base().check(); len(r.Problems) > 0 || r.Cut > 0 {
		t.Fatalf("the clean scenario reports %v (cut %d)", r.Problems, r.Cut)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := base()
			c.plant(s)
			r := s.check()
			if c.counter(r) == 0 || len(r.Problems) == 0 {
				t.Errorf("not caught: %s\nproblems: %s", r.Summary(), strings.Join(r.Problems, "; "))
			}
		})
	}
}

// TestCheckerForgivesCrashCuts: what a crash may do without breaking the
// promise is counted, not failed, when the state is read before a server
// has started again: a result stored but not logged and never
// acknowledged, a post stored but not logged and never acknowledged.
func TestCheckerForgivesCrashCuts(t *testing.T) {
	t.Parallel()
	s := finishedOnce()
	s.settled = false
	s.events = s.events[:2]
	s.h.results[0].Outcome = unknown
	s.h.posts = append(s.h.posts, postRecord{Client: "p", Tag: "p-1", Outcome: unknown})
	s.store.tasks["b"] = storedTask{ID: "b", Dir: "done", Status: "finished", ItemTag: "p-1", ResultTag: "r2", Attempts: 1}
	s.h.results = append(s.h.results, resultRecord{Client: "w", ID: "b", Tag: "r2", Outcome: accepted})
	s.h.claims = append(s.h.claims, claimRecord{Client: "w", ID: "b", Attempts: 1})
	s.events = append(s.events,
		event{ID: "b", Event: "claimed", Status: "processing", Attempts: 1, Worker: "w"},
		event{ID: "b", Event: "result", Status: "finished", Attempts: 1, Worker: "w"},
	)
	s.kills = 2
	r := s.check()
	if len(r.Problems) > 0 {
		t.Fatalf("problems: %v", r.Problems)
	}
	if r.Cut != 2 || r.UnackedExist != 1 {
		t.Errorf("cut = %d, unacked-exist = %d; want 2 and 1", r.Cut, r.UnackedExist)
	}
}

// TestCheckerAcceptsMendedLines: the same two cuts, after a start-up repair
// appended both lines again, leave nothing cut at the end. A repaired
// result line may name the claim's holder rather than the sender (the
// store does not keep who sent it); one the repair did not write may not.
func TestCheckerAcceptsMendedLines(t *testing.T) {
	t.Parallel()
	s := finishedOnce()
	s.h.results[0].Outcome = unknown
	s.events[2].Worker = "" // the repair found the task pending: nobody
	s.h.posts = append(s.h.posts, postRecord{Client: "p", Tag: "p-1", Outcome: unknown})
	s.store.tasks["b"] = storedTask{ID: "b", Dir: "done", Status: "finished", ItemTag: "p-1", ResultTag: "r2", Attempts: 1}
	s.h.results = append(s.h.results, resultRecord{Client: "w", ID: "b", Tag: "r2", Outcome: accepted})
	s.h.claims = append(s.h.claims, claimRecord{Client: "w", ID: "b", Attempts: 1})
	s.events = append(s.events,
		event{ID: "b", Event: "posted", Status: "pending"}, // appended at the restart, before any claim
		event{ID: "b", Event: "claimed", Status: "processing", Attempts: 1, Worker: "w"},
		event{ID: "b", Event: "result", Status: "finished", Attempts: 1, Worker: "w"},
	)
	s.mended = []event{{ID: "a", Event: "result"}, {ID: "b", Event: "posted"}}
	s.kills = 2
	r := s.check()
	if len(r.Problems) > 0 {
		t.Fatalf("problems: %v", r.Problems)
	}
	if r.Mended != 2 || r.MendedKinds["result"] != 1 || r.MendedKinds["posted"] != 1 {
		t.Errorf("mended = %d %v; want result:1 posted:1", r.Mended, r.MendedKinds)
	}

	s.mended = s.mended[1:]
	if r := s.check(); r.Disagree == 0 {
		t.Errorf("a result line naming nobody, not mended, is not caught: %s", r.Summary())
	}
}

// retriedOnce is one task on the retry queue (maxAttempts 3, backoff
// 0.5-1 s then 1-2 s) posted with a 500 ms delay, claimed after it, given
// back by w with a 300 ms delay (the backoff, longer, wins), claimed again
// after that by v and finished: nothing to report.
func retriedOnce() *scenario {
	return &scenario{
		h: histories{
			posts:    []postRecord{{Client: "p", Queue: retryQueue, Tag: "p-0", Outcome: acked, ID: "b", SentAt: 1000, Delay: 500, Priority: 3}},
			claims:   []claimRecord{{Client: "w", ID: "b", Attempts: 1}, {Client: "v", ID: "b", Attempts: 2}},
			releases: []releaseRecord{{Client: "w", ID: "b", Attempts: 1, Delay: 300, Tag: "r1", Outcome: accepted, Status: "pending"}},
			results:  []resultRecord{{Client: "v", Kind: sendResult, ID: "b", Tag: "r2", Outcome: accepted}},
		},
		store: store{tasks: map[string]storedTask{
			"b": {ID: "b", Queue: retryQueue, Dir: "done", Status: "finished", ItemTag: "p-0", ResultTag: "r2", FailureTag: "r1",
				Attempts: 2, NotBefore: ptr(int64(2300)), Priority: 3},
		}},
		events: []event{
			{ID: "b", Queue: retryQueue, Event: "posted", Status: "pending", At: 1001},
			{ID: "b", Queue: retryQueue, Event: "claimed", Status: "processing", Attempts: 1, Worker: "w", At: 1600},
			{ID: "b", Queue: retryQueue, Event: "released", Status: "pending", Attempts: 1, Worker: "w", At: 1700},
			{ID: "b", Queue: retryQueue, Event: "claimed", Status: "processing", Attempts: 2, Worker: "v", At: 2300},
			{ID: "b", Queue: retryQueue, Event: "result", Status: "finished", Attempts: 2, Worker: "v", At: 2400},
		},
		kills:   1,
		settled: true,
	}
}

// deadLetter is one task on the retry queue claimed three times: its lease
// lapsed twice (each claim after the backoff) and its third holder gave it
// back, which, as the last allowed attempt, failed it with "attempts".
func deadLetter() *scenario {
	ev := func(kind, status string, attempts int, worker string, at int64) event {
		return event{ID: "c", Queue: retryQueue, Event: kind, Status: status, Attempts: attempts, Worker: worker, At: at}
	}
	s := &scenario{
		h: histories{
			posts:    []postRecord{{Client: "p", Queue: retryQueue, Tag: "p-1", Outcome: acked, ID: "c", SentAt: 1000}},
			claims:   []claimRecord{{Client: "w", ID: "c", Attempts: 1}, {Client: "w", ID: "c", Attempts: 2}, {Client: "v", ID: "c", Attempts: 3}},
			releases: []releaseRecord{{Client: "v", ID: "c", Attempts: 3, Outcome: accepted, Status: "failed"}},
		},
		store: store{tasks: map[string]storedTask{
			"c": {ID: "c", Queue: retryQueue, Dir: "done", Status: "failed", Error: "attempts", ItemTag: "p-1", Attempts: 3, NotBefore: ptr(int64(6000))},
		}},
		events: []event{
			ev("posted", "pending", 0, "", 1001),
			ev("claimed", "processing", 1, "w", 1002),
			ev("requeue", "pending", 1, "w", 3000),
			ev("claimed", "processing", 2, "w", 3500),
			ev("requeue", "pending", 2, "w", 5000),
			ev("claimed", "processing", 3, "v", 6000),
			ev("failed", "failed", 3, "v", 6100),
		},
		kills:   1,
		settled: true,
	}
	s.events[6].Error = "attempts"
	return s
}

func ptr[T any](v T) *T { return &v }

// TestCheckerCatchesRetryRules: each rule of SPEC §11 the harness checks
// is broken in a small scenario and must be caught.
func TestCheckerCatchesRetryRules(t *testing.T) {
	t.Parallel()
	setAt := func(s *scenario, i int, at int64) { s.events[i].At = at }
	storeB := func(s *scenario, f func(t *storedTask)) {
		t := s.store.tasks["b"]
		f(&t)
		s.store.tasks["b"] = t
	}
	cases := []struct {
		name    string
		base    func() *scenario
		plant   func(s *scenario)
		counter func(r *report) int
	}{
		{"claimed before its post's delay", retriedOnce, func(s *scenario) { setAt(s, 1, 1400) }, func(r *report) int { return r.Early }},
		{"claimed before the time its post named", retriedOnce, func(s *scenario) {
			s.h.posts[0].Delay, s.h.posts[0].NotBefore = 0, 1700
		}, func(r *report) int { return r.Early }},
		{"claimed before the backoff", retriedOnce, func(s *scenario) {
			setAt(s, 3, 2150)
			storeB(s, func(t *storedTask) { t.NotBefore = ptr(int64(2150)) })
		}, func(r *report) int { return r.Early }},
		{"claimed before a lease lapse's backoff", deadLetter, func(s *scenario) {
			s.events[5].At = 5900 // 1 s after the requeue after claim 2
			s.store.tasks["c"] = storedTask{ID: "c", Queue: retryQueue, Dir: "done", Status: "failed", Error: "attempts", ItemTag: "p-1", Attempts: 3}
		}, func(r *report) int { return r.Early }},
		{"claimed before the give-back's delay", retriedOnce, func(s *scenario) {
			s.h.releases[0].Delay = 1000
		}, func(r *report) int { return r.Early }},
		{"claimed before the notBefore it holds", retriedOnce, func(s *scenario) {
			storeB(s, func(t *storedTask) { t.NotBefore = ptr(int64(2350)) })
		}, func(r *report) int { return r.Early }},
		{"handed out more than maxAttempts times", deadLetter, func(s *scenario) {
			s.h.claims = append(s.h.claims, claimRecord{Client: "v", ID: "c", Attempts: 4})
		}, func(r *report) int { return r.OverAttempts }},
		{"logged more claims than maxAttempts", deadLetter, func(s *scenario) {
			e := s.events
			s.events = append(e[:6:6], event{ID: "c", Queue: retryQueue, Event: "requeue", Status: "pending", Attempts: 3, At: 8000},
				event{ID: "c", Queue: retryQueue, Event: "claimed", Status: "processing", Attempts: 4, Worker: "v", At: 9000}, e[6])
			s.events[len(s.events)-1].Attempts = 4
		}, func(r *report) int { return r.OverAttempts }},
		{"stored attempts over maxAttempts", retriedOnce, func(s *scenario) {
			storeB(s, func(t *storedTask) { t.Attempts = 4 })
		}, func(r *report) int { return r.OverAttempts }},
		{"claim not durable before it was answered", retriedOnce, func(s *scenario) {
			storeB(s, func(t *storedTask) { t.Attempts = 1 })
		}, func(r *report) int { return r.OverAttempts }},
		{"give-back of the last claim told pending", deadLetter, func(s *scenario) {
			s.h.releases[0].Status = "pending"
		}, func(r *report) int { return r.OverAttempts }},
		{"dead letter short of maxAttempts", retriedOnce, func(s *scenario) {
			storeB(s, func(t *storedTask) { t.Status, t.Error, t.ResultTag = "failed", "attempts", "" })
			s.h.results[0].Outcome = unknown
			s.events[4] = event{ID: "b", Queue: retryQueue, Event: "failed", Status: "failed", Error: "attempts", Attempts: 2, At: 2400}
		}, func(r *report) int { return r.Disagree }},
		{"give-back short of the last claim told failed", retriedOnce, func(s *scenario) {
			s.h.releases[0].Status = "failed"
		}, func(r *report) int { return r.Disagree }},
		{"accepted give-back unlogged", retriedOnce, func(s *scenario) {
			s.events = slices.Delete(s.events, 2, 3)
		}, func(r *report) int { return r.Disagree }},
		{"result and failure both accepted", retriedOnce, func(s *scenario) {
			s.h.results = append(s.h.results, resultRecord{Client: "w", Kind: sendFail, ID: "b", Tag: "r3", Outcome: accepted})
		}, func(r *report) int { return r.DoubleFinished }},
		{"failed after finished", retriedOnce, func(s *scenario) {
			s.events = append(s.events, event{ID: "b", Queue: retryQueue, Event: "failed", Status: "failed", Error: "failed", Attempts: 2, At: 2500})
		}, func(r *report) int { return r.DoubleFinished }},
		{"released after finished", retriedOnce, func(s *scenario) {
			s.events = append(s.events, event{ID: "b", Queue: retryQueue, Event: "released", Status: "pending", Attempts: 2, At: 2500})
		}, func(r *report) int { return r.DoubleFinished }},
		{"accepted failure, stored finished", retriedOnce, func(s *scenario) {
			s.h.results[0].Outcome = unknown
			s.h.results = append(s.h.results, resultRecord{Client: "v", Kind: sendFail, ID: "b", Tag: "r3", Outcome: accepted})
		}, func(r *report) int { return r.DoubleFinished }},
		{"stored failure nobody sent", retriedOnce, func(s *scenario) {
			storeB(s, func(t *storedTask) { t.Status, t.Error, t.ResultTag, t.FailureTag = "failed", "failed", "", "r9" })
			s.h.results[0].Outcome = unknown
			s.events[4] = event{ID: "b", Queue: retryQueue, Event: "failed", Status: "failed", Error: "failed", Attempts: 2, At: 2400}
		}, func(r *report) int { return r.Disagree }},
		{"a priority class not drained", retriedOnce, func(s *scenario) {
			storeB(s, func(t *storedTask) { t.Dir, t.Status, t.ResultTag = "pending", "pending", "" })
			s.h.results = nil
			s.events = s.events[:3]
		}, func(r *report) int { return r.Starved }},
	}
	for _, base := range []func() *scenario{retriedOnce, deadLetter} {
		if r := base().check(); len(r.Problems) > 0 || r.Cut > 0 {
			t.Fatalf("a clean scenario reports %v (cut %d)", r.Problems, r.Cut)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := c.base()
			c.plant(s)
			r := s.check()
			if c.counter(r) == 0 || len(r.Problems) == 0 {
				t.Errorf("not caught: %s\nproblems: %s", r.Summary(), strings.Join(r.Problems, "; "))
			}
		})
	}
}

// TestCheckerCountsRetryOutcomes: the clean scenarios' outcomes are
// counted where the summary shows them, and their waits were checked.
func TestCheckerCountsRetryOutcomes(t *testing.T) {
	t.Parallel()
	r := retriedOnce().check()
	if r.Finished != 1 || r.Releases != 1 || r.Waited != 2 || r.Priorities[3] != [2]int{1, 1} {
		t.Errorf("retried once: %s", r.Summary())
	}
	r = deadLetter().check()
	if r.DeadLetters != 1 || r.Releases != 1 || r.Waited != 2 {
		t.Errorf("dead letter: %s", r.Summary())
	}
}

// TestCheckerClockSlack: on PostgreSQL a claim's stamp is the database's
// time as its server measured it, so a claim stamped up to clockSlack ms
// before the client's clock allowed is forgiven, and one further out is
// still caught.
func TestCheckerClockSlack(t *testing.T) {
	t.Parallel()
	// retriedOnce's post: sent at 1000 with a delay of 500, so its task may
	// be claimed from 1499 (a ms allows for a delay not whole in ms).
	for _, tc := range []struct {
		at, slack int64
		early     int
	}{
		{1499, 0, 0},
		{1497, 0, 1},
		{1497, 1, 1},
		{1497, 2, 0},
		{1490, 2, 1},
	} {
		s := retriedOnce()
		s.events[1].At = tc.at
		r := checkWith(checkOptions{clockSlack: tc.slack}, s.h, s.store, runQueues, s.events, s.torn, s.kills, s.mended, s.settled)
		if r.Early != tc.early {
			t.Errorf("claim at %d with clockSlack %d: early = %d, want %d (%v)", tc.at, tc.slack, r.Early, tc.early, r.Problems)
		}
	}
}
