package index_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/index"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
	"github.com/taskhoster/taskhoster/tests/contract"
)

func TestContract(t *testing.T) {
	contract.TestRepository(t, func(t *testing.T) ports.TaskRepository { return index.New() })
}

// recorder is a Persister that notes each call and fails while err is set.
type recorder struct {
	calls []string
	err   error
}

var _ index.Persister = (*recorder)(nil)

func (r *recorder) Put(old *domain.Task, t domain.Task, data []byte) error {
	from := "new"
	if old != nil {
		from = string(old.Status)
	}
	if !cmp.Equal(data, domain.EncodeTask(t)) {
		r.calls = append(r.calls, "put with data that is not t's stored form")
	}
	r.calls = append(r.calls, fmt.Sprintf("put %s %s->%s", t.ID, from, t.Status))
	return r.err
}

func (r *recorder) Remove(t domain.Task) error {
	r.calls = append(r.calls, fmt.Sprintf("remove %s %s", t.ID, t.Status))
	return r.err
}

// TestPersister checks that every change reaches the Persister first, and
// that one it refuses leaves the index as it was.
func TestPersister(t *testing.T) {
	ctx := context.Background()
	p := &recorder{}
	s := index.New(index.WithPersister(p))
	now := time.UnixMilli(1751500000000)
	posted, _ := domain.Post("a000000000000001", "task.example.com", "resize", json.RawMessage(`{}`), "alice", now)
	k := domain.KeyOf(posted)
	claim := func(t *domain.Task) error {
		next, _, err := t.Claim("box-1", time.Minute, now)
		*t = next
		return err
	}
	refuse := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, p.err) {
			t.Errorf("%s = %v, want the Persister's error", op, err)
		}
	}

	p.err = errors.New("disc full")
	refuse("create", s.Create(ctx, posted, nil))
	if _, err := s.Get(ctx, k); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("a refused create left the task in the index: %v", err)
	}
	p.err = nil
	if err := s.Create(ctx, posted, nil); err != nil {
		t.Fatal(err)
	}

	p.err = errors.New("disc full")
	_, err := s.Update(ctx, k, claim, nil)
	refuse("update", err)
	refuse("delete", s.Delete(ctx, k, nil, nil))
	_, err = s.ClaimNext(ctx, k.Ref(), nil, epochNow, claim, nil)
	refuse("claim", err)
	if got, _ := s.Get(ctx, k); !cmp.Equal(posted, got) {
		t.Errorf("refused changes changed the index: %s", cmp.Diff(posted, got))
	}
	if got := s.Counts(k.Ref()); got.Pending != 1 || got.Processing+got.Done != 0 || got.Oldest.UnixMilli() != posted.EligibleAt() {
		t.Errorf("counts = %+v after refused moves", got)
	}
	p.err = nil
	if _, err := s.Update(ctx, k, claim, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, k, nil, nil); err != nil {
		t.Fatal(err)
	}

	// Load fills the index without writing what is already stored.
	s.Load(posted)
	if got, err := s.Get(ctx, k); err != nil || !cmp.Equal(posted, got) {
		t.Errorf("get after load = %+v, %v", got, err)
	}

	want := []string{
		"put a000000000000001 new->pending",
		"put a000000000000001 new->pending",
		"put a000000000000001 pending->processing",
		"remove a000000000000001 pending",
		"put a000000000000001 pending->processing",
		"put a000000000000001 pending->processing",
		"remove a000000000000001 processing",
	}
	if d := cmp.Diff(want, p.calls); d != "" {
		t.Errorf("Persister calls (-want +got):\n%s", d)
	}
}

// gate is a Persister whose Put of one task waits until the test opens it.
type gate struct {
	id      string
	entered chan struct{}
	open    chan struct{}
}

func (g *gate) Put(_ *domain.Task, t domain.Task, _ []byte) error {
	if t.ID == g.id && t.Status == domain.Processing {
		g.entered <- struct{}{}
		<-g.open
	}
	return nil
}

func (g *gate) Remove(domain.Task) error { return nil }

