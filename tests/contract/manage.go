package contract

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// The cases below are SPEC §12's: idempotency keys (Create's ErrKeyTaken,
// ByKey) and lists of tasks by status with keyset paging.

// postKeyed creates task n, posted sec seconds after the epoch, holding
// idempotency key k; it returns Create's error.
func postKeyed(r ports.TaskRepository, n, sec int, k string) (domain.Task, error) {
	t, _ := domain.Post(ID(n), Host, Queue, json.RawMessage(`{}`), "alice", at(sec), domain.PostOptions{Key: k})
	return t, r.Create(context.Background(), t, nil)
}

func testKeys(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	if _, err := r.ByKey(ctx, ref, "k1"); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("ByKey on an empty queue = %v, want ErrNotFound", err)
	}
	first, err := postKeyed(r, 1, 0, "k1")
	if err != nil {
		t.Fatalf("create with a key: %v", err)
	}
	mustPost(t, r, 2, 1, `{}`) // no key
	if got, err := r.ByKey(ctx, ref, "k1"); err != nil || !cmp.Equal(got, mustGet(t, r, key(1))) {
		t.Errorf("ByKey = %+v, %v; want the stored task 1", got, err)
	}
	if got := mustGet(t, r, key(1)); got.IdempotencyKey != "k1" {
		t.Errorf("stored key = %q, want k1", got.IdempotencyKey)
	}
	var thenCalled bool
	twin, _ := domain.Post(ID(3), Host, Queue, json.RawMessage(`{}`), "alice", at(2), domain.PostOptions{Key: "k1"})
	if err := r.Create(ctx, twin, func(domain.Task) error { thenCalled = true; return nil }); !errors.Is(err, domain.ErrKeyTaken) {
		t.Errorf("create with a taken key = %v, want ErrKeyTaken", err)
	}
	if thenCalled {
		t.Error("a refused create called its Then")
	}
	if _, err := r.Get(ctx, key(3)); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("a refused create stored its task: %v", err)
	}
	assertCounts(t, r, ports.Counts{Pending: 2})
	// Keys are per queue.
	other, _ := domain.Post(ID(4), Host, "other", json.RawMessage(`{}`), "alice", at(3), domain.PostOptions{Key: "k1"})
	if err := r.Create(ctx, other, nil); err != nil {
		t.Errorf("the same key on another queue: %v", err)
	}
	if got, err := r.ByKey(ctx, ref, "k2"); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("ByKey of an unknown key = %s, %v", got.ID, err)
	}
	// The key stays with its task through its changes, and ByKey reads
	// the current record.
	mustClaim(t, r, nil, "box-1", at(10))
	if got, err := r.ByKey(ctx, ref, "k1"); err != nil || got.Status != domain.Processing || got.ID != first.ID {
		t.Errorf("ByKey after the claim = %s %s, %v; want task 1 processing", got.ID, got.Status, err)
	}
	if _, err := r.Update(ctx, key(1), finish("box-1", `{}`, at(11)), nil); err != nil {
		t.Fatalf("finish: %v", err)
	}
	if got, err := r.ByKey(ctx, ref, "k1"); err != nil || got.Status != domain.Finished {
		t.Errorf("ByKey after the result = %s, %v; want finished", got.Status, err)
	}
	if _, err := postKeyed(r, 5, 12, "k1"); !errors.Is(err, domain.ErrKeyTaken) {
		t.Errorf("create with the key of a finished task = %v, want ErrKeyTaken", err)
	}
	// Deleting the task frees its key.
	if err := r.Delete(ctx, key(1), nil, nil); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := r.ByKey(ctx, ref, "k1"); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("ByKey after the delete = %v, want ErrNotFound", err)
	}
	if _, err := postKeyed(r, 6, 13, "k1"); err != nil {
		t.Errorf("create with a freed key: %v", err)
	}
	if got, err := r.ByKey(ctx, ref, "k1"); err != nil || got.ID != ID(6) {
		t.Errorf("ByKey of the reused key = %s, %v; want task 6", got.ID, err)
	}
}

