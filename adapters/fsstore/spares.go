package fsstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/taskhoster/taskhoster/domain"
)

// Spare files: a task file that leaves a directory (a move to the next
// state, or a clean) is not unlinked but renamed aside, and the next write
// of the queue overwrites it and renames it into place. So a task's life
// costs no inode beyond the one it ends in, where a temp file per write
// would create and free one for every post, claim and result.
//
// That matters on ext4 without a journal, where creating a file skips
// every inode freed in the last half minute or so: under churn each create
// scans thousands of them, and the store's throughput fell to a fraction
// of the disc's (BENCHMARKS.md's history). A spare is still a temp file in
// the SPEC's sense: it is written whole, then renamed over nothing; spares
// left by a crash are removed at start-up, and a clean stop removes them
// too.
//
// Each queue keeps its own spares in <queue>/.spare/, outside the state
// directories (which hold task files only), and inside the queue's folder,
// since a rename cannot cross filesystems and that folder may be a mount.
// Should a rename fail all the same, the write falls back to a temp file.

// Open files. The store keeps a task file open from its write until it
// leaves its directory (while the task is pending or processing), and a
// spare open until it is written again: a descriptor follows its inode
// through renames, so the next write of that inode is a pwrite, with no
// open, fstat or close around it, and its size, which says whether it
// needs a truncate, is known: a task's post, claim and result make 11 file
// system calls instead of 17. A file that is done is closed: it may wait
// for its retention for days. What is held open is bounded (maxHeld, and
// never more than a quarter of the process's descriptor limit); beyond it
// files are closed, and written as before.

// maxSpares bounds the spares kept per queue: a queue whose backlog shrinks
// frees the files it no longer needs.
const maxSpares = 256

// maxHeld bounds the descriptors a store holds open, in all its queues.
const maxHeld = 4096

// spare is a spare file, open (fd ≥ 0, holding size bytes) or not (fd -1).
type spare struct {
	path string
	fd   int
	size int64
}

// held is a task file the store holds open.
type held struct {
	fd   int
	size int64
}

// spares are one queue's spare files and the task files it holds open.
type spares struct {
	mu   sync.Mutex
	free []spare
	open map[string]held // by path
}

// spareDir is the folder of a queue's spares, beside its state directories.
const spareDir = ".spare"

// sparePath is where the n-th spare a process sets aside goes.
func (f *files) sparePath(ref domain.QueueRef, n uint64) string {
	return filepath.Join(f.queuePath(ref), spareDir, fmt.Sprintf("%d", n))
}

func (f *files) sparesOf(ref domain.QueueRef) *spares {
	if s, ok := f.spares.Load(ref); ok {
		return s.(*spares)
	}
	s, _ := f.spares.LoadOrStore(ref, &spares{open: map[string]held{}})
	return s.(*spares)
}

// take returns a spare for n bytes, if the queue has one: the longest no
// longer than n, which needs no truncate and leaves the shorter spares to
// shorter records (a result's record may be shorter than the claim's it
// follows, which held a lease); or, unless fit, the last set aside.
func (s *spares) take(n int, fit bool) (spare, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := -1
	for j, sp := range s.free {
		if sp.fd >= 0 && sp.size <= int64(n) && (i < 0 || sp.size >= s.free[i].size) {
			i = j
		}
	}
	if i < 0 && !fit {
		i = len(s.free) - 1
	}
	if i < 0 {
		return spare{}, false
	}
	sp := s.free[i]
	s.free = slices.Delete(s.free, i, i+1)
	return sp, true
}

// hold keeps fd, the file just written at path with size bytes and
// already counted in held, open for its next write, if the store may hold
// that many; else it closes it. What the store held for path before, the
// file this one replaced, is closed either way: a descriptor held for a
// path is always that of the file at the path, or a spare made of it would
// be written through another inode.
func (f *files) hold(ref domain.QueueRef, path string, fd int, size int64) {
	keep := f.held.Load() <= f.maxHeld()
	s := f.sparesOf(ref)
	s.mu.Lock()
	old, had := s.open[path]
	if keep {
		s.open[path] = held{fd, size}
	} else {
		delete(s.open, path)
	}
	s.mu.Unlock()
	if had {
		f.release(old.fd)
	}
	if !keep {
		f.release(fd)
	}
}

// forget lets go of the file at path if the store holds it open, and
// returns what it held (fd -1 if nothing), for the caller to keep or close.
func (f *files) forget(ref domain.QueueRef, path string) held {
	s := f.sparesOf(ref)
	s.mu.Lock()
	h, ok := s.open[path]
	delete(s.open, path)
	s.mu.Unlock()
	if !ok {
		return held{fd: -1}
	}
	return h
}

