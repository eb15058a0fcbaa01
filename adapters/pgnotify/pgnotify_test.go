package pgnotify_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/adapters/pgnotify"
	"github.com/taskhoster/taskhoster/adapters/postgres"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var resize = domain.QueueRef{Host: "acme", Queue: "resize"}

const id = "9f2c1a0b7d4e6f83"

// start starts a notifier on url, stopped at the end of the test.
func start(t *testing.T, url string, get pgnotify.Getter) *pgnotify.Notifier {
	t.Helper()
	n := pgnotify.New(notify.NewHub(), url, get, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(n.Stop)
	return n
}

// servers starts two notifiers on one new database, as two servers would,
// and a context that ends after d.
func servers(t *testing.T, d time.Duration) (ctx context.Context, a, b *pgnotify.Notifier, url string) {
	t.Helper()
	url = pgtest.Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx, start(t, url, nil), start(t, url, nil), url
}

func posted(attempts int) domain.Event {
	return domain.Event{Kind: domain.EventPosted, At: time.Now(), Task: domain.Task{
		Host: resize.Host, Queue: resize.Queue, ID: id, Status: domain.Pending,
		Item: json.RawMessage(`{}`), Attempts: attempts,
	}}
}

// parked starts an Await on n that looks once in vain, then takes whatever
// wakes it. It returns when the claim waits, and a channel that gets
// Await's error once it ends.
func parked(t *testing.T, ctx context.Context, n *pgnotify.Notifier) (looks *atomic.Int64, done <-chan error) {
	t.Helper()
	looks = new(atomic.Int64)
	waiting := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		errs <- n.Await(ctx, resize, func() (bool, error) {
			if looks.Add(1) == 1 {
				close(waiting)
				return false, nil
			}
			return true, nil
		})
	}()
	<-waiting
	return looks, errs
}

// woken waits for the Await that done reports on to end without error,
// failing with why if it does not within d.
func woken(t *testing.T, done <-chan error, d time.Duration, why string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("await: %v", err)
		}
	case <-time.After(d):
		t.Fatal(why)
	}
}

// A post published on one server wakes a claim waiting on the other within
// a few milliseconds.
func TestPublishWakesAClaimOnAnotherServer(t *testing.T) {
	ctx, a, b, _ := servers(t, 10*time.Second)
	for round := range 5 {
		_, done := parked(t, ctx, b)
		began := time.Now()
		a.Publish(posted(round))
		woken(t, done, 5*time.Second, "the claim on B was not woken by a post on A")
		took := time.Since(began)
		t.Logf("round %d: woken after %v", round, took)
		if took > time.Second {
			t.Errorf("woken after %v, want a few milliseconds", took)
		}
	}
}

// A Wake on one server (delayed tasks come due, a resume) wakes claims on
// the other too; a delayed post wakes nobody.
func TestWakeIsBroadcast(t *testing.T) {
	ctx, a, b, _ := servers(t, 10*time.Second)
	looks, done := parked(t, ctx, b)
	later := time.Now().Add(time.Hour).UnixMilli()
	ev := posted(0)
	ev.Task.NotBefore = &later
	a.Publish(ev)
	time.Sleep(200 * time.Millisecond)
	if looks.Load() != 1 {
		t.Fatal("a delayed post woke a claim")
	}
	a.Wake(resize, 1)
	woken(t, done, 5*time.Second, "the claim on B was not woken by a Wake on A")
}

