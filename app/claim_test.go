package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/adapters/index"
	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// lookRecorder passes each look of a waiting claim on to the hub, and
// tells the test what the look reported.
type lookRecorder struct {
	*notify.Hub
	looks chan error
}

func (r lookRecorder) Await(ctx context.Context, q domain.QueueRef, try func() (bool, error)) error {
	return r.Hub.Await(ctx, q, func() (bool, error) {
		claimed, err := try()
		r.looks <- err
		return claimed, err
	})
}

// A claim that has to wait looks once before it sleeps, in line. One
// without a query that finds nothing says it found nothing claimable at
// all (domain.ErrNotFound), so the notifier need not hand its wake on; one
// with a query only says it took nothing.
func TestAnEmptyLookSaysSo(t *testing.T) {
	for _, tc := range []struct {
		name  string
		query json.RawMessage
		want  error
	}{
		{"no query", nil, domain.ErrNotFound},
		{"a query", json.RawMessage(`{"properties":{"url":{"const":"big"}}}`), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, domain.DefaultSettings())
			repo := &countingRepo{Store: f.repo}
			rec := lookRecorder{Hub: notify.NewHub(), looks: make(chan error, 4)}
			svc := app.New(app.Deps{
				Repo: repo, Syncer: f.sync, Log: f.log, Notifier: rec,
				Clock: f.clock, Compiler: schema.Compiler{},
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := svc.Claim(ctx, f.q, "w", tc.query, time.Minute)
				done <- err
			}()
			if got := <-rec.looks; !errors.Is(got, tc.want) || (tc.want == nil && got != nil) {
				t.Errorf("the look reported %v, want %v", got, tc.want)
			}
			// It looked once, in line, before it went to sleep: a look
			// before joining the line would need this one after it too.
			if n := repo.claims.Load(); n != 1 {
				t.Errorf("the claim looked %d times before it waited, want 1", n)
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Claim = %v, want context.Canceled: an empty look must not end the wait", err)
			}
		})
	}
}

// countingRepo counts the repository's Get and ClaimNext calls.
type countingRepo struct {
	*index.Store
	gets, claims atomic.Int64
}

func (c *countingRepo) Get(ctx context.Context, k domain.Key) (domain.Task, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, k)
}

func (c *countingRepo) ClaimNext(ctx context.Context, ref domain.QueueRef, m ports.Matcher, now time.Time, fn func(*domain.Task) error, then ports.Then) (domain.Task, error) {
	c.claims.Add(1)
	return c.Store.ClaimNext(ctx, ref, m, now, fn, then)
}

