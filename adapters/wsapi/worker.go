package wsapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/gorilla/websocket"
	"github.com/taskhoster/taskhoster/adapters/httperr"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
)

// envelopeSlack is what one socket message may hold beyond the queue's
// payload limit: type, ref, id and the JSON around them (as over HTTP).
const envelopeSlack = 64 << 10

// maxWorkerName bounds the worker name, as over HTTP.
const maxWorkerName = 200

// maxReports bounds the messages about tasks (progress, result, heartbeat,
// release, fail) of one socket being
// applied at once; beyond it the socket is not read until one is done.
const maxReports = 256

// Work serves the worker socket of q (SPEC §4) for user ("" if anonymous),
// who has the work right. current, if not nil, gives q as the configuration
// in force has it now, or why this worker may no longer use it; the socket
// asks it at each message and before handing out each task. It returns when
// the socket has closed and every task it still held is pending again.
func (s *Sockets) Work(w http.ResponseWriter, r *http.Request, q *domain.Queue, user string, current func() (*domain.Queue, error)) {
	if !websocket.IsWebSocketUpgrade(r) {
		s.refuse(w, errNotUpgrade, "worker socket refused")
		return
	}
	name, bad := workerName(r, user)
	if bad != nil {
		s.refuse(w, bad, "worker socket refused")
		return
	}
	leave, refused := s.enter(q.Host)
	if refused != nil {
		s.refuse(w, refused, "worker socket refused")
		return
	}
	defer leave()
	// Counted before the upgrade answers, so a client that has its socket
	// is already counted.
	defer s.connected(q.Ref())()
	conn, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered the request
	}
	conn.SetReadLimit(q.Settings.MaxItemBytes + envelopeSlack)
	wk := &worker{
		peer: newPeer(conn, s.opts, s.stop),
		s:    s, current: current, name: name,
		logger: s.logger.With(zap.String("host", q.Host), zap.String("queue", q.Name), zap.String("worker", name)),
		slots:  make(chan struct{}, maxReports),
		held:   make(map[string]holding),
		lanes:  lanes{goroutines: s.goroutines},
	}
	wk.q.Store(q)
	untrack := s.track(wk)
	// A reload between the upgrade request's check and track would not
	// have reached this socket: look once now that any later one will.
	wk.recheck()
	wk.read()
	untrack()
	wk.release()
}

// workerName is the ?worker= of the upgrade request, by default the user's
// name, else "anonymous".
func workerName(r *http.Request, user string) (string, *domain.Error) {
	query := r.URL.Query()
	switch name := query.Get("worker"); {
	case !query.Has("worker") && user != "":
		return user, nil
	case !query.Has("worker"):
		return "anonymous", nil
	case name == "" || len(name) > maxWorkerName:
		return "", domain.E(domain.KindInvalid, domain.CodeInvalidRequest, "worker must be 1 to %d characters", maxWorkerName)
	default:
		return name, nil
	}
}

// worker is one worker socket.
type worker struct {
	*peer
	s    *Sockets
	name string
	// q is the queue as this socket last saw it, refreshed from current
	// at each message (see refresh): a reload reaches open sockets too.
	q       atomic.Pointer[domain.Queue]
	current func() (*domain.Queue, error)
	logger  *zap.Logger

	claims   sync.WaitGroup // one per outstanding claim goroutine
	lanes    lanes          // messages about tasks being applied
	slots    chan struct{}  // bounds the messages being applied at once
	watchers sync.WaitGroup // one per held task, watching for its cancel

	mu      sync.Mutex
	waiting int                // outstanding claims
	held    map[string]holding // task id → the claim that handed it out here
	// ended are claims of this socket that ended without a word from it:
	// a lease that lapsed, a queue timeout, another worker's result or a
	// cancel. A late report of one still names its claim, so that it
	// cannot touch a later claim of the task under the same worker name.
	// They leave held, which would otherwise grow for as long as the
	// socket lives (a Go worker whose handler fails lets the lease lapse);
	// past maxEnded the oldest go (endedIDs, a ring).
	ended    map[string]domain.Holder
	endedIDs []string
	nextEnd  int
}

// maxEnded bounds the ended claims a worker socket remembers. A late
// report comes within moments of its claim's end; one later than a
// thousand other ends is treated as one about a task never held here.
const maxEnded = 1024

// holding is a task a worker socket holds: the claim that handed it out
// here (domain.HolderOf the claimed task), and how to stop watching it for
// a cancel.
type holding struct {
	claim   domain.Holder
	unwatch context.CancelFunc
}

