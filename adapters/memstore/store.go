// Package memstore is a ports.TaskRepository held entirely in memory: the
// reference the file store is measured against (both pass tests/contract),
// and a fast repository for tests of app and the API adapters.
package memstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/google/btree"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

var _ ports.TaskRepository = (*Store)(nil)

// Store keeps every task in a per-queue index. Each queue has its own lock,
// so work on one queue never waits for another.
type Store struct {
	mu     sync.RWMutex // guards queues, not what is in them
	queues map[ports.QueueRef]*queue
}

// New returns an empty store.
func New() *Store {
	return &Store{queues: make(map[ports.QueueRef]*queue)}
}

// queue indexes one queue's tasks: every record by id, and each state
// directory as a tree ordered by (postedAt, id), which is claim order.
type queue struct {
	mu    sync.Mutex
	tasks map[string]domain.Task
	dirs  map[string]*btree.BTreeG[order]
}

// order is a task's place in its state directory's tree.
type order struct {
	postedAt int64
	id       string
}

func orderOf(t domain.Task) order { return order{postedAt: t.PostedAt, id: t.ID} }

func lessOrder(a, b order) bool {
	if a.postedAt != b.postedAt {
		return a.postedAt < b.postedAt
	}
	return a.id < b.id
}

func newQueue() *queue {
	q := &queue{tasks: make(map[string]domain.Task), dirs: make(map[string]*btree.BTreeG[order])}
	for _, d := range domain.Dirs {
		q.dirs[d] = btree.NewG(32, lessOrder)
	}
	return q
}

// put records t in the index, replacing old (if it existed) wherever it was.
func (q *queue) put(old *domain.Task, t domain.Task) {
	if old != nil {
		q.dirs[old.Status.Dir()].Delete(orderOf(*old))
	}
	q.tasks[t.ID] = t
	q.dirs[t.Status.Dir()].ReplaceOrInsert(orderOf(t))
}

func (q *queue) remove(t domain.Task) {
	delete(q.tasks, t.ID)
	q.dirs[t.Status.Dir()].Delete(orderOf(t))
}

// lookup returns the queue of ref, creating it when create is set.
func (s *Store) lookup(ref ports.QueueRef, create bool) *queue {
	s.mu.RLock()
	q := s.queues[ref]
	s.mu.RUnlock()
	if q != nil || !create {
		return q
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if q = s.queues[ref]; q == nil {
		q = newQueue()
		s.queues[ref] = q
	}
	return q
}

// Create stores a new task; the id must be free in its queue.
func (s *Store) Create(ctx context.Context, t domain.Task) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("create task %s: %w", t.ID, err)
	}
	stored, err := checkNew(t)
	if err != nil {
		return err
	}
	q := s.lookup(ports.KeyOf(t).Ref(), true)
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, taken := q.tasks[t.ID]; taken {
		return domain.E(domain.KindConflict, "task_exists", "task %s already exists", t.ID)
	}
	q.put(nil, stored)
	return nil
}

