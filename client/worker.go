package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Handler does one task and returns its result, which the Worker hands in.
//
// A handler that returns an error hands in nothing: the task stays leased
// to this worker until its lease lapses (the queue's leaseSeconds after the
// claim or the last accepted progress), then goes back to pending and is
// retried, by this or another worker. That is the right answer to a passing
// trouble (a full disc, a remote service down). To give up on a task for
// good, return a result that says so instead, such as
// {"error": "no such image"}, and let the queue's result schema allow it:
// Taskhoster has no "failed by the worker" state.
//
// ctx ends when the Worker is stopped hard (Run's context ends); Drain
// lets handlers finish.
type Handler func(ctx context.Context, t *Task) (result any, err error)

// Worker works one queue over the worker socket (SPEC §4): it keeps
// Concurrency claims open, runs Handler for each task it is handed, hands
// in the result, and claims again. When the socket drops it reconnects with
// capped, jittered exponential backoff; the server re-queues the tasks that
// were leased on the dropped socket at once, and results of handlers still
// running are handed in over the next socket (a result counts whenever the
// task is not yet finished).
//
// Set the exported fields, then call Run once.
type Worker struct {
	Client  *Client // required
	Queue   string  // required
	Handler Handler // required

	// Name is the lease holder's name (?worker=); "" lets the server use the
	// user's name.
	Name string
	// Query, if not nil, is a JSON Schema an item must match to be handed
	// to this worker.
	Query any
	// Concurrency is how many tasks run at once: the number of claims kept
	// open. 0 means 1; at most 256.
	Concurrency int
	// Limit, if positive, is how many tasks the worker handles before Run
	// returns; it never claims more than that.
	Limit int

	// OnDone, if set, is told how each task ended: err is the handler's
	// error (nothing was handed in) or the error from handing in the result
	// (a *Error with code "invalid_result" when the queue's result schema
	// refused it); accepted is whether the server took the result (false:
	// it had a result already, or the task failed by timeout). When OnDone
	// is nil, the Worker logs these outcomes to Logger.
	OnDone func(t *Task, accepted bool, err error)
	// Logger receives connection trouble and, without OnDone, task
	// outcomes. nil discards them.
	Logger *slog.Logger
	// MinBackoff and MaxBackoff bound the wait between reconnection
	// attempts: 250 ms and 30 s by default.
	MinBackoff, MaxBackoff time.Duration

	init   sync.Once
	drain  chan struct{} // closed by Drain
	drainW sync.Once
}

// maxConcurrency is the server's limit of open claims per socket.
const maxConcurrency = 256

// stableAfter is how long a socket must have held for the next drop to
// count as new trouble, starting the backoff over from MinBackoff; a
// server that accepts and drops at once is not hammered.
const stableAfter = 10 * time.Second

// errStopped: a claim was given up because the worker is draining.
var errStopped = errors.New("worker draining")

func (w *Worker) setup() {
	w.init.Do(func() { w.drain = make(chan struct{}) })
}

// Drain stops the worker gently: it claims no more tasks, lets the running
// handlers finish and hands in their results; then Run closes the socket
// and returns nil. A claim the server answers while the worker drains is
// not run; the server re-queues that task when the socket closes. While
// the server is unreachable, handing in waits for it to come back (or for
// Run's ctx to end). Drain may be called more than once, from any
// goroutine, also before Run.
func (w *Worker) Drain() {
	w.setup()
	w.drainW.Do(func() { close(w.drain) })
}

// Run works the queue until Drain was called and the running tasks are
// done (it returns nil), Limit tasks are done (nil), or ctx ends (it
// returns ctx's error; running handlers see their context end and the
// server re-queues their tasks when the socket closes).
//
// It also returns an error that retrying cannot cure: the server refused
// the very first socket with a 4xx (bad token, no access, no such queue),
// or it refused the claim query. Once a socket has worked, later refusals
// (say, the queue file is being edited) are logged and retried.
func (w *Worker) Run(ctx context.Context) error {
	w.setup()
	query, err := w.check()
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &run{w: w, ctx: runCtx, query: query, log: w.logger(), link: newLink()}
	r.fail = func(err error) {
		r.failOnce.Do(func() { r.fatal = err; cancel() })
	}

	connCtx, stopConn := context.WithCancel(runCtx)
	var conn sync.WaitGroup
	conn.Go(func() { r.connect(connCtx) })

	slots := max(w.Concurrency, 1)
	if w.Limit > 0 {
		slots = min(slots, w.Limit)
		r.budget.Store(int64(w.Limit))
	}
	var running sync.WaitGroup
	for range slots {
		running.Go(r.slot)
	}
	running.Wait()
	stopConn() // only now: draining handlers hand in results over the socket
	conn.Wait()

	if r.fatal != nil {
		return r.fatal
	}
	return ctx.Err()
}

