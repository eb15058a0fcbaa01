package durable

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/taskhoster/taskhoster/domain"
)

// gatedFlush is a flush that counts its calls and blocks each one until the
// test releases it with the error it should return.
type gatedFlush struct {
	calls   atomic.Int32
	release chan error
}

func newGatedFlush() *gatedFlush { return &gatedFlush{release: make(chan error)} }

func (g *gatedFlush) flush() error {
	g.calls.Add(1)
	return <-g.release
}

// goSync calls s.Sync in a goroutine and returns where its result will land.
func goSync(ctx context.Context, s *Syncer) <-chan error {
	done := make(chan error, 1)
	go func() { done <- s.Sync(ctx) }()
	return done
}

// commit is a group commit with no callers to wake: the commit, then what
// was to run after it, as run does them.
func (s *Syncer) commit() error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	after, err := s.commitRecords()
	for _, fn := range after {
		fn()
	}
	return err
}

// groupCommit is a Syncer whose commit is flush.
func groupCommit(flush func() error) *Syncer {
	return &Syncer{record: true, flush: func() ([]func(), error) { return nil, flush() }}
}

// callersSeen hears of every flush and keeps how many callers each served.
type callersSeen []int

func (c *callersSeen) Flushed(_ time.Duration, callers int, _ error) { *c = append(*c, callers) }

func assertWaiting(tb testing.TB, name string, done <-chan error) {
	tb.Helper()
	select {
	case err := <-done:
		tb.Fatalf("%s returned (%v) before its flush finished", name, err)
	default:
	}
}

func assertReturned(tb testing.TB, name string, done <-chan error) error {
	tb.Helper()
	select {
	case err := <-done:
		return err
	default:
		tb.Fatalf("%s still waiting after its flush finished", name)
		return nil
	}
}

func assertCalls(tb testing.TB, g *gatedFlush, want int32) {
	tb.Helper()
	if got := g.calls.Load(); got != want {
		tb.Fatalf("%d flushes, want %d", got, want)
	}
}

// Everything below runs in a synctest bubble: synctest.Wait returns once
// every goroutine is blocked, which is how the tests know a caller has
// joined its batch, without sleeping.

func TestCallerArrivingMidFlushWaitsForTheNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGatedFlush()
		s := groupCommit(g.flush)
		var served callersSeen // callers of each flush, as the observer hears them
		s.Observe(&served)
		ctx := context.Background()

		first := goSync(ctx, s)
		synctest.Wait()
		assertCalls(t, g, 1) // flush 1 runs, holding the first caller

		second := goSync(ctx, s)
		synctest.Wait()
		assertWaiting(t, "second caller", second)

		g.release <- nil // flush 1 ends: it began before the second call
		synctest.Wait()
		if err := assertReturned(t, "first caller", first); err != nil {
			t.Fatalf("first sync: %v", err)
		}
		assertWaiting(t, "second caller", second)
		assertCalls(t, g, 2)

		g.release <- nil
		synctest.Wait()
		if err := assertReturned(t, "second caller", second); err != nil {
			t.Fatalf("second sync: %v", err)
		}
		assertCalls(t, g, 2)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestConcurrentCallersShareOneFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const callers = 50
		g := newGatedFlush()
		s := groupCommit(g.flush)
		var served callersSeen // callers of each flush, as the observer hears them
		s.Observe(&served)
		ctx := context.Background()

		first := goSync(ctx, s)
		synctest.Wait()
		var waiting []<-chan error
		for range callers {
			waiting = append(waiting, goSync(ctx, s))
		}
		synctest.Wait()

		g.release <- nil
		synctest.Wait()
		if err := assertReturned(t, "first caller", first); err != nil {
			t.Fatal(err)
		}
		g.release <- nil // one flush for all fifty
		synctest.Wait()
		for _, done := range waiting {
			if err := assertReturned(t, "caller", done); err != nil {
				t.Fatal(err)
			}
		}
		assertCalls(t, g, 2)

		// With nobody waiting the loop has stopped: a later caller
		// starts a flush of its own at once.
		later := goSync(ctx, s)
		synctest.Wait()
		assertCalls(t, g, 3)
		g.release <- nil
		synctest.Wait()
		if err := assertReturned(t, "later caller", later); err != nil {
			t.Fatal(err)
		}
		if want := []int{1, callers, 1}; !slices.Equal(served, want) {
			t.Errorf("observed flushes served %v callers, want %v", served, want)
		}
	})
}

// letFlushEnd ends the flush running in a synctest bubble without an
// error, and checks that the caller whose result lands in done returned.
func letFlushEnd(t *testing.T, g *gatedFlush, name string, done <-chan error) {
	t.Helper()
	g.release <- nil
	synctest.Wait()
	if err := assertReturned(t, name, done); err != nil {
		t.Fatal(err)
	}
}

