package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
)

// gateSyncer is a Syncer whose flushes, once gated, wait for the test: each
// says on entered that it began, then waits for release. Ungated, it
// returns at once.
type gateSyncer struct {
	gated   chan struct{} // closed: gated
	entered chan struct{}
	release chan struct{}
}

func newGateSyncer() *gateSyncer {
	return &gateSyncer{gated: make(chan struct{}), entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (g *gateSyncer) Sync(context.Context) error {
	select {
	case <-g.gated:
	default:
		return nil
	}
	g.entered <- struct{}{}
	<-g.release
	return nil
}

// shownOnlyOnceDurable runs read while g is gated and checks that it waits
// for a flush before it answers, and answers once the flush is done.
func shownOnlyOnceDurable(t *testing.T, g *gateSyncer, name string, read func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- read() }()
	select {
	case <-g.entered:
	case err := <-done:
		t.Fatalf("%s answered (%v) without waiting for a flush", name, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s neither answered nor flushed", name)
	}
	select {
	case err := <-done:
		t.Fatalf("%s answered (%v) before its flush ended", name, err)
	case <-time.After(20 * time.Millisecond):
	}
	g.release <- struct{}{}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still waiting after its flush", name)
	}
}

// finishedThenGated is a fixture whose one task was posted, claimed by
// worker "w" and finished, and whose flushes from then on wait for the
// test (shownOnlyOnceDurable).
func finishedThenGated(t *testing.T) (f *fixture, g *gateSyncer, posted, claimed domain.Task) {
	t.Helper()
	g = newGateSyncer()
	f = newFixtureSyncing(t, domain.DefaultSettings(), g)
	posted = f.post(t, `{"url":"a"}`)
	claimed = f.claim(t, "w")
	if out, err := f.svc.Result(context.Background(), f.q, posted.ID, "w", json.RawMessage(`{}`)); err != nil || !out.Accepted {
		t.Fatalf("result = %+v, %v", out, err)
	}
	close(g.gated)
	return f, g, posted, claimed
}

// TestAPurgeIsDurableBeforeItsAnswer: the tasks a purge deleted must not
// come back with a power loss after it said how many it deleted.
func TestAPurgeIsDurableBeforeItsAnswer(t *testing.T) {
	f, g, posted, _ := finishedThenGated(t)
	svc, q := f.svc, f.q
	ctx := context.Background()
	shownOnlyOnceDurable(t, g, "a purge of finished tasks", func() error {
		n, err := svc.Purge(ctx, q, domain.Finished)
		if err == nil && n != 1 {
			t.Errorf("purged %d, want 1", n)
		}
		return err
	})
	if _, err := svc.Get(ctx, q, posted.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("the purged task reads %v, want not found", err)
	}
}

// TestReadsShowOnlyDurableChanges: a progress report is stored without a
// flush of its own (the next one makes it durable), and a file store's
// record is readable before that flush. A producer's read of the task (its
// status, its watch, a manager's list) shows it only once it is durable:
// shown a change that a power loss then took away, a producer would see a
// task finish twice.
func TestReadsShowOnlyDurableChanges(t *testing.T) {
	g := newGateSyncer()
	f := newFixtureSyncing(t, domain.DefaultSettings(), g)
	svc, q := f.svc, f.q
	ctx := context.Background()
	posted := f.post(t, `{"url":"a"}`)
	claimed := f.claim(t, "w")
	if claimed.ID != posted.ID {
		t.Fatalf("claimed %s, want %s", claimed.ID, posted.ID)
	}
	watch, err := svc.Watch(ctx, q, posted.ID, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	close(g.gated)

	report := func(n int) {
		t.Helper()
		out, err := svc.Progress(ctx, q, posted.ID, domain.HolderOf(claimed), json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)))
		if err != nil || !out.Accepted {
			t.Fatalf("progress %d = %+v, %v", n, out, err)
		}
	}
	report(1)
	shownOnlyOnceDurable(t, g, "status", func() error {
		v, err := svc.Status(ctx, q, posted.ID)
		if err == nil && string(v.Progress) != `{"n":1}` {
			t.Errorf("status shows progress %s, want the report's", v.Progress)
		}
		return err
	})
	shownOnlyOnceDurable(t, g, "the watch's next change", func() error {
		ev, err := watch.Next(ctx)
		if err == nil && string(ev.Task.Progress) != `{"n":1}` {
			t.Errorf("the watch shows progress %s, want the report's", ev.Task.Progress)
		}
		return err
	})
	report(2)
	shownOnlyOnceDurable(t, g, "a list of processing tasks", func() error {
		tasks, _, err := svc.ListTasks(ctx, q, app.ListQuery{Status: domain.Processing, Limit: 10})
		if err == nil && (len(tasks) != 1 || string(tasks[0].Progress) != `{"n":2}`) {
			t.Errorf("the list shows %+v, want the task with the second report", tasks)
		}
		return err
	})
	shownOnlyOnceDurable(t, g, "a new watch's record", func() error {
		w, err := svc.Watch(ctx, q, posted.ID, 8)
		if err == nil {
			w.Close()
		}
		return err
	})
}

// TestRefusedReportsNameOnlyDurableStatuses: a report refused because the
// task moved on names the task's status now, which is a read like any
// other. A worker told "finished" drops its own result; shown a result a
// power loss then took away, it would have dropped work nobody kept.
func TestRefusedReportsNameOnlyDurableStatuses(t *testing.T) {
	f, g, posted, claimed := finishedThenGated(t)
	svc, q := f.svc, f.q
	ctx := context.Background()
	held := domain.HolderOf(claimed)
	refused := func(name string, report func() (app.Outcome, error)) {
		t.Helper()
		shownOnlyOnceDurable(t, g, name, func() error {
			out, err := report()
			if err == nil && (out.Accepted || out.Status != domain.Finished) {
				t.Errorf("%s = %+v, want refused with status finished", name, out)
			}
			return err
		})
	}
	refused("a second result", func() (app.Outcome, error) {
		return svc.Result(ctx, q, posted.ID, "w2", json.RawMessage(`{}`))
	})
	refused("a late progress report", func() (app.Outcome, error) {
		return svc.Progress(ctx, q, posted.ID, held, json.RawMessage(`{}`))
	})
	refused("a late heartbeat", func() (app.Outcome, error) {
		return svc.Heartbeat(ctx, q, posted.ID, held)
	})
	refused("a late give-back", func() (app.Outcome, error) {
		return svc.Release(ctx, q, posted.ID, held, 0, nil)
	})
	refused("a late failure", func() (app.Outcome, error) {
		return svc.Fail(ctx, q, posted.ID, "w", nil)
	})
	refused("a cancel of a finished task", func() (app.Outcome, error) {
		return svc.Cancel(ctx, q, posted.ID, app.Canceller{Manage: true})
	})
}
