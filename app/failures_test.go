package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/clock"
	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
)

func ptrTo[T any](v T) *T { return &v }

func TestPostOptionsAreChecked(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	bad := []app.PostOptions{
		{DelaySeconds: ptrTo(-1.0)},
		{DelaySeconds: ptrTo(31536001.0)},
		{DelaySeconds: ptrTo(5.0), NotBefore: ptrTo(int64(1))},
		{NotBefore: ptrTo(int64(-5))},
		{NotBefore: ptrTo(f.clock.Now().Add(366 * 24 * time.Hour).UnixMilli())},
		{Priority: ptrTo(1001)},
		{Priority: ptrTo(-1001)},
	}
	for _, o := range bad {
		_, err := f.svc.Post(context.Background(), f.q, "alice", []byte(`{"url":"a"}`), o)
		var e *domain.Error
		if !errors.As(err, &e) || e.Code != domain.CodeInvalidRequest {
			t.Errorf("Post with %+v = %v, want invalid_request", o, err)
		}
	}
	if n := f.repo.Counts(f.q.Ref()); n.Pending != 0 {
		t.Errorf("refused posts stored %d tasks", n.Pending)
	}
	task, err := f.svc.Post(context.Background(), f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{DelaySeconds: ptrTo(2.5), Priority: ptrTo(9)})
	if err != nil {
		t.Fatal(err)
	}
	if task.NotBefore == nil || *task.NotBefore != f.clock.Now().Add(2500*time.Millisecond).UnixMilli() || task.Priority != 9 {
		t.Errorf("posted %+v", task)
	}
}

