package pgnotify_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// Stop sends what was published before it, also the batch the sender has
// already taken and is sending: a server shutting down re-queues its
// sockets' tasks just before its notifier stops, and that news is what
// the claims waiting on the other servers need. A database slow to take
// the notifications (each pg_notify sleeps here) leaves the sender in the
// middle of a batch when Stop finds nothing queued.
func TestStopSendsWhatWasPublished(t *testing.T) {
	url := pgtest.Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	for _, sql := range []string{
		`CREATE FUNCTION public.pg_notify(channel text, payload text) RETURNS void LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_catalog.pg_sleep(0.05); PERFORM pg_catalog.pg_notify(channel, payload); END $$`,
		`DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET search_path = public, pg_catalog', current_database()); END $$`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("slow down pg_notify: %v", err)
		}
	}
	conn.Close(ctx)
	a, b := start(t, url, nil), start(t, url, nil)

	const events = 6
	sub := b.Subscribe(domain.Key{Host: resize.Host, Queue: resize.Queue, ID: id}, events)
	defer sub.Close()
	for i := range events {
		a.Publish(posted(i))
	}
	a.Stop()
	for i := range events {
		select {
		case ev := <-sub.C():
			if ev.Task.Attempts != i {
				t.Fatalf("event %d has attempts %d", i, ev.Task.Attempts)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("B got %d of the %d events A published before it stopped", i, events)
		}
	}
}
