package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/adapters/clock"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// staleHolder sets up, on two servers sharing a database, a task whose
// first claim (attempt 1, worker first, through server a) lapsed and was
// re-queued by server b's sweep, and that worker second then claimed again
// through server b (attempt 2). It returns the nodes and the task.
func staleHolder(t *testing.T, first, second string) ([]node, *domain.Queue, domain.Task) {
	t.Helper()
	start := time.UnixMilli(1751500000000)
	c := clock.NewFake(start)
	nodes := newNodes(t, pgtest.Database(t), 2, c)
	q := testQueue(domain.Settings{LeaseSeconds: 2, QueueSeconds: 3600, RetainSeconds: 3600,
		RetainFrom: domain.RetainFromFinished, MaxItemBytes: 1 << 16})
	ctx := context.Background()
	a, b := nodes[0].svc, nodes[1].svc
	posted, err := a.Post(ctx, q, "alice", []byte(`{}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := a.Claim(ctx, q, first, nil, 0); err != nil || got.ID != posted.ID || got.Attempts != 1 {
		t.Fatalf("first claim: %+v, %v", got, err)
	}
	c.Advance(3 * time.Second)
	if err := b.Sweep(ctx, []*domain.Queue{q}); err != nil {
		t.Fatal(err)
	}
	now, err := b.Claim(ctx, q, second, nil, 0)
	if err != nil || now.ID != posted.ID || now.Attempts != 2 {
		t.Fatalf("second claim: %+v, %v", now, err)
	}
	return nodes, q, now
}

// A holder whose lease lapsed, under another worker name than the task's
// new holder, can no longer report progress, heartbeat or give the task
// back: the domain compares the lease's worker.
func TestStaleHolderOfAnotherNameIsRefused(t *testing.T) {
	nodes, q, task := staleHolder(t, "box-1", "box-2")
	ctx := context.Background()
	a := nodes[0].svc
	for what, call := range map[string]func() (app.Outcome, error){
		"progress": func() (app.Outcome, error) {
			return a.Progress(ctx, q, task.ID, domain.Holder{Worker: "box-1"}, []byte(`{"percent":50}`))
		},
		"heartbeat": func() (app.Outcome, error) { return a.Heartbeat(ctx, q, task.ID, domain.Holder{Worker: "box-1"}) },
		"release":   func() (app.Outcome, error) { return a.Release(ctx, q, task.ID, domain.Holder{Worker: "box-1"}, 0, nil) },
	} {
		if out, err := call(); err != nil || out.Accepted {
			t.Errorf("stale %s from box-1 under box-2's attempt: %+v, %v; want refused", what, out, err)
		}
	}
	got, err := nodes[1].store.Get(ctx, domain.KeyOf(task))
	if err != nil || got.Status != domain.Processing || got.Lease.Worker != "box-2" || got.Attempts != 2 || got.Progress != nil {
		t.Errorf("after the stale reports: %+v, %v; want attempt 2 untouched", got, err)
	}
}

// A holder whose lease lapsed, under the same worker name as the task's
// new holder (a worker that restarted, or two processes given one name),
// must not report progress, heartbeat or give the task back on the newer
// attempt either: its reports name the attempt it holds (a worker socket
// names it itself; over HTTP the body's "attempt"), which is no longer the
// task's.
func TestStaleAttemptOfTheSameWorkerIsRefused(t *testing.T) {
	nodes, q, task := staleHolder(t, "box-1", "box-1")
	ctx := context.Background()
	a := nodes[0].svc
	stale := domain.Holder{Worker: "box-1", Attempt: 1}
	if out, err := a.Progress(ctx, q, task.ID, stale, []byte(`{"percent":50}`)); err != nil || out.Accepted {
		t.Errorf("stale progress from attempt 1: %+v, %v; want refused", out, err)
	}
	if out, err := a.Heartbeat(ctx, q, task.ID, stale); err != nil || out.Accepted {
		t.Errorf("stale heartbeat from attempt 1: %+v, %v; want refused", out, err)
	}
	if out, err := a.Release(ctx, q, task.ID, stale, 0, nil); err != nil || out.Accepted {
		t.Errorf("stale release from attempt 1: %+v, %v; want refused", out, err)
	}
	got, err := nodes[1].store.Get(ctx, domain.KeyOf(task))
	if err != nil || got.Status != domain.Processing || got.Attempts != 2 || got.Progress != nil {
		t.Errorf("after the stale reports: status %s, attempts %d, progress %s, %v; want attempt 2 untouched",
			got.Status, got.Attempts, got.Progress, err)
	}
}
