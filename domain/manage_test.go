package domain

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCancel(t *testing.T) {
	for _, from := range []string{"pending", "processing"} {
		t.Run(from, func(t *testing.T) {
			task := mustPost(t)
			worker := ""
			if from == "processing" {
				task, worker = mustClaim(t, task, "box-1", at(time.Second)), "box-1"
			}
			got, ev, err := task.Cancel(at(2 * time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != Failed || *got.Error != CancelledError || got.Lease != nil || got.FinishedAt == nil {
				t.Errorf("cancelled = %+v", got)
			}
			if ev.Kind != EventCancelled || ev.Worker != worker {
				t.Errorf("event %s by %q, want cancelled by %q", ev.Kind, ev.Worker, worker)
			}
			if err := CheckTransition(task, got); err != nil {
				t.Errorf("not a legal move: %v", err)
			}
			if _, _, err := got.ReportProgress("box-1", json.RawMessage(`{}`), time.Minute, at(3*time.Second)); !errors.Is(err, ErrNotProcessing) {
				t.Errorf("progress after the cancel: %v", err)
			}
			if _, _, err := got.Finish("box-1", json.RawMessage(`{}`), at(3*time.Second)); !errors.Is(err, ErrTerminal) {
				t.Errorf("a result after the cancel: %v", err)
			}
		})
	}
	done := mustFinish(t, mustPost(t), "box-1", `{}`, at(time.Second))
	if _, _, err := done.Cancel(at(2 * time.Second)); !errors.Is(err, ErrTerminal) {
		t.Errorf("cancel of a finished task: %v, want ErrTerminal", err)
	}
}

func TestRetryOfADeadLetter(t *testing.T) {
	r := Retry{Settings: Settings{MaxAttempts: 1}}
	task := mustClaim(t, mustPost(t), "box-1", at(time.Second))
	task, _, _ = task.Release("box-1", time.Minute, json.RawMessage(`"boom"`), r, at(2*time.Second))
	task = mustFetch(t, task, at(3*time.Second))
	got, ev, err := task.Retry(at(4 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := mustPost(t)
	want.UpdatedAt = ms(4 * time.Second)
	want.NotBefore = ptr(ms(4 * time.Second))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a retried task is as posted but for updatedAt and notBefore (-want +got):\n%s", diff)
	}
	if ev.Kind != EventRetried {
		t.Errorf("event %s", ev.Kind)
	}
	if err := CheckTransition(task, got); err != nil {
		t.Errorf("not a legal move: %v", err)
	}
	for name, cur := range map[string]Task{"pending": mustPost(t), "finished": mustFinish(t, mustPost(t), "w", `{}`, at(time.Second))} {
		if _, _, err := cur.Retry(at(time.Minute)); !errors.Is(err, ErrNotFailed) {
			t.Errorf("retry of a %s task: %v, want ErrNotFailed", name, err)
		}
	}
	// A retry must clear everything: one that keeps attempts is refused.
	bad := got
	bad.Attempts = 1
	if err := CheckTransition(task, bad); err == nil {
		t.Error("a retry that keeps attempts was let through")
	}
	// And it starts the queue timeout again: a task that timed out, retried
	// a day later, is not due at the next sweep, but a whole queueSeconds on.
	s := Settings{QueueSeconds: 60}
	old := mustPost(t)
	timedOut := old.end(Failed, at(time.Minute+time.Second))
	timedOut.Error = ptr(TimeoutError)
	retried, _, err := timedOut.Retry(at(24 * time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if due := DueAt(retried, s, at(24*time.Hour+time.Second)); due != DueNothing {
		t.Errorf("a task retried a second ago is due for %v", due)
	}
	if due := DueAt(retried, s, at(24*time.Hour+61*time.Second)); due != DueTimeout {
		t.Errorf("a retried task left queueSeconds is due for %v, want a timeout", due)
	}
	bad = retried
	bad.NotBefore = nil
	if err := CheckTransition(timedOut, bad); err == nil {
		t.Error("a retry that leaves the queue timeout running from the post was let through")
	}
}

func TestIdempotencyKeys(t *testing.T) {
	for k, ok := range map[string]bool{"order-17": true, "": false, "with space": false, "é": false, string(make([]byte, 201)): false, "~!": true} {
		if ValidKey(k) != ok {
			t.Errorf("ValidKey(%q) = %v", k, !ok)
		}
	}
	task, _ := Post(testID, testHost, testQueue, testItem, "", t0, PostOptions{Key: "order-17"})
	next := mustClaim(t, task, "w", at(time.Second))
	next.IdempotencyKey = "other"
	if err := CheckTransition(task, next); err == nil {
		t.Error("a change of the idempotency key was let through")
	}
}

func TestHeldBy(t *testing.T) {
	task := mustClaim(t, mustPost(t), "box-1", at(time.Second)) // attempt 1
	cases := []struct {
		h    Holder
		want error
	}{
		{Holder{Worker: "box-1"}, nil},
		{Holder{Worker: "box-1", Attempt: 1}, nil},
		{Holder{Worker: "box-1", Attempt: 2}, ErrNotLeaseHolder},
		{Holder{Worker: "box-2", Attempt: 1}, ErrNotLeaseHolder},
	}
	for _, c := range cases {
		if err := task.HeldBy(c.h); !errors.Is(err, c.want) && !(err == nil && c.want == nil) {
			t.Errorf("HeldBy(%+v) = %v, want %v", c.h, err, c.want)
		}
	}
	// A holder that knows only its attempt (HTTP) holds a claim made under a
	// notBefore too.
	nb := at(time.Second).UnixMilli()
	delayed, _ := Post("00000000000000d1", "h", "q", []byte(`{}`), "", at(0), PostOptions{NotBefore: &nb})
	delayed = mustClaim(t, delayed, "box-1", at(2*time.Second))
	if err := delayed.HeldBy(Holder{Worker: "box-1", Attempt: 1, AnyNotBefore: true}); err != nil {
		t.Errorf("HeldBy(attempt only) of a delayed task = %v", err)
	}
	if err := delayed.HeldBy(Holder{Worker: "box-1", Attempt: 2, AnyNotBefore: true}); !errors.Is(err, ErrNotLeaseHolder) {
		t.Errorf("HeldBy(another attempt only) of a delayed task = %v", err)
	}
	if err := mustPost(t).HeldBy(Holder{Worker: "box-1"}); !errors.Is(err, ErrNotProcessing) {
		t.Errorf("HeldBy of a pending task = %v", err)
	}
}

// TestAClaimBeforeARetryHoldsNoLaterClaim: a retry counts attempts from 0
// again, so a claim after it repeats the attempt number of one before it;
// the holder of the older claim, say a worker socket that still lists it,
// must not hold the newer one, even under the same worker name.
func TestAClaimBeforeARetryHoldsNoLaterClaim(t *testing.T) {
	first := mustClaim(t, mustPost(t), "box-1", at(time.Second))
	old := HolderOf(first)
	if !old.Equal(Holder{Worker: "box-1", Attempt: 1}) || first.HeldBy(old) != nil {
		t.Fatalf("HolderOf(first claim) = %+v, held: %v", old, first.HeldBy(old))
	}
	failed, _, err := first.Fail("box-2", nil, at(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !old.Names(failed) {
		t.Error("the failed task no longer names the claim it ended")
	}
	retried, _, err := failed.Retry(at(3 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	second := mustClaim(t, retried, "box-1", at(4*time.Second))
	if second.Attempts != first.Attempts {
		t.Fatalf("attempts %d after the retry's claim, want %d again", second.Attempts, first.Attempts)
	}
	if err := second.HeldBy(old); !errors.Is(err, ErrNotLeaseHolder) {
		t.Errorf("the claim before the retry holds the one after it: %v", err)
	}
	if old.Names(second) {
		t.Error("the claim before the retry names the one after it")
	}
	if err := second.HeldBy(HolderOf(second)); err != nil {
		t.Errorf("the claim after the retry does not hold itself: %v", err)
	}
	if old.Equal(HolderOf(second)) || !HolderOf(second).Equal(HolderOf(second)) {
		t.Error("Equal does not tell the claims apart by notBefore's value")
	}
}
