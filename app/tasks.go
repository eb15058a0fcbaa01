package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// Post validates item against the queue's item schema and stores it as a new
// pending task, delayed or prioritised as opts say. It returns once the
// task is durable.
func (s *Service) Post(ctx context.Context, q *domain.Queue, user string, item []byte, opts PostOptions) (domain.Task, error) {
	item, err := payload(q, q.Item, item, domain.CodeInvalidItem)
	if err != nil {
		return domain.Task{}, err
	}
	posting, err := opts.resolve(s.clock.Now())
	if err != nil {
		return domain.Task{}, err
	}
	var t domain.Task
	var ev domain.Event
	stored := false
	record := s.recorder(ctx, q, &ev)
	for {
		id, err := newID()
		if err != nil {
			return domain.Task{}, err
		}
		t, ev = domain.Post(id, q.Host, q.Name, item, user, s.clock.Now(), posting)
		err = s.repo.Create(ctx, t, func(t domain.Task) error {
			stored = true
			return record(t)
		})
		if err == nil {
			break
		}
		if stored {
			// Unlogged, the post is not acknowledged; take the task back so
			// the client's retry does not leave a twin behind.
			_ = s.repo.Delete(ctx, domain.KeyOf(t), nil, nil)
			return domain.Task{}, err
		}
		// 2^64 ids make a collision all but impossible; if one happens, draw again.
		if !errors.Is(err, domain.ErrExists) {
			return domain.Task{}, fmt.Errorf("post to %s/%s: %w", q.Host, q.Name, err)
		}
	}
	if err := s.syncer.Sync(ctx); err != nil {
		return domain.Task{}, fmt.Errorf("post %s: %w", t.ID, err)
	}
	return t, nil
}

// Status returns the producer's view of a task. The first read of a terminal
// task stamps fetchedAt (which starts retention under retainFrom "fetched")
// and logs a fetched event.
func (s *Service) Status(ctx context.Context, q *domain.Queue, id string) (domain.View, error) {
	t, err := s.get(ctx, q, id)
	if err != nil || !t.Status.Terminal() || t.FetchedAt != nil {
		return t.View(), err
	}
	return s.fetch(ctx, q, id)
}

func (s *Service) fetch(ctx context.Context, q *domain.Queue, id string) (domain.View, error) {
	t, err := s.transition(ctx, q, id, func(t domain.Task, now time.Time) (domain.Task, domain.Event, error) {
		t, ev, fetched := t.Fetch(now)
		if !fetched {
			return t, ev, errAlreadyFetched
		}
		return t, ev, nil
	})
	switch {
	case errors.Is(err, errAlreadyFetched):
		return t.View(), nil // a concurrent read got there first
	case err != nil:
		return domain.View{}, fmt.Errorf("status %s: %w", id, err)
	}
	return t.View(), nil
}

var errAlreadyFetched = errors.New("already fetched")

// Outcome is the answer to a progress report or a result: accepted, or not
// and why (the task's status now).
type Outcome struct {
	Accepted bool
	Status   domain.Status
	Lease    *domain.Lease
}

// Progress stores a progress record from the worker holding the lease and
// extends its lease. Anyone else is told accepted false.
func (s *Service) Progress(ctx context.Context, q *domain.Queue, id, worker string, progress []byte) (Outcome, error) {
	progress, err := payload(q, q.Progress, progress, domain.CodeInvalidProgress)
	if err != nil {
		return Outcome{}, err
	}
	t, err := s.transition(ctx, q, id, func(t domain.Task, now time.Time) (domain.Task, domain.Event, error) {
		return t.ReportProgress(worker, progress, q.Settings.Lease(), now)
	})
	if isStateConflict(err) {
		return Outcome{Status: t.Status}, nil
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("progress %s: %w", id, err)
	}
	return Outcome{Accepted: true, Status: t.Status, Lease: t.Lease}, nil
}

