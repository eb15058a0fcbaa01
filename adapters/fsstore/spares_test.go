package fsstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/fsstore"
	"github.com/taskhoster/taskhoster/domain"
)

func inode(tb testing.TB, path string) uint64 {
	tb.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// A task file that leaves its directory becomes the next file of the
// queue: no inode is created or freed for it, and the file written into it
// holds exactly the new record, however long the old one was. A post takes
// only a spare no longer than its record (a truncate is a journaled change
// of the inode), a move any spare.
func TestSparesAreReused(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	ctx := context.Background()
	file := func(state, id string) string { return filepath.Join(dir, host, queue, state, id+".json") }
	holds := func(path string, k domain.Key) {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := s.Get(ctx, k); err != nil || string(data) != string(domain.EncodeTask(got)) {
			t.Errorf("%s holds\n%s\nwant the record of %+v (%v)", path, data, got, err)
		}
	}

	long, _ := domain.Post(taskID(1), host, queue, json.RawMessage(`{"note":"a long item, longer than the next task's record by far, so that a short write over it would leave a tail behind","pad":"`+strings.Repeat("x", 500)+`"}`), "alice", epoch)
	if err := s.Create(ctx, long, nil); err != nil {
		t.Fatal(err)
	}
	was := inode(t, file("pending", taskID(1)))
	mustUpdate(t, s, keyOf(taskID(1)), claimBy("box-1", epoch)) // pending file retired

	short, _ := domain.Post(taskID(2), host, queue, json.RawMessage(`{}`), "", epoch)
	if err := s.Create(ctx, short, nil); err != nil {
		t.Fatal(err)
	}
	if got := inode(t, file("pending", taskID(2))); got == was {
		t.Errorf("the short task's post took the long spare (inode %d)", was)
	}
	holds(file("pending", taskID(2)), keyOf(taskID(2)))
	shortWas := inode(t, file("pending", taskID(2)))
	// Its claim writes the long spare: the record is shorter, and no tail
	// of the old one is left.
	mustUpdate(t, s, keyOf(taskID(2)), claimBy("box-1", epoch))
	if got := inode(t, file("processing", taskID(2))); got != was {
		t.Errorf("the short task's processing file is inode %d, want the long spare's %d", got, was)
	}
	holds(file("processing", taskID(2)), keyOf(taskID(2)))

	// And the other way: a long record written into the short spare.
	long3, _ := domain.Post(taskID(3), host, queue, long.Item, "alice", epoch)
	if err := s.Create(ctx, long3, nil); err != nil {
		t.Fatal(err)
	}
	if got := inode(t, file("pending", taskID(3))); got != shortWas {
		t.Errorf("the third task's file is inode %d, want the short spare's %d", got, shortWas)
	}
	holds(file("pending", taskID(3)), keyOf(taskID(3)))

	// A clean stop leaves no spares; the next start reads the tasks back.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, host, queue, ".spare")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("spares left after a clean stop: %v", err)
	}
	again := mustOpen(t, dir)
	if got, err := again.Get(ctx, keyOf(taskID(3))); err != nil || got.Status != domain.Pending {
		t.Errorf("after restart task 3 = %+v, %v", got, err)
	}
}

