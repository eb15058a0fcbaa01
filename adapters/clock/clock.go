// Package clock tells the time: the system's, or a fake one that tests set
// and advance by hand.
package clock

import (
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

// Fake is a clock that moves only when told to, so that tests can cross a
// lease, a queue timeout or midnight without waiting. It is safe for
// concurrent use: the code under test reads it while the test moves it.
type Fake struct {
	mu  sync.Mutex
	now time.Time
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
	defer f.mu.Unlock()
	f.now = t
}

// Advance moves the Fake on by d and returns the new time.
func (f *Fake) Advance(d time.Duration) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	return f.now
}
