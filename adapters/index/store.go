// Package index is the in-memory task index, kept per queue: every record
// by id (in a compact form, entry.go), each state directory in claim order,
// and for each recent claim query the pending tasks it accepts (views.go).
//
// On its own a Store is a ports.TaskRepository that forgets everything at
// exit: the reference for tests/contract and a fast repository for tests of
// app and the API adapters. Given a Persister it is the index of a durable
// store (fsstore): the index decides every change under its queue's lock, and
// the Persister makes the change durable before the index shows it. Both kinds
// are this one implementation, so they cannot drift apart.
package index

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

var _ ports.TaskRepository = (*Store)(nil)

// Persister makes changes to the index outlast the process. The store calls
// it once a change has been vetted and before the index shows it, outside
// the queue's lock, so that the writes of many tasks proceed side by side;
// if it fails, the index stays as it was and the store returns its error
// unchanged. Calls for one task never overlap: while a task's change is
// being written the task is busy, and its next change is decided only once
// the last one is stored (or refused).
type Persister interface {
	// Put stores t, whose stored form is data (domain.EncodeTask(t), already
	// checked to read back as t). old is the record t replaces, nil for a new
	// task; its status may name another state directory than t's.
	Put(old *domain.Task, t domain.Task, data []byte) error
	// Remove forgets t for good.
	Remove(t domain.Task) error
}

// memoryOnly is the Persister of a Store that keeps nothing beyond the index.
type memoryOnly struct{}

func (memoryOnly) Put(*domain.Task, domain.Task, []byte) error { return nil }
func (memoryOnly) Remove(domain.Task) error                    { return nil }

// Store keeps every task in a per-queue index. Each queue has its own lock,
// so work on one queue never waits for another; it is held to decide and to
// index a change, never while the Persister writes it.
type Store struct {
	persist Persister

	mu     sync.RWMutex // guards queues, not what is in them
	queues map[domain.QueueRef]*queue

	pauses pauses // (list.go)
}

// Option configures New.
type Option func(*Store)

// WithPersister makes every change durable through p before the index shows
// it (default: changes live in memory only).
func WithPersister(p Persister) Option {
	return func(s *Store) { s.persist = p }
}

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{persist: memoryOnly{}, queues: make(map[domain.QueueRef]*queue)}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Load puts t into the index as it is, without persisting it, and returns
// the status of the record with t's key that it replaced ("" if none). It is
// for the owner of a Persister filling the index, before first use, with
// what was stored earlier, so t must be a record as domain.DecodeTask
// returns them: Load fails only for one without a valid id or status. The
// index keeps t's item, progress and result, which nobody may change
// afterwards. Loads may run concurrently.
func (s *Store) Load(t domain.Task) (replaced domain.Status, err error) {
	e, err := newEntry(t)
	if err != nil {
		return "", err
	}
	q := s.lookup(domain.KeyOf(t).Ref(), true)
	q.mu.Lock()
	defer q.mu.Unlock()
	old := q.byID[e.id]
	q.put(old, e)
	if k := e.key(); k != "" {
		// Two tasks holding one key (which no run of this store leaves
		// behind) keep the key with the first one loaded.
		if _, held := q.keys[k]; !held {
			q.keys[k] = e.id
		}
	}
	if old == nil {
		return "", nil
	}
	return old.state.status(), nil
}

