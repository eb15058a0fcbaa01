package postgres_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// A post does not wait for a batch of claims and updates to end: posts
// have batches of their own (run). With a batch held up in an update's fn
// (which runs under its row's lock), a post on the same Store is stored
// at once, not once the batch lets go.
func TestPostDoesNotWaitForABatchOfUpdates(t *testing.T) {
	s := mustOpen(t, pgtest.Database(t))
	held, _ := postEv(1)
	if err := s.Create(context.Background(), held, nil); err != nil {
		t.Fatal(err)
	}
	inBatch, release := make(chan struct{}), make(chan struct{})
	var released atomic.Bool
	letGo := time.AfterFunc(10*time.Second, func() { released.Store(true); close(release) })
	updated := make(chan error, 1)
	go func() {
		_, err := s.Update(context.Background(), domain.KeyOf(held), func(*domain.Task) error {
			close(inBatch)
			<-release
			return errors.New("no change")
		}, nil)
		updated <- err
	}()
	<-inBatch

	posted, _ := postEv(2)
	err := s.Create(context.Background(), posted, nil)
	if released.Load() {
		t.Errorf("the post was stored only once the batch of updates let go")
	}
	if letGo.Stop() {
		close(release)
	}
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	if got, err := s.Get(context.Background(), domain.KeyOf(posted)); err != nil || got.Status != domain.Pending {
		t.Fatalf("the post reads back as %+v, %v", got.Status, err)
	}
	if err := <-updated; err == nil || err.Error() != "no change" {
		t.Errorf("the held update returned %v, want its fn's refusal", err)
	}
}

// A result decided on a guess (guess.go) takes no lock first, so it rides
// the direct batches with the posts: it is stored while a batch of claims
// and updates is held up with its rows locked, where riding that line it
// would wait for the batch to end and then for a batch of its own.
func TestGuessedResultDoesNotWaitForABatchOfUpdates(t *testing.T) {
	s := mustOpen(t, pgtest.Database(t))
	s.WriteLines(staged)
	task := claimedOn(t, s, 1)
	held, _ := postEv(2)
	if err := s.Create(context.Background(), held, nil); err != nil {
		t.Fatal(err)
	}
	inBatch, release := make(chan struct{}), make(chan struct{})
	var released atomic.Bool
	letGo := time.AfterFunc(10*time.Second, func() { released.Store(true); close(release) })
	updated := make(chan error, 1)
	go func() {
		_, err := s.Update(context.Background(), domain.KeyOf(held), func(*domain.Task) error {
			close(inBatch)
			<-release
			return errors.New("no change")
		}, nil)
		updated <- err
	}()
	<-inBatch

	var seen []domain.Task
	var ev domain.Event
	ctx, _ := stage(&ev)
	_, err := s.Update(ctx, domain.KeyOf(task), finish("box-1", &seen, &ev), nil)
	if released.Load() {
		t.Errorf("the result was stored only once the batch of updates let go")
	}
	if letGo.Stop() {
		close(release)
	}
	if err != nil {
		t.Fatalf("result: %v", err)
	}
	if len(seen) != 1 {
		t.Errorf("the result was decided %d times, want once (on its guess)", len(seen))
	}
	if got, err := s.Get(context.Background(), domain.KeyOf(task)); err != nil || got.Status != domain.Finished {
		t.Fatalf("the result reads back as %+v, %v", got.Status, err)
	}
	if err := <-updated; err == nil || err.Error() != "no change" {
		t.Errorf("the held update returned %v, want its fn's refusal", err)
	}
}
