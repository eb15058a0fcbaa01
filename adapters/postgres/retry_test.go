package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// On a database that runs SERIALIZABLE (as CockroachDB does), a rule whose
// row another transaction changed and committed while the rule waited
// for it fails with a serialization failure (40001); the store runs it
// again, fn deciding on the record then current, instead of answering
// 503. Update (in a batch) and Delete (alone) both do.
func TestSerializationFailureIsRetried(t *testing.T) {
	url := pgtest.Database(t)
	admin, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(context.Background(), `DO $$ BEGIN
		EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = serializable', current_database()); END $$`); err != nil {
		t.Fatal(err)
	}
	s := mustOpen(t, url) // its sessions begin after the ALTER: serializable
	task := post(t, 1)
	if err := s.Create(context.Background(), task, nil); err != nil {
		t.Fatal(err)
	}
	k := domain.KeyOf(task)

	// conflict holds the task's row in a transaction of its own, runs
	// change (which must come to wait for the row), then changes the row
	// and commits, so that change's transaction, whose snapshot is older
	// than that commit, cannot go on.
	conflict := func(change func() error) error {
		t.Helper()
		tx, err := admin.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		if _, err := tx.Exec(context.Background(), `UPDATE tasks SET priority = priority WHERE id = $1`, k.ID); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- change() }()
		waitForLockWaiter(t, url)
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		return <-done
	}

	calls := 0
	before := s.Retries()
	got, err := func() (domain.Task, error) {
		var got domain.Task
		err := conflict(func() error {
			var err error
			got, err = s.Update(context.Background(), k, func(tk *domain.Task) error {
				calls++
				var err error
				*tk, _, err = tk.Claim("box-1", time.Minute, epoch.Add(time.Second))
				return err
			}, nil)
			return err
		})
		return got, err
	}()
	if err != nil {
		t.Fatalf("update against a concurrent commit = %v, want it retried and stored", err)
	}
	if got.Status != domain.Processing || s.Retries() == before {
		t.Errorf("update stored %s after %d retries, want processing after at least one", got.Status, s.Retries()-before)
	}
	if stored, err := s.Get(context.Background(), k); err != nil || stored.Status != domain.Processing {
		t.Errorf("stored record: %s, %v", stored.Status, err)
	}
	if calls < 1 {
		t.Errorf("fn ran %d times", calls)
	}

	before = s.Retries()
	if err := conflict(func() error { return s.Delete(context.Background(), k, nil, nil) }); err != nil {
		t.Fatalf("delete against a concurrent commit = %v, want it retried and done", err)
	}
	if s.Retries() == before {
		t.Error("delete was not retried")
	}
	if _, err := s.Get(context.Background(), k); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("get after the delete: %v, want not found", err)
	}
}

// waitForLockWaiter waits until some session of the database at url waits
// for a lock (bounded: 10 s).
func waitForLockWaiter(t *testing.T, url string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var waiting bool
		if err := conn.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no session came to wait for the row within 10 s")
}
