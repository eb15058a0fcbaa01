package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/internal/pgtest"
)

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), pgtest.Database(t))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// claimAt is a claim's fn stamping the task at now.
func claimAt(now time.Time) func(*domain.Task) error {
	return func(t *domain.Task) error {
		var err error
		*t, _, err = t.Claim("w", time.Minute, now)
		return err
	}
}

// Two claims in one batch, the later of which looked after a delayed task
// came due: that one takes it (the batch reads up to its latest now), and
// the earlier does not (no claim takes a task before its own now).
func TestBatchedClaimsTakeATaskDueByTheirLatestNow(t *testing.T) {
	s := openStore(t)
	due := epoch.Add(10 * time.Second)
	dueMs := domain.Millis(due)
	task, _ := domain.Post("00000000000000d1", "task.example.com", "q", json.RawMessage(`{}`), "alice", epoch, domain.PostOptions{NotBefore: &dueMs})
	if err := s.Create(context.Background(), task, nil); err != nil {
		t.Fatal(err)
	}
	ref := domain.KeyOf(task).Ref()
	early := &op{kind: opClaim, ctx: context.Background(), ref: ref, now: domain.Millis(due.Add(-time.Second)), fn: claimAt(due.Add(-time.Second)), done: make(chan struct{})}
	late := &op{kind: opClaim, ctx: context.Background(), ref: ref, now: dueMs, fn: claimAt(due), done: make(chan struct{})}
	s.batch(&s.group, []*op{early, late}, nil, nil)
	for _, o := range []*op{early, late} {
		_ = s.settleOp(o, func() error { return nil })
	}
	if !errors.Is(early.err, domain.ErrNotFound) {
		t.Errorf("the claim that looked before the task was due: %v (took %q), want not found", early.err, early.out.ID)
	}
	if late.err != nil || !late.stored || late.out.ID != task.ID {
		t.Fatalf("the claim that looked once the task was due: err %v, stored %v, took %q; want %s", late.err, late.stored, late.out.ID, task.ID)
	}
	got, err := s.Get(context.Background(), domain.KeyOf(task))
	if err != nil || got.Status != domain.Processing {
		t.Errorf("task after the batch: %v %v, want processing", got.Status, err)
	}
}

