package postgres

import (
	"sync"

	"github.com/taskhoster/taskhoster/domain"
)

// Guessed updates. A change of a task this Store holds processing (a
// result, a progress report, a re-queue) is usually of the record this
// Store stored last: its own claim's. Update then decides the change on
// that record in Go, without reading and locking the row first, and writes
// it with one guarded UPDATE (group.go, rows.go): the row changes only
// where its stored record is still, byte for byte, the one the change was
// decided on, and the event line goes in only with the row, in the same
// statement. The record is the whole of a task's state (the columns are
// derived from it), so a guard that holds means the change was decided on
// the current record, as if it had been read under the lock: the UPDATE
// holds the row's lock from there to COMMIT, and a concurrent change that
// committed first (on this server or another) fails the guard, since
// PostgreSQL re-reads a row it waited for before it updates it. A change
// whose guard fails, or that fn or CheckTransition refuse on the guess
// (the refusal may be the guess's), is made again the ordinary way, on the
// locked row. A change of a pending task is guessed only by a claim from
// stock (stock.go), which wakes a claim when it misses: claims take
// pending rows, and a pending row let go unchanged must wake one (release).
// A guarded UPDATE that found the row changed after its snapshot holds the
// row's latest version until its COMMIT even though it wrote nothing; the
// change made again right after locks and reads that version, and wakes a
// claim if it is pending and left unchanged, as any change does.

// maxRecent bounds the records kept for guesses; past it one is dropped.
const maxRecent = 8192

// recent are the processing records this Store stored last, by key.
type recent struct {
	mu sync.Mutex
	m  map[domain.Key]guess
}

// guess is a record as stored (data) and decoded.
type guess struct {
	data []byte
	task domain.Task
	// post, in a stock only: the post on its way to store this record,
	// not stored yet (stock.go, Claims riding their posts).
	post *op
}

// take removes and returns k's record, if one is kept.
func (r *recent) take(k domain.Key) (guess, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.m[k]
	if ok {
		delete(r.m, k)
	}
	return g, ok
}

// stored notes the record t (stored as data) this Store just committed: kept
// while processing, otherwise forgotten.
func (r *recent) stored(t domain.Task, data []byte) {
	k := domain.KeyOf(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.Status != domain.Processing {
		delete(r.m, k)
		return
	}
	if r.m == nil {
		r.m = make(map[domain.Key]guess)
	}
	if _, ok := r.m[k]; !ok && len(r.m) >= maxRecent {
		for old := range r.m {
			delete(r.m, old)
			break
		}
	}
	r.m[k] = guess{data: data, task: t.Clone()}
}

// forget drops k's record (the task is being changed some other way, or
// deleted).
func (r *recent) forget(k domain.Key) {
	r.mu.Lock()
	delete(r.m, k)
	r.mu.Unlock()
}
