// Package durable makes the stores' writes durable with group commit: one
// flush serves every caller that asked while the previous flush ran, so a
// busy server pays for a few flushes a second, not one per request (SPEC
// §6, "Concurrent writes may share one fsync"). The server's flush is the
// journal's commit (adapters/journal, given to NewFunc); New flushes whole
// filesystems with syncfs, and FS is that flush on its own, which the
// journal's checkpoints use.
package durable

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

var (
	_ ports.Syncer = (*Syncer)(nil)
	_ ports.Syncer = None{}
)

// Syncer runs a flush for many callers at once. Made by New, the flush is
// syncfs(2) of whole filesystems: every file and directory entry written on
// them, by any of the stores, reaches stable storage, task files, renames,
// unlinks and event log lines at once, which per-file fsync could only do
// with many calls.
type Syncer struct {
	flush func() error
	fsys  *FS // the filesystems New flushes; nil for NewFunc
	// trailing is how many further flushes must finish after the one that
	// serves a batch before the batch is durable (see New).
	trailing int

	observe func(Flush) // told of every flush; nil: nobody is

	mu      sync.Mutex
	running bool   // a flush loop is going
	next    *batch // callers waiting for a flush that has not started yet
	closed  bool
	loop    sync.WaitGroup
}

// batch is the callers served by one flush.
type batch struct {
	done    chan struct{} // closed once the batch is durable
	err     error
	passes  int // trailing flushes finished since the one that served it
	callers int
}

// Flush is what one flush did, for metrics: how long it took, how many
// callers it served first (0 for a trailing flush that served nobody new)
// and whether it failed.
type Flush struct {
	Duration time.Duration
	Callers  int
	Err      error
}

// Observe has fn told of every flush, from the flushing goroutine; set it
// before the first Sync.
func (s *Syncer) Observe(fn func(Flush)) { s.observe = fn }

// New returns a Syncer for the filesystems holding dirs (which must exist).
// Dirs on the same filesystem are flushed once.
func New(dirs ...string) (*Syncer, error) {
	fsys, err := OpenFS(dirs...)
	if err != nil {
		return nil, err
	}
	s := NewFunc(fsys.Flush, fsys.trailing)
	s.fsys = fsys
	return s, nil
}

// FS flushes whole filesystems with syncfs(2).
type FS struct {
	files    []*os.File // one directory per distinct filesystem
	trailing int        // see needsTrailingFlush
}

// OpenFS prepares to flush the filesystems holding dirs (which must exist).
// Dirs on the same filesystem are flushed once.
func OpenFS(dirs ...string) (*FS, error) {
	seen := map[uint64]bool{}
	fsys := &FS{}
	fail := func(err error) (*FS, error) {
		_ = fsys.Close()
		return nil, err
	}
	for _, dir := range dirs {
		f, err := os.Open(dir)
		if err != nil {
			return fail(fmt.Errorf("open %s for syncing: %w", dir, err))
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			_ = f.Close()
			return fail(fmt.Errorf("stat %s: %w", dir, err))
		}
		if seen[st.Dev] {
			_ = f.Close()
			continue
		}
		seen[st.Dev] = true
		fsys.files = append(fsys.files, f)
		if needsTrailingFlush(f, st.Dev) {
			fsys.trailing = 1
		}
	}
	return fsys, nil
}

