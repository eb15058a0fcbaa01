package postgres_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/adapters/postgres"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// claimFor is a ClaimNext's fn: worker's claim at epoch.
func claimFor(worker string) func(*domain.Task) error {
	return func(t *domain.Task) error {
		next, _, err := t.Claim(worker, time.Minute, epoch)
		*t = next
		return err
	}
}

// postThrough posts tasks 0 to n-1 through s.
func postThrough(t *testing.T, s *postgres.Store, n int) {
	t.Helper()
	for i := range n {
		if err := s.Create(context.Background(), post(t, i), nil); err != nil {
			t.Fatal(err)
		}
	}
}

// A server alone on its database takes its claims from stock: what it
// stored itself, and nothing another writer stored after the stock was
// read, which is why a server with others on the database locks its rows
// instead (OnAlone says no). Here b stands for the other writer; a claim
// of a alone does not see b's task until a's stock is read again, while a
// that is told it is not alone claims it at once.
func TestClaimsFromStockSeeOnlyWhatTheStoreStored(t *testing.T) {
	url := pgtest.Database(t)
	a, b := mustOpen(t, url), mustOpen(t, url)
	alone := atomic.Bool{}
	alone.Store(true)
	a.OnAlone(alone.Load)
	ctx := context.Background()
	ref := domain.KeyOf(post(t, 0)).Ref()
	postThrough(t, a, 3)
	claim := func(s *postgres.Store) (string, error) {
		got, err := s.ClaimNext(ctx, ref, nil, epoch, claimFor("box-1"), nil)
		return got.ID, err
	}
	// The first claim reads the stock: all three, in claim order.
	for n := range 3 {
		if id, err := claim(a); err != nil || id != post(t, n).ID {
			t.Fatalf("claim %d: %s, %v; want %s", n, id, err, post(t, n).ID)
		}
	}
	if err := b.Create(ctx, post(t, 3), nil); err != nil {
		t.Fatal(err)
	}
	if id, err := claim(a); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("alone, the stock holds every claimable task: claimed %q, %v; want none", id, err)
	}
	alone.Store(false)
	if id, err := claim(a); err != nil || id != post(t, 3).ID {
		t.Fatalf("not alone: claimed %q, %v; want %s", id, err, post(t, 3).ID)
	}
}

// A claim from stock whose row another writer changed since the stock was
// read misses its guess: it leaves that row as the other writer left it,
// wakes a claim for it (the row was held while the guard failed), and
// claims the next task on a stock read anew.
func TestClaimFromStockThatMissesClaimsTheNext(t *testing.T) {
	url := pgtest.Database(t)
	a, b := mustOpen(t, url), mustOpen(t, url)
	a.OnAlone(func() bool { return true })
	var woken atomic.Int64
	a.OnRelease(func(domain.QueueRef, int) { woken.Add(1) })
	ctx := context.Background()
	ref := domain.KeyOf(post(t, 0)).Ref()
	postThrough(t, a, 3)
	first, err := a.ClaimNext(ctx, ref, nil, epoch, claimFor("box-1"), nil)
	if err != nil || first.ID != post(t, 0).ID {
		t.Fatalf("first claim: %s, %v", first.ID, err)
	}
	// b claims the second task behind a's stock.
	other, err := b.ClaimNext(ctx, ref, nil, epoch, claimFor("box-2"), nil)
	if err != nil || other.ID != post(t, 1).ID {
		t.Fatalf("b's claim: %s, %v", other.ID, err)
	}
	got, err := a.ClaimNext(ctx, ref, nil, epoch, claimFor("box-1"), nil)
	if err != nil || got.ID != post(t, 2).ID {
		t.Fatalf("a's second claim: %s, %v; want %s", got.ID, err, post(t, 2).ID)
	}
	second, err := b.Get(ctx, domain.KeyOf(other))
	if err != nil || second.Lease == nil || second.Lease.Worker != "box-2" || second.Attempts != 1 {
		t.Errorf("the task b claimed is now %+v, %v: a changed it", second, err)
	}
	if woken.Load() == 0 {
		t.Error("the missed row woke no claim")
	}
}

