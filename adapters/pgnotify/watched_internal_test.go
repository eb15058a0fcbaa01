package pgnotify

import (
	"fmt"
	"testing"

	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/domain"
)

// Every claim on a worker socket subscribes to its task (the watch for a
// cancel), so a server subscribes once for every task it hands out: the
// count of a task's subscriptions must go with the last of them, or the
// server keeps an entry for every task it ever handed out.
func TestWatchedCountsGoWithTheirSubscriptions(t *testing.T) {
	n := New(notify.NewHub(), "", nil, nil)
	for i := range 1000 {
		k := domain.Key{Host: "acme", Queue: "resize", ID: fmt.Sprintf("%016x", i)}
		a, b := n.Subscribe(k, 1), n.Subscribe(k, 1)
		if !n.watchedHere(k) {
			t.Fatalf("task %s watched by two is not watched here", k.ID)
		}
		a.Close()
		if !n.watchedHere(k) {
			t.Fatalf("task %s still watched by one is not watched here", k.ID)
		}
		b.Close()
		b.Close() // twice is harmless, and counts once
		if n.watchedHere(k) {
			t.Fatalf("task %s watched by none is watched here", k.ID)
		}
	}
	if got := n.watchedKeys(); got != 0 {
		t.Errorf("%d tasks still counted after every subscription closed", got)
	}
}

// watchedKeys is how many tasks have subscriptions here.
func (n *Notifier) watchedKeys() int {
	n.watchMu.Lock()
	defer n.watchMu.Unlock()
	return len(n.watched)
}