func mustClose(t *testing.T, s *Syncer) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// goArrive calls s.Arrive in a goroutine and returns where its result
// will land.
func goArrive(ctx context.Context, s *Syncer) <-chan error {
	done := make(chan error, 1)
	go func() { done <- s.Arrive(ctx) }()
	return done
}

// A flush waits for the caller Expect announced (a claim woken for the
// task being posted), so that the post and the claim share it; a caller
// that was not announced does not hold it up.
func TestAFlushWaitsForAnExpectedCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGatedFlush()
		s := groupCommit(g.flush)
		s.expectWait = time.Hour // only the arrival may end the wait here
		var served callersSeen
		s.Observe(&served)
		ctx := context.Background()

		s.Expect()
		post := goSync(ctx, s)
		synctest.Wait()
		assertCalls(t, g, 0) // waiting for the claim
		claim := goArrive(ctx, s)
		synctest.Wait()
		assertCalls(t, g, 1)
		letFlushEnd(t, g, "post", post)
		if err := assertReturned(t, "claim", claim); err != nil {
			t.Fatal(err)
		}

		// Nothing expected: a flush begins at once.
		alone := goSync(ctx, s)
		synctest.Wait()
		assertCalls(t, g, 2)
		letFlushEnd(t, g, "a lone caller", alone)
		if want := []int{2, 1}; !slices.Equal(served, want) {
			t.Errorf("flushes served %v callers, want %v", served, want)
		}
		mustClose(t, s)
	})
}

// A caller announced and then withdrawn (the woken claim took nothing)
// holds the flush up no longer.
func TestAWithdrawnExpectationLetsTheFlushBegin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGatedFlush()
		s := groupCommit(g.flush)
		s.expectWait = time.Hour
		ctx := context.Background()

		s.Expect()
		post := goSync(ctx, s)
		synctest.Wait()
		assertCalls(t, g, 0)
		s.Unexpect()
		synctest.Wait()
		assertCalls(t, g, 1)
		letFlushEnd(t, g, "post", post)
		mustClose(t, s)
	})
}

// A caller announced who never comes (a woken claim slow to run, or one
// that never withdraws) holds the flush up for ExpectWait and no longer,
// and only that flush: the expectation is forgotten once it began.
func TestAnExpectedCallerWhoNeverComesHoldsOneFlushBriefly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGatedFlush()
		s := groupCommit(g.flush)
		ctx := context.Background()

		s.Expect()
		post := goSync(ctx, s)
		synctest.Wait()
		assertCalls(t, g, 0)
		time.Sleep(ExpectWait - time.Microsecond)
		synctest.Wait()
		assertCalls(t, g, 0)
		time.Sleep(time.Microsecond)
		synctest.Wait()
		assertCalls(t, g, 1)
		letFlushEnd(t, g, "post", post)

		later := goSync(ctx, s)
		synctest.Wait()
		assertCalls(t, g, 2) // at once: nothing is expected any more
		letFlushEnd(t, g, "later caller", later)
		mustClose(t, s)
	})
}

// TestReadyCallersJoinTheFlushAboutToBegin has ten callers ready to run at
// once on one processor. The first to run starts the flush loop, which the
// scheduler runs next: without gather it would flush for that caller alone,
// and again for each of the others in turn. (Not in a synctest bubble, and
// not parallel: it sets GOMAXPROCS. Under -race the scheduler shuffles the
// order a little, hence "at most two".)
func TestReadyCallersJoinTheFlushAboutToBegin(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var flushes atomic.Int32
	s := groupCommit(func() error { flushes.Add(1); return nil })
	var served callersSeen
	s.Observe(&served)
	const callers = 10
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			if err := s.Sync(context.Background()); err != nil {
				t.Errorf("sync: %v", err)
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := flushes.Load(); got > 2 {
		t.Fatalf("%d flushes for %d callers ready at once (callers per flush %v), want at most 2", got, callers, served)
	}
}

func TestFlushErrorReachesEveryCallerOfItsBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGatedFlush()
		s := groupCommit(g.flush)
		ctx := context.Background()
		cause := errors.New("EIO from the disc")

		first := goSync(ctx, s)
		synctest.Wait()
		batch := []<-chan error{goSync(ctx, s), goSync(ctx, s), goSync(ctx, s)}
		synctest.Wait()

		g.release <- nil
		synctest.Wait()
		if err := assertReturned(t, "first caller", first); err != nil {
			t.Fatalf("first sync: %v", err)
		}
		g.release <- cause
		synctest.Wait()
		for _, done := range batch {
			err := assertReturned(t, "caller", done)
			var derr *domain.Error
			if !errors.As(err, &derr) || derr.Kind != domain.KindUnavailable || derr.Code != "storage_unavailable" {
				t.Errorf("sync = %v, want a storage_unavailable error", err)
			}
			if !errors.Is(err, cause) {
				t.Errorf("sync = %v, does not wrap the flush's error", err)
			}
		}

		// The failure belongs to that batch only.
		next := goSync(ctx, s)
		synctest.Wait()
		g.release <- nil
		synctest.Wait()
		if err := assertReturned(t, "next caller", next); err != nil {
			t.Errorf("sync after a failed flush: %v", err)
		}
	})
}

func TestCancelledCallerStopsWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGatedFlush()
		s := groupCommit(g.flush)

		ctx, cancel := context.WithCancel(context.Background())
		impatient := goSync(ctx, s)
		synctest.Wait() // flush 1 runs for the impatient caller
		patient := goSync(context.Background(), s)
		synctest.Wait() // and the patient one waits for flush 2

		cancel()
		synctest.Wait()
		if err := assertReturned(t, "cancelled caller", impatient); !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled sync = %v, want context.Canceled", err)
		}
		assertWaiting(t, "other caller", patient)

		// The flushes themselves go on: the cancelled caller's, then
		// the one the other caller waits for.
		g.release <- nil
		synctest.Wait()
		assertWaiting(t, "other caller", patient)
		g.release <- nil
		synctest.Wait()
		if err := assertReturned(t, "other caller", patient); err != nil {
			t.Fatal(err)
		}
		assertCalls(t, g, 2)
	})
}

func TestCloseWaitsForFlushAndRefusesLaterCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGatedFlush()
		s := groupCommit(g.flush)
		pending := goSync(context.Background(), s)
		synctest.Wait()

		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		synctest.Wait()
		assertWaiting(t, "Close", closed)

		g.release <- nil
		synctest.Wait()
		if err := assertReturned(t, "pending caller", pending); err != nil {
			t.Fatal(err)
		}
		if err := assertReturned(t, "Close", closed); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(context.Background()); domain.KindOf(err) != domain.KindUnavailable {
			t.Errorf("sync after close = %v, want KindUnavailable", err)
		}
		assertCalls(t, g, 1)
	})
}

func TestNone(t *testing.T) {
	if err := (None{}).Sync(context.Background()); err != nil {
		t.Errorf("None.Sync = %v", err)
	}
}

// TestASyncWithNothingRecordedReturnsAtOnce: a reader's Sync (before it
// shows what it read) on a server with nothing waiting for a commit starts
// no flush, while one after a write still does.
func TestASyncWithNothingRecordedReturnsAtOnce(t *testing.T) {
	r := newRig(t)
	s := r.start(1 << 20)
	var served callersSeen
	s.Observe(&served)
	ctx := context.Background()

	r.put(s, Items, "h/q/pending/a.json", []byte(`{"a":1}`))
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// The flush loop ends a moment after it wakes its callers; a Sync
	// meanwhile waits for its end, and so for one more round.
	for i := 0; ; i++ {
		s.mu.Lock()
		running := s.running
		s.mu.Unlock()
		if !running {
			break
		}
		if i == 10_000 {
			t.Fatal("the flush loop is still running")
		}
		time.Sleep(time.Millisecond)
	}
	for range 3 {
		if err := s.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(served) != 1 {
		t.Fatalf("a write and four Syncs flushed %d times (callers %v), want once", len(served), served)
	}
	r.put(s, Items, "h/q/pending/b.json", []byte(`{"b":1}`))
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if len(served) != 2 {
		t.Fatalf("a second write's Sync flushed %d times in all, want 2", len(served))
	}
}

// TestASyncWithNothingNewWaitsForTheCommitUnderWay: a commit that took the
// last records has not made them durable until it ends, so a Sync called
// meanwhile, with nothing recorded since, still waits for it.
func TestASyncWithNothingNewWaitsForTheCommitUnderWay(t *testing.T) {
	r := newRig(t)
	s := r.start(1 << 20)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	// The gate is between the commit's taking the records and its writing
	// them.
	s.Root(Logs).BeforeCommit(func() error {
		entered <- struct{}{}
		<-release
		return nil
	})
	released := sync.OnceFunc(func() { close(release) })
	defer released() // a failing test still lets Close end the commit
	ctx := context.Background()

	r.put(s, Items, "h/q/pending/a.json", []byte(`{"a":1}`))
	writer := goSync(ctx, s)
	<-entered // the commit runs; it has the record, but has not written it
	s.journal.mu.Lock()
	taken := len(s.journal.pending) == 0
	s.journal.mu.Unlock()
	if !taken {
		t.Fatal("the commit under way has not taken the record")
	}
	reader := goSync(ctx, s)
	select {
	case err := <-reader:
		t.Fatalf("a Sync returned (%v) while the commit of the write before it was under way", err)
	case <-time.After(50 * time.Millisecond):
	}
	released()
	for name, done := range map[string]<-chan error{"writer": writer, "reader": reader} {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still waiting after the commits", name)
		}
	}
}
