package faults

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// sockWorker works over the worker socket (GET /{queue}/work), keeping
// several claims outstanding. When its socket dies with results unanswered
// it sends them again on the next one, as a worker that did the work would.
//
// A dropper is the misbehaving kind: it holds some tasks without finishing
// them, sends results for others and, without waiting for the answers,
// drops the TCP connection under the socket (no close frame). Its held
// tasks must be re-queued, and the results it sent may or may not count.
//
// A giver also gives tasks back (release, with or without delay and
// reason) and fails them, over the socket (SPEC §11).
type sockWorker struct {
	name   string
	queue  string
	claims int // claims kept outstanding
	drop   bool
	giver  bool
	api    *api
	hist   *history

	owed []owedResult // sent on a socket that died before answering
}

type owedResult struct{ kind, id, tag string }

func (w *sockWorker) run(stop <-chan struct{}) {
	for range maxTasks {
		if closed(stop) {
			return
		}
		if conn := w.dial(stop); conn != nil {
			w.session(conn, stop)
		}
	}
}

// dial opens a worker socket, retrying while the server is down (or, just
// after a restart, not yet serving).
func (w *sockWorker) dial(stop <-chan struct{}) *websocket.Conn {
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	url := "ws" + strings.TrimPrefix(w.api.base, "http") + "/" + w.queue + "/work?worker=" + w.name
	var b backoff
	for {
		// gorilla sends a "Host" entry of the header as the Host.
		c, _, err := d.Dial(url, http.Header{"Host": {host}})
		if err == nil {
			return c
		}
		if !b.next(stop) {
			return nil
		}
	}
}

// session is one socket's life.
type session struct {
	w    *sockWorker
	conn *websocket.Conn
	gone chan struct{} // closed when the reader has stopped: the socket is dead

	writeMu sync.Mutex // gorilla allows one writer at a time

	mu        sync.Mutex
	ref       int
	pending   map[int]resultRecord  // results and failures sent, by ref, not answered yet
	releasing map[int]releaseRecord // give-backs sent, by ref, not answered yet
	stopping  bool                  // no new work: the socket is being closed
	handlers  sync.WaitGroup        // one per task being worked on
}

// session runs one socket until the server goes away, the dropper drops
// it, or stop closes it cleanly; then it settles what was left unanswered.
func (w *sockWorker) session(conn *websocket.Conn, stop <-chan struct{}) {
	s := &session{w: w, conn: conn, gone: make(chan struct{}), pending: map[int]resultRecord{}, releasing: map[int]releaseRecord{}}
	owed := w.owed
	w.owed = nil
	for _, r := range owed {
		s.sendResult(r.kind, r.id, r.tag)
	}
	for range w.claims {
		s.sendClaim()
	}
	go s.read()

	var dropAt <-chan time.Time
	if w.drop {
		dropAt = time.After(time.Duration(200+rand.IntN(1300)) * time.Millisecond)
	}
	select {
	case <-s.gone: // the server went away
	case <-dropAt:
		s.quiesce()
		_ = conn.NetConn().Close() // TCP close, no close frame
		<-s.gone
	case <-stop:
		s.quiesce()
		s.awaitAnswers(5 * time.Second)
		s.closeCleanly()
	}
	s.quiesce()
	_ = conn.Close()
	s.settle()
}

// read handles the server's messages until the socket dies.
func (s *session) read() {
	defer close(s.gone)
	for {
		_, data, err := s.conn.ReadMessage()
		if err != nil {
			return
		}
		var m struct {
			Type     string
			Ref      int
			ID       string
			Attempts int
			Accepted bool
			Status   string
		}
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		switch m.Type {
		case "task":
			s.w.hist.claim(claimRecord{Client: s.w.name, ID: m.ID, Attempts: m.Attempts})
			s.mu.Lock()
			if !s.stopping {
				// Added under mu, so quiesce's Wait cannot miss it.
				s.handlers.Add(1)
				go s.work(m.ID, m.Attempts)
			}
			s.mu.Unlock()
		case "ack":
			out := rejected
			if m.Accepted {
				out = accepted
			}
			s.answered(m.Ref, out, m.Status)
		case "error":
			s.answered(m.Ref, unknown, "")
		}
	}
}

