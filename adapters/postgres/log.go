package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskhoster/taskhoster/adapters/eventlog"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// The event log in the database (issue 14).
//
// Each line is a row of event_lines: its day, its byte offset in that day's
// virtual file, the host, queue and id it names, and its bytes, exactly
// those eventlog.EncodeLine writes to a day file. log_days holds each day's
// size, the sum of its placed lines' lengths. A change inserts its line
// without an offset (one INSERT, no lock shared with other changes, so
// commits still share the database's flushes); a reader places the lines
// committed since the last placement before it reads (place: under an
// advisory lock, in insertion order, each after its day's size). A line is
// placed only once committed, after every line placed before it, so a
// day's placed lines are always a whole prefix [0, size) that only grows: a
// reader that read up to an offset never finds a line appear before it
// later. The GET /_logs/tasks API and `taskhoster logs pull` read the table
// as they read day files (Log implements httpapi.LogReader).
//
// Order. A task's changes are serialised by its row lock: a later change
// inserts its line after the earlier one committed, so with a higher seq,
// and no reader can see the later line without the earlier (it committed
// first); both are placed in seq order. Lines of different tasks placed
// in one pass follow their insertion order.
//
// Same transaction. A change's line is written in the change's own
// transaction, just before its COMMIT (Store.WriteLines): a change and its
// line commit together or not at all, and a task's lines follow its store
// order (see Order). The use case hands the event to the store
// through the call's context (app.StagedEvent); a change made without one
// (none is staged) writes no line, and its Then's Append writes it after
// COMMIT, in its own transaction.
//
// Payloads. For a queue with archivePayloads, an event's bodies
// (eventlog.Bodies: item, progress appended, result, error) are rows of
// payloads, written in the same transaction before its line, which lists
// them in "archived" as a day file's line does; OpenPayload serves them to
// /_logs/payloads.

// Staged is how the store finds the event of the change being stored
// under ctx (app.StagedEvent): the event, and logged, to be called once
// its line is written.
type Staged func(ctx context.Context) (ev domain.Event, archive bool, logged func(), ok bool)

// WriteLines makes the store write each change's event line, found by
// staged, in the change's own transaction. Call it before serving.
func (s *Store) WriteLines(staged Staged) { s.staged = staged }

// StagedBatch is Staged for a batch of posts (CreateAll,
// app.StagedEvents): the posted events of its tasks, in their order.
type StagedBatch func(ctx context.Context) (evs []domain.Event, archive bool, logged func(), ok bool)

// WriteBatchLines makes CreateAll write the posted lines of a batch, found
// by staged, in the batch's transaction. Call it before serving.
func (s *Store) WriteBatchLines(staged StagedBatch) { s.stagedBatch = staged }

// stageLine queues in b the line of the change being stored under ctx, if
// one is staged, and returns the function to call once b committed (nil
// when none is staged).
func (s *Store) stageLine(ctx context.Context, b *pgx.Batch) (logged func(), err error) {
	if s.staged == nil {
		return nil, nil
	}
	ev, archive, logged, ok := s.staged(ctx)
	if !ok {
		return nil, nil
	}
	if err := queueLine(b, ev, archive); err != nil {
		return nil, err
	}
	return logged, nil
}

// queueLine queues in b the statements that append ev's line, after
// archiving its bodies when archive is set.
func queueLine(b *pgx.Batch, ev domain.Event, archive bool) error {
	var archived []string
	if archive {
		var err error
		if archived, err = queueBodies(b, ev); err != nil {
			return err
		}
	}
	t := ev.Task
	b.Queue(insertLineSQL+` VALUES ($1, $2, $3, $4, $5)`,
		eventlog.DayOf(ev.At), t.Host, t.Queue, t.ID, eventlog.EncodeLine(ev, archived))
	return nil
}

// insertLineSQL inserts a line: day, host, queue, id and its bytes follow.
const insertLineSQL = `INSERT INTO event_lines (day, host, queue, id, line)`

// lineArgs are the day and the bytes of ev's line, archiving nothing.
func lineArgs(ev domain.Event) []any {
	return []any{eventlog.DayOf(ev.At), eventlog.EncodeLine(ev, nil)}
}

// placeLock is the advisory lock key that serialises placements ("evplace").
const placeLock = 0x6576706c616365

// placeBatch bounds the lines one statement places.
const placeBatch = 10_000

// place gives the committed lines without an offset theirs, in insertion
// order, each at the end of its day, and grows the days' sizes.
func (l *Log) place(ctx context.Context) error {
	for {
		n, err := l.placeSome(ctx)
		if err != nil {
			return fail("place event lines", err)
		}
		if n < placeBatch {
			return nil
		}
	}
}

