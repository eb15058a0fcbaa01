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

// A watch begun while progress is reported at full speed sees each change
// after its first record exactly once, in order: none from before it, none
// twice, none missed.
func TestWatchSeesEveryLaterChangeOnce(t *testing.T) {
	const reports = 300
	for round := range 20 {
		f := newFixture(t, domain.DefaultSettings())
		posted := f.post(t, `{"url":"a"}`)
		f.claim(t, "w")
		ctx := context.Background()
		done := make(chan error, 1)
		go func() {
			for n := range reports {
				if _, err := f.svc.Progress(ctx, f.q, posted.ID, domain.Holder{Worker: "w"}, fmt.Appendf(nil, `{"n":%d}`, n)); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		if round%2 == 1 {
			time.Sleep(time.Duration(round) * 20 * time.Microsecond) // start part-way through
		}
		w, err := f.svc.Watch(ctx, f.q, posted.ID, 2*reports)
		if err != nil {
			t.Fatal(err)
		}
		next := progressOf(t, w.Task) + 1
		for next < reports {
			waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			ev, err := w.Next(waitCtx)
			cancel()
			if err != nil {
				t.Fatalf("round %d: waiting for progress %d: %v", round, next, err)
			}
			if got := progressOf(t, ev.Task); got != next {
				t.Fatalf("round %d: change with progress %d, want %d (first record had %d)", round, got, next, progressOf(t, w.Task))
			}
			next++
		}
		w.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// progressOf is the n of a task's last progress record, -1 for none.
func progressOf(t *testing.T, task domain.Task) int {
	t.Helper()
	if task.Progress == nil {
		return -1
	}
	var p struct{ N int }
	if err := json.Unmarshal(task.Progress, &p); err != nil {
		t.Fatal(err)
	}
	return p.N
}

func TestWatchOfAnUnknownTask(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	for _, id := range []string{"0000000000000000", "../../etc", ""} {
		if _, err := f.svc.Watch(context.Background(), f.q, id, 1); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("Watch(%q) = %v, want not found", id, err)
		}
	}
}

// A watcher that falls further behind than its buffer is told so.
func TestWatchLost(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	posted := f.post(t, `{"url":"a"}`)
	f.claim(t, "w")
	w, err := f.svc.Watch(context.Background(), f.q, posted.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for n := range 3 {
		if _, err := f.svc.Progress(context.Background(), f.q, posted.ID, domain.Holder{Worker: "w"}, fmt.Appendf(nil, `{"n":%d}`, n)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Next(context.Background()); err != nil {
		t.Fatalf("the buffered change: %v", err)
	}
	if _, err := w.Next(context.Background()); !errors.Is(err, app.ErrWatchLost) {
		t.Fatalf("Next after falling behind = %v, want ErrWatchLost", err)
	}
}
