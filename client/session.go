package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

const (
	// pingEvery is how often a worker pings the server. The server pings
	// too (every 15 s), but pinging ourselves means a silent server is
	// noticed even if it forgets to.
	pingEvery = 15 * time.Second
	// peerTimeout is how long a worker socket may stay silent (no message,
	// ping or pong) before it counts as dropped: two missed pings and then
	// some, like the server's 30 s.
	peerTimeout = 45 * time.Second
	// writeWait bounds one write, so a stuck peer cannot block a sender.
	writeWait = 10 * time.Second
)

// errSessionClosed: the socket closed before the reply came. For a claim
// that is harmless (the server drops it); progress and results are retried
// or reported by the caller.
var errSessionClosed = errors.New("worker socket closed")

// message is every frame of the worker socket protocol (SPEC §4), in both
// directions; each side fills the fields its type needs.
type message struct {
	Type     string          `json:"type"`
	Ref      *int64          `json:"ref,omitempty"`
	ID       string          `json:"id,omitempty"`
	Query    json.RawMessage `json:"query,omitempty"`
	Progress json.RawMessage `json:"progress,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	Delay    json.Number     `json:"delay,omitempty"`  // release: seconds
	Reason   json.RawMessage `json:"reason,omitempty"` // release, fail
	// The server's replies.
	Item     json.RawMessage `json:"item,omitempty"`
	Attempts int             `json:"attempts,omitempty"`
	Lease    *Lease          `json:"lease,omitempty"`
	Accepted bool            `json:"accepted,omitempty"`
	Status   string          `json:"status,omitempty"`
	Error    string          `json:"error,omitempty"`
	Message  string          `json:"message,omitempty"`
	Details  []Violation     `json:"details,omitempty"`
}

// session is one open worker socket. It numbers each request with a ref,
// writes requests one at a time (gorilla allows one writer), and a single
// reader hands each reply to the request whose ref it echoes.
type session struct {
	conn    *websocket.Conn
	log     *slog.Logger
	started time.Time

	wmu sync.Mutex // serialises writes

	mu      sync.Mutex
	nextRef int64
	waiting map[int64]waiter
	// givenUp is the size of the largest request given up (its ctx ended)
	// before its reply came.
	givenUp int

	// held are the tasks handed out on this socket whose handlers may
	// still run: task id -> closed when the server says it was cancelled.
	held map[string]*signal

	done chan struct{} // closed when the reader stops: the socket is gone
	err  error         // why; written before done is closed
	// tooBig, when the server closed the socket because a message was
	// over its size limit (1009), is the size of the largest message
	// still waiting then or given up: the one that broke the limit is
	// among them (it got no reply), so it was at most that big, and every
	// message of that size is over the limit too. Written before done is
	// closed; 0 otherwise.
	tooBig int

	// tookReply, set by tests only, runs in the reader between taking a
	// reply's waiter and handing it the reply.
	tookReply func()
}

// waiter is a request waiting for its reply.
type waiter struct {
	reply chan message
	size  int // bytes of the request's frame
}

// signal is closed once, on the first fire.
type signal struct {
	once sync.Once
	c    chan struct{}
}

func (g *signal) fire() { g.once.Do(func() { close(g.c) }) }

func newSession(conn *websocket.Conn, log *slog.Logger) *session {
	s := &session{
		conn: conn, log: log, started: time.Now(),
		waiting: map[int64]waiter{}, held: map[string]*signal{}, done: make(chan struct{}),
	}
	alive, stopPings := keepAlive(conn, peerTimeout, pingEvery)
	go func() {
		s.read(alive)
		stopPings()
	}()
	return s
}

// keepAlive keeps conn's read deadline silence ahead of its latest sign of
// life (a ping, a pong, or a message, for which the reader calls alive),
// answers the peer's pings, and pings every `every` until stopPings: a
// socket silent for longer is gone (a dropped route, a peer gone without a
// word), where TCP would take minutes to tell. A ping that cannot be
// written closes conn, and so ends its reader.
func keepAlive(conn *websocket.Conn, silence, every time.Duration) (alive, stopPings func()) {
	alive = func() { _ = conn.SetReadDeadline(time.Now().Add(silence)) }
	alive()
	conn.SetPongHandler(func(string) error { alive(); return nil })
	conn.SetPingHandler(func(data string) error {
		alive()
		err := conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(writeWait))
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		return err
	})
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeWait)); err != nil {
					conn.Close()
					return
				}
			}
		}
	}()
	return alive, sync.OnceFunc(func() { close(done) })
}

// read delivers replies until the socket fails, then wakes every waiter.
func (s *session) read(alive func()) {
	defer close(s.done)
	for {
		_, data, err := s.conn.ReadMessage()
		if err != nil {
			s.err = err
			if websocket.IsCloseError(err, websocket.CloseMessageTooBig) {
				s.tooBig = s.largestWaiting()
			}
			s.conn.Close()
			return
		}
		alive()
		var m message
		if err := json.Unmarshal(data, &m); err != nil {
			s.log.Warn("ignoring a worker socket message that is not JSON", "error", err)
			continue
		}
		if m.Type == "cancelled" && m.Ref == nil {
			s.cancelled(m.ID)
			continue
		}
		if m.Ref == nil {
			s.log.Warn("ignoring a worker socket message without a ref", "type", m.Type, "code", m.Error, "message", m.Message)
			continue
		}
		s.mu.Lock()
		wt, ok := s.waiting[*m.Ref]
		delete(s.waiting, *m.Ref)
		s.mu.Unlock()
		if ok && s.tookReply != nil {
			s.tookReply()
		}
		switch {
		case ok:
			if m.Type == "task" {
				// Before the claim sees it, so a cancel right behind it
				// is not missed.
				s.hold(m.ID)
			}
			wt.reply <- m // buffered: never blocks
		case m.Type == "task":
			// Its claim was given up (the worker is draining): nobody runs
			// it, and the server re-queues it when this socket closes.
			s.log.Info("task arrived after its claim was given up; it goes back to the queue when the socket closes", "task", m.ID)
		}
	}
}

// largestWaiting is the size of the largest request still waiting.
func (s *session) largestWaiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.givenUp
	for _, wt := range s.waiting {
		n = max(n, wt.size)
	}
	return n
}

// hold starts watching for a cancel of task id, for the claim that was
// just handed it. A task given back can come back on this socket while
// its older claim is still handing in (say, a release whose ack is not
// read yet): the newer claim gets a signal of its own, which the older
// claim's release leaves alone, since the server's cancels now concern
// the newer one.
func (s *session) hold(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[id] = &signal{c: make(chan struct{})}
}

// cancelSignal is closed when the server cancels task id, which must be
// held; release forgets it.
func (s *session) cancelSignal(id string) (cancelled <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.held[id]
	if g == nil { // not handed out here: never cancelled through this socket
		return nil, func() {}
	}
	return g.c, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.held[id] == g {
			delete(s.held, id)
		}
	}
}

// cancelled handles the server's {"type": "cancelled", "id"}: the task's
// handler, if it still runs, has its context cancelled.
func (s *session) cancelled(id string) {
	s.mu.Lock()
	g := s.held[id]
	s.mu.Unlock()
	if g == nil {
		s.log.Info("a task not running here was cancelled", "task", id)
		return
	}
	g.fire()
}

// request sends m with a fresh ref and waits for the reply, the socket's
// end, ctx's end or stop. A reply that has already arrived wins over the
// others, so a task handed out as the worker stops is not silently lost
// on the client side. An "error" reply becomes a *Error. written, if not
// nil, is called once m is written (before the reply).
func (s *session) request(ctx context.Context, m message, stop <-chan struct{}, written func()) (message, error) {
	ch := make(chan message, 1)
	s.mu.Lock()
	s.nextRef++
	ref := s.nextRef
	s.mu.Unlock()
	m.Ref = &ref
	data, err := json.Marshal(m)
	if err != nil {
		return message{}, fmt.Errorf("encode a %s message: %w", m.Type, err)
	}
	s.mu.Lock()
	s.waiting[ref] = waiter{reply: ch, size: len(data)}
	s.mu.Unlock()

	if err := s.write(data); err != nil {
		// A server refusing a frame over its limit may close while it is
		// still being written: wait for the reader to learn why.
		<-s.done
		s.forget(ref)
		return message{}, s.overLimit(m.Type, data, err)
	}
	if written != nil {
		written()
	}
	select {
	case reply := <-ch:
		return checkReply(reply)
	case <-s.done:
		err = s.overLimit(m.Type, data, fmt.Errorf("%w: %v", errSessionClosed, s.err))
	case <-ctx.Done():
		err = ctx.Err()
	case <-stop:
		err = errStopped
	}
	s.mu.Lock()
	_, mine := s.waiting[ref]
	if mine {
		s.givenUp = max(s.givenUp, len(data))
		delete(s.waiting, ref)
	}
	s.mu.Unlock()
	if !mine {
		// The reader took the waiter before we gave up: the reply is on its
		// way (sent at once, into ch's buffer), and a task in it is held
		// here already. Taken, it is run or given back; dropped, nobody
		// would, and it would wait out its lease.
		return checkReply(<-ch)
	}
	return message{}, err
}

// overLimit is err, the socket's end, unless data is at least tooBig: sent
// again, it would close the next socket too (and a Worker would resend it
// forever), so it is the server's answer to a body over its limit, a
// too_large *Error, as over HTTP. Call it once done is closed.
func (s *session) overLimit(kind string, data []byte, err error) error {
	if s.tooBig == 0 || len(data) < s.tooBig {
		return err
	}
	return &Error{Code: "too_large", Message: fmt.Sprintf(
		"the %s message (%d bytes) is more than the worker socket takes: the server closed it (1009 message too big)", kind, len(data))}
}

func checkReply(m message) (message, error) {
	if m.Type == "error" {
		return m, &Error{Code: m.Error, Message: m.Message, Details: m.Details}
	}
	return m, nil
}

func (s *session) forget(ref int64) {
	s.mu.Lock()
	delete(s.waiting, ref)
	s.mu.Unlock()
}

func (s *session) write(data []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_ = s.conn.SetWriteDeadline(time.Now().Add(writeWait))
	if err := s.conn.WriteMessage(websocket.TextMessage, data); err != nil {
		// A failed write leaves the stream unusable; but the server may
		// have said why it closed (1009 for a frame over its limit), so
		// the reader gets a moment to read that before the connection goes.
		go func() {
			select {
			case <-s.done:
			case <-time.After(closeWait):
			}
			s.conn.Close()
		}()
		return fmt.Errorf("%w: %v", errSessionClosed, err)
	}
	return nil
}

func (s *session) closed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// close says goodbye with code 1000, waits briefly for the server's close
// frame (which the reader sees as the end), then drops the connection.
func (s *session) close() {
	closeGracefully(s.conn)
	select {
	case <-s.done:
	case <-time.After(closeWait):
	}
	s.conn.Close()
	<-s.done
}
