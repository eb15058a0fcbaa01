package fsstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

var _ ports.Pauses = (*Store)(nil)

// pausedName is the file whose presence in <items>/<host>/<queue>/ says the
// queue is paused (SPEC §12). A dot name is no queue's state directory, and
// the scan, which lists only the state directories inside a queue's folder,
// passes it by; so do the spares, in .spare/.
const pausedName = ".paused"

// pauses are the paused queues: read from the folder at Open, and written
// through to it before SetPaused returns.
type pauses struct {
	mu     sync.Mutex // serialises SetPaused, so the file and the map agree
	paused sync.Map   // domain.QueueRef → true
}

func (f *files) pausedPath(ref domain.QueueRef) string {
	return filepath.Join(f.queuePath(ref), pausedName)
}

// Paused reports whether ref is paused.
func (s *Store) Paused(ref domain.QueueRef) bool {
	_, ok := s.pauses.paused.Load(ref)
	return ok
}

// SetPaused pauses or resumes ref, durably: the queue's .paused file is
// created (or removed) and fsynced with its folder before it returns, so
// the pause survives a restart and a power loss.
func (s *Store) SetPaused(ctx context.Context, ref domain.QueueRef, paused bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pause %s/%s: %w", ref.Host, ref.Queue, err)
	}
	if !domain.ValidHost(ref.Host) || !domain.ValidName(ref.Queue) {
		return domain.E(domain.KindInvalid, domain.CodeInvalidRequest, "bad queue %s/%s", ref.Host, ref.Queue)
	}
	if err := s.files.usable(); err != nil {
		return err
	}
	s.pauses.mu.Lock()
	defer s.pauses.mu.Unlock()
	var err error
	if paused {
		err = s.files.writePaused(ref)
	} else {
		err = s.files.removePaused(ref)
	}
	if err != nil {
		return unavailable("record the pause of "+ref.Host+"/"+ref.Queue, err)
	}
	if paused {
		s.pauses.paused.Store(ref, true)
	} else {
		s.pauses.paused.Delete(ref)
	}
	return nil
}

// writePaused creates the queue's .paused file, and its folders if need be,
// and makes them durable: the file, then each folder up to the items folder
// (any of them may be new).
func (f *files) writePaused(ref domain.QueueRef) error {
	qdir := f.queuePath(ref)
	if err := os.MkdirAll(qdir, dirMode); err != nil {
		return err
	}
	file, err := os.OpenFile(f.pausedPath(ref), os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	err = file.Sync()
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	for _, dir := range []string{qdir, filepath.Dir(qdir), f.items} {
		if err := syncDir(dir); err != nil {
			return err
		}
	}
	return nil
}

// removePaused removes the queue's .paused file, durably.
func (f *files) removePaused(ref domain.QueueRef) error {
	err := os.Remove(f.pausedPath(ref))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return syncDir(f.queuePath(ref))
}

// syncDir fsyncs a folder, so that the names made or removed in it last.
func syncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// scanPaused notes, at Open, whether the queue's folder holds a pause.
func (s *Store) scanPaused(ref domain.QueueRef) error {
	switch _, err := os.Lstat(s.files.pausedPath(ref)); {
	case err == nil:
		s.pauses.paused.Store(ref, true)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("read the pause of %s/%s: %w", ref.Host, ref.Queue, err)
	}
	return nil
}