// While one task's change is being written, the queue goes on: other tasks
// are claimed, the task reads as it was stored, and the task's next change
// waits for the write and is decided on its result.
func TestWritesRunOutsideTheLock(t *testing.T) {
	ctx := context.Background()
	now := time.UnixMilli(1751500000000)
	g := &gate{id: "a000000000000001", entered: make(chan struct{}), open: make(chan struct{})}
	s := index.New(index.WithPersister(g))
	var keys []domain.Key
	for n := range 2 {
		posted, _ := domain.Post(fmt.Sprintf("a00000000000000%d", n+1), "task.example.com", "resize", json.RawMessage(`{}`), "alice", now.Add(time.Duration(n)*time.Second))
		if err := s.Create(ctx, posted, nil); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, domain.KeyOf(posted))
	}
	claimBy := func(worker string) func(*domain.Task) error {
		return func(t *domain.Task) error {
			next, _, err := t.Claim(worker, time.Minute, now)
			*t = next
			return err
		}
	}
	first := make(chan error, 1)
	go func() {
		_, err := s.ClaimNext(ctx, keys[0].Ref(), nil, epochNow, claimBy("box-1"), nil)
		first <- err
	}()
	<-g.entered // the claim of task 1 is being written

	got, err := s.ClaimNext(ctx, keys[0].Ref(), nil, epochNow, claimBy("box-2"), nil)
	if err != nil || got.ID != keys[1].ID {
		t.Fatalf("claim during the write = %s, %v; want task 2", got.ID, err)
	}
	if cur, _ := s.Get(ctx, keys[0]); cur.Status != domain.Pending {
		t.Errorf("task 1 reads %s while its claim is written, want pending", cur.Status)
	}
	second := make(chan domain.Task, 1)
	go func() {
		// A result for task 1 must be decided on the stored claim.
		t, _ := s.Update(ctx, keys[0], func(t *domain.Task) error {
			next, _, err := t.Finish("box-1", json.RawMessage(`{}`), now)
			*t = next
			return err
		}, nil)
		second <- t
	}()
	select {
	case <-second:
		t.Fatal("a second change of task 1 went ahead while its claim was being written")
	case <-time.After(50 * time.Millisecond):
	}
	close(g.open)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if done := <-second; done.Status != domain.Finished || done.Attempts != 1 {
		t.Errorf("result after the claim = %s with %d attempts, want finished after one claim", done.Status, done.Attempts)
	}
}

