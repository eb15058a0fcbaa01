package fsstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// TestReopenKeepsDelaysAndPriorities checks that a restart keeps delayed
// tasks delayed, priorities in order, and the new fields exactly.
func TestReopenKeepsDelaysAndPriorities(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	ctx := context.Background()
	post := func(n int, prio int, delay time.Duration) {
		t.Helper()
		opts := domain.PostOptions{Priority: prio}
		if delay > 0 {
			opts.NotBefore = new(domain.Millis(epoch.Add(delay)))
		}
		posted, _ := domain.Post(taskID(n), host, queue, json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), "", epoch.Add(time.Duration(n)*time.Second), opts)
		if err := s.Create(ctx, posted, nil); err != nil {
			t.Fatalf("create: %v", err)
		}
	}
	post(0, 0, 0)
	post(1, 5, 0)
	post(2, 9, time.Hour) // delayed, highest priority
	post(3, -2, 0)
	post(4, 5, 0)
	post(5, 0, 0)
	// Task 5 is claimed and given back with a reason and a delay.
	now := epoch.Add(time.Minute)
	mustUpdate(t, s, keyOf(taskID(5)), claimBy("box-1", now))
	if _, err := s.ClaimNext(ctx, ref, nil, now, claimBy("box-1", now), nil); err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, s, keyOf(taskID(1)), step(func(t domain.Task) (domain.Task, domain.Event, error) {
		return t.Release("box-1", 2*time.Hour, json.RawMessage(`{"exitCode":3}`), domain.Retry{}, now)
	}))
	want := map[string]domain.Task{}
	for n := range 6 {
		want[taskID(n)], _ = s.Get(ctx, keyOf(taskID(n)))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	again := mustOpen(t, dir)
	for id, w := range want {
		got, err := again.Get(ctx, keyOf(id))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("task %s after reopen (-want +got):\n%s", id, diff)
		}
	}
	if got := countsOf(again, ref); got != (ports.Counts{Pending: 5, Processing: 1, Delayed: 2}) {
		t.Errorf("counts after reopen = %+v", got)
	}
	var order []string
	_ = again.Each(ctx, ref, domain.StagePending, func(t domain.Task) bool { order = append(order, t.ID); return true })
	if diff := cmp.Diff([]string{taskID(0), taskID(3), taskID(4), taskID(2), taskID(1)}, order); diff != "" {
		t.Errorf("pending by EligibleAt after reopen (-want +got):\n%s", diff)
	}
	claims := func(at time.Time, n int) []string {
		var got []string
		for range n {
			c, err := again.ClaimNext(ctx, ref, nil, at, claimBy("box-2", at), nil)
			if err != nil {
				got = append(got, "")
				continue
			}
			got = append(got, c.ID)
		}
		return got
	}
	if diff := cmp.Diff([]string{taskID(4), taskID(0), taskID(3), ""}, claims(now, 4)); diff != "" {
		t.Errorf("claims after reopen (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{taskID(2), ""}, claims(epoch.Add(time.Hour), 2)); diff != "" {
		t.Errorf("claims once task 2 is due (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{taskID(1)}, claims(now.Add(2*time.Hour), 1)); diff != "" {
		t.Errorf("claims once task 1 is due (-want +got):\n%s", diff)
	}
}
