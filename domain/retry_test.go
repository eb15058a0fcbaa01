package domain

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestBackoffSchedule(t *testing.T) {
	s := Settings{RetryBaseSeconds: 10, RetryMaxSeconds: 60}
	cases := []struct {
		name     string
		s        Settings
		n        int
		lo, hi   time.Duration // jitter 0 and 1
		midpoint time.Duration // jitter 0.5
	}{
		{"no base: no backoff", Settings{}, 3, 0, 0, 0},
		{"first return: b = base", s, 1, 5 * time.Second, 10 * time.Second, 7500 * time.Millisecond},
		{"second: twice the base", s, 2, 10 * time.Second, 20 * time.Second, 15 * time.Second},
		{"third: four times", s, 3, 20 * time.Second, 40 * time.Second, 30 * time.Second},
		{"capped at retryMax", s, 4, 30 * time.Second, 60 * time.Second, 45 * time.Second},
		{"far past the cap, no overflow", s, 200, 30 * time.Second, 60 * time.Second, 45 * time.Second},
		{"default max 3600", Settings{RetryBaseSeconds: 1000}, 5, 1800 * time.Second, 3600 * time.Second, 2700 * time.Second},
		{"a year at most", Settings{RetryBaseSeconds: 86400, RetryMaxSeconds: 31536000}, 30, 15768000 * time.Second, 31536000 * time.Second, 23652000 * time.Second},
		{"no claim yet", s, 0, 0, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.s.Backoff(c.n, 0); got != c.lo {
				t.Errorf("jitter 0: %v, want %v", got, c.lo)
			}
			if got := c.s.Backoff(c.n, 1); got != c.hi {
				t.Errorf("jitter 1: %v, want %v", got, c.hi)
			}
			if got := c.s.Backoff(c.n, 0.5); got != c.midpoint {
				t.Errorf("jitter 0.5: %v, want %v", got, c.midpoint)
			}
			if got := c.s.Backoff(c.n, 7); got != c.hi {
				t.Errorf("jitter out of range: %v, want it clamped to %v", got, c.hi)
			}
		})
	}
}

func claimedTimes(tb testing.TB, task Task, n int, now time.Time, r Retry) Task {
	tb.Helper()
	for range n {
		task = mustClaim(tb, task, "box-1", now)
		next, _, err := task.Requeue(CauseLease, r, now)
		if err != nil {
			tb.Fatal(err)
		}
		task = next
		if task.NotBefore != nil {
			now = time.UnixMilli(*task.NotBefore)
		}
	}
	return task
}

