package postgres

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/ports"
)

// One clock. Servers sharing a database judge leases, delays, queue
// timeouts and retention by the database's time, not their own, so that
// a server whose clock is off does not lapse another's lease early or hand
// out a delayed task before its time. Asking the database on every Now
// would cost a round trip per rule; instead Clock measures the offset
// between the local clock and the database's (SELECT clock_timestamp(),
// the round trip halved, the best of a few samples) at start and every few
// seconds, and Now is the local time plus that offset. Its error is at most
// half the best sample's round trip (well under a millisecond on a LAN),
// plus how far the local clock drifts between measurements.
//
// A busy machine stretches round trips, and a stretched one may be
// lopsided: one measurement taken while the server starts or the machine
// is loaded can be off by milliseconds. So a new measurement replaces the
// offset in use only when its bound is no wider than the old one's grown
// by the drift since (maxDrift), or when the two disagree beyond both
// bounds (the local clock was stepped); and while the bound in use is wide,
// the next measurement comes soon rather than a period later (at start, at
// once: up to four measurements before the Clock is handed out).

var _ ports.Clock = (*Clock)(nil)

// ClockOptions tune a Clock; the zero value is the default.
type ClockOptions struct {
	// Local is the clock whose offset is measured (default time.Now).
	// Tests pass a skewed one.
	Local func() time.Time
	// Every is how often the offset is measured again (default 5 s).
	Every time.Duration
	// Samples is how many round trips one measurement takes, the fastest
	// of which is kept (default 5).
	Samples int
	// Settle is how soon the offset is measured again while its error
	// bound is wider than a millisecond (default 250 ms; never later than
	// Every).
	Settle time.Duration
	// Logger is told of measurements that fail (the last offset stays).
	Logger *zap.Logger
}

