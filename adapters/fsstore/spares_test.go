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

// A task file that leaves its directory becomes the next new file of the
// queue: no inode is created or freed for it, and the file written into it
// holds exactly the new record, however long the old one was.
func TestSparesAreReused(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	ctx := context.Background()
	pendingFile := func(id string) string { return filepath.Join(dir, host, queue, "pending", id+".json") }

	long, _ := domain.Post(taskID(1), host, queue, json.RawMessage(`{"note":"a long item, longer than the next task's record by far, so that a short write over it would leave a tail behind"}`), "alice", epoch)
	if err := s.Create(ctx, long, nil); err != nil {
		t.Fatal(err)
	}
	was := inode(t, pendingFile(taskID(1)))
	mustUpdate(t, s, keyOf(taskID(1)), claimBy("box-1", epoch)) // pending file retired

	short, _ := domain.Post(taskID(2), host, queue, json.RawMessage(`{}`), "", epoch)
	if err := s.Create(ctx, short, nil); err != nil {
		t.Fatal(err)
	}
	if got := inode(t, pendingFile(taskID(2))); got != was {
		t.Errorf("the new task's file is inode %d, want the retired file's %d", got, was)
	}
	data, err := os.ReadFile(pendingFile(taskID(2)))
	if err != nil {
		t.Fatal(err)
	}
	if want := domain.EncodeTask(short); string(data) != string(want) {
		t.Errorf("reused file holds\n%s\nwant\n%s", data, want)
	}

	// And the other way: a long record written into the short spare.
	was = inode(t, pendingFile(taskID(2)))
	mustUpdate(t, s, keyOf(taskID(2)), claimBy("box-1", epoch))
	long3, _ := domain.Post(taskID(3), host, queue, long.Item, "alice", epoch)
	if err := s.Create(ctx, long3, nil); err != nil {
		t.Fatal(err)
	}
	if got := inode(t, pendingFile(taskID(3))); got != was {
		t.Errorf("the third task's file is inode %d, want the second's %d", got, was)
	}
	if data, err = os.ReadFile(pendingFile(taskID(3))); err != nil {
		t.Fatal(err)
	}
	if want := domain.EncodeTask(long3); string(data) != string(want) {
		t.Errorf("reused file holds\n%s\nwant\n%s", data, want)
	}

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
func TestChurnLeavesDiscAndIndexAgreeing(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	ctx := context.Background()
	churn(s, 7, 8, 150, 40)

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
