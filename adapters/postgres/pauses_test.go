package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/adapters/clock"
	"github.com/taskhoster/taskhoster/adapters/memlog"
	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/adapters/pgnotify"
	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// A resume through one server reaches the claims waiting on another: the
// resume's wake (broadcast by pgnotify) finds the queue resumed there, even
// though that server's claim read it paused a moment before. Otherwise the
// woken claim went back to sleep with the tasks posted during the pause
// still pending, and nothing woke it again until the next post.
func TestAResumeOnOneServerWakesClaimsWaitingOnAnother(t *testing.T) {
	url := pgtest.Database(t)
	q := testQueue(domain.DefaultSettings())
	ctx := context.Background()
	type server struct {
		svc *app.Service
		hub *notify.Hub
	}
	var servers [2]server
	for i := range servers {
		s := mustOpen(t, url)
		hub := notify.NewHub()
		n := pgnotify.New(hub, url, s, nil)
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := n.Start(sctx)
		cancel()
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		t.Cleanup(n.Stop)
		servers[i] = server{hub: hub, svc: app.New(app.Deps{
			Repo: s, Syncer: nopSyncer{}, Log: &memlog.Log{}, Notifier: n,
			Clock: clock.System{}, Compiler: schema.Compiler{}, Pauses: s,
		})}
	}
	a, b := servers[0], servers[1]
	if err := a.svc.SetPaused(ctx, q, true); err != nil {
		t.Fatal(err)
	}
	posted, err := a.svc.Post(ctx, q, "alice", []byte(`{}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type claimed struct {
		task domain.Task
		err  error
	}
	got := make(chan claimed, 1)
	go func() {
		task, err := b.svc.Claim(ctx, q, "w", nil, 8*time.Second)
		got <- claimed{task, err}
	}()
	// Once B's claim has looked (and found the queue paused), resume on A.
	deadline := time.After(5 * time.Second)
	for b.hub.Waiting(q.Ref()) == 0 {
		select {
		case <-deadline:
			t.Fatal("the claim on B never waited")
		case <-time.After(time.Millisecond):
		}
	}
	if err := a.svc.SetPaused(ctx, q, false); err != nil {
		t.Fatal(err)
	}
	c := <-got
	switch {
	case errors.Is(c.err, domain.ErrNotFound):
		t.Fatalf("the claim on B took nothing though the queue was resumed with task %s pending", posted.ID)
	case c.err != nil:
		t.Fatal(c.err)
	case c.task.ID != posted.ID:
		t.Fatalf("claimed %s, want %s", c.task.ID, posted.ID)
	}
}