// A delayed task is not handed out before its time; once the fake clock
// reaches it, the queue's timer makes it claimable and wakes a waiting
// claim, without anyone polling.
func TestDelayedTaskWakesAWaitingClaim(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	ctx := context.Background()
	task, err := f.svc.Post(ctx, f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{DelaySeconds: ptrTo(30.0)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Claim(ctx, f.q, "w", nil, 0); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("claim before its time = %v, want none", err)
	}
	got := f.waitingClaim(t)
	f.clock.Advance(29 * time.Second)
	notClaimedYet(t, got, "a second early")
	f.clock.Advance(time.Second)
	claimedFrom(t, got, task.ID, "when the delay ran out")
}

// A clock set back (an NTP step, a hand) must not leave a waiting claim
// asleep past a delayed task's time. The task's notBefore is behind the
// latest time the store looked at, and before, the sweep's look after the
// step woke the claim for it early (it passed it by and waited again), and
// the task's own timer found nothing newly due when its time came.
func TestADelayedTaskWakesAWaitingClaimAfterTheClockIsSetBack(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	ctx := context.Background()
	start := f.clock.Now()
	queues := []*domain.Queue{f.q}
	if _, err := f.svc.Post(ctx, f.q, "alice", []byte(`{"url":"later"}`), app.PostOptions{DelaySeconds: ptrTo(5000.0)}); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(1000 * time.Second) // the clock runs fast
	if err := f.svc.Sweep(ctx, queues); err != nil {
		t.Fatal(err)
	}
	f.clock.Set(start.Add(100 * time.Second)) // and is set right
	task, err := f.svc.Post(ctx, f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{DelaySeconds: ptrTo(400.0)})
	if err != nil {
		t.Fatal(err)
	}
	got := f.waitingClaim(t)
	if err := f.svc.Sweep(ctx, queues); err != nil {
		t.Fatal(err)
	}
	notClaimedYet(t, got, "before its time")
	f.clock.Advance(400 * time.Second)
	claimedFrom(t, got, task.ID, "when the delay ran out")
}

func TestReleaseFailAndHeartbeat(t *testing.T) {
	s := domain.DefaultSettings()
	s.MaxAttempts = 2
	s.RetryBaseSeconds = 10
	f := newFixture(t, s)
	ctx := context.Background()
	task := f.post(t, `{"url":"a"}`)
	f.claim(t, "w")
	if f.sync.count() != 2 {
		t.Errorf("a claim on a queue with maxAttempts flushed %d times in all, want post + claim = 2", f.sync.count())
	}

	hb, err := f.svc.Heartbeat(ctx, f.q, task.ID, domain.Holder{Worker: "w"})
	if err != nil || !hb.Accepted || hb.Lease == nil {
		t.Fatalf("heartbeat = %+v, %v", hb, err)
	}
	if out, _ := f.svc.Heartbeat(ctx, f.q, task.ID, domain.Holder{Worker: "other"}); out.Accepted || out.Status != domain.Processing {
		t.Errorf("another worker's heartbeat = %+v", out)
	}

	out, err := f.svc.Release(ctx, f.q, task.ID, domain.Holder{Worker: "w"}, 0, []byte(`{"why":"busy"}`))
	if err != nil || !out.Accepted || out.Status != domain.Pending {
		t.Fatalf("release = %+v, %v", out, err)
	}
	stored, _ := f.repo.Get(ctx, domain.KeyOf(task))
	if stored.NotBefore == nil || *stored.NotBefore < f.clock.Now().Add(5*time.Second).UnixMilli() || string(stored.Failure) != `{"why":"busy"}` {
		t.Errorf("released task = %+v, want a backoff of 5-10 s and the reason kept", stored)
	}
	f.clock.Advance(10 * time.Second)
	f.claim(t, "w")
	out, err = f.svc.Release(ctx, f.q, task.ID, domain.Holder{Worker: "w"}, 0, nil)
	if err != nil || !out.Accepted || out.Status != domain.Failed {
		t.Fatalf("the last release = %+v, %v; want a dead letter", out, err)
	}
	stored, _ = f.repo.Get(ctx, domain.KeyOf(task))
	if *stored.Error != domain.AttemptsError || stored.Attempts != 2 || string(stored.Item) != `{"url":"a"}` || string(stored.Failure) != `{"why":"busy"}` {
		t.Errorf("dead letter = %+v", stored)
	}
	want := []domain.EventKind{domain.EventPosted, domain.EventClaimed, domain.EventReleased, domain.EventClaimed, domain.EventFailed}
	if diff := cmp.Diff(want, f.log.Kinds(task.ID)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// Fail: the first of a result or a failure wins, and it is durable.
	other := f.post(t, `{"url":"b"}`)
	before := f.sync.count()
	out, err = f.svc.Fail(ctx, f.q, other.ID, "w", []byte(`"no such image"`))
	if err != nil || !out.Accepted || f.sync.count() != before+1 {
		t.Fatalf("fail = %+v, %v (flushes %d → %d)", out, err, before, f.sync.count())
	}
	if res, _ := f.svc.Result(ctx, f.q, other.ID, "w", []byte(`{}`)); res.Accepted || res.Status != domain.Failed {
		t.Errorf("a result after the failure = %+v", res)
	}
}

func TestAFailureReasonIsCheckedAgainstItsSchema(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	reasons, err := schemaOf(`{"type":"object","required":["code"]}`)
	if err != nil {
		t.Fatal(err)
	}
	f.q.Failure = reasons
	task := f.post(t, `{"url":"a"}`)
	f.claim(t, "w")
	for name, call := range map[string]func() (app.Outcome, error){
		"release": func() (app.Outcome, error) {
			return f.svc.Release(context.Background(), f.q, task.ID, domain.Holder{Worker: "w"}, 0, []byte(`{"nope":1}`))
		},
		"fail": func() (app.Outcome, error) {
			return f.svc.Fail(context.Background(), f.q, task.ID, "w", []byte(`"text"`))
		},
	} {
		_, err := call()
		var e *domain.Error
		if !errors.As(err, &e) || e.Code != domain.CodeInvalidFailure || len(e.Details) == 0 {
			t.Errorf("%s with a bad reason = %v, want invalid_failure with details", name, err)
		}
	}
	if stored, _ := f.repo.Get(context.Background(), domain.KeyOf(task)); stored.Status != domain.Processing {
		t.Errorf("a refused reason changed the task to %s", stored.Status)
	}
}

func schemaOf(text string) (domain.Schema, error) { return schema.Compile(json.RawMessage(text)) }

// tickingClock moves on a millisecond at every reading, as a busy machine's
// clock does between two reads.
type tickingClock struct{ *clock.Fake }

func (c tickingClock) Now() time.Time { return c.Fake.Advance(time.Millisecond) }

// A delay counts from the post's own time: notBefore is postedAt plus the
// delay exactly, however the clock moves while the post is made (the
// TypeScript client's tests once saw 29 999 ms for a delay of 30 s).
func TestADelayCountsFromPostedAt(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	svc := app.New(app.Deps{
		Repo: f.repo, Syncer: f.sync, Log: f.log, Notifier: notify.NewHub(),
		Clock: tickingClock{f.clock}, Compiler: schema.Compiler{},
	})
	delay := 30.0
	one, err := svc.Post(context.Background(), f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{DelaySeconds: &delay})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := svc.PostBatch(context.Background(), f.q, "alice", [][]byte{[]byte(`{"url":"b"}`), []byte(`{"url":"c"}`)}, app.PostOptions{DelaySeconds: &delay})
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range append(batch, one) {
		if task.NotBefore == nil || *task.NotBefore-task.PostedAt != 30_000 {
			t.Errorf("task %s: notBefore %v, postedAt %d: want postedAt + 30 000 ms", task.ID, task.NotBefore, task.PostedAt)
		}
	}
}

// TestARetriedTimeoutGetsAWholeQueueSecondsAgain: a task that timed out and
// is retried long after its post is not failed again by the next sweep; it
// times out only queueSeconds after the retry. The event log says so.
func TestARetriedTimeoutGetsAWholeQueueSecondsAgain(t *testing.T) {
	s := domain.DefaultSettings()
	s.QueueSeconds = 10
	w := newWorld(t, s)
	id := w.post().ID
	w.sweepAfter(11 * time.Second)
	w.sweepAfter(time.Hour)
	w.retry(id)
	w.sweepAfter(time.Second)
	if got, err := w.repo.Get(w.ctx, domain.KeyOf(domain.Task{Host: w.q.Host, Queue: w.q.Name, ID: id})); err != nil || got.Status != domain.Pending {
		t.Fatalf("a second after its retry the task is %v (%v), want pending", got.Status, err)
	}
	w.sweepAfter(10 * time.Second)
	var kinds []string
	for _, line := range w.lines() {
		var ev struct{ Event string }
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, ev.Event)
	}
	if want := []string{"posted", "timeout", "retried", "timeout"}; !slices.Equal(kinds, want) {
		t.Errorf("events %v, want %v", kinds, want)
	}
}
