package fsstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/taskhoster/taskhoster/adapters/index"
	"github.com/taskhoster/taskhoster/domain"
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

// stateDir is one listed state directory, <items>/<host>/<queue>/<dir>,
// with the task files the scan found in it.
type stateDir struct {
	ref  domain.QueueRef
	dir  string // pending, processing or done
	path string
	ids  []string // the task files' names without .json
	fd   int      // open while its files are read, so each is opened by name
}

// found is one candidate task file met by the scan.
type found struct {
	in *stateDir
	id string // the file name without .json
}

func (f found) path() string { return filepath.Join(f.in.path, fileName(f.id)) }

// load reads every task the items folder holds into index and repairs what
// a crash left behind. It is the only place that lists directories.
//
// A task is in two state directories only after a crash in the middle of a
// move, and then the copy in the later state is the newer one (a move
// writes its destination before unlinking its source). So the files are
// loaded a state at a time, in lifecycle order (every queue's pending, then
// processing, then done), each directory's files in parallel: a later copy
// replaces the earlier one in the index, and the earlier file is deleted.
func (s *Store) load(index *index.Store) error {
	stages, err := s.scan()
	if err != nil {
		return err
	}
	for _, dirs := range stages {
		for _, d := range dirs {
			corrupt, err := s.loadDir(index, d)
			if err != nil {
				return err
			}
			// Serially and in order, so that two corrupt copies of one
			// task get their names in corrupt/ in lifecycle order.
			for _, c := range corrupt {
				s.quarantine(c.f, c.err)
			}
		}
	}
	s.recovered = s.leftovers(index, s.recovered)
	return nil
}

// leftovers drops from recovered the files of tasks that the scan found a
// good copy of in another state: what a move interrupted by a power loss
// left, a destination whose data never reached the disc or a source
// renamed aside too late, whose inode a spare's new record overwrote. The
// task lives, so no "failed" event is due for it; the file stays in
// corrupt/ all the same.
func (s *Store) leftovers(index *index.Store, recovered []Corrupt) []Corrupt {
	return slices.DeleteFunc(recovered, func(c Corrupt) bool {
		t, err := index.Get(context.Background(), domain.Key{Host: c.Host, Queue: c.Queue, ID: c.ID})
		if err != nil {
			return false
		}
		s.log.Info("a moved task's other copy was unusable; the task lives",
			zap.String("path", c.Path), zap.String("status", string(t.Status)))
		return true
	})
}

