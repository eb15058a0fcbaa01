package eventlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/taskhoster/taskhoster/domain"
)

// The payload archive (SPEC §8, seed "taskhoster-archivePayloads"): for a
// queue with taskhoster-archivePayloads on, the bodies of its tasks are kept
// as files next to the event log, out of band of the queue's own retention:
//
//	<logs>/tasks-payloads/<host>/<queue>/<id>/
//	  item.json       posted: the item
//	  progress.jsonl  progress: one line per progress event, appended
//	  result.json     result: the result
//	  error.json      timeout, failed: the task's error, e.g. "timeout"
//
// Each body is written in the form the task file holds it (compact JSON,
// with encoding/json's escaping of < > &), so a body's size is the number
// the line's "bytes" gives for it; a progress line adds its newline.
const payloadsDir = "tasks-payloads"

// The files of a task's archive folder.
const (
	ItemFile     = "item.json"
	ProgressFile = "progress.jsonl"
	ResultFile   = "result.json"
	ErrorFile    = "error.json"
)

// Task records may carry private payloads: the archive is as closed as the
// items folder (fsstore): folders 0750, files 0600.
const (
	archiveDirMode  = 0o750
	archiveFileMode = 0o600
)

// body is one payload an event writes to its task's archive folder.
type body struct {
	name string // what the line's "archived" lists: item, progress, result, error
	file string
	data []byte
	// appended bodies (progress) add a line to the file; the others replace it.
	appended bool
}

// bodiesOf lists what ev writes to the archive; most events write nothing.
func bodiesOf(ev domain.Event) ([]body, error) {
	t := ev.Task
	var b body
	var err error
	switch ev.Kind {
	case domain.EventPosted:
		b = body{name: "item", file: ItemFile}
		b.data, err = storedForm(t.Item)
	case domain.EventProgress:
		b = body{name: "progress", file: ProgressFile, appended: true}
		b.data, err = storedForm(t.Progress)
		b.data = append(b.data, '\n')
	case domain.EventResult:
		b = body{name: "result", file: ResultFile}
		b.data, err = storedForm(t.Result)
	case domain.EventTimeout, domain.EventFailed, domain.EventReleased:
		data, ok, err := errorBody(t)
		if !ok || err != nil {
			return nil, err
		}
		b = body{name: "error", file: ErrorFile, data: data}
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("archive %s of %s: %w", ev.Kind, t.ID, err)
	}
	return []body{b}, nil
}

// errorBody is what error.json holds for t, the body errorLen sizes: its
// failure when it has one, else its error code as a JSON string; ok is
// false when it has neither (a give-back without a reason).
func errorBody(t domain.Task) (data []byte, ok bool, err error) {
	switch {
	case !domain.IsNull(bytes.TrimSpace(t.Failure)):
		data, err = storedForm(t.Failure)
	case t.Error != nil:
		data, err = json.Marshal(*t.Error)
	default:
		return nil, false, nil
	}
	return data, true, err
}

// storedForm is raw as domain.EncodeTask writes it into a task file (json
// compacts and escapes a RawMessage); absent is null.
func storedForm(raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 {
		return []byte("null"), nil
	}
	return json.Marshal(raw)
}

// archiveFolder is the archive folder of one task under the logs folder
// root. The names were validated when the queue was loaded and the id drawn,
// but a name that is not one could climb out of the folder, so it is checked
// again here, where it becomes a path.
func archiveFolder(root, host, queue, id string) (string, error) {
	if !domain.ValidHost(host) || !domain.ValidName(queue) || !domain.ValidID(id) {
		return "", fmt.Errorf("archive folder: refusing host %q, queue %q, id %q", host, queue, id)
	}
	return filepath.Join(root, payloadsDir, host, queue, id), nil
}

// archive writes ev's bodies to its task's archive folder and returns their
// names for the line's "archived". It runs before the line is written, so a
// line never names a body that is not there. It does not sync: before the
// journal's next commit flushArchive syncs the logs filesystem, which covers
// these files, and at shutdown Sync does.
//
// It holds archiveMu for reading: archives of different tasks are written
// side by side, and Prune, which takes it for writing, never removes a
// folder while a body is being written into it. Bodies of one task never
// race each other: the app appends a queue's events one at a time.
func (l *Log) archive(ev domain.Event) ([]string, error) {
	bodies, err := bodiesOf(ev)
	if err != nil || len(bodies) == 0 {
		return nil, err
	}
	dir, err := archiveFolder(l.root, ev.Task.Host, ev.Task.Queue, ev.Task.ID)
	if err != nil {
		return nil, err
	}
	l.archiveMu.RLock()
	defer l.archiveMu.RUnlock()
	if err := os.MkdirAll(dir, archiveDirMode); err != nil {
		return nil, fmt.Errorf("archive %s of %s: %w", ev.Kind, ev.Task.ID, err)
	}
	names := make([]string, 0, len(bodies))
	for _, b := range bodies {
		path := filepath.Join(dir, b.file)
		write := replaceFile
		if b.appended {
			write = appendFile
		}
		if err := write(path, b.data); err != nil {
			return nil, fmt.Errorf("archive %s of %s: %w", ev.Kind, ev.Task.ID, err)
		}
		names = append(names, b.name)
	}
	l.archivedSinceSync.Store(true)
	return names, nil
}

