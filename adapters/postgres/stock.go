package postgres

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// Claims from stock. A server alone on its database (no other server
// listens: pgnotify's Others says no) makes every change of its queues, so
// it can know their claimable tasks without asking: each queue keeps a
// stock, the first claimable records in claim order, read once and then
// kept in step with every change the Store stores (queue.stored, in store
// order). A claim without a query takes the first record of the stock no
// other claim has taken, decides the claim on it in Go (fn, as ever), and
// writes it with one guarded UPDATE in the line of posts and results
// (guess.go): one round trip with their COMMIT, where a claim that locks
// its row first rides a batch of claims, which costs a round trip more, a
// COMMIT of its own, and the locking SELECT and the count beside it
// (group.go). When the stock holds every claimable task and none is free,
// the claim finds nothing without asking the database either. A post
// goes into the stock while it waits for its batch, so that a claim can
// ride that batch (group.go, Claims riding their posts).
//
// A guess that misses (the row was changed behind the stock's back, or fn
// refuses on it) is made again on a stock read anew, and the row it held
// while its guard failed wakes a claim (release), as any pending row let go
// unchanged does (HandOnEmpty). With other servers on the database, their
// changes reach this one only a little after they commit, so claims lock
// their rows as before (claimBatched), with SKIP LOCKED sharing the queue
// between servers: set by OnAlone, checked at every claim.

// stockSize is how many claimable records a read of a stock takes: a few
// batches' worth of claims. A stock that holds every claimable task takes
// in the tasks posted since, up to stockCap; past it, it holds the first
// stockCap in claim order, and is read again once they are claimed.
const (
	stockSize = 64
	stockCap  = 4 * stockSize
)

// stockTries bounds the reads of a stock and the missed guesses of one
// claim before it locks its row instead.
const stockTries = 4

// stock is a queue's first claimable records, in claim order.
type stock struct {
	mu sync.Mutex
	// items are the records as stored and decoded (guess.go's pair), by
	// pointer: a claim takes the first, and the rest move up.
	items []*guess
	read  bool // items were read and are kept in step
	// complete: items held every claimable task when read, so every
	// claimable task is in items.
	complete bool
	// until is when the earliest delayed task known comes due (Unix ms):
	// from then on items may miss it, and the stock is read again.
	// readAt is the now it was read at.
	until, readAt int64
	// filling is closed when the read in flight ends (nil: none is);
	// seen are the records stored meanwhile, applied to what it read.
	filling chan struct{}
	seen    []guess // data nil: the task was deleted
	dropped uint64  // counts drops: a read begun before one is not kept
	// taken are the ids whose claims from stock are in flight, through
	// drops and reads: a read made meanwhile still finds them pending.
	taken map[string]bool
}

// stockAnswer is what a stock has for a claim.
type stockAnswer int

const (
	stockUnread stockAnswer = iota // nothing known: read it (or wait for the read in flight)
	stockTaken                     // a record, now the claim's
	stockEmpty                     // no claimable task that no claim has taken
	stockShort                     // none claimable yet at the claim's now: lock a row
)

// claimsBefore reports whether a comes before b in claim order: the highest
// priority first, then the earliest EligibleAt, then the id.
func claimsBefore(a, b domain.Task) bool {
	return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.EligibleAt(), b.EligibleAt()), cmp.Compare(a.ID, b.ID)) < 0
}

// take gives the first record no claim has taken that is claimable at now,
// and marks it taken. With stockUnread it may return the read in flight to
// wait for.
func (st *stock) take(now int64) (*guess, stockAnswer, <-chan struct{}) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.filling != nil {
		return nil, stockUnread, st.filling
	}
	if !st.read || now >= st.until {
		st.read, st.items = false, nil
		return nil, stockUnread, nil
	}
	free := 0
	for _, it := range st.items {
		if st.taken[it.task.ID] {
			continue
		}
		free++
		if it.task.NotBefore != nil && *it.task.NotBefore > now {
			continue // read claimable by the database's clock, not yet by now's
		}
		if st.taken == nil {
			st.taken = make(map[string]bool)
		}
		st.taken[it.task.ID] = true
		return it, stockTaken, nil
	}
	switch {
	case free > 0:
		// Claimable by the database's clock when read, not yet by this
		// claim's now (an earlier one): the claim locks its row instead.
		return nil, stockShort, nil
	case st.complete:
		return nil, stockEmpty, nil
	}
	// Every record read is claimed or being claimed: read further (the
	// rows of claims in flight come back taken).
	st.read, st.items = false, nil
	return nil, stockUnread, nil
}

