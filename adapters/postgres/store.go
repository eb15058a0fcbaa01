// Package postgres keeps tasks and pauses in PostgreSQL (jackc/pgx v5,
// pgxpool): ports.TaskRepository and ports.Pauses for servers that share
// one database (issue 14).
//
// Schema. One row per task in tasks, keyed (host, queue, id). The record
// itself is stored whole, in its stored form (domain.EncodeTask) as bytea,
// so what is read back is what was stored, byte for byte; the fields that
// queries sort or filter by are columns beside it: status and stage,
// priority, eligible_at, not_before, posted_at (Unix ms) and
// idempotency_key, under a unique index per queue. Paused queues are rows
// of pauses. Migrations (migrate.go) run at Open, versioned in
// schema_migrations, under a transaction-scoped advisory lock so that two
// servers starting at once migrate once.
//
// One transaction per rule. Update, ClaimNext and Delete lock the task's
// row (SELECT … FOR UPDATE), run fn and domain.CheckTransition on the
// record read, write the row and commit; whoever holds the row decides, so
// races (two claims, a result against a timeout) are decided by fn on the
// current record. A rule costs two round trips (txn.go: BEGIN with the
// locking SELECT; the write, its line and COMMIT). The claims without a
// query and updates one server makes at the same time share one
// transaction, and its posts another (group commit, group.go): each still
// decided by its fn on its locked row (or, for a task this Store holds
// processing, on the record it stored last, written only where that is
// still the row's: guess.go), two round trips and one COMMIT for the lot. A claim
// without a query takes the first claimable pending rows in claim order,
// FOR UPDATE SKIP LOCKED; a server alone on the database takes them from
// stock instead, records read ahead and kept in step with its own changes,
// with one guarded UPDATE beside its posts (stock.go). A claim with a query reads candidates in claim
// order, a batch at a time and without locks, tests the Matcher on each in
// Go, and locks only a task it accepts (re-checking that it is still
// claimable), so it never claims a task the query rejects nor holds up
// tasks other queries want. What of the
// query (a JSON Schema) SQL can judge is added to the candidates'
// statement as a condition on the item as jsonb (query.go), and when that
// condition is exact the Go test is skipped. A transaction the database aborts with a
// serialization failure or a deadlock is run again (txn.go).
//
// Event lines. With WriteLines, a change's event line is written in its
// own transaction, before COMMIT (log.go).
//
// Then runs after COMMIT. Running it before COMMIT would publish changes
// nobody can read yet: a claim woken by a post would look, miss the
// uncommitted task and go back to sleep with the task pending. So a change
// takes a ticket of its queue while it still holds its row lock, commits,
// and then runs its Then in ticket order, one at a time per queue: the
// Then calls of a queue follow store order (a task's later change can take
// its ticket only after the earlier one committed). Get and ByKey on this
// Store wait for a task's Then that is still running, so a Get sees a
// change only once its Then has returned, as the contract asks. Across
// servers adapters/pgnotify carries the news after the COMMIT, and Get
// waits in its read hook (OnRead) until a change another server made has
// been announced here, so a watch does not see it twice.
//
// Clocks. now comes from the caller, as with every store; a server on
// PostgreSQL is given Clock (clock.go), the database's time, so that
// servers with skewed clocks judge leases, delays and retention alike. What
// Due and Counts.Delayed count relative to ("the latest now a claim or Due
// was given") is kept per Store, in memory: it tells this server's waiting
// claims what became claimable.
//
// Durability. A change is durable when its COMMIT returns (with the
// database's synchronous_commit on, its default), so this store needs no
// Syncer: ports.Syncer.Sync has nothing left to flush.
//
// Errors. A database that cannot be reached is domain.KindUnavailable with
// CodeStorageUnavailable (503); see fail.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

var (
	_ ports.TaskRepository = (*Store)(nil)
	_ ports.Pauses         = (*Store)(nil)
)

// Store is a TaskRepository and Pauses on one PostgreSQL database.
type Store struct {
	pool *pgxpool.Pool

	mu     sync.Mutex
	queues map[domain.QueueRef]*queue

	pauses pauseCache

	staged      Staged      // nil: no event lines in the change's transaction (log.go)
	stagedBatch StagedBatch // nil: none in a batch's (CreateAll)

	retries atomic.Int64 // transactions run again (txn.go)

	group  group // claims and updates of locked rows waiting for a batch (group.go)
	direct group // posts and guessed updates waiting for a batch (group.go, run)

	recent recent // the processing records stored last, for guesses (guess.go)

	onRead ReadHook // nil: none (tasks.go, Get)

	onRelease func(domain.QueueRef, int) // nil: none (group.go, release)

	alone func() bool // nil: never alone; claims from stock only while it says yes (stock.go)
}

// Open connects to the database at url (a postgres:// URL or a key=value
// string, as libpq takes), migrates its schema and returns the Store.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, domain.E(domain.KindInvalid, domain.CodeInvalidRequest, "database URL: %v", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		// pgxpool's default, the number of CPUs (at least 4), is too few
		// for changes that each hold a connection while the database
		// flushes its COMMIT: those flushes are shared by the commits
		// that wait together.
		cfg.MaxConns = defaultMaxConns
	}
	for name, value := range sessionSettings {
		if _, set := cfg.ConnConfig.RuntimeParams[name]; !set {
			cfg.ConnConfig.RuntimeParams[name] = value
		}
	}
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, raiseTrimThreshold); err != nil {
			return err
		}
		return registerArrays(conn)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fail("connect to the database", err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return &Store{pool: pool, queues: make(map[domain.QueueRef]*queue), pauses: newPauseCache()}, nil
}

