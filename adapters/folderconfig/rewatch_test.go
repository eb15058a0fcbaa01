package folderconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
)

// A folder that goes and comes back under the same path (removed and made
// again, as `rm -rf` and a copy or a checkout do; or moved away and back)
// loses its inotify watch with the old folder. The reload that follows must
// watch the new one, else changes in it wait for the periodic rescan, and
// do so for as long as the server runs.
func TestReloadWatchesAFolderMadeAgain(t *testing.T) {
	dir := t.TempDir()
	queues := filepath.Join(dir, "h.example", queuesFolder)
	if err := os.MkdirAll(queues, 0o755); err != nil {
		t.Fatal(err)
	}
	l, reloaded := liveOn(t, dir)

	served := func(name string) bool {
		h, ok := l.Host("h.example")
		return ok && h.Queues[name] != nil
	}
	// Every reload syncs the watches before it reads; once one has served
	// the queue written last, the folder it lies in must be watched.
	watchedAfter := func(t *testing.T, name string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for !served(name) || !slices.Contains(l.watcher.WatchList(), queues) {
			select {
			case <-reloaded:
			case <-deadline:
				t.Fatalf("queue %s served: %v; %s watched: %v (watches %v)", name, served(name), queues,
					slices.Contains(l.watcher.WatchList(), queues), l.watcher.WatchList())
			}
		}
	}
	write := func(t *testing.T, name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(queues, name+".json"), []byte(`{"item": {}}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("removed and made again", func(t *testing.T) {
		if err := os.RemoveAll(queues); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(queues, 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, "a")
		watchedAfter(t, "a")
	})
	t.Run("moved away and back", func(t *testing.T) {
		if err := os.Rename(queues, queues+".old"); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(queues+".old", queues); err != nil {
			t.Fatal(err)
		}
		write(t, "b")
		watchedAfter(t, "b")
	})
}

// A host folder that is a symbolic link pointed at another folder (the
// atomic swap of a deployment) is watched in the new folder, and no longer
// in the old one, whose watch would be left behind for good.
func TestReloadWatchesWhereALinkNowPoints(t *testing.T) {
	if _, err := os.Stat("/proc/self/fdinfo"); err != nil {
		t.Skip("needs /proc to see the inotify watches")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "hosts")
	oldQueues := filepath.Join(root, "old", queuesFolder)
	newQueues := filepath.Join(root, "new", queuesFolder)
	for _, d := range []string{dir, oldQueues, newQueues} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(newQueues, "b.json"), []byte(`{"item": {}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "h.example")
	if err := os.Symlink(filepath.Join(root, "old"), link); err != nil {
		t.Fatal(err)
	}
	l, reloaded := liveOn(t, dir)
	if !inotifyWatches(t)[inode(t, oldQueues)] {
		t.Fatalf("the old folder is not watched at start")
	}

	// Pointed elsewhere at once: a new link renamed over the old one.
	if err := os.Symlink(filepath.Join(root, "new"), link+".tmp"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(link+".tmp", link); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		h, ok := l.Host("h.example")
		watches := inotifyWatches(t)
		if ok && h.Queues["b"] != nil && watches[inode(t, newQueues)] && !watches[inode(t, oldQueues)] {
			return
		}
		select {
		case <-reloaded:
		case <-deadline:
			t.Fatalf("queue b served: %v; new folder watched: %v; old folder watched: %v",
				ok && h.Queues["b"] != nil, watches[inode(t, newQueues)], watches[inode(t, oldQueues)])
		}
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Sys().(*syscall.Stat_t).Ino
}

// inotifyWatches lists the inodes every inotify instance of this process
// watches, as the kernel has them (/proc/self/fdinfo).
func inotifyWatches(t *testing.T) map[uint64]bool {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]bool{}
	for _, fd := range fds {
		if target, _ := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); target != "anon_inode:inotify" {
			continue
		}
		info, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		for _, line := range strings.Split(string(info), "\n") {
			var wd int
			var ino uint64
			if n, _ := fmt.Sscanf(line, "inotify wd:%x ino:%x", &wd, &ino); n == 2 {
				out[ino] = true
			}
		}
	}
	return out
}

// liveOn starts a Live on the hosts folder dir, stopped when the test
// ends, and a channel that gets a value after a reload (dropped while one
// waits).
func liveOn(t *testing.T, dir string) (*Live, <-chan struct{}) {
	t.Helper()
	l, err := New(dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	reloaded := make(chan struct{}, 1)
	l.OnReload(func(*Snapshot) {
		select {
		case reloaded <- struct{}{}:
		default:
		}
	})
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Stop() })
	return l, reloaded
}