// Spares a crash left behind are removed at start-up, and a queue keeps no
// more than a bounded number of them.
func TestSparesAreBounded(t *testing.T) {
	dir := t.TempDir()
	spares := filepath.Join(dir, host, queue, ".spare")
	if err := os.MkdirAll(spares, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(spares, "7"), []byte(`{"id":"left by a crash"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := fsstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(filepath.Join(spares, "7")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a spare left by a crash survived start-up: %v", err)
	}
	ctx := context.Background()
	const tasks = 400
	for n := range tasks {
		posted, _ := domain.Post(taskID(n), host, queue, json.RawMessage(`{}`), "", epoch)
		if err := s.Create(ctx, posted, nil); err != nil {
			t.Fatal(err)
		}
	}
	for n := range tasks {
		if err := s.Delete(ctx, keyOf(taskID(n)), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	left, err := os.ReadDir(spares)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) == 0 || len(left) >= tasks {
		t.Errorf("%d spares kept after deleting %d tasks, want some but a bounded number", len(left), tasks)
	}
}

// churn has goroutines post, claim, report, finish, re-queue and clean
// tasks of one queue at once, rounds changes each, over a set of task ids;
// seed picks the changes.
func churn(s *fsstore.Store, seed uint64, goroutines, rounds, tasks int) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), seed))
			for i := range rounds {
				n := rng.IntN(tasks)
				now := epoch.Add(time.Duration(i) * time.Millisecond)
				k := keyOf(taskID(n))
				switch rng.IntN(6) {
				case 0:
					posted, _ := domain.Post(taskID(n), host, queue, json.RawMessage(fmt.Sprintf(`{"n":%d,"pad":%q}`, n, strings.Repeat("x", rng.IntN(300)))), "alice", now)
					_ = s.Create(ctx, posted, nil) // ErrExists when it lives
				case 1:
					_, _ = s.ClaimNext(ctx, ref, nil, now, claimBy(fmt.Sprintf("box-%d", g), now), nil)
				case 2:
					_, _ = s.Update(ctx, k, step(func(t domain.Task) (domain.Task, domain.Event, error) {
						worker := ""
						if t.Lease != nil {
							worker = t.Lease.Worker
						}
						return t.ReportProgress(worker, json.RawMessage(`{"pct":50}`), time.Minute, now)
					}), nil)
				case 3:
					_, _ = s.Update(ctx, k, finishWith(`{"ok":true}`, now), nil)
				case 4:
					_, _ = s.Update(ctx, k, step(func(t domain.Task) (domain.Task, domain.Event, error) {
						return t.Requeue(domain.CauseLease, domain.Retry{}, now)
					}), nil)
				case 5:
					_ = s.Delete(ctx, k, func(t domain.Task) error {
						if !t.Status.Terminal() {
							return errors.New("not done")
						}
						return nil
					}, nil)
				}
			}
		})
	}
	wg.Wait()
}

// Many goroutines post, claim, report, finish, re-queue and clean the tasks
// of one queue at once, so that file writes of different tasks overlap and
// spares pass from task to task. Afterwards every task's file holds exactly
// its indexed record, in the directory its status names, nothing else is in
// the state directories, and a restart reads the same index back.
//
// It runs with the store holding as many files open as it likes, with none,
// and with a few, so that files are sometimes held and sometimes not (a
// descriptor held for a path that another file replaced would write a
// spare through the wrong inode, and the disc would disagree).
func TestChurnLeavesDiscAndIndexAgreeing(t *testing.T) {
	for _, most := range []int64{-1, 0, 3} {
		t.Run(fmt.Sprintf("held %d", most), func(t *testing.T) { churnAndCheck(t, most) })
	}
}

func churnAndCheck(t *testing.T, most int64) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	if most >= 0 {
		fsstore.HoldAtMost(s, most)
	}
	ctx := context.Background()
	churn(s, 7, 8, 150, 40)
	if n := len(openUnder(t, dir)); most >= 0 && n > int(most) {
		t.Errorf("%d files under the items folder open, want at most %d", n, most)
	}

	want := map[string]string{}
	index := map[string]domain.Task{}
	for _, st := range domain.Stages {
		if err := s.Each(ctx, ref, st, func(t domain.Task) bool {
			want[host+"/"+queue+"/"+st.String()+"/"+t.ID+".json"] = string(domain.EncodeTask(t))
			index[t.ID] = t
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	if len(index) == 0 {
		t.Fatal("the churn left no task at all; it tests nothing")
	}
	assertFiles(t, dir, want)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	again := mustOpen(t, dir)
	for id, before := range index {
		got, err := again.Get(ctx, keyOf(id))
		if err != nil || !cmp.Equal(before, got) {
			t.Errorf("task %s after restart: %v %s", id, err, cmp.Diff(before, got))
		}
	}
	if c := again.Counts(ref); c.Pending+c.Processing+c.Done != len(index) {
		t.Errorf("restart indexed %+v, want %d tasks", c, len(index))
	}
}

// openUnder lists the files under dir this process has open, but for the
// folder's lock.
func openUnder(tb testing.TB, dir string) []string {
	tb.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Skipf("no /proc/self/fd: %v", err)
	}
	var open []string
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, dir+string(filepath.Separator)) && target != filepath.Join(dir, ".lock") {
			open = append(open, target)
		}
	}
	return open
}

// A task file stays open from its write until it moves on, so that the
// next write of its inode (as a spare) needs no open: the store holds the
// pending file, then the processing file; a finished task's file, which
// may wait days for its retention, is closed; a clean stop closes all.
func TestFilesOfLiveTasksStayOpen(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	ctx := context.Background()
	file := func(state string) string { return filepath.Join(dir, host, queue, state, taskID(1)+".json") }
	isOpen := func(path string) bool { return slices.Contains(openUnder(t, dir), path) }

	posted, _ := domain.Post(taskID(1), host, queue, json.RawMessage(`{}`), "alice", epoch)
	if err := s.Create(ctx, posted, nil); err != nil {
		t.Fatal(err)
	}
	if !isOpen(file("pending")) {
		t.Errorf("the pending file is not held open; open: %q", openUnder(t, dir))
	}
	mustUpdate(t, s, keyOf(taskID(1)), claimBy("box-1", epoch))
	if !isOpen(file("processing")) {
		t.Errorf("the processing file is not held open; open: %q", openUnder(t, dir))
	}
	// The pending file became a spare, open still: the result is written
	// through it.
	if n := len(openUnder(t, dir)); n != 2 {
		t.Errorf("%d files open, want the processing file and a spare: %q", n, openUnder(t, dir))
	}
	mustUpdate(t, s, keyOf(taskID(1)), finishWith(`{"ok":true}`, epoch))
	if isOpen(file("done")) {
		t.Error("the done file is held open")
	}
	data, err := os.ReadFile(file("done"))
	if err != nil {
		t.Fatal(err)
	}
	if done, err := s.Get(ctx, keyOf(taskID(1))); err != nil || string(data) != string(domain.EncodeTask(done)) {
		t.Errorf("done file holds\n%s\nwant the record of %+v (%v)", data, done, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if open := openUnder(t, dir); len(open) > 0 {
		t.Errorf("after a clean stop still open: %q", open)
	}
}
