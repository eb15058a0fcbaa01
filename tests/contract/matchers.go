package contract

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// The cases below are about claim queries that a repository may remember:
// items never change, so it may keep, per matcher key, what a query said
// about the pending tasks. Whatever it keeps, a claim must take exactly the
// oldest pending task the query accepts, as if the query were run over the
// whole pending list every time.

// keyless is a kindMatcher that gives no key: nothing it says may be kept.
type keyless struct{ kindMatcher }

func (*keyless) Key() string { return "" }

// aliasMatcher accepts what kindMatcher{kind} accepts under another key, so
// a test can have many distinct keys over a few kinds.
type aliasMatcher struct {
	kindMatcher
	alias int
}

func (m *aliasMatcher) Key() string { return fmt.Sprintf("kind=%s#%d", m.kind, m.alias) }

func kindItem(kind string) string { return fmt.Sprintf(`{"kind":%q}`, kind) }

func claimID(tb testing.TB, r ports.TaskRepository, m ports.Matcher, now int) string {
	tb.Helper()
	got, err := r.ClaimNext(context.Background(), ref, m, at(now), claim("box-1", at(now)), nil)
	if errors.Is(err, domain.ErrNotFound) {
		return ""
	}
	if err != nil {
		tb.Fatalf("claim: %v", err)
	}
	return got.ID
}

// A task that comes back to pending is back in its query's answers, in its
// old place (by postedAt), ahead of tasks posted after it.
func testClaimMatcherRequeued(t *testing.T, r ports.TaskRepository) {
	images := &kindMatcher{kind: "image"}
	mustPost(t, r, 1, 1, kindItem("video"))
	mustPost(t, r, 2, 2, kindItem("image"))
	mustPost(t, r, 3, 3, kindItem("video"))
	mustPost(t, r, 4, 4, kindItem("image"))
	if got := claimID(t, r, images, 10); got != ID(2) {
		t.Fatalf("first image claim took %q, want %s", got, ID(2))
	}
	if _, err := r.Update(context.Background(), key(2), requeue(at(11)), nil); err != nil {
		t.Fatalf("requeue: %v", err)
	}
	mustPost(t, r, 5, 5, kindItem("image"))
	var got []string
	for range 4 {
		got = append(got, claimID(t, r, images, 12))
	}
	if diff := cmp.Diff([]string{ID(2), ID(4), ID(5), ""}, got); diff != "" {
		t.Errorf("image claims after a re-queue (-want +got):\n%s", diff)
	}
	// A task posted with an older postedAt than any the query has looked
	// at (a clock set back) is found too.
	mustPost(t, r, 6, 0, kindItem("image"))
	if got := claimID(t, r, images, 13); got != ID(6) {
		t.Errorf("claim after a post dated earlier took %q, want %s", got, ID(6))
	}
	if got := claimID(t, r, nil, 14); got != ID(1) {
		t.Errorf("claim without a query took %q, want %s", got, ID(1))
	}
}

// A task that leaves pending other than by a claim (deleted, timed out,
// claimed by another query or by id) is no longer an answer.
func testClaimMatcherLeftPending(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	images := &kindMatcher{kind: "image"}
	mustPost(t, r, 0, 0, kindItem("video"))
	if got := claimID(t, r, images, 0); got != "" {
		t.Fatalf("claim with no image pending took %s", got)
	}
	mustPost(t, r, 1, 1, kindItem("image"))
	mustPost(t, r, 2, 2, kindItem("image"))
	mustPost(t, r, 3, 3, kindItem("image"))
	mustPost(t, r, 4, 4, kindItem("image"))
	mustPost(t, r, 5, 5, kindItem("image"))
	if err := r.Delete(ctx, key(1), nil, nil); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := r.Update(ctx, key(2), func(t *domain.Task) error {
		next, _, err := t.Timeout(at(6))
		*t = next
		return err
	}, nil); err != nil {
		t.Fatalf("timeout: %v", err)
	}
	if _, err := r.Update(ctx, key(3), claim("box-2", at(6)), nil); err != nil {
		t.Fatalf("claim by id: %v", err)
	}
	if got := claimID(t, r, &aliasMatcher{kindMatcher{"image"}, 1}, 7); got != ID(4) {
		t.Fatalf("claim under another key took %q, want %s", got, ID(4))
	}
	if got := claimID(t, r, images, 8); got != ID(5) {
		t.Errorf("image claim took %q, want %s: the others left pending", got, ID(5))
	}
	if got := claimID(t, r, images, 9); got != "" {
		t.Errorf("image claim with nothing pending took %s", got)
	}
	assertCounts(t, r, ports.Counts{Pending: 1, Processing: 3, Done: 1, Failed: 1})
}