// A pending task that a claim locked and let go (its fn refused, its
// COMMIT failed) wakes a claim waiting in line: while it was held,
// HasPending did not see it, so a wake handed on then stopped short.
func TestPendingTaskLetGoWakesAWaitingClaim(t *testing.T) {
	for _, how := range []string{"refused", "rolled back"} {
		t.Run(how, func(t *testing.T) {
			s := openStore(t)
			hub := notify.NewHub(notify.WithPending(s.HasPending))
			s.OnRelease(hub.Wake)
			ref := domain.QueueRef{Host: "task.example.com", Queue: "q"}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			// A claim waits in line, having found nothing.
			looked := make(chan struct{}, 8)
			got := make(chan error, 1)
			var claimed domain.Task
			go func() {
				got <- hub.Await(ctx, ref, func() (bool, error) {
					t, err := s.ClaimNext(context.Background(), ref, nil, time.Now(), claimAt(time.Now()), nil)
					looked <- struct{}{}
					if errors.Is(err, domain.ErrNotFound) {
						return false, nil
					}
					claimed = t
					return err == nil, err
				})
			}()
			<-looked
			// A task arrives whose wake went to a claim that was faster
			// (as a fresh claim is): nothing wakes the waiter for it.
			task, _ := domain.Post("00000000000000a1", ref.Host, ref.Queue, json.RawMessage(`{}`), "alice", epoch)
			if err := s.Create(context.Background(), task, nil); err != nil {
				t.Fatal(err)
			}
			// That claim locks the task and lets it go: its fn refuses,
			// or the database refuses its write (a trigger refuses the
			// records of worker "faster"), and the COMMIT rolls back.
			fn := func(t *domain.Task) error {
				var err error
				*t, _, err = t.Claim("faster", time.Minute, time.Now())
				return err
			}
			if how == "refused" {
				fn = func(*domain.Task) error { return errors.New("refused") }
			} else {
				mustExec(t, s, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
					BEGIN
						IF position('"faster"' IN convert_from(NEW.record, 'UTF8')) > 0 THEN RAISE EXCEPTION 'refused'; END IF;
						RETURN NEW;
					END $$;
					CREATE TRIGGER refuse BEFORE UPDATE ON tasks FOR EACH ROW EXECUTE FUNCTION refuse()`)
			}
			if _, err := s.ClaimNext(context.Background(), ref, nil, time.Now(), fn, nil); err == nil {
				t.Fatal("the claim that was to let the task go took it")
			}
			// The waiting claim takes it.
			if err := <-got; err != nil {
				t.Fatalf("the waiting claim: %v (the task was let go and nothing woke it)", err)
			}
			if claimed.ID != task.ID {
				t.Errorf("the waiting claim took %q, want %s", claimed.ID, task.ID)
			}
		})
	}
}

func mustExec(t *testing.T, s *Store, sql string) {
	t.Helper()
	if _, err := s.pool.Exec(context.Background(), sql); err != nil {
		t.Fatal(err)
	}
}

// HasPending: yes for a pending task nobody holds; no while this Store's
// claim holds the only one (a wake handed on would find nothing); yes while
// another server's claim holds it (it cannot tell, and takes no row lock to
// find out); no once it is claimed. HandOnEmpty is no throughout: a claim
// that found nothing claimable ends the wake, with a free row there too.
func TestHasPendingLeavesOutWhatItsClaimsHold(t *testing.T) {
	url := pgtest.Database(t)
	s, err := Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other, err := Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ref := domain.QueueRef{Host: "task.example.com", Queue: "q"}
	if s.HasPending(ref) {
		t.Fatal("an empty queue has a pending task")
	}
	task, _ := domain.Post("00000000000000b1", ref.Host, ref.Queue, json.RawMessage(`{}`), "alice", epoch)
	if err := s.Create(context.Background(), task, nil); err != nil {
		t.Fatal(err)
	}
	if !s.HasPending(ref) {
		t.Fatal("a pending task nobody holds is not seen")
	}
	if s.HandOnEmpty(ref) {
		t.Error("a claim that found nothing hands its wake on")
	}
	for _, holder := range []*Store{s, other} {
		locked, proceed := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := holder.ClaimNext(context.Background(), ref, nil, time.Now(), func(t *domain.Task) error {
				close(locked)
				<-proceed
				return errors.New("let go") // the task stays pending
			}, nil)
			done <- err
		}()
		select {
		case <-locked:
		case err := <-done:
			t.Fatalf("the claim ended without locking the task: %v", err)
		}
		if got, want := s.HasPending(ref), holder != s; got != want {
			t.Errorf("held by this store's claim (%v): HasPending = %v, want %v", holder == s, got, want)
		}
		close(proceed)
		<-done
	}
	if _, err := s.ClaimNext(context.Background(), ref, nil, time.Now(), claimAt(time.Now()), nil); err != nil {
		t.Fatal(err)
	}
	if s.HasPending(ref) {
		t.Error("a claimed task is still pending")
	}
}

// A claim batch that saw claimable rows beyond those it locked lets
// HasPending say yes without a statement: the hub asks after each wake a
// claim got while it looked, which under a backlog is nearly every claim.
// With the pool closed a count would fail and say no. A batch that took the
// last row leaves HasPending to count again.
func TestHasPendingAfterALookThatLeftRowsAsksNothing(t *testing.T) {
	ref := domain.QueueRef{Host: "task.example.com", Queue: "q"}
	for _, tc := range []struct {
		posted int
		want   bool
	}{{posted: 2, want: true}, {posted: 1, want: false}} {
		s := openStore(t)
		for i := range tc.posted {
			task, _ := domain.Post(fmt.Sprintf("00000000000000c%d", i), ref.Host, ref.Queue, json.RawMessage(`{}`), "alice", epoch)
			if err := s.Create(context.Background(), task, nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.ClaimNext(context.Background(), ref, nil, time.Now(), claimAt(time.Now()), nil); err != nil {
			t.Fatal(err)
		}
		s.pool.Close()
		if got := s.HasPending(ref); got != tc.want {
			t.Errorf("%d posted, one claimed, the database gone: HasPending = %v, want %v", tc.posted, got, tc.want)
		}
	}
}
