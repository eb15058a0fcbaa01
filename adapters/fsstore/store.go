// Package fsstore is the task repository on disc: one JSON file per task,
// <items>/<host>/<queue>/{pending,processing,done}/<id>.json, its directory
// being its state (SPEC §6, seed "Store").
//
// One process owns an items folder (a flock on <items>/.lock) and keeps an
// index of every queue in memory, rebuilt at Open. The index is a
// index.Store with this package's files as its Persister: it is the truth
// while the process runs, a claim or a result is decided under the queue's
// mutex, and the files follow it. Writes are atomic (temp file, rename) but
// not fsynced; durability is the Syncer's job, so that many writes share one
// flush.
package fsstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/adapters/index"
	"github.com/taskhoster/taskhoster/ports"
)

var _ ports.TaskRepository = (*Store)(nil)

// Store is a TaskRepository on disc. Open it, Close it when done.
type Store struct {
	// The index, writing through files, answers every TaskRepository call.
	// It is embedded as the port rather than as *index.Store so that
	// index's Load, which bypasses the files, is not part of this type.
	ports.TaskRepository

	files *files
	log   *zap.Logger
	lock  *os.File

	recovered []Corrupt // what the start-up scan quarantined; fixed after Open
	pauses    pauses    // the paused queues (pauses.go)
}

// Option configures Open.
type Option func(*Store)

// WithLogger logs what the start-up scan repairs (default: nothing is logged).
func WithLogger(l *zap.Logger) Option {
	return func(s *Store) { s.log = l }
}

// Open locks the items folder dir (creating it if needed), rebuilds the
// index from it and repairs what an interrupted run left: temp files,
// tasks found in two states, unreadable records (see Recovered). It fails
// at once, with an error wrapping ErrLocked, if another process has dir open.
func Open(dir string, opts ...Option) (*Store, error) {
	s := &Store{files: &files{items: dir}, log: zap.NewNop()}
	for _, o := range opts {
		o(s)
	}
	s.files.log = s.log
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("open items folder: %w", err)
	}
	lock, err := lockFolder(dir)
	if err != nil {
		return nil, fmt.Errorf("open items folder: %w", err)
	}
	s.lock = lock
	index := index.New(index.WithPersister(s.files))
	if err := s.replayJournal(); err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("open items folder %s: %w", dir, err)
	}
	if err := s.load(index); err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("open items folder %s: %w", dir, err)
	}
	// What replay and the scan repaired is made durable, and the journal
	// starts empty.
	if err := s.settleJournal(); err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("open items folder %s: %w", dir, err)
	}
	s.TaskRepository = index
	return s, nil
}

// Recovered lists the task files Open found corrupt and moved to
// <queue>/corrupt/, so that the app can log a "failed" event for each.
func (s *Store) Recovered() []Corrupt { return slices.Clone(s.recovered) }

// Close releases the items folder for another process. The store refuses
// writes afterwards.
func (s *Store) Close() error {
	if s.files.closed.Load() {
		return nil
	}
	// A commit first, for the moves whose sources go once one holds their
	// records, and those sources retired: a clean stop leaves each task in
	// one state directory. A retire under way ends before the folder is
	// let go; one that comes later finds the store closed.
	var errs []error
	if s.files.recording() {
		pending := s.files.unfinishedNow() // the moves' retires come with the commit below
		if err := s.files.journal.Sync(context.Background()); err != nil {
			errs = append(errs, err) // a failed commit retires nothing
		} else {
			for _, done := range pending {
				<-done
			}
		}
	}
	s.files.retiring.Lock()
	already := s.files.closed.Swap(true)
	s.files.retiring.Unlock()
	if already {
		return nil
	}
	s.files.dropSpares()
	// Every write is made durable now, so the next start has no journal
	// to replay.
	errs = append(errs, s.settleJournal())
	// Closing the file drops the flock.
	if err := s.lock.Close(); err != nil {
		errs = append(errs, fmt.Errorf("release items folder lock: %w", err))
	}
	return errors.Join(errs...)
}
