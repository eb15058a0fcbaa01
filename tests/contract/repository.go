// Package contract holds the behaviour every ports.TaskRepository must show.
// Each adapter runs it from a three-line test:
//
//	func TestContract(t *testing.T) {
//		contract.TestRepository(t, func(t *testing.T) ports.TaskRepository { return index.New() })
//	}
package contract

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// Host and Queue name the queue every case works in.
const (
	Host  = "task.example.com"
	Queue = "resize"
)

// epoch is the clock of every case; tasks are posted a second apart from it.
var epoch = time.UnixMilli(1751500000000).UTC()

const lease = time.Minute

// TestRepository runs the contract against repositories made by open, one
// fresh repository per case.
func TestRepository(t *testing.T, open func(t *testing.T) ports.TaskRepository) {
	cases := []struct {
		name string
		run  func(t *testing.T, r ports.TaskRepository)
	}{
		{"CreateGetRoundTrip", testCreateGet},
		{"CreateDuplicateFails", testCreateDuplicate},
		{"CreateRefusesBadNames", testCreateBadNames},
		{"CreateAllIsAllOrNothing", testCreateAll},
		{"GetMissing", testGetMissing},
		{"UpdateMovesBetweenStates", testUpdateMoves},
		{"UpdateFnErrorChangesNothing", testUpdateFnError},
		{"ClaimFnErrorChangesNothing", testClaimFnError},
		{"UpdateMustKeepIdentity", testUpdateIdentity},
		{"ClaimOrder", testClaimOrder},
		{"ClaimMatcher", testClaimMatcher},
		{"ClaimMatcherRequeued", testClaimMatcherRequeued},
		{"ClaimMatcherLeftPending", testClaimMatcherLeftPending},
		{"ClaimManyQueries", testClaimManyQueries},
		{"ClaimQueryIdle", testClaimQueryIdle},
		{"ClaimMatchersAgainstModel", testClaimMatchersAgainstModel},
		{"ClaimQueries", testClaimQueries},
		{"ClaimQueriesDifferential", testClaimQueriesDifferential},
		{"ClaimRace", testClaimRace},
		{"FinishRace", testFinishRace},
		{"Each", testEach},
		{"Delete", testDelete},
		{"DeleteCheckRefuses", testDeleteCheck},
		{"ThenOncePerStoredChange", testThenOnce},
		{"ThenInStoreOrder", testThenOrder},
		{"ReturnsCopies", testCopies},
		{"NewFieldsRoundTrip", testNewFieldsRoundTrip},
		{"ClaimPriorityOrder", testClaimPriorityOrder},
		{"ClaimNotBefore", testClaimNotBefore},
		{"Due", testDue},
		{"DueAfterTheClockStepsBack", testDueAfterTheClockStepsBack},
		{"EachByEligibleAt", testEachByEligibleAt},
		{"DelaysAgainstModel", testDelaysAgainstModel},
		{"Keys", testKeys},
		{"KeyRace", testKeyRace},
		{"ListOrder", testListOrder},
		{"ListDone", testListDone},
		{"ListMatch", testListMatch},
		{"ListPagingUnderChurn", testListPagingUnderChurn},
		{"ListBadCursor", testListBadCursor},
		{"CountsFailedAndOldest", testCountsFailedAndOldest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, open(t))
		})
	}
}

// ID is the n-th test task id.
func ID(n int) string { return fmt.Sprintf("%016x", 0xa0000000+n) }

// key is the key of the n-th test task.
func key(n int) domain.Key { return domain.Key{Host: Host, Queue: Queue, ID: ID(n)} }

var ref = domain.QueueRef{Host: Host, Queue: Queue}

// at is the epoch plus sec seconds.
func at(sec int) time.Time { return epoch.Add(time.Duration(sec) * time.Second) }

// mustPost creates task n, posted sec seconds after the epoch with item.
func mustPost(tb testing.TB, r ports.TaskRepository, n, sec int, item string) domain.Task {
	tb.Helper()
	t, _ := domain.Post(ID(n), Host, Queue, json.RawMessage(item), "alice", at(sec))
	if err := r.Create(context.Background(), t, nil); err != nil {
		tb.Fatalf("create task %d: %v", n, err)
	}
	return t
}

