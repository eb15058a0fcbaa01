package app_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/index"
	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// linesRepo is a repository that writes each change's line itself, as
// adapters/postgres does in the change's transaction: it takes the event
// app.StagedEvent gives just before the change's Then.
type linesRepo struct {
	*index.Store
	mu    sync.Mutex
	lines []domain.EventKind
}

func (r *linesRepo) write(ctx context.Context, then ports.Then) ports.Then {
	return func(t domain.Task) error {
		if ev, _, logged, ok := app.StagedEvent(ctx); ok {
			r.mu.Lock()
			r.lines = append(r.lines, ev.Kind)
			r.mu.Unlock()
			logged()
		}
		return then.Call(t)
	}
}

func (r *linesRepo) Create(ctx context.Context, t domain.Task, then ports.Then) error {
	return r.Store.Create(ctx, t, r.write(ctx, then))
}

func (r *linesRepo) Update(ctx context.Context, k domain.Key, fn func(*domain.Task) error, then ports.Then) (domain.Task, error) {
	return r.Store.Update(ctx, k, fn, r.write(ctx, then))
}

func (r *linesRepo) ClaimNext(ctx context.Context, ref domain.QueueRef, m ports.Matcher, now time.Time, fn func(*domain.Task) error, then ports.Then) (domain.Task, error) {
	return r.Store.ClaimNext(ctx, ref, m, now, fn, r.write(ctx, then))
}

func (r *linesRepo) Delete(ctx context.Context, k domain.Key, check func(domain.Task) error, then ports.Then) error {
	return r.Store.Delete(ctx, k, check, r.write(ctx, then))
}

// Every use case stages its event for the repository; once the repository
// wrote its line, the Then does not append it to the event log again, but
// still tells waiters.
func TestStagedEventsAreLoggedOnceByTheRepository(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	repo := &linesRepo{Store: f.repo}
	f.svc = app.New(app.Deps{Repo: repo, Syncer: f.sync, Log: f.log, Notifier: notify.NewHub(), Clock: f.clock, Compiler: schema.Compiler{}})
	task := f.post(t, `{"url":"a"}`)
	claimed := f.claim(t, "w")
	if _, err := f.svc.Result(context.Background(), f.q, claimed.ID, "w", []byte(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	want := []domain.EventKind{domain.EventPosted, domain.EventClaimed, domain.EventResult}
	if diff := cmp.Diff(want, repo.lines); diff != "" {
		t.Errorf("lines the repository wrote (-want +got):\n%s", diff)
	}
	if got := f.log.Kinds(task.ID); len(got) != 0 {
		t.Errorf("the event log was appended %v besides", got)
	}
}
