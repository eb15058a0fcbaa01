package contract

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// The cases below are SPEC §11's orderings and eligibility: claims take the
// highest priority first, then the earliest EligibleAt (notBefore when set,
// else postedAt), then the id, and never a task whose notBefore is after the
// claim's now; Due and Counts.Delayed say what waits.

// postWith creates task n posted sec seconds after the epoch with item,
// priority prio and, when notBefore >= 0, not claimable before notBefore
// seconds after the epoch.
func postWith(tb testing.TB, r ports.TaskRepository, n, sec int, item string, prio, notBefore int) domain.Task {
	tb.Helper()
	opts := domain.PostOptions{Priority: prio}
	if notBefore >= 0 {
		opts.NotBefore = ptr(domain.Millis(at(notBefore)))
	}
	t, _ := domain.Post(ID(n), Host, Queue, json.RawMessage(item), "alice", at(sec), opts)
	if err := r.Create(context.Background(), t, nil); err != nil {
		tb.Fatalf("create task %d: %v", n, err)
	}
	return t
}

func ptr[T any](v T) *T { return &v }

// claimAt is claimID at a time in milliseconds after the epoch.
func claimAt(tb testing.TB, r ports.TaskRepository, m ports.Matcher, now time.Time) string {
	tb.Helper()
	got, err := r.ClaimNext(context.Background(), ref, m, now, claim("box-1", now), nil)
	if errors.Is(err, domain.ErrNotFound) {
		return ""
	}
	if err != nil {
		tb.Fatalf("claim: %v", err)
	}
	return got.ID
}

func pendingIDs(tb testing.TB, r ports.TaskRepository) []string {
	tb.Helper()
	var got []string
	if err := r.Each(context.Background(), ref, domain.StagePending, func(t domain.Task) bool {
		got = append(got, t.ID)
		return true
	}); err != nil {
		tb.Fatalf("each: %v", err)
	}
	return got
}

