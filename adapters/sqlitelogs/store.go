// Package sqlitelogs is the Task Logs mirror on disc (SPEC §9): one SQLite
// file that keeps every event line ever pulled from a server, how far each
// day file has been read, and the archived payload bodies. `logs pull`
// writes it; `logs serve` only reads it.
//
// It uses modernc.org/sqlite, a pure-Go SQLite, so the binary stays free of
// cgo. The file is in WAL mode: the browser reads while a pull writes.
package sqlitelogs

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// File is the store's file name inside the store folder (--store DIR).
const File = "tasklogs.db"

// schemaVersion is kept in PRAGMA user_version; Open refuses a store from a
// later version instead of misreading it.
// Version 2 added the lines' error column (the error code a failed or
// timeout line tells, SPEC §11); Open brings a version 1 file up to it.
const schemaVersion = 2

// schema is the whole store. Every statement is idempotent so Open can run
// it on an existing file.
//
// lines: one row per event line. (source, day, off) is the line's identity
// (tasklog.Key), so a line pulled twice is stored once. ms is the event's
// time in Unix milliseconds and, with seq (the rowid, the order of arrival),
// the order of every listing. Each filter of the browser has an index that
// starts with its column and continues with ms; SQLite appends the rowid to
// every index, so an index (queue, ms) serves "WHERE queue = ? ORDER BY ms
// DESC, seq DESC LIMIT n" by reading n entries, without sorting. An event
// within a queue has an index of its own: with (event, ms) alone, a rare
// event of one queue would be found by reading past that event in every
// other queue. error is the error code a failed or timeout line tells,
// NULL on the others; its index holds only the lines that have one.
//
// cursors: how far each day file of each source has been read.
//
// payloads: archived bodies. want counts the lines that archived the body
// (each progress event appends to progress.jsonl), got is the want the
// stored body answers; want > got means "fetch it (again)".
const schema = `
CREATE TABLE IF NOT EXISTS lines (
	seq        INTEGER PRIMARY KEY,
	source     TEXT    NOT NULL,
	day        TEXT    NOT NULL,
	off        INTEGER NOT NULL,
	ms         INTEGER NOT NULL,
	t          INTEGER NOT NULL,
	host       TEXT    NOT NULL,
	queue      TEXT    NOT NULL,
	id         TEXT    NOT NULL,
	event      TEXT    NOT NULL,
	status     TEXT    NOT NULL,
	error      TEXT,
	attempts   INTEGER NOT NULL,
	worker     TEXT,
	b_item     INTEGER NOT NULL,
	b_progress INTEGER NOT NULL,
	b_result   INTEGER NOT NULL,
	b_error    INTEGER NOT NULL,
	archived   TEXT    NOT NULL,
	raw        TEXT    NOT NULL,
	UNIQUE (source, day, off)
) STRICT;
CREATE INDEX IF NOT EXISTS lines_ms     ON lines (ms);
CREATE INDEX IF NOT EXISTS lines_id     ON lines (id, ms);
CREATE INDEX IF NOT EXISTS lines_queue  ON lines (queue, ms);
CREATE INDEX IF NOT EXISTS lines_queue_event ON lines (queue, event, ms);
CREATE INDEX IF NOT EXISTS lines_event  ON lines (event, ms);
CREATE INDEX IF NOT EXISTS lines_worker ON lines (worker, ms);
CREATE INDEX IF NOT EXISTS lines_host   ON lines (host, ms);
CREATE INDEX IF NOT EXISTS lines_error  ON lines (error, ms) WHERE error IS NOT NULL;

CREATE TABLE IF NOT EXISTS cursors (
	source TEXT    NOT NULL,
	day    TEXT    NOT NULL,
	off    INTEGER NOT NULL,
	skip   INTEGER NOT NULL,
	PRIMARY KEY (source, day)
) STRICT, WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS payloads (
	host   TEXT    NOT NULL,
	queue  TEXT    NOT NULL,
	id     TEXT    NOT NULL,
	file   TEXT    NOT NULL,
	source TEXT    NOT NULL,
	want   INTEGER NOT NULL,
	got    INTEGER NOT NULL DEFAULT 0,
	body   BLOB,
	PRIMARY KEY (host, queue, id, file)
) STRICT;
CREATE INDEX IF NOT EXISTS payloads_wanted ON payloads (source) WHERE want > got;
`

// Store is one mirror file. It is safe for concurrent use.
type Store struct {
	db *sql.DB
}

// Open opens the store in dir for pulling, creating dir and the file if
// needed.
func Open(dir string) (*Store, error) {
	// The mirror holds what the server's payload archive holds (items,
	// results, failures), which the server keeps in folders 0750 and files
	// 0600: so does the mirror. SQLite gives the -wal and -shm files the
	// mode of the database file, so the file is made here, before SQLite
	// would make it with the umask's mode.
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("open task log store: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, File), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open task log store: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("open task log store: %w", err)
	}
	// BEGIN IMMEDIATE takes the write lock at the start of a transaction, so
	// two writers queue on busy_timeout instead of one failing when it
	// upgrades a read lock.
	db, err := open(dir, "rwc", "_txlock=immediate")
	if err != nil {
		return nil, err
	}
	if err := migrate(db); err != nil {
		db.Close()
		return nil, err
	}
	return &Store{db: db}, nil
}