func (l *Log) placeSome(ctx context.Context) (int, error) {
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer rollback(tx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(placeLock)); err != nil {
		return 0, err
	}
	// Read after the lock: the snapshot holds every earlier placement.
	rows, err := tx.Query(ctx, `SELECT seq, day, length(line) FROM event_lines WHERE off IS NULL ORDER BY seq LIMIT `+fmt.Sprint(placeBatch))
	if err != nil {
		return 0, err
	}
	var seqs, offs []int64
	var days []string
	var lens []int64
	for rows.Next() {
		var seq, n int64
		var day string
		if err := rows.Scan(&seq, &day, &n); err != nil {
			rows.Close()
			return 0, err
		}
		seqs, days, lens = append(seqs, seq), append(days, day), append(lens, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(seqs) == 0 {
		return 0, nil
	}
	sizes := make(map[string]int64)
	for _, d := range days {
		if _, ok := sizes[d]; ok {
			continue
		}
		var size int64
		err := tx.QueryRow(ctx, `SELECT size FROM log_days WHERE day = $1`, d).Scan(&size)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return 0, err
		}
		sizes[d] = size
	}
	offs = make([]int64, len(seqs))
	for i := range seqs {
		offs[i] = sizes[days[i]]
		sizes[days[i]] += lens[i]
	}
	if _, err := tx.Exec(ctx, `UPDATE event_lines e SET off = v.off FROM unnest($1::bigint[], $2::bigint[]) AS v(seq, off) WHERE e.seq = v.seq AND e.off IS NULL`, seqs, offs); err != nil {
		return 0, err
	}
	for d, size := range sizes {
		if _, err := tx.Exec(ctx, `INSERT INTO log_days (day, size) VALUES ($1, $2) ON CONFLICT (day) DO UPDATE SET size = EXCLUDED.size`, d, size); err != nil {
			return 0, err
		}
	}
	return len(seqs), tx.Commit(ctx)
}

var _ ports.EventLog = (*Log)(nil)

// Log is the event log in the database: a ports.EventLog for the events
// no change's transaction wrote, and the reader of the log API.
type Log struct {
	pool *pgxpool.Pool
}

// Log is the event log in the store's database.
func (s *Store) Log() *Log { return &Log{pool: s.pool} }

// Append writes ev's line in a transaction of its own: one round trip,
// the batch's statements forming one implicit transaction. An event
// already written with its change (see Store.WriteLines) does not come
// here.
func (l *Log) Append(ctx context.Context, ev domain.Event, archive bool) error {
	b := &pgx.Batch{}
	if err := queueLine(b, ev, archive); err != nil {
		return err
	}
	if err := l.pool.SendBatch(ctx, b).Close(); err != nil {
		return fail("log "+string(ev.Kind)+" of "+ev.Task.ID, err)
	}
	return nil
}

// Days lists the days, oldest first, with their sizes.
func (l *Log) Days() ([]eventlog.DayFile, error) {
	ctx, cancel := shortCtx()
	defer cancel()
	if err := l.place(ctx); err != nil {
		return nil, err
	}
	rows, err := l.pool.Query(ctx, `SELECT day, size FROM log_days ORDER BY day`)
	if err != nil {
		return nil, fail("list log days", err)
	}
	days, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (eventlog.DayFile, error) {
		var d eventlog.DayFile
		return d, r.Scan(&d.Day, &d.Size)
	})
	if err != nil {
		return nil, fail("list log days", err)
	}
	if days == nil {
		days = []eventlog.DayFile{}
	}
	return days, nil
}