// message is anything a worker sends. Fields keep their raw JSON so that
// "absent" and "null" stay apart, as over HTTP. A type reads the fields it
// needs and ignores the others, as over HTTP; a field no type has is
// refused (httperr.Decode), naming it.
type message struct {
	Type     string          `json:"type"`
	Ref      json.RawMessage `json:"ref"`
	ID       string          `json:"id"`
	Worker   *string         `json:"worker"` // optional: the socket's own (?worker=)
	Query    json.RawMessage `json:"query"`
	Progress json.RawMessage `json:"progress"`
	Result   json.RawMessage `json:"result"`
	Delay    *float64        `json:"delay"`  // release
	Reason   json.RawMessage `json:"reason"` // release, fail
}

// The replies. Ref is left out when the message had none.
type (
	taskReply struct {
		Type     string          `json:"type"`
		Ref      json.RawMessage `json:"ref,omitempty"`
		ID       string          `json:"id"`
		Item     json.RawMessage `json:"item"`
		Attempts int             `json:"attempts"`
		Lease    *domain.Lease   `json:"lease"`
	}
	ackReply struct {
		Type     string          `json:"type"`
		Ref      json.RawMessage `json:"ref,omitempty"`
		Accepted bool            `json:"accepted"`
		Status   domain.Status   `json:"status,omitempty"` // why not, when refused; where it went, after release
		Lease    *domain.Lease   `json:"lease,omitempty"`  // the extended lease, after progress or heartbeat
	}
	cancelledReply struct {
		Type string `json:"type"`
		ID   string `json:"id"`
	}
	errorReply struct {
		Type string          `json:"type"`
		Ref  json.RawMessage `json:"ref,omitempty"`
		httperr.Body
	}
)

// read handles the worker's messages in arrival order until the socket dies.
// Claims and reports run in goroutines of their own, so a claim that waits
// or a result that waits for its flush never holds up the next message.
func (w *worker) read() {
	for {
		_, data, err := w.conn.ReadMessage()
		if errors.Is(err, websocket.ErrReadLimit) {
			w.linger() // gorilla has refused it: close 1009
		}
		if err != nil {
			return // close frame, dropped connection, silence, or over the size limit (1009)
		}
		w.alive()
		w.handle(data)
	}
}

func (w *worker) handle(data []byte) {
	var m message
	if err := httperr.Decode(data, &m, "a message"); err != nil {
		// A message of the wrong shape still yields its ref when it has one
		// (the decoder fills what it can), so the error can be matched.
		w.fail(m.Ref, err)
		return
	}
	if m.Worker != nil && *m.Worker != w.name {
		// A message is the HTTP body of its call with type and id (SPEC
		// §11), worker included; but a socket speaks for the worker it
		// connected as, never for another.
		w.fail(m.Ref, domain.E(domain.KindInvalid, domain.CodeInvalidRequest,
			"worker %q: this socket works as %q (?worker= when it connected)", *m.Worker, w.name))
		return
	}
	q, err := w.refresh()
	if err != nil {
		w.letGo(m.Ref, err)
		return
	}
	// Called between two reads, as gorilla wants: a reload's maxItemBytes
	// bounds the next message.
	w.conn.SetReadLimit(q.Settings.MaxItemBytes + envelopeSlack)
	switch m.Type {
	case "claim":
		w.claim(m)
	case "progress", "result", "heartbeat", "release", "fail":
		w.report(m)
	default:
		w.fail(m.Ref, domain.E(domain.KindInvalid, domain.CodeInvalidRequest, `unknown message type %q (claim, progress, result, heartbeat, release or fail)`, m.Type))
	}
}

// queueSeen is the queue as this socket last saw it.
func (w *worker) queueSeen() *domain.Queue { return w.q.Load() }

// refresh asks for the queue as the configuration in force has it now, and
// makes it the socket's: the schemas, settings and access that a request
// made now would meet. It fails when the queue went (a removed file) or
// this worker lost the right to work on it.
func (w *worker) refresh() (*domain.Queue, error) {
	if w.current == nil {
		return w.queueSeen(), nil
	}
	q, err := w.current()
	if err != nil {
		return nil, err
	}
	w.q.Store(q)
	return q, nil
}

// recheck refreshes the queue, and lets the worker go if it may no longer
// use it (see Sockets.Recheck).
func (w *worker) recheck() {
	if _, err := w.refresh(); err != nil {
		w.letGo(nil, err)
	}
}

