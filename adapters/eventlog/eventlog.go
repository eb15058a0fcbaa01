// Package eventlog is the durable task-event log (SPEC §8): one JSON line per
// task transition, appended to <logs>/tasks/YYYY-MM-DD.jsonl, one file per
// UTC day, and the payload archive under <logs>/tasks-payloads/ (archive.go).
// The dated files are the rotation; Prune ages them and the archive out.
// Reader (reader.go) reads both for the log API.
package eventlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

var _ ports.EventLog = (*Log)(nil)

// keepOpen is how many day files stay open: today's and yesterday's, so that
// the lines of yesterday that arrive just after midnight (their transition
// happened a moment before it) do not reopen a file each.
const keepOpen = 2

// Log appends event lines to day files. It is safe for concurrent use.
type Log struct {
	root string // <logs>, the serve --logs folder
	dir  string // <logs>/tasks

	mu     sync.Mutex
	files  map[string]*os.File // open day files by day ("2026-07-26")
	closed bool
	// journal, if set (UseJournal), records every line; sizes are the open
	// day files' sizes, where the next line of each goes.
	journal Journal
	sizes   map[string]int64

	// archiveMu is held for reading while bodies are written to the archive
	// and for writing while Prune removes a folder of it (see archive).
	archiveMu sync.RWMutex

	// pruneMu serialises Prune. archivesKeptFrom is the oldest kept day of
	// the last Prune that went through the whole archive without an error:
	// an archive only ages out when that day moves on (see Prune).
	pruneMu          sync.Mutex
	archivesKeptFrom string

	// archivedSinceSync says Sync has archive files to flush.
	archivedSinceSync atomic.Bool

	// afterFirstLook, when set (by tests only), runs between Prune's first
	// look at an archive folder that seems old and its second under the lock.
	afterFirstLook func(dir string)
}

// Open prepares the event log under dir (the serve --logs folder), creating
// dir/tasks if needed. Day files are opened on their first line.
func Open(dir string) (*Log, error) {
	tasks := filepath.Join(dir, "tasks")
	if err := os.MkdirAll(tasks, 0o755); err != nil {
		return nil, unavailable(fmt.Errorf("open event log: %w", err))
	}
	return &Log{root: dir, dir: tasks, files: make(map[string]*os.File)}, nil
}

// Append writes ev's line to the file of ev's UTC day with one write(2) on a
// file opened O_APPEND, so a reader never sees two lines run into each other.
// It does not sync: the app makes the line durable with the shared
// ports.Syncer, together with the task file, in one flush.
//
// With archive true (the queue's taskhoster-archivePayloads), the bodies the
// event carries are first written to the payload archive, and the line lists
// them in "archived"; see archive.
//
// ctx is not consulted: the transition is already stored, and its line must
// not be dropped because the client that caused it went away.
//
// A failed write (a full disc, say) is a domain.Error of KindUnavailable,
// code "log_unavailable", wrapping the cause.
func (l *Log) Append(_ context.Context, ev domain.Event, archive bool) error {
	var archived []string
	if archive {
		var err error
		if archived, err = l.archive(ev); err != nil {
			return unavailable(err)
		}
	}
	b := encodeLine(ev, archived)
	day := dayOf(ev.At)

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return unavailable(errors.New("event log is closed"))
	}
	f, err := l.file(day)
	if err != nil {
		return unavailable(err)
	}
	if err := writeLine(f, b); err != nil {
		return unavailable(fmt.Errorf("append %s event of %s: %w", ev.Kind, ev.Task.ID, err))
	}
	if l.journal != nil {
		off := l.sizes[day]
		l.sizes[day] = off + int64(len(b))
		l.journal.Append(filepath.Join("tasks", day+".jsonl"), off, b)
	}
	if err := l.retire(); err != nil {
		return unavailable(err)
	}
	return nil
}

// recorded returns once every Append under way has recorded its line in
// the journal. Append writes a line, then records it, both under l.mu: a
// line a reader saw in its day file is then one the next commit holds, so
// a sync begun after this call covers it.
func (l *Log) recorded() {
	l.mu.Lock()
	//lint:ignore SA2001 an empty critical section: waiting for the holder is the point
	l.mu.Unlock()
}

// file returns the open file of day, opening (and creating) it if needed.
// The caller holds l.mu.
func (l *Log) file(day string) (*os.File, error) {
	if f, ok := l.files[day]; ok {
		return f, nil
	}
	f, err := os.OpenFile(filepath.Join(l.dir, day+".jsonl"), os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open day file: %w", err)
	}
	if err := cutTornTail(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	if l.journal != nil {
		fi, err := f.Stat()
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("open day file: %w", err)
		}
		l.sizes[day] = fi.Size()
	}
	l.files[day] = f
	return f, nil
}

// cutTornTail cuts a line that a crash left half-written at the end of a day
// file or an archived progress.jsonl (appendFile), so the next line does not
// run into it (which would make both unreadable). That line's event was
// never flushed, so never acknowledged.
func cutTornTail(f *os.File) error {
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return err
	}
	size := fi.Size()
	// Nearly always the file ends with a whole line: one byte tells
	// (appendFile comes here on every progress line).
	var last [1]byte
	if _, err := f.ReadAt(last[:], size-1); err != nil {
		return fmt.Errorf("read the last line: %w", err)
	}
	if last[0] == '\n' {
		return nil
	}
	// Lines are small; look back in growing steps for the last newline.
	for step := int64(4 << 10); ; step *= 4 {
		from := max(0, size-step)
		buf := make([]byte, size-from)
		if _, err := f.ReadAt(buf, from); err != nil {
			return fmt.Errorf("read the last line: %w", err)
		}
		if i := bytes.LastIndexByte(buf, '\n'); i >= 0 || from == 0 {
			if err := f.Truncate(from + int64(i) + 1); err != nil {
				return fmt.Errorf("cut torn line: %w", err)
			}
			return nil
		}
	}
}