// Of many Creates racing with one key exactly one is stored, and ByKey
// returns it; the others get ErrKeyTaken. Readers racing them see either
// nothing or the winner.
func testKeyRace(t *testing.T, r ports.TaskRepository) {
	const posts = 40
	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		mu     sync.Mutex
		won    []string
		taken  int
		others []error
		seen   = map[string]bool{}
	)
	for n := range posts {
		wg.Go(func() {
			<-start
			_, err := postKeyed(r, n, n, "the-key")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, ID(n))
			case errors.Is(err, domain.ErrKeyTaken):
				taken++
			default:
				others = append(others, err)
			}
		})
		wg.Go(func() {
			<-start
			got, err := r.ByKey(context.Background(), ref, "the-key")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				seen[got.ID] = true
			case !errors.Is(err, domain.ErrNotFound):
				others = append(others, err)
			}
		})
	}
	close(start)
	wg.Wait()
	for _, err := range others {
		t.Error(err)
	}
	if len(won) != 1 || taken != posts-1 {
		t.Fatalf("%d creates stored and %d refused, want 1 and %d", len(won), taken, posts-1)
	}
	for id := range seen {
		if id != won[0] {
			t.Errorf("a racing ByKey saw task %s, but %s won", id, won[0])
		}
	}
	if got, err := r.ByKey(context.Background(), ref, "the-key"); err != nil || got.ID != won[0] {
		t.Errorf("ByKey = %s, %v; want %s", got.ID, err, won[0])
	}
	assertCounts(t, r, ports.Counts{Pending: 1})
}

// listAll pages through q's tasks of status st, limit at a time, and
// returns their ids in order. between, if not nil, runs between pages.
func listAll(tb testing.TB, r ports.TaskRepository, q domain.QueueRef, l ports.ListQuery, between func()) []string {
	tb.Helper()
	var ids []string
	for pages := 0; ; pages++ {
		if pages > 10_000 {
			tb.Fatal("List never reached the end")
		}
		tasks, next, err := r.List(context.Background(), q, l)
		if err != nil {
			tb.Fatalf("list %+v: %v", l, err)
		}
		for _, task := range tasks {
			if task.Status != l.Status {
				tb.Errorf("List(%s) gave task %s in status %s", l.Status, task.ID, task.Status)
			}
			if l.Match != nil && !l.Match.Match(task.Item) {
				tb.Errorf("List gave task %s, which its matcher rejects", task.ID)
			}
			ids = append(ids, task.ID)
		}
		if len(tasks) > l.Limit {
			tb.Errorf("List gave %d tasks, over its limit %d", len(tasks), l.Limit)
		}
		if next == "" {
			return ids
		}
		l.After = next
		if between != nil {
			between()
		}
	}
}

func reversed(s []string) []string {
	s = slices.Clone(s)
	slices.Reverse(s)
	return s
}