// letGo answers ref with err, why the worker may no longer use the queue,
// and closes the socket with 1008 (policy): its outstanding claims are
// dropped and the tasks it holds go back to pending (release), since it
// may no longer hand them in.
func (w *worker) letGo(ref json.RawMessage, err error) {
	w.fail(ref, err)
	w.close(websocket.ClosePolicyViolation, string(httperr.Of(err).Body.Error))
}

// claim starts waiting for a task that matches the message's query.
func (w *worker) claim(m message) {
	// A bad query is answered at once, not when a task would have come.
	if _, err := w.s.svc.CompileQuery(m.Query); err != nil {
		w.fail(m.Ref, err)
		return
	}
	w.mu.Lock()
	if w.waiting >= MaxClaims {
		w.mu.Unlock()
		w.fail(m.Ref, domain.E(domain.KindInvalid, domain.CodeTooManyClaims, "at most %d claims may be outstanding on one socket", MaxClaims))
		return
	}
	// The waiting place is taken now, so that claims past the server's
	// limit are refused in the order they came.
	place, err := w.s.svc.Place()
	if err != nil {
		w.mu.Unlock()
		w.fail(m.Ref, err)
		return
	}
	w.waiting++
	w.mu.Unlock()
	w.claims.Add(1)
	w.s.goroutines.Go(func() { w.await(m.Ref, m.Query, place) })
}

// await claims a task for one claim message, waiting as long as it takes.
// It stops without taking a task once the socket is gone; a task it took
// just as the socket died is held like any other, and so re-queued by release.
func (w *worker) await(ref, query json.RawMessage, place *app.Place) {
	defer w.claims.Done()
	defer place.Leave()
	t, watch, err := w.s.svc.ClaimWatched(w.ctx, w.queueSeen(), w.name, query, app.WaitForever, place, cancelWatchBuffer)
	switch {
	case err == nil:
		startWatch := w.settle(&t, watch)
		if w.s.afterSettle != nil {
			w.s.afterSettle()
		}
		// A claim may have waited for hours: if the worker lost the queue
		// meanwhile, its item is not sent. The task is held, so closing
		// the socket puts it back to pending.
		if _, err := w.refresh(); err != nil {
			startWatch() // it ends with the socket; release waits for it
			w.letGo(ref, err)
			return
		}
		w.sendBytes(encodeTask(ref, t.ID, t.Item, t.Attempts, t.Lease))
		// Only now, so that a cancel the claim's watch already holds is
		// told after the task it cancels, never before.
		startWatch()
	case w.ctx.Err() != nil || errors.Is(err, domain.ErrNotFound):
		w.settle(nil, nil) // the socket is gone, or the server is shutting down
	default:
		w.settle(nil, nil)
		w.fail(ref, err)
	}
}

// settle ends one outstanding claim, and holds t if it took one. Both
// happen before the task message is queued, so a worker that claims again
// as soon as it reads the task never finds its slot still taken. The
// returned function starts watching t for a cancel with watch; call it
// once the task message is queued.
func (w *worker) settle(t *domain.Task, watch *app.Watch) (startWatch func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waiting--
	if t == nil {
		return func() {}
	}
	return w.hold(t.ID, domain.HolderOf(*t), watch)
}

// hold records that this socket holds task id under claim, and returns
// what watches it for a cancel while it does, starting with watch, the
// claim's own (see app.Service.ClaimWatched). The caller holds w.mu.
func (w *worker) hold(id string, claim domain.Holder, watch *app.Watch) (startWatch func()) {
	if h, ok := w.held[id]; ok {
		h.unwatch() // an older claim of the same task, given back and taken again
	}
	ctx, unwatch := context.WithCancel(w.ctx)
	w.held[id] = holding{claim: claim, unwatch: unwatch}
	w.watchers.Add(1)
	return func() { w.s.goroutines.Go(func() { w.watchCancel(ctx, id, claim, watch) }) }
}

// drop stops holding task id if this socket still holds it under claim,
// not a later claim's. The caller holds w.mu.
func (w *worker) drop(id string, claim domain.Holder) {
	if h, ok := w.held[id]; ok && h.claim.Equal(claim) {
		h.unwatch()
		delete(w.held, id)
	}
}

// end is drop for a claim that ended without a word from this socket: it
// is remembered among the ended (see ended). The caller holds w.mu.
func (w *worker) end(id string, claim domain.Holder) {
	if h, ok := w.held[id]; !ok || !h.claim.Equal(claim) {
		return
	}
	w.drop(id, claim)
	if w.ended == nil {
		w.ended = make(map[string]domain.Holder)
	}
	if _, ok := w.ended[id]; !ok {
		if len(w.endedIDs) < maxEnded {
			w.endedIDs = append(w.endedIDs, id)
		} else {
			delete(w.ended, w.endedIDs[w.nextEnd])
			w.endedIDs[w.nextEnd] = id
			w.nextEnd = (w.nextEnd + 1) % maxEnded
		}
	}
	w.ended[id] = claim
}

