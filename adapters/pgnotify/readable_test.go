package pgnotify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/adapters/postgres"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// A watch on server B that reads a change server A has committed but not
// yet announced must find that change among the events already delivered
// when its read returns, so that app.Service.Watch drops it instead of
// showing it twice: B's read waits for the announcement.
func TestReadOfAnotherServersChangeWaitsForItsNews(t *testing.T) {
	url := pgtest.Database(t)
	open := func() *postgres.Store {
		s, err := postgres.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	storeA, storeB := open(), open()
	a, b := start(t, url, storeA), start(t, url, storeB)
	storeB.OnRead(b.Readable)

	// Posted long ago: its record is older than any notification's latency.
	task, _ := domain.Post(id, resize.Host, resize.Queue, json.RawMessage(`{}`), "alice", time.Now().Add(-time.Hour))
	if err := storeA.Create(context.Background(), task, nil); err != nil {
		t.Fatal(err)
	}
	k := domain.KeyOf(task)

	// The watch on B begins: subscribe, then (below) read.
	sub := b.Subscribe(k, 16)
	defer sub.Close()

	// A claims the task and commits; its news is not sent yet.
	var claimed domain.Event
	stored, err := storeA.Update(context.Background(), k, func(tk *domain.Task) error {
		var err error
		*tk, claimed, err = tk.Claim("box-1", time.Minute, time.Now())
		return err
	}, nil)
	if err != nil {
		t.Fatal(err)
	}

	read := make(chan domain.Task, 1)
	go func() {
		got, err := storeB.Get(context.Background(), k)
		if err != nil {
			t.Error(err)
		}
		read <- got
	}()
	// A announces the claim once B's read has returned (without the wait)
	// or a while after it began (with it).
	var got domain.Task
	select {
	case got = <-read:
	case <-time.After(300 * time.Millisecond):
	}
	a.Publish(claimed)
	if got.ID == "" {
		got = <-read
	}
	if !bytes.Equal(domain.EncodeTask(got), domain.EncodeTask(stored)) {
		t.Fatalf("B read %s, want the claimed record", got.Status)
	}
	// What Watch does next: take the events already delivered, and drop
	// those up to the one whose record is the one read.
	var delivered []domain.Event
	for drained := false; !drained; {
		select {
		case ev := <-sub.C():
			delivered = append(delivered, ev)
		default:
			drained = true
		}
	}
	found := false
	for _, ev := range delivered {
		found = found || bytes.Equal(domain.EncodeTask(ev.Task), domain.EncodeTask(got))
	}
	if !found {
		t.Fatalf("B's read returned the claimed record before its event was delivered (%d events delivered): the watch would see the claim twice", len(delivered))
	}
}

// A server alone on the database announces its changes to nobody but
// itself, before any read can see them, and records none of them for
// Readable (Publish): a read of a fresh record of a watched task must not
// wait for that news; nor, once another server has come, a read of a
// change made before it came.
func TestReadOfOwnChangeDoesNotWait(t *testing.T) {
	url := pgtest.Database(t)
	a := start(t, url, nil)
	changed := time.Now()
	task, _ := domain.Post(id, resize.Host, resize.Queue, json.RawMessage(`{}`), "alice", changed)
	k := domain.KeyOf(task)
	sub := a.Subscribe(k, 16)
	defer sub.Close()

	// returnsAtOnce reads as the store's hook would, with a deadline
	// shorter than announceWindow: a read that waits ends by the deadline.
	returnsAtOnce := func(why string, age time.Duration) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		a.Readable(ctx, task, age)
		if ctx.Err() != nil {
			t.Fatalf("%s: the read waited for news", why)
		}
	}
	returnsAtOnce("alone", 0)

	time.Sleep(200 * time.Millisecond) // past the margin for the two servers' clocks
	start(t, url, nil)                 // a hello: a sends from now on
	if !a.Others() {
		t.Fatal("the first server did not hear of the second")
	}
	returnsAtOnce("a change made before the other server came", time.Since(changed))
}