func claim(worker string, now time.Time) func(*domain.Task) error {
	return func(t *domain.Task) error {
		next, _, err := t.Claim(worker, lease, now)
		*t = next
		return err
	}
}

func finish(worker, result string, now time.Time) func(*domain.Task) error {
	return func(t *domain.Task) error {
		next, _, err := t.Finish(worker, json.RawMessage(result), now)
		*t = next
		return err
	}
}

func requeue(now time.Time) func(*domain.Task) error {
	return func(t *domain.Task) error {
		next, _, err := t.Requeue(domain.CauseLease, domain.Retry{}, now)
		*t = next
		return err
	}
}

func mustGet(tb testing.TB, r ports.TaskRepository, k domain.Key) domain.Task {
	tb.Helper()
	t, err := r.Get(context.Background(), k)
	if err != nil {
		tb.Fatalf("get %s: %v", k.ID, err)
	}
	return t
}

func mustClaim(tb testing.TB, r ports.TaskRepository, m ports.Matcher, worker string, now time.Time) domain.Task {
	tb.Helper()
	t, err := r.ClaimNext(context.Background(), ref, m, now, claim(worker, now), nil)
	if err != nil {
		tb.Fatalf("claim for %s: %v", worker, err)
	}
	return t
}

// assertCounts compares r's counts of the queue with want, leaving out
// Oldest (testCountsFailedAndOldest checks it).
func assertCounts(tb testing.TB, r ports.TaskRepository, want ports.Counts) {
	tb.Helper()
	got := r.Counts(ref)
	got.Oldest = time.Time{}
	if got != want {
		tb.Errorf("counts = %+v, want %+v", got, want)
	}
}

func testCreateGet(t *testing.T, r ports.TaskRepository) {
	want := mustPost(t, r, 1, 0, `{"url":"https://ex.com/a.png","width":800}`)
	got := mustGet(t, r, key(1))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("get after create (-want +got):\n%s", diff)
	}
	assertCounts(t, r, ports.Counts{Pending: 1})
}

func testCreateDuplicate(t *testing.T, r ports.TaskRepository) {
	first := mustPost(t, r, 1, 0, `{"n":1}`)
	dup, _ := domain.Post(ID(1), Host, Queue, json.RawMessage(`{"n":2}`), "bob", at(5))
	// app.Post draws a new id on exactly this error.
	if err := r.Create(context.Background(), dup, nil); !errors.Is(err, domain.ErrExists) {
		t.Fatalf("second create with the same id = %v, want ErrExists", err)
	}
	// The first record stands, also once it has moved on from pending.
	if diff := cmp.Diff(first, mustGet(t, r, key(1))); diff != "" {
		t.Errorf("record after duplicate create (-want +got):\n%s", diff)
	}
	mustClaim(t, r, nil, "box-1", at(1))
	if err := r.Create(context.Background(), dup, nil); !errors.Is(err, domain.ErrExists) {
		t.Fatalf("create with the id of a processing task = %v, want ErrExists", err)
	}
	assertCounts(t, r, ports.Counts{Processing: 1})
}

func testCreateBadNames(t *testing.T, r ports.TaskRepository) {
	cases := []struct{ name, host, queue, id string }{
		{"host climbs out", "..", Queue, ID(1)},
		{"host with slash", "a/b", Queue, ID(1)},
		{"host upper case", "Task.example.com", Queue, ID(1)},
		{"queue climbs out", Host, "..", ID(1)},
		{"queue with slash", Host, "a/b", ID(1)},
		{"queue empty", Host, "", ID(1)},
		{"id climbs out", Host, Queue, "../../../../etc"},
		{"id too short", Host, Queue, "abc"},
		{"id upper case", Host, Queue, "A000000000000001"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			task, _ := domain.Post(c.id, c.host, c.queue, json.RawMessage(`{}`), "", epoch)
			err := r.Create(context.Background(), task, nil)
			if domain.KindOf(err) != domain.KindInvalid {
				t.Fatalf("create = %v, want a KindInvalid error", err)
			}
		})
	}
}