// A task re-queued after its claim goes back into the stock in claim
// order, before the tasks posted after it: the stock follows every change
// the store makes, in store order.
func TestStockFollowsARequeue(t *testing.T) {
	a := mustOpen(t, pgtest.Database(t))
	a.OnAlone(func() bool { return true })
	ctx := context.Background()
	ref := domain.KeyOf(post(t, 0)).Ref()
	postThrough(t, a, 3)
	first, err := a.ClaimNext(ctx, ref, nil, epoch, claimFor("box-1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Update(ctx, domain.KeyOf(first), func(t *domain.Task) error {
		next, _, err := t.Requeue(domain.CauseSocket, domain.Retry{}, epoch)
		*t = next
		return err
	}, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{first.ID, post(t, 1).ID, post(t, 2).ID} {
		got, err := a.ClaimNext(ctx, ref, nil, epoch, claimFor("box-1"), nil)
		if err != nil || got.ID != want {
			t.Fatalf("claimed %s, %v; want %s", got.ID, err, want)
		}
	}
	if got, err := a.ClaimNext(ctx, ref, nil, epoch, claimFor("box-1"), nil); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("claimed %s, %v; want none left", got.ID, err)
	}
}

// A stock that holds every claimable task takes in the tasks posted since,
// up to its cap, and past it is read again once its tasks are claimed:
// every task is claimed once, in claim order, whatever the backlog.
func TestStockBeyondItsCap(t *testing.T) {
	a := mustOpen(t, pgtest.Database(t))
	a.OnAlone(func() bool { return true })
	ctx := context.Background()
	ref := domain.KeyOf(post(t, 0)).Ref()
	claim := func() (string, error) {
		got, err := a.ClaimNext(ctx, ref, nil, epoch, claimFor("box-1"), nil)
		return got.ID, err
	}
	// An empty queue's stock: read, and holding every claimable task.
	if id, err := claim(); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("claimed %q, %v from an empty queue", id, err)
	}
	const n = 300 // past the stock's cap of 256
	postThrough(t, a, n)
	for i := range n {
		if id, err := claim(); err != nil || id != post(t, i).ID {
			t.Fatalf("claim %d: %q, %v; want %s", i, id, err, post(t, i).ID)
		}
	}
	if id, err := claim(); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("claimed %q, %v; want none left", id, err)
	}
}

// On a queue that archives payloads a claim, which has no body to archive,
// is still made on its guess: no miss, and its line is written with it.
func TestClaimFromStockOnAnArchivingQueue(t *testing.T) {
	url := pgtest.Database(t)
	a := mustOpen(t, url)
	a.WriteLines(staged)
	a.OnAlone(func() bool { return true })
	var woken atomic.Int64
	a.OnRelease(func(domain.QueueRef, int) { woken.Add(1) })
	task, posted := postEv(0)
	ctx, st := stage(&posted)
	st.archive = true
	if err := a.Create(ctx, task, nil); err != nil {
		t.Fatal(err)
	}
	var ev domain.Event
	ctx, st = stage(&ev)
	st.archive = true
	got, err := a.ClaimNext(ctx, domain.KeyOf(task).Ref(), nil, epoch, func(t *domain.Task) error {
		next, e, err := t.Claim("box-1", time.Minute, epoch)
		*t, ev = next, e
		return err
	}, nil)
	if err != nil || got.ID != task.ID {
		t.Fatalf("claim: %s, %v", got.ID, err)
	}
	if !st.logged {
		t.Error("the claim's line was not written with it")
	}
	if n := woken.Load(); n != 0 {
		t.Errorf("%d rows let go: the claim missed its guess", n)
	}
}
