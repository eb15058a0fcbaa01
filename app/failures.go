package app

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/taskhoster/taskhoster/domain"
)

// PostOptions are what a post may ask beyond its item (SPEC §11): a delay in
// seconds or a time (Unix ms) before which no claim takes the task, and a
// priority. Nil fields are not given.
type PostOptions struct {
	DelaySeconds *float64
	NotBefore    *int64
	Priority     *int
	Key          string // an idempotency key (SPEC §12); "" for none
}

// resolve checks o and turns it into the domain's options at now.
func (o PostOptions) resolve(now time.Time) (domain.PostOptions, error) {
	var p domain.PostOptions
	switch {
	case o.DelaySeconds != nil && o.NotBefore != nil:
		return p, invalidRequest("give delay or notBefore, not both")
	case o.DelaySeconds != nil:
		d := *o.DelaySeconds
		if math.IsNaN(d) || d < 0 || d > domain.MaxDelaySeconds {
			return p, invalidRequest("delay must be a number of seconds from 0 to %d", domain.MaxDelaySeconds)
		}
		p.NotBefore = ptr(domain.Millis(now.Add(time.Duration(d * float64(time.Second)))))
	case o.NotBefore != nil:
		latest := domain.Millis(now.Add(domain.MaxDelaySeconds * time.Second))
		if *o.NotBefore < 0 || *o.NotBefore > latest {
			return p, invalidRequest("notBefore must be Unix milliseconds no more than %d s from now", domain.MaxDelaySeconds)
		}
		p.NotBefore = o.NotBefore
	}
	if o.Key != "" {
		if !domain.ValidKey(o.Key) {
			return p, invalidRequest("an Idempotency-Key is 1 to %d visible ASCII characters", domain.MaxKeyLength)
		}
		p.Key = o.Key
	}
	if o.Priority != nil {
		if *o.Priority < -domain.MaxPriority || *o.Priority > domain.MaxPriority {
			return p, invalidRequest("priority must be an integer from %d to %d", -domain.MaxPriority, domain.MaxPriority)
		}
		p.Priority = *o.Priority
	}
	return p, nil
}

func invalidRequest(format string, args ...any) error {
	return domain.E(domain.KindInvalid, domain.CodeInvalidRequest, format, args...)
}

// Heartbeat extends the lease of the worker holding task id, without a
// progress record and without an event. Anyone else is told accepted false.
func (s *Service) Heartbeat(ctx context.Context, q *domain.Queue, id string, h domain.Holder) (Outcome, error) {
	if !domain.ValidID(id) {
		return Outcome{}, domain.ErrNotFound
	}
	t, err := s.repo.Update(ctx, key(q, id), func(t *domain.Task) error {
		if err := t.HeldBy(h); err != nil {
			return err
		}
		next, err := t.Heartbeat(h.Worker, q.Settings.Lease(), s.clock.Now())
		*t = next
		return err
	}, nil)
	if isStateConflict(err) {
		return s.refusal(ctx, "heartbeat", id, t)
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("heartbeat %s: %w", id, err)
	}
	return Outcome{Accepted: true, Status: t.Status, Lease: t.Lease}, nil
}

// Release gives task id back at the request of the worker holding it: it is
// pending again, claimable after the longer of delay and the queue's
// backoff, or failed with error "attempts" after its last allowed attempt.
// reason, if given, must match the queue's failure schema. A give-back is
// durable before it is answered: one that ends the task by this Sync, one
// that re-queues it by the store's own commit (a move back).
func (s *Service) Release(ctx context.Context, q *domain.Queue, id string, h domain.Holder, delay time.Duration, reason []byte) (Outcome, error) {
	why, err := s.reason(q, reason)
	if err != nil {
		return Outcome{}, err
	}
	if delay < 0 || delay > domain.MaxDelaySeconds*time.Second {
		return Outcome{}, invalidRequest("delay must be a number of seconds from 0 to %d", domain.MaxDelaySeconds)
	}
	t, err := s.transition(ctx, q, id, func(t domain.Task, now time.Time) (domain.Task, domain.Event, error) {
		if err := t.HeldBy(h); err != nil {
			return t, domain.Event{}, err
		}
		return t.Release(h.Worker, delay, why, s.retry(q), now)
	})
	return s.settle(ctx, q, id, "release", t, err)
}

// Fail ends task id for good at a worker's word: status failed, error
// "failed", reason kept in failure. Like a result it is accepted whenever
// the task is not terminal, and it is durable before it is answered.
func (s *Service) Fail(ctx context.Context, q *domain.Queue, id, worker string, reason []byte) (Outcome, error) {
	why, err := s.reason(q, reason)
	if err != nil {
		return Outcome{}, err
	}
	t, err := s.transition(ctx, q, id, func(t domain.Task, now time.Time) (domain.Task, domain.Event, error) {
		return t.Fail(worker, why, now)
	})
	return s.settle(ctx, q, id, "fail", t, err)
}

// reason checks the reason of a give-back or a failure; absent is none.
func (s *Service) reason(q *domain.Queue, raw []byte) ([]byte, error) {
	if domain.IsNull(raw) {
		return nil, nil
	}
	return payload(q, q.Failure, raw, domain.CodeInvalidFailure)
}

// settle answers a give-back or a failure: refused with the task's status
// (refusal), or accepted once durable if it ended the task.
func (s *Service) settle(ctx context.Context, q *domain.Queue, id, what string, t domain.Task, err error) (Outcome, error) {
	if isStateConflict(err) {
		return s.refusal(ctx, what, id, t)
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("%s %s: %w", what, id, err)
	}
	if t.Status.Terminal() {
		if err := s.syncer.Sync(ctx); err != nil {
			return Outcome{}, fmt.Errorf("%s %s: %w", what, id, err)
		}
	}
	return Outcome{Accepted: true, Status: t.Status}, nil
}
