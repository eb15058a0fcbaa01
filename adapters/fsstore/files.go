package fsstore

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/adapters/index"
	"github.com/taskhoster/taskhoster/domain"
)

// dirMode is for the state directories. Task records may carry private
// payloads: the files themselves are created 0600 (os.CreateTemp).
const dirMode = 0o750

// tempMarker is in the name of every temp file a write leaves behind when it
// is interrupted; the start-up scan removes such files.
const tempMarker = ".json.tmp-"

func fileName(id string) string { return id + ".json" }

func isTempName(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, tempMarker)
}

// files keeps one file per task in step with the index: it is the index's
// index.Persister. The index calls it outside the queue's lock, so calls
// for different tasks, of one queue or of many, run side by side; calls
// for one task never overlap, since the index marks a task busy while its
// change is written and decides its next change only after that.
type files struct {
	items string // the items folder
	// ready holds the queues (domain.QueueRef) whose three state directories
	// are known to exist, so that a write does not create (or stat) them
	// again. Each queue is added once and then only read.
	ready  sync.Map
	closed atomic.Bool // the folder lock is released: write nothing more
	// spares holds each queue's spare files (*spares by domain.QueueRef,
	// spares.go); spareSeq names them.
	spares   sync.Map
	spareSeq atomic.Uint64
	// held counts the descriptors of spares and task files the store
	// holds open (spares.go), up to limit.
	held      atomic.Int64
	limitOnce sync.Once
	limit     int64
	tempSeq   atomic.Uint64 // names temp files
	// journal, if any, records every write: once it is done, or for a
	// write that destroys a record, held until done (Put, journal.go).
	journal Journal
	// pending holds the writes recorded before they are done (a pending
	// by path, Put).
	pending sync.Map
	// retiring, taken for reading by each retire after a commit (noted,
	// then done), lets Close see them all and wait for them before the
	// folder is another process's.
	retiring sync.RWMutex
	log      *zap.Logger
}

var _ index.Persister = (*files)(nil)

// queuePath is <items>/<host>/<queue>.
func (f *files) queuePath(ref domain.QueueRef) string {
	return filepath.Join(f.items, ref.Host, ref.Queue)
}

// path is where t lives: the state directory its status names. (One Join,
// not items joined to relPath: it is on every write's path.)
func (f *files) path(t domain.Task) string {
	return filepath.Join(f.items, t.Host, t.Queue, t.Status.Dir(), fileName(t.ID))
}

// relPath is t's path inside the items folder, as the journal records it.
func (f *files) relPath(t domain.Task) string {
	return filepath.Join(t.Host, t.Queue, t.Status.Dir(), fileName(t.ID))
}

// Put writes t's file. A move between states writes the destination and then
// retires the source (spares.go): a crash in between leaves two copies, and
// the start-up scan keeps the one in the later state.
//
// Under a recording journal, nothing that may be a task's only durable
// record is destroyed before a commit holds the record that replaces it. A
// file written since the last checkpoint is durable through its journal
// record alone, and the disc may keep a rename without the data renamed
// (ext4 orders neither a spare's overwrite nor a new file's delayed
// allocation before a rename onto nothing, and ext4 without a journal
// orders nothing): a power loss could leave the destination empty, or
// holding another task's old record, with the source gone and no record to
// restore either. So a move forward retires its source once a commit holds
// its records, as that commit's callers are answered and before the next
// commit (AfterCommit); a move back commits, then retires its source, before
// it returns (the scan would keep its source, the later state, were it
// left); and a rewrite in place commits its record before its rename
// (rewrite). Until such a write is done the journal holds its record
// (Hold), which every new lap says again, and a later write that the scan
// could put behind it waits for it (awaitPending).
func (f *files) Put(old *domain.Task, t domain.Task, data []byte) error {
	if err := f.usable(); err != nil {
		return err
	}
	moved := old != nil && old.Status.Dir() != t.Status.Dir()
	if err := f.awaitPending(t, moved && backward(*old, t)); err != nil {
		return err
	}
	if f.recording() {
		if old != nil && !moved {
			return f.rewrite(t, data)
		}
		if err := f.write(t, data, old == nil, moved); err != nil {
			return err
		}
		f.journal.Put(f.relPath(t), data)
		if !moved {
			return nil
		}
		ref, src, hold := domain.KeyOf(t).Ref(), f.path(*old), f.journal.Hold(f.relPath(*old), nil)
		if backward(*old, t) {
			defer f.finish(src, f.unfinished(src, hold))
			if err := f.journal.Sync(context.Background()); err != nil {
				return err // src stays, and the scan keeps it
			}
			return f.retire(ref, src)
		}
		// Noted and given to the journal under one read lock: Close sees
		// both or neither, so the commit it asks for retires what it saw.
		f.retiring.RLock()
		retired := f.unfinished(src, hold)
		f.journal.AfterCommit(func() { f.retireCommitted(ref, src, retired) })
		f.retiring.RUnlock()
		return nil
	}
	if err := f.write(t, data, old == nil, moved); err != nil {
		return err
	}
	if moved {
		if err := f.retire(domain.KeyOf(t).Ref(), f.path(*old)); err != nil {
			// Undo the write, so the disc keeps agreeing with the index.
			if h := f.forget(domain.KeyOf(t).Ref(), f.path(t)); h.fd >= 0 {
				f.release(h.fd)
			}
			_ = os.Remove(f.path(t))
			return err
		}
	}
	return nil
}

