package domain

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// Every legal move, made by the state machine's own transitions, and the
// illegal ones a careless update could store, each from a task built on
// the test clock.
func TestCheckTransition(t *testing.T) {
	now := at(20 * time.Second)
	fetched := func(tb testing.TB) Task { return mustFetch(tb, finishedTask(tb), at(time.Hour)) }
	claimed := func(cur Task) Task {
		next, _, err := cur.Claim("box-2", time.Minute, now)
		if err != nil {
			t.Fatal(err)
		}
		return next
	}
	// forge is cur with change made to a copy.
	forge := func(change func(*Task)) func(Task) Task {
		return func(cur Task) Task {
			next := cur.Clone()
			change(&next)
			return next
		}
	}
	tests := []struct {
		name  string
		cur   func(testing.TB) Task
		next  func(Task) Task
		legal bool
	}{
		// Legal: the transitions of the seeds, and no change at all.
		{"claim", pendingTask, claimed, true},
		{"claim after a re-queue", requeuedTask, claimed, true},
		{"progress extends the lease", processingTask, func(cur Task) Task {
			next, _, err := cur.ReportProgress("box-1", json.RawMessage(`{"percent":40}`), time.Minute, now)
			if err != nil {
				t.Fatal(err)
			}
			return next
		}, true},
		{"requeue", processingTask, func(cur Task) Task { return mustRequeue(t, cur, now) }, true},
		{"result", processingTask, func(cur Task) Task { return mustFinish(t, cur, "box-1", `{"ok":true}`, now) }, true},
		{"late result after a re-queue", requeuedTask, func(cur Task) Task { return mustFinish(t, cur, "box-1", `{}`, now) }, true},
		{"timeout of a pending task", pendingTask, func(cur Task) Task { return mustTimeout(t, cur, at(25*time.Hour)) }, true},
		{"timeout of a processing task", processingTask, func(cur Task) Task { return mustTimeout(t, cur, at(25*time.Hour)) }, true},
		{"fetch of a finished task", finishedTask, func(cur Task) Task { return mustFetch(t, cur, now) }, true},
		{"fetch of a failed task", failedTask, func(cur Task) Task { return mustFetch(t, cur, at(26*time.Hour)) }, true},
		{"no change, pending", pendingTask, forge(func(*Task) {}), true},
		{"no change, processing", processingTask, forge(func(*Task) {}), true},
		{"no change, finished", fetched, forge(func(*Task) {}), true},
		{"no change, failed", failedTask, forge(func(*Task) {}), true},

		// Identity never changes.
		{"id", pendingTask, forge(func(n *Task) { n.ID = "0123456789abcdef" }), false},
		{"host", pendingTask, forge(func(n *Task) { n.Host = "other.example.com" }), false},
		{"queue", processingTask, forge(func(n *Task) { n.Queue = "other" }), false},
		{"postedAt", pendingTask, forge(func(n *Task) { n.PostedAt++ }), false},
		{"postedBy", pendingTask, forge(func(n *Task) { *n.PostedBy = "mallory" }), false},
		{"postedBy dropped", finishedTask, forge(func(n *Task) { n.PostedBy = nil }), false},
		{"item", processingTask, forge(func(n *Task) { n.Item = json.RawMessage(`{"url":"x"}`) }), false},
		{"item, with a claim", pendingTask, func(cur Task) Task {
			next := claimed(cur)
			next.Item = json.RawMessage(`{}`)
			return next
		}, false},

		// Attempts rise by one on a claim, and only then.
		{"claim without a new attempt", pendingTask, forge(func(n *Task) {
			n.Status, n.Lease = Processing, &Lease{Worker: "box-1", Until: ms(time.Minute)}
		}), false},
		{"claim of two attempts", requeuedTask, func(cur Task) Task {
			next := claimed(cur)
			next.Attempts++
			return next
		}, false},
		{"claim without a lease", pendingTask, forge(func(n *Task) { n.Status, n.Attempts = Processing, 1 }), false},
		{"attempts down", processingTask, forge(func(n *Task) { n.Attempts-- }), false},
		{"attempts down with a requeue", processingTask, func(cur Task) Task {
			next := mustRequeue(t, cur, now)
			next.Attempts = 0
			return next
		}, false},
		{"attempts up without a claim", pendingTask, forge(func(n *Task) { n.Attempts++ }), false},
		{"attempts up with progress", processingTask, forge(func(n *Task) { n.Attempts++ }), false},

		// What a move may change, and what it must leave.
		{"pending task changed", pendingTask, forge(func(n *Task) { n.UpdatedAt = ms(time.Hour) }), false},
		{"pending task leased", pendingTask, forge(func(n *Task) { n.Lease = &Lease{Worker: "box-1", Until: 1} }), false},
		{"progress by another worker", processingTask, forge(func(n *Task) { n.Lease.Worker = "box-2" }), false},
		{"progress dropping the lease", processingTask, forge(func(n *Task) { n.Lease = nil }), false},
		{"processing task given a result", processingTask, forge(func(n *Task) { n.Result = json.RawMessage(`{}`) }), false},
		{"requeue keeping the lease", processingTask, forge(func(n *Task) { n.Status = Pending }), false},
		{"requeue with a result", processingTask, func(cur Task) Task {
			next := mustRequeue(t, cur, now)
			next.Result = json.RawMessage(`{}`)
			return next
		}, false},
		{"result keeping the lease", processingTask, func(cur Task) Task {
			next := mustFinish(t, cur, "box-1", `{}`, now)
			next.Lease = cur.Lease
			return next
		}, false},
		{"result without finishedAt", processingTask, func(cur Task) Task {
			next := mustFinish(t, cur, "box-1", `{}`, now)
			next.FinishedAt = nil
			return next
		}, false},
		{"result with an error", processingTask, func(cur Task) Task {
			next := mustFinish(t, cur, "box-1", `{}`, now)
			next.Error = ptr(TimeoutError)
			return next
		}, false},
		{"timeout without an error", processingTask, func(cur Task) Task {
			next := mustTimeout(t, cur, now)
			next.Error = nil
			return next
		}, false},
		{"timeout with a result", pendingTask, func(cur Task) Task {
			next := mustTimeout(t, cur, now)
			next.Result = json.RawMessage(`{}`)
			return next
		}, false},
		{"fetch of a pending task", pendingTask, forge(func(n *Task) { n.FetchedAt = ptr(ms(time.Hour)) }), false},

		// A terminal task never changes status or result; fetchedAt is set once.
		{"second fetch", fetched, forge(func(n *Task) { n.FetchedAt = ptr(ms(2 * time.Hour)) }), false},
		{"fetchedAt unset", fetched, forge(func(n *Task) { n.FetchedAt = nil }), false},
		{"second result", finishedTask, forge(func(n *Task) { n.Result = json.RawMessage(`{"again":true}`) }), false},
		{"finishedAt moved", finishedTask, forge(func(n *Task) { n.FinishedAt = ptr(ms(time.Hour)) }), false},
		{"updatedAt of a terminal task", failedTask, forge(func(n *Task) { n.UpdatedAt++ }), false},
		{"error of a failed task", failedTask, forge(func(n *Task) { n.Error = ptr("other") }), false},
		{"progress on a finished task", finishedTask, forge(func(n *Task) { n.Progress = json.RawMessage(`{}`) }), false},
		{"fetch with a lease", finishedTask, func(cur Task) Task {
			next := mustFetch(t, cur, now)
			next.Lease = &Lease{Worker: "box-1", Until: 1}
			return next
		}, false},
		{"status not a state", pendingTask, forge(func(n *Task) { n.Status = "../../x" }), false},
		{"status done", finishedTask, forge(func(n *Task) { n.Status = "done" }), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cur := tc.cur(t)
			snapshot := cur.Clone()
			err := CheckTransition(cur, tc.next(cur.Clone()))
			checkLegal(t, err, tc.legal)
			if d := changes(snapshot, cur); d != 0 {
				t.Errorf("CheckTransition changed its task: %s", d)
			}
		})
	}
}