func TestRequeueWithoutSettingsIsTheSeeds(t *testing.T) {
	task := mustClaim(t, mustPost(t), "box-1", at(time.Second))
	got, ev, err := task.Requeue(CauseSocket, Retry{Settings: DefaultSettings(), Jitter: 0.3}, at(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != Pending || got.NotBefore != nil || got.Lease != nil || got.Failure != nil || ev.Kind != EventRequeue {
		t.Errorf("requeue on a plain queue = %+v, %s; want pending as the seeds say", got, ev.Kind)
	}
	if !got.Claimable(at(2 * time.Second)) {
		t.Error("a re-queued task without a backoff is not claimable at once")
	}
}

func TestRequeueAfterABackoff(t *testing.T) {
	r := Retry{Settings: Settings{RetryBaseSeconds: 10, RetryMaxSeconds: 60}, Jitter: 0}
	task := mustClaim(t, mustPost(t), "box-1", at(time.Second))
	got, ev, err := task.Requeue(CauseLease, r, at(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != Pending || ev.Kind != EventRequeue {
		t.Fatalf("got %s / %s, want pending / requeue", got.Status, ev.Kind)
	}
	if got.NotBefore == nil || *got.NotBefore != ms(7*time.Second) {
		t.Fatalf("notBefore = %v, want now + 5 s", got.NotBefore)
	}
	if got.Claimable(at(7*time.Second - time.Millisecond)) {
		t.Error("claimable before its backoff ran out")
	}
	if _, _, err := got.Claim("box-2", time.Minute, at(6*time.Second)); !errors.Is(err, ErrNotYet) {
		t.Errorf("claim before notBefore: %v, want ErrNotYet", err)
	}
	if !got.Claimable(at(7 * time.Second)) {
		t.Error("not claimable once its backoff ran out")
	}
	// The second return waits twice as long.
	again := mustClaim(t, got, "box-2", at(7*time.Second))
	got, _, _ = again.Requeue(CauseLease, r, at(8*time.Second))
	if *got.NotBefore != ms(18*time.Second) {
		t.Errorf("second backoff: notBefore %d, want now + 10 s", *got.NotBefore-ms(8*time.Second))
	}
}

func TestTheLastAttemptMakesADeadLetter(t *testing.T) {
	r := Retry{Settings: Settings{MaxAttempts: 3}}
	task := claimedTimes(t, mustPost(t), 2, at(time.Second), r)
	if task.Status != Pending || task.Attempts != 2 {
		t.Fatalf("after two returns: %s with %d attempts, want pending with 2", task.Status, task.Attempts)
	}
	task = mustClaim(t, task, "box-3", at(time.Minute))
	task, _, _ = task.ReportProgress("box-3", json.RawMessage(`{"percent":40}`), time.Minute, at(61*time.Second))
	got, ev, err := task.Requeue(CauseSocket, r, at(62*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := task
	want.Status, want.Error, want.Lease = Failed, ptr(AttemptsError), nil
	want.UpdatedAt, want.FinishedAt = ms(62*time.Second), ptr(ms(62*time.Second))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dead letter (-want +got):\n%s", diff)
	}
	if ev.Kind != EventFailed || ev.Worker != "box-3" || ev.Cause != CauseSocket {
		t.Errorf("event %s by %q (%s), want failed by box-3 (socket)", ev.Kind, ev.Worker, ev.Cause)
	}
	if err := CheckTransition(task, got); err != nil {
		t.Errorf("a dead letter is a legal move: %v", err)
	}
}

func TestRelease(t *testing.T) {
	reason := json.RawMessage(`{"exitCode":3}`)
	plain := Retry{Settings: DefaultSettings()}
	backoff := Retry{Settings: Settings{RetryBaseSeconds: 10}, Jitter: 1} // 10 s after the first claim
	cases := []struct {
		name      string
		worker    string
		delay     time.Duration
		r         Retry
		want      Status
		notBefore *int64
		err       error
	}{
		{"by the holder, no delay", "box-1", 0, plain, Pending, nil, nil},
		{"a delay", "box-1", 30 * time.Second, plain, Pending, ptr(ms(32 * time.Second)), nil},
		{"a delay shorter than the backoff", "box-1", 3 * time.Second, backoff, Pending, ptr(ms(12 * time.Second)), nil},
		{"a delay longer than the backoff", "box-1", 20 * time.Second, backoff, Pending, ptr(ms(22 * time.Second)), nil},
		{"the last attempt", "box-1", 0, Retry{Settings: Settings{MaxAttempts: 1}}, Failed, nil, nil},
		{"not the holder", "box-2", 0, plain, Processing, nil, ErrNotLeaseHolder},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			task := mustClaim(t, mustPost(t), "box-1", at(time.Second))
			got, ev, err := task.Release(c.worker, c.delay, reason, c.r, at(2*time.Second))
			if !errors.Is(err, c.err) {
				t.Fatalf("err = %v, want %v", err, c.err)
			}
			if err != nil {
				return
			}
			if got.Status != c.want || !cmp.Equal(got.NotBefore, c.notBefore) || string(got.Failure) != string(reason) {
				t.Errorf("got %s, notBefore %v, failure %s; want %s, %v, the reason", got.Status, got.NotBefore, got.Failure, c.want, c.notBefore)
			}
			wantKind := EventReleased
			if c.want == Failed {
				wantKind = EventFailed
				if got.Error == nil || *got.Error != AttemptsError {
					t.Errorf("error %v, want attempts", got.Error)
				}
			}
			if ev.Kind != wantKind || ev.Worker != "box-1" {
				t.Errorf("event %s by %q, want %s by box-1", ev.Kind, ev.Worker, wantKind)
			}
			if err := CheckTransition(task, got); err != nil {
				t.Errorf("not a legal move: %v", err)
			}
		})
	}
	if _, _, err := mustPost(t).Release("box-1", 0, nil, plain, t0); !errors.Is(err, ErrNotProcessing) {
		t.Errorf("release of a pending task: %v, want ErrNotProcessing", err)
	}
}

func TestFailIsFinalAndFirstWins(t *testing.T) {
	reason := json.RawMessage(`{"why":"bad input"}`)
	for _, from := range []string{"pending", "processing"} {
		t.Run(from, func(t *testing.T) {
			task := mustPost(t)
			if from == "processing" {
				task = mustClaim(t, task, "box-1", at(time.Second))
			}
			got, ev, err := task.Fail("box-2", reason, at(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != Failed || *got.Error != FailedError || string(got.Failure) != string(reason) || got.Lease != nil || got.FinishedAt == nil {
				t.Errorf("failed task = %+v", got)
			}
			if ev.Kind != EventFailed || ev.Worker != "box-2" {
				t.Errorf("event %s by %q", ev.Kind, ev.Worker)
			}
			if err := CheckTransition(task, got); err != nil {
				t.Errorf("not a legal move: %v", err)
			}
			if _, _, err := got.Finish("box-1", json.RawMessage(`{}`), at(3*time.Second)); !errors.Is(err, ErrTerminal) {
				t.Errorf("a result after the failure: %v, want ErrTerminal", err)
			}
			if _, _, err := got.Fail("box-1", nil, at(3*time.Second)); !errors.Is(err, ErrTerminal) {
				t.Errorf("a second failure: %v, want ErrTerminal", err)
			}
		})
	}
	done := mustFinish(t, mustPost(t), "box-1", `{}`, at(time.Second))
	if _, _, err := done.Fail("box-2", reason, at(2*time.Second)); !errors.Is(err, ErrTerminal) {
		t.Errorf("a failure after the result: %v, want ErrTerminal", err)
	}
}

func TestHeartbeat(t *testing.T) {
	task := mustClaim(t, mustPost(t), "box-1", at(time.Second))
	got, err := task.Heartbeat("box-1", 2*time.Minute, at(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := task
	want.Lease = &Lease{Worker: "box-1", Until: ms(150 * time.Second)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("heartbeat changes only the lease (-want +got):\n%s", diff)
	}
	if err := CheckTransition(task, got); err != nil {
		t.Errorf("not a legal move: %v", err)
	}
	if _, err := task.Heartbeat("box-2", time.Minute, at(30*time.Second)); !errors.Is(err, ErrNotLeaseHolder) {
		t.Errorf("another worker's heartbeat: %v", err)
	}
	if _, err := mustPost(t).Heartbeat("box-1", time.Minute, t0); !errors.Is(err, ErrNotProcessing) {
		t.Errorf("heartbeat of a pending task: %v", err)
	}
}

func TestDelayedPost(t *testing.T) {
	twoDays := ms(48 * time.Hour)
	task, ev := Post(testID, testHost, testQueue, testItem, "", t0, PostOptions{NotBefore: &twoDays, Priority: 7})
	if task.NotBefore == nil || *task.NotBefore != twoDays || task.Priority != 7 || ev.Task.Priority != 7 {
		t.Fatalf("posted %+v", task)
	}
	s := DefaultSettings() // a one-day queue timeout
	if task.Claimable(at(47 * time.Hour)) {
		t.Error("claimable before its time")
	}
	if DueAt(task, s, at(60*time.Hour)) != DueNothing {
		t.Error("a task delayed two days timed out on the way")
	}
	if DueAt(task, s, at(72*time.Hour+time.Second)) != DueTimeout {
		t.Error("the queue timeout does not count from notBefore")
	}
	past := ms(-time.Hour)
	if task, _ := Post(testID, testHost, testQueue, testItem, "", t0, PostOptions{NotBefore: &past}); task.NotBefore != nil {
		t.Error("a notBefore in the past is stored; the record should be the seed's")
	}
	plain := mustPost(t)
	if string(EncodeTask(plain)) != string(EncodeTask(plain.Clone())) || len(plain.View().Failure) != 0 {
		t.Error("plain task differs")
	}
}

func TestNewFieldsOnlyWhenUsed(t *testing.T) {
	data := string(EncodeTask(mustPost(t)))
	for _, field := range []string{"notBefore", "priority", "failure"} {
		if strings.Contains(data, field) {
			t.Errorf("a plain record has %q: %s", field, data)
		}
	}
	nb := ms(time.Hour)
	delayed, _ := Post(testID, testHost, testQueue, testItem, "", t0, PostOptions{NotBefore: &nb, Priority: -3})
	back, err := DecodeTask(EncodeTask(delayed))
	if err != nil || !cmp.Equal(back, delayed) {
		t.Errorf("round trip of a delayed task: %v\n%s", err, cmp.Diff(delayed, back))
	}
}

func TestPriorityIsIdentity(t *testing.T) {
	cur := mustPost(t)
	next := cur
	next.Priority = 5
	if err := CheckTransition(cur, next); err == nil {
		t.Error("a change of priority was let through")
	}
	claimed := mustClaim(t, cur, "box-1", at(time.Second))
	moved := claimed
	moved.NotBefore = ptr(ms(time.Hour))
	if err := CheckTransition(claimed, moved); err == nil {
		t.Error("a progress-like move set notBefore")
	}
}

// A reload may lower maxAttempts below what a pending task has used: no
// claim hands it out again (SPEC §11), and it becomes a dead letter as it
// would have on its last return.
func TestAClaimPastALoweredMaxAttemptsIsRefused(t *testing.T) {
	r := Retry{Settings: DefaultSettings()}
	r.Settings.MaxAttempts = 5
	task := claimedTimes(t, mustPost(t), 3, at(time.Second), r)
	if task.Status != Pending || task.Attempts != 3 {
		t.Fatalf("after three returns: %s with %d attempts, want pending with 3", task.Status, task.Attempts)
	}
	lowered := r.Settings
	lowered.MaxAttempts = 3
	if _, _, err := task.ClaimUnder("box-4", lowered, at(time.Hour)); !errors.Is(err, ErrAttemptsSpent) {
		t.Fatalf("claim past the lowered maxAttempts: %v, want ErrAttemptsSpent", err)
	}
	if _, _, err := task.Exhaust(Settings{MaxAttempts: 4}, at(time.Hour)); err == nil {
		t.Error("a task with an attempt left was made a dead letter")
	}
	got, ev, err := task.Exhaust(lowered, at(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := task
	want.Status, want.Error = Failed, ptr(AttemptsError)
	want.UpdatedAt, want.FinishedAt = ms(time.Hour), ptr(ms(time.Hour))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dead letter (-want +got):\n%s", diff)
	}
	if ev.Kind != EventFailed || ev.Worker != "" {
		t.Errorf("event %s by %q, want failed by nobody", ev.Kind, ev.Worker)
	}
	if err := CheckTransition(task, got); err != nil {
		t.Errorf("the dead letter is not a legal move: %v", err)
	}
	// Under the settings it was claimed with, the claim goes on.
	claimed, _, err := task.ClaimUnder("box-4", r.Settings, at(time.Hour))
	if err != nil || claimed.Attempts != 4 || claimed.Lease.Until != ms(time.Hour+r.Settings.Lease()) {
		t.Errorf("claim under maxAttempts 5: %+v, %v", claimed, err)
	}
	if _, _, err := got.Exhaust(lowered, at(time.Hour)); !errors.Is(err, ErrNotPending) {
		t.Errorf("exhausting a dead letter: %v, want ErrNotPending", err)
	}
}

// A pending task older than queueSeconds is no task to hand out: the sweep
// would fail it at its next turn, and the worker's result would be refused.
// A claim that meets it before the sweep does is refused it, and the task
// times out as the sweep would time it out.
func TestAClaimPastTheQueueTimeIsRefused(t *testing.T) {
	s := Settings{QueueSeconds: 10, LeaseSeconds: 60}
	task := mustPost(t)
	if _, _, err := task.ClaimUnder("box-1", s, at(10*time.Second)); err != nil {
		t.Fatalf("claim at queueSeconds: %v, want the task", err)
	}
	if _, _, err := task.ClaimUnder("box-1", s, at(10*time.Second+time.Millisecond)); !errors.Is(err, ErrQueueTimeUp) {
		t.Fatalf("claim past queueSeconds: %v, want ErrQueueTimeUp", err)
	}
	// It counts from when the task became claimable, as the sweep does.
	delayed := task
	delayed.NotBefore = ptr(ms(time.Hour))
	if _, _, err := delayed.ClaimUnder("box-1", s, at(time.Hour+time.Second)); err != nil {
		t.Errorf("claim of a task delayed an hour, a second after its delay: %v, want the task", err)
	}
}