// More distinct queries than a repository may keep, interleaved, each
// coming back after many others: every claim still takes the right task.
func testClaimManyQueries(t *testing.T, r ports.TaskRepository) {
	const kinds, aliases = 5, 20 // 100 keys
	n := 0
	for round := range 3 {
		for k := range kinds {
			for range aliases {
				mustPost(t, r, n, n, kindItem(fmt.Sprint(k)))
				n++
			}
		}
		// Each alias of each kind claims one task of that kind: the
		// oldest left, whichever alias took the ones before it.
		for a := range aliases {
			for k := range kinds {
				want := ID(round*kinds*aliases + k*aliases + a)
				m := &aliasMatcher{kindMatcher{fmt.Sprint(k)}, a}
				if got := claimID(t, r, m, 1000); got != want {
					t.Fatalf("round %d: claim by %s took %q, want %s", round, m.Key(), got, want)
				}
			}
		}
		for k := range kinds {
			if got := claimID(t, r, &aliasMatcher{kindMatcher{fmt.Sprint(k)}, 0}, 1000); got != "" {
				t.Fatalf("round %d: kind %d has nothing left, but a claim took %s", round, k, got)
			}
		}
	}
}

// A query that stops claiming while many tasks pass through pending behind
// what it has looked at (re-queued tasks and their claims by others), so
// that a repository may drop what it knew rather than keep testing them,
// answers right when it comes back.
func testClaimQueryIdle(t *testing.T, r ports.TaskRepository) {
	videos := &kindMatcher{kind: "video"}
	const passes = 1500
	mustPost(t, r, passes, 2*passes, kindItem("image"))
	if got := claimID(t, r, videos, 2*passes); got != "" {
		t.Fatalf("claim with no video pending took %s", got)
	}
	// Each dated before the task the query has seen, as a re-queued task
	// is, and claimed by a worker without a query.
	for n := range passes {
		mustPost(t, r, n, n, kindItem("image"))
		if got := claimID(t, r, nil, 2*passes); got != ID(n) {
			t.Fatalf("claim without a query took %q, want %s", got, ID(n))
		}
	}
	mustPost(t, r, passes+1, passes, kindItem("video"))
	if got := claimID(t, r, videos, 2*passes); got != ID(passes+1) {
		t.Errorf("video claim took %q, want %s", got, ID(passes+1))
	}
	if got := claimID(t, r, videos, 2*passes); got != "" {
		t.Errorf("second video claim took %s", got)
	}
}

// Random posts, claims under many queries (with a key, without one, none),
// re-queues, deletes and timeouts, each claim checked against the oldest
// matching task of the pending list as Each gives it.
func testClaimMatchersAgainstModel(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(6, 6))
	const kinds = 4
	var matchers []ports.Matcher
	for k := range kinds {
		kind := fmt.Sprint(k)
		matchers = append(matchers, &kindMatcher{kind}, &keyless{kindMatcher{kind}})
		for a := range 20 {
			matchers = append(matchers, &aliasMatcher{kindMatcher{kind}, a})
		}
	}
	matchers = append(matchers, nil)

	ids := func(st domain.Stage) []string {
		var got []string
		if err := r.Each(ctx, ref, st, func(t domain.Task) bool { got = append(got, t.ID); return true }); err != nil {
			t.Fatalf("each: %v", err)
		}
		return got
	}
	oldest := func(m ports.Matcher) string {
		var found string
		if err := r.Each(ctx, ref, domain.StagePending, func(t domain.Task) bool {
			if m == nil || m.Match(t.Item) {
				found = t.ID
				return false
			}
			return true
		}); err != nil {
			t.Fatalf("each: %v", err)
		}
		return found
	}
	pick := func(st domain.Stage) (domain.Key, bool) {
		list := ids(st)
		if len(list) == 0 {
			return domain.Key{}, false
		}
		return domain.Key{Host: Host, Queue: Queue, ID: list[rng.IntN(len(list))]}, true
	}
	posted := 0
	for step := range 600 {
		now := 1000 + step
		switch op := rng.IntN(10); {
		case op < 4:
			// Dated anywhere from well before to just after the others.
			mustPost(t, r, posted, rng.IntN(now+1), kindItem(fmt.Sprint(rng.IntN(kinds))))
			posted++
		case op < 8:
			m := matchers[rng.IntN(len(matchers))]
			want := oldest(m)
			if got := claimID(t, r, m, now); got != want {
				var key string
				if m != nil {
					key = m.Key()
				}
				t.Fatalf("step %d: claim by %q took %q, want %q", step, key, got, want)
			}
		case op < 9:
			if k, ok := pick(domain.StageProcessing); ok {
				if _, err := r.Update(ctx, k, requeue(at(now)), nil); err != nil {
					t.Fatalf("requeue: %v", err)
				}
			}
		default:
			k, ok := pick(domain.StagePending)
			if !ok {
				continue
			}
			if rng.IntN(2) == 0 {
				if err := r.Delete(ctx, k, nil, nil); err != nil {
					t.Fatalf("delete: %v", err)
				}
			} else if _, err := r.Update(ctx, k, func(t *domain.Task) error {
				next, _, err := t.Timeout(at(now))
				*t = next
				return err
			}, nil); err != nil {
				t.Fatalf("timeout: %v", err)
			}
		}
	}
}

// CountingMatcher accepts items equal to Want and counts how often it was
// asked, so a test can see which tasks a repository ran a query over.
type CountingMatcher struct {
	Want  string
	Calls int
}

func (m *CountingMatcher) Key() string { return "equals " + m.Want }

func (m *CountingMatcher) Match(item json.RawMessage) bool {
	m.Calls++
	return string(item) == m.Want
}
