package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// columns are a task's columns in the order row gives their values.
const columns = `host, queue, id, status, stage, priority, eligible_at, not_before, posted_at, idempotency_key, record`

// row is the column values of t, whose stored form is data, in the
// order of columns.
func row(t domain.Task, data []byte) []any {
	var key *string
	if t.IdempotencyKey != "" {
		key = &t.IdempotencyKey
	}
	return []any{t.Host, t.Queue, t.ID, string(t.Status), int16(t.Status.Stage()), int64(t.Priority),
		t.EligibleAt(), t.NotBefore, t.PostedAt, key, data}
}

// insertTask inserts one task: row's values, then itemArg's ($12, $13).
var insertTask = `INSERT INTO tasks (` + columns + `, item) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, ` + itemSQL("$12::text", "$13::bool", "$11") + `)`

// insertArgs are insertTask's arguments.
func insertArgs(t domain.Task, data []byte) []any {
	item, unsure := itemArg(t)
	return append(row(t, data), item, unsure)
}

// decode rebuilds a record read from the database.
func decode(data []byte) (domain.Task, error) {
	t, err := domain.DecodeTask(data)
	if err != nil {
		return domain.Task{}, &domain.Error{Kind: domain.KindInternal, Code: domain.CodeInvalidTask, Message: "a stored record does not read back", Err: err}
	}
	return t, nil
}

// checkNew and checkUpdate are domain.VetNew and VetChange.
func checkNew(t domain.Task) (domain.Task, []byte, error) { return domain.VetNew(t) }

func checkUpdate(cur, next domain.Task) (domain.Task, []byte, error) {
	return domain.VetChange(cur, next)
}

// Create stores a new task in one statement (with its posted line, when
// the store writes lines: log.go, in one transaction), in a batch with the
// server's other changes (group.go): the primary key refuses a taken id
// (ErrExists), the unique index a taken idempotency key (ErrKeyTaken), so
// of posts racing with one key exactly one is stored.
func (s *Store) Create(ctx context.Context, t domain.Task, then ports.Then) error {
	stored, data, err := checkNew(t)
	if err != nil {
		return err
	}
	o := &op{kind: opCreate, ctx: ctx, key: domain.KeyOf(stored), task: stored, data: data}
	// Alone, the post's record goes into its queue's stock as soon as it
	// waits for a batch, and wakes a claim, which may then ride the same
	// batch (stock.go, Claims riding their posts). Should the post not be
	// stored by its batch, the stock is read anew.
	var posted bool
	if s.alone != nil && s.alone() {
		o.queued = func() {
			if posted = s.queue(o.key.Ref()).stock.posting(o); posted {
				s.release(map[domain.QueueRef]int{o.key.Ref(): 1})
			}
		}
	}
	s.run(o)
	if posted && !o.stored {
		s.queue(o.key.Ref()).stock.drop()
	}
	thenErr := s.settleOp(o, func() error { return then.Call(stored) })
	switch {
	case o.alone:
		return s.createAlone(ctx, stored, data, then)
	case o.err != nil:
		return o.err
	}
	return thenErr
}

// createAlone is Create outside a batch.
func (s *Store) createAlone(ctx context.Context, stored domain.Task, data []byte, then ports.Then) error {
	if s.staged != nil {
		return s.createLogged(ctx, stored, data, then)
	}
	q := s.queue(domain.KeyOf(stored).Ref())
	ticket := q.seq.take(stored.ID)
	_, err := s.pool.Exec(ctx, insertTask, insertArgs(stored, data)...)
	if err != nil {
		q.unsure(ticket, stored.ID)
		return createFailed("task "+stored.ID, err)
	}
	return q.stored(ticket, stored, data, func() error { return then.Call(stored) })
}

