package sqlitelogs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// lineColumns are the columns scanLine reads, in its order.
const lineColumns = `seq, source, day, off, ms, t, host, queue, id, event, status, error, attempts,
	worker, b_item, b_progress, b_result, b_error, archived, raw`

// Events is one page of events, newest first, matching q.Filter. Pages are
// cut by position (time, then arrival), not by row count, so a page asked
// for again shows the same events however many lines were pulled since,
// and each page costs an index range read however deep it is.
func (s *Store) Events(ctx context.Context, q tasklog.Query) (tasklog.Page, error) {
	if err := q.Validate(); err != nil {
		return tasklog.Page{}, err
	}
	query, args := eventsSQL(q)
	lines, err := s.queryLines(ctx, query, args...)
	if err != nil {
		return tasklog.Page{}, fmt.Errorf("list events: %w", err)
	}
	more := len(lines) > q.Limit
	if more {
		lines = lines[:q.Limit]
	}

	var page tasklog.Page
	switch {
	case q.After != nil && !more:
		// Nothing newer than this page: show the newest page instead,
		// which is full.
		first := q
		first.After = nil
		return s.Events(ctx, first)
	case q.After != nil:
		slices.Reverse(lines)
		page.Newer = position(lines[0])
		page.Older = position(lines[len(lines)-1])
	case q.Before != nil:
		page.Newer = q.Before // the page we came from
		if len(lines) > 0 {
			page.Newer = position(lines[0])
		}
		if more {
			page.Older = position(lines[len(lines)-1])
		}
	default:
		if more {
			page.Older = position(lines[len(lines)-1])
		}
	}
	page.Lines = lines
	return page, nil
}

// eventsSQL is the statement of one page: the filter's conditions, the
// position's cut, and one more row than a page, which tells whether there
// is a next one.
func eventsSQL(q tasklog.Query) (string, []any) {
	where, args := filterSQL(q.Filter)
	order := "DESC"
	switch {
	case q.Before != nil:
		// "ms <= ?" is the index range; the rest cuts inside its first millisecond.
		where = append(where, "ms <= ? AND (ms < ? OR seq < ?)")
		args = append(args, q.Before.Millis, q.Before.Millis, q.Before.Seq)
	case q.After != nil:
		where = append(where, "ms >= ? AND (ms > ? OR seq > ?)")
		args = append(args, q.After.Millis, q.After.Millis, q.After.Seq)
		order = "ASC" // the events just after the position: read upwards
	}
	query := `SELECT ` + lineColumns + ` FROM lines`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY ms ` + order + `, seq ` + order + ` LIMIT ?`
	return query, append(args, q.Limit+1)
}

func position(l tasklog.Line) *tasklog.Position {
	p := tasklog.PositionOf(l)
	return &p
}

// filterSQL turns a filter into conditions; values travel as arguments,
// never in the SQL text.
func filterSQL(f tasklog.Filter) (where []string, args []any) {
	eq := func(column, value string) {
		if value != "" {
			where = append(where, column+" = ?")
			args = append(args, value)
		}
	}
	// A prefix is a range of the column's index: from the prefix up to,
	// not including, the prefix with its last byte one higher, which every
	// value that starts with it sorts before (SQLite compares text
	// byte by byte). Matches come in the column's order, so they are
	// sorted by time after.
	match := func(column, value string) {
		p, prefix := tasklog.Prefix(value)
		switch {
		case !prefix:
			eq(column, value)
		case p != "" && p[len(p)-1] < 0xff:
			where = append(where, column+" >= ? AND "+column+" < ?")
			args = append(args, p, p[:len(p)-1]+string([]byte{p[len(p)-1] + 1}))
		case p != "":
			where = append(where, "substr("+column+", 1, ?) = ?")
			args = append(args, len(p), p)
		}
	}
	match("host", f.Host)
	match("queue", f.Queue)
	match("id", f.ID)
	eq("event", string(f.Event))
	eq("error", f.Error)
	match("worker", f.Worker)
	if !f.From.IsZero() {
		where = append(where, "ms >= ?")
		args = append(args, f.From.UnixMilli())
	}
	if !f.To.IsZero() {
		where = append(where, "ms < ?")
		args = append(args, f.To.UnixMilli())
	}
	return where, args
}

// Trail is every stored event of one task, oldest first: its life from
// posted to cleaned, as far as the mirror has it.
func (s *Store) Trail(ctx context.Context, host, queue, id string) ([]tasklog.Line, error) {
	lines, err := s.queryLines(ctx, `SELECT `+lineColumns+` FROM lines
		WHERE id = ? AND host = ? AND queue = ? ORDER BY ms, seq`, id, host, queue)
	if err != nil {
		return nil, fmt.Errorf("read trail of %s: %w", id, err)
	}
	return lines, nil
}

func (s *Store) queryLines(ctx context.Context, query string, args ...any) ([]tasklog.Line, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var lines []tasklog.Line
	for rows.Next() {
		l, err := scanLine(rows)
		if err != nil {
			return nil, err
		}
		lines = append(lines, l)
	}
	return lines, rows.Err()
}

func scanLine(rows *sql.Rows) (tasklog.Line, error) {
	var (
		l        tasklog.Line
		ms       int64
		event    string
		status   string
		errCode  sql.NullString
		worker   sql.NullString
		archived string
	)
	err := rows.Scan(&l.Seq, &l.Key.Source, &l.Key.Day, &l.Key.Offset, &ms, &l.T,
		&l.Host, &l.Queue, &l.ID, &event, &status, &errCode, &l.Attempts, &worker,
		&l.Bytes.Item, &l.Bytes.Progress, &l.Bytes.Result, &l.Bytes.Error, &archived, &l.Raw)
	if err != nil {
		return tasklog.Line{}, err
	}
	l.At = time.UnixMilli(ms).UTC()
	l.Event, l.Status, l.Error, l.Worker = domain.EventKind(event), domain.Status(status), errCode.String, worker.String
	if archived != "" {
		l.Archived = strings.Split(archived, ",")
	}
	return l, nil
}

// Payloads lists what the mirror knows of one task's archived bodies, in
// the order of the archive files (item, progress, result, error).
func (s *Store) Payloads(ctx context.Context, host, queue, id string) ([]tasklog.Payload, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT file, coalesce(length(body), 0), body IS NOT NULL FROM payloads
		WHERE host = ? AND queue = ? AND id = ?`, host, queue, id)
	if err != nil {
		return nil, fmt.Errorf("list payloads of %s: %w", id, err)
	}
	defer rows.Close()
	var out []tasklog.Payload
	for rows.Next() {
		var p tasklog.Payload
		if err := rows.Scan(&p.File, &p.Size, &p.Stored); err != nil {
			return nil, fmt.Errorf("list payloads of %s: %w", id, err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list payloads of %s: %w", id, err)
	}
	rank := map[string]int{"item.json": 0, "progress.jsonl": 1, "result.json": 2, "error.json": 3}
	slices.SortFunc(out, func(a, b tasklog.Payload) int { return rank[a.File] - rank[b.File] })
	return out, nil
}

// Payload is one stored body. A body the mirror does not have is an error
// of KindNotFound.
func (s *Store) Payload(ctx context.Context, host, queue, id, file string) ([]byte, error) {
	var body []byte
	err := s.db.QueryRowContext(ctx, `
		SELECT body FROM payloads WHERE host = ? AND queue = ? AND id = ? AND file = ? AND body IS NOT NULL`,
		host, queue, id, file).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, &domain.Error{Kind: domain.KindNotFound, Code: domain.CodeNotFound,
			Message: fmt.Sprintf("no stored %s for task %s", file, id)}
	}
	if err != nil {
		return nil, fmt.Errorf("read payload %s of %s: %w", file, id, err)
	}
	if body == nil {
		body = []byte{}
	}
	return body, nil
}