func testGetMissing(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	if _, err := r.Get(ctx, key(1)); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("get in an unknown queue = %v, want ErrNotFound", err)
	}
	mustPost(t, r, 1, 0, `{}`)
	for _, k := range []domain.Key{
		key(2),
		{Host: Host, Queue: "other", ID: ID(1)},
		{Host: "other.example.com", Queue: Queue, ID: ID(1)},
		{Host: Host, Queue: Queue, ID: "../" + ID(1)},
	} {
		if _, err := r.Get(ctx, k); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("get %+v = %v, want ErrNotFound", k, err)
		}
	}
	if _, err := r.Update(ctx, key(2), claim("box-1", at(1)), nil); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("update of a missing task = %v, want ErrNotFound", err)
	}
	if err := r.Delete(ctx, key(2), nil, nil); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("delete of a missing task = %v, want ErrNotFound", err)
	}
	// Ids no task can have, as a client may send them (a path's %00 or
	// %ff, a socket message's "\u0000"): not found, as any other id of no
	// task, never the store's failure to hold the text (a 500).
	for _, id := range []string{"\x00" + ID(1)[1:], "\xff" + ID(1)[1:], ID(1) + "\x00"} {
		k := domain.Key{Host: Host, Queue: Queue, ID: id}
		if _, err := r.Get(ctx, k); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("get %q = %v, want ErrNotFound", id, err)
		}
		if _, err := r.Update(ctx, k, claim("box-1", at(1)), nil); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("update %q = %v, want ErrNotFound", id, err)
		}
		if err := r.Delete(ctx, k, nil, nil); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("delete %q = %v, want ErrNotFound", id, err)
		}
	}
	other := domain.QueueRef{Host: Host, Queue: "other"}
	if _, err := r.ClaimNext(ctx, other, nil, at(1), claim("box-1", at(1)), nil); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("claim in an unknown queue = %v, want ErrNotFound", err)
	}
	if got := r.Counts(other); got != (ports.Counts{}) {
		t.Errorf("counts of an unknown queue = %+v, want zero", got)
	}
}

func testUpdateMoves(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	mustPost(t, r, 1, 0, `{}`)
	mustPost(t, r, 2, 1, `{}`)
	assertCounts(t, r, ports.Counts{Pending: 2})

	got, err := r.Update(ctx, key(1), claim("box-1", at(10)), nil)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	want := domain.Lease{Worker: "box-1", Until: domain.Millis(at(10).Add(lease))}
	if got.Status != domain.Processing || got.Lease == nil || *got.Lease != want || got.Attempts != 1 {
		t.Errorf("claimed = %+v, want processing with lease %+v and attempt 1", got, want)
	}
	if diff := cmp.Diff(got, mustGet(t, r, key(1))); diff != "" {
		t.Errorf("get after claim differs from update's result:\n%s", diff)
	}
	assertCounts(t, r, ports.Counts{Pending: 1, Processing: 1})

	got, err = r.Update(ctx, key(1), func(t *domain.Task) error {
		next, _, err := t.ReportProgress("box-1", json.RawMessage(`{"percent":40}`), lease, at(20))
		*t = next
		return err
	}, nil)
	if err != nil {
		t.Fatalf("progress: %v", err)
	}
	if string(got.Progress) != `{"percent":40}` {
		t.Errorf("progress = %s", got.Progress)
	}
	assertCounts(t, r, ports.Counts{Pending: 1, Processing: 1})

	got, err = r.Update(ctx, key(1), finish("box-1", `{"ok":true}`, at(30)), nil)
	if err != nil {
		t.Fatalf("finish: %v", err)
	}
	if got.Status != domain.Finished || string(got.Result) != `{"ok":true}` || got.Lease != nil {
		t.Errorf("finished = %+v", got)
	}
	assertCounts(t, r, ports.Counts{Pending: 1, Done: 1})

	got, err = r.Update(ctx, key(2), func(t *domain.Task) error {
		next, _, err := t.Timeout(at(40))
		*t = next
		return err
	}, nil)
	if err != nil {
		t.Fatalf("timeout: %v", err)
	}
	if got.Status != domain.Failed || got.Error == nil || *got.Error != domain.TimeoutError {
		t.Errorf("timed out = %+v", got)
	}
	assertCounts(t, r, ports.Counts{Done: 2, Failed: 1})
}

