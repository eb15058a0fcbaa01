// Package clock tells the time: the system's, the system's shifted (a
// skewed machine, for tests), or a fake one that tests set and advance by
// hand. The database's clock, which servers sharing a PostgreSQL database
// judge time by, is postgres.Clock.
package clock

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/taskhoster/taskhoster/ports"
)

var (
	_ ports.Clock = System{}
	_ ports.Clock = (*Fake)(nil)
)

// System is the machine's clock.
type System struct{}

// Now returns the current time.
func (System) Now() time.Time { return time.Now() }

// AfterFunc calls f in its own goroutine once d has passed.
func (System) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	return time.AfterFunc(d, f).Stop
}

// Fake is a clock that moves only when told to, so that tests can cross a
// lease, a queue timeout or midnight without waiting. It is safe for
// concurrent use: the code under test reads it while the test moves it.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	alarms map[*fakeAlarm]struct{}
}

// fakeAlarm is an AfterFunc waiting for the Fake to reach at.
type fakeAlarm struct {
	at time.Time
	f  func()
}

// NewFake returns a Fake showing t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the time the Fake shows.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Set makes the Fake show t, which may be earlier than before.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.now = t
	f.ring()
}

// Advance moves the Fake on by d and returns the new time.
func (f *Fake) Advance(d time.Duration) time.Time {
	f.mu.Lock()
	f.now = f.now.Add(d)
	now := f.now
	f.ring()
	return now
}

// AfterFunc calls f in its own goroutine once the Fake has been moved d on
// from now (at once if d is not positive), as time.AfterFunc would.
func (f *Fake) AfterFunc(d time.Duration, fn func()) (stop func() bool) {
	f.mu.Lock()
	a := &fakeAlarm{at: f.now.Add(d), f: fn}
	if f.alarms == nil {
		f.alarms = make(map[*fakeAlarm]struct{})
	}
	f.alarms[a] = struct{}{}
	f.ring()
	return func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		_, waiting := f.alarms[a]
		delete(f.alarms, a)
		return waiting
	}
}

// ring fires the alarms that are due and unlocks f.mu, which is held.
func (f *Fake) ring() {
	var due []func()
	for a := range f.alarms {
		if !a.at.After(f.now) {
			due = append(due, a.f)
			delete(f.alarms, a)
		}
	}
	f.mu.Unlock()
	for _, fn := range due {
		go fn()
	}
}

// SkewEnv, when set to a duration ("30s", "-1m"), shifts the clock a
// server believes it has by that much (Shifted): a test hook, so that an
// end-to-end test can run one server with a skewed clock. It is read only
// by `taskhoster serve`, only when set, and is not for production use.
const SkewEnv = "TASKHOSTER_TEST_CLOCK_SKEW"

// SkewFromEnv returns the shift SkewEnv asks for (0 when it is unset).
func SkewFromEnv() (time.Duration, error) {
	v := os.Getenv(SkewEnv)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", SkewEnv, err)
	}
	return d, nil
}

var _ ports.Clock = Shifted{}

// Shifted is the machine's clock moved By on: a machine whose clock is
// skewed, for tests. Its timers are the system's (a duration is the same
// on both).
type Shifted struct{ By time.Duration }

// Now returns the machine's time plus By.
func (s Shifted) Now() time.Time { return time.Now().Add(s.By) }

// AfterFunc calls f in its own goroutine once d has passed.
func (Shifted) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	return time.AfterFunc(d, f).Stop
}