// more reports whether the stock may hold a claimable task no claim has
// taken (HasPending's quick answer).
func (st *stock) more() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.read || !st.complete {
		return true
	}
	for _, it := range st.items {
		if !st.taken[it.task.ID] {
			return true
		}
	}
	return false
}

// noneDue reports whether no task of the queue can have come due in
// (from, now]: the stock was read at from or before, and knows every
// delayed task since, the earliest due after now.
func (st *stock) noneDue(from, now int64) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.read && st.filling == nil && st.readAt <= from && now < st.until
}

// landed ends the claim of id from stock: its change was stored or not
// (a stored one reaches the stock through stored).
func (st *stock) landed(id string) {
	st.mu.Lock()
	delete(st.taken, id)
	st.mu.Unlock()
}

// stored keeps the stock in step with a record just stored (data nil:
// deleted). Called in store order (queue.stored).
func (st *stock) stored(t domain.Task, data []byte) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.filling != nil {
		st.seen = append(st.seen, guess{data: data, task: t})
	}
	if st.read {
		st.apply(t, data)
	}
}

// apply puts t's record where it belongs: out of the stock unless
// claimable; in it, in claim order, if it comes before the last record
// read or the stock holds every claimable task, and then the last one
// out if the stock is full. A delayed one makes the stock be read again
// once it comes due.
func (st *stock) apply(t domain.Task, data []byte) {
	if i := slices.IndexFunc(st.items, func(it *guess) bool { return it.task.ID == t.ID }); i >= 0 {
		st.items = slices.Delete(st.items, i, i+1)
	}
	if data == nil || t.Status != domain.Pending {
		return
	}
	if t.NotBefore != nil {
		st.until = min(st.until, *t.NotBefore)
		return
	}
	last := len(st.items) - 1
	if !st.complete && (last < 0 || !claimsBefore(t, st.items[last].task)) {
		return // beyond what was read: a later read finds it
	}
	i, _ := slices.BinarySearchFunc(st.items, t, func(it *guess, t domain.Task) int {
		if claimsBefore(it.task, t) {
			return -1
		}
		return 1
	})
	st.items = slices.Insert(st.items, i, &guess{data: data, task: t.Clone()})
	if len(st.items) > stockCap {
		st.items = slices.Delete(st.items, stockCap, len(st.items))
		st.complete = false
	}
}

// posting puts the record of o, a post on its way (not stored yet), in
// the stock, where a claim may take it and ride o's batch (Claims riding
// their posts). It reports whether it did: not while the stock is unread
// or being read, nor for a task not claimable at once.
func (st *stock) posting(o *op) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	t := o.task
	if !st.read || st.filling != nil || t.Status != domain.Pending || t.NotBefore != nil {
		return false
	}
	st.apply(t, o.data)
	i := slices.IndexFunc(st.items, func(it *guess) bool { return it.task.ID == t.ID })
	if i < 0 {
		return false // beyond what was read
	}
	st.items[i].post = o
	return true
}

// drop forgets what was read: the next claim reads the stock anew.
func (st *stock) drop() {
	st.mu.Lock()
	st.read, st.items = false, nil
	st.dropped++
	st.mu.Unlock()
}

// stockRows are the first $4 claimable tasks of a queue at now $3, in
// claim order, read without a lock.
const stockRows = `SELECT record FROM tasks WHERE ` + claimable + `
	ORDER BY priority DESC, eligible_at, id LIMIT $4`