func testUpdateFnError(t *testing.T, r ports.TaskRepository) {
	before := mustPost(t, r, 1, 0, `{}`)
	boom := errors.New("boom")
	current, err := r.Update(context.Background(), key(1), func(t *domain.Task) error {
		// Change everything, including what pointers point to, then refuse.
		*t.PostedBy = "mallory"
		t.Status = domain.Finished
		t.Result = json.RawMessage(`{"stolen":true}`)
		return boom
	}, nil)
	if !errors.Is(err, boom) {
		t.Fatalf("update = %v, want fn's error unchanged", err)
	}
	if diff := cmp.Diff(before, current); diff != "" {
		t.Errorf("a failed update returned other than the current record (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, mustGet(t, r, key(1))); diff != "" {
		t.Errorf("record changed by a failed update (-want +got):\n%s", diff)
	}
	assertCounts(t, r, ports.Counts{Pending: 1})

	// A domain refusal is returned as it is, too.
	if _, err := r.Update(context.Background(), key(1), requeue(at(1)), nil); !errors.Is(err, domain.ErrNotProcessing) {
		t.Errorf("requeue of a pending task = %v, want ErrNotProcessing", err)
	}
}

// A claim whose fn refuses the task it was offered (app.claimStored does,
// for a task whose attempts a lowered maxAttempts has spent) returns fn's
// error, stores nothing, runs no Then, and leaves the task to be claimed.
func testClaimFnError(t *testing.T, r ports.TaskRepository) {
	ref := domain.QueueRef{Host: Host, Queue: Queue}
	before := mustPost(t, r, 1, 0, `{}`)
	spent := errors.New("spent")
	var offered string
	_, err := r.ClaimNext(context.Background(), ref, nil, at(1), func(t *domain.Task) error {
		offered = t.ID
		t.Status, t.Attempts = domain.Processing, 7
		return spent
	}, func(domain.Task) error {
		t.Error("Then called for a refused claim")
		return nil
	})
	if !errors.Is(err, spent) || offered != ID(1) {
		t.Fatalf("refused claim = %v (offered %q), want fn's error after offering %s", err, offered, ID(1))
	}
	if diff := cmp.Diff(before, mustGet(t, r, key(1))); diff != "" {
		t.Errorf("record changed by a refused claim (-want +got):\n%s", diff)
	}
	assertCounts(t, r, ports.Counts{Pending: 1})
	if got, err := r.ClaimNext(context.Background(), ref, nil, at(2), claim("box-1", at(2)), nil); err != nil || got.ID != ID(1) || got.Attempts != 1 {
		t.Errorf("claim after the refusal = %s (attempts %d), %v; want %s, first attempt", got.ID, got.Attempts, err, ID(1))
	}
}

func testUpdateIdentity(t *testing.T, r ports.TaskRepository) {
	before := mustPost(t, r, 1, 0, `{}`)
	for name, change := range map[string]func(*domain.Task){
		"id":     func(t *domain.Task) { t.ID = ID(2) },
		"queue":  func(t *domain.Task) { t.Queue = "other" },
		"host":   func(t *domain.Task) { t.Host = "../../x" },
		"status": func(t *domain.Task) { t.Status = "../../x" },
	} {
		_, err := r.Update(context.Background(), key(1), func(t *domain.Task) error {
			change(t)
			return nil
		}, nil)
		if err == nil {
			t.Errorf("update changing the %s succeeded", name)
		}
	}
	if diff := cmp.Diff(before, mustGet(t, r, key(1))); diff != "" {
		t.Errorf("record changed by refused updates (-want +got):\n%s", diff)
	}
	if _, err := r.Get(context.Background(), key(2)); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("get of the id an update tried to take = %v, want ErrNotFound", err)
	}
}

