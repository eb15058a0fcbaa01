package postgres

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskhoster/taskhoster/domain"
)

// Group commit. The changes one server makes at the same time (posts,
// claims without a query, updates) go into one transaction together, so
// that a busy server pays two round trips and one COMMIT for a batch of
// changes instead of for each, as River does for its fetches and
// completions. Nothing waits to fill a batch: a change that arrives while
// fewer than maxLeaders batches run starts one at once (alone, when the
// server is idle); the changes that arrive while all leaders are busy are
// taken together by the next leader that is free.
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
// stored. Each change takes its ticket while the batch holds the rows, and
// its caller runs its Then after the COMMIT in ticket order, as alone.
//
// A batch the database refuses as a whole before COMMIT (a statement's
// error: a unique key taken, a serialization failure, a deadlock) changed
// nothing: each of its changes is then run alone, as it would have been
// without the batch, and gets its own answer. A batch whose COMMIT got no
// answer (the connection dropped) may or may not have committed: each
// change is answered unavailable, as a change alone would be.

// maxLeaders is how many batches one Store runs at once; maxBatch how many
// changes one takes.
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

	// What the batch did, read by the caller once done is closed.
	done     chan struct{}
	out      domain.Task // the record stored (or, refused, as it was)
	err      error
	alone    bool // the batch failed before COMMIT: run the change alone
	stored   bool
	ticketed bool
	ticket   uint64
	logged   func() // the staged line's, to call once committed
	write    int    // the index of its write in the second round trip
}

// group collects the changes waiting for a leader.
type group struct {
	mu      sync.Mutex
	waiting []*op
	leaders int
}

// run hands o to a batch and waits until the batch is done with it.
func (s *Store) run(o *op) {
	o.done = make(chan struct{})
	g := &s.group
	g.mu.Lock()
	g.waiting = append(g.waiting, o)
	if g.leaders < maxLeaders {
		g.leaders++
		go s.lead()
	}
	g.mu.Unlock()
	<-o.done
}

// lead runs batches until no change is waiting.
func (s *Store) lead() {
	for {
		batch := s.take()
		if batch == nil {
			return
		}
		s.batch(batch)
	}
}

// take removes up to maxBatch waiting changes, none of a task another
// already taken changes, in the order they arrived; nil (and the leader
// leaves) when none is waiting.
func (s *Store) take() []*op {
	g := &s.group
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiting) == 0 {
		g.leaders--
		return nil
	}
	var batch, left []*op
	keys := make(map[domain.Key]bool)
	for _, o := range g.waiting {
		if len(batch) == maxBatch || (o.kind != opClaim && keys[o.key]) {
			left = append(left, o)
			continue
		}
		if o.kind != opClaim {
			keys[o.key] = true
		}
		batch = append(batch, o)
	}
	g.waiting = left
	return batch
}

// finish answers every op of the batch.
func finish(ops []*op) {
	for _, o := range ops {
		close(o.done)
	}
}