// lookup returns the queue of ref, creating its index entry when create is
// set.
func (s *Store) lookup(ref domain.QueueRef, create bool) *queue {
	s.mu.RLock()
	q := s.queues[ref]
	s.mu.RUnlock()
	if q != nil || !create {
		return q
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if q = s.queues[ref]; q == nil {
		q = newQueue(ref)
		s.queues[ref] = q
	}
	return q
}

// Create stores a new task. The host, queue and id must be valid names (a
// durable store makes paths of them); the id must be free in its queue, or
// Create fails with domain.ErrExists; its idempotency key, if any, must be
// free in its queue, or Create fails with domain.ErrKeyTaken. The key is
// taken under the queue's lock before the task is written, so of two
// Creates with one key exactly one is stored. then, if not nil, is called
// as ports.TaskRepository describes.
func (s *Store) Create(ctx context.Context, t domain.Task, then ports.Then) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("create task %s: %w", t.ID, err)
	}
	stored, data, err := checkNew(t)
	if err != nil {
		return err
	}
	e, err := newEntry(stored)
	if err != nil {
		return domain.E(domain.KindInvalid, domain.CodeInvalidTask, "%v", err)
	}
	q := s.lookup(domain.KeyOf(t).Ref(), true)
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, taken := q.byID[e.id]; taken || q.busy[e.id] != nil {
		return fmt.Errorf("create task %s: %w", t.ID, domain.ErrExists)
	}
	k := e.key()
	if k != "" {
		if _, taken := q.keys[k]; taken {
			return fmt.Errorf("create task %s: %w", t.ID, domain.ErrKeyTaken)
		}
		q.keys[k] = e.id
	}
	done := q.reserve(e.id)
	defer q.release(e.id, done)
	if err := q.unlocked(func() error { return s.persist.Put(nil, stored, data) }); err != nil {
		q.freeKey(k, e.id)
		return err
	}
	q.put(nil, e)
	return then.Call(stored)
}