// Result finishes a task that is not yet terminal, whoever holds its lease:
// the first result wins. It returns once the result is durable.
func (s *Service) Result(ctx context.Context, q *domain.Queue, id, worker string, result []byte) (Outcome, error) {
	result, err := payload(q, q.Result, result, domain.CodeInvalidResult)
	if err != nil {
		return Outcome{}, err
	}
	t, err := s.transition(ctx, q, id, func(t domain.Task, now time.Time) (domain.Task, domain.Event, error) {
		return t.Finish(worker, result, now)
	})
	if isStateConflict(err) {
		s.observer.ResultRefused(q.Ref())
		return Outcome{Status: t.Status}, nil
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("result %s: %w", id, err)
	}
	if err := s.syncer.Sync(ctx); err != nil {
		return Outcome{}, fmt.Errorf("result %s: %w", id, err)
	}
	return Outcome{Accepted: true, Status: t.Status}, nil
}

// Requeue puts a task back to pending if it is still processing under the
// claim that handed it out (attempt number attempts). A socket that closes
// calls it for every task it still holds; a task that was since re-queued
// and claimed by someone else, or finished, is left alone.
func (s *Service) Requeue(ctx context.Context, q *domain.Queue, id string, attempts int, cause string) (bool, error) {
	_, err := s.transition(ctx, q, id, func(t domain.Task, now time.Time) (domain.Task, domain.Event, error) {
		if t.Attempts != attempts {
			return t, domain.Event{}, domain.ErrNotProcessing
		}
		return t.Requeue(cause, s.retry(q), now)
	})
	if isStateConflict(err) || errors.Is(err, domain.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("requeue %s: %w", id, err)
	}
	return true, nil
}

func (s *Service) get(ctx context.Context, q *domain.Queue, id string) (domain.Task, error) {
	if !domain.ValidID(id) {
		return domain.Task{}, domain.ErrNotFound
	}
	return s.repo.Get(ctx, key(q, id))
}

// Get returns a task's full record (for access checks and watchers).
func (s *Service) Get(ctx context.Context, q *domain.Queue, id string) (domain.Task, error) {
	return s.get(ctx, q, id)
}

// Counts reports how many tasks q holds in each state.
func (s *Service) Counts(q *domain.Queue) ports.Counts { return s.repo.Counts(q.Ref()) }

func key(q *domain.Queue, id string) domain.Key {
	return domain.Key{Host: q.Host, Queue: q.Name, ID: id}
}

// payload checks a client's JSON body (an item, a progress record or a
// result) against its size limit and schema, and returns it compacted.
func payload(q *domain.Queue, schema domain.Schema, raw []byte, code domain.Code) (json.RawMessage, error) {
	if int64(len(raw)) > q.Settings.MaxItemBytes {
		return nil, domain.E(domain.KindTooLarge, domain.CodeTooLarge, "body is over the queue's limit of %d bytes", q.Settings.MaxItemBytes)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, &domain.Error{Kind: domain.KindInvalid, Code: domain.CodeInvalidJSON, Message: "body is not valid JSON: " + err.Error()}
	}
	doc := json.RawMessage(buf.Bytes())
	if schema != nil {
		if v := schema.Validate(doc); len(v) > 0 {
			return nil, &domain.Error{Kind: domain.KindSchema, Code: code, Message: "does not match the queue's schema", Details: v}
		}
	}
	return doc, nil
}

// ReportCorrupt logs a failed event for a task file the store found
// unreadable at start-up and moved aside to corrupt/.
func (s *Service) ReportCorrupt(ctx context.Context, host, queue, id string) error {
	t := domain.Task{ID: id, Host: host, Queue: queue, Status: domain.Failed, Error: ptr(domain.CorruptError)}
	ev := domain.Event{Kind: domain.EventFailed, At: s.clock.Now(), Task: t}
	if err := s.log.Append(ctx, ev, false); err != nil {
		return fmt.Errorf("log corrupt %s: %w", id, err)
	}
	s.observer.Observe(ev)
	return nil
}

func ptr[T any](v T) *T { return &v }
