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
// While it runs, the Worker keeps the task's lease alive with heartbeats
// (one every third of the lease), so a long task needs neither progress
// reports nor a long leaseSeconds.
//
// A handler ends a task in one of these ways:
//   - it returns a result (nil error): the Worker hands it in;
//   - it returns a Release error (client.Release{Delay, Reason}): the Worker
//     gives the task back; it is retried after the delay and the queue's
//     backoff, or becomes a dead letter (failed, "attempts") once the
//     queue's maxAttempts are used up. The answer to a passing trouble (a
//     full disc, a remote service down);
//   - it returns a Failure error (client.Failure{Reason}): the Worker fails
//     the task for good (error "failed", the reason kept). The answer to a
//     task that can never succeed (no such image);
//   - it returns any other error: the Worker hands in nothing and stops the
//     heartbeats, so the task goes back to pending when its lease lapses.
//
// Release and Failure may be wrapped (fmt.Errorf with %w) or pointers. A
// reason the server refuses as over the queue's maxItemBytes (too_large)
// is dropped: the Worker hands the release or failure in again without it.
//
// ctx ends when the Worker is stopped hard (Run's context ends), and when
// the server cancels the task (context.Cause(ctx) is then ErrCancelled:
// stop the work; whatever the handler returns is not handed in); Drain
// lets handlers finish.
type Handler func(ctx context.Context, t *Task) (result any, err error)

// Worker works one queue over the worker socket (SPEC §4): it keeps
// Concurrency claims open, runs Handler for each task it is handed, hands
// in the result, and claims again without waiting for the server's answer
// to the hand-in. When the socket drops it reconnects with
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
	// open. 0 means 1; at most 256. The next claim does not wait for the
	// server's ack of the last result (or release, or failure): the Worker
	// keeps up to 128 hand-ins waiting for their acks.
	Concurrency int
	// Limit, if positive, is how many tasks the worker handles before Run
	// returns; it never claims more than that.
	Limit int

	// OnOutcome, if set, is told how each task ended: what was handed in,
	// the server's answer, and how long the handler ran. It and OnDone are
	// called one at a time (acks come back side by side), so they may
	// keep state without a lock of their own; a slow one holds up the
	// others' outcomes, not the work.
	OnOutcome func(Outcome)
	// OnDone, if set, is told how each task ended, in short: err is
	// Outcome.Err and accepted is Outcome.Ack.Accepted. When neither
	// OnOutcome nor OnDone is set, the Worker logs outcomes to Logger.
	OnDone func(t *Task, accepted bool, err error)
	// Logger receives connection trouble and, without OnOutcome and
	// OnDone, task outcomes. nil discards them.
	Logger *slog.Logger
	// MinBackoff and MaxBackoff bound the wait between reconnection
	// attempts, and between claims the server refused for now (say, 503
	// too_many_waiting): 250 ms and 30 s by default.
	MinBackoff, MaxBackoff time.Duration

	init   sync.Once
	drain  chan struct{} // closed by Drain
	drainW sync.Once
}

// Outcome is how one task ended for a Worker.
type Outcome struct {
	Task *Task
	// Sent is what the Worker handed in: "result", "release" or "fail"; ""
	// when it handed in nothing (Err says why).
	Sent string
	// Ack is the server's answer to it. Accepted false: the task was
	// already finished or failed (a result, a failure), or no longer
	// leased to this worker (a release). For an accepted release, Status
	// is "pending", or "failed" when that was its last allowed attempt.
	Ack Ack
	// Err is the handler's error (other than Release and Failure), or the
	// error from handing in: a *Error with code "invalid_result" or
	// "invalid_failure" when the queue's schema refused the result or the
	// reason, or ctx's error when the worker stopped hard. It is
	// ErrCancelled when the server cancelled the task while the handler
	// ran; Sent is then "" and Ack.Status "failed".
	Err error
	// Took is how long the handler ran.
	Took time.Duration
}

// maxConcurrency is the server's limit of open claims per socket.
const maxConcurrency = 256