func testClaimOrder(t *testing.T, r ports.TaskRepository) {
	// Posted out of id order, with a tie on postedAt broken by id.
	mustPost(t, r, 5, 30, `{}`)
	mustPost(t, r, 3, 10, `{}`)
	mustPost(t, r, 2, 20, `{}`)
	mustPost(t, r, 1, 20, `{}`)
	mustPost(t, r, 4, 40, `{}`)

	first := mustClaim(t, r, nil, "box-1", at(100))
	second := mustClaim(t, r, nil, "box-1", at(100))
	if first.ID != ID(3) || second.ID != ID(1) {
		t.Fatalf("claimed %s then %s, want %s then %s", first.ID, second.ID, ID(3), ID(1))
	}
	// Task 3 comes back: it was posted first, so it goes before 2, 5 and 4.
	if _, err := r.Update(context.Background(), key(3), requeue(at(101)), nil); err != nil {
		t.Fatalf("requeue: %v", err)
	}
	var got []string
	for range 4 {
		got = append(got, mustClaim(t, r, nil, "box-2", at(102)).ID)
	}
	want := []string{ID(3), ID(2), ID(5), ID(4)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("claim order (-want +got):\n%s", diff)
	}
	if again := mustGet(t, r, key(3)); again.Attempts != 2 {
		t.Errorf("re-claimed task has %d attempts, want 2", again.Attempts)
	}
	if _, err := r.ClaimNext(context.Background(), ref, nil, at(103), claim("box-2", at(103)), nil); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("claim with nothing pending = %v, want ErrNotFound", err)
	}
}

// kindMatcher accepts items whose "kind" is kind.
type kindMatcher struct{ kind string }

func (m *kindMatcher) Key() string { return "kind=" + m.kind }

func (m *kindMatcher) Match(item json.RawMessage) bool {
	var v struct{ Kind string }
	return json.Unmarshal(item, &v) == nil && v.Kind == m.kind
}

func testClaimMatcher(t *testing.T, r ports.TaskRepository) {
	mustPost(t, r, 1, 1, `{"kind":"video"}`)
	mustPost(t, r, 2, 2, `{"kind":"image"}`)
	mustPost(t, r, 3, 3, `{"kind":"video"}`)
	mustPost(t, r, 4, 4, `{"kind":"image"}`)

	images := &kindMatcher{kind: "image"}
	if got := mustClaim(t, r, images, "box-1", at(10)); got.ID != ID(2) {
		t.Errorf("first image claim took %s, want %s", got.ID, ID(2))
	}
	if got := mustClaim(t, r, images, "box-1", at(10)); got.ID != ID(4) {
		t.Errorf("second image claim took %s, want %s", got.ID, ID(4))
	}
	_, err := r.ClaimNext(context.Background(), ref, images, at(10), claim("box-1", at(10)), nil)
	if !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("image claim with only videos pending = %v, want ErrNotFound", err)
	}
	// The skipped tasks were left alone.
	assertCounts(t, r, ports.Counts{Pending: 2, Processing: 2})
	for _, n := range []int{1, 3} {
		if got := mustGet(t, r, key(n)); got.Status != domain.Pending || got.Attempts != 0 {
			t.Errorf("skipped task %d = %s with %d attempts, want untouched", n, got.Status, got.Attempts)
		}
	}
	if got := mustClaim(t, r, nil, "box-2", at(11)); got.ID != ID(1) {
		t.Errorf("claim without a query took %s, want %s", got.ID, ID(1))
	}
}

