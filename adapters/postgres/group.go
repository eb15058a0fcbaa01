package postgres

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskhoster/taskhoster/adapters/eventlog"
	"github.com/taskhoster/taskhoster/domain"
)

// Group commit. The changes one server makes at the same time go into
// one transaction together: its claims without a query and updates of
// locked rows in one, its posts and guessed updates in another (two lines
// of batches, side by side: run), so that a busy server pays two round
// trips and one COMMIT for a batch of changes (one round trip for a
// direct batch) instead of for each, as River does for its fetches and
// completions. Nothing waits to fill a
// batch: a change that arrives while no batch of its line runs starts one
// at once (alone, when the server is idle); the changes that arrive while
// one runs are taken together by the next, and another batch of the line
// starts beside it (up to maxLeaders at once) only when they fill more
// than the running leaders will take. Batches side by side would each pay
// their round trips and COMMIT for fewer changes: on two CPUs, four
// leaders at once cost the database twice the CPU per task of one.
//
// A batch is the rules' one transaction each, done side by side: the
// first round trip locks every row the batch touches (the updates' rows by
// key, in key order, so that two batches never wait on each other in a
// circle; the claims' with SKIP LOCKED, as many per queue as it has
// claims, leaving out the rows the batch's updates hold); then fn and
// domain.CheckTransition decide each change in Go on its locked record,
// exactly as alone; the second round trip writes the rows and their lines
// and COMMITs. Two changes of one task never share a batch (the later
// waits for the next one), so each fn sees the record the one before it
// stored; the one exception, a claim riding its task's post, is decided
// on the record the post stores (Claims riding their posts). Each change
// takes its ticket while the batch holds the rows, and its caller runs
// its Then after the COMMIT in ticket order, as alone.
//
// A batch the database refuses as a whole before COMMIT (a statement's
// error: a unique key taken, a serialization failure, a deadlock) changed
// nothing: each of its changes is then run alone, as it would have been
// without the batch, and gets its own answer. A batch whose COMMIT got no
// answer (the connection dropped) may or may not have committed: each
// change is answered unavailable, as a change alone would be.

// maxLeaders is how many batches of one line a Store runs at once;
// maxBatch how many changes one takes.
const (
	maxLeaders = 4
	maxBatch   = 64
)

type opKind int

const (
	opCreate opKind = iota // insert a new task
	opUpdate               // fn on the task with key
	opClaim                // fn on the first claimable task of ref
)

// op is one change waiting for, or in, a batch.
type op struct {
	kind opKind
	ctx  context.Context
	key  domain.Key      // opCreate, opUpdate
	ref  domain.QueueRef // opClaim
	now  int64           // opClaim
	fn   func(*domain.Task) error
	// opCreate: the record to store and its stored form.
	task domain.Task
	data []byte
	// opUpdate: the record fn decides on instead of the locked row's, its
	// UPDATE guarded by it (guess.go); nil: the row is locked first.
	guess *guess
	// queued, if set, is called once o waits for a batch (Create).
	queued func()
	// rides, of a claim from stock: the post whose record it took before
	// the post was stored. rider, of that post: the claim, once take put
	// both in one batch (Claims riding their posts).
	rides, rider *op

	// What the batch did, read by the caller once done is closed.
	done     chan struct{}
	out      domain.Task // the record stored (or, refused, as it was)
	err      error
	alone    bool // the batch failed before COMMIT: run the change alone
	stored   bool
	ticketed bool
	ticket   uint64
	logged   func() // the staged line's, to call once committed
	// heldPending: the record the batch locked for it was pending.
	heldPending bool
	// missed: the change was not made on its guess (refused on it, or the
	// stored record was another): the caller makes it again, unguessed.
	missed  bool
	written []byte // the stored form of out, once stored
	rode    bool   // a claim written as its post's row (rideBehind)
}

// group collects the changes waiting for a leader.
type group struct {
	mu      sync.Mutex
	waiting []*op
	leaders int
	// claiming are the queues a running batch claims from: a claim of one
	// waits for the next batch (see take).
	claiming map[domain.QueueRef]bool
}

