package pgnotify

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

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

// A batch whose send timed out is sent again, and may have been delivered
// the first time too: a listener hears each notification of a server once,
// so a watcher here sees each change once.
func TestARepeatedNotificationIsHeardOnce(t *testing.T) {
	n := New(notify.NewHub(), "", nil, nil)
	k := domain.Key{Host: "acme", Queue: "resize", ID: "9f2c1a0b7d4e6f83"}
	sub := n.Subscribe(k, 8)
	defer sub.Close()
	note := func(seq uint64, attempts int) []byte {
		task := domain.Task{Host: k.Host, Queue: k.Queue, ID: k.ID, Status: domain.Pending, Item: json.RawMessage(`{}`), Attempts: attempts}
		b, err := json.Marshal(message{Server: "0123456789abcdef", Seq: seq, Host: k.Host, Queue: k.Queue, ID: k.ID,
			Kind: string(domain.EventPosted), At: time.Now(), Task: domain.EncodeTask(task)})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, b := range [][]byte{note(1, 0), note(2, 1), note(1, 0), note(2, 1), note(3, 2)} {
		n.receive(context.Background(), b)
	}
	var heard []int
	for len(sub.C()) > 0 {
		heard = append(heard, (<-sub.C()).Task.Attempts)
	}
	if fmt.Sprint(heard) != "[0 1 2]" {
		t.Errorf("the watcher heard the changes with attempts %v, want [0 1 2]: each once, in order", heard)
	}
}