// createLogged stores a new task and its posted line in one transaction:
// one statement when no body is archived.
func (s *Store) createLogged(ctx context.Context, stored domain.Task, data []byte, then ports.Then) error {
	if ev, archive, logged, ok := s.staged(ctx); ok && !archive {
		q := s.queue(domain.KeyOf(stored).Ref())
		ticket := q.seq.take(stored.ID)
		_, err := s.pool.Exec(ctx, `WITH task AS (`+insertTask+` RETURNING 1)
			`+insertLineSQL+` SELECT $14, $1, $2, $3, $15 FROM task`,
			append(insertArgs(stored, data), lineArgs(ev)...)...)
		if err != nil {
			q.unsure(ticket, stored.ID)
			return createFailed("task "+stored.ID, err)
		}
		logged()
		return q.stored(ticket, stored, data, func() error { return then.Call(stored) })
	}
	// Archived bodies: the INSERT, the bodies and the line in one batch,
	// one implicit transaction.
	q := s.queue(domain.KeyOf(stored).Ref())
	b := &pgx.Batch{}
	b.Queue(insertTask, insertArgs(stored, data)...)
	logged, err := s.stageLine(ctx, b)
	if err != nil {
		return err
	}
	ticket := q.seq.take(stored.ID)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		q.unsure(ticket, stored.ID)
		return createFailed("task "+stored.ID, err)
	}
	if logged != nil {
		logged()
	}
	return q.stored(ticket, stored, data, func() error { return then.Call(stored) })
}

// createFailed is the error of a refused INSERT of what ("task ID").
func createFailed(what string, err error) error {
	switch c, ok := uniqueViolation(err); {
	case ok && c == "tasks_pkey":
		return fmt.Errorf("create %s: %w", what, domain.ErrExists)
	case ok && c == "tasks_idempotency_key":
		return fmt.Errorf("create %s: %w", what, domain.ErrKeyTaken)
	}
	return fail("create "+what, err)
}