// run hands o to a batch and waits until the batch is done with it.
// Changes that need no row locked first, posts and updates decided on a
// guess (guess.go), have batches of their own (s.direct), beside those of
// claims and the other updates (s.group): a direct batch writes, in one
// round trip with its COMMIT, while the other first locks its rows in a
// round trip of its own; a post or a result that waited for such a batch,
// and then rode the next, took twice as long (a producer that posts one
// task at a time posted half as fast), and made the batches that claims
// wait for longer. New rows are no other batch's to lock, and a guarded
// UPDATE that meets a row another batch holds waits for it and then finds
// its guard failed, so the two lines of batches do not wait on each other
// but for a row both change.
func (s *Store) run(o *op) {
	o.done = make(chan struct{})
	g := &s.group
	if o.kind == opCreate || o.guess != nil {
		g = &s.direct
	}
	g.mu.Lock()
	g.waiting = append(g.waiting, o)
	// A leader starts at once when none runs; another only once the
	// changes waiting fill a batch beyond those the running leaders will
	// take next: changes that wait for a batch to end go into the next one
	// together, one transaction and one COMMIT for the lot.
	if g.leaders == 0 || (g.leaders < maxLeaders && len(g.waiting) > maxBatch*g.leaders) {
		g.leaders++
		go s.lead(g)
	}
	g.mu.Unlock()
	if o.queued != nil {
		o.queued()
	}
	<-o.done
}

// lead runs batches of g until no waiting change can be taken (take).
func (s *Store) lead(g *group) {
	var next *ahead
	for {
		var ops []*op
		var refs []domain.QueueRef
		if next != nil {
			ops, refs = next.ops, next.refs
		} else if ops, refs = g.take(nil, false); ops == nil {
			return
		}
		prev := refs
		next = s.batch(g, ops, refs, next)
		var keep []domain.QueueRef // the queues the next batch claims from
		if next != nil {
			keep = next.refs
		}
		g.mu.Lock()
		for _, ref := range prev {
			if !slices.Contains(keep, ref) {
				delete(g.claiming, ref)
			}
		}
		g.mu.Unlock()
	}
}

// take removes up to maxBatch waiting changes, none of a task another
// already taken changes and no claim of a queue another running batch
// claims from (but own's, the queues of the batch whose COMMIT the taken
// ones will follow on its connection), in the order they arrived, and
// returns them with the queues they claim from. When none can be taken it
// returns nil, and, unless behind (a leader taking a batch to run behind
// its own), the leader leaves.
//
// One claiming batch per queue at a time: a batch whose claims read the
// queue while another's claims are committing sees the rows that one took
// still pending, locks their new versions only to find them taken, and
// comes back short (so its claims look again). The next batch reads
// after the COMMIT, and takes every claim that waited meanwhile. The
// leader of the running batch takes again once it is done, so claims left
// waiting here are never left without a leader.
func (g *group) take(own []domain.QueueRef, behind bool) ([]*op, []domain.QueueRef) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var batch, left []*op
	var refs []domain.QueueRef
	keys := make(map[domain.Key]bool)
	for _, o := range g.waiting {
		if p := o.rides; p != nil && p.rider == nil && slices.Contains(batch, p) {
			// A claim of the record its post is to store goes with the
			// post, whose row it becomes (rideBehind), even past maxBatch.
			p.rider = o
			batch = append(batch, o)
			continue
		}
		if len(batch) == maxBatch || (o.kind != opClaim && keys[o.key]) || (o.rides != nil && slices.Contains(left, o.rides)) {
			left = append(left, o)
			continue
		}
		if o.kind == opClaim {
			if g.claiming[o.ref] && !slices.Contains(own, o.ref) {
				left = append(left, o)
				continue
			}
			if !slices.Contains(refs, o.ref) {
				refs = append(refs, o.ref)
			}
		} else {
			keys[o.key] = true
		}
		batch = append(batch, o)
	}
	g.waiting = left
	if len(batch) == 0 {
		if !behind {
			g.leaders--
		}
		return nil, nil
	}
	if len(refs) > 0 && g.claiming == nil {
		g.claiming = make(map[domain.QueueRef]bool)
	}
	for _, ref := range refs {
		g.claiming[ref] = true
	}
	return batch, refs
}

// finish answers every op of the batch.
func finish(ops []*op) {
	for _, o := range ops {
		close(o.done)
	}
}