// work finishes one task after a short while, and claims the next. A
// dropper leaves half of its tasks unfinished: they must go back to pending
// when it drops the socket. A giver gives back or fails some instead.
func (s *session) work(id string, attempts int) {
	defer s.handlers.Done()
	time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond) // the work
	if rand.IntN(2) == 0 {
		s.sendProgress(id)
	}
	r := rand.IntN(10)
	switch {
	case s.w.drop && r < 5:
	case s.w.giver && r < 7:
		s.sendResult(sendResult, id, newResultTag())
	case s.w.giver && r < 9:
		var delay int64
		if rand.IntN(2) == 0 {
			delay = int64(50 + rand.IntN(350))
		}
		s.sendRelease(id, attempts, delay, rand.IntN(2) == 0)
	case s.w.giver:
		s.sendResult(sendFail, id, newResultTag())
	default:
		s.sendResult(sendResult, id, newResultTag())
	}
	s.mu.Lock()
	stopping := s.stopping
	s.mu.Unlock()
	if !stopping {
		s.sendClaim()
	}
}

func (s *session) nextRef() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ref++
	return s.ref
}

func (s *session) sendClaim() {
	s.write(map[string]any{"type": "claim", "ref": s.nextRef(), "query": quickQuery})
}

func (s *session) sendProgress(id string) {
	s.write(map[string]any{"type": "progress", "ref": s.nextRef(), "id": id, "progress": map[string]int{"percent": 50}})
}

// sendResult sends a result (or, of kind sendFail, a failure) and waits
// for nothing: the reader records the ack. A failed write stays pending,
// so it is settled as unknown (part of the frame may have left).
func (s *session) sendResult(kind, id, tag string) {
	s.mu.Lock()
	s.ref++
	ref := s.ref
	s.pending[ref] = resultRecord{Client: s.w.name, Kind: kind, ID: id, Tag: tag, Outcome: unknown, SentAt: time.Now().UnixMilli()}
	s.mu.Unlock()
	if kind == sendFail {
		s.write(map[string]any{"type": "fail", "ref": ref, "id": id, "reason": map[string]string{"tag": tag}})
		return
	}
	s.write(map[string]any{"type": "result", "ref": ref, "id": id, "result": map[string]string{"tag": tag}})
}

// sendRelease gives a task back after delay ms (0: none), with a reason or
// without, as sendResult does a result. It is never sent again.
func (s *session) sendRelease(id string, attempts int, delay int64, reason bool) {
	rec := releaseRecord{Client: s.w.name, ID: id, Attempts: attempts, Delay: delay, Outcome: unknown}
	s.mu.Lock()
	s.ref++
	ref := s.ref
	msg := map[string]any{"type": "release", "ref": ref, "id": id}
	if delay > 0 {
		msg["delay"] = float64(delay) / 1000
	}
	if reason {
		rec.Tag = newResultTag()
		msg["reason"] = map[string]string{"tag": rec.Tag}
	}
	s.releasing[ref] = rec
	s.mu.Unlock()
	s.write(msg)
}

// write sends one message; an error means the socket is dying, which the
// reader notices.
func (s *session) write(v any) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	_ = s.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_ = s.conn.WriteJSON(v)
}

// answered records the answer to a result, failure or give-back (answers
// to claims and progress are not waited for).
func (s *session) answered(ref int, out outcome, status string) {
	s.mu.Lock()
	rec, ok := s.pending[ref]
	delete(s.pending, ref)
	rel, released := s.releasing[ref]
	delete(s.releasing, ref)
	s.mu.Unlock()
	if ok {
		rec.Outcome, rec.Status, rec.AckAt = out, status, time.Now().UnixMilli()
		s.w.hist.result(rec)
	}
	if released {
		rel.Outcome, rel.Status = out, status
		s.w.hist.release(rel)
	}
}

// quiesce stops new work and waits for the tasks being worked on.
func (s *session) quiesce() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	s.handlers.Wait()
}

// awaitAnswers waits, up to limit, until every result sent was answered.
func (s *session) awaitAnswers(limit time.Duration) {
	deadline := time.After(limit)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		n := len(s.pending) + len(s.releasing)
		s.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-deadline:
			return
		case <-s.gone:
			return
		case <-tick.C:
		}
	}
}

// closeCleanly says goodbye with a close frame and waits for the server's.
func (s *session) closeCleanly() {
	s.writeMu.Lock()
	_ = s.conn.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(5*time.Second))
	s.writeMu.Unlock()
	select {
	case <-s.gone:
	case <-time.After(5 * time.Second):
	}
}

// settle records every result left unanswered as unknown. A steady worker
// owes them to the next socket; a dropper forgets them.
func (s *session) settle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ref, rec := range s.pending {
		s.w.hist.result(rec)
		if !s.w.drop {
			s.w.owed = append(s.w.owed, owedResult{rec.Kind, rec.ID, rec.Tag})
		}
		delete(s.pending, ref)
	}
	// A give-back is not owed: the socket's end gave the task back anyway.
	for ref, rec := range s.releasing {
		s.w.hist.release(rec)
		delete(s.releasing, ref)
	}
}