// ClaimWatched's watch starts at the record claimed and sees every later
// change, the cancel of SPEC §12 included, without reading the task: it is
// subscribed in the claim's own Then. Claimed at once and after waiting.
func TestClaimWatchedSeesLaterChangesWithoutARead(t *testing.T) {
	for _, waits := range []bool{false, true} {
		t.Run(map[bool]string{false: "at once", true: "after waiting"}[waits], func(t *testing.T) {
			f := newFixture(t, domain.DefaultSettings())
			repo := &countingRepo{Store: f.repo}
			svc := app.New(app.Deps{
				Repo: repo, Syncer: f.sync, Log: f.log, Notifier: notify.NewHub(),
				Clock: f.clock, Compiler: schema.Compiler{},
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			post := func() domain.Task {
				task, err := svc.Post(ctx, f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return task
			}
			var posted domain.Task
			if !waits {
				posted = post()
			}
			type claimed struct {
				task  domain.Task
				watch *app.Watch
				err   error
			}
			got := make(chan claimed, 1)
			go func() {
				task, watch, err := svc.ClaimWatched(ctx, f.q, "w", nil, time.Minute, nil, 4)
				got <- claimed{task, watch, err}
			}()
			if waits {
				posted = post()
			}
			c := <-got
			if c.err != nil {
				t.Fatal(c.err)
			}
			defer c.watch.Close()
			if c.task.ID != posted.ID || c.watch.Task.Status != domain.Processing || c.watch.Task.Attempts != c.task.Attempts {
				t.Fatalf("claimed %s, watch begins at %+v; want %s processing", c.task.ID, c.watch.Task, posted.ID)
			}
			if _, err := svc.Progress(ctx, f.q, posted.ID, domain.Holder{Worker: "w"}, []byte(`{"n":1}`)); err != nil {
				t.Fatal(err)
			}
			if _, err := svc.Cancel(ctx, f.q, posted.ID, app.Canceller{Manage: true}); err != nil {
				t.Fatal(err)
			}
			for _, want := range []domain.EventKind{domain.EventProgress, domain.EventCancelled} {
				ev, err := c.watch.Next(ctx)
				if err != nil || ev.Kind != want {
					t.Fatalf("next change = %s, %v; want %s", ev.Kind, err, want)
				}
			}
			if n := repo.gets.Load(); n != 0 {
				t.Errorf("the claim's watch read the task %d times, want none", n)
			}
		})
	}
}

// othersNotifier is a hub beside other servers (Others) that says whether
// it heard of a change of the task another server made (Heard).
type othersNotifier struct {
	*notify.Hub
	heard bool
	asked atomic.Int64
}

func (o *othersNotifier) Others() bool { return true }

func (o *othersNotifier) Heard(domain.Key, int) bool {
	o.asked.Add(1)
	return o.heard
}

// besideOthers is a service over f's queue and repo whose notifier stands
// beside other servers (othersNotifier, saying heard).
func besideOthers(f *fixture, repo ports.TaskRepository, heard bool) (*app.Service, *othersNotifier) {
	n := &othersNotifier{Hub: notify.NewHub(), heard: heard}
	svc := app.New(app.Deps{
		Repo: repo, Syncer: f.sync, Log: f.log, Notifier: n,
		Clock: f.clock, Compiler: schema.Compiler{},
	})
	return svc, n
}

// Beside other servers, ClaimWatched reads the task only when the notifier
// may have let another server's change of it go by before the claim's Then
// subscribed (pgnotify.Notifier.Heard): a read per claim otherwise.
func TestClaimWatchedBesideOtherServersReadsOnlyWhatItMayHaveMissed(t *testing.T) {
	for _, heard := range []bool{false, true} {
		t.Run(map[bool]string{false: "nothing heard", true: "heard"}[heard], func(t *testing.T) {
			f := newFixture(t, domain.DefaultSettings())
			repo := &countingRepo{Store: f.repo}
			svc, n := besideOthers(f, repo, heard)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			posted, err := svc.Post(ctx, f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{})
			if err != nil {
				t.Fatal(err)
			}
			task, watch, err := svc.ClaimWatched(ctx, f.q, "w", nil, time.Minute, nil, 4)
			if err != nil {
				t.Fatal(err)
			}
			defer watch.Close()
			if task.ID != posted.ID || watch.Task.Status != domain.Processing {
				t.Fatalf("claimed %s, watch begins at %s", task.ID, watch.Task.Status)
			}
			want := int64(0)
			if heard {
				want = 1
			}
			if got := repo.gets.Load(); got != want || n.asked.Load() != 1 {
				t.Errorf("asked Heard %d times, read the task %d times; want once, and %d reads", n.asked.Load(), got, want)
			}
			if _, err := svc.Cancel(ctx, f.q, posted.ID, app.Canceller{Manage: true}); err != nil {
				t.Fatal(err)
			}
			if ev, err := watch.Next(ctx); err != nil || ev.Kind != domain.EventCancelled {
				t.Fatalf("next change = %s, %v; want cancelled", ev.Kind, err)
			}
		})
	}
}

// Beside other servers, a claim's watch skips news older than the claim:
// a task posted on one server and claimed at once on another is claimed
// before the post's notification reaches the claiming server, so the
// post's news comes after the claim. The worker socket took it for the end
// of its claim and stopped watching, and the cancel that followed never
// reached the worker (TestTwoServersOnOnePostgres, now and then).
func TestClaimWatchedSkipsNewsOlderThanTheClaim(t *testing.T) {
	for _, heard := range []bool{false, true} {
		t.Run(map[bool]string{false: "watched from the claim", true: "watched from a read"}[heard], func(t *testing.T) {
			f := newFixture(t, domain.DefaultSettings())
			svc, n := besideOthers(f, f.repo, heard)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			posted, err := svc.Post(ctx, f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{})
			if err != nil {
				t.Fatal(err)
			}
			_, watch, err := svc.ClaimWatched(ctx, f.q, "w", nil, time.Minute, nil, 4)
			if err != nil {
				t.Fatal(err)
			}
			defer watch.Close()
			wantCancelAfterLateNews(ctx, t, svc, n, f.q, posted, watch)
		})
	}
}

// WatchClaim, the watch a worker socket starts again after its claim's
// watch was lost, skips news older than the claim as the claim's own does.
func TestWatchClaimSkipsNewsOlderThanTheClaim(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	svc, n := besideOthers(f, f.repo, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	posted, err := svc.Post(ctx, f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := svc.Claim(ctx, f.q, "w", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	watch, err := svc.WatchClaim(ctx, f.q, claimed.ID, claimed.Attempts, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	if watch.Task.Status != domain.Processing || watch.Task.Attempts != claimed.Attempts {
		t.Fatalf("the watch begins at %s, attempt %d", watch.Task.Status, watch.Task.Attempts)
	}
	wantCancelAfterLateNews(ctx, t, svc, n, f.q, posted, watch)
}

// wantCancelAfterLateNews has n deliver posted's news late, as another
// server's notification brings it after the claim, then cancels the task:
// the next change watch gives must be the cancel.
func wantCancelAfterLateNews(ctx context.Context, t *testing.T, svc *app.Service, n *othersNotifier, q *domain.Queue, posted domain.Task, watch *app.Watch) {
	t.Helper()
	n.Publish(domain.Event{Kind: domain.EventPosted, At: time.UnixMilli(posted.UpdatedAt), Task: posted})
	if _, err := svc.Cancel(ctx, q, posted.ID, app.Canceller{Manage: true}); err != nil {
		t.Fatal(err)
	}
	ev, err := watch.Next(ctx)
	if err != nil || ev.Kind != domain.EventCancelled || ev.Task.Status != domain.Failed {
		t.Fatalf("next change = %s (%s), %v; want the cancel, not the post's late news", ev.Kind, ev.Task.Status, err)
	}
}

// arrivingSyncer notes, in order, the posts' and the claims' calls of a
// Syncer whose flush may wait for a claim on its way (durable.Syncer).
type arrivingSyncer struct {
	mu    sync.Mutex
	calls []string
}

func (s *arrivingSyncer) note(call string) {
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.mu.Unlock()
}

func (s *arrivingSyncer) Expect()                          { s.note("expect") }
func (s *arrivingSyncer) Unexpect()                        { s.note("unexpect") }
func (s *arrivingSyncer) Sync(context.Context) error       { s.note("sync"); return nil }
func (s *arrivingSyncer) Arrive(ctx context.Context) error { s.note("arrive"); return nil }

// A task posted while a claim waits is expected by the post's flush
// before the post asks for it, and the claim arrives at it: one commit
// from the post to the worker, not two.
func TestAClaimWokenByAPostArrivesAtItsFlush(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	s := &arrivingSyncer{}
	hub := notify.NewHub()
	hub.OnWake(s.Expect, s.Unexpect)
	looks := make(chan error, 4)
	svc := app.New(app.Deps{
		Repo: f.repo, Syncer: s, Log: f.log, Notifier: lookRecorder{Hub: hub, looks: looks},
		Clock: f.clock, Compiler: schema.Compiler{},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	claimed := make(chan error, 1)
	go func() {
		_, err := svc.Claim(ctx, f.q, "w", nil, time.Minute)
		claimed <- err
	}()
	<-looks // the claim found nothing and waits
	if _, err := svc.Post(ctx, f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-claimed; err != nil {
		t.Fatalf("claim: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The claim runs beside the post once woken: its arrival may come
	// before the post's sync or after it.
	got := slices.Clone(s.calls)
	slices.Sort(got[1:])
	if want := []string{"expect", "arrive", "sync"}; !slices.Equal(got, want) {
		t.Fatalf("syncer calls %v, want expect first, then the post's sync and the claim's arrival", s.calls)
	}
}

// secondLook is a store that, as the PostgreSQL store's claim from its
// stock may, first offers fn a stale copy of a task whose attempts are
// spent, then claims for real: fn refuses the copy and claims the task
// the store settles on.
type secondLook struct {
	ports.TaskRepository
	stale domain.Task
}

func (r *secondLook) ClaimNext(ctx context.Context, q domain.QueueRef, m ports.Matcher, now time.Time, fn func(*domain.Task) error, then ports.Then) (domain.Task, error) {
	copied := r.stale
	if err := fn(&copied); !errors.Is(err, domain.ErrAttemptsSpent) {
		return domain.Task{}, fmt.Errorf("the stale copy: %v, want it refused as spent", err)
	}
	return r.TaskRepository.ClaimNext(ctx, q, m, now, fn, then)
}

// TestAClaimKeepsTheTaskItsStoreSettledOn: a refusal of a task the store
// then passes by must not make the claim drop the task it did store: that
// one is processing, its attempt counted, and would reach no worker.
func TestAClaimKeepsTheTaskItsStoreSettledOn(t *testing.T) {
	s := domain.DefaultSettings()
	s.MaxAttempts = 1
	f := newFixture(t, s)
	spent := f.post(t, `{"url":"spent"}`)
	spent.Attempts = 1 // as a stale copy might say
	repo := &secondLook{TaskRepository: f.repo, stale: spent}
	svc := app.New(app.Deps{Repo: repo, Syncer: f.sync, Log: f.log, Notifier: notify.NewHub(), Clock: f.clock, Compiler: schema.Compiler{}})
	type claimed struct {
		t   domain.Task
		err error
	}
	done := make(chan claimed, 1)
	go func() { // a claim that drops its task claims on for ever
		got, err := svc.Claim(context.Background(), f.q, "w", nil, 0)
		done <- claimed{got, err}
	}()
	var got domain.Task
	select {
	case c := <-done:
		if c.err != nil {
			t.Fatal(c.err)
		}
		got = c.t
	case <-time.After(10 * time.Second):
		t.Fatal("the claim did not return: it dropped the task its store claimed")
	}
	stored, _ := f.svc.Get(context.Background(), f.q, got.ID)
	if got.ID != spent.ID || stored.Status != domain.Processing || stored.Attempts != 1 {
		t.Errorf("claimed %s (stored %s, attempts %d), want %s, the task the store claimed", got.ID, stored.Status, stored.Attempts, spent.ID)
	}
	if n := f.repo.Counts(f.q.Ref()); n.Processing != 1 || n.Done != 0 {
		t.Errorf("after the claim: %+v", n)
	}
}