// Clock is the database's time: ports.Clock and app.AlarmClock for
// servers on one PostgreSQL database. Close stops its measurements.
type Clock struct {
	pool  *pgxpool.Pool
	local func() time.Time
	opts  ClockOptions

	offset atomic.Int64 // database minus local, ns
	error  atomic.Int64 // half the round trip of the sample offset came from, ns

	mu   sync.Mutex // serialises Measure
	kept estimate   // what offset and error hold, and when it was measured

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Clock measures the offset of this Store's database's clock and returns a
// Clock that keeps measuring it every opts.Every until Close. It fails if
// the first measurement does.
func (s *Store) Clock(ctx context.Context, opts ClockOptions) (*Clock, error) {
	return NewClock(ctx, s.pool, opts)
}

// NewClock is Store.Clock on a pool of connections to the database.
func NewClock(ctx context.Context, pool *pgxpool.Pool, opts ClockOptions) (*Clock, error) {
	if opts.Local == nil {
		opts.Local = time.Now
	}
	if opts.Every <= 0 {
		opts.Every = 5 * time.Second
	}
	if opts.Samples <= 0 {
		opts.Samples = 5
	}
	if opts.Settle <= 0 {
		opts.Settle = 250 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	c := &Clock{pool: pool, local: opts.Local, opts: opts, stop: make(chan struct{}), done: make(chan struct{})}
	// A server starting is busy itself: while the bound is wide, a few more
	// measurements right away, so that it does not serve on a lopsided one.
	for try := 1; ; try++ {
		if err := c.Measure(ctx); err != nil {
			return nil, err
		}
		if !c.wide() || try == startMeasures {
			break
		}
	}
	go c.run()
	return c, nil
}

// wide reports whether the bound in use is wider than wideBound.
func (c *Clock) wide() bool {
	_, bound := c.Offset()
	return bound > wideBound
}

// Now is the database's time: the local time plus the measured offset.
// It makes no round trip.
func (c *Clock) Now() time.Time {
	return c.local().Add(time.Duration(c.offset.Load()))
}

// Offset is the last measured offset (the database's clock minus the local
// one) and its error bound (half the round trip it was measured over).
func (c *Clock) Offset() (offset, bound time.Duration) {
	return time.Duration(c.offset.Load()), time.Duration(c.error.Load())
}

// Measure measures the offset now: opts.Samples round trips on one
// connection, keeping the one with the shortest round trip, whose midpoint
// is taken as the moment the database read its clock. The result replaces
// the offset in use when it is the better estimate (see estimate.better).
func (c *Clock) Measure(ctx context.Context) error {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return fail("read the database's clock", err)
	}
	defer conn.Release()
	m := estimate{bound: -1}
	for range c.opts.Samples {
		var db time.Time
		t0 := c.local()
		err := conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&db)
		t1 := c.local()
		if err != nil {
			return fail("read the database's clock", err)
		}
		if rtt := t1.Sub(t0); m.bound < 0 || rtt/2 < m.bound {
			m = estimate{offset: db.Sub(t0.Add(rtt / 2)), bound: rtt / 2, at: t1}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kept.at.IsZero() || m.better(c.kept) {
		c.kept = m
		c.offset.Store(int64(m.offset))
		c.error.Store(int64(m.bound))
	}
	return nil
}

// maxDrift is how fast a local clock may be taken to drift from the
// database's (100 ppm: ten times a disciplined clock's usual rate): an
// estimate's bound grows by this share of its age.
const maxDrift = 100e-6

// estimate is one measurement of the offset: the database's clock minus
// the local one, within ±bound, as of the local time at.
type estimate struct {
	offset, bound time.Duration
	at            time.Time
}

// boundAt is e's bound at the local time now, grown by the drift since.
func (e estimate) boundAt(now time.Time) time.Duration {
	return e.bound + time.Duration(float64(max(now.Sub(e.at), 0))*maxDrift)
}

// better reports whether m should replace old: its bound is no wider than
// old's has grown by m's time, or the two disagree beyond their bounds
// (the local clock was stepped, or drifted faster than maxDrift), where
// only the newer can be right.
func (m estimate) better(old estimate) bool {
	oldBound := old.boundAt(m.at)
	if m.bound <= oldBound {
		return true
	}
	apart := m.offset - old.offset
	return max(apart, -apart) > m.bound+oldBound
}

// startMeasures is how many measurements NewClock takes at most while the
// bound stays wider than wideBound.
const startMeasures = 4

// wideBound is an error bound worth improving soon: a loopback or LAN
// round trip is a fraction of it, so a wider one was measured over a
// stretched round trip.
const wideBound = time.Millisecond

// run measures again every opts.Every, or after opts.Settle while the
// bound in use is wider than wideBound, until Close. A failed measurement
// keeps the last offset: the local clock carries on from it.
func (c *Clock) run() {
	defer close(c.done)
	for {
		wait := c.opts.Every
		if c.wide() {
			wait = min(wait, c.opts.Settle)
		}
		select {
		case <-c.stop:
			return
		case <-time.After(wait):
			ctx, cancel := context.WithTimeout(context.Background(), c.opts.Every)
			if err := c.Measure(ctx); err != nil {
				c.opts.Logger.Warn("measure the database's clock; keeping the last offset", zap.Error(err))
			}
			cancel()
		}
	}
}

// Close stops the measurements. Now keeps the last offset.
func (c *Clock) Close() {
	c.once.Do(func() { close(c.stop) })
	<-c.done
}

// AfterFunc calls f in its own goroutine once d has passed on the
// database's clock: a local timer, checked again when it fires against Now,
// and set again for what is left if a new offset moved the time back.
func (c *Clock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	a := &dbAlarm{c: c, at: c.Now().Add(d), f: f}
	a.mu.Lock()
	a.timer = time.AfterFunc(d, a.fire)
	a.mu.Unlock()
	return a.stop
}

// dbAlarm is one AfterFunc of a Clock, due at at on the database's clock.
type dbAlarm struct {
	c  *Clock
	at time.Time
	f  func()

	mu    sync.Mutex
	timer *time.Timer
	over  bool // fired or stopped
}

func (a *dbAlarm) fire() {
	a.mu.Lock()
	if a.over {
		a.mu.Unlock()
		return
	}
	if left := a.at.Sub(a.c.Now()); left > 0 {
		a.timer = time.AfterFunc(left, a.fire)
		a.mu.Unlock()
		return
	}
	a.over = true
	a.mu.Unlock()
	a.f()
}

// stop reports whether it kept f from running, as time.Timer.Stop does.
func (a *dbAlarm) stop() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.over {
		return false
	}
	a.over = true
	a.timer.Stop()
	return true
}