// TestQueryTestsEachTaskOnce checks what makes a claim cheap behind a deep
// backlog it does not match: a query tests each pending task once, however
// many claims ask, and a task again when it comes back to pending.
func TestQueryTestsEachTaskOnce(t *testing.T) {
	ctx := context.Background()
	s := index.New()
	now := time.UnixMilli(1751500000000)
	post := func(n int, item string) domain.Key {
		t.Helper()
		posted, _ := domain.Post(fmt.Sprintf("%016x", 0xd0000000+n), "task.example.com", "resize",
			json.RawMessage(item), "", now.Add(time.Duration(n)*time.Second))
		if err := s.Create(ctx, posted, nil); err != nil {
			t.Fatal(err)
		}
		return domain.KeyOf(posted)
	}
	claim := func(t *domain.Task) error {
		next, _, err := t.Claim("box-1", time.Minute, now)
		*t = next
		return err
	}
	const backlog = 1000
	for n := range backlog {
		post(n, `"image"`)
	}
	ref := domain.QueueRef{Host: "task.example.com", Queue: "resize"}
	videos := &contract.CountingMatcher{Want: `"video"`}
	for n := range 100 {
		k := post(backlog+n, `"video"`)
		got, err := s.ClaimNext(ctx, ref, videos, epochNow, claim, nil)
		if err != nil || got.ID != k.ID {
			t.Fatalf("claim %d = %s, %v; want %s", n, got.ID, err, k.ID)
		}
	}
	if videos.Calls != backlog+100 {
		t.Errorf("query ran %d times for %d tasks, want once each", videos.Calls, backlog+100)
	}
	// A claimed video comes back: it is tested again, and taken again.
	k := domain.Key{Host: ref.Host, Queue: ref.Queue, ID: fmt.Sprintf("%016x", 0xd0000000+backlog)}
	if _, err := s.Update(ctx, k, func(t *domain.Task) error {
		next, _, err := t.Requeue(domain.CauseLease, domain.Retry{}, now)
		*t = next
		return err
	}, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ClaimNext(ctx, ref, videos, epochNow, claim, nil); err != nil || got.ID != k.ID {
		t.Fatalf("claim after re-queue = %s, %v; want %s", got.ID, err, k.ID)
	}
	if videos.Calls != backlog+101 {
		t.Errorf("query ran %d times, want %d: once more, for the re-queued task", videos.Calls, backlog+101)
	}
}

// TestUpdateRefusesIllegalMoves checks that the index holds every update to
// the domain's state machine: an fn that leaves an illegal move is refused
// with an internal error before anything is written, indexed or heard of,
// and the task stays as it was, still claimable.
func TestUpdateRefusesIllegalMoves(t *testing.T) {
	ctx := context.Background()
	p := &recorder{}
	s := index.New(index.WithPersister(p))
	now := time.UnixMilli(1751500000000)
	posted, _ := domain.Post("a000000000000001", "task.example.com", "resize", json.RawMessage(`{}`), "alice", now)
	if err := s.Create(ctx, posted, nil); err != nil {
		t.Fatal(err)
	}
	k := domain.KeyOf(posted)
	moves := map[string]func(*domain.Task){
		"finished with no finishedAt": func(t *domain.Task) { t.Status = domain.Finished },
		"claim without counting an attempt": func(t *domain.Task) {
			t.Status, t.Lease = domain.Processing, &domain.Lease{Worker: "box-1", Until: 1}
		},
		"attempts down": func(t *domain.Task) { t.Attempts = -1 },
		"item changed":  func(t *domain.Task) { t.Item = json.RawMessage(`{"x":1}`) },
	}
	heard := func(domain.Task) error {
		t.Error("Then called for a refused update")
		return nil
	}
	for name, move := range moves {
		for _, op := range []string{"update", "claim"} {
			fn := func(t *domain.Task) error { move(t); return nil }
			var err error
			if op == "update" {
				_, err = s.Update(ctx, k, fn, heard)
			} else {
				_, err = s.ClaimNext(ctx, k.Ref(), nil, epochNow, fn, heard)
			}
			var e *domain.Error
			if !errors.As(err, &e) || e.Kind != domain.KindInternal || e.Code != domain.CodeIllegalTransition {
				t.Errorf("%s by %s = %v, want an internal illegal_transition error", op, name, err)
			}
		}
	}
	if got, _ := s.Get(ctx, k); !cmp.Equal(posted, got) {
		t.Errorf("refused moves changed the index: %s", cmp.Diff(posted, got))
	}
	if got := s.Counts(k.Ref()); got.Pending != 1 || got.Processing+got.Done != 0 || got.Oldest.UnixMilli() != posted.EligibleAt() {
		t.Errorf("counts = %+v after refused moves", got)
	}
	if want := []string{"put a000000000000001 new->pending"}; !cmp.Equal(want, p.calls) {
		t.Errorf("Persister calls (-want +got):\n%s", cmp.Diff(want, p.calls))
	}
	claimed, err := s.ClaimNext(ctx, k.Ref(), nil, epochNow, func(t *domain.Task) error {
		next, _, err := t.Claim("box-1", time.Minute, now)
		*t = next
		return err
	}, nil)
	if err != nil || claimed.Attempts != 1 {
		t.Fatalf("legal claim after refused moves = %+v, %v", claimed, err)
	}
}

// epochNow is when these tests' claims look for claimable tasks: after any
// time they use, as none of them delays a task.
var epochNow = time.UnixMilli(1751500000000).Add(1000 * time.Hour)

func TestPauses(t *testing.T) {
	contract.TestPauses(t, func(t *testing.T) ports.Pauses { return index.New() })
}
