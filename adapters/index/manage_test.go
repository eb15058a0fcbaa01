package index_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/adapters/index"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
	"github.com/taskhoster/taskhoster/tests/contract"
)

// createGate is a Persister whose Put of a new task waits until the test
// opens it; it fails that Put when fail is set.
type createGate struct {
	entered chan struct{}
	open    chan struct{}
	fail    bool
}

func (g *createGate) Put(old *domain.Task, _ domain.Task, _ []byte) error {
	if old == nil {
		g.entered <- struct{}{}
		<-g.open
		if g.fail {
			return errors.New("disc full")
		}
	}
	return nil
}

func (g *createGate) Remove(domain.Task) error { return nil }

// A key whose Create is being written is taken already: a second Create
// with it is refused at once, and ByKey waits for the write and finds the
// task, or, if the write failed, none (and the key is free again).
func TestKeyTakenWhileItsCreateIsWritten(t *testing.T) {
	ctx := context.Background()
	for _, fail := range []bool{false, true} {
		g := &createGate{entered: make(chan struct{}), open: make(chan struct{}), fail: fail}
		s := index.New(index.WithPersister(g))
		post := func(n int) domain.Task {
			p, _ := domain.Post(fmt.Sprintf("a00000000000000%d", n), benchRef.Host, benchRef.Queue, json.RawMessage(`{}`), "alice", epochNow, domain.PostOptions{Key: "k"})
			return p
		}
		created := make(chan error, 1)
		go func() { created <- s.Create(ctx, post(1), nil) }()
		<-g.entered
		if err := s.Create(ctx, post(2), nil); !errors.Is(err, domain.ErrKeyTaken) {
			t.Errorf("fail %v: create with a key being written = %v, want ErrKeyTaken", fail, err)
		}
		found := make(chan error, 1)
		go func() {
			got, err := s.ByKey(ctx, benchRef, "k")
			if err == nil && got.ID != post(1).ID {
				err = fmt.Errorf("ByKey found %s", got.ID)
			}
			found <- err
		}()
		select {
		case err := <-found:
			t.Fatalf("fail %v: ByKey answered (%v) while the create was written", fail, err)
		case <-time.After(30 * time.Millisecond):
		}
		close(g.open)
		if err := <-created; (err != nil) != fail {
			t.Fatalf("fail %v: create = %v", fail, err)
		}
		err := <-found
		switch {
		case !fail && err != nil:
			t.Errorf("ByKey after the write: %v", err)
		case fail && !errors.Is(err, domain.ErrNotFound):
			t.Errorf("ByKey after a failed write = %v, want ErrNotFound", err)
		}
		if fail {
			g.fail, g.open = false, make(chan struct{})
			close(g.open)
			go func() { <-g.entered }()
			if err := s.Create(ctx, post(3), nil); err != nil {
				t.Errorf("create with the key a failed write freed: %v", err)
			}
		}
	}
}

// Load rebuilds the keys: after a restart a key is taken as it was.
func TestLoadRebuildsKeys(t *testing.T) {
	ctx := context.Background()
	s := index.New()
	p, _ := domain.Post("a000000000000001", benchRef.Host, benchRef.Queue, json.RawMessage(`{}`), "alice", epochNow, domain.PostOptions{Key: "k"})
	p, _, _ = p.Claim("box-1", time.Minute, epochNow)
	if _, err := s.Load(p); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ByKey(ctx, benchRef, "k"); err != nil || got.ID != p.ID || got.Status != domain.Processing {
		t.Errorf("ByKey after Load = %s %s, %v", got.ID, got.Status, err)
	}
	twin, _ := domain.Post("a000000000000002", benchRef.Host, benchRef.Queue, json.RawMessage(`{}`), "alice", epochNow, domain.PostOptions{Key: "k"})
	if err := s.Create(ctx, twin, nil); !errors.Is(err, domain.ErrKeyTaken) {
		t.Errorf("create with a loaded key = %v, want ErrKeyTaken", err)
	}
}

// A page tests a bounded number of tasks, however few its filter accepts,
// and paging on tests each task once.
func TestListPageIsBounded(t *testing.T) {
	const tasks = 25_000
	s := index.New()
	for n := range tasks {
		if _, err := s.Load(benchTask(t, n, "image")); err != nil {
			t.Fatal(err)
		}
	}
	m := &contract.CountingMatcher{Want: "nothing"}
	l := ports.ListQuery{Status: domain.Pending, Limit: 10, Match: m}
	pages := 0
	for {
		got, next, err := s.List(context.Background(), benchRef, l)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(got) != 0 {
			t.Fatalf("listed %d tasks the matcher rejects", len(got))
		}
		if pages == 1 && (m.Calls > 10_000 || next == "") {
			t.Errorf("first page tested %d tasks, next %q; want at most 10000 and a cursor", m.Calls, next)
		}
		if next == "" {
			break
		}
		l.After = next
	}
	if m.Calls != tasks || pages < 3 {
		t.Errorf("%d pages tested %d tasks, want each of %d once over 3 pages or more", pages, m.Calls, tasks)
	}
}
