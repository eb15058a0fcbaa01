package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
)

// handshakeTimeout bounds a WebSocket opening handshake.
const handshakeTimeout = 30 * time.Second

// closeWait is how long a socket waits for the peer's close frame once it
// has everything it needs from it.
const closeWait = 5 * time.Second

// watchSilence is how long a watch socket may stay silent (no view, ping
// or pong) before it counts as dropped, and watchPing how often it pings:
// the worker socket's peerTimeout and pingEvery (variables for tests).
var watchSilence, watchPing = peerTimeout, pingEvery

// Watch opens the task's watch socket and returns the status views it
// sends: the current one at once, then one per change, ending after the
// terminal view (the server then closes the socket, and that view counts as
// a fetch). An error the server answers the opening handshake with (401,
// 404, ...) is returned by Watch itself; a socket that fails later ends the
// sequence with a non-nil error.
//
// Range over the sequence once. Breaking out of the loop, or ctx ending,
// closes the socket.
func (c *Client) Watch(ctx context.Context, queue, id string) (iter.Seq2[View, error], error) {
	conn, err := c.dial(ctx, taskPath(queue, id)+"/watch")
	if err != nil {
		return nil, fmt.Errorf("watch %s/%s: %w", queue, id, err)
	}
	return func(yield func(View, error) bool) {
		// A blocked read only returns when the connection closes.
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		defer stop()
		defer conn.Close()
		// The server pings every 15 s by default, and so does the watch, so
		// that a server pinging less often (--ws-ping) still answers in time.
		alive, stopPings := keepAlive(conn, watchSilence, watchPing)
		defer stopPings()
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				if ctx.Err() != nil {
					err = ctx.Err()
				}
				yield(View{}, fmt.Errorf("watch %s/%s: the socket ended before a terminal view: %w", queue, id, err))
				return
			}
			alive()
			var v View
			if err := json.Unmarshal(data, &v); err != nil {
				yield(View{}, fmt.Errorf("watch %s/%s: a message is not a status view: %w", queue, id, err))
				return
			}
			if !yield(v, nil) {
				closeGracefully(conn)
				return
			}
			if v.Terminal() {
				// The server closes with 1000 now; read its close frame so
				// the socket ends cleanly, but do not wait on it for long.
				_ = conn.SetReadDeadline(time.Now().Add(closeWait))
				_, _, _ = conn.ReadMessage()
				return
			}
		}
	}, nil
}

// dial opens a WebSocket to the escaped path with the client's Host header
// and token. A refused handshake becomes the server's *Error.
func (c *Client) dial(ctx context.Context, path string) (*websocket.Conn, error) {
	if c.err != nil {
		return nil, c.err
	}
	// Without an *http.Transport to copy, dial as NewTransport does.
	d := websocket.Dialer{
		HandshakeTimeout: handshakeTimeout,
		Proxy:            proxyNotLocalhost(http.ProxyFromEnvironment),
		NetDialContext:   dialLocalhost(nil),
	}
	tr := c.http.Transport
	if tr == nil {
		tr = http.DefaultTransport
	}
	if t, ok := tr.(*http.Transport); ok {
		// Clone, not read the fields directly: a transport in use sets up
		// its HTTP/2 defaults lazily, and reading them meanwhile races.
		t = t.Clone()
		d.Proxy, d.NetDialContext = t.Proxy, t.DialContext
		if t.TLSClientConfig != nil {
			// A WebSocket handshake is HTTP/1.1: offering the transport's
			// "h2" would let a server pick a protocol gorilla cannot speak.
			d.TLSClientConfig = t.TLSClientConfig.Clone()
			d.TLSClientConfig.NextProtos = nil
		}
	}
	h := http.Header{}
	c.authorize(h)
	if c.host != "" {
		h.Set("Host", c.host) // gorilla sends this as the request's Host
	}
	addr, err := c.url("ws", path)
	if err != nil {
		return nil, err
	}
	conn, resp, err := d.DialContext(ctx, addr, h)
	if errors.Is(err, websocket.ErrBadHandshake) && resp != nil {
		return nil, decodeError(resp)
	}
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", path, err)
	}
	return conn, nil
}

// closeGracefully sends close code 1000, so the peer sees a goodbye rather
// than a dropped connection, before the caller closes it.
func closeGracefully(conn *websocket.Conn) {
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
	_ = conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(closeWait))
}