// batch runs ops in one transaction (see Group commit).
func (s *Store) batch(ops []*op) {
	defer finish(ops)
	// A change whose caller gave up before its batch began is not made.
	live := ops[:0:0]
	for _, o := range ops {
		if err := o.ctx.Err(); err != nil {
			o.err = err
			continue
		}
		live = append(live, o)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		everyAlone(live)
		return
	}
	tx := &txn{conn: conn}
	defer tx.rollback()

	// The first round trip: BEGIN and the locks.
	var updates []*op
	claims := map[domain.QueueRef][]*op{}
	var queues []domain.QueueRef
	for _, o := range live {
		switch o.kind {
		case opUpdate:
			updates = append(updates, o)
		case opClaim:
			if claims[o.ref] == nil {
				queues = append(queues, o.ref)
			}
			claims[o.ref] = append(claims[o.ref], o)
		}
	}
	// The queues whose looked-at time this batch moved on: if the batch
	// fails before its count is read, the count is taken again alone, so
	// that Due misses none.
	type moved struct {
		ref      domain.QueueRef
		from, to int64
		counted  bool
	}
	var advanced []*moved
	recount := func() {
		for _, m := range advanced {
			if m.counted {
				continue
			}
			var n int
			if s.pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE `+dueBetween, m.ref.Host, m.ref.Queue, m.to, m.from).Scan(&n) == nil {
				s.queue(m.ref).addDue(n)
			}
		}
	}
	rows := map[domain.Key][]byte{}
	claimed := map[domain.QueueRef][][]byte{}
	if len(updates) > 0 || len(queues) > 0 {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		if len(updates) > 0 {
			hosts, qs, ids := make([]string, len(updates)), make([]string, len(updates)), make([]string, len(updates))
			for i, o := range updates {
				hosts[i], qs[i], ids[i] = o.key.Host, o.key.Queue, o.key.ID
			}
			b.Queue(`SELECT host, queue, id, record FROM tasks
				WHERE (host, queue, id) IN (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))
				ORDER BY host, queue, id FOR UPDATE`, hosts, qs, ids).Query(func(r pgx.Rows) error {
				for r.Next() {
					var k domain.Key
					var data []byte
					if err := r.Scan(&k.Host, &k.Queue, &k.ID, &data); err != nil {
						return err
					}
					rows[k] = data
				}
				return r.Err()
			})
		}
		for _, ref := range queues {
			cs := claims[ref]
			now := cs[0].now // the earliest: no task is claimed before its time
			for _, o := range cs {
				now = min(now, o.now)
			}
			q := s.queue(ref)
			if from, ok := q.advance(now); ok {
				m := &moved{ref: ref, from: from, to: now}
				advanced = append(advanced, m)
				b.Queue(`SELECT count(*) FROM tasks WHERE `+dueBetween, ref.Host, ref.Queue, now, from).QueryRow(func(r pgx.Row) error {
					var n int
					if err := r.Scan(&n); err != nil {
						return err
					}
					q.addDue(n)
					m.counted = true
					return nil
				})
			}
			held := []string{} // this batch's updates of the queue hold these rows already
			for _, o := range updates {
				if o.key.Ref() == ref {
					held = append(held, o.key.ID)
				}
			}
			b.Queue(`SELECT record FROM tasks WHERE `+claimable+` AND NOT (id = ANY($4))
				ORDER BY priority DESC, eligible_at, id LIMIT $5 FOR UPDATE SKIP LOCKED`,
				ref.Host, ref.Queue, now, held, len(cs)).Query(func(r pgx.Rows) error {
				for r.Next() {
					var data []byte
					if err := r.Scan(&data); err != nil {
						return err
					}
					claimed[ref] = append(claimed[ref], data)
				}
				return r.Err()
			})
		}
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			if retryable(err) {
				s.retries.Add(1) // each change is run again, alone
			}
			recount()
			everyAlone(live)
			return
		}
	} else {
		// Posts only: BEGIN goes with the writes.
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			everyAlone(live)
			return
		}
	}

	// fn decides each change on its locked record.
	w := &pgx.Batch{}
	for _, o := range live {
		var data []byte
		switch o.kind {
		case opCreate:
			s.queueCreate(w, o)
			continue
		case opUpdate:
			var ok bool
			if data, ok = rows[o.key]; !ok {
				o.err = domain.ErrNotFound
				continue
			}
		case opClaim:
			if len(claimed[o.ref]) == 0 {
				o.err = domain.ErrNotFound
				continue
			}
			data = claimed[o.ref][0]
			claimed[o.ref] = claimed[o.ref][1:]
		}
		cur, err := decode(data)
		if err != nil {
			o.err = err
			continue
		}
		next := cur.Clone()
		if err := o.fn(&next); err != nil {
			o.out, o.err = cur, err
			continue
		}
		stored, data, err := checkUpdate(cur, next)
		if err != nil {
			o.out, o.err = cur, err
			continue
		}
		o.out = stored
		o.write = w.Len()
		w.Queue(updateRow, row(stored, data)...)
		if o.logged, err = s.stageLine(o.ctx, w); err != nil {
			o.err = err
			continue
		}
		o.stored = true
	}
	// The tickets, in batch order, while the rows are held.
	for _, o := range live {
		if o.stored {
			o.ticket = s.queue(domain.KeyOf(o.out).Ref()).seq.take(o.out.ID)
			o.ticketed = true
		}
	}
	if w.Len() == 0 {
		return // refusals only: nothing to write (the deferred rollback ends tx)
	}

	// The second round trip: the writes and COMMIT.
	tags, err := tx.commitTags(ctx, w)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			if retryable(err) {
				s.retries.Add(1)
			}
			everyAlone(live) // the database refused: nothing was stored
			return
		}
		for _, o := range live {
			if o.stored {
				o.stored, o.err = false, fail("commit task "+o.out.ID, err)
			}
		}
		return
	}
	for _, o := range live {
		if o.kind == opCreate && o.stored && tags[o.write].RowsAffected() == 0 {
			o.stored, o.alone = false, true // a taken id or key: alone, it says which
		}
		if o.stored && o.logged != nil {
			o.logged()
		}
	}
}

// queueCreate queues o's INSERT, and its line when one is staged, as one
// statement that inserts nothing when the id or the idempotency key is
// taken (the caller then runs the create alone, which says which).
func (s *Store) queueCreate(w *pgx.Batch, o *op) {
	if s.staged != nil {
		if ev, archive, logged, ok := s.staged(o.ctx); ok {
			if archive {
				o.alone = true // the bodies are statements of their own
				return
			}
			o.write = w.Len()
			w.Queue(`WITH task AS (
					INSERT INTO tasks (`+columns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
					ON CONFLICT DO NOTHING RETURNING 1)
				`+insertLineSQL+` SELECT $12, $1, $2, $3, $13 FROM task`,
				append(row(o.task, o.data), lineArgs(ev)...)...)
			o.out, o.logged, o.stored = o.task, logged, true
			return
		}
	}
	o.write = w.Len()
	w.Queue(`INSERT INTO tasks (`+columns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING`, row(o.task, o.data)...)
	o.out, o.stored = o.task, true
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
		return q.seq.run(o.ticket, o.out.ID, nil)
	}
	return q.seq.run(o.ticket, o.out.ID, then)
}
