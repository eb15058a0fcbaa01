package fsstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	pathpkg "path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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

// spoil leaves every task file that changed since the last checkpoint
// (durable) on its way to final in one of the states a power loss can
// leave it in: as the checkpoint saw it, as last written, empty, or gone.
// It returns how many it found.
func (p *powerLoss) spoil(rng *rand.Rand, durable, final map[string]string) int {
	changed := 0
	for path := range union(durable, final) {
		before, inBefore := durable[path]
		if after, inAfter := final[path]; inBefore == inAfter && before == after {
			continue
		}
		changed++
		abs := filepath.Join(p.dir, path)
		switch rng.IntN(4) {
		case 0: // as the checkpoint saw it
			if inBefore {
				mustWrite(p.t, abs, before)
			} else {
				_ = os.Remove(abs)
			}
		case 1: // the write made it
		case 2:
			mustWrite(p.t, abs, "")
		case 3:
			_ = os.Remove(abs)
		}
	}
	return changed
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
		// Two commits: the retires of the first run after it wakes its
		// callers, and before the second begins.
		for range 2 {
			if err := j.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		final := filesUnder(t, p.dir)
		fsstore.Crash(s)
		_ = j.Close()

		p.mu.Lock()
		durable := p.durable
		p.mu.Unlock()
		lost := p.spoil(rand.New(rand.NewPCG(seed, 11)), durable, final)
		lostAll += lost

		again, againJ := p.open(16 << 10)
		if diff := cmp.Diff(final, withoutLeftovers(filesUnder(t, p.dir), final)); diff != "" {
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

// withoutLeftovers drops from got the files in corrupt/ of tasks that
// final holds: copies a power loss spoilt while a move's other copy was
// durable, which the scan sets aside (recover.go, leftovers).
func withoutLeftovers(got, final map[string]string) map[string]string {
	live := map[string]bool{}
	for path := range final {
		live[strings.TrimSuffix(pathpkg.Base(path), ".json")] = true
	}
	for path := range got {
		dir, name := pathpkg.Split(path)
		id, _, _ := strings.Cut(name, ".")
		if pathpkg.Base(dir) == "corrupt" && live[id] {
			delete(got, path)
		}
	}
	return got
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

// TestUncommittedChangesKeepEveryCommittedTask: tasks are posted and
// committed, a checkpoint lets the journal go, and then claims, progress,
// results and re-queues run that no caller committed (a claim is answered
// before any commit). The power goes: every file changed since the
// checkpoint is left in one of the states a power loss can leave it in. No
// committed task may be lost or found corrupt: a move keeps its source
// until a commit holds the move's records, and a rewrite commits its
// record before its rename replaces the old file.
func TestUncommittedChangesKeepEveryCommittedTask(t *testing.T) {
	const tasks = 8
	changed := 0
	for seed := range uint64(24) {
		p := &powerLoss{t: t, dir: t.TempDir()}
		s, j := p.open(1 << 20)
		ctx := context.Background()
		for n := range tasks {
			posted, _ := domain.Post(taskID(n), host, queue, json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), "alice", epoch)
			if err := s.Create(ctx, posted, nil); err != nil {
				t.Fatal(err)
			}
		}
		for n := range tasks / 2 { // some already processing at the checkpoint
			if _, err := s.ClaimNext(ctx, ref, nil, epoch, claimBy("box-0", epoch), nil); err != nil {
				t.Fatalf("claim %d: %v", n, err)
			}
		}
		if err := j.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if err := j.Settle(); err != nil {
			t.Fatal(err)
		}

		rng := rand.New(rand.NewPCG(seed, 5))
		now := epoch.Add(time.Second)
		for range 6 {
			k := keyOf(taskID(rng.IntN(tasks)))
			switch rng.IntN(4) {
			case 0:
				_, _ = s.ClaimNext(ctx, ref, nil, now, claimBy("box-1", now), nil)
			case 1:
				_, _ = s.Update(ctx, k, step(func(t domain.Task) (domain.Task, domain.Event, error) {
					return t.ReportProgress("box-0", json.RawMessage(`{"pct":50}`), time.Minute, now)
				}), nil)
			case 2:
				_, _ = s.Update(ctx, k, step(func(t domain.Task) (domain.Task, domain.Event, error) {
					return t.Finish("box-0", json.RawMessage(`{"ok":true}`), now)
				}), nil)
			case 3:
				_, _ = s.Update(ctx, k, step(func(t domain.Task) (domain.Task, domain.Event, error) {
					return t.Requeue(domain.CauseLease, domain.Retry{}, now)
				}), nil)
			}
		}
		fsstore.Crash(s)
		_ = j.Close()

		p.mu.Lock()
		durable := p.durable
		p.mu.Unlock()
		changed += p.spoil(rng, durable, filesUnder(t, p.dir))

		again, againJ := p.open(1 << 20)
		for n := range tasks {
			if _, err := again.Get(ctx, keyOf(taskID(n))); err != nil {
				t.Errorf("seed %d: committed task %s after the power loss: %v", seed, taskID(n), err)
			}
		}
		if c := again.Recovered(); len(c) != 0 {
			t.Errorf("seed %d: committed tasks reported corrupt: %+v", seed, c)
		}
		if err := errors.Join(again.Close(), againJ.Close()); err != nil {
			t.Fatal(err)
		}
	}
	if changed == 0 {
		t.Fatal("no file changed after the checkpoint in any round; the test tests nothing")
	}
}

// TestAMoveBackIsDoneBeforeItReturns: after a crash the scan keeps a
// task's copy in the later state, which for a move back (a re-queue, a
// retry) is the old one. So such a move's source is gone once the store
// says the change is made: a kill then cannot undo a change already
// logged. (A move forward may leave its source for a while; the scan keeps
// its destination.)
func TestAMoveBackIsDoneBeforeItReturns(t *testing.T) {
	p := &powerLoss{t: t, dir: t.TempDir()}
	s, j := p.open(1 << 20)
	defer j.Close()
	defer s.Close()
	ctx := context.Background()
	postAndClaim(t, s, j) // the claim's source goes just after its commit
	q := filepath.Join(p.dir, host, queue)
	for round := range 20 {
		now := epoch.Add(time.Duration(round+1) * time.Second)
		mustUpdate(t, s, keyOf(id), step(func(t domain.Task) (domain.Task, domain.Event, error) {
			return t.Requeue(domain.CauseLease, domain.Retry{}, now)
		}))
		if _, err := os.Stat(filepath.Join(q, "processing", id+".json")); !os.IsNotExist(err) {
			t.Fatalf("round %d: processing/ still holds the re-queued task (%v): a kill now would undo the re-queue", round, err)
		}
		if _, err := s.ClaimNext(ctx, ref, nil, now, claimBy("box-1", now), nil); err != nil {
			t.Fatal(err)
		}
		if err := j.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// postAndClaim posts task id and claims it for box-1, and commits both.
func postAndClaim(t *testing.T, s *fsstore.Store, j *durable.Syncer) {
	t.Helper()
	ctx := context.Background()
	posted, _ := domain.Post(id, host, queue, json.RawMessage(`{}`), "alice", epoch)
	if err := s.Create(ctx, posted, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimNext(ctx, ref, nil, epoch, claimBy("box-1", epoch), nil); err != nil {
		t.Fatal(err)
	}
	if err := j.Sync(ctx); err != nil {
		t.Fatal(err)
	}
}

// lapAtClaim is the store's journal with a hook run once, as the first
// record of a processing/ file is added: a commit of other records that
// begins a new lap, on another goroutine's behalf, just then.
type lapAtClaim struct {
	*durable.Root
	hook func()
	done bool
}

func (h *lapAtClaim) Put(path string, data []byte) {
	if !h.done && strings.Contains(path, "/processing/") {
		h.done = true
		h.hook()
	}
	h.Root.Put(path, data)
}

// TestALapBeginningMidClaimLosesNoTask: a post is committed; its claim
// writes processing/<id>; a commit of event lines begins a new lap just as
// the claim's records are added; the power goes before the claim's own
// commit, with processing/<id> renamed but its data never written. The
// new lap must not say the claim's removal of pending/<id> ahead of the
// claim's destination: the task is still there after replay.
func TestALapBeginningMidClaimLosesNoTask(t *testing.T) {
	dir, logs := t.TempDir(), t.TempDir()
	boots := 0
	open := func(hook func(*durable.Syncer)) (*fsstore.Store, *durable.Syncer) {
		boots++
		t.Setenv(durable.BootEnv, fmt.Sprintf("boot-%d", boots))
		j, err := durable.Open(durable.Config{Items: dir, Logs: logs, Record: true, Limit: 16 << 10,
			Checkpoint: func() error { return nil }}) // the power goes before any makes anything durable
		if err != nil {
			t.Fatal(err)
		}
		var jr fsstore.Journal = j.Root(durable.Items)
		if hook != nil {
			jr = &lapAtClaim{Root: j.Root(durable.Items), hook: func() { hook(j) }}
		}
		s, err := fsstore.Open(dir, fsstore.WithJournal(jr))
		if err != nil {
			t.Fatal(err)
		}
		return s, j
	}
	ctx := context.Background()
	s, j := open(func(j *durable.Syncer) {
		lines := j.Root(durable.Logs)
		lines.Append("a", 0, []byte("x"))
		lines.Append("b", 0, bytes.Repeat([]byte("y"), 20<<10)) // past the lap's limit
		if err := j.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		lines.Append("c", 0, []byte("z")) // a commit that begins the new lap
		if err := j.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	})
	id := taskID(1)
	posted, _ := domain.Post(id, host, queue, json.RawMessage(`{}`), "alice", epoch)
	if err := s.Create(ctx, posted, nil); err != nil {
		t.Fatal(err)
	}
	if err := j.Sync(ctx); err != nil { // the 201
		t.Fatal(err)
	}
	if _, err := s.ClaimNext(ctx, ref, nil, epoch, claimBy("box", epoch), nil); err != nil {
		t.Fatal(err)
	}
	fsstore.Crash(s)
	_ = j.Close()
	mustWrite(t, filepath.Join(dir, host, queue, "processing", id+".json"), "")

	again, againJ := open(nil)
	defer againJ.Close()
	defer again.Close()
	if _, err := again.Get(ctx, keyOf(id)); err != nil {
		t.Errorf("the posted task is lost after the power loss: %v (recovered %+v)", err, again.Recovered())
	}
}

// slowRetires is the store's journal with what runs after each commit (a
// moved task's old file set aside) put off until the test opens gate, when
// gate is set: a retire slow to come, as on a busy machine.
type slowRetires struct {
	*durable.Root
	gate chan struct{} // nil: at once
}

func (s *slowRetires) AfterCommit(fn func()) {
	gate := s.gate
	if gate == nil {
		s.Root.AfterCommit(fn)
		return
	}
	s.Root.AfterCommit(func() {
		go func() {
			<-gate
			fn()
		}()
	})
}

// openSlowRetires opens a store on a fresh folder whose retires s puts off.
func openSlowRetires(t *testing.T) (*fsstore.Store, *durable.Syncer, *slowRetires, string) {
	t.Helper()
	dir := t.TempDir()
	j, err := durable.Open(durable.Config{Items: dir, Logs: t.TempDir(), Record: true, Checkpoint: func() error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	slow := &slowRetires{Root: j.Root(durable.Items)}
	s, err := fsstore.Open(dir, fsstore.WithJournal(slow))
	if err != nil {
		t.Fatal(err)
	}
	return s, j, slow, filepath.Join(dir, host, queue)
}

// TestAMoveBackWaitsForItsTasksRetires: a worker fails a task
// (processing → done), and at once its owner retries it (done → pending),
// or retention removes it. The retry is a move back and the removal a
// delete, each done on disc before it returns; were either done while the
// fail's retire of processing/ was still to come, a kill then would leave
// the task in processing/ (and pending/), and the start-up scan would keep
// processing/: the claim back, the answered changes undone. So a move back
// or a removal first waits for every retire of its task still to come.
func TestAMoveBackWaitsForItsTasksRetires(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func(*fsstore.Store) error
		left  string // the state directory that holds the task at the end; "" for none
	}{
		{"retry", func(s *fsstore.Store) error {
			_, err := s.Update(context.Background(), keyOf(id), step(func(t domain.Task) (domain.Task, domain.Event, error) {
				return t.Retry(epoch.Add(2 * time.Second))
			}), nil)
			return err
		}, "pending"},
		{"remove", func(s *fsstore.Store) error { return s.Delete(context.Background(), keyOf(id), nil, nil) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, j, slow, q := openSlowRetires(t)
			defer s.Close()
			postAndClaim(t, s, j)
			slow.gate = make(chan struct{})
			mustUpdate(t, s, keyOf(id), step(func(t domain.Task) (domain.Task, domain.Event, error) {
				return t.Fail("box-1", nil, epoch.Add(time.Second))
			}))
			if err := j.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- tc.after(s) }()
			select {
			case err := <-done:
				_, stat := os.Stat(filepath.Join(q, "processing", id+".json"))
				close(slow.gate) // so that Close, which waits for the retire, returns
				t.Fatalf("it returned (%v) before the fail's retire of processing/ (there: %v): a kill now would bring the claim back", err, stat == nil)
			case <-time.After(100 * time.Millisecond):
			}
			close(slow.gate)
			mustReturn(t, done, "after the fail's retire was let run, it")
			for _, dir := range domain.Dirs {
				_, err := os.Stat(filepath.Join(q, dir, id+".json"))
				if there := err == nil; there != (dir == tc.left) {
					t.Errorf("%s/ holds the task: %v, want %v (%v)", dir, there, dir == tc.left, err)
				}
			}
		})
	}
}

// mustReturn waits for done, and fails the test with its error, or if who
// (what is still waiting) has not returned within 10 s.
func mustReturn(t *testing.T, done <-chan error, who string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s is still waiting 10 s on", who)
	}
}

// TestACleanStopRetiresWhatItsLastCommitMoved: a claim not yet committed
// when the store closes (a request still under way at the stop) is made
// durable by Close's commit, and its source is retired before the folder
// is let go, however late that retire comes: a clean stop leaves each task
// in one state directory, and no spare behind.
func TestACleanStopRetiresWhatItsLastCommitMoved(t *testing.T) {
	s, j, slow, q := openSlowRetires(t)
	ctx := context.Background()
	posted, _ := domain.Post(id, host, queue, json.RawMessage(`{}`), "alice", epoch)
	if err := s.Create(ctx, posted, nil); err != nil {
		t.Fatal(err)
	}
	if err := j.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	slow.gate = make(chan struct{})
	if _, err := s.ClaimNext(ctx, ref, nil, epoch, claimBy("box-1", epoch), nil); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, func() { close(slow.gate) })
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	mustReturn(t, closed, "after the claim's retire was let run, Close")
	if _, err := os.Stat(filepath.Join(q, "pending", id+".json")); !os.IsNotExist(err) {
		t.Errorf("pending/ still holds the claimed task after a clean stop (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(q, "processing", id+".json")); err != nil {
		t.Errorf("the claimed task is not in processing/ after a clean stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(q, ".spare")); !os.IsNotExist(err) {
		t.Errorf("a clean stop left %s/.spare (%v)", q, err)
	}
}

// removeHook is the store's journal with a hook run once, as the first
// removal is recorded.
type removeHook struct {
	*durable.Root
	hook func()
	done bool
}

func (h *removeHook) Remove(path string) {
	if !h.done && h.hook != nil {
		h.done = true
		h.hook()
	}
	h.Root.Remove(path)
}

// TestARemovedFileIsNotReusedBeforeItsRemovalIsRecorded: retention removes
// a finished task D, and at once a claim of task Z, finding no spare held
// open, may take D's old file for its own. Were that file set aside before
// D's removal was recorded, the claim's commit could hold Z's write and not
// D's removal; the power going then leaves D's name on Z's data (the write
// in place reached the disc, the renames did not), and the start-up scan
// would report the finished D corrupt. Recorded first, the removal is in
// every commit of a write into that file: the test checks the order, and
// what the power loss leaves.
func TestARemovedFileIsNotReusedBeforeItsRemovalIsRecorded(t *testing.T) {
	dir, logs := t.TempDir(), t.TempDir()
	boots := 0
	ctx := context.Background()
	var hooked *removeHook
	open := func() (*fsstore.Store, *durable.Syncer) {
		boots++
		t.Setenv(durable.BootEnv, fmt.Sprintf("boot-%d", boots))
		j, err := durable.Open(durable.Config{Items: dir, Logs: logs, Record: true,
			Checkpoint: func() error { return nil }}) // the power goes before any makes anything durable
		if err != nil {
			t.Fatal(err)
		}
		hooked = &removeHook{Root: j.Root(durable.Items)}
		s, err := fsstore.Open(dir, fsstore.WithJournal(hooked))
		if err != nil {
			t.Fatal(err)
		}
		return s, j
	}
	s, j := open()
	fsstore.HoldAtMost(s, 0) // no spare held open: a move takes a set-aside file
	d, z := taskID(1), taskID(2)
	for _, id := range []string{d, z} {
		posted, _ := domain.Post(id, host, queue, json.RawMessage(`{}`), "alice", epoch)
		if err := s.Create(ctx, posted, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ClaimNext(ctx, ref, nil, epoch, claimBy("box-1", epoch), nil); err != nil { // d, the older id
		t.Fatal(err)
	}
	mustUpdate(t, s, keyOf(d), finishWith(`{"ok":true}`, epoch.Add(time.Second)))
	for range 2 { // the finish, then what its commit retired
		if err := j.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Settle(); err != nil {
		t.Fatal(err)
	}
	queueDir := filepath.Join(dir, host, queue)
	before := snapshot(queueDir) // what the disc holds for sure: the power loss's floor
	doneD := filepath.Join(queueDir, "done", d+".json")
	inodeD := inode(t, doneD)

	var claimed string
	hooked.hook = func() {
		if _, err := os.Stat(doneD); err != nil {
			t.Errorf("D's file was set aside before its removal was recorded: %v", err)
		}
		if _, err := s.ClaimNext(ctx, ref, nil, epoch, claimBy("box-2", epoch), nil); err != nil {
			t.Error(err)
			return
		}
		if err := j.Sync(ctx); err != nil { // the claim is answered
			t.Error(err)
		}
		procZ := filepath.Join(queueDir, "processing", z+".json")
		if inode(t, procZ) == inodeD {
			data, _ := os.ReadFile(procZ)
			claimed = string(data) // written in place into D's old file
		}
	}
	if err := s.Delete(ctx, keyOf(d), nil, nil); err != nil {
		t.Fatal(err)
	}
	fsstore.Crash(s)
	_ = j.Close()

	// The power goes: the renames since the snapshot are lost, a write in
	// place into D's old file is not.
	for _, sub := range []string{"pending", "processing", "done"} {
		_ = os.RemoveAll(filepath.Join(queueDir, sub))
	}
	for rel, data := range before {
		mustWrite(t, filepath.Join(queueDir, rel), data)
	}
	if claimed != "" {
		mustWrite(t, doneD, claimed)
	}
	again, againJ := open()
	defer againJ.Close()
	defer again.Close()
	if c := again.Recovered(); len(c) != 0 {
		t.Errorf("after the power loss the start-up scan reported %+v", c)
	}
	if got, err := again.Get(ctx, keyOf(z)); err != nil || got.Status != domain.Processing {
		t.Errorf("the claimed task after the power loss: %+v %v", got, err)
	}
}