// Get returns a copy of the task's current record.
func (s *Store) Get(ctx context.Context, k ports.Key) (domain.Task, error) {
	q := s.lookup(k.Ref(), false)
	if q == nil {
		return domain.Task{}, domain.ErrNotFound
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	t, ok := q.tasks[k.ID]
	if !ok {
		return domain.Task{}, domain.ErrNotFound
	}
	return t.Clone(), nil
}

// Update applies fn to a copy of the task and stores the result. When fn
// fails it returns the unchanged record with fn's error.
func (s *Store) Update(ctx context.Context, k ports.Key, fn func(*domain.Task) error) (domain.Task, error) {
	if err := ctx.Err(); err != nil {
		return domain.Task{}, fmt.Errorf("update task %s: %w", k.ID, err)
	}
	q := s.lookup(k.Ref(), false)
	if q == nil {
		return domain.Task{}, domain.ErrNotFound
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	cur, ok := q.tasks[k.ID]
	if !ok {
		return domain.Task{}, domain.ErrNotFound
	}
	return q.apply(cur, fn)
}

// ClaimNext applies fn to the oldest pending task of ref that m accepts.
func (s *Store) ClaimNext(ctx context.Context, ref ports.QueueRef, m ports.Matcher, fn func(*domain.Task) error) (domain.Task, error) {
	if err := ctx.Err(); err != nil {
		return domain.Task{}, fmt.Errorf("claim in %s/%s: %w", ref.Host, ref.Queue, err)
	}
	q := s.lookup(ref, false)
	if q == nil {
		return domain.Task{}, domain.ErrNotFound
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var found *domain.Task
	q.dirs[domain.Pending.Dir()].Ascend(func(o order) bool {
		t := q.tasks[o.id]
		if m == nil || m.Match(t.Item) {
			found = &t
			return false
		}
		return true
	})
	if found == nil {
		return domain.Task{}, domain.ErrNotFound
	}
	return q.apply(*found, fn)
}

// apply is the read-modify-write of Update and ClaimNext; q.mu is held.
func (q *queue) apply(cur domain.Task, fn func(*domain.Task) error) (domain.Task, error) {
	next := cur.Clone()
	if err := fn(&next); err != nil {
		return cur.Clone(), err
	}
	stored, err := checkUpdate(cur, next)
	if err != nil {
		return domain.Task{}, err
	}
	q.put(&cur, stored)
	return stored.Clone(), nil
}

// Delete removes a task.
func (s *Store) Delete(ctx context.Context, k ports.Key) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete task %s: %w", k.ID, err)
	}
	q := s.lookup(k.Ref(), false)
	if q == nil {
		return domain.ErrNotFound
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	t, ok := q.tasks[k.ID]
	if !ok {
		return domain.ErrNotFound
	}
	q.remove(t)
	return nil
}

// Each calls fn with a copy of each task in dir, ordered by (postedAt, id),
// until fn returns false. The queue is locked meanwhile.
func (s *Store) Each(ctx context.Context, ref ports.QueueRef, dir string, fn func(domain.Task) bool) error {
	if !validDir(dir) {
		return domain.E(domain.KindInvalid, "invalid_dir", "no state directory %q", dir)
	}
	q := s.lookup(ref, false)
	if q == nil {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var err error
	q.dirs[dir].Ascend(func(o order) bool {
		if err = ctx.Err(); err != nil {
			return false
		}
		return fn(q.tasks[o.id].Clone())
	})
	if err != nil {
		return fmt.Errorf("each in %s/%s: %w", ref.Host, ref.Queue, err)
	}
	return nil
}

// Counts reports how many tasks ref holds in each state directory.
func (s *Store) Counts(ref ports.QueueRef) ports.Counts {
	q := s.lookup(ref, false)
	if q == nil {
		return ports.Counts{}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return ports.Counts{
		Pending:    q.dirs["pending"].Len(),
		Processing: q.dirs["processing"].Len(),
		Done:       q.dirs["done"].Len(),
	}
}

func validDir(dir string) bool {
	for _, d := range domain.Dirs {
		if d == dir {
			return true
		}
	}
	return false
}

// checkNew vets a task for Create and returns the record to keep. The names
// are held to the same rules as the file store's paths, and the record must
// survive a round trip through its stored form, so that this fake accepts
// exactly what the file store accepts and keeps exactly what it would
// read back after a restart.
func checkNew(t domain.Task) (domain.Task, error) {
	switch {
	case !domain.ValidHost(t.Host):
		return domain.Task{}, domain.E(domain.KindInvalid, "invalid_task", "bad host name %q", t.Host)
	case !domain.ValidName(t.Queue):
		return domain.Task{}, domain.E(domain.KindInvalid, "invalid_task", "bad queue name %q", t.Queue)
	case !domain.ValidID(t.ID):
		return domain.Task{}, domain.E(domain.KindInvalid, "invalid_task", "bad task id %q", t.ID)
	}
	stored, err := domain.DecodeTask(domain.EncodeTask(t))
	if err != nil {
		return domain.Task{}, &domain.Error{Kind: domain.KindInvalid, Code: "invalid_task", Message: "record does not hold together", Err: err}
	}
	return stored, nil
}

// checkUpdate vets what an update's fn left: the same task, still a record
// that reads back from its stored form.
func checkUpdate(cur, next domain.Task) (domain.Task, error) {
	if ports.KeyOf(next) != ports.KeyOf(cur) {
		return domain.Task{}, domain.E(domain.KindInternal, "identity_changed",
			"update changed task %s/%s/%s into %s/%s/%s", cur.Host, cur.Queue, cur.ID, next.Host, next.Queue, next.ID)
	}
	stored, err := domain.DecodeTask(domain.EncodeTask(next))
	if err != nil {
		return domain.Task{}, &domain.Error{Kind: domain.KindInternal, Code: "invalid_task", Message: "update left a record that does not hold together", Err: err}
	}
	return stored, nil
}