// Flush syncfs's each filesystem once.
func (fsys *FS) Flush() error {
	var errs []error
	for _, f := range fsys.files {
		if err := unix.Syncfs(int(f.Fd())); err != nil {
			errs = append(errs, fmt.Errorf("syncfs %s: %w", f.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// FlushAll makes every write made before the call durable on its own: it
// flushes once more where one flush is not enough (see needsTrailingFlush).
func (fsys *FS) FlushAll() error {
	for range 1 + fsys.trailing {
		if err := fsys.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// Trailing reports how many flushes after the first a write needs.
func (fsys *FS) Trailing() int { return fsys.trailing }

// Close releases the directories.
func (fsys *FS) Close() error {
	var errs []error
	for _, f := range fsys.files {
		errs = append(errs, f.Close())
	}
	fsys.files = nil
	return errors.Join(errs...)
}

// ext2/3/4 share this statfs magic number.
const extMagic = 0xEF53

// needsTrailingFlush reports whether one syncfs is not enough on f's
// filesystem. On ext4 without a journal, syncfs issues the device's cache
// flush before its last write-out of the metadata buffers (inode tables,
// directory blocks), so only the next syncfs's cache flush is known to
// cover a rename: a batch must then wait for the flush that served it and
// the one after it (under load they run back to back, so this costs
// latency, not throughput). With a journal, syncfs commits it with a cache
// flush that covers the metadata, and one flush is enough; so it is on
// filesystems whose sync forces their own log (XFS, btrfs). A journaled
// ext filesystem has an entry /proc/fs/jbd2/<device>-<journal inode>.
func needsTrailingFlush(f *os.File, dev uint64) bool {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &fs); err != nil || fs.Type != extMagic {
		return err != nil // unknown: be safe
	}
	name := deviceName(dev)
	if name == "" {
		return true
	}
	journals, _ := filepath.Glob("/proc/fs/jbd2/" + name + "-*")
	return len(journals) == 0
}

// deviceName is the kernel's name (vda, loop0) of the block device dev.
func deviceName(dev uint64) string {
	uevent, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/uevent", unix.Major(dev), unix.Minor(dev)))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(uevent), "\n") {
		if name, ok := strings.CutPrefix(line, "DEVNAME="); ok {
			return name
		}
	}
	return ""
}

// Trailing reports how many flushes after the one serving a batch it waits
// for (1 on ext4 without a journal, else 0); for logs and benchmarks.
func (s *Syncer) Trailing() int { return s.trailing }

// NewFunc returns a Syncer that group-commits calls to flush: for tests, and
// for anything that is made durable some other way than syncfs. trailing is
// how many more flushes must finish after the one serving a batch (0 when a
// flush is durable on its own).
func NewFunc(flush func() error, trailing int) *Syncer {
	return &Syncer{flush: flush, trailing: trailing}
}

// Sync returns once a flush that began after this call has finished, so
// every write completed before the call is on stable storage. A failed
// flush fails every caller it served, with a KindUnavailable error. A
// cancelled ctx stops the wait, not the flush.
func (s *Syncer) Sync(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return domain.E(domain.KindUnavailable, domain.CodeStorageUnavailable, "syncer is closed")
	}
	// Join the batch for the next flush. A flush running now may have
	// started before our caller's write, so it cannot serve us.
	if s.next == nil {
		s.next = &batch{done: make(chan struct{})}
	}
	b := s.next
	b.callers++
	if !s.running {
		s.running = true
		s.loop.Go(s.run)
	}
	s.mu.Unlock()

	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return fmt.Errorf("wait for flush: %w", ctx.Err())
	}
}

// run flushes batch after batch until no caller is waiting. Callers who
// arrive during a flush gather in s.next and are served together by the
// following one; a served batch then waits for s.trailing more flushes,
// which run even if nobody new is waiting.
func (s *Syncer) run() {
	var served []*batch // flushed, waiting for trailing flushes, oldest first
	s.mu.Lock()
	for s.next != nil || len(served) > 0 {
		b := s.next
		s.next = nil
		s.mu.Unlock()

		start := time.Now()
		err := s.flush()
		if s.observe != nil {
			f := Flush{Duration: time.Since(start), Err: err}
			if b != nil {
				f.Callers = b.callers // complete: b left s.next under the lock
			}
			s.observe(f)
		}
		for _, w := range served {
			w.fail(err)
			w.passes++
		}
		if b != nil {
			b.fail(err)
			served = append(served, b)
		}
		for len(served) > 0 && served[0].passes >= s.trailing {
			close(served[0].done)
			served = served[1:]
		}

		s.mu.Lock()
	}
	s.running = false
	s.mu.Unlock()
}

// fail records the first flush error a batch met.
func (b *batch) fail(err error) {
	if err != nil && b.err == nil {
		b.err = &domain.Error{
			Kind: domain.KindUnavailable, Code: domain.CodeStorageUnavailable,
			Message: "flush to stable storage failed", Err: err,
		}
	}
}

// Close refuses further calls, waits for the flushes already asked for and
// releases the directories.
func (s *Syncer) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.loop.Wait()
	if s.fsys != nil {
		return s.fsys.Close()
	}
	return nil
}

// None is the Syncer of --sync none: writes are left to the kernel's own
// schedule, for tests and throwaway queues.
type None struct{}

// Sync does nothing.
func (None) Sync(context.Context) error { return nil }