// Pipelined batches. A batch of claims and updates costs two round trips:
// the locks, and once fn has decided, the writes and COMMIT. The changes
// that waited meanwhile go into the next batch, whose first round trip,
// BEGIN and its locks, goes out behind the running batch's COMMIT on the
// same connection, in the same round trip: the server runs them in order,
// so the next batch's locks see what this one committed, exactly as if it
// had begun after it, and a busy line costs one round trip per batch, not
// two. Should the running batch's writes or COMMIT fail, the server skips
// what follows, and the next batch begins afresh; should the next batch's
// locks fail after the COMMIT, it too begins afresh, on its own.

// ahead is a batch whose first round trip went out behind the COMMIT of
// the one before it (l and tx nil: it is to begin afresh).
type ahead struct {
	ops  []*op
	refs []domain.QueueRef
	l    *locks
	tx   *txn
}

// locks is a batch on its way: its changes, grouped, and what its first
// round trip locked.
type locks struct {
	live     []*op
	updates  []*op // unguessed updates: their rows are locked by key
	claims   map[domain.QueueRef][]*op
	queues   []domain.QueueRef // the queues claimed from, in order
	advanced []*moved
	rows     map[domain.Key][]byte        // the updates' locked records
	claimed  map[domain.QueueRef][][]byte // the claims' locked records
	// release: the pending rows this batch locked and let go unchanged, by
	// queue, woken for once the transaction is over.
	release map[domain.QueueRef]int
}

// moved is a queue whose looked-at time a batch moved on: if the batch
// fails before its count is read, the count is taken again alone
// (lockFailed), so that Due misses none.
type moved struct {
	ref      domain.QueueRef
	from, to int64
	counted  bool
}

// prepare groups the changes of ops whose callers still wait (a change
// whose caller gave up before its batch began is not made); nil if none.
func prepare(ops []*op) *locks {
	l := &locks{
		claims:  map[domain.QueueRef][]*op{},
		rows:    map[domain.Key][]byte{},
		claimed: map[domain.QueueRef][][]byte{},
		release: map[domain.QueueRef]int{},
	}
	for _, o := range ops {
		if err := o.ctx.Err(); err != nil {
			o.err = err
			continue
		}
		l.live = append(l.live, o)
	}
	if len(l.live) == 0 {
		return nil
	}
	// In key order (claims, which have none, first and as they came): the
	// guarded UPDATE of a direct batch locks its rows as it writes them,
	// and batches that each lock in key order never wait on each other in
	// a circle. Should the database's plan take them in another order, a
	// deadlock it breaks fails the batch, whose changes are then run alone.
	slices.SortStableFunc(l.live, func(a, b *op) int {
		return cmp.Or(cmp.Compare(a.key.Host, b.key.Host), cmp.Compare(a.key.Queue, b.key.Queue), cmp.Compare(a.key.ID, b.key.ID))
	})
	for _, o := range l.live {
		switch o.kind {
		case opUpdate:
			if o.guess == nil {
				l.updates = append(l.updates, o)
			}
		case opClaim:
			if l.claims[o.ref] == nil {
				l.queues = append(l.queues, o.ref)
			}
			l.claims[o.ref] = append(l.claims[o.ref], o)
		}
	}
	return l
}

// locking reports whether the batch has rows to lock first.
func (l *locks) locking() bool { return len(l.updates) > 0 || len(l.queues) > 0 }

