package app

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/domain"
)

// Delayed tasks (a delayed post, a backoff, a give-back with a delay) are
// pending but not claimable until their notBefore. No event marks the moment
// they become claimable, so the service keeps, per queue, one timer for the
// earliest notBefore it knows of. When it fires, the repository makes the
// due tasks claimable (TaskRepository.Due) and says how many, that many
// waiting claims are woken, and the timer is set for the next one. So a
// delayed task is claimable, and a waiting claim has it, within a timer's
// latency of its time, without polling. The sweep re-arms every queue's
// timer from the repository once a tick, which covers tasks loaded at
// start-up and queues a reload brought back.

// AlarmClock is a Clock that can also call f once d has passed on it. A
// clock without it (ports.Clock alone) gets the system's timers.
type AlarmClock interface {
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// delays holds the service's timer of each queue with delayed tasks.
type delays struct {
	mu     sync.Mutex
	timers map[domain.QueueRef]*alarm
}

// alarm is one queue's timer, set for at.
type alarm struct {
	at   time.Time
	stop func() bool
}

// afterFunc runs f once d has passed on the service's clock.
func (s *Service) afterFunc(d time.Duration, f func()) func() bool {
	if c, ok := s.clock.(AlarmClock); ok {
		return c.AfterFunc(d, f)
	}
	return time.AfterFunc(d, f).Stop
}

// wakeAt makes sure q's timer fires by at.
func (s *Service) wakeAt(q *domain.Queue, at time.Time) {
	if at.IsZero() {
		return
	}
	ref := q.Ref()
	s.delays.mu.Lock()
	defer s.delays.mu.Unlock()
	if a := s.delays.timers[ref]; a != nil {
		if !a.at.After(at) {
			return // set for earlier already
		}
		a.stop()
	}
	a := &alarm{at: at}
	a.stop = s.afterFunc(at.Sub(s.clock.Now()), func() { s.ring(q, a) })
	s.delays.timers[ref] = a
}

// ring is q's timer firing: the due tasks become claimable, that many
// waiting claims wake, and the timer is set for the next delayed task.
func (s *Service) ring(q *domain.Queue, a *alarm) {
	ref := q.Ref()
	s.delays.mu.Lock()
	if s.delays.timers[ref] != a {
		s.delays.mu.Unlock()
		return // replaced by an earlier one
	}
	delete(s.delays.timers, ref)
	s.delays.mu.Unlock()
	if s.drained.Err() != nil {
		return
	}
	n, next, err := s.repo.Due(context.Background(), ref, s.clock.Now())
	if err != nil {
		s.logger.Warn("delayed tasks: look for due ones", zap.String("host", q.Host), zap.String("queue", q.Name), zap.Error(err))
		next = s.clock.Now().Add(time.Second) // try again soon; the sweep re-arms too
	}
	if n > 0 {
		s.notifier.Wake(ref, n)
	}
	s.wakeAt(q, next)
}

// watchDelay sets q's timer for a task just stored, if it waits.
func (s *Service) watchDelay(q *domain.Queue, t domain.Task) {
	if t.Status == domain.Pending && t.NotBefore != nil {
		s.wakeAt(q, time.UnixMilli(*t.NotBefore))
	}
}

// rearm sets q's timer from the repository, for delayed tasks the service
// did not store itself (loaded at start-up): the sweep calls it once a tick.
func (s *Service) rearm(ctx context.Context, q *domain.Queue) error {
	n, next, err := s.repo.Due(ctx, q.Ref(), s.clock.Now())
	if err != nil {
		return err
	}
	if n > 0 {
		s.notifier.Wake(q.Ref(), n)
	}
	s.wakeAt(q, next)
	return nil
}

// stopDelays stops every timer (the service drains).
func (s *Service) stopDelays() {
	s.delays.mu.Lock()
	defer s.delays.mu.Unlock()
	for ref, a := range s.delays.timers {
		a.stop()
		delete(s.delays.timers, ref)
	}
}