// CreateAll stores ts, all of one queue, all or none. Every id and key is
// checked and taken under the queue's lock, as Create does, so a taken one
// refuses the batch before anything is written; the tasks are then written
// outside the lock and indexed together, so no Get, Each or claim sees one
// before all are written, and their Thens run in order under the lock, as
// Create's does. What is left to fail is the Persister: the files written
// before a failed write are removed again. That undo is a loop, not a
// transaction: it can fail only with the disc (an unlink, where a write
// failed), and a file store whose disc fails in both is failing as a
// whole, its journal and the event log with it (fail-stop: 503 until a
// restart, whose scan decides what the disc holds).
func (s *Store) CreateAll(ctx context.Context, ts []domain.Task, then ports.Then) error {
	if len(ts) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("create %d tasks: %w", len(ts), err)
	}
	ref := domain.KeyOf(ts[0]).Ref()
	stored, data, err := domain.VetBatch(ts)
	if err != nil {
		return err
	}
	entries := make([]*entry, len(ts))
	for i := range stored {
		if entries[i], err = newEntry(stored[i]); err != nil {
			return domain.E(domain.KindInvalid, domain.CodeInvalidTask, "%v", err)
		}
	}
	q := s.lookup(ref, true)
	q.mu.Lock()
	defer q.mu.Unlock()
	ids := make(map[uint64]bool, len(entries))
	keys := make(map[string]bool)
	for i, e := range entries {
		if _, taken := q.byID[e.id]; taken || q.busy[e.id] != nil || ids[e.id] {
			return fmt.Errorf("create task %s: %w", ts[i].ID, domain.ErrExists)
		}
		ids[e.id] = true
		if k := e.key(); k != "" {
			if _, taken := q.keys[k]; taken || keys[k] {
				return fmt.Errorf("create task %s: %w", ts[i].ID, domain.ErrKeyTaken)
			}
			keys[k] = true
		}
	}
	for _, e := range entries {
		if k := e.key(); k != "" {
			q.keys[k] = e.id
		}
		done := q.reserve(e.id)
		defer q.release(e.id, done)
	}
	if err := q.unlocked(func() error { return s.putAll(stored, data) }); err != nil {
		for _, e := range entries {
			q.freeKey(e.key(), e.id)
		}
		return err
	}
	for _, e := range entries {
		q.put(nil, e)
	}
	var first error
	for _, t := range stored {
		if err := then.Call(t); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// putAll writes the new tasks ts (stored as data), or, if one fails,
// removes those written before it (see CreateAll).
func (s *Store) putAll(ts []domain.Task, data [][]byte) error {
	for i, t := range ts {
		if err := s.persist.Put(nil, t, data[i]); err != nil {
			for _, w := range ts[:i] {
				_ = s.persist.Remove(w)
			}
			return err
		}
	}
	return nil
}

// Get returns a copy of the task's current record, from the index.
func (s *Store) Get(ctx context.Context, k domain.Key) (domain.Task, error) {
	q := s.lookup(k.Ref(), false)
	if q == nil {
		return domain.Task{}, domain.ErrNotFound
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	e, ok := q.get(k.ID)
	if !ok {
		return domain.Task{}, domain.ErrNotFound
	}
	return q.task(e), nil
}

// Update applies fn to a copy of the task and stores the result. When fn
// fails it returns the unchanged record with fn's error.
func (s *Store) Update(ctx context.Context, k domain.Key, fn func(*domain.Task) error, then ports.Then) (domain.Task, error) {
	if err := ctx.Err(); err != nil {
		return domain.Task{}, fmt.Errorf("update task %s: %w", k.ID, err)
	}
	q := s.lookup(k.Ref(), false)
	if q == nil {
		return domain.Task{}, domain.ErrNotFound
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	cur, ok := q.idle(k.ID)
	if !ok {
		return domain.Task{}, domain.ErrNotFound
	}
	return s.apply(q, cur, fn, then)
}

// ClaimNext applies fn to the first pending task of ref in claim order,
// claimable at now, that m accepts. The queue's mutex is what makes exactly
// one caller win each task: a task being claimed is out of the pending set
// until its claim is stored. A query new to the queue tests the backlog a
// slice at a time, letting go of the lock between slices (firstMatch), so
// that the queue's other calls go on meanwhile.
func (s *Store) ClaimNext(ctx context.Context, ref domain.QueueRef, m ports.Matcher, now time.Time, fn func(*domain.Task) error, then ports.Then) (domain.Task, error) {
	if err := ctx.Err(); err != nil {
		return domain.Task{}, fmt.Errorf("claim in %s/%s: %w", ref.Host, ref.Queue, err)
	}
	q := s.lookup(ref, false)
	if q == nil {
		return domain.Task{}, domain.ErrNotFound
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		q.look(now)
		cur, sc := q.firstMatch(m, domain.Millis(now))
		switch sc {
		case scanFound:
			return s.apply(q, cur, fn, then)
		case scanNone:
			return domain.Task{}, domain.ErrNotFound
		}
		q.mu.Unlock()
		runtime.Gosched() // let the callers waiting for the lock have it
		q.mu.Lock()
		if err := ctx.Err(); err != nil {
			return domain.Task{}, fmt.Errorf("claim in %s/%s: %w", ref.Host, ref.Queue, err)
		}
	}
}

// apply is the read-modify-write of Update and ClaimNext; q.mu is held and
// cur has no change in flight. Only fn runs under the lock: the change is
// checked, encoded and persisted without it, and indexed once it is stored,
// so a failed write leaves the index and the files as they were.
func (s *Store) apply(q *queue, cur *entry, fn func(*domain.Task) error, then ports.Then) (domain.Task, error) {
	old, next := q.task(cur), q.task(cur) // fn may scribble on next's pointers
	if err := fn(&next); err != nil {
		return old, err
	}
	done := q.reserve(cur.id)
	defer q.release(cur.id, done)
	// No claim may take a pending task while it changes: it leaves the
	// pending set until the change is stored, and comes back if it fails.
	q.hide(cur)
	var stored domain.Task
	var e *entry
	err := q.unlocked(func() error {
		var data []byte
		var err error
		if stored, data, err = checkUpdate(old, next); err != nil {
			return err
		}
		if e, err = newEntry(stored); err != nil {
			return domain.E(domain.KindInternal, domain.CodeInvalidTask, "%v", err)
		}
		return s.persist.Put(&old, stored, data)
	})
	if err != nil {
		q.unhide(cur)
		return domain.Task{}, err
	}
	if bytes.Equal(e.item, cur.item) {
		e.item = cur.item // the same item, decoded afresh: keep one copy
	}
	q.put(cur, e)
	// stored shares no pointer with e, only the item, progress and result
	// slices, which are never changed in place.
	return stored, then.Call(stored)
}

// Delete removes a task for good, if check (when not nil) approves of its
// current record; otherwise it returns check's error and changes nothing.
func (s *Store) Delete(ctx context.Context, k domain.Key, check func(domain.Task) error, then ports.Then) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete task %s: %w", k.ID, err)
	}
	q := s.lookup(k.Ref(), false)
	if q == nil {
		return domain.ErrNotFound
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	e, ok := q.idle(k.ID)
	if !ok {
		return domain.ErrNotFound
	}
	t := q.task(e)
	if check != nil {
		if err := check(t); err != nil {
			return err
		}
	}
	done := q.reserve(e.id)
	defer q.release(e.id, done)
	q.hide(e)
	if err := q.unlocked(func() error { return s.persist.Remove(t) }); err != nil {
		q.unhide(e)
		return err
	}
	q.remove(e)
	return then.Call(t)
}

// Each calls fn with a copy of each task in stage st, ordered by
// (EligibleAt, id) for pending and (postedAt, id) for the others, until fn
// returns false. The queue is locked meanwhile.
func (s *Store) Each(ctx context.Context, ref domain.QueueRef, st domain.Stage, fn func(domain.Task) bool) error {
	if !st.Valid() {
		return domain.E(domain.KindInvalid, domain.CodeInvalidStage, "no stage %d", st)
	}
	q := s.lookup(ref, false)
	if q == nil {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var err error
	visit := func(e *entry) bool {
		if err = ctx.Err(); err != nil {
			return false
		}
		return fn(q.task(e))
	}
	if st == domain.StagePending {
		q.pending.each(visit)
	} else {
		q.dirs[st].Ascend(visit)
	}
	if err != nil {
		return fmt.Errorf("each in %s/%s: %w", ref.Host, ref.Queue, err)
	}
	return nil
}

// Due makes the delayed tasks of ref whose notBefore has come by now
// claimable, and reports how many tasks with a notBefore became claimable
// since the last call (here or in a claim, which looks too) and the
// notBefore of the next delayed task (zero: none).
func (s *Store) Due(ctx context.Context, ref domain.QueueRef, now time.Time) (int, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return 0, time.Time{}, fmt.Errorf("due in %s/%s: %w", ref.Host, ref.Queue, err)
	}
	q := s.lookup(ref, false)
	if q == nil {
		return 0, time.Time{}, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if ms, seen := domain.Millis(now), q.pending.seen; ms < seen && seen-ms > ports.ClockStepBack.Milliseconds() {
		q.rewind(ms)
	}
	q.look(now)
	n := q.pending.promoted
	q.pending.promoted = 0
	var next time.Time
	if ms, ok := q.pending.nextDue(); ok {
		next = time.UnixMilli(ms)
	}
	return n, next, nil
}

// Counts reports how many tasks ref holds in each state directory.
func (s *Store) Counts(ref domain.QueueRef) ports.Counts {
	q := s.lookup(ref, false)
	if q == nil {
		return ports.Counts{}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.counts()
}

// checkNew and checkUpdate are domain.VetNew and VetChange: the index
// keeps what a restart would load, with or without a Persister.
func checkNew(t domain.Task) (domain.Task, []byte, error) { return domain.VetNew(t) }

func checkUpdate(cur, next domain.Task) (domain.Task, []byte, error) {
	return domain.VetChange(cur, next)
}

// ByKey returns the current record of the task of ref holding idempotency
// key k. A task whose Create is being written holds its key already: ByKey
// waits for the write, and finds the task once it is stored (and its Then
// has run), or no task if the write failed.
func (s *Store) ByKey(ctx context.Context, ref domain.QueueRef, k string) (domain.Task, error) {
	if err := ctx.Err(); err != nil {
		return domain.Task{}, fmt.Errorf("task by key: %w", err)
	}
	q := s.lookup(ref, false)
	if q == nil {
		return domain.Task{}, domain.ErrNotFound
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		id, ok := q.keys[k]
		if !ok {
			return domain.Task{}, domain.ErrNotFound
		}
		if q.busy[id] == nil {
			e, ok := q.byID[id]
			if !ok {
				return domain.Task{}, domain.ErrNotFound
			}
			return q.task(e), nil
		}
		q.settle(id) // then look again: the key may have changed hands
	}
}