// The new fields go in and come out exactly, also after moves.
func testNewFieldsRoundTrip(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	want := postWith(t, r, 1, 0, `{"n":1}`, -7, 50)
	if diff := cmp.Diff(want, mustGet(t, r, key(1))); diff != "" {
		t.Errorf("get after create (-want +got):\n%s", diff)
	}
	if want.NotBefore == nil || want.Priority != -7 {
		t.Fatalf("post made %+v", want)
	}
	for _, prio := range []int{domain.MaxPriority, -domain.MaxPriority, 1 << 40, -(1 << 40)} {
		n := 10 + len(pendingIDs(t, r))
		w := postWith(t, r, n, 1, `{}`, prio, -1)
		if diff := cmp.Diff(w, mustGet(t, r, key(n))); diff != "" {
			t.Errorf("priority %d after create (-want +got):\n%s", prio, diff)
		}
	}
	claimed, err := r.Update(ctx, key(1), claim("box-1", at(60)), nil)
	if err != nil {
		t.Fatal(err)
	}
	released, err := r.Update(ctx, key(1), func(t *domain.Task) error {
		next, _, err := t.Release("box-1", 30*time.Second, json.RawMessage(`{"why":"busy","code":3}`), domain.Retry{}, at(61))
		*t = next
		return err
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if released.NotBefore == nil || *released.NotBefore != domain.Millis(at(91)) || string(released.Failure) != `{"why":"busy","code":3}` {
		t.Errorf("released = %+v (claimed %+v)", released, claimed)
	}
	if diff := cmp.Diff(released, mustGet(t, r, key(1))); diff != "" {
		t.Errorf("get after release (-want +got):\n%s", diff)
	}
	failed, err := r.Update(ctx, key(1), func(t *domain.Task) error {
		next, _, err := t.Fail("box-1", json.RawMessage(`"gave up"`), at(62))
		*t = next
		return err
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(failed, mustGet(t, r, key(1))); diff != "" {
		t.Errorf("get after fail (-want +got):\n%s", diff)
	}
}

// Highest priority first, then the earliest EligibleAt, then the id; with a
// query too.
func testClaimPriorityOrder(t *testing.T, r ports.TaskRepository) {
	postWith(t, r, 1, 10, kindItem("image"), 0, -1)
	postWith(t, r, 2, 20, kindItem("image"), 5, -1)
	postWith(t, r, 3, 30, kindItem("video"), 5, -1)
	postWith(t, r, 4, 5, kindItem("image"), -1, -1)
	postWith(t, r, 5, 20, kindItem("image"), 5, -1)
	postWith(t, r, 6, 1, kindItem("video"), 0, -1)
	postWith(t, r, 7, 40, kindItem("image"), 9, -1)
	// An image query first, so that a view of it is made and then meets
	// tasks entering at every priority.
	images := &kindMatcher{kind: "image"}
	if got := claimAt(t, r, images, at(100)); got != ID(7) {
		t.Fatalf("first image claim took %q, want %s", got, ID(7))
	}
	postWith(t, r, 8, 50, kindItem("image"), 6, -1)
	postWith(t, r, 9, 0, kindItem("image"), -1, -1)
	var got []string
	for range 6 {
		got = append(got, claimAt(t, r, images, at(100)))
	}
	want := []string{ID(8), ID(2), ID(5), ID(1), ID(9), ID(4)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("image claims (-want +got):\n%s", diff)
	}
	if got := claimAt(t, r, nil, at(100)); got != ID(3) {
		t.Errorf("claim without a query took %q, want %s (priority 5 before 0)", got, ID(3))
	}
	if got := claimAt(t, r, nil, at(100)); got != ID(6) {
		t.Errorf("claim without a query took %q, want %s", got, ID(6))
	}
	// Without priorities, the order is §3's: Each gives pending by
	// EligibleAt whatever the priority.
	postWith(t, r, 10, 3, `{}`, 0, -1)
	postWith(t, r, 11, 2, `{}`, 3, -1)
	if diff := cmp.Diff([]string{ID(11), ID(10)}, pendingIDs(t, r)); diff != "" {
		t.Errorf("pending by EligibleAt (-want +got):\n%s", diff)
	}
}

// A pending task whose notBefore is after now is never handed out, and is
// at the exact millisecond it comes due, in its EligibleAt's place.
func testClaimNotBefore(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	postWith(t, r, 1, 0, kindItem("image"), 0, 100)
	if got := claimAt(t, r, nil, at(99)); got != "" {
		t.Fatalf("claim before notBefore took %s", got)
	}
	images := &kindMatcher{kind: "image"}
	if got := claimAt(t, r, images, at(99)); got != "" {
		t.Fatalf("image claim before notBefore took %s", got)
	}
	justBefore := at(100).Add(-time.Millisecond)
	if got := claimAt(t, r, images, justBefore); got != "" {
		t.Fatalf("image claim a millisecond before notBefore took %s", got)
	}
	assertCounts(t, r, ports.Counts{Pending: 1, Delayed: 1})
	// Posted later, but eligible earlier: it goes first; and so does the
	// delayed task against one posted after its notBefore.
	postWith(t, r, 2, 50, kindItem("image"), 0, -1)
	postWith(t, r, 3, 101, kindItem("image"), 0, -1)
	postWith(t, r, 4, 60, kindItem("image"), 0, 150)
	if diff := cmp.Diff([]string{ID(2), ID(1), ID(3), ID(4)}, pendingIDs(t, r)); diff != "" {
		t.Errorf("pending by EligibleAt (-want +got):\n%s", diff)
	}
	if got := claimAt(t, r, images, at(99)); got != ID(2) {
		t.Fatalf("claim took %q, want %s", got, ID(2))
	}
	if got := claimAt(t, r, images, at(100)); got != ID(1) {
		t.Fatalf("claim at notBefore took %q, want %s", got, ID(1))
	}
	if got := claimAt(t, r, nil, at(149)); got != ID(3) {
		t.Fatalf("claim took %q, want %s", got, ID(3))
	}
	if got := claimAt(t, r, nil, at(149)); got != "" {
		t.Fatalf("claim before task 4's notBefore took %s", got)
	}
	assertCounts(t, r, ports.Counts{Pending: 1, Processing: 3, Delayed: 1})
	// A claim by id is refused by the domain, and the task stays delayed.
	if _, err := r.Update(ctx, key(4), claim("box-1", at(149)), nil); !errors.Is(err, domain.ErrNotYet) {
		t.Errorf("claim by id before notBefore = %v, want ErrNotYet", err)
	}
	// A priority does not jump the delay.
	postWith(t, r, 5, 140, kindItem("image"), 9, 200)
	if got := claimAt(t, r, images, at(150)); got != ID(4) {
		t.Fatalf("claim took %q, want %s", got, ID(4))
	}
	if got := claimAt(t, r, images, at(199)); got != "" {
		t.Fatalf("claim before notBefore took %s", got)
	}
	if got := claimAt(t, r, images, at(200)); got != ID(5) {
		t.Fatalf("claim took %q, want %s", got, ID(5))
	}
	assertCounts(t, r, ports.Counts{Processing: 5})
}

// Due makes due tasks claimable, reports how many became so since the last
// call (by Due or ClaimNext) and when the next will; a second call at the
// same now reports none.
func testDue(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	expect := expectDue(t, r)
	if n, next, err := r.Due(ctx, domain.QueueRef{Host: Host, Queue: "other"}, at(0)); err != nil || n != 0 || !next.IsZero() {
		t.Errorf("due of an unknown queue = %d, %v, %v", n, next, err)
	}
	mustPost(t, r, 0, 0, `{}`)
	expect(0, 0, time.Time{})
	postWith(t, r, 1, 0, kindItem("image"), 0, 10)
	postWith(t, r, 2, 0, kindItem("image"), 0, 20)
	postWith(t, r, 3, 0, kindItem("image"), 0, 20)
	postWith(t, r, 4, 0, kindItem("image"), 0, 30)
	expect(5, 0, at(10))
	expect(5, 0, at(10))
	assertCounts(t, r, ports.Counts{Pending: 5, Delayed: 4})
	expect(20, 3, at(30))
	expect(20, 0, at(30))
	assertCounts(t, r, ports.Counts{Pending: 5, Delayed: 1})
	// A claim that finds task 4 due counts it for Due, even though it
	// claims none (another query), so a waiting claim that wants it wakes.
	if got := claimAt(t, r, &kindMatcher{kind: "video"}, at(30)); got != "" {
		t.Fatalf("video claim took %s", got)
	}
	assertCounts(t, r, ports.Counts{Pending: 5})
	expect(30, 1, time.Time{})
	expect(30, 0, time.Time{})
	// A re-queue with a backoff delays the task again.
	if got := claimAt(t, r, nil, at(31)); got != ID(0) {
		t.Fatalf("claim took %q, want %s", got, ID(0))
	}
	backoff := domain.Retry{Settings: domain.Settings{RetryBaseSeconds: 40, RetryMaxSeconds: 40}, Jitter: 1}
	requeued, err := r.Update(ctx, key(0), func(t *domain.Task) error {
		next, _, err := t.Requeue(domain.CauseLease, backoff, at(32))
		*t = next
		return err
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if requeued.NotBefore == nil {
		t.Fatalf("requeue with a backoff left no notBefore: %+v", requeued)
	}
	nb := time.UnixMilli(*requeued.NotBefore).UTC()
	assertCounts(t, r, ports.Counts{Pending: 5, Delayed: 1})
	expect(33, 0, nb)
}

// Each gives pending tasks by (EligibleAt, id), delayed ones included, so
// that the sweep's timeout pass may stop at the first one too young; and a
// task re-queued with a backoff moves to its new place, in Each and in
// claims.
func testEachByEligibleAt(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	postWith(t, r, 1, 10, `{}`, 0, -1)
	postWith(t, r, 2, 0, `{}`, 0, 40) // eligible at 40
	postWith(t, r, 3, 20, `{}`, 3, -1)
	postWith(t, r, 4, 30, `{}`, -3, 35)
	postWith(t, r, 5, 40, `{}`, 0, -1) // ties with 2 on EligibleAt: by id
	if diff := cmp.Diff([]string{ID(1), ID(3), ID(4), ID(2), ID(5)}, pendingIDs(t, r)); diff != "" {
		t.Errorf("pending by EligibleAt (-want +got):\n%s", diff)
	}
	// Claim order at 50: priority 3, then 0 by EligibleAt, then -3.
	if got := claimAt(t, r, nil, at(50)); got != ID(3) {
		t.Fatalf("claim took %q, want %s", got, ID(3))
	}
	backoff := domain.Retry{Settings: domain.Settings{RetryBaseSeconds: 100, RetryMaxSeconds: 100}, Jitter: 1}
	requeued, err := r.Update(ctx, key(3), func(t *domain.Task) error {
		next, _, err := t.Requeue(domain.CauseLease, backoff, at(51))
		*t = next
		return err
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if requeued.EligibleAt() <= domain.Millis(at(51)) {
		t.Fatalf("requeued with a backoff is eligible at %d", requeued.EligibleAt())
	}
	if diff := cmp.Diff([]string{ID(1), ID(4), ID(2), ID(5), ID(3)}, pendingIDs(t, r)); diff != "" {
		t.Errorf("pending after a backoff (-want +got):\n%s", diff)
	}
	var got []string
	for range 5 {
		got = append(got, claimAt(t, r, nil, at(52)))
	}
	if diff := cmp.Diff([]string{ID(1), ID(2), ID(5), ID(4), ""}, got); diff != "" {
		t.Errorf("claims during the backoff (-want +got):\n%s", diff)
	}
	eligible := time.UnixMilli(requeued.EligibleAt())
	if got := claimAt(t, r, nil, eligible.Add(-time.Millisecond)); got != "" {
		t.Errorf("claim a millisecond before the backoff's end took %s", got)
	}
	if got := claimAt(t, r, nil, eligible); got != ID(3) {
		t.Errorf("claim at the backoff's end took %q, want %s", got, ID(3))
	}
}

// Random posts with priorities and delays, claims under a few queries at a
// clock that mostly moves on, re-queues with and without a backoff, deletes
// and timeouts: each claim is checked against a model computed from Each,
// and Each, Counts and Due against the model's own bookkeeping.
func testDelaysAgainstModel(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(12, 12))
	const kinds = 3
	var matchers []ports.Matcher
	for k := range kinds {
		matchers = append(matchers, &kindMatcher{fmt.Sprint(k)}, &aliasMatcher{kindMatcher{fmt.Sprint(k)}, 1}, &keyless{kindMatcher{fmt.Sprint(k)}})
	}
	matchers = append(matchers, nil)
	pending := func() []domain.Task {
		var got []domain.Task
		if err := r.Each(ctx, ref, domain.StagePending, func(t domain.Task) bool { got = append(got, t); return true }); err != nil {
			t.Fatalf("each: %v", err)
		}
		return got
	}
	ids := func(st domain.Stage) []string {
		var got []string
		if err := r.Each(ctx, ref, st, func(t domain.Task) bool { got = append(got, t.ID); return true }); err != nil {
			t.Fatalf("each: %v", err)
		}
		return got
	}
	var looked int64 // the latest now given to ClaimNext or Due
	posted := 0
	nowMs := domain.Millis(at(1000))
	for step := range 1500 {
		switch rng.IntN(4) {
		case 0:
			nowMs += int64(rng.IntN(3000))
		case 1:
			nowMs -= int64(rng.IntN(20)) // racing claims' clocks differ a little
		}
		now := time.UnixMilli(nowMs)
		list := pending()
		// Each is by (EligibleAt, id).
		if !slices.IsSortedFunc(list, func(a, b domain.Task) int {
			return cmpKeys(a.EligibleAt(), b.EligibleAt(), a.ID, b.ID)
		}) {
			t.Fatalf("step %d: Each(pending) is not by (EligibleAt, id)", step)
		}
		delayed := 0
		for _, p := range list {
			if p.NotBefore != nil && *p.NotBefore > looked {
				delayed++
			}
		}
		if c := r.Counts(ref); c.Pending != len(list) || c.Delayed != delayed {
			t.Fatalf("step %d: counts %+v, want %d pending, %d delayed", step, c, len(list), delayed)
		}
		switch op := rng.IntN(12); {
		case op < 4:
			sec := int(time.UnixMilli(nowMs).Sub(epoch)/time.Second) - rng.IntN(100)
			nb := -1
			if rng.IntN(2) == 0 {
				nb = sec + rng.IntN(30)
			}
			prio := []int{0, 0, 0, 1, -1, 7}[rng.IntN(6)]
			postWith(t, r, posted, sec, kindItem(fmt.Sprint(rng.IntN(kinds))), prio, nb)
			posted++
		case op < 8:
			m := matchers[rng.IntN(len(matchers))]
			claimable := slices.DeleteFunc(list, func(p domain.Task) bool {
				return !p.Claimable(now) || (m != nil && !m.Match(p.Item))
			})
			slices.SortFunc(claimable, func(a, b domain.Task) int {
				if a.Priority != b.Priority {
					return b.Priority - a.Priority
				}
				return cmpKeys(a.EligibleAt(), b.EligibleAt(), a.ID, b.ID)
			})
			want := ""
			if len(claimable) > 0 {
				want = claimable[0].ID
			}
			if got := claimAt(t, r, m, now); got != want {
				var k string
				if m != nil {
					k = m.Key()
				}
				t.Fatalf("step %d: claim by %q at %d took %q, want %q", step, k, nowMs, got, want)
			}
			looked = max(looked, nowMs)
		case op < 9:
			n, next, err := r.Due(ctx, ref, now)
			if err != nil {
				t.Fatal(err)
			}
			looked = max(looked, nowMs)
			var wantNext time.Time
			for _, p := range list {
				if p.NotBefore != nil && *p.NotBefore > looked && (wantNext.IsZero() || *p.NotBefore < domain.Millis(wantNext)) {
					wantNext = time.UnixMilli(*p.NotBefore)
				}
			}
			if !next.Equal(wantNext) || n < 0 {
				t.Fatalf("step %d: due = %d, %v; want next %v", step, n, next, wantNext)
			}
			if n, _, _ := r.Due(ctx, ref, now); n != 0 {
				t.Fatalf("step %d: a second due at the same now reported %d", step, n)
			}
		case op < 10:
			procs := ids(domain.StageProcessing)
			if len(procs) == 0 {
				continue
			}
			k := domain.Key{Host: Host, Queue: Queue, ID: procs[rng.IntN(len(procs))]}
			retry := domain.Retry{}
			if rng.IntN(2) == 0 {
				retry = domain.Retry{Settings: domain.Settings{RetryBaseSeconds: 20, RetryMaxSeconds: 60}, Jitter: rng.Float64()}
			}
			if _, err := r.Update(ctx, k, func(t *domain.Task) error {
				next, _, err := t.Requeue(domain.CauseLease, retry, now)
				*t = next
				return err
			}, nil); err != nil {
				t.Fatalf("requeue: %v", err)
			}
		default:
			if len(list) == 0 {
				continue
			}
			k := domain.KeyOf(list[rng.IntN(len(list))])
			if rng.IntN(2) == 0 {
				if err := r.Delete(ctx, k, nil, nil); err != nil {
					t.Fatalf("delete: %v", err)
				}
			} else if _, err := r.Update(ctx, k, func(t *domain.Task) error {
				next, _, err := t.Timeout(now)
				*t = next
				return err
			}, nil); err != nil {
				t.Fatalf("timeout: %v", err)
			}
		}
	}
}

func cmpKeys(at1, at2 int64, id1, id2 string) int {
	switch {
	case at1 < at2:
		return -1
	case at1 > at2:
		return 1
	case id1 < id2:
		return -1
	case id1 > id2:
		return 1
	}
	return 0
}

// expectDue returns a check that Due at sec seconds after the epoch
// reports wantN tasks come due (any number when wantN is -1) and wantNext
// as the next.
func expectDue(t *testing.T, r ports.TaskRepository) func(sec, wantN int, wantNext time.Time) {
	return func(sec, wantN int, wantNext time.Time) {
		t.Helper()
		n, next, err := r.Due(context.Background(), ref, at(sec))
		if err != nil {
			t.Fatalf("due: %v", err)
		}
		if n != wantN && wantN != -1 || !next.Equal(wantNext) {
			t.Errorf("due at %d = %d, %v; want %d, %v", sec, n, next, wantN, wantNext)
		}
	}
}

// A clock set back (ports.ClockStepBack): the tasks whose notBefore is
// still to come at the new now wait for it again, so that Due names their
// time and counts them when it comes, and the claims waiting for them wake
// then. Before, a task delayed to a time the store had looked past went
// straight to the claimable tasks, where claims passed it by until its
// time, and no Due ever named or counted it: a waiting claim slept on.
func testDueAfterTheClockStepsBack(t *testing.T, r ports.TaskRepository) {
	expect := expectDue(t, r)
	postWith(t, r, 1, 0, kindItem("image"), 0, 500)
	expect(1000, 1, time.Time{}) // the clock ran ahead to 1 000 s
	postWith(t, r, 2, 0, kindItem("image"), 0, 700)
	postWith(t, r, 3, 0, kindItem("image"), 0, 1500)
	// The clock is set back to 100 s. Task 2, made claimable by the look
	// at 1 000 s, may still be counted: a claim woken for nothing looks
	// and waits again, where one too few would leave a claim asleep.
	expect(100, -1, at(500))
	assertCounts(t, r, ports.Counts{Pending: 3, Delayed: 3})
	if got := claimAt(t, r, nil, at(100)); got != "" {
		t.Fatalf("claim at 100 s took %s, delayed to 500 s", got)
	}
	expect(500, 1, at(700))
	if got := claimAt(t, r, nil, at(500)); got != ID(1) {
		t.Fatalf("claim at 500 s took %q, want %s", got, ID(1))
	}
	expect(700, 1, at(1500))
	assertCounts(t, r, ports.Counts{Pending: 2, Processing: 1, Delayed: 1})
	// A look a moment behind the latest (two claims that read the clock
	// in one order and reach the store in the other) is no step back.
	postWith(t, r, 4, 0, kindItem("image"), 0, 701)
	expect(701, 1, at(1500))
	expect(700, 0, at(1500))
	assertCounts(t, r, ports.Counts{Pending: 3, Processing: 1, Delayed: 1})
}

// testCountsFailedAndOldest: Counts tells failed from finished, and Oldest
// is the EligibleAt of the claimable task that has waited longest, over
// every priority, leaving out delayed and claimed tasks.
func testCountsFailedAndOldest(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	if got := r.Counts(ref); !got.Oldest.IsZero() {
		t.Errorf("oldest of an empty queue = %v, want zero", got.Oldest)
	}
	postWith(t, r, 1, 10, kindItem("image"), 0, -1)
	postWith(t, r, 2, 20, kindItem("image"), 5, -1)
	postWith(t, r, 3, 5, kindItem("image"), -1, 500) // delayed until 500 s
	postWith(t, r, 4, 30, kindItem("image"), 0, -1)
	postWith(t, r, 5, 40, kindItem("image"), 0, -1)
	if _, _, err := r.Due(ctx, ref, at(100)); err != nil {
		t.Fatal(err)
	}
	check := func(when string, want time.Time) {
		t.Helper()
		if got := r.Counts(ref).Oldest; !got.Equal(want) {
			t.Errorf("%s: oldest = %v, want %v", when, got, want)
		}
	}
	check("five posted", at(10))
	if got := claimAt(t, r, nil, at(100)); got != ID(2) {
		t.Fatalf("claim took %s, want %s", got, ID(2))
	}
	check("priority 5 claimed", at(10))
	if got := claimAt(t, r, nil, at(100)); got != ID(1) {
		t.Fatalf("claim took %s, want %s", got, ID(1))
	}
	check("oldest claimed", at(30))
	// Task 2 finishes, task 1 fails: done counts both, Failed one.
	if _, err := r.Update(ctx, key(2), finish("w", `{}`, at(110)), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Update(ctx, key(1), func(t *domain.Task) error {
		next, _, err := t.Timeout(at(120))
		*t = next
		return err
	}, nil); err != nil {
		t.Fatal(err)
	}
	assertCounts(t, r, ports.Counts{Pending: 3, Done: 2, Failed: 1, Delayed: 1})
	for range 2 {
		claimAt(t, r, nil, at(130))
	}
	check("only the delayed one left", time.Time{})
	if _, _, err := r.Due(ctx, ref, at(600)); err != nil {
		t.Fatal(err)
	}
	check("delay over", at(500))
	if err := r.Delete(ctx, key(1), nil, nil); err != nil {
		t.Fatal(err)
	}
	assertCounts(t, r, ports.Counts{Pending: 1, Processing: 2, Done: 1})
}
