package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// fakeQueue is a worker socket server for one queue, just faithful enough
// to SPEC §4 and §11 to test the Worker without the real server: claims
// wait for tasks, results and failures are acked (the first wins),
// heartbeats extend the lease of its holder, a release puts the task back
// to pending (or fails it after maxAttempts), and the tasks leased on a
// socket go back to pending when it closes.
type fakeQueue struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	pending  []fakeTask
	leased   map[string]*fakeConn // task id -> the socket it was handed out on
	items    map[string]fakeTask
	results  map[string]json.RawMessage
	claims   []fakeClaim // open claims, oldest first
	conns    map[*fakeConn]bool
	dials    int
	refuse   func(dial int) int // an HTTP status to refuse the n-th dial (1-based) with, or 0
	finished chan string        // each task id whose result was accepted
	lastName string             // the ?worker= of the last dial
	lastAuth string             // the Authorization header of the last dial
	lastHost string

	lease       time.Duration // the lease handed out; 60 s unless set before add
	maxAttempts int           // 0: unlimited
	refuseBeats bool          // answer heartbeats accepted false
	attempts    map[string]int
	beats       map[string]int             // accepted heartbeats per task
	releases    map[string][]fakeMsg       // the release messages per task
	failures    map[string]json.RawMessage // the reason of each failed task
	deadLetters map[string]bool            // failed after maxAttempts
	handedIn    map[string]int             // results, failures and releases per task
	// busyClaims answers that many claims, the first ones, with the error
	// too_many_waiting, as a server with all its claim places taken does.
	busyClaims int
	// readLimit, if set, is the largest message the fake reads: a larger
	// one is refused with close 1009, as the server refuses a message over
	// its queue's limit.
	readLimit int64
	// cancelOnClaim cancels each task right after handing it out, so the
	// cancelled message follows the task on the socket.
	cancelOnClaim bool
	// holdAcks keeps the acks of results back (the results are stored)
	// until releaseAcks, as a server waiting for a slow flush would.
	holdAcks bool
	held     []func()
	// resultsBehindHeld counts results that came in on a socket while an
	// ack of that socket was held back.
	resultsBehindHeld int
	heldOn            map[*fakeConn]int
}

// releaseAcks sends the acks held back and stops holding them.
func (f *fakeQueue) releaseAcks() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holdAcks = false
	for _, send := range f.held {
		send()
	}
	f.held, f.heldOn = nil, nil
}

// fakeMsg is every client message the fake understands.
type fakeMsg struct {
	Type     string          `json:"type"`
	Ref      json.RawMessage `json:"ref"`
	ID       string          `json:"id"`
	Progress json.RawMessage `json:"progress"`
	Result   json.RawMessage `json:"result"`
	Delay    json.RawMessage `json:"delay"`
	Reason   json.RawMessage `json:"reason"`
}

type fakeTask struct {
	id   string
	item json.RawMessage
}

type fakeClaim struct {
	c   *fakeConn
	ref json.RawMessage
}

type fakeConn struct {
	ws *websocket.Conn
	mu sync.Mutex // one writer at a time
}

func (c *fakeConn) send(m map[string]any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.ws.WriteJSON(m)
}

func newFakeQueue(t *testing.T) *fakeQueue { return startFakeQueue(t, false) }

// newFakeQueueTLS serves over TLS with HTTP/2 enabled, as a real front
// end would: the worker must still get an HTTP/1.1 WebSocket handshake.
func newFakeQueueTLS(t *testing.T) *fakeQueue { return startFakeQueue(t, true) }

func startFakeQueue(t *testing.T, tls bool) *fakeQueue {
	f := &fakeQueue{
		t: t, leased: map[string]*fakeConn{}, items: map[string]fakeTask{},
		results: map[string]json.RawMessage{}, conns: map[*fakeConn]bool{},
		finished: make(chan string, 1000), lease: time.Minute,
		attempts: map[string]int{}, beats: map[string]int{}, releases: map[string][]fakeMsg{},
		failures: map[string]json.RawMessage{}, deadLetters: map[string]bool{},
		handedIn: map[string]int{},
	}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	if tls {
		f.srv.EnableHTTP2 = true
		f.srv.StartTLS()
	} else {
		f.srv.Start()
	}
	t.Cleanup(func() {
		f.dropAll()
		f.srv.Close()
	})
	return f
}

// add posts n tasks with items {"n": i}.
func (f *fakeQueue) add(n int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%016x", len(f.items)+1)
		task := fakeTask{id, json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
		f.items[id] = task
		f.pending = append(f.pending, task)
		ids = append(ids, id)
	}
	f.dispatch()
	return ids
}

// dispatch hands pending tasks to open claims. Call with f.mu held.
func (f *fakeQueue) dispatch() {
	for len(f.pending) > 0 && len(f.claims) > 0 {
		task, cl := f.pending[0], f.claims[0]
		f.pending, f.claims = f.pending[1:], f.claims[1:]
		f.leased[task.id] = cl.c
		f.attempts[task.id]++
		cl.c.send(map[string]any{"type": "task", "ref": cl.ref, "id": task.id, "item": task.item,
			"attempts": f.attempts[task.id], "lease": f.newLease()})
		if f.cancelOnClaim {
			f.cancelLocked(task.id)
		}
	}
}

// dropAll cuts every open socket without a close frame, as a crash would.
func (f *fakeQueue) dropAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		c.ws.NetConn().Close()
	}
}

func (f *fakeQueue) newLease() map[string]any {
	return map[string]any{"worker": "w", "until": time.Now().Add(f.lease).UnixMilli()}
}

// ended reports whether task id is finished or failed. Call with f.mu held.
func (f *fakeQueue) ended(id string) bool {
	_, finished := f.results[id]
	_, failed := f.failures[id]
	return finished || failed
}

