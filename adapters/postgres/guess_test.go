package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskhoster/taskhoster/adapters/postgres"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// claimedOn posts n's task through a and claims it there for box-1, so
// that a keeps its processing record for a guess.
func claimedOn(t *testing.T, a *postgres.Store, n int) domain.Task {
	t.Helper()
	task, posted := postEv(n)
	ctx, _ := stage(&posted)
	if err := a.Create(ctx, task, nil); err != nil {
		t.Fatal(err)
	}
	var ev domain.Event
	ctx, _ = stage(&ev)
	got, err := a.ClaimNext(ctx, domain.KeyOf(task).Ref(), nil, epoch, func(t *domain.Task) error {
		next, e, err := t.Claim("box-1", time.Minute, epoch)
		*t, ev = next, e
		return err
	}, nil)
	if err != nil || got.ID != task.ID {
		t.Fatalf("claim: %+v, %v", got, err)
	}
	return got
}

// finish is an Update's fn: worker's result, recording each record it was
// given.
func finish(worker string, seen *[]domain.Task, ev *domain.Event) func(*domain.Task) error {
	return func(t *domain.Task) error {
		*seen = append(*seen, t.Clone())
		next, e, err := t.Finish(worker, json.RawMessage(`"`+worker+`"`), epoch.Add(time.Second))
		if err != nil {
			return err
		}
		*t, *ev = next, e
		return nil
	}
}

// lines counts the event lines of task id of kind.
func lines(t *testing.T, conn *pgx.Conn, id string, kind domain.EventKind) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM event_lines WHERE id = $1 AND convert_from(line, 'UTF8') LIKE '%"event":"' || $2 || '"%'`, id, string(kind)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A change a Store decides on its guess of a task's record (the record of
// its own claim) is never stored over another change made in between: by
// another server before it (the first result wins), or by one that holds
// the row while the guessed UPDATE waits for it. Either way fn is run again
// on the current record, and only the change stored gets its line.
func TestGuessedUpdateNeverOverwritesAnotherChange(t *testing.T) {
	url := pgtest.Database(t)
	a, b := mustOpen(t, url), mustOpen(t, url)
	a.WriteLines(staged)
	b.WriteLines(staged)
	admin, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())

	t.Run("changed before", func(t *testing.T) {
		task := claimedOn(t, a, 1)
		var bSeen, aSeen []domain.Task
		var bEv, aEv domain.Event
		ctx, _ := stage(&bEv)
		if _, err := b.Update(ctx, domain.KeyOf(task), finish("box-2", &bSeen, &bEv), nil); err != nil {
			t.Fatalf("b's result: %v", err)
		}
		ctx, st := stage(&aEv)
		got, err := a.Update(ctx, domain.KeyOf(task), finish("box-1", &aSeen, &aEv), nil)
		if !errors.Is(err, domain.ErrTerminal) {
			t.Fatalf("a's result after b's: %+v, %v; want ErrTerminal", got, err)
		}
		if len(aSeen) != 2 || aSeen[0].Status != domain.Processing || aSeen[1].Status != domain.Finished {
			t.Fatalf("a's fn saw %d records, want its guess (processing) and then b's (finished): %+v", len(aSeen), aSeen)
		}
		if st.logged {
			t.Error("a's refused result says its line was written")
		}
		stored, err := b.Get(context.Background(), domain.KeyOf(task))
		if err != nil || string(stored.Result) != `"box-2"` {
			t.Fatalf("stored: %s, %v; want b's result", stored.Result, err)
		}
		if n := lines(t, admin, task.ID, domain.EventResult); n != 1 {
			t.Errorf("%d result lines, want b's only", n)
		}
	})

	t.Run("changed while waiting", func(t *testing.T) {
		task := claimedOn(t, a, 2)
		// b reports progress and holds the row (fn runs under the row's
		// lock) until a's guessed UPDATE waits for it.
		locked, release := make(chan struct{}), make(chan struct{})
		bDone := make(chan error, 1)
		var bEv domain.Event
		go func() {
			ctx, _ := stage(&bEv)
			_, err := b.Update(ctx, domain.KeyOf(task), func(t *domain.Task) error {
				close(locked)
				<-release
				next, e, err := t.ReportProgress("box-1", json.RawMessage(`{"percent":50}`), time.Minute, epoch.Add(time.Second))
				*t, bEv = next, e
				return err
			}, nil)
			bDone <- err
		}()
		<-locked
		var aSeen []domain.Task
		var aEv domain.Event
		aDone := make(chan error, 1)
		var got domain.Task
		go func() {
			ctx, _ := stage(&aEv)
			var err error
			got, err = a.Update(ctx, domain.KeyOf(task), finish("box-1", &aSeen, &aEv), nil)
			aDone <- err
		}()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var waiting int
			if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%guard%'`).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			if waiting > 0 {
				break
			}
			if time.Now().After(deadline) {
				close(release)
				t.Fatal("a's guessed UPDATE never waited for b's row lock")
			}
			time.Sleep(5 * time.Millisecond)
		}
		close(release)
		if err := <-bDone; err != nil {
			t.Fatalf("b's progress: %v", err)
		}
		if err := <-aDone; err != nil {
			t.Fatalf("a's result: %v", err)
		}
		if len(aSeen) != 2 || aSeen[0].Progress != nil || string(aSeen[1].Progress) != `{"percent":50}` {
			t.Fatalf("a's fn saw %d records, want its guess and then b's (with progress): %+v", len(aSeen), aSeen)
		}
		stored, err := b.Get(context.Background(), domain.KeyOf(task))
		if err != nil || stored.Status != domain.Finished || string(stored.Result) != `"box-1"` || string(stored.Progress) != `{"percent":50}` {
			t.Fatalf("stored: %+v, %v; want a's result on b's progress", stored, err)
		}
		if string(got.Progress) != `{"percent":50}` {
			t.Errorf("a's Update returned %+v, want the record stored", got)
		}
		if n := lines(t, admin, task.ID, domain.EventResult); n != 1 {
			t.Errorf("%d result lines, want 1", n)
		}
		if n := lines(t, admin, task.ID, domain.EventProgress); n != 1 {
			t.Errorf("%d progress lines, want 1", n)
		}
	})

	t.Run("guess holds", func(t *testing.T) {
		task := claimedOn(t, a, 3)
		var aSeen []domain.Task
		var aEv domain.Event
		ctx, st := stage(&aEv)
		if _, err := a.Update(ctx, domain.KeyOf(task), finish("box-1", &aSeen, &aEv), nil); err != nil {
			t.Fatal(err)
		}
		if len(aSeen) != 1 || !st.logged {
			t.Errorf("fn ran %d times (want once, on the guess), line written %v", len(aSeen), st.logged)
		}
		if n := lines(t, admin, task.ID, domain.EventResult); n != 1 {
			t.Errorf("%d result lines, want 1", n)
		}
	})
}