// fill reads ref's stock anew, with when its earliest delayed task comes
// due, in one round trip. A fill already in flight is waited for instead.
func (s *Store) fill(ctx context.Context, ref domain.QueueRef, now int64) error {
	st := &s.queue(ref).stock
	st.mu.Lock()
	if st.filling != nil {
		wait := st.filling
		st.mu.Unlock()
		select {
		case <-wait:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	done := make(chan struct{})
	defer close(done)
	st.filling, st.seen, st.read, st.items = done, nil, false, nil
	dropped := st.dropped
	st.mu.Unlock()

	var items []*guess
	var next *int64
	b := &pgx.Batch{}
	b.Queue(stockRows, ref.Host, ref.Queue, now, stockSize).Query(func(r pgx.Rows) error {
		for r.Next() {
			var data []byte
			if err := r.Scan(&data); err != nil {
				return err
			}
			t, err := decode(data)
			if err != nil {
				return err
			}
			items = append(items, &guess{data: data, task: t})
		}
		return r.Err()
	})
	b.Queue(nextDueSQL, ref.Host, ref.Queue, now).QueryRow(func(r pgx.Row) error { return r.Scan(&next) })
	err := s.pool.SendBatch(ctx, b).Close()

	st.mu.Lock()
	defer st.mu.Unlock()
	seen := st.seen
	st.filling, st.seen = nil, nil
	if err != nil {
		return fail("read claimable tasks", err)
	}
	if st.dropped != dropped {
		return errStockDropped
	}
	// Read in one snapshot; the records stored since it was taken (and
	// maybe some before) follow in store order.
	st.items, st.complete, st.read = items, len(items) < stockSize, true
	st.until, st.readAt = math.MaxInt64, now
	if next != nil {
		st.until = *next
	}
	for _, r := range seen {
		st.apply(r.task, r.data)
	}
	return nil
}

var errStockDropped = errors.New("the stock was dropped while it was read")

// OnAlone has the store ask alone, at each claim without a query, whether
// it is the only server on the database (pgnotify's Notifier.Alone): only
// then are claims taken from stock. Call it before serving.
func (s *Store) OnAlone(alone func() bool) { s.alone = alone }

// claimStocked claims the first record of ref's stock (see Claims from
// stock); ok false: the claim is to lock its row instead (claimBatched).
func (s *Store) claimStocked(ctx context.Context, ref domain.QueueRef, now int64, fn func(*domain.Task) error, then ports.Then) (t domain.Task, ok bool, err error) {
	q := s.queue(ref)
	st := &q.stock
	// The queue's looked-at time moves on to now, as with every claim
	// (promote), counting the tasks come due meanwhile for Due, unless the
	// stock knows that none can have: it was read before from, and the
	// earliest delayed task it knows of is due after now.
	if from, moved := q.advance(now); moved && !st.noneDue(from, now) {
		if err := s.countDue(ctx, ref, from, now); err != nil {
			return domain.Task{}, true, err
		}
	}
	for tries := 0; tries < stockTries; {
		c, answer, wait := st.take(now)
		switch answer {
		case stockEmpty:
			q.lookedAt(false)
			return domain.Task{}, true, domain.ErrNotFound
		case stockShort:
			return domain.Task{}, false, nil
		case stockUnread:
			tries++
			if wait != nil {
				select {
				case <-wait:
				case <-ctx.Done():
					return domain.Task{}, true, ctx.Err()
				}
			} else if err := s.fill(ctx, ref, now); err != nil {
				if ctx.Err() != nil {
					return domain.Task{}, true, ctx.Err()
				}
				return domain.Task{}, false, nil
			}
			continue
		}
		q.lookedAt(st.more())
		o := &op{kind: opUpdate, ctx: ctx, key: domain.KeyOf(c.task), fn: fn, guess: c, rides: c.post}
		s.run(o)
		thenErr := s.settleOp(o, func() error { return then.Call(o.out) })
		st.landed(c.task.ID)
		switch {
		case o.missed || o.alone:
			// The row may have been held while its guard failed: a
			// pending row let go unchanged wakes a claim (release).
			st.drop()
			s.release(map[domain.QueueRef]int{ref: 1})
			tries++
			continue
		case o.err != nil:
			return o.out, true, o.err
		}
		return o.out, true, thenErr
	}
	return domain.Task{}, false, nil
}
