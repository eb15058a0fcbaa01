package sqlitelogs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// Cursor is how far source's day file has been read: the zero Cursor for a
// day never read.
func (s *Store) Cursor(ctx context.Context, source, day string) (tasklog.Cursor, error) {
	var c tasklog.Cursor
	err := s.db.QueryRowContext(ctx,
		`SELECT off, skip FROM cursors WHERE source = ? AND day = ?`, source, day).Scan(&c.Offset, &c.Skip)
	if errors.Is(err, sql.ErrNoRows) {
		return tasklog.Cursor{}, nil
	}
	if err != nil {
		return tasklog.Cursor{}, fmt.Errorf("read cursor of %s %s: %w", source, day, err)
	}
	return c, nil
}

// Commit stores a batch of lines of source's day file and moves that file's
// cursor to next, in one transaction: after a crash either both are there
// or neither is, so a pull resumes exactly where the last batch ended. A
// line whose key is already stored is skipped (a second pull adds
// nothing); each new line that archived payloads marks them wanted. A
// cursor never moves back, so two pulls racing on one store cannot undo
// each other's progress. Commit returns the number of new lines.
func (s *Store) Commit(ctx context.Context, source, day string, next tasklog.Cursor, lines []tasklog.Line) (int, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("commit %s %s: %w", source, day, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit

	added, err := insertLines(ctx, tx, lines)
	if err != nil {
		return 0, fmt.Errorf("commit %s %s: %w", source, day, err)
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO cursors (source, day, off, skip) VALUES (?, ?, ?, ?)
		ON CONFLICT (source, day) DO UPDATE SET off = excluded.off, skip = excluded.skip
		WHERE (excluded.off, excluded.skip) > (cursors.off, cursors.skip)`,
		source, day, next.Offset, next.Skip); err != nil {
		return 0, fmt.Errorf("commit %s %s: move cursor: %w", source, day, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit %s %s: %w", source, day, err)
	}
	return added, nil
}

// insertLines adds the lines not stored yet and marks their payloads wanted.
func insertLines(ctx context.Context, tx *sql.Tx, lines []tasklog.Line) (int, error) {
	if len(lines) == 0 {
		return 0, nil
	}
	insert, err := tx.PrepareContext(ctx, `
		INSERT INTO lines (source, day, off, ms, t, host, queue, id, event, status, error, attempts, worker,
			b_item, b_progress, b_result, b_error, archived, raw)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (source, day, off) DO NOTHING`)
	if err != nil {
		return 0, err
	}
	defer insert.Close()
	want, err := tx.PrepareContext(ctx, `
		INSERT INTO payloads (host, queue, id, file, source, want) VALUES (?, ?, ?, ?, ?, 1)
		ON CONFLICT (host, queue, id, file) DO UPDATE SET want = want + 1, source = excluded.source`)
	if err != nil {
		return 0, err
	}
	defer want.Close()

	added := 0
	for _, l := range lines {
		var worker, errCode any // NULL when no worker was involved, no error told
		if l.Worker != "" {
			worker = l.Worker
		}
		if l.Error != "" {
			errCode = l.Error
		}
		res, err := insert.ExecContext(ctx, l.Key.Source, l.Key.Day, l.Key.Offset, l.At.UnixMilli(), l.T,
			l.Host, l.Queue, l.ID, string(l.Event), string(l.Status), errCode, l.Attempts, worker,
			l.Bytes.Item, l.Bytes.Progress, l.Bytes.Result, l.Bytes.Error,
			strings.Join(l.Archived, ","), l.Raw)
		if err != nil {
			return 0, fmt.Errorf("insert line at %d: %w", l.Key.Offset, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			continue // stored before: its payloads were marked then
		}
		added++
		for _, kind := range l.Archived {
			file, ok := tasklog.PayloadFile(kind)
			if !ok {
				continue // a kind this mirror does not know how to fetch
			}
			if _, err := want.ExecContext(ctx, l.Host, l.Queue, l.ID, file, l.Key.Source); err != nil {
				return 0, fmt.Errorf("mark payload %s of %s wanted: %w", file, l.ID, err)
			}
		}
	}
	return added, nil
}

// Wanted lists the payloads to fetch from source: archived by a stored line
// and not stored yet, or stored before a later line archived them again.
func (s *Store) Wanted(ctx context.Context, source string) ([]tasklog.PayloadRef, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT host, queue, id, file, want FROM payloads
		WHERE source = ? AND want > got ORDER BY rowid`, source)
	if err != nil {
		return nil, fmt.Errorf("list wanted payloads: %w", err)
	}
	defer rows.Close()
	var refs []tasklog.PayloadRef
	for rows.Next() {
		r := tasklog.PayloadRef{Source: source}
		if err := rows.Scan(&r.Host, &r.Queue, &r.ID, &r.File, &r.Want); err != nil {
			return nil, fmt.Errorf("list wanted payloads: %w", err)
		}
		refs = append(refs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list wanted payloads: %w", err)
	}
	return refs, nil
}

// SavePayload stores body as ref's payload, fetched after ref.Want lines
// archived it. A body fetched for an earlier want never replaces one
// fetched for a later want.
func (s *Store) SavePayload(ctx context.Context, ref tasklog.PayloadRef, body []byte) error {
	if body == nil {
		body = []byte{} // NULL means "not stored"
	}
	_, err := s.db.ExecContext(ctx, `
		UPDATE payloads SET body = ?, got = ?
		WHERE host = ? AND queue = ? AND id = ? AND file = ? AND got < ?`,
		body, ref.Want, ref.Host, ref.Queue, ref.ID, ref.File, ref.Want)
	if err != nil {
		return fmt.Errorf("store payload %s of %s: %w", ref.File, ref.ID, err)
	}
	return nil
}

// PayloadGone records that the server no longer has ref's payload (it aged
// out of the archive before it was fetched): stop asking for it, and keep
// any body fetched earlier.
func (s *Store) PayloadGone(ctx context.Context, ref tasklog.PayloadRef) error {
	_, err := s.db.ExecContext(ctx, `
		UPDATE payloads SET got = ?
		WHERE host = ? AND queue = ? AND id = ? AND file = ? AND got < ?`,
		ref.Want, ref.Host, ref.Queue, ref.ID, ref.File, ref.Want)
	if err != nil {
		return fmt.Errorf("mark payload %s of %s gone: %w", ref.File, ref.ID, err)
	}
	return nil
}