func (w *Worker) check() (json.RawMessage, error) {
	switch {
	case w.Client == nil:
		return nil, errors.New("client: Worker.Client is nil")
	case w.Queue == "":
		return nil, errors.New("client: Worker.Queue is empty")
	case w.Handler == nil:
		return nil, errors.New("client: Worker.Handler is nil")
	case w.Concurrency < 0 || w.Concurrency > maxConcurrency:
		return nil, fmt.Errorf("client: Worker.Concurrency must be 1 to %d, not %d", maxConcurrency, w.Concurrency)
	case w.Query == nil:
		return nil, nil
	}
	q, err := marshal(w.Query)
	if err != nil {
		return nil, fmt.Errorf("client: Worker.Query: %w", err)
	}
	return q, nil
}

func (w *Worker) logger() *slog.Logger {
	if w.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return w.Logger.With("queue", w.Queue)
}

// run is the state of one Run.
type run struct {
	w     *Worker
	ctx   context.Context // ends on a hard stop or a fatal error
	query json.RawMessage
	log   *slog.Logger
	link  *link

	budget atomic.Int64 // tasks left to claim when Limit is set

	failOnce sync.Once
	fatal    error
	fail     func(error)
}

// slot is one unit of concurrency: claim, handle, hand in, again.
func (r *run) slot() {
	for r.take() {
		t, ok := r.claim()
		if !ok {
			return
		}
		r.handle(t)
	}
}

// take reserves one task of the Limit, if there is one.
func (r *run) take() bool {
	return r.w.Limit <= 0 || r.budget.Add(-1) >= 0
}

// claim keeps one claim open, across reconnections, until a task arrives;
// false when the worker stops first.
func (r *run) claim() (*Task, bool) {
	for {
		s := r.link.wait(r.ctx, r.w.drain)
		if s == nil {
			return nil, false
		}
		reply, err := s.request(r.ctx, message{Type: "claim", Query: r.query}, r.w.drain)
		var refused *Error
		switch {
		case err == nil && reply.Type == "task":
			t := claim{ID: reply.ID, Item: reply.Item, Attempts: reply.Attempts, Lease: reply.Lease}.task(r.w.Queue)
			t.report = socketReporter{s}
			return t, true
		case err == nil:
			r.log.Warn("unexpected answer to a claim; claiming again", "type", reply.Type)
		case errors.As(err, &refused):
			// An invalid query (or too many claims) stays so: stop.
			r.fail(fmt.Errorf("claim from %s: %w", r.w.Queue, err))
			return nil, false
		}
		// The socket dropped (the next one gets a new claim), or the worker
		// is stopping (the next wait says so).
	}
}

// handle runs the handler and hands in its result.
func (r *run) handle(t *Task) {
	if r.ctx.Err() != nil {
		return // stopped hard as the task arrived: the server re-queues it
	}
	result, err := r.w.Handler(r.ctx, t)
	if err != nil {
		r.done(t, false, fmt.Errorf("handler: %w", err))
		return
	}
	raw, err := marshal(result)
	if err != nil {
		r.done(t, false, fmt.Errorf("result: %w", err))
		return
	}
	accepted, err := r.result(t.ID, raw)
	r.done(t, accepted, err)
}

// result hands in a result over the current socket, waiting for the next
// one if it drops first. (If it drops after the server stored the result
// but before the ack, the retry is answered accepted false.)
func (r *run) result(id string, raw json.RawMessage) (bool, error) {
	for {
		s := r.link.wait(r.ctx, nil)
		if s == nil {
			return false, fmt.Errorf("hand in the result: %w", r.ctx.Err())
		}
		reply, err := s.request(r.ctx, message{Type: "result", ID: id, Result: raw}, nil)
		switch {
		case errors.Is(err, errSessionClosed):
			continue
		case err != nil:
			return false, fmt.Errorf("hand in the result: %w", err)
		}
		return reply.Accepted, nil
	}
}