// recording says whether writes go to a journal that records them (--sync
// always); a journal that does not only held what an earlier run left.
func (f *files) recording() bool { return f.journal != nil && f.journal.Recording() }

// backward reports whether a move from old to t goes back in the lifecycle
// (a re-queue, a retry): after a crash the start-up scan keeps the copy in
// the later state, for such a move the old one.
func backward(old, t domain.Task) bool {
	return slices.Index(domain.Dirs, t.Status.Dir()) < slices.Index(domain.Dirs, old.Status.Dir())
}

// pending is a write recorded in the journal before it is done on disc (a
// move's source to retire, a rewrite to rename): the journal's hold on its
// record, and done, closed once it is done.
type pending struct {
	release func()
	done    chan struct{}
}

// unfinished notes a write to path whose record the journal holds (release
// lets it go), until finish.
func (f *files) unfinished(path string, release func()) pending {
	p := pending{release: release, done: make(chan struct{})}
	f.pending.Store(path, p)
	return p
}

// finish ends the pending write p to path.
func (f *files) finish(path string, p pending) {
	f.pending.Delete(path)
	p.release()
	close(p.done)
}

// retireCommitted retires src, a moved task's old file, once a commit holds
// the move's records; it runs on the committing goroutine (AfterCommit),
// just after the commit's callers are woken.
func (f *files) retireCommitted(ref domain.QueueRef, src string, p pending) {
	defer f.finish(src, p)
	f.retiring.RLock()
	defer f.retiring.RUnlock()
	if f.closed.Load() {
		return // the folder may be another process's now
	}
	if err := f.retire(ref, src); err != nil {
		f.log.Error("a move left its source: cannot retire it", zap.String("path", src), zap.Error(err))
	}
}

// awaitPending returns once no write that must be done on disc before t's
// is pending; each goes first, with a commit. A write to t's own path
// always: a move's source still to retire there holds the task's old
// record. With back (a move back, or a removal), a write to any of the
// task's paths: a move forward's source still to retire elsewhere, were it
// left by a kill, would be in a state the start-up scan prefers (a retried
// dead letter's claim in processing/ over its new pending/ copy). Moves
// forward need not wait for their task's other paths: the scan prefers
// where they go.
func (f *files) awaitPending(t domain.Task, back bool) error {
	if !back {
		return f.awaitPath(f.path(t))
	}
	for _, dir := range domain.Dirs {
		if err := f.awaitPath(filepath.Join(f.items, t.Host, t.Queue, dir, fileName(t.ID))); err != nil {
			return err
		}
	}
	return nil
}

// awaitPath returns once no write to path is pending (awaitPending).
func (f *files) awaitPath(path string) error {
	p, ok := f.pending.Load(path)
	if !ok {
		return nil
	}
	if err := f.journal.Sync(context.Background()); err != nil {
		return err
	}
	<-p.(pending).done
	return nil
}

// unfinishedNow returns the done channels of the writes pending now: a
// move's retire is done once the next commit has run, if that commit
// succeeds; a move back or a rewrite once its own write returns.
func (f *files) unfinishedNow() []chan struct{} {
	f.retiring.Lock()
	defer f.retiring.Unlock()
	var done []chan struct{}
	f.pending.Range(func(_, p any) bool {
		done = append(done, p.(pending).done)
		return true
	})
	return done
}

// rewrite replaces t's file in its directory under a recording journal: a
// temp file, the record committed, then the rename over the old file (see
// Put). A crash before the rename leaves the old file, which replay
// overwrites from the committed record after a power loss.
func (f *files) rewrite(t domain.Task, data []byte) error {
	ref := domain.KeyOf(t).Ref()
	dst := f.path(t)
	tmp, fd, err := f.createTemp(filepath.Dir(dst), t.ID, data)
	if err != nil {
		return unavailable("create temp file", err)
	}
	defer f.finish(dst, f.unfinished(dst, f.journal.Hold(f.relPath(t), data)))
	if err := f.journal.Sync(context.Background()); err != nil {
		_ = syscall.Close(fd)
		_ = os.Remove(tmp)
		return err
	}
	if err := rename(tmp, dst); err != nil {
		_ = syscall.Close(fd)
		_ = os.Remove(tmp)
		return unavailable("write task "+t.ID, err)
	}
	f.place(ref, dst, fd, len(data), !t.Status.Terminal())
	return nil
}