func testClaimRace(t *testing.T, r ports.TaskRepository) {
	const tasks, workers = 10, 40
	for n := range tasks {
		mustPost(t, r, n, n, `{}`)
	}
	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		mu     sync.Mutex
		won    = map[string]string{} // task id → worker
		misses int
		others []error
	)
	for w := range workers {
		worker := fmt.Sprintf("box-%d", w)
		wg.Go(func() {
			<-start
			got, err := r.ClaimNext(context.Background(), ref, nil, at(100), claim(worker, at(100)), nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				if prev, dup := won[got.ID]; dup {
					others = append(others, fmt.Errorf("task %s claimed by both %s and %s", got.ID, prev, worker))
				}
				won[got.ID] = worker
				if got.Lease == nil || got.Lease.Worker != worker {
					others = append(others, fmt.Errorf("%s got %s leased to %+v", worker, got.ID, got.Lease))
				}
			case errors.Is(err, domain.ErrNotFound):
				misses++
			default:
				others = append(others, err)
			}
		})
	}
	close(start)
	wg.Wait()
	for _, err := range others {
		t.Error(err)
	}
	if len(won) != tasks || misses != workers-tasks {
		t.Errorf("%d distinct claims and %d misses, want %d and %d", len(won), misses, tasks, workers-tasks)
	}
	for id, worker := range won {
		got := mustGet(t, r, domain.Key{Host: Host, Queue: Queue, ID: id})
		if got.Status != domain.Processing || got.Attempts != 1 || got.Lease.Worker != worker {
			t.Errorf("task %s = %s, %d attempts, lease %+v; want processing once by %s", id, got.Status, got.Attempts, got.Lease, worker)
		}
	}
	assertCounts(t, r, ports.Counts{Processing: tasks})
}

func testFinishRace(t *testing.T, r ports.TaskRepository) {
	const workers = 20
	mustPost(t, r, 1, 0, `{}`)
	mustClaim(t, r, nil, "box-0", at(1))
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		mu       sync.Mutex
		winners  []string
		terminal int
		others   []error
	)
	for w := range workers {
		worker := fmt.Sprintf("box-%d", w)
		wg.Go(func() {
			<-start
			_, err := r.Update(context.Background(), key(1), finish(worker, fmt.Sprintf(`{"by":%q}`, worker), at(2)), nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				winners = append(winners, worker)
			case errors.Is(err, domain.ErrTerminal):
				terminal++
			default:
				others = append(others, err)
			}
		})
	}
	close(start)
	wg.Wait()
	for _, err := range others {
		t.Error(err)
	}
	if len(winners) != 1 || terminal != workers-1 {
		t.Fatalf("%d results accepted and %d refused as terminal, want 1 and %d", len(winners), terminal, workers-1)
	}
	got := mustGet(t, r, key(1))
	if want := fmt.Sprintf(`{"by":%q}`, winners[0]); got.Status != domain.Finished || string(got.Result) != want {
		t.Errorf("task = %s with result %s, want finished with %s", got.Status, got.Result, want)
	}
	assertCounts(t, r, ports.Counts{Done: 1})
}