func (m message) ack() Ack { return Ack{Accepted: m.Accepted, Status: m.Status, Lease: m.Lease} }

func (r *run) done(t *Task, accepted bool, err error) {
	if r.w.OnDone != nil {
		r.w.OnDone(t, accepted, err)
		return
	}
	switch {
	case r.ctx.Err() != nil && err != nil:
		r.log.Info("task abandoned as the worker stopped; the server re-queues it", "task", t.ID)
	case err != nil:
		r.log.Error("task not finished; it goes back to the queue when its lease lapses", "task", t.ID, "error", err)
	case !accepted:
		r.log.Info("result not accepted: the task was already finished or failed", "task", t.ID)
	}
}

// connect keeps a socket open for the slots until ctx ends.
func (r *run) connect(ctx context.Context) {
	w := r.w
	b := newBackoff(orDefault(w.MinBackoff, 250*time.Millisecond), orDefault(w.MaxBackoff, 30*time.Second))
	worked := false
	for {
		s, err := r.open(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			var refused *Error
			if !worked && errors.As(err, &refused) && permanent(refused.Status) {
				r.fail(fmt.Errorf("open the worker socket of %s: %w", w.Queue, err))
				return
			}
			wait := b.next()
			r.log.Warn("cannot open the worker socket; retrying", "error", err, "in", wait)
			if !sleep(ctx, wait) {
				return
			}
			continue
		}
		worked = true
		r.link.set(s)
		select {
		case <-s.done:
		case <-ctx.Done():
			s.close()
			r.link.set(nil)
			return
		}
		r.link.set(nil)
		if time.Since(s.started) >= stableAfter {
			b.reset()
		}
		wait := b.next()
		r.log.Warn("worker socket dropped; reconnecting", "error", s.err, "in", wait)
		if !sleep(ctx, wait) {
			return
		}
	}
}

func (r *run) open(ctx context.Context) (*session, error) {
	path := "/" + url.PathEscape(r.w.Queue) + "/work"
	if r.w.Name != "" {
		path += "?worker=" + url.QueryEscape(r.w.Name)
	}
	conn, err := r.w.Client.dial(ctx, path)
	if err != nil {
		return nil, err
	}
	return newSession(conn, r.log), nil
}

// permanent reports whether a refused handshake will be refused again:
// any 4xx but a timeout or rate limit.
func permanent(status int) bool {
	return status >= 400 && status < 500 &&
		status != http.StatusRequestTimeout && status != http.StatusTooManyRequests
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// sleep waits d or until ctx ends; false if ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// link is the current socket of a Worker, or none while it reconnects.
type link struct {
	mu      sync.Mutex
	cur     *session
	changed chan struct{} // closed and replaced on every change
}

func newLink() *link { return &link{changed: make(chan struct{})} }

func (l *link) set(s *session) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cur = s
	close(l.changed)
	l.changed = make(chan struct{})
}

// wait returns an open socket, waiting for one; nil once ctx ends or stop
// is closed.
func (l *link) wait(ctx context.Context, stop <-chan struct{}) *session {
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		l.mu.Lock()
		s, changed := l.cur, l.changed
		l.mu.Unlock()
		if s != nil && !s.closed() {
			return s
		}
		select {
		case <-ctx.Done():
			return nil
		case <-stop:
			return nil
		case <-changed:
		}
	}
}

// socketReporter reports progress over the socket the task was claimed on.
type socketReporter struct{ s *session }

func (r socketReporter) progress(ctx context.Context, id string, value json.RawMessage) (Ack, error) {
	reply, err := r.s.request(ctx, message{Type: "progress", ID: id, Progress: value}, nil)
	if errors.Is(err, errSessionClosed) {
		// The server re-queued the task when that socket closed: the lease
		// is gone, which is exactly what accepted false says.
		return Ack{}, nil
	}
	if err != nil {
		return Ack{}, fmt.Errorf("progress of %s: %w", id, err)
	}
	return reply.ack(), nil
}
