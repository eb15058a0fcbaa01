package fsstore_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/durable"
	"github.com/taskhoster/taskhoster/adapters/fsstore"
	"github.com/taskhoster/taskhoster/domain"
)

// powerLoss is a store with a journal whose checkpoints take a snapshot of
// the task files: what a real checkpoint (syncfs) would have made durable.
type powerLoss struct {
	t         *testing.T
	dir       string
	boots     int
	mu        sync.Mutex
	durable   map[string]string // the files as of the latest-begun checkpoint that finished
	begun     int               // checkpoints begun
	durableAt int               // which of them durable is from
}

// open opens the store with its journal, in a boot of its own: a start-up
// after a power loss.
func (p *powerLoss) open(limit int64) (*fsstore.Store, *durable.Syncer) {
	p.t.Helper()
	p.boots++
	p.t.Setenv(durable.BootEnv, fmt.Sprintf("boot-%d", p.boots))
	j, err := durable.Open(durable.Config{Items: p.dir, Logs: p.t.TempDir(), Record: true, Limit: limit, Checkpoint: func() error {
		p.mu.Lock()
		p.begun++
		n := p.begun
		p.mu.Unlock()
		snap := snapshot(p.dir)
		p.mu.Lock()
		// A checkpoint begun earlier may finish later (the journal's
		// background one beside Settle's): what is durable is what the
		// latest-begun of those that finished saw, as a syncfs makes
		// durable everything written before it began, whichever ends last.
		if n > p.durableAt {
			p.durable, p.durableAt = snap, n
		}
		p.mu.Unlock()
		return nil
	}})
	if err != nil {
		p.t.Fatal(err)
	}
	s, err := fsstore.Open(p.dir, fsstore.WithJournal(j.Root(durable.Items)))
	if err != nil {
		p.t.Fatal(err)
	}
	return s, j
}

// TestJournalRestoresEveryCommittedWriteAfterAPowerLoss: goroutines churn a
// queue's tasks while a committer commits the journal, whose files are
// small enough to hand over many times. Then the power goes: every task
// file that changed since the last checkpoint is left in one of the states
// a power loss can leave it in (as the checkpoint saw it, as last written,
// empty, or gone). After a restart, the disc holds exactly the last
// committed writes, and so does the index.
func TestJournalRestoresEveryCommittedWriteAfterAPowerLoss(t *testing.T) {
	lostAll := 0
	for seed := range uint64(8) {
		p := &powerLoss{t: t, dir: t.TempDir()}
		s, j := p.open(16 << 10)

		stop := make(chan struct{})
		var committer sync.WaitGroup
		committer.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					if err := j.Sync(context.Background()); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
		churn(s, seed, 4, 120, 30)
		close(stop)
		committer.Wait()
		// A checkpoint now, then a few changes too small to fill the
		// journal: they are what the power loss hits for sure (the
		// background checkpoints above may have run late enough to cover
		// everything).
		if err := j.Settle(); err != nil {
			t.Fatal(err)
		}
		churn(s, seed+100, 1, 8, 30)
		if err := j.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		final := filesUnder(t, p.dir)
		fsstore.Crash(s)
		_ = j.Close()

		p.mu.Lock()
		durable := p.durable
		p.mu.Unlock()
		rng := rand.New(rand.NewPCG(seed, 11))
		lost := 0
		for path := range union(durable, final) {
			before, inBefore := durable[path]
			after, inAfter := final[path]
			if inBefore == inAfter && before == after {
				continue
			}
			lost++
			abs := filepath.Join(p.dir, path)
			switch rng.IntN(4) {
			case 0: // as the checkpoint saw it
				if inBefore {
					mustWrite(t, abs, before)
				} else {
					_ = os.Remove(abs)
				}
			case 1: // the write made it
			case 2:
				mustWrite(t, abs, "")
			case 3:
				_ = os.Remove(abs)
			}
		}
		lostAll += lost

		again, againJ := p.open(16 << 10)
		if diff := cmp.Diff(final, filesUnder(t, p.dir)); diff != "" {
			t.Errorf("seed %d: files after replay (-committed +got):\n%s", seed, diff)
		}
		if c := again.Recovered(); len(c) != 0 {
			t.Errorf("seed %d: %d files quarantined after replay: %+v", seed, len(c), c)
		}
		for path, data := range final {
			task, err := domain.DecodeTask([]byte(data))
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			got, err := again.Get(context.Background(), keyOf(task.ID))
			if err != nil || !cmp.Equal(task, got) {
				t.Errorf("seed %d: task %s in the index after replay: %v %s", seed, task.ID, err, cmp.Diff(task, got))
			}
		}
		if err := errors.Join(again.Close(), againJ.Close()); err != nil {
			t.Fatal(err)
		}
	}
	if lostAll == 0 {
		t.Fatal("no file changed after the last checkpoint in any round; the test tests nothing")
	}
	t.Logf("%d files left as a power loss could leave them, over 8 rounds", lostAll)
}

// snapshot is filesUnder for a folder that changes while it is read: a
// file that goes meanwhile is left out, as a syncfs running beside the
// writes may leave out a change.
func snapshot(root string) map[string]string {
	got := map[string]string{}
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (d.Name() == ".spare" || d.Name() == ".journal") {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() == ".lock" {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil {
			rel, _ := filepath.Rel(root, path)
			got[filepath.ToSlash(rel)] = string(b)
		}
		return nil
	})
	return got
}

func union(a, b map[string]string) map[string]bool {
	u := map[string]bool{}
	for k := range a {
		u[k] = true
	}
	for k := range b {
		u[k] = true
	}
	return u
}

func mustWrite(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
