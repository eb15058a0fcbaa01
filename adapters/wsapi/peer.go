package wsapi

import (
	"context"
	"time"

	"github.com/gorilla/websocket"

	"github.com/taskhoster/taskhoster/adapters/httperr"
)

// peer is one upgraded connection: the single writer goroutine, the
// keep-alive pings and the read deadline that drops a silent peer. Whoever
// owns the peer reads from conn in one goroutine and calls alive after
// every message.
type peer struct {
	conn    *websocket.Conn
	ping    time.Duration
	timeout time.Duration

	// out feeds the writer. Senders also watch ctx, so that nobody blocks on
	// a socket that is gone.
	out chan frame
	// ctx ends when the socket is dead or saying goodbye: outstanding work for
	// it (claims, replies) stops.
	ctx    context.Context
	cancel context.CancelFunc

	// written is closed when the writer has returned; only then may the
	// owner read kill.
	written chan struct{}
	// kill drops the connection if the peer does not answer our close frame.
	kill *time.Timer
}

// linger reads and drops what the peer still sends, for a moment, once a
// message over the size limit was refused with close 1009. Closing at
// once, the rest of that message unread, makes the kernel reset the
// connection, and a peer still writing it may lose the close frame with
// the reset: a client that then takes the drop for a network fault sends
// the message again on a new socket, and again (Node's ws does). Read to
// its end, the message lets the peer read our close, as Go's HTTP server
// reads on after a 413. Bounded by lingerFor and lingerBytes.
func (p *peer) linger() {
	conn := p.conn.NetConn()
	_ = conn.SetReadDeadline(time.Now().Add(lingerFor))
	buf := make([]byte, 32<<10)
	for read := 0; read < lingerBytes; {
		n, err := conn.Read(buf)
		if err != nil {
			return // the peer closed, having read our close, or time is up
		}
		read += n
	}
}

// How long, and how much, linger reads after a message over the limit.
const (
	lingerFor   = 2 * time.Second
	lingerBytes = 64 << 20
)

// frame is one message for the writer: text, or (code non-zero) a close
// frame after which nothing more is written.
type frame struct {
	data   []byte
	code   int
	reason string
}

// newPeer starts the writer of conn. stop is closed when the server shuts
// down, which makes the writer say goodbye with 1001.
func newPeer(conn *websocket.Conn, opts Options, stop <-chan struct{}) *peer {
	ctx, cancel := context.WithCancel(context.Background())
	p := &peer{
		conn: conn, ping: opts.PingInterval, timeout: opts.PeerTimeout,
		out: make(chan frame, 64), ctx: ctx, cancel: cancel,
		written: make(chan struct{}),
	}
	p.alive()
	conn.SetPongHandler(func(string) error { p.alive(); return nil })
	go p.write(stop)
	return p
}

// alive gives the peer another PeerTimeout to say something. Only the
// reading goroutine calls it (from its loop and from the pong handler).
func (p *peer) alive() {
	_ = p.conn.SetReadDeadline(time.Now().Add(p.timeout))
}

// write is the one goroutine that writes to the connection. When it returns
// the socket is closing or dead, so it ends p.ctx on its way out.
func (p *peer) write(stop <-chan struct{}) {
	defer close(p.written)
	defer p.cancel()
	ticker := time.NewTicker(p.ping)
	defer ticker.Stop()
	for {
		select {
		case f := <-p.out:
			if f.code != 0 {
				p.goodbye(f.code, f.reason)
				return
			}
			_ = p.conn.SetWriteDeadline(time.Now().Add(p.timeout))
			if err := p.conn.WriteMessage(websocket.TextMessage, f.data); err != nil {
				// A failed write leaves the connection unusable; closing it
				// is also what wakes the reader up.
				_ = p.conn.Close()
				return
			}
		case <-ticker.C:
			if err := p.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(p.timeout)); err != nil {
				_ = p.conn.Close()
				return
			}
		case <-stop:
			p.goodbye(websocket.CloseGoingAway, "server shutting down")
			return
		case <-p.ctx.Done():
			return
		}
	}
}

// goodbye sends a close frame and gives the peer closeGrace to answer it
// (the reader then sees the peer's close frame) before dropping the
// connection, which ends the reader in any case.
func (p *peer) goodbye(code int, reason string) {
	msg := websocket.FormatCloseMessage(code, reason)
	_ = p.conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(closeGrace))
	p.kill = time.AfterFunc(closeGrace, func() { _ = p.conn.Close() })
}

// send queues v, encoded as JSON, for the writer. It reports false if the
// socket is gone (or going) and v will never be written.
func (p *peer) send(v any) bool { return p.sendBytes(encode(v)) }

// sendBytes queues one text message.
func (p *peer) sendBytes(data []byte) bool { return p.queue(frame{data: data}) }

// internalError is what the peer gets should a reply not encode:
// {"type":"error","error":"internal","message":"internal error","details":[]}.
var internalError, _ = httperr.Marshal(errorReply{Type: "error", Body: httperr.Internal()})

// encode is v as JSON, not HTML-escaped (httperr.Encoder). Every reply is built from values that encode (a ref
// was parsed as JSON, an item or a result was stored as JSON); should one
// not, the peer still gets an answer rather than silence.
func encode(v any) []byte {
	data, err := httperr.Marshal(v)
	if err != nil {
		return internalError
	}
	return data
}

// close queues a close frame behind everything already queued: the peer
// gets every earlier message first.
func (p *peer) close(code int, reason string) bool {
	return p.queue(frame{code: code, reason: reason})
}

func (p *peer) queue(f frame) bool {
	if p.ctx.Err() != nil {
		return false
	}
	select {
	case p.out <- f:
		return true
	case <-p.ctx.Done():
		return false
	}
}

// finish ends the writer and releases the connection. The owner calls it
// once its reader has stopped.
func (p *peer) finish() {
	p.cancel()
	<-p.written
	if p.kill != nil {
		p.kill.Stop()
	}
	_ = p.conn.Close()
}
