package httpapi

import (
	"context"
	"net/http"
	"sync"

	"github.com/taskhoster/taskhoster/domain"
)

// Claims that wait (a long poll of up to 60 s) and live reload.
//
// A waiting claim was let in under the queue and access in force when it
// came. A reload that takes the worker's queue or its work right away ends
// it at once (Recheck) with the error a request made now would get, before
// it takes a task: a task it took would spend an attempt going back. A
// claim that took one just as the right went gives it back (keep).

// polls are the claims waiting now, each with how to end it.
type polls struct {
	mu      sync.Mutex
	waiting map[*poll]struct{}
}

type poll struct {
	r      *http.Request
	cancel context.CancelCauseFunc
}

// waitFor registers a claim of r that may wait: its context ends, with the
// reason as its cause, once a Recheck finds r no longer allowed. Call done
// when the claim has returned. r was authorized under the configuration in
// force when it came, and a reload may have put another in force, and run
// its Recheck, before r was registered (while its body came): so r is
// checked once more here, after the registration, and if it is no longer
// allowed waitFor returns why (done is then already called).
func (a *API) waitFor(r *http.Request) (ctx context.Context, done func(), err error) {
	ctx, cancel := context.WithCancelCause(r.Context())
	p := &poll{r: r, cancel: cancel}
	a.polls.mu.Lock()
	a.polls.waiting[p] = struct{}{}
	a.polls.mu.Unlock()
	done = func() {
		a.polls.mu.Lock()
		delete(a.polls.waiting, p)
		a.polls.mu.Unlock()
		cancel(nil)
	}
	if _, err := a.recheck(r, domain.ActionWork); err != nil {
		done()
		return nil, nil, err
	}
	return ctx, done, nil
}

// Recheck ends the waiting claims whose queue or work right is gone from the
// configuration in force: call it after each reload (SPEC §1, live reload).
func (a *API) Recheck() {
	a.polls.mu.Lock()
	waiting := make([]*poll, 0, len(a.polls.waiting))
	for p := range a.polls.waiting {
		waiting = append(waiting, p)
	}
	a.polls.mu.Unlock()
	for _, p := range waiting {
		if _, err := a.recheck(p.r, domain.ActionWork); err != nil {
			p.cancel(err)
		}
	}
}

// ended is what to answer for a claim that returned err under ctx (from
// waitFor): the reason a Recheck ended it, else err.
func ended(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); ctx.Err() != nil && cause != ctx.Err() {
		return cause
	}
	return err
}
