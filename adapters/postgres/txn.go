package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A rule's transaction in two round trips. pgx's Begin, QueryRow, Exec and
// Commit cost a round trip each: five or six for a change that locks its
// row, runs fn, writes the row and its event line and commits. A txn
// pipelines them instead (pgx.Batch: the statements go out together and
// the server runs them in order), so a change costs two: BEGIN with the
// locking SELECT, and then, once fn has decided in Go, the UPDATE (or
// DELETE), the line and COMMIT. Both halves still run in one transaction
// holding the row lock from the SELECT to the COMMIT, and COMMIT returns
// only once the change is durable (synchronous_commit on). A statement
// that fails makes the server skip the rest of its batch (COMMIT too), and
// the txn rolls back.

// txn is an open transaction on a connection of its own.
type txn struct {
	conn *pgxpool.Conn
}

// lock acquires a connection, begins a transaction on it and runs query
// (a SELECT … FOR UPDATE of one row), scanning the row into dest, all in
// one round trip. On any error, pgx.ErrNoRows included, the transaction
// is already over.
func (s *Store) lock(ctx context.Context, query string, args []any, dest ...any) (*txn, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	t := &txn{conn: conn}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(query, args...)
	br := conn.SendBatch(ctx, b)
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(dest...)
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		t.rollback()
		return nil, err
	}
	return t, nil
}

// commit runs the statements queued in b (and their callbacks) and
// COMMIT in one round trip, and ends the txn.
func (t *txn) commit(ctx context.Context, b *pgx.Batch) error {
	committed, err := t.commitThen(ctx, b, nil)
	if err == nil && !committed {
		err = pgx.ErrTxCommitRollback // the transaction had failed: COMMIT rolled back
	}
	return err
}

// commitThen runs the statements queued in b (and their callbacks) and
// COMMIT, and then what behind queues (the next transaction's BEGIN and
// first statements, group.go), in one round trip; committed: the COMMIT
// went through. Without behind it ends the txn; with it the connection is
// left as it is, in the next transaction or mid-failure, for the caller to
// hand on or roll back. A statement that fails makes the server skip the
// rest, so err is the first failure, before or after the COMMIT.
func (t *txn) commitThen(ctx context.Context, b *pgx.Batch, behind func(*pgx.Batch)) (committed bool, err error) {
	var tag pgconn.CommandTag
	b.Queue("COMMIT").Exec(func(ct pgconn.CommandTag) error {
		tag = ct
		return nil
	})
	if behind != nil {
		behind(b)
	}
	err = t.conn.SendBatch(ctx, b).Close()
	committed = tag.String() == "COMMIT"
	if behind == nil {
		if err != nil || !committed {
			t.rollback()
		} else {
			t.conn.Release()
			t.conn = nil
		}
	}
	return committed, err
}

// rollback ends the txn without committing and gives the connection back.
// A connection left mid-transaction (the ROLLBACK failed) is closed by the
// pool on release.
func (t *txn) rollback() {
	if t.conn == nil {
		return
	}
	if t.conn.Conn().PgConn().TxStatus() != 'I' {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = t.conn.Exec(ctx, "ROLLBACK")
		cancel()
	}
	t.conn.Release()
	t.conn = nil
}

// Retries. A transaction the database aborts to keep its isolation
// (serialization_failure, 40001: CockroachDB runs SERIALIZABLE and expects
// the client to retry; PostgreSQL at REPEATABLE READ or SERIALIZABLE) or to
// break a deadlock (40P01) did nothing: it is run again from the start,
// fn deciding again on the record then current, up to maxAttempts times,
// after a short pause that grows. What is still refused after that is
// KindUnavailable (503), as before.
const maxAttempts = 5

// retryable reports whether err is a transaction the database aborted
// that may simply be run again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// retry runs attempt until it succeeds, fails for another reason, or has
// been run maxAttempts times.
func retry[T any](ctx context.Context, s *Store, attempt func() (T, error)) (T, error) {
	for i := 1; ; i++ {
		v, err := attempt()
		if i == maxAttempts || !retryable(err) {
			return v, err
		}
		s.retries.Add(1)
		pause := time.Duration(i*i) * time.Millisecond
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(pause):
		}
	}
}

// Retries is how many transactions were run again after the database
// aborted them (40001, 40P01).
func (s *Store) Retries() int64 { return s.retries.Load() }
