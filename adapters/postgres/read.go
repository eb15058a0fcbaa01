package postgres

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// promote moves ref's looked-at time on to now, counting the pending tasks
// whose notBefore came in between for Due: they were delayed when this
// Store last looked, and are claimable now.
func (s *Store) promote(ctx context.Context, ref domain.QueueRef, now int64) error {
	from, moved := s.queue(ref).advance(now)
	if !moved {
		return nil
	}
	return s.countDue(ctx, ref, from, now)
}

// countDue counts ref's pending tasks whose notBefore is in (from, now]
// for Due.
func (s *Store) countDue(ctx context.Context, ref domain.QueueRef, from, now int64) error {
	q := s.queue(ref)
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE `+dueBetween, ref.Host, ref.Queue, now, from).Scan(&n)
	if err != nil {
		return fail("look for due tasks", err)
	}
	q.addDue(n)
	return nil
}

// dueBetween selects ref's ($1, $2) pending tasks whose notBefore is in
// ($4, $3]: those come due between two looks. Pending as stage < 1, which
// only the index of delayed tasks says (migration 7).
const dueBetween = `host = $1 AND queue = $2 AND stage < 1 AND not_before > $4 AND not_before <= $3`

// nextDueSQL is the earliest notBefore of ref's ($1, $2) pending tasks
// after $3 (pending as in dueBetween).
const nextDueSQL = `SELECT min(not_before) FROM tasks WHERE host = $1 AND queue = $2 AND stage < 1 AND not_before > $3`

// advance moves the queue's looked-at time on to now, if now is later,
// and returns the time it moved from.
func (q *queue) advance(now int64) (from int64, moved bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	from = q.looked
	if now <= from {
		return from, false
	}
	q.looked = now
	return from, true
}

// rewind takes the queue's looked-at time back to now if the clock was set
// back (ports.ClockStepBack): the tasks whose notBefore is after now are
// delayed again, and the look that passes them counts them for Due.
func (q *queue) rewind(now int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if now < q.looked && q.looked-now > ports.ClockStepBack.Milliseconds() {
		q.looked = now
	}
}

// addDue counts n tasks come due, for the next Due.
func (q *queue) addDue(n int) {
	q.mu.Lock()
	q.due += n
	q.mu.Unlock()
}

// Due reports how many tasks of ref became claimable since the last call
// (found by this call or by a ClaimNext), and the earliest notBefore still
// to come.
func (s *Store) Due(ctx context.Context, ref domain.QueueRef, now time.Time) (int, time.Time, error) {
	s.queue(ref).rewind(domain.Millis(now))
	if err := s.promote(ctx, ref, domain.Millis(now)); err != nil {
		return 0, time.Time{}, err
	}
	q := s.queue(ref)
	q.mu.Lock()
	n, looked := q.due, q.looked
	q.due = 0
	q.mu.Unlock()
	var next *int64
	err := s.pool.QueryRow(ctx, nextDueSQL, ref.Host, ref.Queue, looked).Scan(&next)
	if err != nil {
		return n, time.Time{}, fail("look for delayed tasks", err)
	}
	if next == nil {
		return n, time.Time{}, nil
	}
	return n, time.UnixMilli(*next).UTC(), nil
}

// Counts counts ref's tasks by stage with one indexed query (a COUNT, not
// a maintained count: it costs in proportion to the queue's size). A
// database that cannot be reached counts nothing.
func (s *Store) Counts(ref domain.QueueRef) ports.Counts {
	q := s.queue(ref)
	q.mu.Lock()
	looked := q.looked
	q.mu.Unlock()
	ctx, cancel := shortCtx()
	defer cancel()
	var c ports.Counts
	var oldest *int64
	_ = s.pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE stage = 0),
			count(*) FILTER (WHERE stage = 1),
			count(*) FILTER (WHERE stage = 2),
			count(*) FILTER (WHERE stage = 0 AND not_before > $3),
			count(*) FILTER (WHERE status = 'failed'),
			min(eligible_at) FILTER (WHERE stage = 0 AND (not_before IS NULL OR not_before <= $3))
		FROM tasks WHERE host = $1 AND queue = $2`, ref.Host, ref.Queue, looked).Scan(&c.Pending, &c.Processing, &c.Done, &c.Delayed, &c.Failed, &oldest)
	if oldest != nil {
		c.Oldest = time.UnixMilli(*oldest).UTC()
	}
	return c
}

