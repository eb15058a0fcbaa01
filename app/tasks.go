package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// ErrPostedBefore comes with the task a post returns when an earlier post
// with the same idempotency key made it: the caller answers 200 with it
// rather than 201. It is not a failure.
var ErrPostedBefore = errors.New("posted before with this idempotency key")

// Post validates item against the queue's item schema and stores it as a new
// pending task, delayed, prioritised and keyed as opts say. It returns once
// the task is durable. With an idempotency key that a kept task of the
// queue holds, it makes nothing and returns that task with ErrPostedBefore,
// or 409 idempotency_conflict if that task's item is another.
func (s *Service) Post(ctx context.Context, q *domain.Queue, user string, item []byte, opts PostOptions) (domain.Task, error) {
	item, err := payload(q, q.Item, item, domain.CodeInvalidItem)
	if err != nil {
		return domain.Task{}, err
	}
	// One clock reading for the delay and postedAt, so that delay=S gives
	// notBefore = postedAt + S exactly.
	now := s.clock.Now()
	posting, err := opts.resolve(now)
	if err != nil {
		return domain.Task{}, err
	}
	for {
		t, err := s.create(ctx, q, user, item, posting, "", now)
		if !errors.Is(err, domain.ErrKeyTaken) {
			if err != nil {
				return domain.Task{}, err
			}
			if err := s.syncer.Sync(ctx); err != nil {
				return domain.Task{}, fmt.Errorf("post %s: %w", t.ID, err)
			}
			return t, nil
		}
		first, err := s.repo.ByKey(ctx, q.Ref(), posting.Key)
		if errors.Is(err, domain.ErrNotFound) {
			continue // deleted since: the key is free again
		}
		if err != nil {
			return domain.Task{}, fmt.Errorf("post to %s/%s: %w", q.Host, q.Name, err)
		}
		if !sameItem(first.Item, item) {
			return domain.Task{}, domain.E(domain.KindConflict, domain.CodeIdempotencyConflict,
				"task %s was posted with this idempotency key and another item", first.ID)
		}
		// The first post may still be on its way to the disc: answer only
		// once it is there, as its own post does.
		if err := s.syncer.Sync(ctx); err != nil {
			return domain.Task{}, fmt.Errorf("post %s: %w", first.ID, err)
		}
		return first, ErrPostedBefore
	}
}

// sameItem reports whether a stored item and a post's (compacted) item are
// the same text. The store keeps a record as json.Marshal writes it, which
// escapes "<", ">", "&", U+2028 and U+2029 in an item's strings (a URL's
// query string has an "&"), so the post's item is compared escaped the same
// way: otherwise a replay of such a post would be refused as another item.
func sameItem(stored, posted json.RawMessage) bool {
	var a, b bytes.Buffer
	json.HTMLEscape(&a, stored)
	json.HTMLEscape(&b, posted)
	return bytes.Equal(a.Bytes(), b.Bytes())
}