// Every pair of states, the moves between them shaped as the legal ones
// are (a lease in processing only, finishedAt and an error where a terminal
// state wants them): exactly the moves of the seeds pass.
func TestCheckTransitionPairs(t *testing.T) {
	from := map[Status]func(testing.TB) Task{
		Pending: requeuedTask, Processing: processingTask, Finished: finishedTask, Failed: failedTask,
	}
	legal := map[[2]Status]bool{
		{Pending, Pending}: true, {Pending, Processing}: true, {Pending, Finished}: true, {Pending, Failed}: true,
		{Processing, Pending}: true, {Processing, Processing}: true, {Processing, Finished}: true, {Processing, Failed}: true,
		{Finished, Finished}: true,
		{Failed, Failed}:     true,
	}
	now := at(30 * time.Second)
	for _, a := range []Status{Pending, Processing, Finished, Failed} {
		for _, b := range []Status{Pending, Processing, Finished, Failed} {
			t.Run(string(a)+" to "+string(b), func(t *testing.T) {
				cur := from[a](t)
				next := shaped(cur, b, now)
				checkLegal(t, CheckTransition(cur, next), legal[[2]Status{a, b}])
			})
		}
	}
}

// shaped is cur moved to status to at now as a transition would leave it,
// as far as the record allows.
func shaped(cur Task, to Status, now time.Time) Task {
	next := cur.Clone()
	if next.Status == to {
		return next
	}
	next.Status = to
	next.UpdatedAt = Millis(now)
	next.Lease = nil
	switch to {
	case Processing:
		next.Attempts++
		next.Lease = &Lease{Worker: "box-2", Until: Millis(now.Add(time.Minute))}
	case Finished:
		next.Result = json.RawMessage(`{}`)
	case Failed:
		next.Error = ptr(TimeoutError)
	}
	if to.Terminal() && next.FinishedAt == nil {
		next.FinishedAt = ptr(Millis(now))
	}
	return next
}

// checkLegal fails unless err says the move is legal (nil) or illegal (an
// internal "illegal_transition" error), as legal wants.
func checkLegal(tb testing.TB, err error, legal bool) {
	tb.Helper()
	var e *Error
	switch {
	case legal && err != nil:
		tb.Fatalf("legal move refused: %v", err)
	case !legal && err == nil:
		tb.Fatal("illegal move allowed")
	case !legal && (!errors.As(err, &e) || e.Kind != KindInternal || e.Code != CodeIllegalTransition):
		tb.Fatalf("illegal move refused with %v, want a KindInternal illegal_transition error", err)
	}
}
