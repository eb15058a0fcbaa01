package pgnotify

import (
	"sync"
	"time"

	"github.com/taskhoster/taskhoster/domain"
)

// A claimed task's watch without a read.
//
// A worker socket watches each task it holds for a cancel, subscribing in
// the claim's Then (app.Service.ClaimWatched). Alone, nothing can change
// the task between the claim's COMMIT and that Then. Beside other servers,
// one of them may (a cancel, a late result, a timeout), and its news may
// reach this server before the subscription: the watch would never hear
// of it. Reading the task after subscribing closes that gap, at a round
// trip per claim. Instead this server remembers, for heardWindow, the
// attempt of every task another server announced, noted before the news is
// handed to the hub; so a subscription made after the news went by finds
// the note, and one made before gets the news. Heard(k, attempts) says
// whether news of attempt `attempts` or later may have gone by: only then
// does the watch read (app.Service.watched).
//
// A change made after a claim carries that claim's attempt (a result, a
// failure, a cancel, a release) or follows one that did (a retry, which
// starts again at 0, only follows a failure), so the highest attempt heard
// of a task within the window is what tells. A notification too large to
// carry its record is noted as any attempt. While notes may be missing (the
// listener reconnected: news was lost; or the notes outgrew maxHeard) every
// answer is yes, until those are heardWindow old.

// heardWindow is how long a note is kept: far longer than a claim's Then
// takes to run after its COMMIT.
const heardWindow = 10 * time.Second

// maxHeard bounds the notes kept (some 80 bytes each).
const maxHeard = 200_000

// anyAttempt notes news whose record was not carried.
const anyAttempt = int(^uint(0) >> 1)

type heard struct {
	mu    sync.Mutex
	byKey map[domain.Key]*heardTask
	fifo  []heardNote // in the order heard, for forgetting
	blind time.Time   // until then, every answer is yes
}

type heardTask struct {
	attempts int // the highest heard within the window
	notes    int // the notes in fifo for the task
}

type heardNote struct {
	key domain.Key
	at  time.Time
}

// note records news of k at attempts, and forgets what is older than
// heardWindow.
func (h *heard) note(k domain.Key, attempts int) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byKey == nil {
		h.byKey = make(map[domain.Key]*heardTask)
	}
	drop := 0
	for drop < len(h.fifo) && (now.Sub(h.fifo[drop].at) > heardWindow || len(h.fifo)-drop >= maxHeard) {
		if len(h.fifo)-drop >= maxHeard {
			h.blindUntil(now.Add(heardWindow)) // forgotten early
		}
		old := h.fifo[drop].key
		if t := h.byKey[old]; t.notes <= 1 {
			delete(h.byKey, old)
		} else {
			t.notes--
		}
		drop++
	}
	if drop > 0 {
		h.fifo = append(h.fifo[:0], h.fifo[drop:]...)
	}
	t := h.byKey[k]
	if t == nil {
		t = &heardTask{attempts: attempts}
		h.byKey[k] = t
	}
	t.attempts = max(t.attempts, attempts)
	t.notes++
	h.fifo = append(h.fifo, heardNote{k, now})
}

// lost says news may have gone by unnoted (the listener reconnected).
func (h *heard) lost() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.blindUntil(time.Now().Add(heardWindow))
}

// blindUntil extends blind to t; h.mu is held.
func (h *heard) blindUntil(t time.Time) {
	if t.After(h.blind) {
		h.blind = t
	}
}

// has reports whether news of k at attempts or later may have been heard
// within heardWindow.
func (h *heard) has(k domain.Key, attempts int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Now().Before(h.blind) {
		return true
	}
	t := h.byKey[k]
	return t != nil && t.attempts >= attempts
}

// Heard reports whether another server's news of task k, of its attempt
// attempts or a later change, may have reached this server within the last
// heardWindow: a subscription made after it went by would not get it
// (see above). No while this server is alone.
func (n *Notifier) Heard(k domain.Key, attempts int) bool {
	return n.others.Load() && n.heard.has(k, attempts)
}