func testEach(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	for n, sec := range []int{50, 10, 40, 20, 30} {
		mustPost(t, r, n, sec, `{}`)
	}
	if _, err := r.Update(ctx, key(4), claim("box-1", at(60)), nil); err != nil {
		t.Fatalf("claim: %v", err)
	}
	ids := func(st domain.Stage, limit int) []string {
		t.Helper()
		var got []string
		err := r.Each(ctx, ref, st, func(task domain.Task) bool {
			if task.Status.Stage() != st {
				t.Errorf("Each(%s) gave task %s in status %s", st, task.ID, task.Status)
			}
			got = append(got, task.ID)
			return len(got) < limit
		})
		if err != nil {
			t.Fatalf("each %s: %v", st, err)
		}
		return got
	}
	if diff := cmp.Diff([]string{ID(1), ID(3), ID(2), ID(0)}, ids(domain.StagePending, 100)); diff != "" {
		t.Errorf("pending in claim order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{ID(1), ID(3)}, ids(domain.StagePending, 2)); diff != "" {
		t.Errorf("Each did not stop when fn returned false (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{ID(4)}, ids(domain.StageProcessing, 100)); diff != "" {
		t.Errorf("processing (-want +got):\n%s", diff)
	}
	if got := ids(domain.StageDone, 100); len(got) != 0 {
		t.Errorf("done = %v, want none", got)
	}
	if err := r.Each(ctx, domain.QueueRef{Host: Host, Queue: "other"}, domain.StagePending, func(domain.Task) bool {
		t.Error("Each called fn for an unknown queue")
		return true
	}); err != nil {
		t.Errorf("each of an unknown queue: %v", err)
	}
	if err := r.Each(ctx, ref, domain.Stage(7), func(domain.Task) bool { return true }); err == nil {
		t.Error("Each accepted a stage that does not exist")
	}
}

func testDelete(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	mustPost(t, r, 1, 0, `{}`)
	mustPost(t, r, 2, 1, `{}`)
	if _, err := r.Update(ctx, key(1), finish("box-1", `{}`, at(5)), nil); err != nil {
		t.Fatalf("finish: %v", err)
	}
	if err := r.Delete(ctx, key(1), nil, nil); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := r.Get(ctx, key(1)); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("get after delete = %v, want ErrNotFound", err)
	}
	if err := r.Delete(ctx, key(1), nil, nil); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("second delete = %v, want ErrNotFound", err)
	}
	assertCounts(t, r, ports.Counts{Pending: 1})
	// A deleted id is free again, and a deleted pending task is never claimed.
	if err := r.Delete(ctx, key(2), nil, nil); err != nil {
		t.Fatalf("delete pending: %v", err)
	}
	if _, err := r.ClaimNext(ctx, ref, nil, at(6), claim("box-1", at(6)), nil); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("claim after deleting the only pending task = %v, want ErrNotFound", err)
	}
	mustPost(t, r, 1, 7, `{"again":true}`)
	assertCounts(t, r, ports.Counts{Pending: 1})
}

func testCopies(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	posted, _ := domain.Post(ID(1), Host, Queue, json.RawMessage(`{}`), "alice", at(0))
	if err := r.Create(ctx, posted, nil); err != nil {
		t.Fatalf("create: %v", err)
	}
	*posted.PostedBy = "mallory" // the caller's record is not the store's

	claimed := mustClaim(t, r, nil, "box-1", at(1))
	want := mustGet(t, r, key(1))
	scribble := func(t *domain.Task) {
		*t.PostedBy = "mallory"
		t.Lease.Worker = "mallory"
		t.Lease.Until = 0
		t.Attempts = 99
	}
	scribble(&claimed)
	got := mustGet(t, r, key(1))
	scribble(&got)
	updated, err := r.Update(ctx, key(1), func(t *domain.Task) error { return nil }, nil)
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	scribble(&updated)
	if err := r.Each(ctx, ref, domain.StageProcessing, func(t domain.Task) bool { scribble(&t); return true }); err != nil {
		t.Fatalf("each: %v", err)
	}
	if diff := cmp.Diff(want, mustGet(t, r, key(1))); diff != "" {
		t.Errorf("store changed through a returned record (-want +got):\n%s", diff)
	}
	if *want.PostedBy != "alice" {
		t.Errorf("postedBy = %q, want alice", *want.PostedBy)
	}
}

func testDeleteCheck(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	mustPost(t, r, 1, 0, `{}`)
	refused := errors.New("not yet")
	var saw domain.Task
	err := r.Delete(ctx, key(1), func(t domain.Task) error {
		saw = t
		return refused
	}, func(domain.Task) error {
		t.Error("Then called for a refused delete")
		return nil
	})
	if !errors.Is(err, refused) {
		t.Fatalf("refused delete = %v, want the check's error", err)
	}
	if saw.ID != ID(1) || saw.Status != domain.Pending {
		t.Errorf("check saw %s %s, want %s pending", saw.ID, saw.Status, ID(1))
	}
	if got := mustGet(t, r, key(1)); got.Status != domain.Pending {
		t.Errorf("after a refused delete the task is %s", got.Status)
	}
	// Still claimable: a refused delete leaves the task where it was.
	mustClaim(t, r, nil, "box-1", at(1))
}

