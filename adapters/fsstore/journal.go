package fsstore

import (
	"context"

	"go.uber.org/zap"
)

// journalDir is where adapters/durable keeps the journal in the items
// folder; the scan passes it by without a warning.
const journalDir = ".journal"

// Journal is what the store needs of the durability adapter
// (adapters/durable: the Root of the items folder). Under --sync always
// every task-file write is recorded in it, so that a commit makes the
// writes durable: once done, or, for a write that would destroy a task's
// last durable record, before it is done, held until it is (Put); under
// --sync none it records nothing but may hold what a crashed run under
// --sync always left.
type Journal interface {
	// Put records that the file at path (inside the items folder) now
	// holds data; Remove, that it is gone.
	Put(path string, data []byte)
	Remove(path string)
	// Recording says whether Put and Remove record anything; Sync returns
	// once what they recorded before the call is durable (a commit).
	Recording() bool
	Sync(ctx context.Context) error
	// AfterCommit has fn run once a commit holds every record added
	// before the call, as the Syncs that commit serves return, and before
	// the next commit.
	AfterCommit(fn func())
	// Hold records, as Put (or, with data nil, Remove), a write the store
	// does only once a commit holds the record; until release, every new
	// lap of the journal says it again.
	Hold(path string, data []byte) (release func())
	// Replay rewrites the files a power loss may have cut from their
	// records, before the scan reads them. The store calls it (and
	// Settle) as the one that holds the folders' lock.
	Replay() (records, changed int, err error)
	// Settle makes every write so far durable and leaves the journal empty:
	// after the start-up's repairs, and at Close.
	Settle() error
}

// WithJournal has the store record every task-file write in j. Open replays
// j before it reads the folder, which restores any file whose data a power
// loss took, then settles it; Close settles it again.
func WithJournal(j Journal) Option {
	return func(s *Store) { s.files.journal = j }
}

// replayJournal rewrites from the journal the files it describes, before
// the scan reads them.
func (s *Store) replayJournal() error {
	j := s.files.journal
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

// settleJournal leaves the journal empty once the start-up's repairs (or,
// at Close, every write) are durable.
func (s *Store) settleJournal() error {
	if j := s.files.journal; j != nil {
		return j.Settle()
	}
	return nil
}
