package bench

import (
	"context"
	"fmt"
	"time"
)

// HandoffRun is one hand-off run: how long a task takes from its post to
// an idle worker that was already waiting for it, in milliseconds.
type HandoffRun struct {
	N                      int
	DeliverP50, DeliverP99 float64 // post sent → task arrived on the socket
	PostP50, PostP99       float64 // post sent → 201
}

// Handoff posts n tasks one after the other; one worker with one claim
// open on its socket waits for each. The worker claims the next task as
// soon as one arrives, before handing in its result, so that claim has
// long been waiting when the next post is sent.
func Handoff(ctx context.Context, t Target, n, itemBytes int) (HandoffRun, error) {
	a := newAPI(t)
	defer a.close()
	s, err := openLockstep(ctx, a, "handoff", time.Minute)
	if err != nil {
		return HandoffRun{}, err
	}
	defer s.close()
	if err := s.claim(nil); err != nil {
		return HandoffRun{}, err
	}
	deliver := make([]time.Duration, 0, n)
	post := make([]time.Duration, 0, n)
	for i := range n {
		t0 := time.Now()
		id, err := a.post(ctx, item(i, "handoff", itemBytes))
		if err != nil {
			return HandoffRun{}, err
		}
		post = append(post, time.Since(t0))
		got, err := s.next(ctx, "task")
		if err != nil {
			return HandoffRun{}, fmt.Errorf("hand-off: %w", err)
		}
		if got.m.ID != id {
			return HandoffRun{}, fmt.Errorf("hand-off: posted %s, was handed %s", id, got.m.ID)
		}
		deliver = append(deliver, got.at.Sub(t0))
		if err := s.claim(nil); err != nil {
			return HandoffRun{}, err
		}
		if err := s.finish(ctx, id); err != nil {
			return HandoffRun{}, fmt.Errorf("hand-off: %w", err)
		}
	}
	return HandoffRun{
		N:          n,
		DeliverP50: ms(Percentile(deliver, 50)), DeliverP99: ms(Percentile(deliver, 99)),
		PostP50: ms(Percentile(post, 50)), PostP99: ms(Percentile(post, 99)),
	}, nil
}
