package index

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"runtime"
	"sync"
	"time"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// Lists of tasks (SPEC §12): keyset paging over a state's tree. A page
// walks the tree from its cursor (the order key and id of the last task the
// previous page looked at), so tasks that come or go between pages shift
// nothing: no task that stays in its status is listed twice or skipped.
//
// A page's work is bounded, so that a filter that matches little over a
// deep queue cannot hold the queue up: it tests at most listBudget tasks or
// runs for listTime, holding the queue's lock for at most listSlice tasks
// or listSliceTime at a time (like the claims' scan), and then returns what
// it found with a cursor to go on from.
const (
	maxListLimit  = 1000
	listBudget    = 10_000
	listTime      = 5 * time.Millisecond
	listSlice     = 1000
	listSliceTime = time.Millisecond
)

// cursor is where a page ends: the order key (EligibleAt for pending,
// postedAt for the others) and id of the last task it looked at, and the
// listing it belongs to (a hash of the queue, the status and the order),
// so a cursor is not taken for another listing's.
type cursor struct {
	queue  uint64
	state  state
	newest bool
	at     int64
	id     uint64
}

const (
	cursorVersion = 1
	cursorLen     = 3 + 8 + 8 + 8
)

var cursorCoding = base64.RawURLEncoding

func queueHash(ref domain.QueueRef) uint64 {
	h := fnv.New64a()
	h.Write([]byte(ref.Host))
	h.Write([]byte{0})
	h.Write([]byte(ref.Queue))
	return h.Sum64()
}

func (c cursor) String() string {
	b := make([]byte, 3, cursorLen)
	b[0], b[1] = cursorVersion, byte(c.state)
	if c.newest {
		b[2] = 1
	}
	b = binary.BigEndian.AppendUint64(b, c.queue)
	b = binary.BigEndian.AppendUint64(b, uint64(c.at))
	b = binary.BigEndian.AppendUint64(b, c.id)
	return cursorCoding.EncodeToString(b)
}

// parseCursor reads s as a cursor of the listing want names (its queue,
// state and order).
func parseCursor(s string, want cursor) (cursor, error) {
	b, err := cursorCoding.Strict().DecodeString(s)
	if err != nil || len(b) != cursorLen || b[0] != cursorVersion || b[2] > 1 {
		return cursor{}, invalidList("not a cursor of this store")
	}
	c := cursor{
		state:  state(b[1]),
		newest: b[2] == 1,
		queue:  binary.BigEndian.Uint64(b[3:]),
		at:     int64(binary.BigEndian.Uint64(b[11:])),
		id:     binary.BigEndian.Uint64(b[19:]),
	}
	if c.queue != want.queue || c.state != want.state || c.newest != want.newest {
		return cursor{}, invalidList("the cursor is of another list: another queue, status or order")
	}
	return c, nil
}

func invalidList(format string, args ...any) error {
	return domain.E(domain.KindInvalid, domain.CodeInvalidRequest, format, args...)
}

// List returns a page of ref's tasks in status l.Status: pending ones by
// (EligibleAt, id) across priorities and delays (as Each), the others by
// (postedAt, id); newest first is the exact reverse. A page holds at most
// l.Limit tasks, fewer when its work ran out (then next is a cursor all
// the same); next is "" once the walk has reached the end.
func (s *Store) List(ctx context.Context, ref domain.QueueRef, l ports.ListQuery) ([]domain.Task, string, error) {
	st, ok := stateOf(l.Status)
	if !ok {
		return nil, "", invalidList("no status %q", l.Status)
	}
	if l.Limit < 1 || l.Limit > maxListLimit {
		return nil, "", invalidList("limit must be 1 to %d", maxListLimit)
	}
	pos := cursor{queue: queueHash(ref), state: st, newest: l.Newest}
	var from *entry
	if l.After != "" {
		c, err := parseCursor(l.After, pos)
		if err != nil {
			return nil, "", err
		}
		pos, from = c, &entry{postedAt: c.at, id: c.id}
	}
	if err := ctx.Err(); err != nil {
		return nil, "", fmt.Errorf("list %s/%s: %w", ref.Host, ref.Queue, err)
	}
	q := s.lookup(ref, false)
	if q == nil {
		return nil, "", nil
	}
	var tasks []domain.Task
	tested := 0
	deadline := time.Now().Add(listTime)
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		end := time.Now().Add(listSliceTime)
		if end.After(deadline) {
			end = deadline
		}
		n, more := 0, false
		var last *entry
		q.walk(st, from, l.Newest, func(e *entry) bool {
			if n == listSlice || tested == listBudget || n%16 == 15 && time.Now().After(end) ||
				len(tasks) == l.Limit && e.state == st {
				more = true // (when the page is full: there is a next one)
				return false
			}
			n++
			tested++
			last = e
			if e.state == st && (l.Match == nil || l.Match.Match(e.item)) {
				tasks = append(tasks, q.task(e))
			}
			return true
		})
		if !more {
			return tasks, "", nil
		}
		if last != nil {
			pos.at, pos.id = q.orderKey(last), last.id
			from = &entry{postedAt: pos.at, id: pos.id}
		}
		if len(tasks) == l.Limit || tested >= listBudget || !time.Now().Before(deadline) {
			return tasks, pos.String(), nil
		}
		q.mu.Unlock()
		runtime.Gosched() // let the callers waiting for the lock have it
		q.mu.Lock()
		if err := ctx.Err(); err != nil {
			return nil, "", fmt.Errorf("list %s/%s: %w", ref.Host, ref.Queue, err)
		}
	}
}

// walk calls fn with the tasks of state st's tree (pending: the pending
// set), in list order or its reverse, from the first past from (all when
// nil), until fn returns false. The done tree holds finished and failed
// tasks both.
func (q *queue) walk(st state, from *entry, desc bool, fn func(*entry) bool) {
	if st == statePending {
		q.pending.walk(from, desc, fn)
		return
	}
	walkTree(q.dirs[st.dir()], before, from, desc, fn)
}

// orderKey is what e's tree orders it by, before its id.
func (q *queue) orderKey(e *entry) int64 {
	if e.state == statePending {
		return e.eligibleAt()
	}
	return e.postedAt
}

var _ ports.Pauses = (*Store)(nil)

// pauses are the paused queues of a Store, in memory only.
type pauses struct {
	mu     sync.RWMutex
	paused map[domain.QueueRef]bool
}

// Paused reports whether ref is paused.
func (s *Store) Paused(ref domain.QueueRef) bool {
	s.pauses.mu.RLock()
	defer s.pauses.mu.RUnlock()
	return s.pauses.paused[ref]
}

// SetPaused pauses or resumes ref, in memory: a Store keeps no pause
// beyond the process (fsstore does).
func (s *Store) SetPaused(ctx context.Context, ref domain.QueueRef, paused bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pause %s/%s: %w", ref.Host, ref.Queue, err)
	}
	s.pauses.mu.Lock()
	defer s.pauses.mu.Unlock()
	if s.pauses.paused == nil {
		s.pauses.paused = make(map[domain.QueueRef]bool)
	}
	if paused {
		s.pauses.paused[ref] = true
	} else {
		delete(s.pauses.paused, ref)
	}
	return nil
}
