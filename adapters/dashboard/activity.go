package dashboard

import (
	"sync"
	"time"

	"github.com/taskhoster/taskhoster/domain"
)

// Window is how far back the rate charts go: one count per second.
const Window = 3600

// Activity counts, per queue and per second, the tasks posted, finished and
// failed over the last Window seconds, and how many transitions a queue has
// seen (its version, which tells the live socket that a queue's lists may
// have changed although its counts did not, as after a progress). It is fed
// by app.Observer's Observe, which runs on every transition this server
// stores; so on PostgreSQL with several servers each one counts its own.
// It lives in memory only: a restart starts the charts afresh.
type Activity struct {
	mu     sync.RWMutex
	queues map[domain.QueueRef]*counters
}

// NewActivity returns an empty Activity.
func NewActivity() *Activity {
	return &Activity{queues: make(map[domain.QueueRef]*counters)}
}

// counters are one queue's per-second counts in a ring of Window slots; a
// slot is reused once its second is Window seconds old.
type counters struct {
	mu      sync.Mutex
	version uint64
	slots   [Window]slot
}

type slot struct {
	sec                      int64 // the Unix second the counts are of
	posted, finished, failed uint32
}

// Observe counts one transition (app.Observer). It takes two short locks
// and allocates only on a queue's first event.
func (a *Activity) Observe(ev domain.Event) {
	c := a.counters(domain.QueueRef{Host: ev.Task.Host, Queue: ev.Task.Queue})
	sec := ev.At.Unix()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.version++
	s := &c.slots[mod(sec, Window)]
	if s.sec != sec {
		*s = slot{sec: sec}
	}
	switch ev.Kind {
	case domain.EventPosted:
		s.posted++
	case domain.EventResult:
		s.finished++
	case domain.EventFailed, domain.EventTimeout, domain.EventCancelled:
		s.failed++
	}
}

// ResultRefused is part of app.Observer; a refused result changes nothing.
func (*Activity) ResultRefused(domain.QueueRef) {}

func (a *Activity) counters(q domain.QueueRef) *counters {
	a.mu.RLock()
	c, ok := a.queues[q]
	a.mu.RUnlock()
	if ok {
		return c
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok = a.queues[q]; !ok {
		c = &counters{}
		a.queues[q] = c
	}
	return c
}

// Second is one second's counts, as the page gets them: [unix second,
// posted, finished, failed]. Seconds with nothing are left out.
type Second [4]int64

// Rates returns q's counts for the seconds in (now - span, now], oldest
// first, leaving out the seconds with nothing counted, and q's version.
func (a *Activity) Rates(q domain.QueueRef, now time.Time, span int) ([]Second, uint64) {
	a.mu.RLock()
	c, ok := a.queues[q]
	a.mu.RUnlock()
	out := []Second{}
	if !ok {
		return out, 0
	}
	span = min(max(span, 1), Window)
	end := now.Unix()
	c.mu.Lock()
	defer c.mu.Unlock()
	for sec := end - int64(span) + 1; sec <= end; sec++ {
		s := c.slots[mod(sec, Window)]
		if s.sec == sec && s.posted+s.finished+s.failed > 0 {
			out = append(out, Second{sec, int64(s.posted), int64(s.finished), int64(s.failed)})
		}
	}
	return out, c.version
}

// mod is a non-negative remainder, so that a clock before 1970 still finds
// a slot.
func mod(a, n int64) int64 {
	if r := a % n; r >= 0 {
		return r
	}
	return a%n + n
}
