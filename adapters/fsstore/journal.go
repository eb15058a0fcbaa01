package fsstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/adapters/journal"
)

// journalDir is the journal's folder in the items folder. Its name cannot be
// a host's (host names do not begin with a dot).
const journalDir = ".journal"

// WithJournal has the store record every task-file write in j (under --sync
// always; root journal.Items must be the items folder), so that a commit of
// j makes the writes durable. Open replays j before it reads the folder,
// which restores any file whose data a power loss took, then settles it;
// Close settles it again.
func WithJournal(j *journal.Journal) Option {
	return func(s *Store) { s.files.journal = j }
}

// WithLeftoverJournal has Open replay j, a journal an earlier run under
// --sync always left, then make the result durable and remove the journal:
// a run that keeps none must not leave old records behind, for a later run
// to replay over its own writes. Open closes j.
func WithLeftoverJournal(j *journal.Journal) Option {
	return func(s *Store) { s.leftover = j }
}

// JournalDir is where the journal of the items folder dir belongs.
func JournalDir(dir string) string { return filepath.Join(dir, journalDir) }

// replayJournal rewrites from the journal the files it describes, before
// the scan reads them.
func (s *Store) replayJournal() error {
	j := s.files.journal
	if j == nil {
		j = s.leftover
	}
	if j == nil {
		return nil
	}
	records, changed, err := j.Replay()
	if err != nil {
		return err
	}
	if records > 0 {
		s.log.Info("replayed the journal", zap.Int("records", records), zap.Int("filesChanged", changed))
	}
	return nil
}

// settleJournal leaves the journal empty once the start-up's repairs are
// durable; a leftover journal is then removed.
func (s *Store) settleJournal() error {
	if j := s.files.journal; j != nil {
		return j.Settle()
	}
	j := s.leftover
	if j == nil {
		return nil
	}
	s.leftover = nil
	if err := errors.Join(j.Settle(), j.Close()); err != nil {
		return err
	}
	if err := os.RemoveAll(JournalDir(s.files.items)); err != nil {
		return fmt.Errorf("remove the journal: %w", err)
	}
	s.log.Info("replayed and removed the journal of a run under --sync always")
	return nil
}