// queueLocks queues BEGIN and the statements that lock l's rows into b,
// their callbacks filling l.
func (s *Store) queueLocks(l *locks, b *pgx.Batch) {
	b.Queue("BEGIN")
	if len(l.updates) > 0 {
		hosts, qs, ids := make([]string, len(l.updates)), make([]string, len(l.updates)), make([]string, len(l.updates))
		for i, o := range l.updates {
			hosts[i], qs[i], ids[i] = o.key.Host, o.key.Queue, o.key.ID
		}
		b.Queue(lockRowsSQL, hosts, qs, ids).Query(func(r pgx.Rows) error {
			for r.Next() {
				var k domain.Key
				var data []byte
				if err := r.Scan(&k.Host, &k.Queue, &k.ID, &data); err != nil {
					return err
				}
				l.rows[k] = data
			}
			return r.Err()
		})
	}
	for _, ref := range l.queues {
		cs := l.claims[ref]
		// The latest now of the batch's claims: a task come due by then
		// is taken (assign gives each row to a claim whose own now it is
		// claimable at), so that a claim woken for a task just come due
		// finds it even beside claims that looked a moment earlier.
		now := cs[0].now
		for _, o := range cs {
			now = max(now, o.now)
		}
		held := []string{} // this batch's updates of the queue hold these rows already
		for _, o := range l.updates {
			if o.key.Ref() == ref {
				held = append(held, o.key.ID)
			}
		}
		scan := func(r pgx.Rows, dest ...any) error {
			for r.Next() {
				var data []byte
				if err := r.Scan(append(dest, &data)...); err != nil {
					return err
				}
				if data != nil {
					l.claimed[ref] = append(l.claimed[ref], data)
				}
			}
			return r.Err()
		}
		const first = claimRows
		q := s.queue(ref)
		from, ok := q.advance(now)
		if !ok {
			b.Queue(first, ref.Host, ref.Queue, now, held, len(cs)).Query(func(r pgx.Rows) error { return scan(r) })
		} else {
			// With the count of the tasks come due since the queue's last
			// look, in the same statement: a row per task claimed, or one
			// with no record.
			m := &moved{ref: ref, from: from, to: now}
			l.advanced = append(l.advanced, m)
			b.Queue(claimDueRows, ref.Host, ref.Queue, now, held, len(cs), from).Query(func(r pgx.Rows) error {
				var n int
				if err := scan(r, &n); err != nil {
					return err
				}
				q.addDue(n)
				m.counted = true
				return nil
			})
		}
		// Whether claimable rows are left beyond those the claims
		// locked (HasPending): the rows it counts, up to one more than
		// the claims, include those just locked, still pending.
		b.Queue(countClaimable, ref.Host, ref.Queue, now, held, len(cs)+1).QueryRow(func(r pgx.Row) error {
			var n int
			if err := r.Scan(&n); err != nil {
				return err
			}
			q.lookedAt(n > len(l.claimed[ref]))
			return nil
		})
	}
}

