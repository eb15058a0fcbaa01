package fsstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// Corrupt is a task file the start-up scan could not use. It has been moved
// to <queue>/corrupt/ (and is never deleted by the server); the app logs a
// "failed" event for it.
type Corrupt struct {
	Host, Queue string
	ID          string // the file name without .json
	Path        string // where the file is now
	Err         error  // why it was refused
}

// found is one candidate task file met by the scan.
type found struct {
	ref  ports.QueueRef
	dir  string // the state directory it is in
	id   string
	path string
	// Filled in by the readers.
	task    domain.Task
	corrupt error // the file does not hold a usable record
	readErr error // the file could not be read at all
}

// load reads every task the items folder holds, for the index, and repairs
// what a crash left behind. It is the only place that lists directories.
func (s *Store) load() (map[ports.Key]domain.Task, error) {
	files, err := s.scan()
	if err != nil {
		return nil, err
	}
	readAll(files)
	tasks := make(map[ports.Key]domain.Task, len(files))
	for i := range files {
		f := &files[i]
		if f.readErr != nil {
			// Not a damaged record but a folder we cannot read: serving
			// without these tasks would lose them, so refuse to start.
			return nil, fmt.Errorf("read task file: %w", f.readErr)
		}
		if f.corrupt != nil {
			s.quarantine(f)
			continue
		}
		s.adopt(tasks, f)
	}
	return tasks, nil
}

// scan lists every host, queue and state directory, removes leftover temp
// files and returns the task files to read, grouped by queue and, within a
// queue, in lifecycle order (pending, processing, done). Names that are not
// valid are left alone: they are not ours.
func (s *Store) scan() ([]found, error) {
	hosts, err := os.ReadDir(s.files.items)
	if err != nil {
		return nil, fmt.Errorf("list items folder: %w", err)
	}
	var files []found
	for _, h := range hosts {
		if !h.IsDir() || !domain.ValidHost(h.Name()) {
			if h.Name() != ".lock" {
				s.log.Warn("ignoring entry in items folder", zap.String("name", h.Name()))
			}
			continue
		}
		queues, err := os.ReadDir(filepath.Join(s.files.items, h.Name()))
		if err != nil {
			return nil, fmt.Errorf("list host folder: %w", err)
		}
		for _, qe := range queues {
			if !qe.IsDir() || !domain.ValidName(qe.Name()) {
				s.log.Warn("ignoring entry in host folder", zap.String("host", h.Name()), zap.String("name", qe.Name()))
				continue
			}
			ref := ports.QueueRef{Host: h.Name(), Queue: qe.Name()}
			if files, err = s.scanQueue(ref, files); err != nil {
				return nil, err
			}
		}
	}
	return files, nil
}

func (s *Store) scanQueue(ref ports.QueueRef, files []found) ([]found, error) {
	ready := true
	for _, d := range domain.Dirs {
		dir := filepath.Join(s.files.queuePath(ref), d)
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			ready = false
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list state directory: %w", err)
		}
		for _, e := range entries {
			name := e.Name()
			path := filepath.Join(dir, name)
			if isTempName(name) && e.Type().IsRegular() {
				// A write that never reached its rename: the old record,
				// if any, is still in place and is the truth.
				if err := os.Remove(path); err != nil {
					s.log.Error("cannot remove leftover temp file", zap.String("path", path), zap.Error(err))
				} else {
					s.log.Info("removed leftover temp file", zap.String("path", path))
				}
				continue
			}
			id, ok := strings.CutSuffix(name, ".json")
			if !ok || !domain.ValidID(id) || !e.Type().IsRegular() {
				s.log.Warn("ignoring entry in state directory", zap.String("path", path))
				continue
			}
			files = append(files, found{ref: ref, dir: d, id: id, path: path})
		}
	}
	if ready {
		s.files.ready.Store(ref, true)
	}
	return files, nil
}

// readAll reads and decodes the files in parallel: start-up time is mostly
// waiting for the disc, and a big folder must come up in seconds.
func readAll(files []found) {
	workers := min(len(files), max(16, 4*runtime.GOMAXPROCS(0)))
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(files) {
					return
				}
				files[i].read()
			}
		})
	}
	wg.Wait()
}

// read loads one file and checks that it is the record its place says.
func (f *found) read() {
	data, err := os.ReadFile(f.path)
	if err != nil {
		f.readErr = err
		return
	}
	t, err := domain.DecodeTask(data)
	switch {
	case err != nil:
		f.corrupt = err
	case t.ID != f.id:
		f.corrupt = fmt.Errorf("file of task %s holds task %s", f.id, t.ID)
	case t.Host != f.ref.Host || t.Queue != f.ref.Queue:
		f.corrupt = fmt.Errorf("file in %s/%s holds a task of %s/%s", f.ref.Host, f.ref.Queue, t.Host, t.Queue)
	case t.Status.Dir() != f.dir:
		f.corrupt = fmt.Errorf("task with status %s found in %s", t.Status, f.dir)
	default:
		f.task = t
	}
}

// adopt keeps a good record in tasks. Files come in lifecycle order, so
// when the id is already there this copy is in a later state: a move writes
// its destination before unlinking its source, so the later copy is the
// newer one, and the earlier file is deleted. (Keeping the earlier copy
// could let a finished task be claimed and finished again.)
func (s *Store) adopt(tasks map[ports.Key]domain.Task, f *found) {
	k := ports.KeyOf(f.task)
	if old, ok := tasks[k]; ok {
		stale := s.files.path(old)
		if err := os.Remove(stale); err != nil {
			// Harmless: the next start-up makes the same choice again.
			s.log.Error("cannot remove superseded task file", zap.String("path", stale), zap.Error(err))
		} else {
			s.log.Info("removed superseded task file after an interrupted move",
				zap.String("path", stale), zap.String("kept", f.path))
		}
	}
	tasks[k] = f.task
}

// quarantine moves an unusable file to <queue>/corrupt/ and records it. If
// the move fails the file stays where it is, out of the index, and is
// reported (again at the next start-up).
func (s *Store) quarantine(f *found) {
	c := Corrupt{Host: f.ref.Host, Queue: f.ref.Queue, ID: f.id, Path: f.path, Err: f.corrupt}
	if dst, err := moveNoReplace(f.path, filepath.Join(s.files.queuePath(f.ref), "corrupt"), filepath.Base(f.path)); err != nil {
		s.log.Error("cannot move corrupt task file", zap.String("path", f.path), zap.Error(err))
	} else {
		c.Path = dst
	}
	s.log.Warn("corrupt task file", zap.String("path", c.Path), zap.NamedError("reason", f.corrupt))
	s.recovered = append(s.recovered, c)
}

// moveNoReplace moves src into dir under name, or name.1, name.2... when
// that is taken: a corrupt file is evidence and must never overwrite another.
// A hard link fails rather than replace, which a rename would not.
func moveNoReplace(src, dir, name string) (string, error) {
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return "", err
	}
	for n := 0; ; n++ {
		dst := filepath.Join(dir, name)
		if n > 0 {
			dst += "." + strconv.Itoa(n)
		}
		err := os.Link(src, dst)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		return dst, os.Remove(src)
	}
}