// replaceFile writes data as path through a temp file and a rename, so that
// a reader of the log API sees the whole body or none of it.
func replaceFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name()) // best effort: Prune removes the folder in the end
	}
	return err
}

// appendFile adds one line to path in one write, as the day files do. Like
// a day file, the file may end in a line a crash cut part-way (a write
// stopped by SIGKILL between pages, or a power loss): that line's event was
// never acknowledged, and it is cut first, lest the new line run into it
// and the two make one line that is not JSON.
func appendFile(path string, line []byte) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, archiveFileMode)
	if err != nil {
		return err
	}
	if err := cutTornTail(f); err != nil {
		return errors.Join(err, f.Close())
	}
	return errors.Join(writeLine(f, line), f.Close())
}

// pruneArchives deletes each task archive folder whose newest entry was last
// modified on a day before oldestKept, and then the host and queue folders
// left empty.
//
// Age is read from modification times, not from the event log: an archive's
// last write is the last event that archived a body, so its mtime is that
// event's time to within the write, and reading it costs a stat instead of a
// scan of three weeks of lines. A folder's own mtime changes whenever an
// entry is added, so a folder modified within the window is kept without
// looking inside; only an older folder has its files (at most four, plus
// temp files) stat'ed, because appending a progress line changes the file
// but not the folder. A time in the future (a clock set back) is kept.
//
// Names that are not a valid host, queue or id, and anything that is not a
// folder, are left alone, as Prune leaves foreign files in tasks/.
func (l *Log) pruneArchives(ctx context.Context, oldestKept string) error {
	root := filepath.Join(l.root, payloadsDir)
	hosts, err := readDirs(root, domain.ValidHost)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no queue has archived anything yet
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, host := range hosts {
		hostDir := filepath.Join(root, host)
		queues, err := readDirs(hostDir, domain.ValidName)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, queue := range queues {
			queueDir := filepath.Join(hostDir, queue)
			ids, err := readDirs(queueDir, domain.ValidID)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, id := range ids {
				if err := ctx.Err(); err != nil {
					return errors.Join(append(errs, err)...)
				}
				errs = append(errs, l.pruneTaskArchive(filepath.Join(queueDir, id), oldestKept))
			}
			errs = append(errs, l.removeIfEmpty(queueDir))
		}
		errs = append(errs, l.removeIfEmpty(hostDir))
	}
	return errors.Join(errs...)
}

// pruneTaskArchive removes one task's archive folder if it has aged out.
// The first look is made without the lock, as nearly every folder is kept;
// a folder that looks expired is looked at again under the lock, since a
// body may have been written into it in between.
func (l *Log) pruneTaskArchive(dir, oldestKept string) error {
	if expired, err := archiveExpired(dir, oldestKept); err != nil || !expired {
		return err
	}
	if l.afterFirstLook != nil {
		l.afterFirstLook(dir)
	}
	l.archiveMu.Lock()
	defer l.archiveMu.Unlock()
	expired, err := archiveExpired(dir, oldestKept)
	if err != nil || !expired {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove archive: %w", err)
	}
	return nil
}

// archiveExpired reports whether neither the folder dir nor any entry in it
// was modified on oldestKept or later. A folder that is gone is not expired:
// there is nothing to remove.
func archiveExpired(dir, oldestKept string) (bool, error) {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("archive age: %w", err)
	}
	if dayOf(fi.ModTime()) >= oldestKept {
		return false, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, fmt.Errorf("archive age: %w", err)
	}
	for _, e := range entries {
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since the listing
		}
		if err != nil {
			return false, fmt.Errorf("archive age: %w", err)
		}
		if dayOf(fi.ModTime()) >= oldestKept {
			return false, nil
		}
	}
	return true, nil
}

// removeIfEmpty removes a host or queue folder of the archive that no longer
// holds anything. It takes archiveMu so that it cannot remove a folder that
// a body is about to be written into (MkdirAll has made it, the file is not
// there yet).
func (l *Log) removeIfEmpty(dir string) error {
	l.archiveMu.Lock()
	defer l.archiveMu.Unlock()
	err := os.Remove(dir)
	if err == nil || errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
		return nil
	}
	return fmt.Errorf("remove empty archive folder: %w", err)
}

// readDirs lists the names of the folders in dir that valid accepts.
func readDirs(dir string, valid func(string) bool) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() && valid(e.Name()) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}
