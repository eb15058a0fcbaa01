package postgres_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskhoster/taskhoster/adapters/postgres"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/internal/pgtest"
)

var _ app.AlarmClock = (*postgres.Clock)(nil)

// skewed is a local clock whose skew a test moves.
type skewed struct{ by atomic.Int64 }

func (s *skewed) now() time.Time          { return time.Now().Add(time.Duration(s.by.Load())) }
func (s *skewed) set(d time.Duration)     { s.by.Store(int64(d)) }
func newSkewed(d time.Duration) *skewed   { s := &skewed{}; s.set(d); return s }
func abs(d time.Duration) time.Duration   { return max(d, -d) }
func within(a, b, tol time.Duration) bool { return abs(a-b) <= tol }
func openClock(t *testing.T, s *postgres.Store, opts postgres.ClockOptions) *postgres.Clock {
	t.Helper()
	c, err := s.Clock(context.Background(), opts)
	if err != nil {
		t.Fatalf("clock: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// dbNow reads the database's clock, and the Clock's Now just before and
// just after.
func dbNow(t *testing.T, conn *pgx.Conn, c *postgres.Clock) (before, db, after time.Time) {
	t.Helper()
	before = c.Now()
	if err := conn.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	return before, db, c.Now()
}

// The Clock shows the database's time whatever the local clock says: a
// local clock 30 s ahead, or an hour behind, is corrected by the offset
// to within the measurement's error bound.
func TestClockIsTheDatabases(t *testing.T) {
	url := pgtest.Database(t)
	s := mustOpen(t, url)
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())

	for _, skew := range []time.Duration{0, 30 * time.Second, -time.Hour} {
		local := newSkewed(skew)
		c := openClock(t, s, postgres.ClockOptions{Local: local.now})
		offset, bound := c.Offset()
		// The test cluster runs on this machine, on its clock: the offset
		// undoes the skew.
		if !within(offset, -skew, bound+2*time.Millisecond) {
			t.Errorf("skew %v: offset %v ± %v, want %v", skew, offset, bound, -skew)
		}
		if bound <= 0 || bound > 50*time.Millisecond {
			t.Errorf("skew %v: error bound %v, want a loopback round trip's half", skew, bound)
		}
		// The database read its clock between the two Nows (with the
		// bound's slack, and the microseconds PostgreSQL keeps).
		before, db, after := dbNow(t, conn, c)
		slack := bound + 2*time.Millisecond
		if db.Before(before.Add(-slack)) || db.After(after.Add(slack)) {
			t.Errorf("skew %v: database time %v not within [%v, %v] ± %v", skew, db, before, after, slack)
		}
	}
}

// The offset is measured again every Every: a local clock that jumps (an
// NTP step) is corrected within a period.
func TestClockFollowsALocalJump(t *testing.T) {
	s := mustOpen(t, pgtest.Database(t))
	local := newSkewed(0)
	c := openClock(t, s, postgres.ClockOptions{Local: local.now, Every: 50 * time.Millisecond})
	local.set(-10 * time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for !within(time.Until(c.Now()), 0, 5*time.Millisecond) {
		if time.Now().After(deadline) {
			offset, bound := c.Offset()
			t.Fatalf("after a jump of the local clock by -10 s, offset %v ± %v; want about +10 s", offset, bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Measure on demand gives the same.
	if err := c.Measure(context.Background()); err != nil {
		t.Fatal(err)
	}
	if offset, bound := c.Offset(); !within(offset, 10*time.Second, bound+2*time.Millisecond) {
		t.Errorf("offset %v ± %v, want 10 s", offset, bound)
	}
}

// AfterFunc fires once d has passed on the database's clock; stop keeps it
// from firing; and when the clock moves back meanwhile (here the local
// clock, before the next measurement), it waits for the time that is left.
func TestClockAfterFunc(t *testing.T) {
	s := mustOpen(t, pgtest.Database(t))
	local := newSkewed(0)
	c := openClock(t, s, postgres.ClockOptions{Local: local.now, Every: time.Hour, Settle: time.Hour})

	// fires sets an AfterFunc of d, moves the local clock by move, and
	// checks that f runs, and not before atLeast has passed.
	fires := func(d, move, atLeast time.Duration) {
		t.Helper()
		fired := make(chan time.Time, 1)
		start := time.Now()
		c.AfterFunc(d, func() { fired <- time.Now() })
		local.set(move)
		select {
		case at := <-fired:
			if at.Sub(start) < atLeast {
				t.Errorf("AfterFunc(%v) with the clock moved by %v fired after %v, want %v", d, move, at.Sub(start), atLeast)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("AfterFunc(%v) with the clock moved by %v did not fire", d, move)
		}
	}
	fires(100*time.Millisecond, 0, 100*time.Millisecond)

	var calls atomic.Int32
	stop := c.AfterFunc(50*time.Millisecond, func() { calls.Add(1) })
	if !stop() {
		t.Error("stop before the time = false, want true")
	}
	if stop() {
		t.Error("a second stop = true, want false")
	}
	time.Sleep(150 * time.Millisecond)
	if calls.Load() != 0 {
		t.Error("a stopped AfterFunc fired")
	}

	fires(200*time.Millisecond, -300*time.Millisecond, 450*time.Millisecond) // the clock moves back 300 ms
}

// Close stops the measurements and is safe to call twice; Now carries on
// from the last offset. A Clock on a database that cannot be reached does
// not start.
func TestClockCloseAndUnreachable(t *testing.T) {
	s := mustOpen(t, pgtest.Database(t))
	c, err := s.Clock(context.Background(), postgres.ClockOptions{Every: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(c.Close)
	}
	wg.Wait()
	if !within(time.Until(c.Now()), 0, 5*time.Millisecond) {
		t.Errorf("Now after Close is %v off the local clock", time.Until(c.Now()))
	}

	down := mustOpen(t, pgtest.Database(t))
	down.Close()
	if _, err := down.Clock(context.Background(), postgres.ClockOptions{}); !isUnavailable(err) {
		t.Errorf("clock on a closed pool: %v, want storage_unavailable", err)
	}
}

// lopsided is a local clock whose reads, while slow is set, return only
// after a pause: each round trip looks longer, its midpoint too early, so
// a measurement's offset comes out off by about half the pause.
type lopsided struct{ slow atomic.Bool }

func (l *lopsided) now() time.Time {
	t := time.Now()
	if l.slow.Load() {
		time.Sleep(20 * time.Millisecond)
	}
	return t
}

// A measurement over stretched, lopsided round trips does not displace a
// tight one; and a Clock whose first measurement was stretched measures
// again within Settle, not a period later, and keeps the tighter result.
func TestClockKeepsItsTighterMeasurement(t *testing.T) {
	s := mustOpen(t, pgtest.Database(t))
	local := &lopsided{}
	c := openClock(t, s, postgres.ClockOptions{Local: local.now, Every: time.Hour, Settle: time.Hour})
	offset, bound := c.Offset()
	local.slow.Store(true)
	if err := c.Measure(context.Background()); err != nil {
		t.Fatal(err)
	}
	if o, b := c.Offset(); o != offset || b != bound {
		t.Errorf("after a lopsided measurement the offset is %v ± %v, want the tighter %v ± %v kept", o, b, offset, bound)
	}

	// A clock that starts while round trips are stretched settles soon.
	started := openClock(t, s, postgres.ClockOptions{Local: local.now, Every: time.Hour, Settle: 20 * time.Millisecond})
	if _, b := started.Offset(); b < 8*time.Millisecond {
		t.Fatalf("a measurement over round trips stretched by 20 ms has bound %v", b)
	}
	local.slow.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for {
		o, b := started.Offset()
		if b < 8*time.Millisecond {
			if !within(o, 0, b+2*time.Millisecond) {
				t.Errorf("settled offset %v ± %v, want about 0 (the cluster runs on this machine's clock)", o, b)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bound is still %v 5 s after the round trips became short again; want it measured again within Settle", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