func (f *fakeQueue) beatCount(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.beats[id]
}

func (f *fakeQueue) dialCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dials
}

func (f *fakeQueue) result(id string) json.RawMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.results[id]
}

func (f *fakeQueue) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.dials++
	n := f.dials
	f.lastName, f.lastAuth, f.lastHost = r.URL.Query().Get("worker"), r.Header.Get("Authorization"), r.Host
	refuse := f.refuse
	f.mu.Unlock()
	if r.URL.Path != "/q/work" {
		http.NotFound(w, r)
		return
	}
	if refuse != nil {
		if status := refuse(n); status != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":"refused","message":"dial %d refused","details":[]}`, n)
			return
		}
	}
	ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
	if err != nil {
		return
	}
	c := &fakeConn{ws: ws}
	f.mu.Lock()
	f.conns[c] = true
	limit := f.readLimit
	f.mu.Unlock()
	if limit > 0 {
		ws.SetReadLimit(limit)
	}
	defer f.hangUp(c)
	for {
		var m fakeMsg
		if err := ws.ReadJSON(&m); err != nil {
			if errors.Is(err, websocket.ErrReadLimit) {
				// gorilla has sent the 1009 close. Read on until the client
				// closes, as the server lingers: closed with the rest of the
				// message unread, the kernel would reset the connection and
				// the client might never read the close.
				_ = ws.UnderlyingConn().SetReadDeadline(time.Now().Add(testTimeout))
				_, _ = io.Copy(io.Discard, ws.UnderlyingConn())
			}
			return
		}
		f.handle(c, m)
	}
}

func (f *fakeQueue) handle(c *fakeConn, m fakeMsg) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ref, id := m.Ref, m.ID
	if m.Type == "result" || m.Type == "fail" || m.Type == "release" {
		f.handedIn[id]++
	}
	switch m.Type {
	case "claim":
		if f.busyClaims > 0 {
			f.busyClaims--
			c.send(map[string]any{"type": "error", "ref": ref, "error": "too_many_waiting", "message": "too many claims are waiting"})
			return
		}
		f.claims = append(f.claims, fakeClaim{c, ref})
		f.dispatch()
	case "progress":
		c.send(map[string]any{"type": "ack", "ref": ref, "accepted": f.leased[id] == c})
	case "heartbeat":
		if f.leased[id] != c || f.refuseBeats {
			c.send(map[string]any{"type": "ack", "ref": ref, "accepted": false, "status": "pending"})
			return
		}
		f.beats[id]++
		c.send(map[string]any{"type": "ack", "ref": ref, "accepted": true, "lease": f.newLease()})
	case "release":
		if f.leased[id] != c {
			c.send(map[string]any{"type": "ack", "ref": ref, "accepted": false, "status": "pending"})
			return
		}
		delete(f.leased, id)
		f.releases[id] = append(f.releases[id], m)
		status := "pending"
		if f.maxAttempts > 0 && f.attempts[id] >= f.maxAttempts {
			status = "failed"
			f.failures[id] = m.Reason
			f.deadLetters[id] = true
			f.finished <- id
		} else {
			f.pending = append(f.pending, f.items[id])
			f.dispatch()
		}
		c.send(map[string]any{"type": "ack", "ref": ref, "accepted": true, "status": status})
	case "result", "fail":
		done := f.ended(id)
		if !done {
			if m.Type == "result" {
				f.results[id] = m.Result
			} else {
				f.failures[id] = m.Reason
			}
			delete(f.leased, id)
			f.removePending(id)
			f.finished <- id
		}
		ack := map[string]any{"type": "ack", "ref": ref, "accepted": !done}
		if f.holdAcks {
			if f.heldOn == nil {
				f.heldOn = map[*fakeConn]int{}
			}
			if f.heldOn[c] > 0 {
				f.resultsBehindHeld++
			}
			f.heldOn[c]++
			f.held = append(f.held, func() { c.send(ack) })
			return
		}
		c.send(ack)
	default:
		c.send(map[string]any{"type": "error", "ref": ref, "error": "invalid_message", "message": "unknown type " + m.Type})
	}
}

// cancel fails task id with error "cancelled", as DELETE /q/{id} does:
// a pending task leaves the queue, and the socket holding a leased one is
// sent {"type": "cancelled", "id"} at once (SPEC §12). Later results and
// failures of it are answered accepted false.
func (f *fakeQueue) cancel(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancelLocked(id)
}

func (f *fakeQueue) cancelLocked(id string) {
	if f.ended(id) {
		return
	}
	f.failures[id] = json.RawMessage(`"cancelled"`)
	f.removePending(id)
	if holder := f.leased[id]; holder != nil {
		delete(f.leased, id)
		holder.send(map[string]any{"type": "cancelled", "id": id})
	}
}

// handedInCount is how many results, failures and releases of task id
// came in, accepted or not.
func (f *fakeQueue) handedInCount(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.handedIn[id]
}

func (f *fakeQueue) removePending(id string) {
	for i, task := range f.pending {
		if task.id == id {
			f.pending = append(f.pending[:i], f.pending[i+1:]...)
			return
		}
	}
}

// hangUp forgets a closed socket: its claims are dropped and its leased
// tasks go back to pending, as SPEC §4 says.
func (f *fakeQueue) hangUp(c *fakeConn) {
	c.ws.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, c)
	open := f.claims[:0]
	for _, cl := range f.claims {
		if cl.c != c {
			open = append(open, cl)
		}
	}
	f.claims = open
	for id, holder := range f.leased {
		if holder == c {
			delete(f.leased, id)
			f.pending = append(f.pending, f.items[id])
		}
	}
	f.dispatch()
}