// PostBatch posts every item of items, or none: each is checked against the
// queue's schema first (422 naming the index of each bad item), and the
// store takes all or none (CreateAll). The tasks are made durable by one
// flush and returned in order. A batch takes no idempotency key.
func (s *Service) PostBatch(ctx context.Context, q *domain.Queue, user string, items [][]byte, opts PostOptions) ([]domain.Task, error) {
	if len(items) < 1 || len(items) > MaxBatch {
		return nil, invalidRequest("a batch has 1 to %d items", MaxBatch)
	}
	if opts.Key != "" {
		return nil, invalidRequest("a batch takes no Idempotency-Key")
	}
	now := s.clock.Now()
	posting, err := opts.resolve(now)
	if err != nil {
		return nil, err
	}
	docs := make([]json.RawMessage, len(items))
	var bad []domain.Violation
	for i, raw := range items {
		doc, err := payload(q, q.Item, raw, domain.CodeInvalidItem)
		var e *domain.Error
		switch {
		case errors.As(err, &e) && e.Kind == domain.KindSchema:
			for _, v := range e.Details {
				bad = append(bad, domain.Violation{Path: fmt.Sprintf("/items/%d%s", i, v.Path), Message: v.Message})
			}
		case errors.As(err, &e):
			return nil, domain.E(e.Kind, e.Code, "item %d: %s", i, e.Message)
		case err != nil:
			return nil, err
		}
		docs[i] = doc
	}
	if len(bad) > 0 {
		return nil, &domain.Error{Kind: domain.KindSchema, Code: domain.CodeInvalidItem, Message: "items do not match the queue's schema; none was posted", Details: bad}
	}
	// All or nothing in the store too (CreateAll): a batch the store
	// refuses leaves no task of it, none claimed meanwhile, and a batch it
	// takes becomes claimable whole.
	for {
		tasks, evs, err := s.batchOf(q, user, docs, posting, now)
		if err != nil {
			return nil, err
		}
		stored, logged := false, make(map[string]bool, len(tasks))
		sctx, record := s.stagingBatch(ctx, q, evs)
		err = s.repo.CreateAll(sctx, tasks, func(t domain.Task) error {
			stored = true // Thens are called once all are stored
			if err := record(t); err != nil {
				return err
			}
			logged[t.ID] = true
			return nil
		})
		switch {
		case err == nil:
			if err := s.syncer.Sync(ctx); err != nil {
				return nil, fmt.Errorf("post a batch to %s/%s: %w", q.Host, q.Name, err)
			}
			return tasks, nil
		case stored:
			// Stored, but a line failed: unlogged, the batch is not
			// acknowledged; take it back so the client's retry leaves no
			// twins (the tasks logged, with a cleaned line each).
			var said, unsaid []domain.Task
			for _, t := range tasks {
				if logged[t.ID] {
					said = append(said, t)
				} else {
					unsaid = append(unsaid, t)
				}
			}
			s.takeBack(ctx, q, said, unsaid)
			return nil, err
		case !errors.Is(err, domain.ErrExists):
			// The store may have written some items before one failed,
			// and removed them again; another caller's flush may have made
			// those writes durable meanwhile. The removals are flushed
			// before the answer, as takeBack's, or a power loss could bring
			// part of the batch back beside the client's retry.
			_ = s.syncer.Sync(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("post a batch to %s/%s: %w", q.Host, q.Name, err)
		}
		// An id taken (2^64 ids make it all but impossible): draw them all again.
	}
}

// batchOf makes the tasks of a batch post of docs and their posted events.
// The items of a batch share a postedAt, and claims take tasks of one time
// by id: ids drawn at random and handed out in ascending order keep the
// batch's order for its claims.
func (s *Service) batchOf(q *domain.Queue, user string, docs []json.RawMessage, posting domain.PostOptions, now time.Time) ([]domain.Task, []domain.Event, error) {
	ids := make([]string, len(docs))
	for i := range ids {
		var err error
		if ids[i], err = newID(); err != nil {
			return nil, nil, err
		}
	}
	slices.Sort(ids)
	tasks, evs := make([]domain.Task, len(docs)), make([]domain.Event, len(docs))
	for i, doc := range docs {
		tasks[i], evs[i] = domain.Post(ids[i], q.Host, q.Name, doc, user, now, posting)
	}
	return tasks, evs, nil
}

// MaxBatch is the most items one batch post takes (SPEC §12).
const MaxBatch = 1000

// create stores one new task of item (already checked) and logs its post.
// It does not flush. id is the task's id, or "" to draw one.
func (s *Service) create(ctx context.Context, q *domain.Queue, user string, item json.RawMessage, posting domain.PostOptions, id string, now time.Time) (domain.Task, error) {
	var t domain.Task
	var ev domain.Event
	stored := false
	sctx, record := s.staging(ctx, q, &ev)
	for {
		if id == "" {
			var err error
			if id, err = newID(); err != nil {
				return domain.Task{}, err
			}
		}
		t, ev = domain.Post(id, q.Host, q.Name, item, user, now, posting)
		err := s.repo.Create(sctx, t, func(t domain.Task) error {
			stored = true
			return record(t)
		})
		switch {
		case err == nil:
			return t, nil
		case stored:
			// Unlogged, the post is not acknowledged; take the task back so
			// the client's retry does not leave a twin behind.
			s.takeBack(ctx, q, nil, []domain.Task{t})
			return domain.Task{}, err
		case errors.Is(err, domain.ErrKeyTaken):
			return domain.Task{}, err
		case !errors.Is(err, domain.ErrExists):
			return domain.Task{}, fmt.Errorf("post to %s/%s: %w", q.Host, q.Name, err)
		}
		// 2^64 ids make a collision all but impossible; if one happens, draw again.
		id = ""
	}
}

// takeBack deletes tasks stored for a post that is answered with an error,
// and flushes the deletions before the answer: another caller's commit may
// have made a task's write durable already, and a power loss after the
// answer must not bring it back beside the client's retry. It runs to its
// end even if the client has gone (its retry may come), and does its best:
// a failing store fails the answer anyway.
//
// A task whose posted line is written (logged: the items of a batch whose
// later item's line failed) is deleted with a cleaned line, as retention
// would, so the log never tells of a task that vanished unsaid; a worker
// may even have claimed it meanwhile, and its report then finds no task.
// The others (unlogged) are deleted without a line.
func (s *Service) takeBack(ctx context.Context, q *domain.Queue, logged, unlogged []domain.Task) {
	if len(logged)+len(unlogged) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	now := s.clock.Now()
	for _, t := range logged {
		var ev domain.Event
		sctx, then := s.staging(ctx, q, &ev)
		_ = s.repo.Delete(sctx, domain.KeyOf(t), func(stored domain.Task) error {
			ev = stored.Clean(now)
			return nil
		}, then)
	}
	for _, t := range unlogged {
		_ = s.repo.Delete(ctx, domain.KeyOf(t), nil, nil)
	}
	_ = s.syncer.Sync(ctx)
}

// Status returns the producer's view of a task, once what it shows is
// durable (shown). The first read of a terminal task stamps fetchedAt (which
// starts retention under retainFrom "fetched") and logs a fetched event.
func (s *Service) Status(ctx context.Context, q *domain.Queue, id string) (domain.View, error) {
	t, err := s.get(ctx, q, id)
	if err != nil {
		return domain.View{}, err
	}
	view := t.View()
	if t.Status.Terminal() && t.FetchedAt == nil {
		if view, err = s.fetch(ctx, q, id); err != nil {
			return domain.View{}, err
		}
	}
	return view, s.shown(ctx)
}

// shown returns once every change a reader may just have read is durable:
// a file store's record is readable as soon as it is written, before the
// commit that its writer waits for, and a client shown a result that a
// power loss then takes away would see the task finish twice. The flush is
// the writer's own (the group commit serves both); with nothing waiting for
// one it costs nothing (durable.Syncer.Sync).
func (s *Service) shown(ctx context.Context) error {
	if err := s.syncer.Sync(ctx); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	return nil
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

// refusal answers a report the task's state refused with the status the
// task is in now, once that status is durable. It is a read like any other
// (Service.shown): a worker told "finished" drops its own result, and the
// winner's result may still be waiting for its flush.
func (s *Service) refusal(ctx context.Context, what, id string, t domain.Task) (Outcome, error) {
	if err := s.syncer.Sync(ctx); err != nil {
		return Outcome{}, fmt.Errorf("%s %s: %w", what, id, err)
	}
	return Outcome{Status: t.Status}, nil
}

// Progress stores a progress record from the worker holding the lease (in
// the attempt it names, if any) and extends its lease. Anyone else is told accepted false.
func (s *Service) Progress(ctx context.Context, q *domain.Queue, id string, h domain.Holder, progress []byte) (Outcome, error) {
	progress, err := payload(q, q.Progress, progress, domain.CodeInvalidProgress)
	if err != nil {
		return Outcome{}, err
	}
	t, err := s.transition(ctx, q, id, func(t domain.Task, now time.Time) (domain.Task, domain.Event, error) {
		if err := t.HeldBy(h); err != nil {
			return t, domain.Event{}, err
		}
		return t.ReportProgress(h.Worker, progress, q.Settings.Lease(), now)
	})
	if isStateConflict(err) {
		return s.refusal(ctx, "progress", id, t)
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
		return s.refusal(ctx, "result", id, t)
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
// claim that handed it out (by: its worker, attempt number and notBefore),
// for a client that has gone (RequeueAll). A task that was since re-queued
// and claimed by someone else, or finished, or failed and retried and
// claimed again under the same attempt number, is left alone.
func (s *Service) Requeue(ctx context.Context, q *domain.Queue, id string, by domain.Holder, cause string) (bool, error) {
	_, err := s.transition(ctx, q, id, func(t domain.Task, now time.Time) (domain.Task, domain.Event, error) {
		if by.Attempt == 0 || t.HeldBy(by) != nil {
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

// Held is a task held under one claim: its id and the claim
// (domain.HolderOf the task as claimed).
type Held struct {
	ID string
	By domain.Holder
}

// RequeueAll re-queues each task of held (Requeue), side by side, and
// reports how many went back to pending: a socket that closes calls it for
// every task it still holds. A task that cannot be moved back stays
// processing until its lease lapses; the error says how many did not.
func (s *Service) RequeueAll(ctx context.Context, q *domain.Queue, held []Held, cause string) (int, error) {
	var requeued atomic.Int64
	err := s.sideBySide(len(held), func(i int) error {
		ok, err := s.Requeue(ctx, q, held[i].ID, held[i].By, cause)
		if ok {
			requeued.Add(1)
		}
		return err
	})
	return int(requeued.Load()), err
}

// sideBySide runs fn(i) for each i below n, up to Deps.MovesBackAtOnce at
// once, and returns the first error (for n > 1, with how many failed). Many
// moves back at once (a socket that held hundreds of tasks closing, a
// sweep finding as many leases lapsed) go side by side: under --sync
// always the file store commits each before it returns, and one after
// another they would wait for a commit each, where side by side they share
// a few. One failing does not stop the others: a passing error should not
// leave tasks held until their leases lapse. On a stopped journal each
// then writes its destination only to fail its commit, which the start-up
// scan undoes.
func (s *Service) sideBySide(n int, fn func(i int) error) error {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		first  error
		failed int
	)
	slots := make(chan struct{}, s.movesBackAtOnce)
	for i := range n {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := fn(i); err != nil {
				mu.Lock()
				if failed++; first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil && n > 1 {
		return fmt.Errorf("%d of %d failed, the first: %w", failed, n, first)
	}
	return first
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

// Record returns a task's full record for a person to look at (the
// dashboard's task page), once what it shows is durable (shown), as a
// status read does; unlike Status it never stamps fetchedAt.
func (s *Service) Record(ctx context.Context, q *domain.Queue, id string) (domain.Task, error) {
	t, err := s.get(ctx, q, id)
	if err != nil {
		return domain.Task{}, err
	}
	return t, s.shown(ctx)
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
	if n := domain.OversizedNumber(doc); n != "" {
		return nil, &domain.Error{Kind: domain.KindSchema, Code: code, Message: "holds a number too large to judge", Details: []domain.Violation{{
			Message: fmt.Sprintf("number %s has more than %d digits or an exponent beyond %d", n, domain.MaxNumberDigits, domain.MaxNumberExponent)}}}
	}
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
