package index

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// anyKind is kind without a key: a matcher whose verdicts cannot be kept.
type anyKind struct{ kind }

func (anyKind) Key() string { return "" }

// TestClaimsListsAndKeysAgainstAModel drives a Store with random changes
// and compares what it answers with a plain map of records: each claim takes
// the first claimable matching task in claim order, lists page through
// exactly the model's tasks, ByKey and Counts agree.
func TestClaimsListsAndKeysAgainstAModel(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed) })
	}
}

func runModel(t *testing.T, seed uint64) {
	ctx := context.Background()
	p := &flaky{}
	s := New(WithPersister(p))
	rng := rand.New(rand.NewPCG(seed, 7))
	nowMs := int64(1751500000000)
	model := map[string]domain.Task{}
	matchers := []ports.Matcher{nil, kind{"a"}, kind{"b"}, kind{"c"}, anyKind{kind{"a"}}}
	pick := func(want func(domain.Task) bool) (string, bool) {
		var ids []string
		for id, task := range model {
			if want(task) {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			return "", false
		}
		slices.Sort(ids)
		return ids[rng.IntN(len(ids))], true
	}
	update := func(step int, id string, fn func(domain.Task, time.Time) (domain.Task, domain.Event, error), now time.Time) {
		k := domain.Key{Host: testRef.Host, Queue: testRef.Queue, ID: id}
		var next domain.Task
		_, err := s.Update(ctx, k, func(t *domain.Task) error {
			n, _, err := fn(*t, now)
			*t, next = n, n
			return err
		}, nil)
		if err == nil {
			model[id] = next
		} else if !p.fail {
			t.Fatalf("step %d: update %s: %v", step, id, err)
		}
	}
	for step := range 1500 {
		p.fail = rng.IntN(12) == 0
		nowMs += int64(rng.IntN(400))
		now := time.UnixMilli(nowMs)
		switch op := rng.IntN(20); {
		case op < 6:
			opts := domain.PostOptions{Priority: []int{0, 0, 1, -2, 5}[rng.IntN(5)]}
			if rng.IntN(2) == 0 {
				opts.NotBefore = new(nowMs + int64(rng.IntN(3000)) - 500)
			}
			if rng.IntN(4) == 0 {
				opts.Key = fmt.Sprintf("k%d", rng.IntN(6))
			}
			id := fmt.Sprintf("%016x", 0xe0000000+rng.IntN(1<<20))
			posted, _ := domain.Post(id, testRef.Host, testRef.Queue, json.RawMessage(fmt.Sprintf(`{"kind":%q}`, "abc"[rng.IntN(3):][:1])),
				"", now.Add(-time.Duration(rng.IntN(3000))*time.Millisecond), opts)
			_, exists := model[id]
			keyTaken := false
			for _, other := range model {
				keyTaken = keyTaken || opts.Key != "" && other.IdempotencyKey == opts.Key
			}
			err := s.Create(ctx, posted, nil)
			switch {
			case exists:
				if !errors.Is(err, domain.ErrExists) {
					t.Fatalf("step %d: create of a taken id = %v", step, err)
				}
			case keyTaken:
				if !errors.Is(err, domain.ErrKeyTaken) {
					t.Fatalf("step %d: create with a taken key %s = %v", step, opts.Key, err)
				}
			case p.fail:
				if err == nil {
					t.Fatalf("step %d: create stored despite a failed write", step)
				}
			case err != nil:
				t.Fatalf("step %d: create: %v", step, err)
			default:
				model[id] = posted
			}
		case op < 11:
			m := matchers[rng.IntN(len(matchers))]
			at := now.Add(-time.Duration(rng.IntN(3)) * 100 * time.Millisecond) // a claim's now may lag
			var want []domain.Task
			for _, task := range model {
				if task.Claimable(at) && (m == nil || m.Match(task.Item)) {
					want = append(want, task)
				}
			}
			slices.SortFunc(want, func(a, b domain.Task) int {
				return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.EligibleAt(), b.EligibleAt()), cmp.Compare(a.ID, b.ID))
			})
			got, err := s.ClaimNext(ctx, testRef, m, at, func(t *domain.Task) error {
				next, _, err := t.Claim("box-1", time.Minute, at)
				*t = next
				return err
			}, nil)
			switch {
			case len(want) == 0:
				if !errors.Is(err, domain.ErrNotFound) {
					t.Fatalf("step %d: claim with none claimable = %s, %v", step, got.ID, err)
				}
			case p.fail:
				if err == nil {
					t.Fatalf("step %d: claim stored despite a failed write", step)
				}
			case err != nil:
				t.Fatalf("step %d: claim: %v, want %s", step, err, want[0].ID)
			case got.ID != want[0].ID:
				t.Fatalf("step %d: claim took %s, want %s", step, got.ID, want[0].ID)
			default:
				model[got.ID] = got
			}
		case op < 12:
			_, _, _ = s.Due(ctx, testRef, now)
		case op < 14:
			if id, ok := pick(func(t domain.Task) bool { return t.Status == domain.Processing }); ok {
				jitter := rng.Float64()
				update(step, id, func(t domain.Task, now time.Time) (domain.Task, domain.Event, error) {
					return t.Requeue(domain.CauseLease, domain.Retry{Settings: domain.Settings{RetryBaseSeconds: 1}, Jitter: jitter}, now)
				}, now)
			}
		case op < 15:
			if id, ok := pick(func(t domain.Task) bool { return !t.Status.Terminal() }); ok {
				update(step, id, func(t domain.Task, now time.Time) (domain.Task, domain.Event, error) {
					return t.Finish("box-1", json.RawMessage(`1`), now)
				}, now)
			}
		case op < 16:
			if id, ok := pick(func(t domain.Task) bool { return !t.Status.Terminal() }); ok {
				update(step, id, func(t domain.Task, now time.Time) (domain.Task, domain.Event, error) { return t.Cancel(now) }, now)
			}
		case op < 17:
			if id, ok := pick(func(t domain.Task) bool { return t.Status == domain.Failed }); ok {
				update(step, id, func(t domain.Task, now time.Time) (domain.Task, domain.Event, error) { return t.Retry(now) }, now)
			}
		case op < 18:
			if id, ok := pick(func(domain.Task) bool { return true }); ok {
				err := s.Delete(ctx, domain.Key{Host: testRef.Host, Queue: testRef.Queue, ID: id}, nil, nil)
				if err == nil {
					delete(model, id)
				} else if !p.fail {
					t.Fatalf("step %d: delete: %v", step, err)
				}
			}
		default:
			p.fail = false
			checkLists(t, step, s, model, rng)
		}
		checkKeysAndCounts(t, step, s, model)
	}
}

