// Command riverbench runs taskhoster bench's peer workload against River
// (github.com/riverqueue/river, a Go job queue on PostgreSQL), so that
// `taskhoster bench --peers --river BINARY --database-url URL` can set it
// beside Taskhoster and beanstalkd. It is a module of its own: the server
// does not depend on River.
//
// The workload: P producers insert N jobs, one per transaction (BEGIN,
// InsertTx, COMMIT), or with -batch B, B jobs per InsertMany (one
// transaction each, as Taskhoster's batch post is one flush); one River client works them with W×K workers (River's
// MaxWorkers: K jobs in flight per worker, as the bench's peers have); a
// job's work is to note its sequence number and return nil, so River
// completes it. The run ends when every job has been worked once and River
// has marked every job completed in the database. It refuses to run unless
// the session's synchronous_commit is on, so an acknowledged insert or
// completion is durable as Taskhoster's --sync always is.
//
// It prints one JSON object: {"tps": completed jobs per second, ...}.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// benchArgs is one job: its sequence number and a body of the bench's size.
type benchArgs struct {
	Seq  int    `json:"seq"`
	Body string `json:"body"`
}

func (benchArgs) Kind() string { return "taskhoster_bench" }

// ledger counts the jobs worked, once each.
type ledger struct {
	mu     sync.Mutex
	seen   []bool
	dup    int
	worked atomic.Int64
	done   chan struct{}
}

func (l *ledger) work(seq int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq < 0 || seq >= len(l.seen) || l.seen[seq] {
		l.dup++
		return
	}
	l.seen[seq] = true
	if l.worked.Add(1) == int64(len(l.seen)) {
		close(l.done)
	}
}

type benchWorker struct {
	river.WorkerDefaults[benchArgs]
	l *ledger
}

func (w *benchWorker) Work(_ context.Context, job *river.Job[benchArgs]) error {
	w.l.work(job.Args.Seq)
	return nil
}

// Result is what the program prints.
type Result struct {
	TPS               float64 `json:"tps"`
	N                 int     `json:"n"`
	P                 int     `json:"p"`
	W                 int     `json:"w"`
	K                 int     `json:"k"`
	Batch             int     `json:"batch"`
	Seconds           float64 `json:"seconds"`
	InsertSeconds     float64 `json:"insert_seconds"`
	SynchronousCommit string  `json:"synchronous_commit"`
	FetchCooldownMs   float64 `json:"fetch_cooldown_ms"`
	FetchPollMs       float64 `json:"fetch_poll_interval_ms"`
	Server            string  `json:"server_version"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "riverbench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		url       = flag.String("database-url", os.Getenv("TASKHOSTER_DATABASE_URL"), "the PostgreSQL database (River's tables are created there and emptied before the run)")
		n         = flag.Int("n", 20000, "jobs")
		p         = flag.Int("p", 8, "producers, each inserting one job per transaction")
		w         = flag.Int("w", 8, "workers")
		k         = flag.Int("k", 4, "jobs in flight per worker (River's MaxWorkers is w×k)")
		itemBytes = flag.Int("item-bytes", 200, "approximate size of each job's args")
		batch     = flag.Int("batch", 1, "jobs per insert: 1 inserts one per transaction, more with InsertMany (one transaction per batch)")
		cooldown  = flag.Duration("fetch-cooldown", river.FetchCooldownDefault, "River's FetchCooldown (its default unless set)")
		poll      = flag.Duration("fetch-poll-interval", river.FetchPollIntervalDefault, "River's FetchPollInterval (its default unless set)")
		timeout   = flag.Duration("timeout", 10*time.Minute, "the longest the run may take")
	)
	flag.Parse()
	if *url == "" {
		return errors.New("-database-url is required")
	}
	if *n < 1 || *p < 1 || *w < 1 || *k < 1 || *batch < 1 {
		return errors.New("-n, -p, -w, -k and -batch must be at least 1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	cfg, err := pgxpool.ParseConfig(*url)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(*p + 10)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	var res Result
	if err := pool.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('server_version')`).Scan(&res.SynchronousCommit, &res.Server); err != nil {
		return fmt.Errorf("read synchronous_commit: %w", err)
	}
	if res.SynchronousCommit != "on" && res.SynchronousCommit != "remote_apply" && res.SynchronousCommit != "remote_write" {
		return fmt.Errorf("synchronous_commit is %q: the comparison needs it on", res.SynchronousCommit)
	}

	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate River's schema: %w", err)
	}
	if _, err := pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
		return err
	}

	l := &ledger{seen: make([]bool, *n), done: make(chan struct{})}
	workers := river.NewWorkers()
	river.AddWorker(workers, &benchWorker{l: l})
	client, err := river.NewClient(driver, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: *w * *k}},
		Workers:           workers,
		FetchCooldown:     *cooldown,
		FetchPollInterval: *poll,
		Logger:            nil,
	})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = client.Stop(sctx)
	}()

	body := strings.Repeat("x", max(0, *itemBytes-20))
	start := time.Now()
	// firsts hands out the first sequence number of each insert.
	firsts := make(chan int, *n / *batch + 1)
	for i := 0; i < *n; i += *batch {
		firsts <- i
	}
	close(firsts)
	errs := make(chan error, *p)
	var wg sync.WaitGroup
	for range *p {
		wg.Go(func() {
			for first := range firsts {
				var err error
				if *batch == 1 {
					err = insertOne(ctx, pool, client, benchArgs{Seq: first, Body: body})
				} else {
					err = insertMany(ctx, client, first, min(first+*batch, *n), body)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	inserted := time.Since(start)
	select {
	case err := <-errs:
		return fmt.Errorf("insert: %w", err)
	default:
	}
	select {
	case <-l.done:
	case <-ctx.Done():
		return fmt.Errorf("%d of %d jobs worked when the time ran out", l.worked.Load(), *n)
	}
	// River completes jobs in batches after Work returns: the run ends
	// when the database says every job is completed.
	for {
		var completed int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&completed); err != nil {
			return err
		}
		if completed == *n {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%d of %d jobs completed in the database when the time ran out", completed, *n)
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	l.mu.Lock()
	dup := l.dup
	l.mu.Unlock()
	if dup > 0 {
		return fmt.Errorf("%d jobs were worked more than once", dup)
	}
	res.TPS = float64(*n) / elapsed.Seconds()
	res.N, res.P, res.W, res.K, res.Batch = *n, *p, *w, *k, *batch
	res.Seconds, res.InsertSeconds = elapsed.Seconds(), inserted.Seconds()
	res.FetchCooldownMs = float64(*cooldown) / float64(time.Millisecond)
	res.FetchPollMs = float64(*poll) / float64(time.Millisecond)
	return json.NewEncoder(os.Stdout).Encode(res)
}

// insertOne inserts one job in a transaction of its own.
func insertOne(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], args benchArgs) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := client.InsertTx(ctx, tx, args, nil); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// insertMany inserts the jobs first to last-1 with one InsertMany (one
// transaction), and checks that River answered one job per args.
func insertMany(ctx context.Context, client *river.Client[pgx.Tx], first, last int, body string) error {
	params := make([]river.InsertManyParams, 0, last-first)
	for seq := first; seq < last; seq++ {
		params = append(params, river.InsertManyParams{Args: benchArgs{Seq: seq, Body: body}})
	}
	res, err := client.InsertMany(ctx, params)
	if err != nil {
		return err
	}
	if len(res) != len(params) {
		return fmt.Errorf("InsertMany of %d jobs answered %d", len(params), len(res))
	}
	return nil
}
