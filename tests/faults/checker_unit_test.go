package faults

import (
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
	cases := []struct {
		name    string
		plant   func(s *scenario)
		counter func(r *report) int
	}{
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
	}
	if r := finishedOnce().check(); len(r.Problems) > 0 || r.Cut > 0 {
		t.Fatalf("the clean scenario reports %v (cut %d)", r.Problems, r.Cut)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := finishedOnce()
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
