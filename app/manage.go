package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// Operating queues (SPEC §12): cancel, retry and purge, pause and resume,
// list and search, batch claims.

// Canceller is who asks for a cancel: a user with manage access may cancel
// any task of the queue, one with only post access only the tasks it posted.
type Canceller struct {
	User   string
	Manage bool
}

// Cancel ends a pending or processing task: failed with error "cancelled".
// Its worker's next progress, heartbeat, give-back or result is refused,
// and a worker socket holding it is told at once (it watches its tasks'
// events). A terminal task is left as it is and reported, accepted false.
// The cancel is durable before it is answered.
func (s *Service) Cancel(ctx context.Context, q *domain.Queue, id string, by Canceller) (Outcome, error) {
	t, err := s.transition(ctx, q, id, func(t domain.Task, now time.Time) (domain.Task, domain.Event, error) {
		if !by.Manage && (t.PostedBy == nil || *t.PostedBy != by.User) {
			return t, domain.Event{}, errNotYours
		}
		return t.Cancel(now)
	})
	if errors.Is(err, errNotYours) {
		return Outcome{}, errNotYours
	}
	return s.settle(ctx, q, id, "cancel", t, err)
}

var errNotYours = domain.E(domain.KindForbidden, domain.CodeForbidden, "only the user who posted a task, or one with manage access, may cancel it")

// RetryTask puts a failed task back to pending with a fresh attempts budget
// (a dead letter, a timeout, a cancel: any failure). 409 not_failed for a
// task in another status. The file store commits it before it returns (a
// move back); its event line is flushed with the next commit.
func (s *Service) RetryTask(ctx context.Context, q *domain.Queue, id string) (domain.Task, error) {
	t, err := s.transition(ctx, q, id, func(t domain.Task, now time.Time) (domain.Task, domain.Event, error) {
		return t.Retry(now)
	})
	if err != nil {
		return t, err
	}
	return t, nil
}

// Purge deletes every task of q in status st (finished or failed) now,
// logging cleaned for each, and says how many it deleted once the
// deletions are durable: a dead letter purged must not come back with a
// power loss after the answer.
func (s *Service) Purge(ctx context.Context, q *domain.Queue, st domain.Status) (int, error) {
	if !st.Terminal() {
		return 0, invalidRequest("purge takes status failed or finished")
	}
	var ids []string
	if err := s.repo.Each(ctx, q.Ref(), domain.StageDone, func(t domain.Task) bool {
		if t.Status == st {
			ids = append(ids, t.ID)
		}
		return true
	}); err != nil {
		return 0, fmt.Errorf("purge %s/%s: %w", q.Host, q.Name, err)
	}
	n := 0
	for _, id := range ids {
		var ev domain.Event
		ectx, then := s.staging(ctx, q, &ev)
		err := s.repo.Delete(ectx, key(q, id), func(t domain.Task) error {
			if t.Status != st {
				return errNotDue // retried meanwhile
			}
			ev = t.Clean(s.clock.Now())
			return nil
		}, then)
		switch {
		case err == nil:
			n++
		case errors.Is(err, errNotDue) || errors.Is(err, domain.ErrNotFound):
		default:
			return n, fmt.Errorf("purge %s: %w", id, err)
		}
	}
	if err := s.syncer.Sync(ctx); err != nil {
		return 0, fmt.Errorf("purge %s/%s: %w", q.Host, q.Name, err)
	}
	return n, nil
}

// Paused reports whether claims of q wait.
func (s *Service) Paused(q *domain.Queue) bool {
	return s.pauses != nil && s.pauses.Paused(q.Ref())
}

// SetPaused pauses or resumes q. While paused, posts are taken and claims
// wait (and answer none at the end of their wait); a resume wakes the
// waiting claims. The pause survives restarts.
func (s *Service) SetPaused(ctx context.Context, q *domain.Queue, paused bool) error {
	if s.pauses == nil {
		return domain.E(domain.KindUnavailable, domain.CodeUnavailable, "this server keeps no pauses")
	}
	if err := s.pauses.SetPaused(ctx, q.Ref(), paused); err != nil {
		return fmt.Errorf("pause %s/%s: %w", q.Host, q.Name, err)
	}
	if !paused {
		s.notifier.Wake(q.Ref(), max(s.repo.Counts(q.Ref()).Pending, 1))
	}
	return nil
}

// ListQuery is a page of tasks asked for over the API; Query is the JSON
// Schema the item must match (nil: any).
type ListQuery struct {
	Status domain.Status
	Newest bool
	Limit  int
	After  string
	Query  json.RawMessage
}

// MaxListLimit is the largest page (SPEC §12).
const MaxListLimit = 1000

// ListTasks returns a page of q's tasks and the cursor of the next.
func (s *Service) ListTasks(ctx context.Context, q *domain.Queue, l ListQuery) ([]domain.Task, string, error) {
	if !l.Status.Valid() {
		return nil, "", invalidRequest("status must be pending, processing, finished or failed")
	}
	if l.Limit < 1 || l.Limit > MaxListLimit {
		return nil, "", invalidRequest("limit must be 1 to %d", MaxListLimit)
	}
	m, err := s.queries.matcher(l.Query)
	if err != nil {
		return nil, "", err
	}
	tasks, next, err := s.repo.List(ctx, q.Ref(), ports.ListQuery{Status: l.Status, Newest: l.Newest, Limit: l.Limit, After: l.After, Match: m})
	if err != nil {
		return nil, "", err
	}
	return tasks, next, s.shown(ctx)
}

// MaxClaimBatch is the most tasks one HTTP claim takes (SPEC §12).
const MaxClaimBatch = 100

// ClaimMany claims up to n tasks for worker: the first as Claim does,
// waiting up to wait; the rest only from what is pending then.
func (s *Service) ClaimMany(ctx context.Context, q *domain.Queue, worker string, query json.RawMessage, wait time.Duration, n int) ([]domain.Task, error) {
	if n < 1 || n > MaxClaimBatch {
		return nil, invalidRequest("max must be 1 to %d", MaxClaimBatch)
	}
	first, err := s.Claim(ctx, q, worker, query, wait)
	if err != nil {
		return nil, err
	}
	tasks := []domain.Task{first}
	m, _ := s.queries.matcher(query) // compiled by Claim already
	// The rest are judged by the queue in force, as Claim's last look was:
	// a reload while the claim waited may have lowered maxAttempts.
	q = s.current(q)
	for len(tasks) < n && !s.Paused(q) {
		t, _, err := s.claimStored(ctx, q, worker, m, 0)
		if errors.Is(err, domain.ErrNotFound) {
			break
		}
		if err != nil {
			return tasks, errors.Join(err, s.flushClaims(ctx))
		}
		tasks = append(tasks, t)
	}
	if len(tasks) > 1 { // the first, claimed by Claim, is flushed already
		if err := s.flushClaims(ctx); err != nil {
			return tasks, err
		}
	}
	return tasks, nil
}