// A watcher on one server sees every event published on the other, in
// publish order, and none of its own server twice.
func TestWatcherSeesRemoteEventsInOrder(t *testing.T) {
	_, a, b, _ := servers(t, 10*time.Second)
	const events = 200
	sub := b.Subscribe(domain.Key{Host: resize.Host, Queue: resize.Queue, ID: id}, events)
	defer sub.Close()
	local := a.Subscribe(domain.Key{Host: resize.Host, Queue: resize.Queue, ID: id}, events)
	defer local.Close()
	for i := range events {
		ev := posted(i)
		if i%2 == 1 {
			ev.Kind, ev.Task.Status, ev.Worker = domain.EventClaimed, domain.Processing, "box-1"
			ev.Task.Lease = &domain.Lease{Worker: "box-1", Until: time.Now().Add(time.Minute).UnixMilli()}
		}
		a.Publish(ev)
	}
	for _, s := range []struct {
		name string
		c    <-chan domain.Event
	}{{"B", sub.C()}, {"A", local.C()}} {
		for i := range events {
			select {
			case ev := <-s.c:
				if ev.Task.Attempts != i {
					t.Fatalf("%s: event %d has attempts %d: out of order", s.name, i, ev.Task.Attempts)
				}
				if want := i%2 == 1; want != (ev.Kind == domain.EventClaimed && ev.Worker == "box-1") {
					t.Fatalf("%s: event %d = %+v", s.name, i, ev)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: event %d of %d did not arrive", s.name, i, events)
			}
		}
		select {
		case ev := <-s.c:
			t.Fatalf("%s: an event too many: %+v", s.name, ev)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// A record too large for a notification is read from the store for the
// watchers of the other server, and its post still wakes a claim there.
func TestLargeRecordIsReadFromTheStore(t *testing.T) {
	url := pgtest.Database(t)
	store, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	defer store.Close()
	a, b := start(t, url, store), start(t, url, store)
	ev := posted(0)
	ev.Task.Item = json.RawMessage(`{"blob":"` + strings.Repeat("x", 20_000) + `"}`)
	ev.Task.PostedAt, ev.Task.UpdatedAt = time.Now().UnixMilli(), time.Now().UnixMilli()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := store.Create(ctx, ev.Task, nil); err != nil {
		t.Fatalf("create: %v", err)
	}
	sub := b.Subscribe(domain.KeyOf(ev.Task), 4)
	defer sub.Close()
	_, done := parked(t, ctx, b)
	a.Publish(ev)
	select {
	case got := <-sub.C():
		if got.Kind != domain.EventPosted || string(got.Task.Item) != string(ev.Task.Item) {
			t.Errorf("watcher got %s with an item of %d bytes", got.Kind, len(got.Task.Item))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher on B got nothing")
	}
	woken(t, done, 5*time.Second, "the claim on B was not woken")
}

// When the listener's connection is killed, it reconnects, wakes every
// local claim once (notifications may have been missed), cuts off local
// watchers, and carries news again.
func TestListenerReconnects(t *testing.T) {
	ctx, a, b, url := servers(t, 20*time.Second)
	_, done := parked(t, ctx, b)
	sub := b.Subscribe(domain.Key{Host: resize.Host, Queue: resize.Queue, ID: id}, 4)
	defer sub.Close()

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	var killed bool
	if err := conn.QueryRow(ctx, "SELECT pg_terminate_backend($1)", int32(b.ListenerPID())).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the listener: %v %v", killed, err)
	}
	woken(t, done, 10*time.Second, "the local claim was not woken after the reconnect")
	if b.Listens() != 2 {
		t.Errorf("listens = %d, want 2", b.Listens())
	}
	if _, ok := <-sub.C(); ok || !sub.Lost() {
		t.Error("the local watcher was not cut off")
	}
	// News may have gone by while no connection listened: a watch begun
	// now cannot tell what it missed, of any task.
	if !b.Heard(domain.Key{Host: resize.Host, Queue: resize.Queue, ID: "0000000000000bad"}, 1) {
		t.Error("after a reconnect Heard says no news went by")
	}

	// And news flows again.
	_, done = parked(t, ctx, b)
	a.Publish(posted(1))
	woken(t, done, 5*time.Second, "after the reconnect a post on A did not wake B")
}

// A server alone on its database sends nothing: its notifications would
// only come back to itself. Once a second server has started, the first
// sends to it: a post there wakes a claim waiting on the second.
func TestAloneSendsNothingUntilAnotherServerStarts(t *testing.T) {
	url := pgtest.Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := start(t, url, nil)
	// Alone, a server queues nothing to send at all.
	a.Publish(posted(0))
	a.Wake(resize, 1)
	if n := a.Sent(); n != 0 {
		t.Errorf("alone, the server sent %d notifications, want none", n)
	}
	b := start(t, url, nil)
	_, done := parked(t, ctx, b)
	a.Publish(posted(1))
	woken(t, done, 10*time.Second, "a post on the first server did not wake a claim on the second, started after it")
}

// A pending task that one server's transaction locked and let go unchanged
// wakes a claim waiting on the other server, whose look had found nothing
// (the task was locked) and whose wake went no further: the stores wired as
// the server wires them (HasPending, HandOnEmpty, OnRelease to Wake). No
// server probes for free rows; this wake is what a claim that found
// nothing relies on (postgres.Store.HandOnEmpty).
func TestTaskLetGoOnOneServerWakesAClaimOnTheOther(t *testing.T) {
	url := pgtest.Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	server := func() (*postgres.Store, *pgnotify.Notifier) {
		s, err := postgres.Open(ctx, url)
		if err != nil {
			t.Fatalf("open store: %v", err)
		}
		t.Cleanup(s.Close)
		n := pgnotify.New(notify.NewHub(notify.WithPending(s.HasPending), notify.WithEmptyLook(s.HandOnEmpty)), url, s, nil)
		s.OnRelease(n.Wake)
		if err := n.Start(ctx); err != nil {
			t.Fatalf("start: %v", err)
		}
		t.Cleanup(n.Stop)
		return s, n
	}
	sa, _ := server()
	sb, nb := server()
	task, _ := domain.Post(id, resize.Host, resize.Queue, json.RawMessage(`{}`), "alice", time.Now())
	if err := sa.Create(ctx, task, nil); err != nil {
		t.Fatalf("create: %v", err)
	}
	claim := func(tk *domain.Task) error {
		var err error
		*tk, _, err = tk.Claim("w", time.Minute, time.Now())
		return err
	}

	// A's claim locks the task and holds it.
	locked, proceed, letGo := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := sa.ClaimNext(ctx, resize, nil, time.Now(), func(*domain.Task) error {
			close(locked)
			<-proceed
			return errors.New("let go") // the task stays pending
		}, nil)
		letGo <- err
	}()
	<-locked

	// B's claim looks, finds nothing claimable (the row is locked), and waits.
	looks := new(atomic.Int64)
	looked := make(chan struct{})
	got := make(chan domain.Task, 1)
	done := make(chan error, 1)
	go func() {
		done <- nb.Await(ctx, resize, func() (bool, error) {
			tk, err := sb.ClaimNext(ctx, resize, nil, time.Now(), claim, nil)
			if looks.Add(1) == 1 {
				close(looked)
			}
			if err != nil {
				return false, err
			}
			got <- tk
			return true, nil
		})
	}()
	<-looked
	if looks.Load() != 1 || len(got) != 0 {
		t.Fatal("B's claim took the task A holds")
	}
	close(proceed)
	if err := <-letGo; err == nil {
		t.Fatal("A's claim took the task")
	}
	woken(t, done, 5*time.Second, "the claim on B was not woken when A let the task go")
	if tk := <-got; tk.ID != id || tk.Status != domain.Processing {
		t.Errorf("B's claim took %s (%s), want %s processing", tk.ID, tk.Status, id)
	}
}

// Heard: another server's news of a task is noted before it is handed on,
// with its attempt, so that a subscription made after it went by can tell
// (app.Service.ClaimWatched); a server's own news is not, nor news of an
// earlier attempt; a notification without its record counts as any attempt.
func TestHeardNotesOtherServersNewsByAttempt(t *testing.T) {
	ctx, a, b, _ := servers(t, 10*time.Second)
	k := domain.Key{Host: resize.Host, Queue: resize.Queue, ID: id}
	if b.Heard(k, 0) {
		t.Fatal("heard before any news")
	}
	sub := b.Subscribe(k, 4)
	defer sub.Close()
	task, _ := domain.Post(id, resize.Host, resize.Queue, json.RawMessage(`{}`), "alice", time.Now())
	_, claimed, err := task.Claim("w", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a.Publish(claimed)
	select {
	case <-sub.C():
	case <-ctx.Done():
		t.Fatal("B got no news")
	}
	if !b.Heard(k, 1) || !b.Heard(k, 0) {
		t.Error("B did not note A's news of attempt 1")
	}
	if b.Heard(k, 2) {
		t.Error("news of attempt 1 counts for attempt 2")
	}
	if a.Heard(k, 1) {
		t.Error("A noted its own news")
	}

	big := domain.Key{Host: resize.Host, Queue: resize.Queue, ID: "00000000000000b2"}
	bigSub := b.Subscribe(big, 4)
	defer bigSub.Close()
	_, ev := domain.Post(big.ID, resize.Host, resize.Queue, json.RawMessage(`{"blob":"`+strings.Repeat("x", 20_000)+`"}`), "alice", time.Now())
	a.Publish(ev) // no store to read it from: B wakes, and notes it
	deadline := time.Now().Add(5 * time.Second)
	for !b.Heard(big, 1000) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !b.Heard(big, 1000) {
		t.Error("a notification without its record does not count as any attempt")
	}
}

type failingGetter struct{}

func (failingGetter) Get(context.Context, domain.Key) (domain.Task, error) {
	return domain.Task{}, errors.New("connection refused")
}

// A record too large for a notification that cannot be read for the
// watchers (the store failed) cuts those watchers off, to start over from
// a fresh read: carrying on would show them the next change as if this one
// had never been (a result missed, a watch that never ends).
func TestLargeRecordNotReadCutsOffItsWatchers(t *testing.T) {
	url := pgtest.Database(t)
	a, b := start(t, url, nil), start(t, url, failingGetter{})
	sub := b.Subscribe(domain.Key{Host: resize.Host, Queue: resize.Queue, ID: id}, 4)
	defer sub.Close()
	large := posted(0)
	large.Task.Item = json.RawMessage(`{"blob":"` + strings.Repeat("x", 20_000) + `"}`)
	a.Publish(large)
	a.Publish(posted(1))
	select {
	case ev, ok := <-sub.C():
		if ok {
			t.Fatalf("the watcher on B got attempt %d after missing the change before it", ev.Task.Attempts)
		}
		if !sub.Lost() {
			t.Error("the watcher on B was closed but not told it lost track")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher on B heard nothing")
	}
}
