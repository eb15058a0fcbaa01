// Package fsstore is the task repository on disc: one JSON file per task,
// <items>/<host>/<queue>/{pending,processing,done}/<id>.json, its directory
// being its state (SPEC §6, seed "Store").
//
// One process owns an items folder (a flock on <items>/.lock) and keeps an
// index of every queue in memory, rebuilt at Open. The index is the truth
// while the process runs: a claim or a result is decided under the queue's
// mutex, and the files follow it. Writes are atomic (temp file, rename) but
// not fsynced; durability is the Syncer's job, so that many writes share one
// flush.
package fsstore

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

var _ ports.TaskRepository = (*Store)(nil)

// Store is a TaskRepository on disc. Open it, Close it when done.
type Store struct {
	dir  string
	log  *zap.Logger
	lock *os.File

	mu     sync.RWMutex // guards queues, not what is in them
	queues map[ports.QueueRef]*queue

	recovered []Corrupt // what the start-up scan quarantined; fixed after Open
	closed    atomic.Bool
}

// Option configures Open.
type Option func(*Store)

// WithLogger logs what the start-up scan repairs (default: nothing is logged).
func WithLogger(l *zap.Logger) Option {
	return func(s *Store) { s.log = l }
}

// Open locks the items folder dir (creating it if needed), rebuilds the
// index from it and repairs what an interrupted run left: temp files,
// tasks found in two states, unreadable records (see Recovered). It fails
// at once, with an error wrapping ErrLocked, if another process has dir open.
func Open(dir string, opts ...Option) (*Store, error) {
	s := &Store{dir: dir, log: zap.NewNop(), queues: make(map[ports.QueueRef]*queue)}
	for _, o := range opts {
		o(s)
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("open items folder: %w", err)
	}
	lock, err := lockFolder(dir)
	if err != nil {
		return nil, fmt.Errorf("open items folder: %w", err)
	}
	s.lock = lock
	if err := s.load(); err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("open items folder %s: %w", dir, err)
	}
	return s, nil
}

// Recovered lists the task files Open found corrupt and moved to
// <queue>/corrupt/, so that the app can log a "failed" event for each.
func (s *Store) Recovered() []Corrupt { return slices.Clone(s.recovered) }

// Close releases the items folder for another process. The store refuses
// writes afterwards.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	// Closing the file drops the flock.
	if err := s.lock.Close(); err != nil {
		return fmt.Errorf("release items folder lock: %w", err)
	}
	return nil
}

// lookup returns the queue of ref, creating its index entry (not yet its
// folder) when create is set.
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
		q = newQueue(s.dir, ref)
		s.queues[ref] = q
	}
	return q
}

// usable refuses work on a closed store or for a caller that gave up.
func (s *Store) usable(ctx context.Context) error {
	if s.closed.Load() {
		return domain.E(domain.KindUnavailable, "storage_unavailable", "task store is closed")
	}
	return ctx.Err()
}

// Create writes a new task into the state directory its status names. The
// host, queue and id must be valid names, so that none becomes a path
// outside the items folder; the id must be free in its queue.
func (s *Store) Create(ctx context.Context, t domain.Task) error {
	if err := s.usable(ctx); err != nil {
		return fmt.Errorf("create task %s: %w", t.ID, err)
	}
	stored, data, err := checkNew(t)
	if err != nil {
		return err
	}
	q := s.lookup(ports.KeyOf(t).Ref(), true)
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, taken := q.tasks[t.ID]; taken {
		return domain.E(domain.KindConflict, "task_exists", "task %s already exists", t.ID)
	}
	if err := q.write(stored, data); err != nil {
		return err
	}
	q.put(nil, stored)
	return nil
}