// stableAfter is how long a socket must have held for the next drop to
// count as new trouble, starting the backoff over from MinBackoff; a
// server that accepts and drops at once is not hammered.
const stableAfter = 10 * time.Second

// ErrCancelled is the Outcome.Err of a task the server cancelled while its
// handler ran (SPEC §12: {"type": "cancelled"} on the worker socket), and
// the cause (context.Cause) of the handler's context, which is cancelled
// then so the work can stop. Nothing is handed in for such a task: it is
// failed already, with error "cancelled".
var ErrCancelled = errors.New("client: the task was cancelled")

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
	r := &run{w: w, ctx: runCtx, query: query, log: w.logger(), link: newLink(), handIns: make(chan struct{}, maxHandIns)}
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
	case w.Queue == "" || w.Queue == "." || w.Queue == "..":
		// Refused here, not only by dial, whose error would be retried.
		return nil, fmt.Errorf("client: Worker.Queue %q is not a queue name", w.Queue)
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

	budget  atomic.Int64  // tasks left to claim when Limit is set
	handIns chan struct{} // a place for each hand-in waiting for its ack

	failOnce sync.Once
	fatal    error
	fail     func(error)

	outcomes sync.Mutex // OnOutcome and OnDone run one at a time (done)
	// told holds, by task, a channel closed once the outcome of the task's
	// latest hand-in is told: a task given back can come back to this
	// Worker, and be finished, before the ack of its release is read, and
	// its outcomes are told in the order they were handed in (inOrder).
	toldMu sync.Mutex
	told   map[string]chan struct{}
}

// inOrder reserves the next outcome of task id: it returns a function that
// tells o once every outcome of id reserved before has been told.
func (r *run) inOrder(id string) (tell func(o Outcome)) {
	mine := make(chan struct{})
	r.toldMu.Lock()
	if r.told == nil {
		r.told = map[string]chan struct{}{}
	}
	prev := r.told[id]
	r.told[id] = mine
	r.toldMu.Unlock()
	return func(o Outcome) {
		if prev != nil {
			<-prev
		}
		r.done(o)
		r.toldMu.Lock()
		if r.told[id] == mine {
			delete(r.told, id)
		}
		r.toldMu.Unlock()
		close(mine)
	}
}

// slot is one unit of concurrency: claim, handle, hand in, again. The
// next claim goes out right behind the hand-in, without waiting for its
// ack (the server answers a result once it is on the disc), so the slot
// works its next task while the last results are flushed. Its hand-ins
// still waiting for their acks share the Worker's maxHandIns places, and
// it waits for all of them before it returns.
func (r *run) slot() {
	var out []*handing // this slot's hand-ins, oldest first, some maybe answered
	defer func() {
		for _, h := range out {
			<-h.done
		}
	}()
	for r.take() {
		out = unanswered(out)
		t, ok := r.claim(out)
		if !ok {
			return
		}
		finish := r.handle(t)
		r.handIns <- struct{}{} // every hand-in ends: acked, or given up
		h := &handing{written: make(chan struct{}), done: make(chan struct{})}
		go func() {
			defer func() { <-r.handIns }()
			defer close(h.done)
			finish(func(s *session) {
				h.once.Do(func() { h.on = s; close(h.written) })
			})
		}()
		// The claim follows the hand-in on the socket, never overtakes it.
		select {
		case <-h.written:
		case <-h.done:
		}
		out = append(out, h)
	}
}

// maxHandIns bounds a Worker's hand-ins waiting for their acks, whatever
// its Concurrency: a result is only safe once acked, and a slot whose
// handler is quick may hand in many while one flush runs. It stays below
// the reports the server applies at once on one socket (256), beyond which
// the server stops reading the socket until one is done.
const maxHandIns = 128

// unanswered is hs without the hand-ins that have ended, in order.
func unanswered(hs []*handing) []*handing {
	left := hs[:0]
	for _, h := range hs {
		select {
		case <-h.done:
		default:
			left = append(left, h)
		}
	}
	clear(hs[len(left):])
	return left
}

