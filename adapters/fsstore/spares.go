package fsstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
// of the disc's (BENCHMARKS.md). A spare is still a temp file in the SPEC's
// sense: it is written whole, then renamed over nothing; spares left by a
// crash are removed at start-up, and a clean stop removes them too.
//
// Each queue keeps its own spares in <queue>/.spare/, outside the state
// directories (which hold task files only), and inside the queue's folder,
// since a rename cannot cross filesystems and that folder may be a mount.
// Should a rename fail all the same, the write falls back to a temp file.

// maxSpares bounds the spares kept per queue: a queue whose backlog shrinks
// frees the files it no longer needs.
const maxSpares = 256

// spares are one queue's spare files, by path.
type spares struct {
	mu    sync.Mutex
	paths []string
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
	s, _ := f.spares.LoadOrStore(ref, &spares{})
	return s.(*spares)
}

// take returns a spare's path, if the queue has one.
func (s *spares) take() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.paths) == 0 {
		return "", false
	}
	p := s.paths[len(s.paths)-1]
	s.paths = s.paths[:len(s.paths)-1]
	return p, true
}

// retire sets the task file at path aside as a spare of its queue, or
// unlinks it when the queue has spares enough.
func (f *files) retire(ref domain.QueueRef, path string) error {
	s := f.sparesOf(ref)
	s.mu.Lock()
	full := len(s.paths) >= maxSpares
	s.mu.Unlock()
	if full {
		return unlink(path)
	}
	spare := f.sparePath(ref, f.spareSeq.Add(1))
	err := rename(path, spare)
	if errors.Is(err, fs.ErrNotExist) {
		// The first spare of the queue since start-up: make its folder.
		if err = os.Mkdir(filepath.Dir(spare), dirMode); err == nil || errors.Is(err, fs.ErrExist) {
			err = rename(path, spare)
		}
	}
	if err != nil {
		return unlink(path)
	}
	s.mu.Lock()
	s.paths = append(s.paths, spare)
	s.mu.Unlock()
	return nil
}

// writeSpare writes data into a spare of the queue and renames it to dst,
// reporting false if it did not (no spare, or the spare failed and is gone).
func (f *files) writeSpare(ref domain.QueueRef, dst string, data []byte) bool {
	spare, ok := f.sparesOf(ref).take()
	if !ok {
		return false
	}
	err := overwrite(spare, data)
	if err == nil {
		err = rename(spare, dst)
	}
	if err != nil {
		// The spare goes; a fresh temp file may still work, and if the
		// disc is failing, that write says so.
		_ = os.Remove(spare)
		return false
	}
	return true
}

// overwrite makes the file at path hold exactly data. Raw system calls: an
// os.File would register with the runtime's poller, one more call for a
// regular file that cannot use it. It truncates only a spare longer than
// data: a truncate is a journaled change of the inode, several times the
// cost of the fstat that tells, and a task's records grow as it moves on,
// so most spares are no longer than what they are given.
func overwrite(path string, data []byte) error {
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	var st syscall.Stat_t
	err = syscall.Fstat(fd, &st)
	if err == nil {
		err = writeAll(fd, data)
	}
	if err == nil && st.Size > int64(len(data)) {
		err = syscall.Ftruncate(fd, int64(len(data)))
	}
	if cerr := syscall.Close(fd); err == nil {
		err = cerr
	}
	return err
}

// dropSpares removes every queue's spares, so that a clean stop leaves
// task files only.
func (f *files) dropSpares() {
	f.spares.Range(func(k, v any) bool {
		s := v.(*spares)
		s.mu.Lock()
		s.paths = nil
		s.mu.Unlock()
		_ = os.RemoveAll(filepath.Join(f.queuePath(k.(domain.QueueRef)), spareDir))
		return true
	})
}