// claimOf is the claim under which this socket holds task id, or held it
// until it ended without a word from the socket (ok false: neither).
// The caller holds w.mu.
func (w *worker) claimOf(id string) (claim domain.Holder, held, ok bool) {
	if h, ok := w.held[id]; ok {
		return h.claim, true, true
	}
	claim, ok = w.ended[id]
	return claim, false, ok
}

// cancelWatchBuffer is how many changes of a held task the watch for its
// cancel may fall behind before it starts over with a read. Its goroutine
// takes each change at once, and a held task changes seldom (a progress
// report, its end), so a few will do: each claim allocates the buffer,
// and at 16 it was a sixth of the server's allocations under load.
const cancelWatchBuffer = 4

// watchCancel follows the changes of a task this socket holds under claim,
// and tells the worker at once when the task is cancelled: {"type":
// "cancelled", "id"} (SPEC §12), so the work can stop. It follows
// watch, the claim's, and once that falls behind a watch that reads the
// task afresh. It ends once the task is no longer processing under that
// claim, or ctx ends (the task was handed in or given back, or the socket
// is gone).
func (w *worker) watchCancel(ctx context.Context, id string, claim domain.Holder, watch *app.Watch) {
	defer w.watchers.Done()
	for {
		if watch == nil {
			if ctx.Err() != nil {
				return
			}
			var err error
			if watch, err = w.s.svc.WatchClaim(ctx, w.queueSeen(), id, claim.Attempt, cancelWatchBuffer); err != nil {
				return // deleted, or the store is failing: nothing to tell
			}
		}
		t := watch.Task
		var err error
		for err == nil && t.HeldBy(claim) == nil {
			var ev domain.Event
			ev, err = watch.Next(ctx)
			t = ev.Task
		}
		watch.Close()
		watch = nil
		if errors.Is(err, app.ErrWatchLost) {
			continue // fell behind: read the record afresh
		}
		if err != nil {
			return // handed in or given back (ctx), or the store is failing
		}
		// The claim ended: this socket no longer holds the task.
		w.mu.Lock()
		w.end(id, claim)
		w.mu.Unlock()
		if claim.Names(t) && t.Status == domain.Failed && t.Error != nil && *t.Error == domain.CancelledError {
			w.send(cancelledReply{Type: "cancelled", ID: id})
		}
		return
	}
}

// report applies a message about one task: progress, result, heartbeat,
// release or fail. Messages about one task are applied in the order they
// came (progress before the result that follows it); messages about
// different tasks are applied side by side, so results share flushes.
func (w *worker) report(m message) {
	switch {
	case m.ID == "":
		w.fail(m.Ref, domain.E(domain.KindInvalid, domain.CodeInvalidRequest, `a %s message needs an "id"`, m.Type))
		return
	case !domain.ValidID(m.ID):
		w.fail(m.Ref, domain.ErrNotFound)
		return
	case m.Type == "progress" && m.Progress == nil:
		w.fail(m.Ref, domain.E(domain.KindInvalid, domain.CodeInvalidRequest, `a progress message needs a "progress" field`))
		return
	case m.Type == "result" && m.Result == nil:
		w.fail(m.Ref, domain.E(domain.KindInvalid, domain.CodeInvalidRequest, `a result message needs a "result" field`))
		return
	case m.Type == "release" && m.Delay != nil && (*m.Delay < 0 || *m.Delay > domain.MaxDelaySeconds):
		w.fail(m.Ref, domain.E(domain.KindInvalid, domain.CodeInvalidRequest, `a release's "delay" must be a number of seconds from 0 to %d`, domain.MaxDelaySeconds))
		return
	}
	// With every slot taken the reader waits here: a worker cannot pile up
	// unbounded work by sending faster than it is applied.
	w.slots <- struct{}{}
	w.lanes.run(m.ID, func() {
		defer func() { <-w.slots }()
		w.apply(m)
	})
}

