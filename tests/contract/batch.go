package contract

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// batchOf is tasks first to first+n-1, posted at sec with item {"n":i}.
func batchOf(first, n, sec int) []domain.Task {
	ts := make([]domain.Task, n)
	for i := range ts {
		ts[i], _ = domain.Post(ID(first+i), Host, Queue, json.RawMessage(fmt.Sprintf(`{"n":%d}`, first+i)), "alice", at(sec))
	}
	return ts
}

// testCreateAll: a batch is stored whole, its Thens called once per task
// in order, and a batch one of whose tasks cannot be stored (the k-th's id
// or key taken) stores none of them: no Get, Each or count shows one, and
// no Then is called.
func testCreateAll(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	existing := mustPost(t, r, 1, 0, `{"n":1}`)
	if _, err := postKeyed(r, 2, 0, "k2"); err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		name  string
		batch func() []domain.Task
		want  error
	}{
		{"the last id taken", func() []domain.Task {
			ts := batchOf(10, 4, 1)
			ts[3].ID = existing.ID
			return ts
		}, domain.ErrExists},
		{"the second key taken", func() []domain.Task {
			ts := batchOf(10, 4, 1)
			ts[1].IdempotencyKey = "k2"
			return ts
		}, domain.ErrKeyTaken},
	}
	for _, c := range refused {
		var called []string
		err := r.CreateAll(ctx, c.batch(), func(t domain.Task) error { called = append(called, t.ID); return nil })
		if !errors.Is(err, c.want) {
			t.Errorf("%s: CreateAll = %v, want %v", c.name, err, c.want)
		}
		if len(called) > 0 {
			t.Errorf("%s: a refused batch called its Then for %v", c.name, called)
		}
		for i := 10; i < 13; i++ {
			if _, err := r.Get(ctx, key(i)); !errors.Is(err, domain.ErrNotFound) {
				t.Errorf("%s: task %d of a refused batch: Get = %v, want ErrNotFound", c.name, i, err)
			}
		}
		var listed []string
		if err := r.Each(ctx, ref, domain.StagePending, func(t domain.Task) bool { listed = append(listed, t.ID); return true }); err != nil {
			t.Fatal(err)
		}
		if want := []string{ID(1), ID(2)}; !cmp.Equal(listed, want) {
			t.Errorf("%s: pending after a refused batch = %v, want %v", c.name, listed, want)
		}
		assertCounts(t, r, ports.Counts{Pending: 2})
	}
	if diff := cmp.Diff(existing, mustGet(t, r, key(1))); diff != "" {
		t.Errorf("the task whose id a batch took (-want +got):\n%s", diff)
	}

	ts := batchOf(10, 3, 1)
	var called []string
	if err := r.CreateAll(ctx, ts, func(t domain.Task) error { called = append(called, t.ID); return nil }); err != nil {
		t.Fatalf("CreateAll = %v", err)
	}
	if want := []string{ID(10), ID(11), ID(12)}; !cmp.Equal(called, want) {
		t.Errorf("Thens called for %v, want %v", called, want)
	}
	for _, want := range ts {
		if diff := cmp.Diff(want, mustGet(t, r, domain.KeyOf(want))); diff != "" {
			t.Errorf("task %s of a batch (-want +got):\n%s", want.ID, diff)
		}
	}
	assertCounts(t, r, ports.Counts{Pending: 5})

	// A failed Then leaves the batch stored; the later Thens still run.
	failed := errors.New("the log is full")
	called = nil
	err := r.CreateAll(ctx, batchOf(20, 3, 2), func(t domain.Task) error {
		called = append(called, t.ID)
		if t.ID == ID(21) {
			return failed
		}
		return nil
	})
	if !errors.Is(err, failed) {
		t.Errorf("CreateAll with a failing Then = %v, want its error", err)
	}
	if want := []string{ID(20), ID(21), ID(22)}; !cmp.Equal(called, want) {
		t.Errorf("Thens called for %v, want %v", called, want)
	}
	assertCounts(t, r, ports.Counts{Pending: 8})
}
