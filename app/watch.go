package app

import (
	"bytes"
	"context"
	"errors"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// ErrWatchLost ends a watch whose watcher fell so far behind that changes
// were dropped: it must watch again for a fresh view rather than be shown
// a gap.
var ErrWatchLost = errors.New("watcher fell behind")

// A Watch is one task's record and every change of it after that record,
// none missed and none twice.
type Watch struct {
	// Task is the record when the watch began.
	Task    domain.Task
	sub     ports.Subscription
	backlog []domain.Event // changes already taken from sub, not yet read
}

// Watch reads task id of q and subscribes to its changes, buffering up to
// buffer of them. Close the watch when done.
//
// It subscribes first and reads second, so no change can fall between the
// two. A change stored in between is then both in the record read and in
// the subscription; the store announces a change before a read can see it
// (ports.TaskRepository), so those changes are exactly the events already
// delivered up to the last one whose record is the one read. Watch drops
// them.
func (s *Service) Watch(ctx context.Context, q *domain.Queue, id string, buffer int) (*Watch, error) {
	if !domain.ValidID(id) {
		return nil, domain.ErrNotFound
	}
	return s.follow(ctx, key(q, id), s.notifier.Subscribe(key(q, id), buffer))
}

// follow reads task k, whose changes sub delivers, and drops the changes
// sub delivered that the record read already holds (see Watch).
func (s *Service) follow(ctx context.Context, k domain.Key, sub ports.Subscription) (*Watch, error) {
	t, err := s.repo.Get(ctx, k)
	if err != nil {
		sub.Close()
		return nil, err
	}
	w := &Watch{Task: t, sub: sub}
	for {
		select {
		case ev, ok := <-sub.C():
			if ok {
				w.backlog = append(w.backlog, ev)
				continue
			}
		default:
		}
		break
	}
	read := domain.EncodeTask(t)
	for i := len(w.backlog) - 1; i >= 0; i-- {
		if bytes.Equal(domain.EncodeTask(w.backlog[i].Task), read) {
			w.backlog = w.backlog[i+1:]
			break
		}
	}
	return w, nil
}

// Next returns the next change of the task, waiting for it until ctx ends
// (ctx's error). ErrWatchLost says changes were dropped.
func (w *Watch) Next(ctx context.Context) (domain.Event, error) {
	if len(w.backlog) > 0 {
		ev := w.backlog[0]
		w.backlog = w.backlog[1:]
		return ev, nil
	}
	select {
	case <-ctx.Done():
		return domain.Event{}, ctx.Err()
	case ev, ok := <-w.sub.C():
		if !ok {
			return domain.Event{}, ErrWatchLost
		}
		return ev, nil
	}
}

// Close ends the subscription.
func (w *Watch) Close() { w.sub.Close() }