// Remove deletes t's file (retires it, spares.go). The removal is recorded
// before the file is set aside: once set aside, a move may take the file
// for its own and write into it in place, and the commit that holds that
// write must hold the removal too, or a power loss could leave t's name on
// another task's data.
func (f *files) Remove(t domain.Task) error {
	if err := f.usable(); err != nil {
		return err
	}
	if err := f.awaitPending(t, true); err != nil {
		return err
	}
	if f.journal != nil {
		f.journal.Remove(f.relPath(t))
	}
	return f.retire(domain.KeyOf(t).Ref(), f.path(t))
}

// usable refuses writes once Close has let another process have the folder.
func (f *files) usable() error {
	if f.closed.Load() {
		return domain.E(domain.KindUnavailable, domain.CodeStorageUnavailable, "task store is closed")
	}
	return nil
}

// ensureDirs creates the queue's state directories the first time it is
// written to.
func (f *files) ensureDirs(ref domain.QueueRef) error {
	if _, ok := f.ready.Load(ref); ok {
		return nil
	}
	for _, d := range domain.Dirs {
		if err := os.MkdirAll(filepath.Join(f.queuePath(ref), d), dirMode); err != nil {
			return unavailable("create state directory", err)
		}
	}
	f.ready.Store(ref, true)
	return nil
}

// write stores data as the file t's status names: a temp file, then a
// rename to the destination, so a reader (or a restart) sees the old record
// or the new one and never half of one. When the destination does not
// exist (post: a new task; moved: a move to another state) a spare of the
// queue serves as the temp file. A rewrite in place uses a new temp file,
// renamed over the old one (under a recording journal, rewrite does that).
// The file stays open for its next write unless the
// task is finished (spares.go). It does not fsync; Syncer does, for many
// writes at once.
func (f *files) write(t domain.Task, data []byte, post, moved bool) error {
	ref := domain.KeyOf(t).Ref()
	if err := f.ensureDirs(ref); err != nil {
		return err
	}
	dst := f.path(t)
	keep := !t.Status.Terminal()
	if (post || moved) && f.writeSpare(ref, dst, data, post, keep) {
		return nil
	}
	tmp, fd, err := f.createTemp(filepath.Dir(dst), t.ID, data)
	if err != nil {
		return unavailable("create temp file", err)
	}
	if err := rename(tmp, dst); err != nil {
		_ = syscall.Close(fd)
		_ = os.Remove(tmp) // best effort: the start-up scan removes it otherwise
		return unavailable("write task "+t.ID, err)
	}
	f.place(ref, dst, fd, len(data), keep)
	return nil
}

// place keeps fd, a temp file of n bytes just renamed to dst, open for the
// next write when keep says so, or closes it; either way it lets go of the
// file dst held before.
func (f *files) place(ref domain.QueueRef, dst string, fd, n int, keep bool) {
	if keep {
		f.held.Add(1)
		f.hold(ref, dst, fd, int64(n))
		return
	}
	_ = syscall.Close(fd)
	if h := f.forget(ref, dst); h.fd >= 0 { // the file it replaced
		f.release(h.fd)
	}
}

// createTemp writes data to a new temp file for task id in dir and returns
// its path and its open descriptor. Raw system calls: os.CreateTemp would
// also try to register the file with the runtime's poller, five calls more
// for a regular file.
func (f *files) createTemp(dir, id string, data []byte) (string, int, error) {
	for {
		path := filepath.Join(dir, "."+fileName(id)+".tmp-"+strconv.FormatUint(f.tempSeq.Add(1), 36))
		fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o600)
		if err == syscall.EEXIST || err == syscall.EINTR {
			continue // left by an earlier process, which the start-up scan missed
		}
		if err != nil {
			return "", -1, &os.PathError{Op: "create", Path: path, Err: err}
		}
		if err := writeAll(fd, data); err != nil {
			_ = syscall.Close(fd)
			_ = os.Remove(path)
			return "", -1, &os.PathError{Op: "write", Path: path, Err: err}
		}
		return path, fd, nil
	}
}

// writeAll writes data to fd from its start.
func writeAll(fd int, data []byte) error {
	for off := 0; off < len(data); {
		n, err := syscall.Pwrite(fd, data[off:], int64(off))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		off += n
	}
	return nil
}

// rename is os.Rename without its lstat of the destination (which Go makes
// to refuse renaming over a directory): one system call fewer on every
// write, and the store never renames onto a directory's name anyway.
func rename(from, to string) error {
	for {
		err := syscall.Rename(from, to)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
		}
		return nil
	}
}

// unlink removes a task's file. A file already gone is not an error: the
// index, which only this process changes, is what says a task exists.
func unlink(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return unavailable("remove task file", err)
	}
	return nil
}

// unavailable classifies a failed filesystem call: the disc is full, read
// only, or refuses us, and the caller may try again later.
func unavailable(op string, err error) error {
	return &domain.Error{
		Kind:    domain.KindUnavailable,
		Code:    domain.CodeStorageUnavailable,
		Message: op,
		Err:     err,
	}
}