// lockFailed is what a batch whose locks failed (its transaction already
// rolled back) leaves undone: the counts of the tasks come due that it did
// not read, and a wake for each pending row it had locked.
func (s *Store) lockFailed(ctx context.Context, l *locks) {
	for _, m := range l.advanced {
		if m.counted {
			continue
		}
		var n int
		if s.pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE `+dueBetween, m.ref.Host, m.ref.Queue, m.to, m.from).Scan(&n) == nil {
			s.queue(m.ref).addDue(n)
		}
	}
	for ref, rows := range l.claimed {
		l.release[ref] += len(rows)
	}
	s.release(l.release)
}

// batch runs ops, taken with the claims of refs, in one transaction (see
// Group commit). pre, if not nil, is ops' batch whose first round trip
// went out behind the previous batch's COMMIT (Pipelined batches). It
// returns the batch whose first round trip went out behind this one's, if
// any: the leader runs it next.
func (s *Store) batch(g *group, ops []*op, refs []domain.QueueRef, pre *ahead) (next *ahead) {
	defer finish(ops)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var l *locks
	var tx *txn
	if pre != nil && pre.l != nil {
		l, tx = pre.l, pre.tx
	} else {
		if l = prepare(ops); l == nil {
			return nil
		}
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			everyAlone(l.live)
			return nil
		}
		tx = &txn{conn: conn}
		// The first round trip: BEGIN and the locks.
		if l.locking() {
			b := &pgx.Batch{}
			s.queueLocks(l, b)
			if err := conn.SendBatch(ctx, b).Close(); err != nil {
				if retryable(err) {
					s.retries.Add(1) // each change is run again, alone
				}
				tx.rollback()
				s.lockFailed(ctx, l)
				everyAlone(l.live)
				return nil
			}
		}
	}
	live, claims, claimed, release := l.live, l.claims, l.claimed, l.release
	// The deferred calls run in reverse order: the rollback first, then
	// the wakes for the rows it let go.
	defer s.release(release)
	defer tx.rollback()

	// fn decides each change on its locked record; the writes go into
	// arrays, one statement for the posts and one for the updates (rows.go),
	// after the bodies archived.
	w := &pgx.Batch{}
	if !l.locking() {
		w.Queue("BEGIN") // posts and guessed updates only: no lock to take first
	}
	// The claims' rows, pending until COMMIT, are held (see HasPending)
	// until just before COMMIT is sent, or the batch ends without it.
	for ref, rows := range claimed {
		s.queue(ref).hold(len(rows))
	}
	unheld := false
	unhold := func() {
		if !unheld {
			unheld = true
			for ref, rows := range claimed {
				s.queue(ref).unhold(len(rows))
			}
		}
	}
	defer unhold() // before the deferred rollback lets the rows go

	given := map[*op]domain.Task{}
	for ref, rows := range claimed {
		let := assign(claims[ref], rows, given)
		release[ref] += let
	}
	claimedKeys := map[domain.Key]bool{}
	for _, t := range given {
		claimedKeys[domain.KeyOf(t)] = true
	}
	wr := getWrites()
	defer wr.release()
	posts, changes := &wr.posts, &wr.changes
	var err error
	for _, o := range live {
		var cur domain.Task
		switch o.kind {
		case opCreate:
			if r := o.rider; r != nil && r.err == nil && r.ctx.Err() == nil {
				s.rideBehind(posts, o, r)
			} else {
				s.addCreate(posts, o)
			}
			continue
		case opUpdate:
			if o.rode {
				continue // written with its post
			}
			if o.rides != nil && o.rides.rider == o {
				// Paired with its post but not written with it (rideBehind
				// refused, or one of the two gave up): made again.
				o.missed = true
				continue
			}
			if o.guess != nil {
				if claimedKeys[o.key] {
					o.missed = true // a claim of this batch holds the row: not as guessed
					continue
				}
				cur = o.guess.task
				break
			}
			data, ok := l.rows[o.key]
			if !ok {
				o.err = domain.ErrNotFound
				continue
			}
			if cur, err = decode(data); err != nil {
				o.err = err
				continue
			}
		case opClaim:
			var ok bool
			if cur, ok = given[o]; !ok {
				o.err = domain.ErrNotFound
				continue
			}
		}
		o.heldPending = cur.Status == domain.Pending
		// A pending row let go unchanged wakes a claim (see release).
		letGo := func() {
			if cur.Status == domain.Pending {
				release[domain.KeyOf(cur).Ref()]++
			}
		}
		next := cur.Clone()
		if err := o.fn(&next); err != nil {
			if o.guess != nil {
				o.missed = true // refused on the guess: decided again on the row
				continue
			}
			o.out, o.err = cur, err
			letGo()
			continue
		}
		stored, data, err := checkUpdate(cur, next)
		if err != nil {
			if o.guess != nil {
				o.missed = true
				continue
			}
			o.out, o.err = cur, err
			letGo()
			continue
		}
		if s.staged != nil {
			if ev, archive, logged, ok := s.staged(o.ctx); ok {
				var archived []string
				if archive && o.guess != nil && hasBodies(ev) {
					o.missed = true // its bodies would be written whether or not the guess holds
					continue
				}
				if archive {
					if archived, err = queueBodies(w, ev); err != nil {
						o.out, o.err = cur, err
						letGo()
						continue
					}
				}
				changes.lines.add(ev, archived)
				o.logged = logged
			}
		}
		o.out, o.written = stored, data
		var guard []byte
		if o.guess != nil {
			guard = o.guess.data
		}
		changes.add(stored, data, guard)
		o.stored = true
	}
	posts.queue(w)
	changes.queue(w)
	// The tickets, in batch order, while the rows are held.
	for _, o := range live {
		if o.stored {
			o.ticket = s.queue(domain.KeyOf(o.out).Ref()).seq.take(o.out.ID)
			o.ticketed = true
		}
	}
	if len(posts.ops) == 0 && changes.tasks.len() == 0 {
		return nil // refusals only: nothing to write (the deferred rollback ends tx)
	}

	// The second round trip: the writes and COMMIT, and behind them the
	// next batch's BEGIN and locks (Pipelined batches), if changes wait
	// that lock rows.
	if l.locking() {
		if ops, nrefs := g.take(refs, true); ops != nil {
			next = &ahead{ops: ops, refs: nrefs}
			if nl := prepare(ops); nl != nil && nl.locking() {
				next.l = nl
			}
		}
	}
	unhold()
	var behind func(*pgx.Batch)
	if next != nil && next.l != nil {
		behind = func(b *pgx.Batch) { s.queueLocks(next.l, b) }
	}
	committed, err := tx.commitThen(ctx, w, behind)
	if behind != nil {
		if committed && err == nil {
			next.tx = &txn{conn: tx.conn} // the connection is the next batch's now
			tx.conn = nil
		} else {
			tx.rollback()
			s.lockFailed(ctx, next.l)
			next.l = nil // it begins afresh
		}
	}
	if !committed {
		if err == nil {
			err = pgx.ErrTxCommitRollback // the transaction had failed: COMMIT rolled back
		}
		for _, o := range live {
			if o.stored && o.heldPending {
				release[domain.KeyOf(o.out).Ref()]++
			}
		}
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			if retryable(err) {
				s.retries.Add(1)
			}
			everyAlone(live) // the database refused: nothing was stored
			return next
		}
		for _, o := range live {
			if o.stored {
				o.stored, o.err = false, fail("commit task "+o.out.ID, err)
			}
		}
		return next
	}
	for _, o := range live {
		if o.kind == opCreate && o.stored && !posts.created[o.key] {
			o.stored, o.alone = false, true // a taken id or key: alone, it says which
		}
		if o.guess != nil && o.stored && !o.rode && !changes.updated[o.key] {
			o.stored, o.missed, o.logged = false, true, nil // the stored record was another
		}
		if o.rode && o.stored && !posts.created[o.key] {
			o.stored, o.missed, o.logged = false, true, nil // its post was not stored
		}
		if o.stored && o.logged != nil {
			o.logged()
		}
		if o.stored && o.kind != opCreate {
			s.recent.stored(o.out, o.written)
		}
	}
	return next
}

// lockRowsSQL locks the rows of the keys ($1 to $3), in key order.
const lockRowsSQL = `SELECT host, queue, id, record FROM tasks
	WHERE (host, queue, id) IN (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))
	ORDER BY host, queue, id FOR UPDATE`

// claimRows locks the first $5 claimable rows of a queue at now $3 in
// claim order that no other transaction holds, leaving out the ids $4 (the
// rows the batch's updates hold).
const claimRows = `SELECT record FROM tasks WHERE ` + claimable + unpaused + ` AND NOT (id = ANY($4))
	ORDER BY priority DESC, eligible_at, id LIMIT $5 FOR UPDATE SKIP LOCKED`

// claimDueRows is claimRows beside the count of the queue's tasks come
// due since $6 (dueBetween): a row per task claimed, or one with no
// record.
var claimDueRows = `SELECT d.n, c.record FROM (SELECT count(*) AS n FROM tasks WHERE ` + strings.ReplaceAll(dueBetween, "$4", "$6") + `) d
	LEFT JOIN LATERAL (` + claimRows + `) c ON true`

// countClaimable counts the claimable rows of a queue at now $3, up to
// $5, leaving out the ids $4, whether or not another transaction holds
// them. In claim order, so that it reads the first few entries of the
// index of claims: without an order the plan kept is a scan of the table,
// which reads every finished row before the pending ones at its end.
const countClaimable = `SELECT count(*) FROM (SELECT 1 FROM tasks WHERE ` + claimable + unpaused + ` AND NOT (id = ANY($4))
	ORDER BY priority DESC, eligible_at, id LIMIT $5) t`

// assign gives the rows a batch's claims of one queue locked (in claim
// order) to those claims: each row to the first claim, in batch order, not
// given one yet whose own now the task is claimable at, so that no claim
// takes a task before its time. It returns how many rows were left over.
func assign(cs []*op, rows [][]byte, given map[*op]domain.Task) (left int) {
	next := 0 // cs[:next] all have a row
	for _, data := range rows {
		t, err := decode(data)
		taken := false
		for i := next; err == nil && i < len(cs); i++ {
			o := cs[i]
			if _, ok := given[o]; ok || (t.NotBefore != nil && *t.NotBefore > o.now) {
				continue
			}
			given[o], taken = t, true
			for next < len(cs) {
				if _, ok := given[cs[next]]; !ok {
					break
				}
				next++
			}
			break
		}
		if !taken {
			left++
		}
	}
	return left
}

// release has claims woken for n pending tasks of each queue that a
// transaction held and let go unchanged (a claim refused or rolled back, a
// change refused). HasPending leaves out the rows claims hold, so a wake
// handed on while the row was held stopped short: without this the task
// could sit pending while claims wait.
func (s *Store) release(n map[domain.QueueRef]int) {
	if s.onRelease == nil {
		return
	}
	for ref, k := range n {
		if k > 0 {
			s.onRelease(ref, k)
		}
	}
}

// OnRelease has the store call wake(ref, n) once a transaction let go n
// pending tasks of ref it held (see release): the Notifier's Wake. Call
// it before serving.
func (s *Store) OnRelease(wake func(ref domain.QueueRef, n int)) { s.onRelease = wake }

// addCreate adds o's post, and its line when one is staged, to posts.
func (s *Store) addCreate(posts *postRows, o *op) {
	if s.stagePost(posts, o) {
		posts.add(o)
		o.out, o.stored = o.task, true
	}
}

// stagePost adds the posted line of o, when one is staged, to posts. It
// reports false for a post whose event archives bodies: that one is run
// alone (its bodies are statements of their own).
func (s *Store) stagePost(posts *postRows, o *op) bool {
	if s.staged != nil {
		if ev, archive, logged, ok := s.staged(o.ctx); ok {
			if archive {
				o.alone = true
				return false
			}
			posts.lines.add(ev, nil)
			o.logged = logged
		}
	}
	return true
}

// Claims riding their posts. Alone on the database, a server puts a post's
// record in its queue's stock while the post waits for a batch, and wakes
// a claim (Create). A claim that takes that record before the post's
// batch begins goes into the same batch (take), and there the post's row
// is written as the claim made it: one INSERT of the task already
// processing, with its posted line and then its claimed line, instead of a
// pending row, its index entries and an UPDATE of it in the next batch. A
// producer that posts while workers wait is the common case under load.
// The post's Then and then the claim's run in their turn, as if the two
// changes had been stored one after the other; should the post not be
// stored (its id or key taken, the batch refused), neither is, and the
// claim is made again as a claim that missed. A claim that takes the
// record once the post's batch has begun is an ordinary guessed claim:
// its guard holds once the post is committed.

// rideBehind adds post p as the claim r made of its record; if r refuses
// it, p as posted, and r is made again (so too if p runs alone).
func (s *Store) rideBehind(posts *postRows, p, r *op) {
	next := p.task.Clone()
	err := r.fn(&next)
	var claimed domain.Task
	var data []byte
	if err == nil {
		claimed, data, err = checkUpdate(p.task, next)
	}
	if err != nil {
		r.missed = true
		s.addCreate(posts, p)
		return
	}
	if !s.stagePost(posts, p) {
		r.missed = true
		return
	}
	if s.staged != nil {
		if ev, _, logged, ok := s.staged(r.ctx); ok {
			posts.lines.add(ev, nil) // after the posted line: the task's lines in store order
			r.logged = logged
		}
	}
	posts.addAs(p, claimed, data)
	p.out, p.stored = p.task, true
	r.out, r.written, r.stored, r.rode = claimed, data, true, true
}

// hasBodies reports whether ev has bodies to archive (a claim has none).
func hasBodies(ev domain.Event) bool {
	bodies, err := eventlog.Bodies(ev)
	return len(bodies) > 0 || err != nil
}

// everyAlone has each op's change run alone: the batch stored nothing.
func everyAlone(ops []*op) {
	for _, o := range ops {
		if o.err == nil || o.stored {
			o.alone, o.stored, o.logged = true, false, nil
			o.err = nil
		}
	}
}

// settle is what the caller of a batched change does once the batch is
// done with it: it runs then in the change's turn (or passes the turn on,
// if the change was not stored).
func (s *Store) settleOp(o *op, then func() error) error {
	if !o.ticketed {
		return nil
	}
	q := s.queue(domain.KeyOf(o.out).Ref())
	if !o.stored {
		q.unsure(o.ticket, o.out.ID)
		return nil
	}
	data := o.written
	if o.kind == opCreate {
		data = o.data
	}
	return q.stored(o.ticket, o.out, data, then)
}