// HasPending reports whether ref has a pending task (delayed or not) that
// no claim of this Store holds: the hub asks it each time a woken claim
// found nothing it wanted (notify.WithPending), to hand the wake on only
// while there is something to take. Counts(ref).Pending > 0 would count the
// tasks that claims in flight hold too, so that under load every futile
// wake went down the whole line of waiting claims, each finding nothing.
//
// One statement, no lock: it counts the pending rows, up to one more than
// this Store's claim batches hold (queue.hold), and says yes if there are
// more than those claims held throughout its snapshot. held is read with
// unheld before the count and unheld again after: held less the rows let
// go meanwhile were held (and so pending) across the snapshot, so a
// pending row beyond them may be free. A row a claim held that then went
// back to pending wakes a claim of its own (release). Rows other servers'
// claims hold count as pending here, so with other servers a wake may be
// handed on in vain; the claim it reaches looks, finds nothing claimable
// at all, and the wake stops there (HandOnEmpty). A database that cannot be
// reached has none.
//
// Yes without asking while the queue's latest claim batch saw claimable
// rows beyond those it locked (countClaimable, in the batch's first round
// trip): under a backlog every batch does, and the count here would only
// ever say yes, a round trip for each wake a claim got while it looked. A
// yes is never wrong to give, only maybe in vain: the claim the wake goes
// on to looks, and one that finds nothing claimable at all stops the wake
// there.
func (s *Store) HasPending(ref domain.QueueRef) bool {
	q := s.queue(ref)
	q.mu.Lock()
	more := q.more
	q.mu.Unlock()
	if more {
		return true
	}
	ctx, cancel := shortCtx()
	defer cancel()
	held, unheld := q.holding()
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM tasks WHERE host = $1 AND queue = $2 AND status = 'pending' LIMIT $3) t`,
		ref.Host, ref.Queue, held+1).Scan(&n)
	if err != nil {
		return false
	}
	_, after := q.holding()
	return n > held-(after-unheld)
}

// HandOnEmpty reports whether a wake whose claim found nothing claimable
// in ref at all is still to go on to the next claim in line
// (notify.WithEmptyLook): never, on one server or many. The claim's
// SELECT … FOR UPDATE SKIP LOCKED saw every claimable row but those other
// transactions held, and every transaction of every server that locks a
// pending row either changes it (a claim, a cancel: news of its own) or,
// letting it go unchanged, wakes a claim for it here and on the other
// servers (release, through the notifier's Wake). So nobody else in line
// could take anything now. No statement here takes a row lock only to
// look: such a probe would hide rows from the others' claims and wake
// nobody, and asking one after every futile wake was a row lock and a
// transaction per task with two servers.
func (s *Store) HandOnEmpty(domain.QueueRef) bool { return false }

// Each reads a page of eachFirst records first, then pages four times as
// large up to eachPage: the sweep stops at the first pending task too
// young to time out and the first done task too young to clean, so most
// of its passes need only the first few records.
const (
	eachFirst = 16
	eachPage  = 500
)

// Each calls fn with each task of ref in stage st, pending ones by
// (EligibleAt, id), the others by (postedAt, id), reading a page at a time.
func (s *Store) Each(ctx context.Context, ref domain.QueueRef, st domain.Stage, fn func(domain.Task) bool) error {
	if !st.Valid() {
		return fmt.Errorf("each: no stage %d", st)
	}
	order := orderOf(st)
	var after *position
	for size := eachFirst; ; size = min(4*size, eachPage) {
		page, err := s.page(ctx, ref, st, "", order, false, after, size)
		if err != nil {
			return err
		}
		for _, t := range page {
			if !fn(t) {
				return nil
			}
		}
		if len(page) < size {
			return nil
		}
		last := page[len(page)-1]
		after = &position{at: order.at(last), id: last.ID}
	}
}

// order is how a stage's tasks are listed: by (EligibleAt, id) for pending
// tasks, else (postedAt, id).
type order struct {
	column string
	at     func(domain.Task) int64
}

func orderOf(st domain.Stage) order {
	if st == domain.StagePending {
		return order{"eligible_at", domain.Task.EligibleAt}
	}
	return order{"posted_at", func(t domain.Task) int64 { return t.PostedAt }}
}

// position is a place in an order: the order key and id of a task.
type position struct {
	at int64
	id string
}

// page reads up to limit tasks of ref in stage st (and of status status,
// unless ""), in o's order (newest: reversed), after the position after.
func (s *Store) page(ctx context.Context, ref domain.QueueRef, st domain.Stage, status domain.Status, o order, newest bool, after *position, limit int) ([]domain.Task, error) {
	query, args := pageQuery(ref, st, status, o, newest, after, limit)
	return s.records(ctx, "list tasks", query, args...)
}

// pageQuery is page's statement and its arguments.
func pageQuery(ref domain.QueueRef, st domain.Stage, status domain.Status, o order, newest bool, after *position, limit int) (string, []any) {
	query := `SELECT record FROM tasks WHERE host = $1 AND queue = $2`
	args := []any{ref.Host, ref.Queue}
	// A literal, so that every plan may use the partial index of its
	// stage: tasks_pending (stage = 0) or tasks_posted (stage > 0).
	query += fmt.Sprintf(` AND stage = %d`, st)
	if status != "" {
		args = append(args, string(status))
		query += fmt.Sprintf(` AND status = $%d`, len(args))
	}
	cmp, dir := ">", "ASC"
	if newest {
		cmp, dir = "<", "DESC"
	}
	if after != nil {
		args = append(args, after.at, after.id)
		query += fmt.Sprintf(` AND (%s, id) %s ($%d, $%d)`, o.column, cmp, len(args)-1, len(args))
	}
	query += fmt.Sprintf(` ORDER BY %s %s, id %s LIMIT %d`, o.column, dir, dir, limit)
	return query, args
}

// Limits of List: the largest page, and how many tasks one page may test
// against a matcher before it returns what it has.
const (
	maxListLimit = 1000
	maxListTests = 10_000
)

// List returns a page of ref's tasks of status l.Status in List's order,
// and the cursor of the next page.
func (s *Store) List(ctx context.Context, ref domain.QueueRef, l ports.ListQuery) ([]domain.Task, string, error) {
	if !l.Status.Valid() {
		return nil, "", invalidList("no status %q", l.Status)
	}
	if l.Limit < 1 || l.Limit > maxListLimit {
		return nil, "", invalidList("limit must be 1 to %d", maxListLimit)
	}
	st := l.Status.Stage()
	want := cursor{queue: queueHash(ref), status: l.Status, newest: l.Newest}
	var after *position
	if l.After != "" {
		c, err := parseCursor(l.After, want)
		if err != nil {
			return nil, "", err
		}
		after = &c.position
	}
	o := orderOf(st)
	var tasks []domain.Task
	for tested := 0; tested < maxListTests; {
		batch := l.Limit - len(tasks)
		if l.Match != nil {
			batch = min(maxListLimit, maxListTests-tested)
		}
		page, err := s.page(ctx, ref, st, l.Status, o, l.Newest, after, batch)
		if err != nil {
			return nil, "", err
		}
		for _, t := range page {
			tested++
			after = &position{at: o.at(t), id: t.ID}
			if l.Match == nil || l.Match.Match(t.Item) {
				tasks = append(tasks, t)
				if len(tasks) == l.Limit {
					return tasks, want.from(*after).String(), nil
				}
			}
		}
		if len(page) < batch {
			return tasks, "", nil
		}
	}
	return tasks, want.from(*after).String(), nil
}

func invalidList(format string, args ...any) error {
	return domain.E(domain.KindInvalid, domain.CodeInvalidRequest, format, args...)
}

// cursor is where a page of a listing ends: the listing (a hash of the
// queue, the status and the order) and the position of the last task the
// page looked at, so a cursor is not taken for another listing's.
type cursor struct {
	queue  uint64
	status domain.Status
	newest bool
	position
}

const (
	cursorVersion = 1
	cursorLen     = 3 + 8 + 8 + 8
)

var cursorCoding = base64.RawURLEncoding

// statuses numbers the statuses in a cursor.
var statuses = []domain.Status{domain.Pending, domain.Processing, domain.Finished, domain.Failed}

func queueHash(ref domain.QueueRef) uint64 {
	h := fnv.New64a()
	h.Write([]byte(ref.Host))
	h.Write([]byte{0})
	h.Write([]byte(ref.Queue))
	return h.Sum64()
}

func (c cursor) from(p position) cursor {
	c.position = p
	return c
}

func (c cursor) String() string {
	b := make([]byte, 3, cursorLen)
	b[0] = cursorVersion
	for i, st := range statuses {
		if st == c.status {
			b[1] = byte(i)
		}
	}
	if c.newest {
		b[2] = 1
	}
	id, _ := strconv.ParseUint(c.id, 16, 64) // ids are 16 hex digits
	b = binary.BigEndian.AppendUint64(b, c.queue)
	b = binary.BigEndian.AppendUint64(b, uint64(c.position.at))
	b = binary.BigEndian.AppendUint64(b, id)
	return cursorCoding.EncodeToString(b)
}

// parseCursor reads s as a cursor of the listing want names.
func parseCursor(s string, want cursor) (cursor, error) {
	b, err := cursorCoding.Strict().DecodeString(s)
	if err != nil || len(b) != cursorLen || b[0] != cursorVersion || int(b[1]) >= len(statuses) || b[2] > 1 {
		return cursor{}, invalidList("not a cursor of this store")
	}
	c := cursor{
		status: statuses[b[1]],
		newest: b[2] == 1,
		queue:  binary.BigEndian.Uint64(b[3:]),
	}
	c.position = position{
		at: int64(binary.BigEndian.Uint64(b[11:])),
		id: fmt.Sprintf("%016x", binary.BigEndian.Uint64(b[19:])),
	}
	if c.queue != want.queue || c.status != want.status || c.newest != want.newest {
		return cursor{}, invalidList("the cursor is of another list: another queue, status or order")
	}
	return c, nil
}
