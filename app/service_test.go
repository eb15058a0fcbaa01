package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/clock"
	"github.com/taskhoster/taskhoster/adapters/index"
	"github.com/taskhoster/taskhoster/adapters/memlog"
	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// countingSyncer counts flushes, to show which use cases wait for one.
type countingSyncer struct {
	mu sync.Mutex
	n  int
}

func (s *countingSyncer) Sync(context.Context) error {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	return nil
}

func (s *countingSyncer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

type fixture struct {
	svc   *app.Service
	repo  *index.Store
	log   *memlog.Log
	sync  *countingSyncer // nil when the test flushes with its own (newFixtureSyncing)
	clock *clock.Fake
	q     *domain.Queue
}

func newFixture(t *testing.T, settings domain.Settings) *fixture {
	t.Helper()
	counting := &countingSyncer{}
	f := newFixtureSyncing(t, settings, counting)
	f.sync = counting
	return f
}

// newFixtureSyncing is newFixture whose service flushes with syncer.
func newFixtureSyncing(t *testing.T, settings domain.Settings, syncer ports.Syncer) *fixture {
	t.Helper()
	item, err := schema.Compile(json.RawMessage(`{"type":"object","required":["url"]}`))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{
		repo:  index.New(),
		log:   &memlog.Log{},
		clock: clock.NewFake(time.UnixMilli(1751500000000)),
		q: &domain.Queue{
			Host: "task.example.com", Name: "resize", Settings: settings,
			Item: item, Progress: schema.Any(), Result: schema.Any(),
		},
	}
	f.svc = app.New(app.Deps{
		Repo: f.repo, Syncer: syncer, Log: f.log, Notifier: notify.NewHub(),
		Clock: f.clock, Compiler: schema.Compiler{},
	})
	return f
}

func (f *fixture) post(t *testing.T, item string) domain.Task {
	t.Helper()
	task, err := f.svc.Post(context.Background(), f.q, "alice", []byte(item), app.PostOptions{})
	if err != nil {
		t.Fatalf("post %s: %v", item, err)
	}
	return task
}

// holdTasks posts n tasks and claims each, as worker "w", and returns the
// claims.
func (f *fixture) holdTasks(t *testing.T, n int) []app.Held {
	t.Helper()
	held := make([]app.Held, n)
	for i := range n {
		f.post(t, fmt.Sprintf(`{"url":"%d"}`, i))
		c := f.claim(t, "w")
		held[i] = app.Held{ID: c.ID, By: domain.HolderOf(c)}
	}
	return held
}

func (f *fixture) claim(t *testing.T, worker string) domain.Task {
	t.Helper()
	task, err := f.svc.Claim(context.Background(), f.q, worker, nil, 0)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return task
}

// waitingClaim starts a claim by worker "w" that waits up to a minute, and
// returns where the task it takes arrives.
func (f *fixture) waitingClaim(t *testing.T) <-chan domain.Task {
	got := make(chan domain.Task, 1)
	go func() {
		claimed, err := f.svc.Claim(context.Background(), f.q, "w", nil, time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- claimed
	}()
	return got
}

// notClaimedYet checks that the waiting claim got has taken no task (for a
// moment: one woken too early takes it within it).
func notClaimedYet(t *testing.T, got <-chan domain.Task, when string) {
	t.Helper()
	select {
	case c := <-got:
		t.Fatalf("claimed %s %s", c.ID, when)
	case <-time.After(50 * time.Millisecond):
	}
}

// claimedFrom waits for the waiting claim got to take a task, and checks
// that it is want.
func claimedFrom(t *testing.T, got <-chan domain.Task, want, when string) {
	t.Helper()
	select {
	case c := <-got:
		if c.ID != want {
			t.Errorf("claimed %s, want %s", c.ID, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the waiting claim was not woken %s", when)
	}
}

func TestPostIsFlushedAndLogged(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	task := f.post(t, `{ "url" : "a" }`)
	if string(task.Item) != `{"url":"a"}` {
		t.Errorf("item stored as %s, want compacted", task.Item)
	}
	if f.sync.count() != 1 {
		t.Errorf("post flushed %d times, want 1", f.sync.count())
	}
	if diff := cmp.Diff([]domain.EventKind{domain.EventPosted}, f.log.Kinds(task.ID)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	// A claim is flushed before it is answered, as every write (SPEC §6).
	f.claim(t, "w")
	if f.sync.count() != 2 {
		t.Errorf("claim flushed %d times, want once", f.sync.count()-1)
	}
}

func TestBadItemsChangeNothing(t *testing.T) {
	s := domain.DefaultSettings()
	s.MaxItemBytes = 32
	f := newFixture(t, s)
	cases := []struct {
		name, item string
		kind       domain.Kind
		code       domain.Code
	}{
		{"not JSON", `{"url":`, domain.KindInvalid, "invalid_json"},
		{"breaks schema", `{"width":1}`, domain.KindSchema, "invalid_item"},
		{"a number too large to judge", `{"url":"a","n":1e1001}`, domain.KindSchema, "invalid_item"},
		{"too large", `{"url":"` + string(make([]byte, 40)) + `"}`, domain.KindTooLarge, "too_large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := f.svc.Post(context.Background(), f.q, "", []byte(c.item), app.PostOptions{})
			var e *domain.Error
			if !errors.As(err, &e) || e.Kind != c.kind || e.Code != c.code {
				t.Fatalf("err = %v, want %v %s", err, c.kind, c.code)
			}
		})
	}
	if n := f.repo.Counts(f.q.Ref()); n != (ports.Counts{}) {
		t.Errorf("counts after bad posts = %+v", n)
	}
}

func TestLateResultAfterRequeueWinsAndLoserIsTold(t *testing.T) {
	s := domain.DefaultSettings()
	s.LeaseSeconds = 10
	f := newFixture(t, s)
	ctx := context.Background()
	task := f.post(t, `{"url":"a"}`)
	f.claim(t, "slow")
	f.clock.Advance(11 * time.Second)
	if err := f.svc.Sweep(ctx, []*domain.Queue{f.q}); err != nil {
		t.Fatal(err)
	}
	again := f.claim(t, "fast")
	if again.ID != task.ID || again.Attempts != 2 {
		t.Fatalf("re-claim = %+v", again)
	}
	out, err := f.svc.Result(ctx, f.q, task.ID, "slow", []byte(`{"by":"slow"}`))
	if err != nil || !out.Accepted {
		t.Fatalf("late result: %+v %v", out, err)
	}
	out, err = f.svc.Result(ctx, f.q, task.ID, "fast", []byte(`{"by":"fast"}`))
	if err != nil || out.Accepted || out.Status != domain.Finished {
		t.Fatalf("loser: %+v %v", out, err)
	}
	want := []domain.EventKind{domain.EventPosted, domain.EventClaimed, domain.EventRequeue, domain.EventClaimed, domain.EventResult}
	if diff := cmp.Diff(want, f.log.Kinds(task.ID)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestSweepTimesOutBeforeRequeue(t *testing.T) {
	s := domain.DefaultSettings()
	s.LeaseSeconds, s.QueueSeconds = 10, 20
	f := newFixture(t, s)
	ctx := context.Background()
	task := f.post(t, `{"url":"a"}`)
	f.clock.Advance(15 * time.Second)
	f.claim(t, "w")
	// Lease lapsed (at 25 s) and queue timeout (20 s) are both due at 30 s.
	f.clock.Advance(15 * time.Second)
	if err := f.svc.Sweep(ctx, []*domain.Queue{f.q}); err != nil {
		t.Fatal(err)
	}
	got, _ := f.svc.Get(ctx, f.q, task.ID)
	if got.Status != domain.Failed || got.Error == nil || *got.Error != "timeout" {
		t.Fatalf("after sweep: %+v", got)
	}
	out, _ := f.svc.Result(ctx, f.q, task.ID, "w", []byte(`1`))
	if out.Accepted {
		t.Errorf("result after timeout accepted")
	}
	want := []domain.EventKind{domain.EventPosted, domain.EventClaimed, domain.EventTimeout}
	if diff := cmp.Diff(want, f.log.Kinds(task.ID)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// eachCounter counts the done tasks Each shows the sweep.
type eachCounter struct {
	ports.TaskRepository
	done int
}

func (c *eachCounter) Each(ctx context.Context, q domain.QueueRef, st domain.Stage, fn func(domain.Task) bool) error {
	return c.TaskRepository.Each(ctx, q, st, func(t domain.Task) bool {
		if st == domain.StageDone {
			c.done++
		}
		return fn(t)
	})
}

// The retention pass stops at the first done task posted too recently to
// be due: a sweep costs what it cleans, not how many tasks are retained.
func TestSweepStopsAtTheFirstTaskTooYoungToClean(t *testing.T) {
	s := domain.DefaultSettings()
	s.RetainSeconds = 60
	f := newFixture(t, s)
	repo := &eachCounter{TaskRepository: f.repo}
	f.svc = app.New(app.Deps{
		Repo: repo, Syncer: f.sync, Log: f.log, Notifier: notify.NewHub(),
		Clock: f.clock, Compiler: schema.Compiler{},
	})
	ctx := context.Background()
	finish := func(n int) []string {
		var ids []string
		for range n {
			task := f.post(t, `{"url":"a"}`)
			f.claim(t, "w")
			if out, err := f.svc.Result(ctx, f.q, task.ID, "w", []byte(`1`)); err != nil || !out.Accepted {
				t.Fatal(out, err)
			}
			ids = append(ids, task.ID)
		}
		return ids
	}
	old := finish(3)
	f.clock.Advance(61 * time.Second)
	young := finish(200)
	f.clock.Advance(30 * time.Second)

	if err := f.svc.Sweep(ctx, []*domain.Queue{f.q}); err != nil {
		t.Fatal(err)
	}
	for _, id := range old {
		if _, err := f.svc.Get(ctx, f.q, id); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("task %s, due for cleaning, is still there (%v)", id, err)
		}
	}
	if got := f.repo.Counts(f.q.Ref()).Done; got != len(young) {
		t.Errorf("%d done tasks kept, want the %d young ones", got, len(young))
	}
	if repo.done > len(old)+1 {
		t.Errorf("the sweep looked at %d done tasks to clean %d", repo.done, len(old))
	}
}

func TestRetentionFromFetchedNeverStartsUnread(t *testing.T) {
	s := domain.DefaultSettings()
	s.RetainFrom, s.RetainSeconds = domain.RetainFromFetched, 5
	f := newFixture(t, s)
	ctx := context.Background()
	task := f.post(t, `{"url":"a"}`)
	f.claim(t, "w")
	if _, err := f.svc.Result(ctx, f.q, task.ID, "w", []byte(`1`)); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(1000 * time.Hour)
	_ = f.svc.Sweep(ctx, []*domain.Queue{f.q})
	if _, err := f.svc.Get(ctx, f.q, task.ID); err != nil {
		t.Fatalf("unread task cleaned: %v", err)
	}
	view, err := f.svc.Status(ctx, f.q, task.ID)
	if err != nil || view.Status != domain.Finished {
		t.Fatalf("status: %+v %v", view, err)
	}
	_, _ = f.svc.Status(ctx, f.q, task.ID) // a second read logs nothing
	f.clock.Advance(5 * time.Second)
	_ = f.svc.Sweep(ctx, []*domain.Queue{f.q})
	if _, err := f.svc.Get(ctx, f.q, task.ID); err != nil {
		t.Fatalf("cleaned at exactly retainSeconds: %v", err)
	}
	f.clock.Advance(time.Millisecond)
	_ = f.svc.Sweep(ctx, []*domain.Queue{f.q})
	if _, err := f.svc.Get(ctx, f.q, task.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("not cleaned after retention: %v", err)
	}
	want := []domain.EventKind{domain.EventPosted, domain.EventClaimed, domain.EventResult, domain.EventFetched, domain.EventCleaned}
	if diff := cmp.Diff(want, f.log.Kinds(task.ID)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestProgressOnlyFromLeaseHolder(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	ctx := context.Background()
	task := f.post(t, `{"url":"a"}`)
	out, _ := f.svc.Progress(ctx, f.q, task.ID, domain.Holder{Worker: "w"}, []byte(`1`))
	if out.Accepted || out.Status != domain.Pending {
		t.Errorf("progress on pending: %+v", out)
	}
	claimed := f.claim(t, "w")
	f.clock.Advance(30 * time.Second)
	out, _ = f.svc.Progress(ctx, f.q, task.ID, domain.Holder{Worker: "other"}, []byte(`1`))
	if out.Accepted {
		t.Errorf("progress from another worker accepted")
	}
	out, _ = f.svc.Progress(ctx, f.q, task.ID, domain.Holder{Worker: "w"}, []byte(`{"percent":40}`))
	if !out.Accepted || out.Lease.Until != claimed.Lease.Until+30_000 {
		t.Errorf("holder's progress: %+v (claimed until %d)", out, claimed.Lease.Until)
	}
}

func TestRequeueOnlyUnderTheSameClaim(t *testing.T) {
	s := domain.DefaultSettings()
	s.LeaseSeconds = 10
	f := newFixture(t, s)
	ctx := context.Background()
	task := f.post(t, `{"url":"a"}`)
	first := f.claim(t, "socket-a")
	f.clock.Advance(11 * time.Second)
	_ = f.svc.Sweep(ctx, []*domain.Queue{f.q})
	f.claim(t, "socket-b")
	// Socket A closes now: the task is B's under a newer claim, so it stays.
	ok, err := f.svc.Requeue(ctx, f.q, task.ID, domain.HolderOf(first), domain.CauseSocket)
	if err != nil || ok {
		t.Fatalf("requeue under an old claim = %v, %v", ok, err)
	}
	got, _ := f.svc.Get(ctx, f.q, task.ID)
	if got.Status != domain.Processing || got.Lease.Worker != "socket-b" {
		t.Errorf("task after stale requeue: %+v", got)
	}
	if ok, err := f.svc.Requeue(ctx, f.q, task.ID, domain.Holder{Worker: "socket-a", Attempt: got.Attempts}, domain.CauseSocket); err != nil || ok {
		t.Fatalf("requeue under another worker's claim = %v, %v", ok, err)
	}
	ok, err = f.svc.Requeue(ctx, f.q, task.ID, domain.HolderOf(got), domain.CauseSocket)
	if err != nil || !ok {
		t.Fatalf("requeue under the current claim = %v, %v", ok, err)
	}
}

// TestRequeueLeavesAClaimAfterARetry: a retry counts attempts from 0 again,
// so the claim after it has the attempt number of one before it. A socket
// still listing the older claim (its task failed without it, was retried
// and claimed again by the same worker name) must not re-queue the newer
// one when it closes.
func TestRequeueLeavesAClaimAfterARetry(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	ctx := context.Background()
	task := f.post(t, `{"url":"a"}`)
	first := f.claim(t, "box")
	if out, err := f.svc.Fail(ctx, f.q, task.ID, "other", nil); err != nil || !out.Accepted {
		t.Fatalf("fail: %+v %v", out, err)
	}
	f.clock.Advance(time.Second)
	if _, err := f.svc.RetryTask(ctx, f.q, task.ID); err != nil {
		t.Fatalf("retry: %v", err)
	}
	second := f.claim(t, "box")
	if second.Attempts != first.Attempts {
		t.Fatalf("attempts %d after the retry, want %d again", second.Attempts, first.Attempts)
	}
	if ok, err := f.svc.Requeue(ctx, f.q, task.ID, domain.HolderOf(first), domain.CauseSocket); err != nil || ok {
		t.Fatalf("requeue under the claim before the retry = %v, %v", ok, err)
	}
	got, _ := f.svc.Get(ctx, f.q, task.ID)
	if got.Status != domain.Processing || got.Attempts != 1 || got.Lease == nil || got.Lease.Worker != "box" {
		t.Errorf("task after the stale requeue: %+v", got)
	}
}

func TestWaitingClaimWakesOnPost(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	got := f.waitingClaim(t)
	posted := f.post(t, `{"url":"a"}`)
	claimedFrom(t, got, posted.ID, "when a task was posted")
}

// joinTracker tells a test when a claim has joined the line for work.
type joinTracker struct {
	*notify.Hub
	joined chan struct{}
}

// Await tells of the join once the claim's first look found nothing: it is
// in line by then, so a task posted afterwards wakes it or the next.
func (j joinTracker) Await(ctx context.Context, q domain.QueueRef, try func() (bool, error)) error {
	first := true
	return j.Hub.Await(ctx, q, func() (bool, error) {
		claimed, err := try()
		if first {
			first = false
			j.joined <- struct{}{}
		}
		return claimed, err
	})
}

// One task wakes one waiting claim. When that claim's query does not match,
// the wake goes on to the next in line, who takes the task.
func TestWakeGoesOnPastAClaimThatDoesNotMatch(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	hub := joinTracker{Hub: notify.NewHub(), joined: make(chan struct{}, 16)}
	svc := app.New(app.Deps{
		Repo: f.repo, Syncer: f.sync, Log: f.log, Notifier: hub,
		Clock: f.clock, Compiler: schema.Compiler{},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	picky := make(chan error, 1)
	go func() {
		_, err := svc.Claim(ctx, f.q, "picky", json.RawMessage(`{"properties":{"url":{"const":"big"}}}`), time.Minute)
		picky <- err
	}()
	<-hub.joined // picky is first in line
	got := make(chan domain.Task, 1)
	go func() {
		task, err := svc.Claim(ctx, f.q, "any", nil, time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- task
	}()
	<-hub.joined
	posted, err := svc.Post(ctx, f.q, "alice", []byte(`{"url":"small"}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case task := <-got:
		if task.ID != posted.ID || task.Lease == nil || task.Lease.Worker != "any" {
			t.Errorf("claim got %+v, want %s leased to any", task, posted.ID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the matching claim never got the task: the wake stopped at the picky one")
	}
	cancel()
	if err := <-picky; !errors.Is(err, context.Canceled) {
		t.Errorf("picky claim ended with %v, want context.Canceled", err)
	}
}

func TestDrainEndsWaitingClaims(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	done := make(chan error, 1)
	go func() {
		_, err := f.svc.Claim(context.Background(), f.q, "w", nil, time.Minute)
		done <- err
	}()
	f.svc.Drain()
	select {
	case err := <-done:
		if !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("drained claim err = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("drain did not end the waiting claim")
	}
}

func TestClaimQuery(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	ctx := context.Background()
	f.post(t, `{"url":"a","size":1}`)
	big := f.post(t, `{"url":"b","size":9}`)
	task, err := f.svc.Claim(ctx, f.q, "w", json.RawMessage(`{"properties":{"size":{"minimum":5}}}`), 0)
	if err != nil || task.ID != big.ID {
		t.Fatalf("query claim = %s, %v; want %s", task.ID, err, big.ID)
	}
	_, err = f.svc.Claim(ctx, f.q, "w", json.RawMessage(`{"type":"nonsense"}`), 0)
	var e *domain.Error
	if !errors.As(err, &e) || e.Code != "invalid_query" {
		t.Fatalf("bad query err = %v", err)
	}
}

// TestAClaimQueryWithANumberTooLargeToJudgeIsRefused: a claim query is
// bounded as a payload is (domain.OversizedNumber). Comparing one item's
// number with a const of 1e999999 costs about 20 ms, and a query is tried
// on every pending task, again for each distinct query a worker sends: a
// worker (on a public queue, anyone) could spend the server's CPU for
// minutes with one claim. It is refused at once with invalid_query.
func TestAClaimQueryWithANumberTooLargeToJudgeIsRefused(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	ctx := context.Background()
	posted := f.post(t, `{"url":"a","size":1}`)
	for _, query := range []string{
		`{"properties":{"size":{"const":1e999999}}}`,
		`{"properties":{"size":{"enum":[1,` + strings.Repeat("9", domain.MaxNumberDigits+1) + `]}}}`,
	} {
		_, err := f.svc.Claim(ctx, f.q, "w", json.RawMessage(query), 0)
		var e *domain.Error
		if !errors.As(err, &e) || e.Code != domain.CodeInvalidQuery {
			t.Errorf("claim with %.60s: %v, want invalid_query", query, err)
		}
		_, _, err = f.svc.ListTasks(ctx, f.q, app.ListQuery{Status: domain.Pending, Limit: 10, Query: json.RawMessage(query)})
		if !errors.As(err, &e) || e.Code != domain.CodeInvalidQuery {
			t.Errorf("list with %.60s: %v, want invalid_query", query, err)
		}
	}
	if task, err := f.svc.Claim(ctx, f.q, "w", json.RawMessage(`{"properties":{"size":{"enum":[1e1000,1]}}}`), 0); err != nil || task.ID != posted.ID {
		t.Errorf("a query within the bounds claimed %q, %v; want %s", task.ID, err, posted.ID)
	}
}

func TestLogFailureIsNotAcknowledged(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	f.log.Fail(&domain.Error{Kind: domain.KindUnavailable, Code: "log_unavailable", Message: "disc full"})
	_, err := f.svc.Post(context.Background(), f.q, "", []byte(`{"url":"a"}`), app.PostOptions{})
	if domain.KindOf(err) != domain.KindUnavailable {
		t.Fatalf("post with a failing log: %v", err)
	}
	if n := f.repo.Counts(f.q.Ref()); n != (ports.Counts{}) {
		t.Errorf("unacknowledged post left a task: %+v", n)
	}
	// Another caller's commit may hold the post's write: the take-back is
	// flushed before the answer, or a power loss could bring the task back.
	if n := f.sync.count(); n != 1 {
		t.Errorf("%d flushes after the take-back of a post, want 1", n)
	}
}

// TestABatchCutOffMidwayLeavesNothing: a client that goes while its batch
// is being stored gets no task of it, though its context has ended by the
// time the stored ones are taken back.
func TestABatchCutOffMidwayLeavesNothing(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	ctx, cancel := context.WithCancel(context.Background())
	appends := 0
	f.log.BeforeAppend(func() {
		if appends++; appends == 2 {
			cancel() // the client goes
			f.log.Fail(context.Canceled)
		}
	})
	items := [][]byte{[]byte(`{"url":"a"}`), []byte(`{"url":"b"}`), []byte(`{"url":"c"}`)}
	if _, err := f.svc.PostBatch(ctx, f.q, "", items, app.PostOptions{}); err == nil {
		t.Fatal("a batch cut off midway succeeded")
	}
	if n := f.repo.Counts(f.q.Ref()); n != (ports.Counts{}) {
		t.Errorf("a batch cut off midway left tasks: %+v", n)
	}
}

// TestABatchWhoseLogFailsIsTakenBackDurably: a batch is stored whole, then
// its lines written; when one fails, the batch is deleted (all or nothing)
// and the deletions flushed, once, before the 503.
func TestABatchWhoseLogFailsIsTakenBackDurably(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	appends := 0
	f.log.BeforeAppend(func() {
		if appends++; appends == 3 {
			f.log.Fail(&domain.Error{Kind: domain.KindUnavailable, Code: "log_unavailable", Message: "disc full"})
		}
	})
	items := [][]byte{[]byte(`{"url":"a"}`), []byte(`{"url":"b"}`), []byte(`{"url":"c"}`)}
	if _, err := f.svc.PostBatch(context.Background(), f.q, "", items, app.PostOptions{}); domain.KindOf(err) != domain.KindUnavailable {
		t.Fatalf("batch with a failing log: %v", err)
	}
	if n := f.repo.Counts(f.q.Ref()); n != (ports.Counts{}) {
		t.Errorf("unacknowledged batch left tasks: %+v", n)
	}
	if n := f.sync.count(); n != 1 { // the take-back's
		t.Errorf("%d flushes after the take-back of a batch, want 1", n)
	}
}

// commitOnDisc is a Persister and a Syncer that keep what a power loss
// would leave: the files on disc, and those a flush (a journal's commit)
// made durable. A write the store refuses is failAt (counting from 1);
// after the write afterPut, another caller flushes (a claim's commit).
type commitOnDisc struct {
	mu       sync.Mutex
	disc     map[string]bool
	durable  map[string]bool
	puts     int
	failAt   int
	afterPut int
}

func (c *commitOnDisc) Put(_ *domain.Task, t domain.Task, _ []byte) error {
	c.mu.Lock()
	c.puts++
	n := c.puts
	if n == c.failAt {
		c.mu.Unlock()
		return &domain.Error{Kind: domain.KindUnavailable, Code: domain.CodeStorageUnavailable, Message: "disc full"}
	}
	c.disc[t.ID] = true
	c.mu.Unlock()
	if n == c.afterPut {
		_ = c.Sync(context.Background())
	}
	return nil
}

func (c *commitOnDisc) Remove(t domain.Task) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.disc, t.ID)
	return nil
}

func (c *commitOnDisc) Sync(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.durable = maps.Clone(c.disc)
	return nil
}

// TestABatchTheStoreRefusesMidwayIsTakenBackDurably: the store writes a
// batch's first item, another caller's flush makes that write durable, and
// the second item's write fails (a full disc): the store removes the first
// again and the batch is answered 503. That removal must be flushed before
// the answer, or a power loss would bring the first item back beside the
// client's retry: a batch stored in part, and a twin.
func TestABatchTheStoreRefusesMidwayIsTakenBackDurably(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	disc := &commitOnDisc{disc: map[string]bool{}, failAt: 2, afterPut: 1}
	svc := app.New(app.Deps{
		Repo: index.New(index.WithPersister(disc)), Syncer: disc, Log: f.log, Notifier: notify.NewHub(),
		Clock: f.clock, Compiler: schema.Compiler{},
	})
	items := [][]byte{[]byte(`{"url":"a"}`), []byte(`{"url":"b"}`), []byte(`{"url":"c"}`)}
	if _, err := svc.PostBatch(context.Background(), f.q, "", items, app.PostOptions{}); domain.KindOf(err) != domain.KindUnavailable {
		t.Fatalf("batch the store refuses: %v", err)
	}
	disc.mu.Lock()
	defer disc.mu.Unlock()
	if len(disc.disc) != 0 {
		t.Errorf("the refused batch left files: %v", disc.disc)
	}
	if len(disc.durable) != 0 {
		t.Errorf("after the 503, a power loss would leave the refused batch's tasks %v", disc.durable)
	}
}

// TestABatchTakenBackEndsItsTasksInTheLog: the items of a batch whose
// lines came before the one that failed have them written; taken back,
// each gets a cleaned line, so no task of the log vanishes unsaid (a
// worker may have claimed it meanwhile). The item whose line failed has no line at all.
func TestABatchTakenBackEndsItsTasksInTheLog(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	appends := 0
	f.log.BeforeAppend(func() {
		switch appends++; appends {
		case 3: // the third item's posted line
			f.log.Fail(&domain.Error{Kind: domain.KindUnavailable, Code: "log_unavailable", Message: "disc full for a moment"})
		case 4:
			f.log.Fail(nil)
		}
	})
	items := [][]byte{[]byte(`{"url":"a"}`), []byte(`{"url":"b"}`), []byte(`{"url":"c"}`)}
	if _, err := f.svc.PostBatch(context.Background(), f.q, "", items, app.PostOptions{}); domain.KindOf(err) != domain.KindUnavailable {
		t.Fatalf("batch with a failing line: %v", err)
	}
	if n := f.repo.Counts(f.q.Ref()); n != (ports.Counts{}) {
		t.Errorf("unacknowledged batch left tasks: %+v", n)
	}
	var got []string
	for _, ev := range f.log.Events() {
		got = append(got, string(ev.Kind)+" "+string(ev.Task.Item))
	}
	want := []string{`posted {"url":"a"}`, `posted {"url":"b"}`, `cleaned {"url":"a"}`, `cleaned {"url":"b"}`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("event lines (-want +got):\n%s", diff)
	}
}

// TestEventsInStoreOrder: concurrent transitions of one task reach the log
// in the order they were stored, so the last logged progress is the stored one.
func TestEventsInStoreOrder(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	ctx := context.Background()
	task := f.post(t, `{"url":"a"}`)
	f.claim(t, "w")
	// Yielding before each append widens the window in which a concurrent
	// transition could overtake this one's event.
	f.log.BeforeAppend(func() {
		for range rand.IntN(50) {
			runtime.Gosched()
		}
	})
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.svc.Progress(ctx, f.q, task.ID, domain.Holder{Worker: "w"}, []byte(strconv.Itoa(i))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	stored, _ := f.svc.Get(ctx, f.q, task.ID)
	events := f.log.Events()
	last := events[len(events)-1]
	if string(last.Task.Progress) != string(stored.Progress) {
		t.Errorf("last logged progress %s, stored %s", last.Task.Progress, stored.Progress)
	}
}

// gatherRepo holds each Update until want of them are under way at once,
// or a while has passed: moves back run one after another would each wait
// there alone (and, on the file store, each for a commit of its own).
type gatherRepo struct {
	*index.Store
	want int

	mu      sync.Mutex
	inOne   int
	most    int
	arrived chan struct{} // closed once want are under way
}

func (r *gatherRepo) Update(ctx context.Context, k domain.Key, fn func(*domain.Task) error, then ports.Then) (domain.Task, error) {
	r.mu.Lock()
	r.inOne++
	r.most = max(r.most, r.inOne)
	if r.inOne == r.want {
		close(r.arrived)
	}
	r.mu.Unlock()
	select {
	case <-r.arrived:
	case <-time.After(2 * time.Second):
	}
	defer func() {
		r.mu.Lock()
		r.inOne--
		r.mu.Unlock()
	}()
	return r.Store.Update(ctx, k, fn, then)
}

func (r *gatherRepo) mostAtOnce() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.most
}

// A socket that closes holding tasks, and a sweep that finds leases lapsed,
// move them back to pending side by side, so that on the file store they
// share commits rather than wait for one each.
func TestMovesBackRunSideBySide(t *testing.T) {
	const tasks = 5
	for _, how := range []string{"socket closed", "leases lapsed"} {
		t.Run(how, func(t *testing.T) {
			s := domain.DefaultSettings()
			s.LeaseSeconds = 10
			f := newFixture(t, s)
			repo := &gatherRepo{Store: f.repo, want: tasks, arrived: make(chan struct{})}
			f.svc = app.New(app.Deps{Repo: repo, Syncer: f.sync, Log: f.log, Notifier: notify.NewHub(), Clock: f.clock, Compiler: schema.Compiler{}, MovesBackAtOnce: tasks})
			ctx := context.Background()
			held := f.holdTasks(t, tasks)
			if how == "socket closed" {
				n, err := f.svc.RequeueAll(ctx, f.q, held, domain.CauseSocket)
				if err != nil || n != tasks {
					t.Fatalf("RequeueAll = %d, %v; want %d", n, err, tasks)
				}
			} else {
				f.clock.Advance(11 * time.Second)
				if err := f.svc.Sweep(ctx, []*domain.Queue{f.q}); err != nil {
					t.Fatal(err)
				}
			}
			if got := repo.mostAtOnce(); got != tasks {
				t.Errorf("at most %d moves back under way at once, want all %d", got, tasks)
			}
			if c := f.repo.Counts(f.q.Ref()); c.Pending != tasks {
				t.Errorf("%d tasks pending after the moves back, want %d", c.Pending, tasks)
			}
		})
	}
}

// failingRepo refuses every Update, counting them.
type failingRepo struct {
	*index.Store
	updates atomic.Int32
}

func (r *failingRepo) Update(context.Context, domain.Key, func(*domain.Task) error, ports.Then) (domain.Task, error) {
	r.updates.Add(1)
	return domain.Task{}, errDiscGone
}

var errDiscGone = errors.New("disc gone")

// A move back that fails leaves the others to go on (the task stays
// processing until its lease lapses), and the error says how many failed.
func TestRequeueAllTriesEveryTaskAndCountsFailures(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	held := f.holdTasks(t, 5)
	repo := &failingRepo{Store: f.repo}
	svc := app.New(app.Deps{Repo: repo, Syncer: f.sync, Log: f.log, Notifier: notify.NewHub(), Clock: f.clock, Compiler: schema.Compiler{}, MovesBackAtOnce: 3})
	n, err := svc.RequeueAll(context.Background(), f.q, held, domain.CauseSocket)
	if n != 0 || !errors.Is(err, errDiscGone) || !strings.Contains(err.Error(), "5 of 5 failed") {
		t.Errorf("RequeueAll = %d, %v; want 0 and the failures counted", n, err)
	}
	if got := repo.updates.Load(); got != 5 {
		t.Errorf("%d moves back tried, want all 5", got)
	}
}

// reloadable is a ports.Config of one queue, which a test replaces as a
// reload would.
type reloadable struct{ q atomic.Pointer[domain.Queue] }

func (c *reloadable) Host(name string) (*domain.Host, bool) {
	q := c.q.Load()
	if name != q.Host {
		return nil, false
	}
	return &domain.Host{Name: q.Host, Queues: map[string]*domain.Queue{q.Name: q}}, true
}

func (c *reloadable) Queues() []*domain.Queue { return []*domain.Queue{c.q.Load()} }

// reloadable is a service over f's store whose configuration (f.q at
// first) a test replaces, with the hub its claims wait on.
func (f *fixture) reloadable() (*app.Service, *reloadable, *notify.Hub) {
	cfg := &reloadable{}
	cfg.q.Store(f.q)
	hub := notify.NewHub()
	svc := app.New(app.Deps{
		Repo: f.repo, Syncer: f.sync, Log: f.log, Notifier: hub,
		Clock: f.clock, Compiler: schema.Compiler{}, Config: cfg, Pauses: f.repo,
	})
	return svc, cfg, hub
}

// TestAWaitingClaimJudgesByTheQueueInForce: a claim that began waiting
// under maxAttempts 3 and is woken after a reload lowered it to 2 judges
// the task it finds by 2: a task with 2 attempts spent becomes a dead
// letter, not the claim's third attempt.
func TestAWaitingClaimJudgesByTheQueueInForce(t *testing.T) {
	s := domain.DefaultSettings()
	s.MaxAttempts = 3
	f := newFixture(t, s)
	svc, cfg, hub := f.reloadable()
	ctx := context.Background()
	task, err := svc.Post(ctx, f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var held domain.Task
	for i := range 2 {
		if held, err = svc.Claim(ctx, f.q, "w", nil, 0); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if _, err := svc.Requeue(ctx, f.q, task.ID, domain.HolderOf(held), domain.CauseSocket); err != nil {
				t.Fatal(err)
			}
		}
	}

	claimCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	type claimed struct {
		t   domain.Task
		err error
	}
	got := make(chan claimed, 1)
	go func() {
		t, err := svc.Claim(claimCtx, f.q, "late", nil, 30*time.Second)
		got <- claimed{t, err}
	}()
	waitUntil(t, "the claim to wait", func() bool { return hub.Waiting(f.q.Ref()) == 1 })

	reloaded := *f.q
	reloaded.Settings.MaxAttempts = 2
	cfg.q.Store(&reloaded)
	if ok, err := svc.Requeue(ctx, f.q, task.ID, domain.HolderOf(held), domain.CauseSocket); err != nil || !ok {
		t.Fatalf("requeue: %v %v", ok, err)
	}
	waitUntil(t, "the task to become a dead letter", func() bool {
		t, err := svc.Get(ctx, f.q, task.ID)
		return err == nil && t.Status == domain.Failed
	})
	cancel()
	if c := <-got; c.err == nil {
		t.Errorf("the waiting claim took %s at attempt %d, past the reloaded maxAttempts 2", c.t.ID, c.t.Attempts)
	}
}

// TestABatchClaimJudgesEveryTaskByTheQueueInForce: a batch claim (max)
// that waited while a reload lowered maxAttempts from 3 to 2 judges the
// tasks it takes after its first by 2 as well: one with 2 attempts spent
// becomes a dead letter, not the batch's second task at attempt 3.
func TestABatchClaimJudgesEveryTaskByTheQueueInForce(t *testing.T) {
	s := domain.DefaultSettings()
	s.MaxAttempts = 3
	f := newFixture(t, s)
	svc, cfg, hub := f.reloadable()
	ctx := context.Background()
	// fresh is pending before spent: the batch's first claim, judged by
	// the queue in force, takes fresh; the rest meet spent.
	fresh, err := svc.Post(ctx, f.q, "alice", []byte(`{"url":"fresh"}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)
	spent, err := svc.Post(ctx, f.q, "alice", []byte(`{"url":"spent"}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var held domain.Task
	for i := range 2 {
		if held, err = svc.Claim(ctx, f.q, "w", json.RawMessage(`{"properties":{"url":{"const":"spent"}}}`), 0); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if _, err := svc.Requeue(ctx, f.q, spent.ID, domain.HolderOf(held), domain.CauseSocket); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := svc.SetPaused(ctx, f.q, true); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)
	if ok, err := svc.Requeue(ctx, f.q, spent.ID, domain.HolderOf(held), domain.CauseSocket); err != nil || !ok {
		t.Fatalf("requeue: %v %v", ok, err)
	}

	type claimed struct {
		tasks []domain.Task
		err   error
	}
	got := make(chan claimed, 1)
	go func() {
		tasks, err := svc.ClaimMany(ctx, f.q, "late", nil, 30*time.Second, 2)
		got <- claimed{tasks, err}
	}()
	waitUntil(t, "the batch claim to wait", func() bool { return hub.Waiting(f.q.Ref()) == 1 })
	reloaded := *f.q
	reloaded.Settings.MaxAttempts = 2
	cfg.q.Store(&reloaded)
	if err := svc.SetPaused(ctx, f.q, false); err != nil {
		t.Fatal(err)
	}
	c := <-got
	if c.err != nil {
		t.Fatal(c.err)
	}
	for _, task := range c.tasks {
		if task.ID != fresh.ID {
			t.Errorf("the batch claim took %s at attempt %d, past the reloaded maxAttempts 2", task.ID, task.Attempts)
		}
	}
	if task, err := svc.Get(ctx, f.q, spent.ID); err != nil || task.Status != domain.Failed {
		t.Errorf("the spent task: status %s, %v; want failed (a dead letter)", task.Status, err)
	}
}

// waitUntil retries cond until it holds or 10 s pass.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// A reload that lowers maxAttempts below what a pending task has used:
// the next claim hands out the task behind it, and makes the spent one a
// dead letter (SPEC §11: no task is handed out more than maxAttempts
// times).
func TestAClaimSkipsATaskALoweredMaxAttemptsHasSpent(t *testing.T) {
	s := domain.DefaultSettings()
	s.MaxAttempts = 5
	f := newFixture(t, s)
	ctx := context.Background()
	spent := f.post(t, `{"url":"spent"}`)
	for range 3 {
		c := f.claim(t, "w")
		if ok, err := f.svc.Requeue(ctx, f.q, c.ID, domain.HolderOf(c), domain.CauseSocket); err != nil || !ok {
			t.Fatalf("requeue: %v, %v", ok, err)
		}
	}
	f.clock.Advance(time.Second) // the spent task is the older: claims find it first
	next := f.post(t, `{"url":"next"}`)

	reloaded := *f.q
	reloaded.Settings.MaxAttempts = 3
	got, err := f.svc.Claim(ctx, &reloaded, "w", nil, 0)
	if err != nil || got.ID != next.ID || got.Attempts != 1 {
		t.Fatalf("claim after the reload = %s (attempts %d), %v; want %s, the task behind the spent one", got.ID, got.Attempts, err, next.ID)
	}
	dead, err := f.svc.Get(ctx, f.q, spent.ID)
	if err != nil || dead.Status != domain.Failed || dead.Error == nil || *dead.Error != domain.AttemptsError || dead.Attempts != 3 {
		t.Fatalf("the spent task = %+v, %v; want a dead letter after 3 attempts", dead, err)
	}
	if kinds := f.log.Kinds(spent.ID); kinds[len(kinds)-1] != domain.EventFailed {
		t.Errorf("the spent task's events %v, want failed last", kinds)
	}
	if _, err := f.svc.Claim(ctx, &reloaded, "w", nil, 0); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("a claim with nothing left: %v, want ErrNotFound", err)
	}
}

// TestAClaimTimesOutATaskPastItsQueueTime: a claim that meets a pending
// task older than queueSeconds before the sweep does (it runs every second
// or so) times it out as the sweep would, and takes the task behind it: a
// worker handed it would see its result refused once the sweep came.
func TestAClaimTimesOutATaskPastItsQueueTime(t *testing.T) {
	s := domain.DefaultSettings()
	s.QueueSeconds = 10
	f := newFixture(t, s)
	ctx := context.Background()
	old := f.post(t, `{"url":"old"}`)
	f.clock.Advance(5 * time.Second)
	young := f.post(t, `{"url":"young"}`)
	f.clock.Advance(5*time.Second + time.Millisecond) // old is 10.001 s old, young 5.001 s

	got, err := f.svc.Claim(ctx, f.q, "w", nil, 0)
	if err != nil || got.ID != young.ID {
		t.Fatalf("claim = %s, %v; want %s, the task behind the one past its queue time", got.ID, err, young.ID)
	}
	late, err := f.svc.Get(ctx, f.q, old.ID)
	if err != nil || late.Status != domain.Failed || late.Error == nil || *late.Error != domain.TimeoutError || late.Attempts != 0 {
		t.Fatalf("the old task = %+v, %v; want failed with error timeout, never claimed", late, err)
	}
	if diff := cmp.Diff([]domain.EventKind{domain.EventPosted, domain.EventTimeout}, f.log.Kinds(old.ID)); diff != "" {
		t.Errorf("the old task's events (-want +got):\n%s", diff)
	}
}

// pausingRepo runs pause as each claim reaches the store: a pause that
// lands while a claim that found the queue running waits for its lock.
type pausingRepo struct {
	ports.TaskRepository
	pause func()
}

func (r *pausingRepo) ClaimNext(ctx context.Context, q domain.QueueRef, m ports.Matcher, now time.Time, fn func(*domain.Task) error, then ports.Then) (domain.Task, error) {
	r.pause()
	return r.TaskRepository.ClaimNext(ctx, q, m, now, fn, then)
}

// TestAPauseStopsAClaimAlreadyOnItsWay: a claim that found the queue
// running, then met a pause before it took a task, takes none. Once a
// pause has answered, no claim decides to hand a task out (SPEC §12:
// while paused, claims wait).
func TestAPauseStopsAClaimAlreadyOnItsWay(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	ctx := context.Background()
	repo := &pausingRepo{TaskRepository: f.repo, pause: func() {
		if err := f.repo.SetPaused(ctx, f.q.Ref(), true); err != nil {
			t.Error(err)
		}
	}}
	svc := app.New(app.Deps{
		Repo: repo, Syncer: f.sync, Log: f.log, Notifier: notify.NewHub(),
		Clock: f.clock, Compiler: schema.Compiler{}, Pauses: f.repo,
	})
	posted, err := svc.Post(ctx, f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claimed, err := svc.Claim(ctx, f.q, "w", nil, 0); err == nil {
		t.Errorf("the claim took %s after the pause", claimed.ID)
	}
	if got, err := svc.Get(ctx, f.q, posted.ID); err != nil || got.Status != domain.Pending || got.Attempts != 0 {
		t.Errorf("the task is %s after %d attempts (%v); want pending, untouched", got.Status, got.Attempts, err)
	}
}