// release closes fd, one the store held.
func (f *files) release(fd int) {
	_ = syscall.Close(fd)
	f.held.Add(-1)
}

// maxHeld is how many descriptors the store may hold open.
func (f *files) maxHeld() int64 {
	f.limitOnce.Do(func() {
		f.limit = maxHeld
		var rl syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil {
			f.limit = min(f.limit, int64(rl.Cur/4))
		}
	})
	return f.limit
}

// retire sets the task file at path aside as a spare of its queue, or
// unlinks it when the queue has spares enough.
func (f *files) retire(ref domain.QueueRef, path string) error {
	h := f.forget(ref, path)
	drop := func() error {
		if h.fd >= 0 {
			f.release(h.fd)
		}
		return unlink(path)
	}
	s := f.sparesOf(ref)
	s.mu.Lock()
	full := len(s.free) >= maxSpares
	s.mu.Unlock()
	if full {
		return drop()
	}
	sp := f.sparePath(ref, f.spareSeq.Add(1))
	err := rename(path, sp)
	if errors.Is(err, fs.ErrNotExist) {
		// The first spare of the queue since start-up: make its folder.
		if err = os.Mkdir(filepath.Dir(sp), dirMode); err == nil || errors.Is(err, fs.ErrExist) {
			err = rename(path, sp)
		}
	}
	if err != nil {
		return drop()
	}
	s.mu.Lock()
	s.free = append(s.free, spare{path: sp, fd: h.fd, size: h.size})
	s.mu.Unlock()
	return nil
}

// writeSpare writes data into a spare of the queue and renames it to dst,
// reporting false if it did not (no spare, or the spare failed and is gone).
// post says data is a new task's: it takes only a spare that needs no
// truncate. A task's records grow as it moves on, and a task ends as a
// file in done/, so every task needs one file more than the spares its
// moves leave: its post makes that file new, unless a spare fits, and the
// claim and the result write into the files the post and the claim left,
// which are shorter than theirs. keep says the written file is to be held
// open.
func (f *files) writeSpare(ref domain.QueueRef, dst string, data []byte, post, keep bool) bool {
	sp, ok := f.sparesOf(ref).take(len(data), post)
	if !ok {
		return false
	}
	err := f.overwrite(&sp, data)
	if err == nil {
		err = rename(sp.path, dst)
	}
	if err != nil {
		// The spare goes; a fresh temp file may still work, and if the
		// disc is failing, that write says so.
		if sp.fd >= 0 {
			f.release(sp.fd)
		}
		_ = os.Remove(sp.path)
		return false
	}
	if keep {
		f.hold(ref, dst, sp.fd, sp.size)
	} else {
		f.release(sp.fd)
	}
	return true
}

// overwrite makes sp's file hold exactly data, opening it if it is not
// open (sp.fd is then the store's, counted in held). Raw system calls: an
// os.File would register with the runtime's poller, one more call for a
// regular file that cannot use it. It truncates only a spare longer than
// data: a truncate is a journaled change of the inode, and take prefers
// spares no longer than what they are given.
func (f *files) overwrite(sp *spare, data []byte) error {
	if sp.fd < 0 {
		fd, err := syscall.Open(sp.path, syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			_ = syscall.Close(fd)
			return err
		}
		f.held.Add(1)
		sp.fd, sp.size = fd, st.Size
	}
	err := writeAll(sp.fd, data)
	if err == nil && sp.size > int64(len(data)) {
		err = syscall.Ftruncate(sp.fd, int64(len(data)))
	}
	sp.size = int64(len(data))
	return err
}

// dropSpares removes every queue's spares and closes the files the store
// holds open, so that a clean stop leaves task files only.
func (f *files) dropSpares() {
	f.closeHeld()
	f.spares.Range(func(k, _ any) bool {
		_ = os.RemoveAll(filepath.Join(f.queuePath(k.(domain.QueueRef)), spareDir))
		return true
	})
}

// closeHeld closes every descriptor the store holds open and forgets the
// spares.
func (f *files) closeHeld() {
	f.spares.Range(func(_, v any) bool {
		s := v.(*spares)
		s.mu.Lock()
		for _, sp := range s.free {
			if sp.fd >= 0 {
				f.release(sp.fd)
			}
		}
		for _, h := range s.open {
			f.release(h.fd)
		}
		s.free, s.open = nil, map[string]held{}
		s.mu.Unlock()
		return true
	})
}
