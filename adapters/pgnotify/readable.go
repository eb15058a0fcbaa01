package pgnotify

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/taskhoster/taskhoster/domain"
)

// Watches across servers, without a change twice.
//
// app.Service.Watch subscribes, then reads the record, then drops the
// events already delivered up to the one whose record it read: the store
// announces a change before a read can see it (ports.TaskRepository), so
// those events are exactly the changes the record already holds. Across
// servers that did not hold: server A commits a change, and only then
// (its Then) sends the notification; server B's watch could subscribe,
// read the committed record, find no event delivered yet, and then
// receive the notification of a change its record already held: the
// watcher saw it twice.
//
// Sending the NOTIFY inside the change's transaction would not help: B
// can read the committed row before its listener has received the
// notification committed with it (delivery is after COMMIT either way),
// and it would serialise every committer on PostgreSQL's notify lock.
// Instead B's read waits until the record it read has been announced
// here: Readable, the store's read hook (postgres.Store.OnRead), returns
// once this server has published or received a change whose record is
// the one read. It waits only for a task someone here watches, only for a
// record whose latest change is less than announceWindow old (by the
// database's clock: an older change was announced, if ever, before any
// watch that could see it twice), and at most until that change is
// announceWindow old (a server that died between COMMIT and NOTIFY never
// sends it). Its own reads for a notification too large to carry the
// record do not wait, nor does any read while this server is alone, or of
// a change made before another server came (ownChange).

// announceWindow bounds how long a record may take to be announced here
// after its change: a notification's latency, with a wide margin.
const announceWindow = 2 * time.Second

// receiving marks the context of the listener's own reads.
type receiving struct{}

// Readable is the store's read hook: it returns once t, read from the
// store, has been announced here, or need not be (see above), or ctx ends.
func (n *Notifier) Readable(ctx context.Context, t domain.Task, age time.Duration) {
	if age >= announceWindow || ctx.Value(receiving{}) != nil || n.ownChange(age) {
		return
	}
	k := domain.KeyOf(t)
	if !n.watchedHere(k) {
		return
	}
	sum := n.recent.sum(domain.EncodeTask(t))
	timer := time.NewTimer(announceWindow - max(age, 0))
	defer timer.Stop()
	for {
		seen, changed := n.recent.has(k, sum)
		if seen {
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// ownChange reports whether a record whose latest change is age old
// (by the database's clock) can only be this server's own, announced here
// before any read could see it (its Then runs first): while this server is
// alone, and for a change made before another server came, since a server
// changes nothing before the servers there have answered its hello (see
// Alone). Those announcements were not recorded (Publish, alone), so such
// a read must not wait for them. metMargin covers the servers' estimates
// of the database's clock; a change inside it is treated as another's. A
// server that carried on without this one's answer (helloWait: this
// listener lagged or was down) may change tasks before its hello arrives
// here; a watch here may then see such a change twice.
func (n *Notifier) ownChange(age time.Duration) bool {
	if !n.others.Load() {
		return true
	}
	changed := time.Now().Add(-age).UnixNano()
	return changed < n.met.Load()-metMargin.Nanoseconds()
}

// metMargin: see ownChange.
const metMargin = 100 * time.Millisecond

// recent remembers the records announced here for announceWindow, as
// hashes by task.
type recent struct {
	mu      sync.Mutex
	seed    maphash.Seed
	byKey   map[domain.Key][]uint64
	fifo    []announced   // in the order announced, for forgetting
	changed chan struct{} // closed (and replaced) at each announcement
}

type announced struct {
	key domain.Key
	at  time.Time
}

func (r *recent) sum(record []byte) uint64 {
	r.mu.Lock()
	r.init()
	seed := r.seed
	r.mu.Unlock()
	return maphash.Bytes(seed, record)
}

func (r *recent) init() {
	if r.byKey == nil {
		r.seed = maphash.MakeSeed()
		r.byKey = make(map[domain.Key][]uint64)
		r.changed = make(chan struct{})
	}
}

// add notes that k's record was announced, and forgets what is older than
// announceWindow.
func (r *recent) add(k domain.Key, record []byte) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.init()
	r.byKey[k] = append(r.byKey[k], maphash.Bytes(r.seed, record))
	r.fifo = append(r.fifo, announced{k, now})
	drop := 0
	for drop < len(r.fifo) && now.Sub(r.fifo[drop].at) > announceWindow {
		old := r.fifo[drop].key
		if sums := r.byKey[old]; len(sums) <= 1 {
			delete(r.byKey, old)
		} else {
			r.byKey[old] = sums[1:]
		}
		drop++
	}
	if drop > 0 {
		r.fifo = append(r.fifo[:0], r.fifo[drop:]...)
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

// has reports whether k's record with hash sum was announced lately, and
// the channel closed at the next announcement.
func (r *recent) has(k domain.Key, sum uint64) (bool, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.init()
	for _, s := range r.byKey[k] {
		if s == sum {
			return true, nil
		}
	}
	return false, r.changed
}