// handing is one hand-in of a slot: the socket it was written on (nil if
// none: it ended before) and when it ended (acked, or given up).
type handing struct {
	once    sync.Once
	on      *session // set before written is closed
	written chan struct{}
	done    chan struct{}
}

// take reserves one task of the Limit, if there is one.
func (r *run) take() bool {
	return r.w.Limit <= 0 || r.budget.Add(-1) >= 0
}

// claim keeps one claim open, across reconnections, until a task arrives;
// false when the worker stops first. If some of the slot's hand-ins still
// waiting (after) went out on another socket than this claim would, and
// may be sent again on this one, the claim waits for their answers: else
// the server could hand back a task the drop re-queued before its result
// arrives.
func (r *run) claim(after []*handing) (*Task, bool) {
	var wait *backoff // after a passing refusal
	for {
		s := r.link.wait(r.ctx, r.w.drain)
		if s == nil {
			return nil, false
		}
		same := after[:0:0]
		for _, h := range after {
			if h.on == s {
				same = append(same, h) // may yet be sent again, should s drop
				continue
			}
			select {
			case <-h.done:
			case <-r.ctx.Done():
				return nil, false
			}
		}
		after = same
		reply, err := s.request(r.ctx, message{Type: "claim", Query: r.query}, r.w.drain, nil)
		var refused *Error
		switch {
		case err == nil && reply.Type == "task":
			t := claim{ID: reply.ID, Item: reply.Item, Attempts: reply.Attempts, Lease: reply.Lease}.task(r.w.Queue)
			t.report = socketReporter{s}
			t.cancelled, t.release = s.cancelSignal(t.ID)
			return t, true
		case err == nil:
			r.log.Warn("unexpected answer to a claim; claiming again", "type", reply.Type)
		case errors.As(err, &refused) && lastingRefusal(refused.Code):
			r.fail(fmt.Errorf("claim from %s: %w", r.w.Queue, err))
			return nil, false
		case errors.As(err, &refused):
			// Say, too many claims waiting on the server (503
			// too_many_waiting), or its store failing: claim again later.
			if wait == nil {
				wait = newBackoff(orDefault(r.w.MinBackoff, 250*time.Millisecond), orDefault(r.w.MaxBackoff, 30*time.Second))
			}
			d := wait.next()
			r.log.Warn("claim refused; claiming again later", "error", err, "in", d)
			timer := time.NewTimer(d)
			select { // a Drain ends the wait: the next link.wait says so
			case <-timer.C:
			case <-r.w.drain:
			case <-r.ctx.Done():
			}
			timer.Stop()
		}
		// The socket dropped (the next one gets a new claim), or the worker
		// is stopping (the next wait says so).
	}
}

// lastingRefusal reports whether a claim refused with code would be
// refused again however long the Worker waited: its query is invalid or
// makes the message larger than the server reads (too_large: the socket
// was closed with 1009, and each claim again would close the next one), or
// it asks for more claims than a socket may have. Run stops on those.
func lastingRefusal(code string) bool {
	switch code {
	case "invalid_query", "invalid_request", "invalid_json", "too_large", "too_many_claims":
		return true
	}
	return false
}

