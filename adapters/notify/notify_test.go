package notify

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// A poster and claimers race, and each claimer takes only tasks of one
// kind, so many wakes land on a claimer that cannot use them. The poster
// posts the next task only when the last one is taken, so a wake lost
// anywhere leaves every claimer asleep with a task pending, past the
// deadline.
func TestLineLosesNoTask(t *testing.T) {
	const posts, perKind = 2000, 2
	var available atomic.Int64 // the pending task's number + 1; 0 for none
	h := NewHub(WithPending(func(domain.QueueRef) bool { return available.Load() > 0 }))
	took := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	takeIfMine := func(kind int64) bool {
		n := available.Load()
		return n > 0 && (n-1)%2 == kind && available.CompareAndSwap(n, 0)
	}
	var wg sync.WaitGroup
	for c := range 2 * perKind {
		kind := int64(c % 2)
		wg.Go(func() {
			for {
				err := h.Await(ctx, resize, func() (bool, error) { return takeIfMine(kind), nil })
				if err != nil {
					return
				}
				select {
				case took <- struct{}{}:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	for i := range posts {
		available.Store(int64(i) + 1)                                       // the task is stored...
		h.Publish(event(resize, "9f2c1a0b7d4e6f83", domain.EventPosted, i)) // ...then announced
		select {
		case <-took:
		case <-ctx.Done():
			t.Fatalf("task %d of %d not taken by the deadline: a wake-up was lost", i, posts)
		}
	}
	cancel()
	wg.Wait()
}

// Await returns try's error, and ctx's once it ends, without a task.
func TestAwaitEnds(t *testing.T) {
	h := NewHub()
	boom := errors.New("boom")
	if err := h.Await(context.Background(), resize, func() (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Errorf("Await = %v, want try's error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tries := 0
	done := make(chan error, 1)
	go func() {
		done <- h.Await(ctx, resize, func() (bool, error) { tries++; return false, nil })
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Await = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Await did not end with its context")
	}
}

func TestEverySubscriberGetsEveryEventInOrder(t *testing.T) {
	const subscribers, events = 16, 500
	h := NewHub()
	k := domain.Key{Host: resize.Host, Queue: resize.Queue, ID: "9f2c1a0b7d4e6f83"}
	subs := make([]ports.Subscription, subscribers)
	for i := range subs {
		subs[i] = h.Subscribe(k, events) // room for all: none may be cut off
	}
	// Another task of the same queue, and another subscriber's own task.
	otherSub := h.Subscribe(domain.Key{Host: resize.Host, Queue: resize.Queue, ID: "3a71bd0c5e2f9481"}, events)

	got := make([][]int, subscribers)
	var wg sync.WaitGroup
	for i, s := range subs {
		wg.Go(func() {
			timeout := time.After(10 * time.Second)
			for len(got[i]) < events {
				select {
				case ev, ok := <-s.C():
					if !ok {
						t.Errorf("subscriber %d closed after %d events, lost=%v", i, len(got[i]), s.Lost())
						return
					}
					if ev.Task.ID != k.ID {
						t.Errorf("subscriber %d got an event of task %s", i, ev.Task.ID)
					}
					got[i] = append(got[i], ev.Task.Attempts)
				case <-timeout:
					t.Errorf("subscriber %d has %d of %d events at the deadline", i, len(got[i]), events)
					return
				}
			}
		})
	}
	want := make([]int, events)
	for n := range events {
		want[n] = n
		h.Publish(event(resize, k.ID, domain.EventProgress, n))
		h.Publish(event(resize, "0000000000000000", domain.EventProgress, n))
	}
	wg.Wait()

	for i := range subs {
		if diff := cmp.Diff(want, got[i]); diff != "" {
			t.Errorf("subscriber %d events (-want +got):\n%s", i, diff)
		}
		subs[i].Close()
		if _, ok := <-subs[i].C(); ok || subs[i].Lost() {
			t.Errorf("subscriber %d after Close: channel open %v, lost %v", i, ok, subs[i].Lost())
		}
	}
	select {
	case ev := <-otherSub.C():
		t.Errorf("subscriber of another task got %+v", ev)
	default:
	}
	otherSub.Close()
}

func TestSlowSubscriberIsCutOffWithoutBlocking(t *testing.T) {
	const events = 10
	h := NewHub()
	k := domain.Key{Host: resize.Host, Queue: resize.Queue, ID: "9f2c1a0b7d4e6f83"}
	slow := h.Subscribe(k, 2) // never read while publishing
	fast := h.Subscribe(k, events)
	defer fast.Close()

	published := make(chan struct{})
	go func() {
		defer close(published)
		for n := range events {
			h.Publish(event(resize, k.ID, domain.EventProgress, n))
		}
	}()
	select {
	case <-published:
	case <-time.After(10 * time.Second):
		t.Fatal("Publish blocked on a full subscriber")
	}

	// The slow one keeps what fit, then finds its channel closed.
	var slowGot []int
	for ev := range slow.C() {
		slowGot = append(slowGot, ev.Task.Attempts)
	}
	if diff := cmp.Diff([]int{0, 1}, slowGot); diff != "" {
		t.Errorf("slow subscriber events (-want +got):\n%s", diff)
	}
	if !slow.Lost() {
		t.Error("slow subscriber not marked lost")
	}
	slow.Close() // after being cut off: harmless
	slow.Close()

	// The fast one missed nothing and is still subscribed.
	for n := range events {
		if ev := <-fast.C(); ev.Task.Attempts != n {
			t.Fatalf("fast subscriber event %d has attempts %d", n, ev.Task.Attempts)
		}
	}
	if fast.Lost() {
		t.Error("fast subscriber marked lost")
	}
	h.Publish(event(resize, k.ID, domain.EventResult, events))
	if ev := <-fast.C(); ev.Kind != domain.EventResult {
		t.Errorf("fast subscriber got %s after the cut-off, want result", ev.Kind)
	}
}

// Interrupt wakes every waiting claim once and cuts off every watcher.
func TestInterruptWakesEveryClaimAndCutsOffWatchers(t *testing.T) {
	h := NewHub()
	other := domain.QueueRef{Host: resize.Host, Queue: "other"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var looks atomic.Int64
	var parked sync.WaitGroup
	done := make(chan error, 3)
	for _, q := range []domain.QueueRef{resize, resize, other} {
		parked.Add(1)
		go func() {
			first := true
			done <- h.Await(ctx, q, func() (bool, error) {
				looks.Add(1)
				if first {
					first = false
					parked.Done()
					return false, nil
				}
				return true, nil
			})
		}()
	}
	parked.Wait()
	sub := h.Subscribe(domain.Key{Host: resize.Host, Queue: resize.Queue, ID: "9f2c1a0b7d4e6f83"}, 4)
	time.Sleep(20 * time.Millisecond) // let the claims park
	h.Interrupt()
	for range 3 {
		if err := <-done; err != nil {
			t.Fatalf("await: %v", err)
		}
	}
	if got := looks.Load(); got != 6 {
		t.Errorf("looks = %d, want 6 (each claim once, then once more)", got)
	}
	if _, ok := <-sub.C(); ok || !sub.Lost() {
		t.Errorf("subscription not cut off: lost=%v", sub.Lost())
	}
	sub.Close()
}

// Waiting counts the claims in a queue's line: each joins as it starts to
// wait and leaves when it returns, whether it took a task or gave up.
func TestWaitingCountsTheLine(t *testing.T) {
	h := NewHub()
	other := domain.QueueRef{Host: resize.Host, Queue: "other"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tried := make(chan struct{}, 3)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			_ = h.Await(ctx, resize, func() (bool, error) { tried <- struct{}{}; return false, nil })
		})
	}
	for range 3 {
		<-tried
	}
	// A claim joins the line before its first try, so after three tries all
	// three wait.
	if got := h.Waiting(resize); got != 3 {
		t.Errorf("waiting = %d, want 3", got)
	}
	if got := h.Waiting(other); got != 0 {
		t.Errorf("waiting on another queue = %d, want 0", got)
	}
	cancel()
	wg.Wait()
	if got := h.Waiting(resize); got != 0 {
		t.Errorf("waiting after every claim gave up = %d, want 0", got)
	}
}

// A claim that found nothing claimable at all (try returns
// domain.ErrNotFound) hands its wake on only as WithEmptyLook says, and
// the Hub does not ask WithPending's function: nobody else in line could
// take anything.
func TestEmptyLookHandsOnOnlyWhenTold(t *testing.T) {
	for _, handOn := range []bool{false, true} {
		t.Run(fmt.Sprint("handOn=", handOn), func(t *testing.T) {
			looked := make(chan struct{}, 1)
			h := NewHub(
				WithPending(func(domain.QueueRef) bool { t.Error("WithPending's function asked after an empty look"); return true }),
				WithEmptyLook(func(domain.QueueRef) bool {
					select {
					case looked <- struct{}{}:
					default:
					}
					return handOn
				}),
			)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			aCtx, stopA := context.WithCancel(ctx)
			joined := make(chan struct{}, 2)
			aDone := make(chan error, 1)
			go func() {
				tries := 0
				aDone <- h.Await(aCtx, resize, func() (bool, error) {
					if tries++; tries == 1 {
						joined <- struct{}{}
						return false, nil
					}
					return false, domain.ErrNotFound
				})
			}()
			<-joined // a is first in line
			bWoken := make(chan struct{})
			go func() {
				tries := 0
				_ = h.Await(ctx, resize, func() (bool, error) {
					if tries++; tries == 1 {
						joined <- struct{}{}
						return false, nil
					} else if tries == 2 {
						close(bWoken)
					}
					return false, domain.ErrNotFound
				})
			}()
			<-joined
			h.Publish(event(resize, "9f2c1a0b7d4e6f83", domain.EventPosted, 0)) // wakes a, who finds nothing at all
			select {
			case <-looked:
			case <-ctx.Done():
				t.Fatal("the empty look was never judged")
			}
			stopA()
			if err := <-aDone; !errors.Is(err, context.Canceled) {
				t.Fatalf("a's Await = %v, want context.Canceled", err)
			}
			if handOn {
				select {
				case <-bWoken:
				case <-ctx.Done():
					t.Fatal("the wake was not handed on to b")
				}
			} else if got := h.Waiting(resize); got != 1 {
				t.Fatalf("%d claims wait, want b still in line: the wake went on", got)
			}
			cancel()
		})
	}
}

// OnWake hears of each claim woken for a task that has just become
// claimable (a post, a Wake), so that the post's commit can wait for the
// claim; not of a task nobody waits for, nor of a wake handed on. And it
// hears of each wake that ends with no claim using it, so that the commit
// need not wait for a claim that will not come.
func TestOnWakeHearsOfFreshWakesAndUnusedOnes(t *testing.T) {
	var wakes atomic.Int32
	unused := make(chan struct{}, 4)
	h := NewHub(WithPending(func(domain.QueueRef) bool { return true }))
	h.OnWake(func() { wakes.Add(1) }, func() { unused <- struct{}{} })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	assertUnused := func(want int) {
		t.Helper()
		if got := len(unused); got != want {
			t.Fatalf("%d wakes heard of as unused, want %d", got, want)
		}
	}

	h.Publish(event(resize, "9f2c1a0b7d4e6f83", domain.EventPosted, 0))
	if got := wakes.Load(); got != 0 {
		t.Fatalf("OnWake heard %d wakes with nobody waiting, want 0", got)
	}

	// a is woken in vain and hands the wake on to b, who takes the task.
	joined := make(chan struct{}, 2)
	aLooked := make(chan struct{}, 4)
	bTook := make(chan struct{})
	bDone := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tries := 0
		_ = h.Await(ctx, resize, func() (bool, error) {
			if tries++; tries == 1 {
				joined <- struct{}{}
			} else {
				aLooked <- struct{}{}
			}
			return false, nil
		})
	})
	<-joined
	wg.Go(func() {
		defer close(bDone)
		tries := 0
		_ = h.Await(ctx, resize, func() (bool, error) {
			if tries++; tries == 1 {
				joined <- struct{}{}
				return false, nil
			}
			close(bTook)
			return true, nil
		})
	})
	<-joined
	h.Publish(event(resize, "9f2c1a0b7d4e6f83", domain.EventPosted, 1))
	select {
	case <-bTook:
	case <-ctx.Done():
		t.Fatal("the wake was not handed on to b")
	}
	<-aLooked
	<-bDone // b is out of line: the next wake can only be a's
	if got := wakes.Load(); got != 1 {
		t.Fatalf("OnWake heard %d wakes for one post woken in vain and handed on, want 1", got)
	}
	assertUnused(0)

	// Wake (a delayed task come due) wakes a, still waiting, who takes
	// nothing and has nobody to hand the wake to.
	h.Wake(resize, 3)
	if got := wakes.Load(); got != 2 {
		t.Fatalf("OnWake heard %d wakes after a Wake of one waiting claim, want 2", got)
	}
	select {
	case <-unused:
	case <-ctx.Done():
		t.Fatal("the wake a did not use was never heard of")
	}
	assertUnused(0)
	cancel()
	wg.Wait()
}

// A wake whose look found nothing claimable at all, which WithEmptyLook
// says not to hand on, ends unused, and OnWake hears of it.
func TestAnEmptyLookNotHandedOnIsHeardOfAsUnused(t *testing.T) {
	unused := make(chan struct{}, 1)
	h := NewHub(WithEmptyLook(func(domain.QueueRef) bool { return false }))
	h.OnWake(func() {}, func() { unused <- struct{}{} })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	joined := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		tries := 0
		done <- h.Await(ctx, resize, func() (bool, error) {
			if tries++; tries == 1 {
				close(joined)
			}
			return false, domain.ErrNotFound
		})
	}()
	<-joined
	h.Publish(event(resize, "9f2c1a0b7d4e6f83", domain.EventPosted, 0))
	select {
	case <-unused:
	case <-ctx.Done():
		t.Fatal("the wake the empty look did not hand on was never heard of as unused")
	}
	cancel()
	<-done
}

// Interrupt's wakes are not fresh tasks: OnWake hears neither of them nor
// of their end, so they cannot withdraw what a post expects.
func TestInterruptWakesAreNotHeardOf(t *testing.T) {
	var heard atomic.Int32
	h := NewHub(WithPending(func(domain.QueueRef) bool { return true }))
	h.OnWake(func() { heard.Add(1) }, func() { heard.Add(1) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	looked := make(chan struct{}, 2)
	done := make(chan error, 1)
	go func() {
		done <- h.Await(ctx, resize, func() (bool, error) {
			looked <- struct{}{}
			return false, nil
		})
	}()
	<-looked
	h.Interrupt()
	<-looked // woken, it took nothing and had nobody to hand the wake to
	cancel()
	<-done
	if got := heard.Load(); got != 0 {
		t.Errorf("OnWake heard %d times of an Interrupt's wake, want never", got)
	}
}