// checkLists pages through one status in one order and compares the pages
// with the model.
func checkLists(t *testing.T, step int, s *Store, model map[string]domain.Task, rng *rand.Rand) {
	t.Helper()
	st := []domain.Status{domain.Pending, domain.Processing, domain.Finished, domain.Failed}[rng.IntN(4)]
	newest := rng.IntN(2) == 0
	var want []domain.Task
	for _, task := range model {
		if task.Status == st {
			want = append(want, task)
		}
	}
	key := func(t domain.Task) int64 {
		if st == domain.Pending {
			return t.EligibleAt()
		}
		return t.PostedAt
	}
	slices.SortFunc(want, func(a, b domain.Task) int {
		return cmp.Or(cmp.Compare(key(a), key(b)), cmp.Compare(a.ID, b.ID))
	})
	if newest {
		slices.Reverse(want)
	}
	l := ports.ListQuery{Status: st, Newest: newest, Limit: 1 + rng.IntN(4)}
	var got []string
	for range len(want) + 2 {
		page, next, err := s.List(context.Background(), testRef, l)
		if err != nil {
			t.Fatalf("step %d: list: %v", step, err)
		}
		for _, task := range page {
			got = append(got, task.ID)
		}
		if next == "" {
			break
		}
		l.After = next
	}
	var wantIDs []string
	for _, task := range want {
		wantIDs = append(wantIDs, task.ID)
	}
	if !slices.Equal(got, wantIDs) {
		t.Fatalf("step %d: list %s newest %v = %v, want %v", step, st, newest, got, wantIDs)
	}
}

func checkKeysAndCounts(t *testing.T, step int, s *Store, model map[string]domain.Task) {
	t.Helper()
	var c ports.Counts
	keys := map[string]string{}
	for id, task := range model {
		switch task.Status {
		case domain.Pending:
			c.Pending++
		case domain.Processing:
			c.Processing++
		case domain.Failed:
			c.Failed++
			c.Done++
		default:
			c.Done++
		}
		if task.IdempotencyKey != "" {
			keys[task.IdempotencyKey] = id
		}
	}
	got := s.Counts(testRef)
	if got.Pending != c.Pending || got.Processing != c.Processing || got.Done != c.Done || got.Failed != c.Failed {
		t.Fatalf("step %d: counts %+v, want %+v", step, got, c)
	}
	for n := range 6 {
		k := fmt.Sprintf("k%d", n)
		task, err := s.ByKey(context.Background(), testRef, k)
		if id, ok := keys[k]; ok {
			if err != nil || task.ID != id {
				t.Fatalf("step %d: ByKey %s = %s, %v, want %s", step, k, task.ID, err, id)
			}
		} else if !errors.Is(err, domain.ErrNotFound) {
			t.Fatalf("step %d: ByKey %s = %s, %v, want none", step, k, task.ID, err)
		}
	}
	for id, want := range model {
		got, err := s.Get(context.Background(), domain.Key{Host: testRef.Host, Queue: testRef.Queue, ID: id})
		if err != nil || got.Status != want.Status || got.UpdatedAt != want.UpdatedAt {
			t.Fatalf("step %d: get %s = %s, %v, want %s", step, id, got.Status, err, want.Status)
		}
	}
	if q := s.lookup(testRef, false); q != nil {
		q.mu.Lock()
		err := q.check()
		if err == nil && len(q.keys) != len(keys) {
			err = fmt.Errorf("index holds %d keys, model %d", len(q.keys), len(keys))
		}
		q.mu.Unlock()
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
}