// handle runs the handler, with heartbeats, and returns what is left to
// do: hand in what the handler returned (for a task the server cancelled
// meanwhile, nothing), calling written with the socket once it is written
// there, and report the outcome.
func (r *run) handle(t *Task) (finish func(written func(*session))) {
	release := func() {
		if t.release != nil {
			t.release()
		}
	}
	if r.ctx.Err() != nil {
		// Stopped hard as the task arrived: the server re-queues it.
		return func(func(*session)) { release() }
	}
	ctx, cancel := context.WithCancelCause(r.ctx)
	defer cancel(nil)
	watched := make(chan struct{})
	defer close(watched)
	go func() {
		select {
		case <-t.cancelled: // nil for a task not claimed on a socket: never
			cancel(ErrCancelled)
		case <-watched:
		}
	}()
	started := time.Now()
	stop := r.beat(ctx, t)
	result, err := r.w.Handler(ctx, t)
	stop()
	o := Outcome{Task: t, Took: time.Since(started)}
	cancelled := errors.Is(context.Cause(ctx), ErrCancelled)
	return func(written func(*session)) {
		defer release()
		tell := r.inOrder(t.ID)
		if cancelled {
			o.Err, o.Ack = ErrCancelled, Ack{Status: "failed"}
			tell(o)
			return
		}
		m, err := handIn(t.ID, result, err)
		if err != nil {
			o.Err = err
		} else {
			o.Sent = m.Type
			o.Ack, o.Err = r.send(m, claimedOn(t), written)
			var refused *Error
			if m.Reason != nil && errors.As(o.Err, &refused) && refused.Code == "too_large" {
				// The reason (say, a command's output tails) is over the
				// queue's maxItemBytes. Giving the task back, or failing
				// it, matters more than saying why: refused, it would wait
				// out its lease, and a failure would be retried instead.
				r.log.Warn("the "+m.Type+" reason is over the queue's size limit; handing it in without one", "task", t.ID, "error", o.Err)
				m.Reason = nil
				o.Ack, o.Err = r.send(m, claimedOn(t), written)
			}
		}
		tell(o)
	}
}

// handIn is the message that hands in what a handler returned, or the
// error that stops anything being handed in.
func handIn(id string, result any, err error) (message, error) {
	if rel, ok := asRelease(err); ok {
		m := message{Type: "release", ID: id}
		if rel.Delay > 0 {
			m.Delay = json.Number(seconds(rel.Delay))
		}
		return withReason(m, rel.Reason)
	}
	if f, ok := asFailure(err); ok {
		return withReason(message{Type: "fail", ID: id}, f.Reason)
	}
	if err != nil {
		return message{}, fmt.Errorf("handler: %w", err)
	}
	raw, err := marshal(result)
	if err != nil {
		return message{}, fmt.Errorf("result: %w", err)
	}
	return message{Type: "result", ID: id, Result: raw}, nil
}

func withReason(m message, reason any) (message, error) {
	if reason == nil {
		return m, nil
	}
	raw, err := marshal(reason)
	if err != nil {
		return message{}, fmt.Errorf("%s reason: %w", m.Type, err)
	}
	m.Reason = raw
	return m, nil
}

// asRelease and asFailure find a Release or Failure, or a pointer to one,
// in err's chain.
func asRelease(err error) (Release, bool) {
	var v Release
	var p *Release
	switch {
	case errors.As(err, &v):
		return v, true
	case errors.As(err, &p) && p != nil:
		return *p, true
	}
	return v, false
}

func asFailure(err error) (Failure, bool) {
	var v Failure
	var p *Failure
	switch {
	case errors.As(err, &v):
		return v, true
	case errors.As(err, &p) && p != nil:
		return *p, true
	}
	return v, false
}

// send hands in a result, release or failure over the current socket,
// waiting for the next one if it drops first. (If it drops after the
// server stored it but before the ack, the retry is answered accepted
// false.) A release goes only over on, the socket the task was claimed on:
// once that has dropped, the server has re-queued the task itself (SPEC
// §4), and on a newer socket the release could give back a newer claim of
// the task by this Worker (another slot took it once it was re-queued),
// which passes for the lease holder. It is answered not accepted, with no
// status.
func (r *run) send(m message, on *session, written func(*session)) (Ack, error) {
	for {
		s := r.link.wait(r.ctx, nil)
		if s == nil {
			return Ack{}, fmt.Errorf("hand in the %s: %w", m.Type, r.ctx.Err())
		}
		if m.Type == "release" && on != nil && s != on {
			r.log.Info("the socket the task was claimed on dropped, which gave it back; its release is not sent", "task", m.ID)
			return Ack{}, nil
		}
		reply, err := s.request(r.ctx, m, nil, func() { written(s) })
		switch {
		case errors.Is(err, errSessionClosed):
			continue
		case err != nil:
			return Ack{}, fmt.Errorf("hand in the %s: %w", m.Type, err)
		}
		return reply.ack(), nil
	}
}

