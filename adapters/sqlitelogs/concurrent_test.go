package sqlitelogs_test

import (
	"context"
	"sync"
	"testing"

	"github.com/taskhoster/taskhoster/adapters/sqlitelogs"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// TestTwoPullsAndAReaderShareOneFolder is a user's desk (SPEC §9): a
// `logs pull --follow` writes batch after batch, a second `logs pull`
// started by mistake writes the same lines into the same folder, and
// `logs serve` reads every page meanwhile. Each opens its own Store, as
// each process does. No reader or writer may fail (SQLITE_BUSY, "database
// is locked"), every line is stored once, and the cursor ends at the end.
func TestTwoPullsAndAReaderShareOneFolder(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	open := func() *sqlitelogs.Store {
		s, err := sqlitelogs.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := open()
	reader, err := sqlitelogs.OpenReader(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()

	const batches, perBatch = 40, 200
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	pull := func(s *sqlitelogs.Store) {
		defer wg.Done()
		defer func() {
			if err := s.Close(); err != nil {
				errs <- err
			}
		}()
		for b := range batches {
			var lines []tasklog.Line
			for i := range perBatch {
				n := b*perBatch + i
				lines = append(lines, line(int64(n*10), n, domain.EventPosted,
					func(l *tasklog.Line) { l.Archived = []string{"item"} }))
			}
			next := tasklog.Cursor{Offset: int64(b+1) * perBatch * 10}
			if _, err := s.Commit(ctx, "task.example.com", "2026-07-26", next, lines); err != nil {
				errs <- err
				return
			}
		}
	}
	done := make(chan struct{})
	wg.Add(2)
	go pull(first)
	go func() {
		// The second pull opens (and migrates) while the first writes.
		second, err := sqlitelogs.Open(dir)
		if err != nil {
			errs <- err
			wg.Done()
			return
		}
		pull(second)
	}()
	var rwg sync.WaitGroup
	rwg.Add(1)
	go func() {
		defer rwg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := reader.Events(ctx, tasklog.Query{Limit: 50}); err != nil {
				errs <- err
				return
			}
			if _, _, err := reader.Count(ctx, tasklog.Filter{Queue: "resize"}); err != nil {
				errs <- err
				return
			}
			if _, _, err := reader.Names(ctx); err != nil {
				errs <- err
				return
			}
			// A browser's refresh opens the store anew now and then.
			r2, err := sqlitelogs.OpenReader(dir)
			if err != nil {
				errs <- err
				return
			}
			if _, err := r2.Latest(ctx); err != nil {
				errs <- err
			}
			r2.Close()
		}
	}()
	wg.Wait()
	close(done)
	rwg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	n, _, err := reader.Count(ctx, tasklog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if n != batches*perBatch {
		t.Errorf("stored %d lines, want %d", n, batches*perBatch)
	}
	check, err := sqlitelogs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	c, err := check.Cursor(ctx, "task.example.com", "2026-07-26")
	if err != nil {
		t.Fatal(err)
	}
	if want := (tasklog.Cursor{Offset: batches * perBatch * 10}); c != want {
		t.Errorf("cursor %+v, want %+v", c, want)
	}
	wanted, err := check.Wanted(ctx, "task.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if len(wanted) != batches*perBatch {
		t.Errorf("%d payloads wanted, want %d", len(wanted), batches*perBatch)
	}
	for _, w := range wanted {
		if w.Want != 1 {
			t.Errorf("payload of %s wanted %d times, want 1 (its line counted twice)", w.ID, w.Want)
			break
		}
	}
}