// Then hears of every stored change once, with the record stored, and of
// no refused one.
func testThenOnce(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	var heard []string
	then := func(t domain.Task) error {
		heard = append(heard, fmt.Sprintf("%s %s %d", t.ID, t.Status, t.Attempts))
		return nil
	}
	posted, _ := domain.Post(ID(1), Host, Queue, json.RawMessage(`{}`), "alice", at(0))
	if err := r.Create(ctx, posted, then); err != nil {
		t.Fatal(err)
	}
	if err := r.Create(ctx, posted, then); !errors.Is(err, domain.ErrExists) {
		t.Fatalf("duplicate create = %v", err)
	}
	if _, err := r.ClaimNext(ctx, ref, nil, at(1), claim("box-1", at(1)), then); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Update(ctx, key(1), finish("box-1", `{}`, at(2)), then); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Update(ctx, key(1), finish("box-2", `{}`, at(3)), then); !errors.Is(err, domain.ErrTerminal) {
		t.Fatalf("second result = %v, want ErrTerminal", err)
	}
	if err := r.Delete(ctx, key(1), nil, then); err != nil {
		t.Fatal(err)
	}
	want := []string{ID(1) + " pending 0", ID(1) + " processing 1", ID(1) + " finished 1", ID(1) + " finished 1"}
	if diff := cmp.Diff(want, heard); diff != "" {
		t.Errorf("Then calls (-want +got):\n%s", diff)
	}
	// A failing Then leaves the change stored and returns its error.
	mustPost(t, r, 2, 4, `{}`)
	failed := errors.New("log unavailable")
	if _, err := r.ClaimNext(ctx, ref, nil, at(5), claim("box-1", at(5)), func(domain.Task) error { return failed }); !errors.Is(err, failed) {
		t.Fatalf("claim with a failing Then = %v", err)
	}
	if got := mustGet(t, r, key(2)); got.Status != domain.Processing {
		t.Errorf("after a failing Then the task is %s, want processing", got.Status)
	}
}

// Changes of one task race from many goroutines; each is a requeue or a
// claim, so the attempts count grows by one with every claim stored. The
// Then calls must see the records in the order they were stored: the
// attempts never go down, and never skip a claim.
func testThenOrder(t *testing.T, r ports.TaskRepository) {
	const goroutines, rounds = 8, 25
	mustPost(t, r, 1, 0, `{}`)
	var (
		mu    sync.Mutex
		heard []domain.Task
		wg    sync.WaitGroup
	)
	then := func(t domain.Task) error {
		// Yield first, widening the window in which a Then running out of
		// turn would let the task's next change be heard before this one.
		for range 10 {
			runtime.Gosched()
		}
		mu.Lock()
		heard = append(heard, t)
		mu.Unlock()
		return nil
	}
	for g := range goroutines {
		wg.Go(func() {
			for i := range rounds {
				_, _ = r.Update(context.Background(), key(1), func(t *domain.Task) error {
					if t.Status == domain.Pending {
						return claim(fmt.Sprintf("box-%d", g), at(i))(t)
					}
					return requeue(at(i))(t)
				}, then)
			}
		})
	}
	wg.Wait()
	if len(heard) != goroutines*rounds {
		t.Fatalf("Then called %d times for %d stored changes", len(heard), goroutines*rounds)
	}
	for i, h := range heard {
		wantStatus, wantAttempts := domain.Processing, i/2+1
		if i%2 == 1 {
			wantStatus = domain.Pending
		}
		if h.Status != wantStatus || h.Attempts != wantAttempts {
			t.Fatalf("Then call %d heard %s with %d attempts, want %s with %d: out of store order", i, h.Status, h.Attempts, wantStatus, wantAttempts)
		}
	}
	got := mustGet(t, r, key(1))
	if got.Attempts != goroutines*rounds/2 {
		t.Errorf("task has %d attempts, want %d", got.Attempts, goroutines*rounds/2)
	}
}
