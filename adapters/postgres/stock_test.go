package postgres_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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

// rideAPost has a claim ride the post of task through a, alone on the
// database at url: a's line of posts and guessed updates is kept busy (a
// result of a task a claimed, its guessed UPDATE waiting for a row lock an
// admin transaction holds), the post waits for the next batch and wakes a
// claim, the claim takes its record and waits too; then the line goes on.
// It returns the post's answer and the claim's, and whether the claim's
// line was said to be written.
func rideAPost(t *testing.T, a *postgres.Store, url string, task domain.Task, posted domain.Event) (postErr error, got domain.Task, claimErr error, claimLogged bool) {
	t.Helper()
	ctx := context.Background()
	a.WriteLines(staged)
	a.OnAlone(func() bool { return true })
	woken := make(chan struct{}, 8)
	a.OnRelease(func(domain.QueueRef, int) { woken <- struct{}{} })
	busy := claimedOn(t, a, 1) // the stock is read: nothing else is claimable
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE`, busy.ID); err != nil {
		t.Fatal(err)
	}
	resultDone := make(chan error, 1)
	go func() {
		var seen []domain.Task
		var ev domain.Event
		sctx, _ := stage(&ev)
		_, err := a.Update(sctx, domain.KeyOf(busy), finish("box-1", &seen, &ev), nil)
		resultDone <- err
	}()
	waitFor(t, "the result's guessed UPDATE to wait for the row lock", func() bool {
		var n int
		if err := pgxQueryRow(url, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%guard%'`, &n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})

	postCtx, _ := stage(&posted)
	postDone := make(chan error, 1)
	go func() { postDone <- a.Create(postCtx, task, nil) }()
	select {
	case <-woken:
	case <-time.After(10 * time.Second):
		t.Fatal("a post waiting for its batch woke no claim")
	}
	var claimEv domain.Event
	claimCtx, claimSt := stage(&claimEv)
	claimDone := make(chan error, 1)
	go func() {
		var err error
		got, err = a.ClaimNext(claimCtx, domain.KeyOf(task).Ref(), nil, epoch, func(t *domain.Task) error {
			next, e, err := t.Claim("box-2", time.Minute, epoch)
			*t, claimEv = next, e
			return err
		}, nil)
		claimDone <- err
	}()
	waitFor(t, "the post and the claim to wait for the next batch", func() bool { return a.DirectWaiting() == 2 })
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-resultDone; err != nil {
		t.Fatalf("the result that kept the line busy: %v", err)
	}
	postErr, claimErr = <-postDone, <-claimDone
	return postErr, got, claimErr, claimSt.logged
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
	}
}

func pgxQueryRow(url, query string, dest ...any) error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, query).Scan(dest...)
}

// A claim that takes the record of a post still waiting for its batch
// rides that batch: the task's row is inserted already claimed, in the
// post's transaction, its posted line and then its claimed line beside
// it; no pending row is written and then updated. The post wakes a claim
// as soon as it waits.
func TestAClaimRidesItsPost(t *testing.T) {
	url := pgtest.Database(t)
	a := mustOpen(t, url)
	task, posted := postEv(2)
	postErr, got, claimErr, logged := rideAPost(t, a, url, task, posted)
	if postErr != nil {
		t.Fatalf("post: %v", postErr)
	}
	if claimErr != nil || got.ID != task.ID || got.Lease == nil || got.Lease.Worker != "box-2" {
		t.Fatalf("claim: %+v, %v; want %s for box-2", got, claimErr, task.ID)
	}
	if !logged {
		t.Error("the claim says its line was not written")
	}
	// On disc: one row version, processing, written by the transaction
	// that wrote both lines, posted first.
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var rowXmin, status string
	if err := admin.QueryRow(ctx, `SELECT xmin::text, status FROM tasks WHERE id = $1`, task.ID).Scan(&rowXmin, &status); err != nil {
		t.Fatal(err)
	}
	rows, err := admin.Query(ctx, `SELECT xmin::text, convert_from(line, 'UTF8')::jsonb->>'event' FROM event_lines WHERE id = $1 ORDER BY seq`, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for rows.Next() {
		var xmin, kind string
		if err := rows.Scan(&xmin, &kind); err != nil {
			t.Fatal(err)
		}
		if xmin != rowXmin {
			t.Errorf("the %s line was written by transaction %s, the row by %s: not one transaction", kind, xmin, rowXmin)
		}
		kinds = append(kinds, kind)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if status != string(domain.Processing) || len(kinds) != 2 || kinds[0] != string(domain.EventPosted) || kinds[1] != string(domain.EventClaimed) {
		t.Fatalf("row %s with lines %v; want processing with posted, claimed", status, kinds)
	}
}

// A claim that rides a post that is not stored (its id is taken) takes
// nothing: the task already stored under that id is left as it was, and
// the claim, made again on a stock read anew, finds none.
func TestAClaimRidingAPostNotStoredTakesNothing(t *testing.T) {
	url := pgtest.Database(t)
	a := mustOpen(t, url)
	twin, posted := postEv(1) // the id of the task whose result keeps the line busy
	postErr, _, claimErr, _ := rideAPost(t, a, url, twin, posted)
	if !errors.Is(postErr, domain.ErrExists) {
		t.Fatalf("post of a taken id: %v; want ErrExists", postErr)
	}
	if !errors.Is(claimErr, domain.ErrNotFound) {
		t.Fatalf("the claim that rode it: %v; want none", claimErr)
	}
	stored, err := a.Get(context.Background(), domain.KeyOf(twin))
	if err != nil || stored.Status != domain.Finished || string(stored.Result) != `"box-1"` {
		t.Fatalf("the task under that id is %+v, %v; want box-1's result", stored, err)
	}
}