// sessionSettings are the pool's sessions' settings, unless the URL sets
// them. pgx prepares each statement once per connection, but by default
// PostgreSQL plans a prepared statement again at each execution when a
// plan for its values looks cheaper than the generic one, which for the
// batch statements (arrays of any length) it nearly always does, and that
// planning cost as much as half of their execution. Every statement here
// has one right plan whatever its values, so each is planned once. A plan
// kept is made at its first execution, though, maybe on a table nearly
// empty (a new database, or one whose tasks went), where a hash join over a
// scan of the whole table beats looking up a batch's few keys, and kept
// while the table grows. Every statement of this store finds its rows by
// an index (keys, a queue's claim order), so the join and scan methods
// that read a whole table are off: they are still used where nothing else
// can run a statement (a prune of the log by day), but never chosen over an
// index. (In a run of 3 000 tasks on a table emptied before it, they read
// 0.8 to 2.8 million rows.) What they are still used for then costs more
// than any threshold of JIT compilation, whose 70 ms would be spent on a
// prune of a few milliseconds: JIT is off (no statement here gains from it).
var sessionSettings = map[string]string{
	"plan_cache_mode":  "force_generic_plan",
	"enable_seqscan":   "off",
	"enable_hashjoin":  "off",
	"enable_mergejoin": "off",
	"jit":              "off",
}

// raiseTrimThreshold runs once on each new connection. glibc's malloc
// hands the top of a process's heap back to the kernel whenever more than
// its trim threshold (128 KiB at first) lies free there, and a backend of
// PostgreSQL frees a batch's memory at the end of each statement: in some
// runs the backend serving the batches shrank and regrew its heap at
// every batch (brk, the TLB flush after it and the page faults that
// refill it were a quarter of its CPU). glibc raises the threshold to twice
// the largest chunk it has handed back with munmap, so one 1 MiB value
// allocated and freed at the start lets each backend keep up to 2 MiB free
// at the top of its heap, more than a batch frees (perf then showed no brk).
// A backend on another malloc just builds and drops the value.
const raiseTrimThreshold = `SELECT length(repeat('x', 1048576))`

// defaultMaxConns is the pool's size unless the URL sets pool_max_conns.
const defaultMaxConns = 16

// Close closes the connections.
func (s *Store) Close() { s.pool.Close() }

// queue is what the Store keeps in memory about one queue.
type queue struct {
	seq sequencer

	mu     sync.Mutex
	looked int64 // the latest now (ms) given to ClaimNext or Due
	due    int   // tasks become claimable since the last Due
	// held is how many pending rows this Store's claim batches hold now,
	// unheld how many they have let go of in all (HasPending).
	held, unheld int64
	// more: the latest claim batch of the queue saw claimable rows beyond
	// those it locked (HasPending).
	more bool

	stock stock // the first claimable records, for claims from stock (stock.go)
}

// lookedAt notes whether a claim batch saw claimable rows beyond those it
// locked.
func (q *queue) lookedAt(more bool) {
	q.mu.Lock()
	q.more = more
	q.mu.Unlock()
}

// hold counts n pending rows a claim batch locked.
func (q *queue) hold(n int) {
	q.mu.Lock()
	q.held += int64(n)
	q.mu.Unlock()
}

// unhold counts n of them let go, just before their COMMIT is sent (or the
// batch ends without one).
func (q *queue) unhold(n int) {
	q.mu.Lock()
	q.held -= int64(n)
	q.unheld += int64(n)
	q.mu.Unlock()
}

// holding is held and unheld, read together.
func (q *queue) holding() (held, unheld int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.held, q.unheld
}

func (s *Store) queue(ref domain.QueueRef) *queue {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queues[ref]
	if !ok {
		q = &queue{looked: math.MinInt64}
		q.seq.init()
		s.queues[ref] = q
	}
	return q
}

// stored runs then (nil: nothing) in ticket's turn, once the stock has
// taken in t, the record the change stored as data (nil: t was deleted):
// in turn, so that the stock sees a task's changes in store order.
func (q *queue) stored(ticket uint64, t domain.Task, data []byte, then func() error) error {
	return q.seq.run(ticket, t.ID, func() error {
		q.stock.stored(t, data)
		if then == nil {
			return nil
		}
		return then()
	})
}

// unsure passes ticket's turn on for a change of task id that was not
// stored, or may have been (its COMMIT got no answer): the stock, which
// would not know which, is read again.
func (q *queue) unsure(ticket uint64, id string) {
	q.stock.drop()
	_ = q.seq.run(ticket, id, nil)
}

// fail wraps a database error of op: one that says the database cannot be
// reached (or is shutting down, or out of resources) becomes
// KindUnavailable with CodeStorageUnavailable; an ended context stays as
// it is; any other database error is Internal.
func fail(op string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code[:2] {
		case "08", "53", "57", "58", "40": // connection, resources, operator, system, rollback
			return unavailable(op, err)
		}
		return &domain.Error{Kind: domain.KindInternal, Code: domain.CodeInternal, Message: op, Err: err}
	}
	return unavailable(op, err)
}

func unavailable(op string, err error) error {
	return &domain.Error{Kind: domain.KindUnavailable, Code: domain.CodeStorageUnavailable,
		Message: "the task database cannot be reached", Err: fmt.Errorf("%s: %w", op, err)}
}

// uniqueViolation reports which unique constraint err broke, if any.
func uniqueViolation(err error) (constraint string, ok bool) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return pe.ConstraintName, true
	}
	return "", false
}

// shortCtx is the context of the calls the port gives none (Counts,
// Paused): they give up after a few seconds.
func shortCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

// rollback ends tx when it was not committed; its error is of no use.
func rollback(tx pgx.Tx) { _ = tx.Rollback(context.Background()) }