// CreateAll stores new tasks of one queue all or none (a batch post) in
// one transaction: one INSERT of every row (arrays, rows.go) and, when the
// store writes lines, one of their posted lines, after their archived
// bodies, sent in one round trip as one implicit transaction, as
// createLogged's. A taken id or key, or any refusal of one row, fails the
// statement and so the lot: nothing is stored, and every task becomes
// claimable at the one COMMIT. It does not join the group's batches
// (group.go): those store the posts they can and run the refused ones
// alone, where a batch post is to be refused whole; with up to 1 000 rows
// it is a batch of its own. Its tickets are taken in order before the
// statement, and its Thens run in them after the COMMIT.
func (s *Store) CreateAll(ctx context.Context, ts []domain.Task, then ports.Then) error {
	if len(ts) == 0 {
		return nil
	}
	ref := domain.KeyOf(ts[0]).Ref()
	stored, data, err := domain.VetBatch(ts)
	if err != nil {
		return err
	}
	var rows tasksColumns
	var items texts
	var unsure bools
	for i := range stored {
		rows.add(stored[i], data[i])
		item, u := itemArg(stored[i])
		items.addOrNull(item)
		unsure.add(u)
	}
	b := &pgx.Batch{}
	logged, lines, err := s.stageLines(ctx, b, stored)
	if err != nil {
		return err
	}
	b.Queue(insertTasksSQL, append(rows.args(), &items, &unsure)...)
	if logged != nil {
		b.Queue(insertLineSQL+` SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[])`, lines.args()...)
	}
	q := s.queue(ref)
	tickets := make([]uint64, len(stored))
	for i, t := range stored {
		tickets[i] = q.seq.take(t.ID)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		for i, t := range stored {
			q.unsure(tickets[i], t.ID)
		}
		return createFailed(fmt.Sprintf("%d tasks", len(ts)), err)
	}
	if logged != nil {
		logged()
	}
	var first error
	for i, t := range stored {
		if err := q.stored(tickets[i], t, data[i], func() error { return then.Call(t) }); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// stageLines queues in b the archived bodies of the posted lines staged
// for the batch of tasks ts (StagedBatch), and returns the lines, and the
// function to call once b committed (nil when none is staged).
func (s *Store) stageLines(ctx context.Context, b *pgx.Batch, ts []domain.Task) (logged func(), lines *lineColumns, err error) {
	if s.stagedBatch == nil {
		return nil, nil, nil
	}
	evs, archive, logged, ok := s.stagedBatch(ctx)
	if !ok {
		return nil, nil, nil
	}
	if len(evs) != len(ts) {
		return nil, nil, domain.E(domain.KindInternal, domain.CodeInternal, "%d lines staged for %d tasks", len(evs), len(ts))
	}
	lines = &lineColumns{}
	for _, ev := range evs {
		var archived []string
		if archive {
			if archived, err = queueBodies(b, ev); err != nil {
				return nil, nil, err
			}
		}
		lines.add(ev, archived)
	}
	return logged, lines, nil
}

// insertTasksSQL inserts the rows of tasksColumns ($1 to $11) with their
// items ($12, $13: itemArg's), refusing the lot if an id or key is taken.
var insertTasksSQL = `INSERT INTO tasks (` + columns + `, item)
	SELECT v.host, v.queue, v.id, v.status, v.stage, v.priority, v.eligible_at, v.not_before, v.posted_at, v.idempotency_key, v.record, ` + itemSQL("v.item", "v.unsure", "v.record") + `
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int2[], $6::int8[], $7::int8[], $8::int8[], $9::int8[], $10::text[], $11::bytea[],
		$12::text[], $13::bool[]) AS v(host, queue, id, status, stage, priority, eligible_at, not_before, posted_at, idempotency_key, record, item, unsure)`

// Get returns the current record of a task, once the Then of its latest
// change made by this Store has returned, and once the read hook (see
// OnRead) has returned.
func (s *Store) Get(ctx context.Context, k domain.Key) (domain.Task, error) {
	if !named(k) {
		return domain.Task{}, domain.ErrNotFound
	}
	var data []byte
	var now int64
	err := s.pool.QueryRow(ctx, `SELECT record, (extract(epoch FROM clock_timestamp()) * 1000)::bigint FROM tasks
		WHERE host = $1 AND queue = $2 AND id = $3`, k.Host, k.Queue, k.ID).Scan(&data, &now)
	t, err := s.read(k.Ref(), data, err, "get task "+k.ID)
	if err == nil && s.onRead != nil {
		s.onRead(ctx, t, time.Duration(now-lastChange(t))*time.Millisecond)
	}
	return t, err
}

// named reports whether k can name a stored task: Create stores none
// whose names domain.VetNew refuses. A key from a client (an id in a path
// or a socket message) may hold what a text column cannot, a NUL or bytes
// that are not UTF-8; sent to the database, the statement would fail
// (22021), answered 500 instead of 404, and in a batch it would fail every
// change batched with it.
func named(k domain.Key) bool {
	return domain.ValidHost(k.Host) && domain.ValidName(k.Queue) && domain.ValidID(k.ID)
}

// ReadHook is told of each record Get read, and how long before the read
// (by the database's clock) its latest change was stamped.
type ReadHook = func(ctx context.Context, t domain.Task, age time.Duration)

// OnRead has Get call h with each record it read before returning it:
// pgnotify waits there until a change another server made has been
// announced here (pgnotify.Notifier.Readable). Call it before serving.
func (s *Store) OnRead(h ReadHook) { s.onRead = h }

// lastChange is the time of t's latest change (Unix ms): every change
// stamps updatedAt but fetch, which stamps fetchedAt.
func lastChange(t domain.Task) int64 {
	at := t.UpdatedAt
	if t.FetchedAt != nil {
		at = max(at, *t.FetchedAt)
	}
	return at
}

// ByKey returns the task of ref holding idempotency key key.
func (s *Store) ByKey(ctx context.Context, ref domain.QueueRef, key string) (domain.Task, error) {
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT record FROM tasks WHERE host = $1 AND queue = $2 AND idempotency_key = $3`, ref.Host, ref.Queue, key).Scan(&data)
	return s.read(ref, data, err, "task by key")
}

// read decodes a record read by Get or ByKey, after waiting for its Then.
func (s *Store) read(ref domain.QueueRef, data []byte, err error, op string) (domain.Task, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Task{}, domain.ErrNotFound
	}
	if err != nil {
		return domain.Task{}, fail(op, err)
	}
	t, err := decode(data)
	if err != nil {
		return domain.Task{}, err
	}
	s.queue(ref).seq.settle(t.ID)
	return t, nil
}

// selectForUpdate reads a task's record and locks its row.
const selectForUpdate = `SELECT record FROM tasks WHERE host = $1 AND queue = $2 AND id = $3 FOR UPDATE`

// updateRow writes a task's row: row's values, in order.
const updateRow = `UPDATE tasks SET status = $4, stage = $5, priority = $6, eligible_at = $7, not_before = $8, posted_at = $9, idempotency_key = $10, record = $11
	WHERE host = $1 AND queue = $2 AND id = $3`

// Update applies fn to the current record and stores the result, in one
// transaction holding the task's row, in a batch with the server's other
// changes (group.go). A task this Store last stored processing is changed
// on a guess of its record, and on the locked row when the guess misses
// (guess.go).
func (s *Store) Update(ctx context.Context, k domain.Key, fn func(*domain.Task) error, then ports.Then) (domain.Task, error) {
	if !named(k) {
		return domain.Task{}, domain.ErrNotFound
	}
	o := &op{kind: opUpdate, ctx: ctx, key: k, fn: fn}
	if g, ok := s.recent.take(k); ok {
		o.guess = &g
	}
	s.run(o)
	thenErr := s.settleOp(o, func() error { return then.Call(o.out) })
	if o.missed {
		o = &op{kind: opUpdate, ctx: ctx, key: k, fn: fn}
		s.run(o)
		thenErr = s.settleOp(o, func() error { return then.Call(o.out) })
	}
	switch {
	case o.alone:
		return s.updateAlone(ctx, k, fn, then)
	case o.err != nil:
		return o.out, o.err
	}
	return o.out, thenErr
}

// updateAlone is Update in a transaction of its own (two round trips:
// txn.go).
func (s *Store) updateAlone(ctx context.Context, k domain.Key, fn func(*domain.Task) error, then ports.Then) (domain.Task, error) {
	return retry(ctx, s, func() (domain.Task, error) {
		var data []byte
		tx, err := s.lock(ctx, selectForUpdate, []any{k.Host, k.Queue, k.ID}, &data)
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.Task{}, domain.ErrNotFound
		}
		if err != nil {
			return domain.Task{}, fail("update task "+k.ID, err)
		}
		return s.change(ctx, tx, data, fn, then)
	})
}

// change runs fn on the record data, locked by tx, and stores and commits
// what fn leaves, then runs then in its queue's turn. On a refusal it
// returns the record as it was with the refusal. It ends tx.
func (s *Store) change(ctx context.Context, tx *txn, data []byte, fn func(*domain.Task) error, then ports.Then) (domain.Task, error) {
	cur, err := decode(data)
	if err != nil {
		tx.rollback()
		return domain.Task{}, err
	}
	next := cur.Clone()
	if err := fn(&next); err != nil {
		tx.rollback()
		s.letGo(cur)
		return cur, err
	}
	stored, data, err := checkUpdate(cur, next)
	if err != nil {
		tx.rollback()
		s.letGo(cur)
		return cur, err
	}
	b := &pgx.Batch{}
	b.Queue(updateRow, row(stored, data)...)
	err = s.commit(ctx, tx, b, cur, stored, data, func() error { return then.Call(stored) })
	if err == nil {
		s.recent.stored(stored, data)
	}
	return stored, err
}

// letGo wakes a claim for cur if it is pending: its transaction held it
// and let it go unchanged (see release).
func (s *Store) letGo(cur domain.Task) {
	if cur.Status == domain.Pending {
		s.release(map[domain.QueueRef]int{domain.KeyOf(cur).Ref(): 1})
	}
}

// commit queues the change's line in b, commits b in tx (the change of
// the record cur into t, stored as data; nil: deleted), and runs then in
// t's queue's turn.
func (s *Store) commit(ctx context.Context, tx *txn, b *pgx.Batch, cur, t domain.Task, data []byte, then func() error) error {
	logged, err := s.stageLine(ctx, b)
	if err != nil {
		tx.rollback()
		s.letGo(cur)
		return err
	}
	q := s.queue(domain.KeyOf(t).Ref())
	ticket := q.seq.take(t.ID)
	if err := tx.commit(ctx, b); err != nil {
		q.unsure(ticket, t.ID)
		s.letGo(cur)
		return fail("commit task "+t.ID, err)
	}
	if logged != nil {
		logged()
	}
	return q.stored(ticket, t, data, then)
}

// claimBatch is how many candidates a claim with a query reads at a time.
const claimBatch = 64

// ClaimNext applies fn to the first claimable pending task of ref in claim
// order that m accepts. Without m it is taken from stock while this Store
// is alone on the database (stock.go), else locked in a batch (group.go);
// with m it tests candidates in claim order and locks only one m accepts
// (see the package comment).
func (s *Store) ClaimNext(ctx context.Context, ref domain.QueueRef, m ports.Matcher, now time.Time, fn func(*domain.Task) error, then ports.Then) (domain.Task, error) {
	nowMs := domain.Millis(now)
	if m == nil {
		if s.alone != nil && s.alone() {
			if t, ok, err := s.claimStocked(ctx, ref, nowMs, fn, then); ok {
				return t, err
			}
		}
		return s.claimBatched(ctx, ref, nowMs, fn, then)
	}
	if err := s.promote(ctx, ref, nowMs); err != nil {
		return domain.Task{}, err
	}
	f := filterOf(m)
	var after *domain.Task
	for {
		batch, err := s.candidates(ctx, ref, nowMs, after, f)
		if err != nil {
			return domain.Task{}, err
		}
		for _, c := range batch {
			if !(f != nil && f.exact && c.inSQL) && !m.Match(c.Item) {
				continue
			}
			t, err := s.claimOne(ctx, domain.KeyOf(c.Task), nowMs, fn, then)
			if !errors.Is(err, errGone) {
				return t, err
			}
		}
		if len(batch) < claimBatch {
			return domain.Task{}, domain.ErrNotFound
		}
		after = &batch[len(batch)-1].Task
	}
}

const claimable = `host = $1 AND queue = $2 AND status = 'pending' AND (not_before IS NULL OR not_before <= $3)`

// unpaused is claimable's condition that the queue ($1, $2) is not paused,
// for the statements that claim beside other servers. Paused trusts a "not
// paused" it read for pauseTTL, but a pause set through another server has
// answered its manager once committed, and from then on no claim may take
// a task (SPEC §12): the claim's own statement reads the pause. Claims from
// stock do without: alone, every pause is set through this Store, which
// Paused knows at once.
const unpaused = ` AND NOT EXISTS (SELECT 1 FROM pauses p WHERE p.host = $1 AND p.queue = $2)`

// claimBatched claims the first claimable task of ref that no other
// transaction holds, in a batch with the server's other changes
// (group.go).
func (s *Store) claimBatched(ctx context.Context, ref domain.QueueRef, now int64, fn func(*domain.Task) error, then ports.Then) (domain.Task, error) {
	o := &op{kind: opClaim, ctx: ctx, ref: ref, now: now, fn: fn}
	s.run(o)
	thenErr := s.settleOp(o, func() error { return then.Call(o.out) })
	switch {
	case o.alone:
		return s.claimFirst(ctx, ref, now, fn, then)
	case o.err != nil:
		return o.out, o.err
	}
	return o.out, thenErr
}

// claimFirst claims the first claimable task of ref that no other
// transaction holds: the locking SELECT, with promote's count when the
// queue's looked-at time moves on, in the first round trip, the write in
// the second.
func (s *Store) claimFirst(ctx context.Context, ref domain.QueueRef, now int64, fn func(*domain.Task) error, then ports.Then) (domain.Task, error) {
	const first = `SELECT record FROM tasks WHERE ` + claimable + unpaused + `
		ORDER BY priority DESC, eligible_at, id LIMIT 1 FOR UPDATE SKIP LOCKED`
	q := s.queue(ref)
	from, moved := q.advance(now)
	return retry(ctx, s, func() (domain.Task, error) {
		var data []byte
		var tx *txn
		var err error
		if moved {
			// One row whether or not a task is claimable: the count of
			// the tasks come due since from, and the first claimable one.
			var due int
			tx, err = s.lock(ctx, `SELECT d.n, c.record FROM (SELECT count(*) AS n FROM tasks WHERE `+dueBetween+`) d
				LEFT JOIN LATERAL (`+first+`) c ON true`, []any{ref.Host, ref.Queue, now, from}, &due, &data)
			if err == nil {
				q.addDue(due)
				moved = false // counted: a retry must not count again
				if data == nil {
					tx.rollback()
					return domain.Task{}, domain.ErrNotFound
				}
			}
		} else {
			tx, err = s.lock(ctx, first, []any{ref.Host, ref.Queue, now}, &data)
		}
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.Task{}, domain.ErrNotFound
		}
		if err != nil {
			return domain.Task{}, fail("claim", err)
		}
		return s.change(ctx, tx, data, fn, then)
	})
}

// errGone: the candidate is no longer claimable, or another transaction
// holds it.
var errGone = errors.New("candidate gone")

// claimOne claims task k if it is still claimable and nobody holds it.
func (s *Store) claimOne(ctx context.Context, k domain.Key, now int64, fn func(*domain.Task) error, then ports.Then) (domain.Task, error) {
	return retry(ctx, s, func() (domain.Task, error) {
		var data []byte
		tx, err := s.lock(ctx, `SELECT record FROM tasks WHERE `+claimable+unpaused+` AND id = $4 FOR UPDATE SKIP LOCKED`, []any{k.Host, k.Queue, now, k.ID}, &data)
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.Task{}, errGone
		}
		if err != nil {
			return domain.Task{}, fail("claim", err)
		}
		return s.change(ctx, tx, data, fn, then)
	})
}

// A candidate is a claimable task a claim with a query reads. inSQL: its
// item is in the column item, so the query's filter judged it.
type candidate struct {
	domain.Task
	inSQL bool
}

// candidates reads the next claimBatch claimable tasks of ref in claim
// order after the task after (nil: from the first) that f lets through
// (nil: all), without locking them.
func (s *Store) candidates(ctx context.Context, ref domain.QueueRef, now int64, after *domain.Task, f *filter) ([]candidate, error) {
	args := []any{ref.Host, ref.Queue, now}
	if after != nil {
		args = append(args, int64(after.Priority), after.EligibleAt(), after.ID)
	}
	rows, err := s.pool.Query(ctx, candidatesQuery(after != nil, f), args...)
	if err != nil {
		return nil, fail("claim candidates", err)
	}
	defer rows.Close()
	var out []candidate
	for rows.Next() {
		var data []byte
		var c candidate
		if err := rows.Scan(&data, &c.inSQL); err != nil {
			return nil, fail("claim candidates", err)
		}
		if c.Task, err = decode(data); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fail("claim candidates", err)
	}
	return out, nil
}

// candidatesQuery is candidates' statement: host $1, queue $2, now $3 and,
// after, the claim order's position to read on from ($4 to $6).
func candidatesQuery(after bool, f *filter) string {
	query := `SELECT record, item IS NOT NULL FROM tasks WHERE ` + claimable + unpaused
	if after {
		query += ` AND (priority < $4 OR (priority = $4 AND (eligible_at, id) > ($5, $6)))`
	}
	if f != nil {
		query += ` AND ` + f.where
	}
	return query + fmt.Sprintf(` ORDER BY priority DESC, eligible_at, id LIMIT %d`, claimBatch)
}

// records runs a query of records and decodes them.
func (s *Store) records(ctx context.Context, op, query string, args ...any) ([]domain.Task, error) {
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, fail(op, err)
	}
	defer rows.Close()
	var tasks []domain.Task
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, fail(op, err)
		}
		t, err := decode(data)
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fail(op, err)
	}
	return tasks, nil
}

// Delete removes a task if check approves of its current record.
func (s *Store) Delete(ctx context.Context, k domain.Key, check func(domain.Task) error, then ports.Then) error {
	if !named(k) {
		return domain.ErrNotFound
	}
	_, err := retry(ctx, s, func() (struct{}, error) {
		var data []byte
		tx, err := s.lock(ctx, selectForUpdate, []any{k.Host, k.Queue, k.ID}, &data)
		if errors.Is(err, pgx.ErrNoRows) {
			return struct{}{}, domain.ErrNotFound
		}
		if err != nil {
			return struct{}{}, fail("delete task "+k.ID, err)
		}
		cur, err := decode(data)
		if err != nil {
			tx.rollback()
			return struct{}{}, err
		}
		if check != nil {
			if err := check(cur.Clone()); err != nil {
				tx.rollback()
				s.letGo(cur)
				return struct{}{}, err
			}
		}
		s.recent.forget(k)
		b := &pgx.Batch{}
		b.Queue(`DELETE FROM tasks WHERE host = $1 AND queue = $2 AND id = $3`, k.Host, k.Queue, k.ID)
		return struct{}{}, s.commit(ctx, tx, b, cur, cur, nil, func() error { return then.Call(cur) })
	})
	return err
}
