package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/domain"
)

// Pipelined batches (group.go): the batches below are run by hand, the
// next one's changes put in line while the first runs, as a leader would
// find them.

// postN posts task n of queue q and returns its key.
func postN(t *testing.T, s *Store, n int) domain.Key {
	t.Helper()
	task, _ := domain.Post(fmt.Sprintf("00000000000000e%d", n), "task.example.com", "q", json.RawMessage(`{}`), "alice", epoch)
	if err := s.Create(context.Background(), task, nil); err != nil {
		t.Fatal(err)
	}
	return domain.KeyOf(task)
}

func claimOp(ref domain.QueueRef) *op {
	now := time.Now()
	return &op{kind: opClaim, ctx: context.Background(), ref: ref, now: domain.Millis(now), fn: claimAt(now), done: make(chan struct{})}
}

// updateOp is an update of k that notes the status it was decided on and
// then cancels the task.
func updateOp(k domain.Key, saw *domain.Status) *op {
	return &op{kind: opUpdate, ctx: context.Background(), key: k, done: make(chan struct{}), fn: func(t *domain.Task) error {
		*saw = t.Status
		next, _, err := t.Cancel(epoch.Add(time.Second))
		*t = next
		return err
	}}
}

// inLine puts ops in the line of claims and updates.
func inLine(s *Store, ops ...*op) {
	s.group.mu.Lock()
	s.group.waiting = append(s.group.waiting, ops...)
	s.group.mu.Unlock()
}

// runBatches runs ops as a leader does, and each batch pipelined behind
// it, and returns how many batches went out behind another's COMMIT with
// their locks taken there.
func runBatches(s *Store, ops []*op, refs []domain.QueueRef) (behind int) {
	next := s.batch(&s.group, ops, refs, nil)
	for next != nil {
		if next.l != nil {
			behind++
		}
		next = s.batch(&s.group, next.ops, next.refs, next)
	}
	return behind
}

func settleAll(s *Store, ops ...*op) {
	for _, o := range ops {
		_ = s.settleOp(o, func() error { return nil })
	}
}

// The changes that wait while a batch runs have their rows locked behind
// its COMMIT, in its round trip, and see what it committed: the update of
// the task the first batch claimed finds it processing, and the claim
// behind takes the next task, not the one taken.
func TestPipelinedBatchLocksBehindTheCommit(t *testing.T) {
	s := openStore(t)
	a, b := postN(t, s, 1), postN(t, s, 2)
	ref := a.Ref()
	first := claimOp(ref)
	var saw domain.Status
	claim, update := claimOp(ref), updateOp(a, &saw)
	inLine(s, claim, update)
	if n := runBatches(s, []*op{first}, []domain.QueueRef{ref}); n != 1 {
		t.Fatalf("%d batches went out behind another's COMMIT, want 1", n)
	}
	settleAll(s, first, claim, update)
	if first.err != nil || first.out.ID != a.ID {
		t.Fatalf("first claim: %v, took %q, want %s", first.err, first.out.ID, a.ID)
	}
	if claim.err != nil || claim.out.ID != b.ID {
		t.Errorf("the claim behind: %v, took %q, want %s", claim.err, claim.out.ID, b.ID)
	}
	if update.err != nil || saw != domain.Processing {
		t.Errorf("the update behind: %v, decided on %s, want processing", update.err, saw)
	}
	if got, err := s.Get(context.Background(), a); err != nil || got.Status != domain.Failed {
		t.Errorf("task a: %s %v, want failed (cancelled)", got.Status, err)
	}
}

// A batch whose writes the database refuses skips what was queued behind
// its COMMIT: its own changes are run alone, and the batch behind begins
// afresh, on its own, and is made.
func TestPipelinedBatchBehindAFailedOneBeginsAfresh(t *testing.T) {
	s := openStore(t)
	a, b := postN(t, s, 1), postN(t, s, 2)
	mustExec(t, s, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.status = 'processing' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER refuse BEFORE UPDATE ON tasks FOR EACH ROW EXECUTE FUNCTION refuse()`)
	ref := a.Ref()
	first := claimOp(ref)
	var saw domain.Status
	update := updateOp(b, &saw)
	inLine(s, update)
	if n := runBatches(s, []*op{first}, []domain.QueueRef{ref}); n != 0 {
		t.Errorf("%d batches kept the locks taken behind a failed one, want 0", n)
	}
	settleAll(s, first, update)
	if !first.alone {
		t.Errorf("the refused batch's claim is not run alone: %+v", first.err)
	}
	if update.err != nil || !update.stored || saw != domain.Pending {
		t.Errorf("the update behind: %v, stored %v, decided on %s; want it made on the pending task", update.err, update.stored, saw)
	}
	if got, err := s.Get(context.Background(), b); err != nil || got.Status != domain.Failed {
		t.Errorf("task b: %s %v, want failed (cancelled)", got.Status, err)
	}
}

// A batch whose locks fail behind a COMMIT that went through (here its
// row is held elsewhere past the session's lock_timeout) leaves the batch
// before it made, and begins afresh once the row is free.
func TestPipelinedLocksThatFailBeginAfresh(t *testing.T) {
	s := openStore(t)
	a, b := postN(t, s, 1), postN(t, s, 2)
	ctx := context.Background()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Every other session of the pool gives up on a row lock at once.
	var db string
	if err := conn.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	mustExec(t, s, `ALTER DATABASE "`+db+`" SET lock_timeout = '100ms'`)
	s.pool.Reset()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE`, b.ID); err != nil {
		t.Fatal(err)
	}
	ref := a.Ref()
	first := claimOp(ref)
	var saw domain.Status
	update := updateOp(b, &saw)
	inLine(s, update)
	next := s.batch(&s.group, []*op{first}, []domain.QueueRef{ref}, nil)
	if next == nil || next.l != nil {
		t.Fatalf("the batch behind: %+v, want one to begin afresh", next)
	}
	_ = tx.Rollback(ctx)
	conn.Release()
	if s.batch(&s.group, next.ops, next.refs, next) != nil {
		t.Fatal("a batch went out behind with nothing in line")
	}
	settleAll(s, first, update)
	if first.err != nil || !first.stored || first.out.ID != a.ID {
		t.Errorf("the batch before: %v, stored %v, took %q; want a claimed", first.err, first.stored, first.out.ID)
	}
	if update.err != nil || !update.stored {
		t.Errorf("the update behind: %v, stored %v, want it made", update.err, update.stored)
	}
	if got, err := s.Get(ctx, b); err != nil || got.Status != domain.Failed {
		t.Errorf("task b: %s %v, want failed (cancelled)", got.Status, err)
	}
}
