package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/domain"
)

// Sweep applies the time-based transitions to every queue, in the order of
// SPEC §7: queue timeout, then lease lapse, then retention. It returns the
// first error after trying every queue, so one broken queue does not stall
// the others.
func (s *Service) Sweep(ctx context.Context, queues []*domain.Queue) error {
	var first error
	for _, q := range queues {
		if err := s.sweepQueue(ctx, q); err != nil {
			s.logger.Warn("sweep failed", zap.String("host", q.Host), zap.String("queue", q.Name), zap.Error(err))
			if first == nil {
				first = err
			}
		}
	}
	return first
}

func (s *Service) sweepQueue(ctx context.Context, q *domain.Queue) error {
	if err := s.rearm(ctx, q); err != nil {
		return err
	}
	now := s.clock.Now()
	ref := q.Ref()

	// Pending tasks come oldest first, so the first one too young to time
	// out ends the pass: the sweep costs what it finds, not the queue's depth.
	var timedOut, requeue, clean []string
	err := s.repo.Each(ctx, ref, domain.StagePending, func(t domain.Task) bool {
		if domain.DueAt(t, q.Settings, now) != domain.DueTimeout {
			return false
		}
		timedOut = append(timedOut, t.ID)
		return true
	})
	if err != nil {
		return err
	}
	err = s.repo.Each(ctx, ref, domain.StageProcessing, func(t domain.Task) bool {
		switch domain.DueAt(t, q.Settings, now) {
		case domain.DueTimeout:
			timedOut = append(timedOut, t.ID)
		case domain.DueRequeue:
			requeue = append(requeue, t.ID)
		}
		return true
	})
	if err != nil {
		return err
	}
	err = s.repo.Each(ctx, ref, domain.StageDone, func(t domain.Task) bool {
		if domain.TooYoungToClean(t.PostedAt, q.Settings, now) {
			return false // and so is every task posted after it
		}
		if domain.DueAt(t, q.Settings, now) == domain.DueClean {
			clean = append(clean, t.ID)
		}
		return true
	})
	if err != nil {
		return err
	}

	for _, id := range timedOut {
		if err := s.apply(ctx, q, id, domain.DueTimeout); err != nil {
			return err
		}
	}
	// Re-queues are moves back, each committed before it returns: side by
	// side, a mass lapse shares commits.
	if err := s.sideBySide(len(requeue), func(i int) error {
		return s.apply(ctx, q, requeue[i], domain.DueRequeue)
	}); err != nil {
		return err
	}
	for _, id := range clean {
		if err := s.clean(ctx, q, id); err != nil {
			return err
		}
	}
	return nil
}

// apply carries out a timeout or a lease re-queue, checking again under the
// repository's lock that it is still due: a result may have landed since
// the scan.
func (s *Service) apply(ctx context.Context, q *domain.Queue, id string, due domain.Due) error {
	_, err := s.transition(ctx, q, id, func(t domain.Task, now time.Time) (domain.Task, domain.Event, error) {
		switch {
		case domain.DueAt(t, q.Settings, now) != due:
			return t, domain.Event{}, errNotDue
		case due == domain.DueTimeout:
			return t.Timeout(now)
		}
		return t.Requeue(domain.CauseLease, s.retry(q), now)
	})
	if errors.Is(err, errNotDue) || errors.Is(err, domain.ErrNotFound) || isStateConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sweep %s: %w", id, err)
	}
	return nil
}

func (s *Service) clean(ctx context.Context, q *domain.Queue, id string) error {
	now := s.clock.Now()
	var ev domain.Event
	ctx, then := s.staging(ctx, q, &ev)
	err := s.repo.Delete(ctx, key(q, id), func(t domain.Task) error {
		// Checked on the stored record: a fetch may have landed since the scan.
		if domain.DueAt(t, q.Settings, now) != domain.DueClean {
			return errNotDue
		}
		ev = t.Clean(now)
		return nil
	}, then)
	if errors.Is(err, errNotDue) || errors.Is(err, domain.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("clean %s: %w", id, err)
	}
	return nil
}

var errNotDue = errors.New("no longer due")

// RunSweep sweeps every interval until ctx ends. queues is asked afresh each
// time, so queues added or removed by a reload are followed.
func (s *Service) RunSweep(ctx context.Context, interval time.Duration, queues func() []*domain.Queue, after func(now time.Time)) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			_ = s.Sweep(ctx, queues())
			// What the sweep changed, and any other change no client waits
			// on (fetches, the event lines of re-queues), becomes durable
			// within a tick, and the journal's buffer of them stays small.
			if err := s.syncer.Sync(ctx); err != nil && ctx.Err() == nil {
				s.logger.Warn("flush after sweep", zap.Error(err))
			}
			if after != nil {
				after(s.clock.Now())
			}
		}
	}
}
