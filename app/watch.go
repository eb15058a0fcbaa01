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
// none missed and none twice (a claim's watch skips a retry: see Next).
type Watch struct {
	// Task is the record when the watch began.
	Task    domain.Task
	sub     ports.Subscription
	backlog []domain.Event // changes already taken from sub, not yet read
	// claim, for a claim's watch (ClaimWatched), is the claim's attempt:
	// news of a record with fewer attempts is older than the claim, and
	// Next skips it. 0 for any other watch.
	claim int
	// shown, for a producer's watch, is Service.shown: Next returns a
	// change once it is durable. A worker's watch of its claim does without
	// (nil): what it is told (a cancel) only stops its work, and should a
	// power loss take that change away, the task is back under a claim
	// nobody works on, claimed again once its lease lapses.
	shown func(context.Context) error
}

// Watch reads task id of q and subscribes to its changes, buffering up to
// buffer of them. Close the watch when done. The record it returns, and
// each change Next does, are durable (Service.shown).
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
	w, err := s.follow(ctx, key(q, id), s.notifier.Subscribe(key(q, id), buffer))
	if err != nil {
		return nil, err
	}
	if err := s.shown(ctx); err != nil {
		w.Close()
		return nil, err
	}
	w.shown = s.shown
	return w, nil
}

// WatchClaim is Watch for the holder of claim attempts of task id, which
// watches it again after a watch of its claim was lost: like the claim's
// own watch (ClaimWatched), it skips news older than the claim (see Next).
func (s *Service) WatchClaim(ctx context.Context, q *domain.Queue, id string, attempts, buffer int) (*Watch, error) {
	w, err := s.Watch(ctx, q, id, buffer)
	if err != nil {
		return nil, err
	}
	w.claim, w.shown = attempts, nil
	return w, nil
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
//
// A claim's watch skips news older than its claim, which another server
// can bring after it: a task posted on one server and claimed on another
// at once is claimed from the database before the post's notification has
// reached the claiming server, which subscribes in the claim's Then, so
// the post's news comes after the claimed record, as if the task were
// pending again (a worker socket took that for the end of its claim and
// stopped watching: the task's cancel never reached the worker). Every
// record before a claim has fewer attempts than the claim, as each claim
// adds one, and every change after it keeps the claim's attempt or adds to
// it. Only a retry, which starts again at 0, has fewer, and it follows a
// failure, where the claim's worker stops watching: a claim's watch skips it.
func (w *Watch) Next(ctx context.Context) (domain.Event, error) {
	for {
		ev, err := w.next(ctx)
		if err != nil {
			return ev, err
		}
		if ev.Task.Attempts < w.claim {
			continue
		}
		if w.shown != nil {
			if err := w.shown(ctx); err != nil {
				return domain.Event{}, err
			}
		}
		return ev, nil
	}
}

// next is Next without skipping what is older than a claim.
func (w *Watch) next(ctx context.Context) (domain.Event, error) {
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