// OpenReader opens an existing store in dir for reading only: every
// connection is query_only, so the browser cannot change the mirror even by
// mistake. A store that does not exist yet is an error of KindNotFound.
func OpenReader(dir string) (*Store, error) {
	path := filepath.Join(dir, File)
	if _, err := os.Stat(path); err != nil {
		return nil, &domain.Error{Kind: domain.KindNotFound, Code: domain.CodeNoStore,
			Message: fmt.Sprintf("no task log store at %s (run taskhoster logs pull first)", path), Err: err}
	}
	db, err := open(dir, "rw", "_query_only=1")
	if err != nil {
		return nil, err
	}
	var v int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		db.Close()
		return nil, fmt.Errorf("open task log store %s: %w", path, err)
	}
	if v != schemaVersion {
		db.Close()
		return nil, fmt.Errorf("open task log store %s: schema version %d, this binary reads %d (a logs pull brings an older store up to date)", path, v, schemaVersion)
	}
	return &Store{db: db}, nil
}

// open connects to dir's store file. mode is SQLite's URI mode (rwc creates
// the file); extra is one more driver parameter.
func open(dir, mode, extra string) (*sql.DB, error) {
	path, err := filepath.Abs(filepath.Join(dir, File))
	if err != nil {
		return nil, fmt.Errorf("open task log store: %w", err)
	}
	// Every connection of the pool gets these settings: WAL so readers and
	// the writer do not block each other, NORMAL sync (in WAL mode a crash
	// may lose the last transactions but never corrupts the file, and a
	// lost batch is simply pulled again), and a busy timeout so a reader
	// waits out a checkpoint instead of failing.
	q := "mode=" + mode +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(10000)" +
		"&" + extra
	dsn := (&url.URL{Scheme: "file", Path: path, RawQuery: q}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open task log store %s: %w", path, err)
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("open task log store %s: %w", path, err)
	}
	return db, nil
}

// migrate creates the schema in a new file and checks the version of an
// existing one.
func migrate(db *sql.DB) error {
	var v int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("read store version: %w", err)
	}
	if v > schemaVersion {
		return fmt.Errorf("task log store has schema version %d, this binary knows %d: use a newer taskhoster", v, schemaVersion)
	}
	if v == 1 {
		if err := addErrorColumn(db); err != nil {
			return err
		}
	}
	if _, err := db.Exec(schema); err != nil {
		return fmt.Errorf("create store schema: %w", err)
	}
	if _, err := db.Exec(fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
		return fmt.Errorf("set store version: %w", err)
	}
	return nil
}

// addErrorColumn brings a version 1 store to version 2: the lines get
// their error column, filled from the raw lines by tasklog.ParseLine, as
// a pull fills it. The schema then adds its index.
func addErrorColumn(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return fmt.Errorf("add error column: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(`ALTER TABLE lines ADD COLUMN error TEXT`); err != nil {
		return fmt.Errorf("add error column: %w", err)
	}
	rows, err := tx.Query(`SELECT seq, raw FROM lines
		WHERE event IN ('failed', 'timeout', 'cancelled') OR instr(raw, '"error":') > 0`)
	if err != nil {
		return fmt.Errorf("add error column: %w", err)
	}
	codes := map[int64]string{}
	for rows.Next() {
		var seq int64
		var raw string
		if err := rows.Scan(&seq, &raw); err != nil {
			rows.Close()
			return fmt.Errorf("add error column: %w", err)
		}
		if l, err := tasklog.ParseLine([]byte(raw)); err == nil && l.Error != "" {
			codes[seq] = l.Error
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("add error column: %w", err)
	}
	for seq, code := range codes {
		if _, err := tx.Exec(`UPDATE lines SET error = ? WHERE seq = ?`, code, seq); err != nil {
			return fmt.Errorf("add error column: %w", err)
		}
	}
	if _, err := tx.Exec(fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
		return fmt.Errorf("add error column: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("add error column: %w", err)
	}
	return nil
}

// Close closes the store. A writer first lets SQLite refresh the planner's
// statistics where they went stale (PRAGMA optimize, as SQLite advises
// before closing), so filtered pages keep picking the right index as the
// store grows.
func (s *Store) Close() error {
	var errs []error
	var queryOnly bool
	if err := s.db.QueryRow("PRAGMA query_only").Scan(&queryOnly); err == nil && !queryOnly {
		if _, err := s.db.Exec("PRAGMA optimize"); err != nil {
			errs = append(errs, fmt.Errorf("optimize store: %w", err))
		}
	}
	if err := s.db.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close store: %w", err))
	}
	return errors.Join(errs...)
}
