package folderconfig

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

const (
	// debounce gathers the burst of events one save makes (an editor's
	// write, rename and chmod) into one reload.
	debounce = 100 * time.Millisecond
	// rescan is how often the safety net compares the folder's names, sizes
	// and times with the last load, for changes fsnotify did not report (a
	// full inotify queue, a network file system, a folder replaced whole).
	rescan = 2 * time.Second
)

// Live is the hosts folder kept up to date: it serves the newest Snapshot and
// reloads the whole folder when something in it changes. It implements
// ports.Config; every call sees one consistent snapshot.
type Live struct {
	dir     string
	log     *zap.Logger
	current atomic.Pointer[Snapshot]

	// reloadMu serialises reloads, so snapshots are swapped in the order
	// they were read, and guards the fields below it.
	reloadMu    sync.Mutex
	fingerprint uint64
	warned      map[string]bool          // warnings already logged, so a reload repeats none
	kept        map[domain.QueueRef]kept // queues served from their last valid file (lastgood.go)
	listeners   []func(*Snapshot)

	startOnce, stopOnce sync.Once
	stop                chan struct{}
	done                chan struct{}
	watcher             *fsnotify.Watcher
}

var _ ports.Config = (*Live)(nil)

// New reads the hosts folder dir once and logs its problems. It fails only
// when dir itself is not a readable folder; broken files inside it are logged
// and left out. Call Start to follow changes.
func New(dir string, log *zap.Logger) (*Live, error) {
	if log == nil {
		log = zap.NewNop()
	}
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("hosts folder: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("hosts folder %s: not a folder", dir)
	}
	l := &Live{dir: dir, log: log, warned: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	l.Reload()
	return l, nil
}

// Host returns the served host whose folder is exactly name.
func (l *Live) Host(name string) (*domain.Host, bool) { return l.current.Load().Host(name) }

// Queues lists every served queue of every host, sorted by host then name.
func (l *Live) Queues() []*domain.Queue { return l.current.Load().Queues() }

// Snapshot is the configuration in force now.
func (l *Live) Snapshot() *Snapshot { return l.current.Load() }

// OnReload registers fn to be called with each new snapshot, after it is in
// force. fn runs on the reloading goroutine and should return quickly.
func (l *Live) OnReload(fn func(*Snapshot)) {
	l.reloadMu.Lock()
	defer l.reloadMu.Unlock()
	l.listeners = append(l.listeners, fn)
}

// Reload reads the whole folder now and puts the result in force. The
// watcher calls it; so may anyone who knows the folder changed.
func (l *Live) Reload() (*Snapshot, []Problem) {
	l.reloadMu.Lock()
	defer l.reloadMu.Unlock()

	// Take the fingerprint first: a change made while Load runs then shows
	// up as a difference at the next rescan instead of being missed.
	_, l.fingerprint = scan(l.dir)
	snap, problems, invalid := load(l.dir)
	kept := keepLastGood(l.current.Load(), snap, problems, invalid)
	l.current.Store(snap)
	l.logProblems(problems, kept)
	logKept(l.log, l.kept, kept, problems, snap)
	l.kept = kept
	l.log.Info("hosts folder loaded", zap.String("dir", l.dir), zap.Int("hosts", len(snap.hosts)),
		zap.Int("queues", len(snap.queues)), zap.Int("problems", len(problems)),
		zap.Int("keptLastValid", len(kept)))
	for _, fn := range l.listeners {
		fn(snap)
	}
	return snap, problems
}

// logProblems logs every error at each reload, since each reload leaves
// those files out again, but a warning only the first time it appears, so an
// editor's swap file does not repeat the same lines on every save. The
// errors of a file whose queue keeps its last valid version are logKept's.
func (l *Live) logProblems(problems []Problem, kept map[domain.QueueRef]kept) {
	keptFiles := map[string]bool{}
	for _, k := range kept {
		keptFiles[k.file] = true
	}
	warned := map[string]bool{}
	for _, p := range problems {
		if !p.Warning && keptFiles[p.File] {
			continue
		}
		if p.Warning {
			key := p.String()
			warned[key] = true
			if l.warned[key] {
				continue
			}
		}
		p.log(l.log)
	}
	l.warned = warned
}

// Start watches the folder and reloads it on every change until Stop. Start
// and Stop are meant for one owner (the app's lifecycle) and are not called
// concurrently with each other.
func (l *Live) Start() error {
	err := errors.New("folderconfig: already started")
	l.startOnce.Do(func() { err = l.start() })
	return err
}

func (l *Live) start() error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch hosts folder: %w", err)
	}
	watched := map[string]os.FileInfo{}
	dirs, _ := scan(l.dir)
	syncWatches(w, watched, dirs, l.log)
	if watched[l.dir] == nil {
		w.Close()
		return fmt.Errorf("watch hosts folder %s: cannot watch it", l.dir)
	}
	l.watcher = w
	// Something may have changed between New's load and the watches: from
	// here on every change raises an event, and this catches the ones before.
	if _, fp := scan(l.dir); l.changedSince(fp) {
		l.Reload()
	}
	go l.run(w, watched)
	return nil
}