// A list of pending tasks comes in (EligibleAt, id) order across priorities
// and delays, like Each; newest first is the exact reverse; each status
// lists its own tasks.
func testListOrder(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	// Posted out of order, at several priorities, some delayed, two at
	// one EligibleAt.
	for n, spec := range [][3]int{{50, 0, -1}, {10, 3, -1}, {40, -2, 5}, {20, 0, 70}, {30, 3, -1}, {5, 0, 40}, {60, 1, -1}, {40, 0, -1}} {
		postWith(t, r, n, spec[0], fmt.Sprintf(`{"n":%d}`, n), spec[1], spec[2])
	}
	if _, _, err := r.Due(ctx, ref, at(1)); err != nil { // the delayed tasks are apart now
		t.Fatal(err)
	}
	for n := 10; n < 16; n++ {
		mustPost(t, r, n, 100+n, `{}`)
	}
	// Claim 10 and 11, finish 10; fail 12.
	for _, n := range []int{10, 11} {
		if _, err := r.Update(ctx, key(n), claim("box-1", at(200)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Update(ctx, key(10), finish("box-1", `{}`, at(201)), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Update(ctx, key(12), func(t *domain.Task) error {
		next, _, err := t.Cancel(at(202))
		*t = next
		return err
	}, nil); err != nil {
		t.Fatal(err)
	}

	each := pendingIDs(t, r)
	for _, limit := range []int{1, 3, 1000} {
		got := listAll(t, r, ref, ports.ListQuery{Status: domain.Pending, Limit: limit}, nil)
		if diff := cmp.Diff(each, got); diff != "" {
			t.Errorf("pending oldest first, limit %d (-Each +List):\n%s", limit, diff)
		}
		got = listAll(t, r, ref, ports.ListQuery{Status: domain.Pending, Newest: true, Limit: limit}, nil)
		if diff := cmp.Diff(reversed(each), got); diff != "" {
			t.Errorf("pending newest first, limit %d (-want +got):\n%s", limit, diff)
		}
	}
	for _, c := range []struct {
		st   domain.Status
		want []string
	}{
		{domain.Processing, []string{ID(11)}},
		{domain.Finished, []string{ID(10)}},
		{domain.Failed, []string{ID(12)}},
	} {
		for _, newest := range []bool{false, true} {
			got := listAll(t, r, ref, ports.ListQuery{Status: c.st, Newest: newest, Limit: 2}, nil)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("%s, newest %v (-want +got):\n%s", c.st, newest, diff)
			}
		}
	}
	// The first claimed task: a list returns full records, as Get does.
	tasks, _, err := r.List(ctx, ref, ports.ListQuery{Status: domain.Processing, Limit: 10})
	if err != nil || len(tasks) != 1 || !cmp.Equal(tasks[0], mustGet(t, r, key(11))) {
		t.Errorf("processing list = %+v, %v; want task 11 as Get reads it", tasks, err)
	}
	// A queue that holds nothing lists nothing.
	if tasks, next, err := r.List(ctx, domain.QueueRef{Host: Host, Queue: "other"}, ports.ListQuery{Status: domain.Pending, Limit: 10}); err != nil || len(tasks) != 0 || next != "" {
		t.Errorf("list of an unknown queue = %v, %q, %v", tasks, next, err)
	}
}

// Processing and done tasks list by (postedAt, id), many of them, a page at
// a time; the done tree holds finished and failed tasks mixed.
func testListDone(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	var finished, failed, processing []string
	for n := range 60 {
		mustPost(t, r, n, 60-n, `{}`) // posted newest first
	}
	for n := range 60 {
		if _, err := r.Update(ctx, key(n), claim("box-1", at(100)), nil); err != nil {
			t.Fatal(err)
		}
		switch n % 3 {
		case 0:
			processing = append(processing, ID(n))
		case 1:
			finished = append(finished, ID(n))
			if _, err := r.Update(ctx, key(n), finish("box-1", `{}`, at(101)), nil); err != nil {
				t.Fatal(err)
			}
		case 2:
			failed = append(failed, ID(n))
			if _, err := r.Update(ctx, key(n), func(t *domain.Task) error {
				next, _, err := t.Cancel(at(101))
				*t = next
				return err
			}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	for st, ids := range map[domain.Status][]string{domain.Processing: processing, domain.Finished: finished, domain.Failed: failed} {
		oldest := reversed(ids) // a higher n was posted earlier
		if diff := cmp.Diff(oldest, listAll(t, r, ref, ports.ListQuery{Status: st, Limit: 7}, nil)); diff != "" {
			t.Errorf("%s oldest first (-want +got):\n%s", st, diff)
		}
		if diff := cmp.Diff(ids, listAll(t, r, ref, ports.ListQuery{Status: st, Newest: true, Limit: 7}, nil)); diff != "" {
			t.Errorf("%s newest first (-want +got):\n%s", st, diff)
		}
	}
}

// A matcher filters the list: every page holds only matching tasks, and
// the pages together hold every one of them, in order.
func testListMatch(t *testing.T, r ports.TaskRepository) {
	var videos []string
	for n := range 50 {
		kind := "image"
		if n%7 == 3 {
			kind = "video"
			videos = append(videos, ID(n))
		}
		mustPost(t, r, n, n, kindItem(kind))
	}
	m := &kindMatcher{kind: "video"}
	for _, limit := range []int{1, 2, 100} {
		if diff := cmp.Diff(videos, listAll(t, r, ref, ports.ListQuery{Status: domain.Pending, Limit: limit, Match: m}, nil)); diff != "" {
			t.Errorf("videos, limit %d (-want +got):\n%s", limit, diff)
		}
		if diff := cmp.Diff(reversed(videos), listAll(t, r, ref, ports.ListQuery{Status: domain.Pending, Limit: limit, Newest: true, Match: &keyless{kindMatcher{kind: "video"}}}, nil)); diff != "" {
			t.Errorf("videos newest first, keyless matcher, limit %d (-want +got):\n%s", limit, diff)
		}
	}
	if got := listAll(t, r, ref, ports.ListQuery{Status: domain.Pending, Limit: 5, Match: &kindMatcher{kind: "audio"}}, nil); len(got) != 0 {
		t.Errorf("a matcher that accepts nothing listed %v", got)
	}
}

// Paging visits each task once while tasks are posted, claimed and finished
// between pages: no task twice, and every task that stayed in the listed
// status from the first page to the last.
func testListPagingUnderChurn(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	next := 0
	post := func() {
		mustPost(t, r, next, next, `{}`)
		next++
	}
	for range 40 {
		post()
	}
	status := map[string]domain.Status{}
	for range 25 {
		got := mustClaim(t, r, nil, "box-1", at(1000))
		status[got.ID] = domain.Processing
	}
	var processing []string
	for id, st := range status {
		if st == domain.Processing {
			processing = append(processing, id)
		}
	}
	slices.Sort(processing)
	for _, id := range processing[:10] {
		if _, err := r.Update(ctx, domain.Key{Host: Host, Queue: Queue, ID: id}, finish("box-1", `{}`, at(1001)), nil); err != nil {
			t.Fatal(err)
		}
	}
	snapshot := func(st domain.Status) map[string]bool {
		ids := map[string]bool{}
		stage := st.Stage()
		if err := r.Each(ctx, ref, stage, func(task domain.Task) bool {
			if task.Status == st {
				ids[task.ID] = true
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	for _, st := range []domain.Status{domain.Pending, domain.Processing, domain.Finished} {
		for _, newest := range []bool{false, true} {
			stayed := snapshot(st)
			churn := func() {
				post()
				post()
				if got, err := r.ClaimNext(ctx, ref, nil, at(2000), claim("box-2", at(2000)), nil); err == nil {
					delete(stayed, got.ID)
				}
				var oldest string
				_ = r.Each(ctx, ref, domain.StageProcessing, func(task domain.Task) bool {
					oldest = task.ID
					return false
				})
				if oldest != "" {
					if _, err := r.Update(ctx, domain.Key{Host: Host, Queue: Queue, ID: oldest}, finish("box-1", `{}`, at(2001)), nil); err != nil {
						t.Fatal(err)
					}
					delete(stayed, oldest)
				}
			}
			got := listAll(t, r, ref, ports.ListQuery{Status: st, Newest: newest, Limit: 4}, churn)
			seen := map[string]bool{}
			for _, id := range got {
				if seen[id] {
					t.Errorf("%s, newest %v: task %s listed twice", st, newest, id)
				}
				seen[id] = true
			}
			for id := range stayed {
				if !seen[id] {
					t.Errorf("%s, newest %v: task %s stayed %s but was not listed", st, newest, id, st)
				}
			}
		}
	}
}

// A cursor that the store did not make for this queue, or a limit out of
// range, is an invalid request.
func testListBadCursor(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	for n := range 3 {
		mustPost(t, r, n, n, `{}`)
	}
	other := domain.QueueRef{Host: Host, Queue: "other"}
	t1, _ := domain.Post(ID(9), Host, other.Queue, json.RawMessage(`{}`), "alice", at(0))
	t2, _ := domain.Post(ID(8), Host, other.Queue, json.RawMessage(`{}`), "alice", at(1))
	for _, task := range []domain.Task{t1, t2} {
		if err := r.Create(ctx, task, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, foreign, err := r.List(ctx, other, ports.ListQuery{Status: domain.Pending, Limit: 1})
	if err != nil || foreign == "" {
		t.Fatalf("first page of the other queue: next %q, %v", foreign, err)
	}
	_, mine, err := r.List(ctx, ref, ports.ListQuery{Status: domain.Pending, Limit: 1})
	if err != nil || mine == "" {
		t.Fatalf("first page: next %q, %v", mine, err)
	}
	invalid := func(what string, q domain.QueueRef, l ports.ListQuery) {
		t.Helper()
		_, _, err := r.List(ctx, q, l)
		var de *domain.Error
		if !errors.As(err, &de) || de.Kind != domain.KindInvalid || de.Code != domain.CodeInvalidRequest {
			t.Errorf("%s: err = %v, want invalid_request", what, err)
		}
	}
	for _, c := range []string{"garbage", "!!!", foreign, mine + "x", mine[:len(mine)-2], "AAAA"} {
		invalid(fmt.Sprintf("cursor %q", c), ref, ports.ListQuery{Status: domain.Pending, Limit: 1, After: c})
	}
	invalid("a cursor on an unknown queue", domain.QueueRef{Host: Host, Queue: "nothing"}, ports.ListQuery{Status: domain.Pending, Limit: 1, After: "garbage"})
	invalid("limit 0", ref, ports.ListQuery{Status: domain.Pending, Limit: 0})
	invalid("limit 1001", ref, ports.ListQuery{Status: domain.Pending, Limit: 1001})
	invalid("no status", ref, ports.ListQuery{Limit: 1})
	// The store's own cursor works.
	if tasks, _, err := r.List(ctx, ref, ports.ListQuery{Status: domain.Pending, Limit: 1, After: mine}); err != nil || len(tasks) != 1 || tasks[0].ID != ID(1) {
		t.Errorf("second page = %v, %v; want task 1", tasks, err)
	}
}

// TestPauses runs the contract of ports.Pauses against stores made by open.
func TestPauses(t *testing.T, open func(t *testing.T) ports.Pauses) {
	ctx := context.Background()
	p := open(t)
	other := domain.QueueRef{Host: Host, Queue: "other"}
	if p.Paused(ref) {
		t.Error("a new queue is paused")
	}
	for _, step := range []struct {
		q      domain.QueueRef
		paused bool
	}{{ref, true}, {ref, true}, {other, true}, {ref, false}, {ref, false}} {
		if err := p.SetPaused(ctx, step.q, step.paused); err != nil {
			t.Fatalf("set %s paused %v: %v", step.q.Queue, step.paused, err)
		}
		if got := p.Paused(step.q); got != step.paused {
			t.Errorf("%s paused = %v after setting %v", step.q.Queue, got, step.paused)
		}
	}
	if p.Paused(ref) || !p.Paused(other) {
		t.Errorf("paused: %s %v, %s %v; want false, true", ref.Queue, p.Paused(ref), other.Queue, p.Paused(other))
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := p.SetPaused(canceled, ref, true); err == nil {
		t.Error("SetPaused with an ended context succeeded")
	}
}
