package index

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

var testRef = domain.QueueRef{Host: "task.example.com", Queue: "resize"}

// TestEntrySize pins what issue 6's memory budget leans on: SPEC §11's
// fields cost a record that uses none of them nothing.
func TestEntrySize(t *testing.T) {
	if got := unsafe.Sizeof(entry{}); got > 112 {
		t.Errorf("entry is %d bytes, want at most 112", got)
	}
	if got := unsafe.Sizeof(outcome{}); got > 64 {
		t.Errorf("outcome is %d bytes, want at most 64", got)
	}
}

// TestEntryRoundTrip checks that an entry rebuilds every field exactly,
// including values too large for its packed fields.
func TestEntryRoundTrip(t *testing.T) {
	nb := int64(1751500123456)
	base := domain.Task{ID: "0123456789abcdef", Host: testRef.Host, Queue: testRef.Queue, Status: domain.Pending,
		Item: json.RawMessage(`{}`), PostedAt: 5, UpdatedAt: 6}
	cases := map[string]func(*domain.Task){
		"plain":            func(*domain.Task) {},
		"notBefore":        func(t *domain.Task) { t.NotBefore = &nb },
		"notBefore zero":   func(t *domain.Task) { t.NotBefore = new(int64(0)) },
		"priority":         func(t *domain.Task) { t.Priority = -1000 },
		"priority wide":    func(t *domain.Task) { t.Priority = 1 << 40 },
		"priority 32768":   func(t *domain.Task) { t.Priority = 32768 },
		"attempts wide":    func(t *domain.Task) { t.Attempts = 1 << 33 },
		"failure":          func(t *domain.Task) { t.Failure = json.RawMessage(`{"exitCode":3}`) },
		"key":              func(t *domain.Task) { t.IdempotencyKey = "order-17" },
		"key and failure":  func(t *domain.Task) { t.IdempotencyKey = "k"; t.Failure = json.RawMessage(`2`) },
		"failure and wide": func(t *domain.Task) { t.Failure = json.RawMessage(`1`); t.Attempts = 1 << 31 },
		"done with all": func(t *domain.Task) {
			t.Status, t.Attempts, t.Priority, t.NotBefore = domain.Failed, 3, 7, &nb
			t.FinishedAt, t.Error = new(int64(9)), new(domain.FailedError)
			t.Progress, t.Failure = json.RawMessage(`{"pct":5}`), json.RawMessage(`"no"`)
		},
	}
	for name, change := range cases {
		want := base
		change(&want)
		e, err := newEntry(want)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, e.task(testRef.Host, testRef.Queue)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}

// kind accepts items {"kind": k}.
type kind struct{ k string }

func (m kind) Key() string { return "kind=" + m.k }
func (m kind) Match(item json.RawMessage) bool {
	var v struct{ Kind string }
	return json.Unmarshal(item, &v) == nil && v.Kind == m.k
}

// flaky is a Persister that refuses a write while fail is set.
type flaky struct{ fail bool }

func (f *flaky) Put(*domain.Task, domain.Task, []byte) error {
	if f.fail {
		return errors.New("disc full")
	}
	return nil
}
func (f *flaky) Remove(domain.Task) error { return f.Put(nil, domain.Task{}, nil) }

// TestIndexAgainstModel runs random posts (with priorities and delays),
// claims under several queries at a clock that mostly moves on, re-queues
// with backoffs, deletes, timeouts, Due and refused writes, and after every
// step checks that the queue's trees and views hold together (check).
func TestIndexAgainstModel(t *testing.T) {
	ctx := context.Background()
	p := &flaky{}
	s := New(WithPersister(p))
	rng := rand.New(rand.NewPCG(1, 2))
	epoch := time.UnixMilli(1751500000000)
	nowMs := domain.Millis(epoch)
	var ids []string
	matchers := []ports.Matcher{nil, kind{"a"}, kind{"b"}, kind{"c"}}
	for step := range 4000 {
		p.fail = rng.IntN(10) == 0
		if rng.IntN(3) == 0 {
			nowMs += int64(rng.IntN(2000)) - 5
		}
		now := time.UnixMilli(nowMs)
		switch op := rng.IntN(10); {
		case op < 4:
			opts := domain.PostOptions{Priority: []int{0, 0, 1, -2, 5}[rng.IntN(5)]}
			if rng.IntN(2) == 0 {
				opts.NotBefore = new(nowMs + int64(rng.IntN(5000)))
			}
			id := fmt.Sprintf("%016x", 0xe0000000+step)
			posted, _ := domain.Post(id, testRef.Host, testRef.Queue, json.RawMessage(fmt.Sprintf(`{"kind":%q}`, "abc"[rng.IntN(3):][:1])),
				"", now.Add(-time.Duration(rng.IntN(3000))*time.Millisecond), opts)
			if err := s.Create(ctx, posted, nil); err == nil {
				ids = append(ids, id)
			}
		case op < 7:
			_, _ = s.ClaimNext(ctx, testRef, matchers[rng.IntN(len(matchers))], now, func(t *domain.Task) error {
				next, _, err := t.Claim("box-1", time.Minute, now)
				*t = next
				return err
			}, nil)
		case op < 8:
			_, _, _ = s.Due(ctx, testRef, now)
		case len(ids) > 0:
			k := domain.Key{Host: testRef.Host, Queue: testRef.Queue, ID: ids[rng.IntN(len(ids))]}
			switch op {
			case 8:
				_, _ = s.Update(ctx, k, func(t *domain.Task) error {
					next, _, err := t.Requeue(domain.CauseLease, domain.Retry{Settings: domain.Settings{RetryBaseSeconds: 1}, Jitter: rng.Float64()}, now)
					*t = next
					return err
				}, nil)
			default:
				if rng.IntN(2) == 0 {
					_ = s.Delete(ctx, k, nil, nil)
				} else {
					_, _ = s.Update(ctx, k, func(t *domain.Task) error {
						next, _, err := t.Timeout(now)
						*t = next
						return err
					}, nil)
				}
			}
		}
		if q := s.lookup(testRef, false); q != nil {
			q.mu.Lock()
			err := q.check()
			q.mu.Unlock()
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
	}
}

// check reports the first way in which q's structures disagree with its
// records; q.mu is held and no change is in flight.
func (q *queue) check() error {
	in := map[*entry]string{}
	total := 0
	for i, l := range q.pending.levels {
		if l.tasks.Len() == 0 {
			return fmt.Errorf("level %d is empty", l.prio)
		}
		if i > 0 && q.pending.levels[i-1].prio <= l.prio {
			return fmt.Errorf("levels out of order at %d", l.prio)
		}
		l.tasks.Ascend(func(e *entry) bool {
			in[e] = fmt.Sprintf("level %d", l.prio)
			total++
			if e.prio() != l.prio || e.state != statePending || !e.claimable(q.pending.seen) {
				in[e] = "misplaced in a level"
			}
			return true
		})
	}
	q.pending.delayed.Ascend(func(e *entry) bool {
		in[e] = "delayed"
		total++
		if e.state != statePending || e.claimable(q.pending.seen) {
			in[e] = "misplaced in delayed"
		}
		return true
	})
	for _, d := range []int{dirProcessing, dirDone} {
		q.dirs[d].Ascend(func(e *entry) bool {
			in[e] = "dir"
			if e.state.dir() != d {
				in[e] = "misplaced in a dir"
			}
			return true
		})
	}
	if total != q.pending.len() {
		return fmt.Errorf("pending set holds %d, counts %d", total, q.pending.len())
	}
	if len(in) != len(q.byID) {
		return fmt.Errorf("trees hold %d tasks, byID %d", len(in), len(q.byID))
	}
	for id, e := range q.byID {
		if where, ok := in[e]; !ok || where[:3] == "mis" {
			return fmt.Errorf("task %x: %q", id, where)
		}
	}
	var prev *entry
	var err error
	q.pending.each(func(e *entry) bool {
		if prev != nil && !eligibleBefore(prev, e) {
			err = fmt.Errorf("each out of order at %x", e.id)
		}
		prev = e
		return err == nil
	})
	if err != nil {
		return err
	}
	for key, v := range q.views.byKey {
		want := map[*entry]bool{}
		q.pending.ascend(rank{}, false, func(e *entry) bool {
			if v.covers(e) && v.m.Match(e.item) {
				want[e] = true
			}
			return true
		})
		if v.matches.Len() != len(want) {
			return fmt.Errorf("view %s holds %d, want %d", key, v.matches.Len(), len(want))
		}
		v.matches.Ascend(func(e *entry) bool {
			if !want[e] {
				err = fmt.Errorf("view %s holds %x, which it should not", key, e.id)
			}
			return err == nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// slowKind is kind, but each test takes a while: a query whose first scan
// of a backlog takes long.
type slowKind struct {
	kind
	calls atomic.Int64
}

func (m *slowKind) Match(item json.RawMessage) bool {
	m.calls.Add(1)
	for end := time.Now().Add(20 * time.Microsecond); time.Now().Before(end); {
	}
	return m.kind.Match(item)
}

// TestScanLetsOthersIn checks issue 12's point on a new query: while a
// claim tests a backlog its query never saw, other posts and claims on the
// queue go ahead, and two claims of that query scanning side by side share
// the work and take the right tasks.
func TestScanLetsOthersIn(t *testing.T) {
	ctx := context.Background()
	s := New()
	epoch := time.UnixMilli(1751500000000)
	const backlog = 20000
	post := func(n int, k string) {
		posted, _ := domain.Post(fmt.Sprintf("%016x", 0xf0000000+n), testRef.Host, testRef.Queue,
			json.RawMessage(fmt.Sprintf(`{"kind":%q}`, k)), "", epoch.Add(time.Duration(n)*time.Millisecond))
		if err := s.Create(ctx, posted, nil); err != nil {
			t.Fatal(err)
		}
	}
	for n := range backlog {
		post(n, "image")
	}
	post(backlog, "video")
	post(backlog+1, "video")
	claim := func(m ports.Matcher) (domain.Task, error) {
		return s.ClaimNext(ctx, testRef, m, epoch.Add(time.Hour), func(t *domain.Task) error {
			next, _, err := t.Claim("box-1", time.Minute, epoch.Add(time.Hour))
			*t = next
			return err
		}, nil)
	}
	videos := &slowKind{kind: kind{"video"}}
	var wg sync.WaitGroup
	got := make([]string, 2)
	for i := range got {
		wg.Go(func() {
			c, err := claim(videos)
			if err != nil {
				t.Errorf("video claim: %v", err)
			}
			got[i] = c.ID
		})
	}
	// Wait for the scan to begin, then post and claim meanwhile.
	for videos.calls.Load() < 100 {
		time.Sleep(time.Millisecond)
	}
	post(backlog+2, "audio")
	c, err := claim(kind{"audio"})
	if err != nil || c.ID != fmt.Sprintf("%016x", 0xf0000000+backlog+2) {
		t.Fatalf("audio claim during the scan = %s, %v", c.ID, err)
	}
	during := videos.calls.Load()
	wg.Wait()
	if during >= backlog {
		t.Errorf("a post and a claim waited for %d of %d tests of the scan", during, backlog)
	}
	want := []string{fmt.Sprintf("%016x", 0xf0000000+backlog), fmt.Sprintf("%016x", 0xf0000000+backlog+1)}
	if got[0] > got[1] {
		got[0], got[1] = got[1], got[0]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("video claims (-want +got):\n%s", diff)
	}
	// Both scans shared one frontier: each task was tested about once.
	if n := videos.calls.Load(); n > backlog+2+2*scanBudget {
		t.Errorf("query ran %d times over %d tasks", n, backlog+2)
	}
}