// ReadLines reads day's lines from offset on as eventlog.Reader reads a day
// file: whole lines, at most limit bytes of them, those keep accepts, and
// the offset past the last line read, kept or not.
func (l *Log) ReadLines(day string, offset int64, limit int, keep func(host, queue string) bool) ([]byte, int64, error) {
	if limit < 1 {
		return nil, 0, fmt.Errorf("read log day %s: limit %d is not positive", day, limit)
	}
	if !eventlog.ValidDay(day) {
		return nil, 0, noSuchDay(day)
	}
	ctx, cancel := shortCtx()
	defer cancel()
	if err := l.place(ctx); err != nil {
		return nil, 0, err
	}
	// One snapshot for the size and the lines.
	tx, err := l.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, 0, fail("read log day "+day, err)
	}
	defer rollback(tx)
	var size int64
	err = tx.QueryRow(ctx, `SELECT size FROM log_days WHERE day = $1`, day).Scan(&size)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, noSuchDay(day)
	}
	if err != nil {
		return nil, 0, fail("read log day "+day, err)
	}
	if offset < 0 || offset > size {
		return nil, 0, invalidOffset(offset, fmt.Sprintf("outside the file of %d bytes", size))
	}
	if offset < size {
		var starts bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM event_lines WHERE day = $1 AND off = $2)`, day, offset).Scan(&starts); err != nil {
			return nil, 0, fail("read log day "+day, err)
		}
		if !starts {
			return nil, 0, invalidOffset(offset, "not at the start of a line")
		}
	}
	// Lines are a few hundred bytes: a batch of rows at a time, until
	// limit bytes are read.
	var out bytes.Buffer
	next := offset
	for next < size {
		rows, err := tx.Query(ctx, `SELECT off, host, queue, line FROM event_lines WHERE day = $1 AND off >= $2 ORDER BY off LIMIT 1000`, day, next)
		if err != nil {
			return nil, 0, fail("read log day "+day, err)
		}
		full := false
		n := 0
		for rows.Next() {
			var off int64
			var host, queue string
			var line []byte
			if err := rows.Scan(&off, &host, &queue, &line); err != nil {
				rows.Close()
				return nil, 0, fail("read log day "+day, err)
			}
			n++
			if next-offset+int64(len(line)) > int64(limit) {
				full = true
				break
			}
			next = off + int64(len(line))
			if keep(host, queue) {
				out.Write(line)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, 0, fail("read log day "+day, err)
		}
		if full && next == offset {
			return nil, 0, fmt.Errorf("read log day %s: no line ends within %d bytes of offset %d", day, limit, offset)
		}
		if full || n == 0 {
			break
		}
	}
	return out.Bytes(), next, nil
}

// queueBodies queues in b the statements that write ev's bodies
// (eventlog.Bodies) to payloads, and returns their names for the line's
// "archived". The database's time stamps them, for Prune and
// Last-Modified.
func queueBodies(b *pgx.Batch, ev domain.Event) ([]string, error) {
	bodies, err := eventlog.Bodies(ev)
	if err != nil {
		return nil, &domain.Error{Kind: domain.KindInternal, Code: domain.CodeInternal, Message: "archive a payload", Err: err}
	}
	t := ev.Task
	var names []string
	for _, body := range bodies {
		set := `EXCLUDED.body`
		if body.Appended {
			set = `payloads.body || EXCLUDED.body`
		}
		b.Queue(`INSERT INTO payloads (host, queue, id, file, body, modified) VALUES ($1, $2, $3, $4, $5, now())
			ON CONFLICT (host, queue, id, file) DO UPDATE SET body = `+set+`, modified = now()`,
			t.Host, t.Queue, t.ID, body.File, body.Data)
		names = append(names, body.Name)
	}
	return names, nil
}

// OpenPayload reads one archived body of a task: name is one of
// eventlog.ItemFile, ProgressFile, ResultFile, ErrorFile. A body is written
// whole in its change's transaction, so progress.jsonl always ends with a
// whole line.
func (l *Log) OpenPayload(host, queue, id, name string) (*eventlog.Payload, error) {
	switch name {
	case eventlog.ItemFile, eventlog.ProgressFile, eventlog.ResultFile, eventlog.ErrorFile:
	default:
		return nil, noSuchPayload()
	}
	if !named(domain.Key{Host: host, Queue: queue, ID: id}) {
		return nil, noSuchPayload() // the id is the client's: see named
	}
	ctx, cancel := shortCtx()
	defer cancel()
	var body []byte
	var modified time.Time
	err := l.pool.QueryRow(ctx, `SELECT body, modified FROM payloads WHERE host = $1 AND queue = $2 AND id = $3 AND file = $4`,
		host, queue, id, name).Scan(&body, &modified)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, noSuchPayload()
	}
	if err != nil {
		return nil, fail("read an archived payload", err)
	}
	return eventlog.NewPayload(bytes.NewReader(body), int64(len(body)), modified), nil
}

func noSuchPayload() error {
	return &domain.Error{Kind: domain.KindNotFound, Code: domain.CodeNotFound, Message: "no such archived payload"}
}

// Prune deletes the lines of the days before the last days (UTC) as of
// now, as eventlog.Log.Prune deletes day files.
func (l *Log) Prune(ctx context.Context, now time.Time, days int) error {
	if days < 1 {
		return fmt.Errorf("prune event log: days must be at least 1, got %d", days)
	}
	// The sweep prunes once a minute: place what was committed meanwhile,
	// so the lines left for a reader to place stay few.
	if err := l.place(ctx); err != nil {
		return err
	}
	y, m, d := now.UTC().Date()
	keptFrom := time.Date(y, m, d-(days-1), 0, 0, 0, 0, time.UTC)
	oldestKept := eventlog.DayOf(keptFrom)
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return fail("prune event log", err)
	}
	defer rollback(tx)
	if _, err := tx.Exec(ctx, `DELETE FROM event_lines WHERE day < $1`, oldestKept); err != nil {
		return fail("prune event log", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM log_days WHERE day < $1`, oldestKept); err != nil {
		return fail("prune event log", err)
	}
	// A task's archive goes once its last body was written before the
	// window, as the file archive's folders go by their newest entry.
	if _, err := tx.Exec(ctx, `DELETE FROM payloads p WHERE NOT EXISTS (SELECT 1 FROM payloads q
		WHERE q.host = p.host AND q.queue = p.queue AND q.id = p.id AND q.modified >= $1)`, keptFrom); err != nil {
		return fail("prune payload archive", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fail("prune event log", err)
	}
	return nil
}

func noSuchDay(day string) error {
	return &domain.Error{Kind: domain.KindNotFound, Code: domain.CodeNotFound,
		Message: fmt.Sprintf("no day file %q in the event log", day)}
}

func invalidOffset(offset int64, why string) error {
	return &domain.Error{Kind: domain.KindInvalid, Code: domain.CodeInvalidOffset,
		Message: fmt.Sprintf("offset %d: %s", offset, why)}
}
