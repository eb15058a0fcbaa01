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
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	c := &Clock{pool: pool, local: opts.Local, opts: opts, stop: make(chan struct{}), done: make(chan struct{})}
	if err := c.Measure(ctx); err != nil {
		return nil, err
	}
	go c.run()
	return c, nil
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
// is taken as the moment the database read its clock.
func (c *Clock) Measure(ctx context.Context) error {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return fail("read the database's clock", err)
	}
	defer conn.Release()
	best := time.Duration(-1)
	var offset time.Duration
	for range c.opts.Samples {
		var db time.Time
		t0 := c.local()
		err := conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&db)
		t1 := c.local()
		if err != nil {
			return fail("read the database's clock", err)
		}
		rtt := t1.Sub(t0)
		if best < 0 || rtt < best {
			best = rtt
			offset = db.Sub(t0.Add(rtt / 2))
		}
	}
	c.offset.Store(int64(offset))
	c.error.Store(int64(best / 2))
	return nil
}

// run measures again every opts.Every until Close. A failed measurement
// keeps the last offset: the local clock carries on from it.
func (c *Clock) run() {
	defer close(c.done)
	tick := time.NewTicker(c.opts.Every)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
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