// minBeat bounds how often heartbeats go out, whatever the lease says.
const minBeat = 100 * time.Millisecond

// beatEvery is a third of the lease that runs until until (Unix ms), as
// seen at now; a second when the clocks disagree so much that it seems
// over already. (A third leaves the other two for a slow network and for
// the clocks of worker and server to differ.)
func beatEvery(until int64, now time.Time) time.Duration {
	left := time.UnixMilli(until).Sub(now)
	if left <= 0 {
		return time.Second
	}
	return max(left/3, minBeat)
}

// beat keeps t's lease alive while its handler runs, until the returned
// function is called: a heartbeat every third of the lease, over the
// socket t was claimed on. It stops early when a heartbeat is refused
// (the lease is gone: it lapsed, or someone finished or failed the task)
// or that socket closed (the server re-queued the task).
func (r *run) beat(parent context.Context, t *Task) (stop func()) {
	ctx, cancel := context.WithCancel(parent)
	var wg sync.WaitGroup
	wg.Go(func() {
		every := beatEvery(t.Lease.Until, time.Now())
		for sleep(ctx, every) {
			ack, err := t.report.heartbeat(ctx, t.ID)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				r.log.Warn("heartbeat failed; no more for this task", "task", t.ID, "error", err)
				return
			case !ack.Accepted:
				r.log.Info("heartbeat not accepted: the lease is gone", "task", t.ID, "status", ack.Status)
				return
			case ack.Lease != nil:
				every = beatEvery(ack.Lease.Until, time.Now())
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

func (m message) ack() Ack { return Ack{Accepted: m.Accepted, Status: m.Status, Lease: m.Lease} }

func (r *run) done(o Outcome) {
	r.outcomes.Lock()
	defer r.outcomes.Unlock()
	if r.w.OnOutcome != nil {
		r.w.OnOutcome(o)
	}
	if r.w.OnDone != nil {
		r.w.OnDone(o.Task, o.Ack.Accepted, o.Err)
	}
	if r.w.OnOutcome != nil || r.w.OnDone != nil {
		return
	}
	t := o.Task
	switch {
	case errors.Is(o.Err, ErrCancelled):
		r.log.Info("task cancelled by the server", "task", t.ID)
	case r.ctx.Err() != nil && o.Err != nil:
		r.log.Info("task abandoned as the worker stopped; the server re-queues it", "task", t.ID)
	case o.Err != nil:
		r.log.Error("task not finished; it goes back to the queue when its lease lapses", "task", t.ID, "error", o.Err)
	case !o.Ack.Accepted:
		r.log.Info(o.Sent+" not accepted", "task", t.ID, "status", o.Ack.Status)
	case o.Sent == "release":
		r.log.Info("task given back", "task", t.ID, "status", o.Ack.Status)
	case o.Sent == "fail":
		r.log.Info("task failed", "task", t.ID)
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

// claimedOn is the socket t was claimed on, nil if none.
func claimedOn(t *Task) *session {
	if r, ok := t.report.(socketReporter); ok {
		return r.s
	}
	return nil
}

func (r socketReporter) progress(ctx context.Context, id string, value json.RawMessage) (Ack, error) {
	reply, err := r.s.request(ctx, message{Type: "progress", ID: id, Progress: value}, nil, nil)
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

func (r socketReporter) heartbeat(ctx context.Context, id string) (Ack, error) {
	reply, err := r.s.request(ctx, message{Type: "heartbeat", ID: id}, nil, nil)
	if errors.Is(err, errSessionClosed) {
		return Ack{}, nil // as for progress: the lease went with the socket
	}
	if err != nil {
		return Ack{}, fmt.Errorf("heartbeat of %s: %w", id, err)
	}
	return reply.ack(), nil
}