// Stop ends the watching. The last snapshot stays in force.
func (l *Live) Stop() error {
	var err error
	l.stopOnce.Do(func() {
		close(l.stop)
		if l.watcher == nil {
			return // never started
		}
		<-l.done
		err = l.watcher.Close()
	})
	return err
}

func (l *Live) run(w *fsnotify.Watcher, watched map[string]os.FileInfo) {
	defer close(l.done)
	ticker := time.NewTicker(rescan)
	defer ticker.Stop()
	var pending <-chan time.Time // non-nil while a reload is scheduled

	reload := func() {
		pending = nil
		// Watch new folders before reading them: what is written into them
		// after this point raises events, what was written before is read.
		dirs, _ := scan(l.dir)
		syncWatches(w, watched, dirs, l.log)
		l.Reload()
	}

	for {
		select {
		case <-l.stop:
			return
		case _, ok := <-w.Events:
			if !ok {
				return
			}
			if pending == nil {
				pending = time.After(debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			// Usually an overflowed event queue: reload to be sure.
			l.log.Warn("hosts folder: watch error", zap.Error(err))
			if pending == nil {
				pending = time.After(debounce)
			}
		case <-pending:
			reload()
		case <-ticker.C:
			if _, fp := scan(l.dir); l.changedSince(fp) {
				reload()
			}
		}
	}
}

func (l *Live) changedSince(fp uint64) bool {
	l.reloadMu.Lock()
	defer l.reloadMu.Unlock()
	return fp != l.fingerprint
}

// syncWatches makes w watch exactly dirs. A folder that is gone has already
// lost its watch; removing it again only returns an error, which is ignored.
//
// A folder that is still wanted is added again at every sync, not only the
// first time: a folder removed and made again, or moved away and back,
// under the same path (rm -rf and a copy, a checkout) lost its watch with
// the old folder, and fsnotify forgets it, so without this its changes
// would wait for the rescan for as long as the server runs. Adding a folder
// already watched costs one system call and changes nothing. A path that
// now names another folder (a symbolic link pointed elsewhere) first drops
// the old folder's watch, which would otherwise stay with the old folder.
func syncWatches(w *fsnotify.Watcher, watched map[string]os.FileInfo, dirs []string, log *zap.Logger) {
	want := map[string]bool{}
	for _, d := range dirs {
		want[d] = true
		info, err := os.Stat(d)
		if err != nil {
			continue // vanished since the scan; its removal raises an event
		}
		if old, ok := watched[d]; ok && !os.SameFile(old, info) {
			_ = w.Remove(d)
		}
		if err := w.Add(d); err != nil {
			// It may have vanished since the scan; the next event or rescan
			// tries again.
			log.Debug("hosts folder: cannot watch", zap.String("dir", d), zap.Error(err))
			delete(watched, d)
			continue
		}
		watched[d] = info
	}
	for d := range watched {
		if !want[d] {
			_ = w.Remove(d)
			delete(watched, d)
		}
	}
}

// scan lists the folders to watch (dir, each folder in it, and the two
// config folders of each) and fingerprints every entry's name, size, mode and
// time. It costs a few stat calls per file, which is why the safety net uses
// it instead of reloading.
func scan(dir string) (dirs []string, fingerprint uint64) {
	h := fnv.New64a()
	var walk func(path string, depth int)
	walk = func(path string, depth int) {
		entries, err := os.ReadDir(path)
		if err != nil {
			fmt.Fprintf(h, "%s: %v\n", path, err)
			return
		}
		dirs = append(dirs, path)
		for _, e := range entries {
			p := filepath.Join(path, e.Name())
			info, err := os.Stat(p) // follows links, as Load does
			if err != nil {
				fmt.Fprintf(h, "%s: %v\n", p, err)
				continue
			}
			fmt.Fprintf(h, "%s %d %v %d\n", p, info.Size(), info.Mode(), info.ModTime().UnixNano())
			configFolder := e.Name() == queuesFolder || e.Name() == usersFolder
			if info.IsDir() && (depth == 0 || depth == 1 && configFolder) {
				walk(p, depth+1)
			}
		}
	}
	walk(dir, 0)
	return dirs, h.Sum64()
}