// Get returns a copy of the task's current record, from the index.
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
	if err := s.usable(ctx); err != nil {
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
// The queue's mutex, not a rename race, is what makes exactly one caller
// win each task.
func (s *Store) ClaimNext(ctx context.Context, ref ports.QueueRef, m ports.Matcher, fn func(*domain.Task) error) (domain.Task, error) {
	if err := s.usable(ctx); err != nil {
		return domain.Task{}, fmt.Errorf("claim in %s/%s: %w", ref.Host, ref.Queue, err)
	}
	q := s.lookup(ref, false)
	if q == nil {
		return domain.Task{}, domain.ErrNotFound
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	cur, ok := q.firstMatch(m)
	if !ok {
		return domain.Task{}, domain.ErrNotFound
	}
	return q.apply(cur, fn)
}

// apply is the read-modify-write of Update and ClaimNext; q.mu is held.
// The new record is written before the index changes, so a failed write
// leaves both as they were. A move between states writes the destination
// and then unlinks the source: a crash in between leaves two copies, and
// the start-up scan keeps the one in the later state.
func (q *queue) apply(cur domain.Task, fn func(*domain.Task) error) (domain.Task, error) {
	next := cur.Clone()
	if err := fn(&next); err != nil {
		return cur.Clone(), err
	}
	stored, data, err := checkUpdate(cur, next)
	if err != nil {
		return domain.Task{}, err
	}
	if err := q.write(stored, data); err != nil {
		return domain.Task{}, err
	}
	if stored.Status.Dir() != cur.Status.Dir() {
		if err := unlink(q.statePath(cur.Status, cur.ID)); err != nil {
			// Undo the write, so the disc keeps agreeing with the index.
			_ = os.Remove(q.statePath(stored.Status, stored.ID))
			return domain.Task{}, err
		}
	}
	q.put(&cur, stored)
	return stored.Clone(), nil
}

// Delete removes a task's file and its index entry.
func (s *Store) Delete(ctx context.Context, k ports.Key) error {
	if err := s.usable(ctx); err != nil {
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
	if err := unlink(q.statePath(t.Status, t.ID)); err != nil {
		return err
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
	return q.counts()
}

func validDir(dir string) bool { return slices.Contains(domain.Dirs, dir) }

// checkNew vets a task for Create and returns the record to keep with its
// stored form. The names become path elements, so they must be valid; the
// record must read back from its stored form, or the next start-up would
// call it corrupt. The index keeps the decoded copy: exactly what a restart
// would load.
func checkNew(t domain.Task) (domain.Task, []byte, error) {
	switch {
	case !domain.ValidHost(t.Host):
		return domain.Task{}, nil, domain.E(domain.KindInvalid, "invalid_task", "bad host name %q", t.Host)
	case !domain.ValidName(t.Queue):
		return domain.Task{}, nil, domain.E(domain.KindInvalid, "invalid_task", "bad queue name %q", t.Queue)
	case !domain.ValidID(t.ID):
		return domain.Task{}, nil, domain.E(domain.KindInvalid, "invalid_task", "bad task id %q", t.ID)
	}
	data := domain.EncodeTask(t)
	stored, err := domain.DecodeTask(data)
	if err != nil {
		return domain.Task{}, nil, &domain.Error{Kind: domain.KindInvalid, Code: "invalid_task", Message: "record does not hold together", Err: err}
	}
	return stored, data, nil
}

// checkUpdate vets what an update's fn left: the same task (so the same
// path), still a record that reads back from its stored form.
func checkUpdate(cur, next domain.Task) (domain.Task, []byte, error) {
	if ports.KeyOf(next) != ports.KeyOf(cur) {
		return domain.Task{}, nil, domain.E(domain.KindInternal, "identity_changed",
			"update changed task %s/%s/%s into %s/%s/%s", cur.Host, cur.Queue, cur.ID, next.Host, next.Queue, next.ID)
	}
	data := domain.EncodeTask(next)
	stored, err := domain.DecodeTask(data)
	if err != nil {
		return domain.Task{}, nil, &domain.Error{Kind: domain.KindInternal, Code: "invalid_task", Message: "update left a record that does not hold together", Err: err}
	}
	return stored, data, nil
}