// apply runs one report to its end even if the socket dies meanwhile: the
// worker did the work, and its result should count.
func (w *worker) apply(m message) {
	ctx := context.WithoutCancel(w.ctx)
	w.mu.Lock()
	claim, wasHeld, known := w.claimOf(m.ID)
	w.mu.Unlock()
	// A report on a task this socket holds, or held, names that claim, so a
	// late report of an older claim by this worker cannot touch a newer one
	// (not even one after a retry, which repeats attempt numbers).
	holder := domain.Holder{Worker: w.name}
	if known {
		holder = claim
	}
	out, err := w.call(ctx, m, holder)
	if err != nil {
		w.fail(m.Ref, err)
		return
	}
	// A task stops being held here once it left this worker's hands: its
	// result or failure is in (accepted or refused), it was given back, or a
	// progress report or heartbeat shows it is no longer processing under
	// this socket's lease. Unless a claim of this socket took it again
	// meanwhile (a task given back may come straight back), which holds it
	// under another attempt.
	if wasHeld && ((m.Type != "progress" && m.Type != "heartbeat") || !out.Accepted) {
		w.mu.Lock()
		w.drop(m.ID, claim)
		w.mu.Unlock()
	}
	w.sendBytes(encodeAck(m.Ref, out.Accepted, ackStatus(m.Type, out), out.Lease))
}

// call runs the use case of one report; report has checked its fields.
func (w *worker) call(ctx context.Context, m message, holder domain.Holder) (app.Outcome, error) {
	switch m.Type {
	case "progress":
		return w.s.svc.Progress(ctx, w.queueSeen(), m.ID, holder, m.Progress)
	case "result":
		return w.s.svc.Result(ctx, w.queueSeen(), m.ID, w.name, m.Result)
	case "heartbeat":
		return w.s.svc.Heartbeat(ctx, w.queueSeen(), m.ID, holder)
	case "release":
		var delay time.Duration
		if m.Delay != nil {
			delay = time.Duration(*m.Delay * float64(time.Second))
		}
		return w.s.svc.Release(ctx, w.queueSeen(), m.ID, holder, delay, m.Reason)
	default: // "fail"
		return w.s.svc.Fail(ctx, w.queueSeen(), m.ID, w.name, m.Reason)
	}
}

// ackStatus is the status an ack carries, as over HTTP: the one that
// explains a refusal, or the one a release went to; none otherwise.
func ackStatus(kind string, out app.Outcome) domain.Status {
	if out.Accepted && kind != "release" {
		return ""
	}
	return out.Status
}

// fail answers a message with an error, its code and message from the error
// table (httperr) as over HTTP; the socket stays open. A server fault is
// logged; its cause is never sent.
func (w *worker) fail(ref json.RawMessage, err error) {
	reply := httperr.Of(err)
	if reply.ServerFault() {
		w.logger.Error("worker socket message failed", zap.Error(err))
	}
	w.send(errorReply{Type: "error", Ref: ref, Body: reply.Body})
}

// release runs once the socket is dead: it stops the outstanding claims and
// waits for the messages being applied, then puts every task still held
// back to pending, at once, without waiting for its lease.
func (w *worker) release() {
	// Nothing more can reach the peer; closing first also unblocks a writer
	// stuck on a peer that stopped reading.
	_ = w.conn.Close()
	w.cancel()
	w.claims.Wait()
	w.lanes.wait()
	w.watchers.Wait() // they end with w.ctx

	// No goroutine touches held any more.
	held := make([]app.Held, 0, len(w.held))
	for id, h := range w.held {
		held = append(held, app.Held{ID: id, By: h.claim})
	}
	requeued, err := w.s.svc.RequeueAll(context.Background(), w.queueSeen(), held, domain.CauseSocket)
	if err != nil {
		w.logger.Error("re-queue a closed socket's tasks", zap.Error(err))
	}
	if requeued > 0 {
		w.logger.Info("worker socket closed; its tasks are pending again", zap.Int("requeued", requeued))
	}
	w.peer.finish()
}

// lanes runs functions keyed by task id: one after another for one id, side
// by side for different ids.
type lanes struct {
	goroutines *goroutines // runs each lane

	mu     sync.Mutex
	queued map[string][]func() // a key is present while its lane runs
	wg     sync.WaitGroup
}

func (l *lanes) run(key string, fn func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.queued == nil {
		l.queued = make(map[string][]func())
	}
	if q, busy := l.queued[key]; busy {
		l.queued[key] = append(q, fn)
		return
	}
	l.queued[key] = nil
	l.wg.Add(1)
	l.goroutines.Go(func() {
		defer l.wg.Done()
		for fn != nil {
			fn()
			fn = l.next(key)
		}
	})
}

// next takes the next function of key's lane, or ends the lane.
func (l *lanes) next(key string) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.queued[key]
	if len(q) == 0 {
		delete(l.queued, key)
		return nil
	}
	l.queued[key] = q[1:]
	return q[0]
}

// wait returns once every lane has run dry.
func (l *lanes) wait() { l.wg.Wait() }