// MaxCount is where Count stops counting: a count costs a read of every
// match, and past this many a person wants a narrower filter, not a number.
const MaxCount = 100_000

// Count is how many stored events match f, up to MaxCount (more reads as
// MaxCount and true).
func (s *Store) Count(ctx context.Context, f tasklog.Filter) (n int, more bool, err error) {
	if err := f.Validate(); err != nil {
		return 0, false, err
	}
	where, args := filterSQL(f)
	query := `SELECT 1 FROM lines`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	err = s.db.QueryRowContext(ctx, `SELECT count(*) FROM (`+query+` LIMIT ?)`, append(args, MaxCount+1)...).Scan(&n)
	if err != nil {
		return 0, false, fmt.Errorf("count events: %w", err)
	}
	if n > MaxCount {
		return MaxCount, true, nil
	}
	return n, false, nil
}

// Names are the hosts and the queues the stored events name, sorted, for
// the filter form to offer.
func (s *Store) Names(ctx context.Context) (hosts, queues []string, err error) {
	if hosts, err = s.distinct(ctx, "host"); err != nil {
		return nil, nil, err
	}
	if queues, err = s.distinct(ctx, "queue"); err != nil {
		return nil, nil, err
	}
	return hosts, queues, nil
}

// distinct lists the values of an indexed column by hopping from one to the
// next along its index, so it costs a look-up per value, not a read of
// every line. column is one of this file's constants, never input.
func (s *Store) distinct(ctx context.Context, column string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `
		WITH RECURSIVE v(name) AS (
			SELECT min(`+column+`) FROM lines
			UNION ALL
			SELECT (SELECT min(`+column+`) FROM lines WHERE `+column+` > v.name) FROM v WHERE v.name IS NOT NULL
		)
		SELECT name FROM v WHERE name IS NOT NULL LIMIT 10000`)
	if err != nil {
		return nil, fmt.Errorf("list %ss: %w", column, err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("list %ss: %w", column, err)
		}
		names = append(names, name)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list %ss: %w", column, err)
	}
	return names, nil
}

// Latest is the number of the newest stored line (0 for none): it grows
// with every line a pull stores, so a page can tell it has news.
func (s *Store) Latest(ctx context.Context) (int64, error) {
	var seq int64
	if err := s.db.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM lines`).Scan(&seq); err != nil {
		return 0, fmt.Errorf("read the newest line: %w", err)
	}
	return seq, nil
}