// writeLine appends b in one write. A write that fails part-way (ENOSPC in
// the middle of a line) would leave a fragment that the next line runs into,
// making both unreadable; since only this Log writes the file, one line at
// a time (a day file under l.mu, a progress.jsonl under its task's store
// lock, in the event's Then), the last n bytes are the fragment and can be
// cut off again.
func writeLine(f *os.File, b []byte) error {
	n, err := f.Write(b)
	if err == nil || n == 0 {
		return err
	}
	return errors.Join(err, cutTail(f, n))
}

func cutTail(f *os.File, n int) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("cut partial line: %w", err)
	}
	if err := f.Truncate(fi.Size() - int64(n)); err != nil {
		return fmt.Errorf("cut partial line: %w", err)
	}
	return nil
}

// retire closes the oldest day files beyond keepOpen. Usually that is the
// day before yesterday, once a day; a straggler older than yesterday opens
// its file for one line and is retired at once. A file is fdatasynced before
// it is closed, so that Sync, which sees only the open files, still covers
// every line this Log wrote. The caller holds l.mu.
func (l *Log) retire() error {
	for len(l.files) > keepOpen {
		oldest := slices.Min(dayKeys(l.files))
		f := l.files[oldest]
		delete(l.files, oldest)
		delete(l.sizes, oldest)
		if err := errors.Join(fdatasync(f), f.Close()); err != nil {
			return fmt.Errorf("retire day file %s: %w", oldest, err)
		}
	}
	return nil
}

// Sync makes every line appended so far durable: it fdatasyncs the open day
// files and fsyncs the tasks folder, which holds the names of new ones. The
// app calls it at shutdown; while serving, the journal's commits make the
// lines durable (UseJournal).
//
// It first flushes the archived payloads, if any (syncArchive).
func (l *Log) Sync() error {
	var errs []error
	if err := l.syncArchive(); err != nil {
		errs = append(errs, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for day, f := range l.files {
		if err := fdatasync(f); err != nil {
			errs = append(errs, fmt.Errorf("sync day file %s: %w", day, err))
		}
	}
	if err := syncDir(l.dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return unavailable(err)
	}
	return nil
}

// Journal is what the log needs of the durability adapter
// (adapters/durable: the Root of the logs folder, which records nothing
// under --sync none).
type Journal interface {
	// Append records that the file at path (inside the logs folder) holds
	// data from byte off.
	Append(path string, off int64, data []byte)
	// BeforeCommit has flush run before each commit of the journal.
	BeforeCommit(flush func() error)
}

// UseJournal has every line recorded in j, so that a commit of j makes the
// lines durable. The archived payloads are not recorded: before each
// commit, j has them flushed (flushArchive). Call it before the first
// Append.
func (l *Log) UseJournal(j Journal) {
	l.journal = j
	l.sizes = make(map[string]int64)
	j.BeforeCommit(l.flushArchive)
}

// flushArchive makes the archived payloads written since the last call
// durable: the part of what Append wrote that the journal's records do not
// cover. The journal runs it before each commit, so that no line it makes
// durable names a payload that is not; it does not hold up Append.
func (l *Log) flushArchive() error {
	if err := l.syncArchive(); err != nil {
		return unavailable(err)
	}
	return nil
}

// syncArchive syncfs's the logs folder's filesystem if bodies were archived
// since the last call: the archive is many small files in many folders, and
// one flush of the filesystem covers them all, so that no line made durable
// names a body that is not.
func (l *Log) syncArchive() error {
	if !l.archivedSinceSync.Swap(false) {
		return nil
	}
	if err := syncFS(l.root); err != nil {
		l.archivedSinceSync.Store(true)
		return err
	}
	return nil
}

// Close closes the open day files; later Appends fail. It does not sync:
// call Sync first for the lines to survive a crash. Closing twice is harmless.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	var errs []error
	for day, f := range l.files {
		if err := f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close day file %s: %w", day, err))
		}
		delete(l.files, day)
	}
	return errors.Join(errs...)
}

func dayKeys(m map[string]*os.File) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// fdatasync flushes f's data (and the size, but not the times) to disc.
func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var syncErr error
	if err := rc.Control(func(fd uintptr) { syncErr = unix.Fdatasync(int(fd)) }); err != nil {
		return err
	}
	if syncErr != nil {
		return fmt.Errorf("fdatasync %s: %w", f.Name(), syncErr)
	}
	return nil
}

// syncFS flushes the whole filesystem that holds dir (syncfs(2)).
func syncFS(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync logs filesystem: %w", err)
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return fmt.Errorf("sync logs filesystem: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync folder: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync folder: %w", err)
	}
	return nil
}

// unavailable classifies a failure to write the log: the transition cannot be
// recorded now, which the app reports as "try again later".
func unavailable(err error) error {
	return &domain.Error{
		Kind:    domain.KindUnavailable,
		Code:    domain.CodeLogUnavailable,
		Message: "the event log cannot be written",
		Err:     err,
	}
}