// scan lists every host, queue and state directory, removes leftover temp
// files and returns the state directories to read by state, in the order of
// domain.Dirs. Names that are not valid are left alone: they are not ours.
func (s *Store) scan() ([][]*stateDir, error) {
	stages := make([][]*stateDir, len(domain.Dirs))
	hosts, err := os.ReadDir(s.files.items)
	if err != nil {
		return nil, fmt.Errorf("list items folder: %w", err)
	}
	for _, h := range hosts {
		if !h.IsDir() || !domain.ValidHost(h.Name()) {
			if h.Name() != ".lock" && h.Name() != journalDir {
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
			ref := domain.QueueRef{Host: h.Name(), Queue: qe.Name()}
			if err := s.scanQueue(ref, stages); err != nil {
				return nil, err
			}
		}
	}
	return stages, nil
}

func (s *Store) scanQueue(ref domain.QueueRef, stages [][]*stateDir) error {
	if err := s.scanPaused(ref); err != nil {
		return err
	}
	// Spares a crash left behind (spares.go) hold nothing of value.
	if err := os.RemoveAll(filepath.Join(s.files.queuePath(ref), spareDir)); err != nil {
		s.log.Error("cannot remove leftover spare files", zap.String("host", ref.Host), zap.String("queue", ref.Queue), zap.Error(err))
	}
	ready := true
	for i, d := range domain.Dirs {
		sd := &stateDir{ref: ref, dir: d, path: filepath.Join(s.files.queuePath(ref), d), fd: -1}
		entries, err := list(sd.path)
		if errors.Is(err, fs.ErrNotExist) {
			ready = false
			continue
		}
		if err != nil {
			return fmt.Errorf("list state directory: %w", err)
		}
		for _, e := range entries {
			name := e.Name()
			if isTempName(name) && e.Type().IsRegular() {
				// A write that never reached its rename: the old record,
				// if any, is still in place and is the truth.
				path := filepath.Join(sd.path, name)
				if err := os.Remove(path); err != nil {
					s.log.Error("cannot remove leftover temp file", zap.String("path", path), zap.Error(err))
				} else {
					s.log.Info("removed leftover temp file", zap.String("path", path))
				}
				continue
			}
			id, ok := strings.CutSuffix(name, ".json")
			if !ok || !domain.ValidID(id) || !e.Type().IsRegular() {
				s.log.Warn("ignoring entry in state directory", zap.String("path", filepath.Join(sd.path, name)))
				continue
			}
			sd.ids = append(sd.ids, id)
		}
		if len(sd.ids) > 0 {
			stages[i] = append(stages[i], sd)
		}
	}
	if ready {
		s.files.ready.Store(ref, true)
	}
	return nil
}

// list lists a directory unsorted (os.ReadDir sorts): order does not matter
// to the index, and sorting a big directory's names costs more than listing
// them.
func list(path string) ([]fs.DirEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}

// rejected is a file that does not hold a usable record.
type rejected struct {
	f   found
	err error
}

// loadDir reads, checks and indexes d's files in parallel: start-up time is
// waiting for the disc when the files are not cached, and decoding when
// they are, and either way a big folder must come up in seconds. It
// returns the files that hold no usable record; a file that cannot be read
// at all (a folder we may not read, an I/O error) fails the whole start,
// since serving without it would lose its task.
//
// The directory is held open meanwhile and each file opened by name in it,
// which spares the kernel walking the whole path for every file; one
// directory at a time, so that a folder of many queues does not run out of
// file descriptors.
func (s *Store) loadDir(index *index.Store, d *stateDir) ([]rejected, error) {
	fd, err := unix.Open(d.path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("read task files: %w", &fs.PathError{Op: "open", Path: d.path, Err: err})
	}
	defer unix.Close(fd)
	d.fd = fd
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		mu      sync.Mutex // guards corrupt and readErr
		corrupt []rejected
		readErr error
	)
	workers := min(len(d.ids), max(8, 4*runtime.GOMAXPROCS(0)))
	for range workers {
		wg.Go(func() {
			var r reader
			for {
				i := int(next.Add(1)) - 1
				if i >= len(d.ids) {
					return
				}
				f := found{in: d, id: d.ids[i]}
				t, bad, err := r.read(f)
				if err == nil && bad == nil {
					bad = s.index(index, f, t)
				}
				if err != nil || bad != nil {
					mu.Lock()
					if err != nil && readErr == nil {
						readErr = fmt.Errorf("read task file: %w", err)
						next.Store(int64(len(d.ids))) // stop the others
					}
					if bad != nil {
						corrupt = append(corrupt, rejected{f, bad})
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return corrupt, readErr
}

// index puts a good record into the index. If a copy of it from an earlier
// state was there, that copy's file is stale and goes.
func (s *Store) index(index *index.Store, f found, t domain.Task) error {
	replaced, err := index.Load(t)
	if err != nil {
		return err
	}
	if replaced == "" {
		return nil
	}
	stale := t
	stale.Status = replaced
	path := s.files.path(stale)
	if err := os.Remove(path); err != nil {
		// Harmless: the next start-up makes the same choice again.
		s.log.Error("cannot remove superseded task file", zap.String("path", path), zap.Error(err))
	} else {
		s.log.Info("removed superseded task file after an interrupted move",
			zap.String("path", path), zap.String("kept", f.path()))
	}
	return nil
}

// reader reads task files into a buffer it reuses: a file is opened by
// name in its open directory and read to the end, with no stat and no
// registration with the runtime's poller, which os.ReadFile does for each.
type reader struct{ buf []byte }

// read returns the record in f, or why it is not a usable one (bad), or
// why it could not be read (err).
func (r *reader) read(f found) (t domain.Task, bad, err error) {
	data, err := r.readFile(f)
	if err != nil {
		return domain.Task{}, nil, err
	}
	t, err = domain.DecodeTask(data)
	switch {
	case err != nil:
		return domain.Task{}, err, nil
	case t.ID != f.id:
		return domain.Task{}, fmt.Errorf("file of task %s holds task %s", f.id, t.ID), nil
	case t.Host != f.in.ref.Host || t.Queue != f.in.ref.Queue:
		return domain.Task{}, fmt.Errorf("file in %s/%s holds a task of %s/%s", f.in.ref.Host, f.in.ref.Queue, t.Host, t.Queue), nil
	case t.Status.Dir() != f.in.dir:
		return domain.Task{}, fmt.Errorf("task with status %s found in %s", t.Status, f.in.dir), nil
	}
	return t, nil, nil
}

// readFile reads f whole into r's buffer; the result is valid until the
// next call. (DecodeTask keeps nothing of it: it copies what it keeps.)
func (r *reader) readFile(f found) ([]byte, error) {
	name := fileName(f.id)
	fd, err := ignoringEINTR(func() (int, error) {
		return unix.Openat(f.in.fd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: f.path(), Err: err}
	}
	defer unix.Close(fd)
	if r.buf == nil {
		r.buf = make([]byte, 16<<10)
	}
	n := 0
	for {
		if n == len(r.buf) {
			r.buf = append(r.buf, make([]byte, len(r.buf))...)
		}
		m, err := ignoringEINTR(func() (int, error) { return unix.Read(fd, r.buf[n:]) })
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: f.path(), Err: err}
		}
		if m == 0 {
			return r.buf[:n], nil
		}
		n += m
	}
}

func ignoringEINTR(call func() (int, error)) (int, error) {
	for {
		n, err := call()
		if err != unix.EINTR {
			return n, err
		}
	}
}

// quarantine moves an unusable file to <queue>/corrupt/ and records it. If
// the move fails the file stays where it is, out of the index, and is
// reported (again at the next start-up).
func (s *Store) quarantine(f found, why error) {
	c := Corrupt{Host: f.in.ref.Host, Queue: f.in.ref.Queue, ID: f.id, Path: f.path(), Err: why}
	if dst, err := moveNoReplace(c.Path, filepath.Join(s.files.queuePath(f.in.ref), "corrupt"), fileName(f.id)); err != nil {
		s.log.Error("cannot move corrupt task file", zap.String("path", c.Path), zap.Error(err))
	} else {
		c.Path = dst
	}
	s.log.Warn("corrupt task file", zap.String("path", c.Path), zap.NamedError("reason", why))
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
