package fsstore_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/taskhoster/taskhoster/adapters/fsstore"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// A pause lives in the queue's folder as .paused, survives a clean stop
// and a crash, and the start-up scan reads it without a complaint and
// without taking it for a task; a resume removes it.
func TestPausesSurviveRestarts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := mustOpen(t, dir)
	empty := domain.QueueRef{Host: "new.example.com", Queue: "idle"} // no folder yet
	posted, _ := domain.Post(taskID(1), host, queue, json.RawMessage(`{}`), "alice", epoch)
	if err := s.Create(ctx, posted, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []domain.QueueRef{ref, empty} {
		if err := s.SetPaused(ctx, q, true); err != nil {
			t.Fatalf("pause %s: %v", q.Queue, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, host, queue, ".paused")); err != nil {
		t.Errorf("no .paused file: %v", err)
	}
	if err := s.SetPaused(ctx, domain.QueueRef{Host: "../x", Queue: queue}, true); err == nil {
		t.Error("a pause of a bad host name was taken")
	}
	fsstore.Crash(s)

	core, logs := observer.New(zap.InfoLevel)
	again, err := fsstore.Open(dir, fsstore.WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []domain.QueueRef{ref, empty} {
		if !again.Paused(q) {
			t.Errorf("%s is not paused after a crash", q.Queue)
		}
	}
	if again.Paused(domain.QueueRef{Host: host, Queue: "other"}) {
		t.Error("a queue never paused is paused")
	}
	for _, e := range logs.All() {
		t.Errorf("the scan logged %q %v", e.Message, e.ContextMap())
	}
	if got := countsOf(again, ref); got != (ports.Counts{Pending: 1}) || len(again.Recovered()) != 0 {
		t.Errorf("counts %+v, recovered %v after reopen", got, again.Recovered())
	}
	// Churn leaves the pause alone (spares, moves, deletes).
	claimed := mustUpdate(t, again, keyOf(taskID(1)), claimBy("box-1", epoch))
	if err := again.Delete(ctx, domain.KeyOf(claimed), nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := again.SetPaused(ctx, ref, false); err != nil {
		t.Fatal(err)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
	if err := again.SetPaused(ctx, ref, true); err == nil {
		t.Error("a closed store took a pause")
	}

	third := mustOpen(t, dir)
	if third.Paused(ref) || !third.Paused(empty) {
		t.Errorf("after the resume and a restart: %s paused %v, %s paused %v; want false, true", ref.Queue, third.Paused(ref), empty.Queue, third.Paused(empty))
	}
	if _, err := os.Stat(filepath.Join(dir, host, queue, ".paused")); !os.IsNotExist(err) {
		t.Errorf(".paused after the resume: %v", err)
	}
}

// Idempotency keys are rebuilt at start-up: a key stays taken across a
// restart for as long as its task is kept.
func TestKeysSurviveRestarts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := mustOpen(t, dir)
	post := func(n int) domain.Task {
		p, _ := domain.Post(taskID(n), host, queue, json.RawMessage(`{}`), "alice", epoch, domain.PostOptions{Key: "order-7"})
		return p
	}
	if err := s.Create(ctx, post(1), nil); err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, s, keyOf(taskID(1)), claimBy("box-1", epoch))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	again := mustOpen(t, dir)
	if got, err := again.ByKey(ctx, ref, "order-7"); err != nil || got.ID != taskID(1) || got.Status != domain.Processing {
		t.Errorf("ByKey after reopen = %s %s, %v", got.ID, got.Status, err)
	}
	if err := again.Create(ctx, post(2), nil); err == nil {
		t.Error("a key taken before the restart was taken again")
	}
}
