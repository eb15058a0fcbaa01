package bench

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// The bench's own wire: what a lean client does with one request or one
// pair of socket messages, so that the load generator, which shares the
// machine's CPUs with the server it measures (and with beanstalkd's and
// River's, whose clients are a synchronous text protocol and calls inside
// one process), costs as little as a client can.
//
// net/http's client hands each request between three goroutines (the
// caller, the connection's writer and its reader); a conn here writes the
// request in one write and reads the answer on the caller's goroutine, as
// go-beanstalk does. It speaks plain HTTP/1.1 keep-alive, and reads the
// answer with net/http's own parser.

// idleFor is how long an idle connection is kept: well under the
// server's idle timeout (2 minutes), so that a request never goes out on
// a connection the server is closing. A request is never sent twice: one
// whose connection fails is an error of the run.
const idleFor = 30 * time.Second

// conns is a pool of keep-alive connections to one server.
type conns struct {
	addr, host, auth string

	mu   sync.Mutex
	idle []*conn
}

// conn is one keep-alive HTTP/1.1 connection.
type conn struct {
	nc   net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	used time.Time
}

// newConns returns a pool for t's server; a URL other than
// http://host:port fails each request.
func newConns(t Target) *conns {
	p := &conns{host: t.Host}
	if u, err := url.Parse(t.URL); err == nil && u.Scheme == "http" && u.Host != "" {
		p.addr = u.Host
	}
	if p.host == "" {
		p.host = p.addr
	}
	if t.Token != "" {
		p.auth = "Bearer " + t.Token
	}
	return p
}

// take returns an idle connection, or dials a new one.
func (p *conns) take(ctx context.Context) (*conn, error) {
	if p.addr == "" {
		return nil, errors.New("server URL: want http://host:port")
	}
	p.mu.Lock()
	for len(p.idle) > 0 {
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if time.Since(c.used) < idleFor {
			p.mu.Unlock()
			return c, nil
		}
		_ = c.nc.Close()
	}
	p.mu.Unlock()
	nc, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	return &conn{nc: nc, br: bufio.NewReaderSize(nc, 16<<10), bw: bufio.NewWriterSize(nc, 16<<10)}, nil
}

// put keeps c for the next request.
func (p *conns) put(c *conn) {
	c.used = time.Now()
	p.mu.Lock()
	p.idle = append(p.idle, c)
	p.mu.Unlock()
}

// close closes the idle connections.
func (p *conns) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.idle {
		_ = c.nc.Close()
	}
	p.idle = nil
}

// do sends one request (body nil: none) and returns the answer's status
// and body. The connection goes back to the pool once the answer is read
// whole, unless the server closes it.
func (p *conns) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	c, err := p.take(ctx)
	if err != nil {
		return 0, nil, err
	}
	// Cancelling ctx ends a request waiting on the wire (a long-poll
	// claim when the run stops) by expiring the connection's deadline.
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	code, data, keep, err := c.roundTrip(p, method, path, body)
	if !stop() || err != nil || !keep {
		_ = c.nc.Close()
		if err == nil && ctx.Err() != nil {
			err = ctx.Err()
		}
		return code, data, err
	}
	p.put(c)
	return code, data, nil
}

func (c *conn) roundTrip(p *conns, method, path string, body []byte) (code int, data []byte, keep bool, err error) {
	w := c.bw
	w.WriteString(method)
	w.WriteByte(' ')
	w.WriteString(path)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(p.host)
	if p.auth != "" {
		w.WriteString("\r\nAuthorization: ")
		w.WriteString(p.auth)
	}
	if body != nil {
		w.WriteString("\r\nContent-Type: application/json")
	}
	w.WriteString("\r\nContent-Length: ")
	w.WriteString(strconv.Itoa(len(body)))
	w.WriteString("\r\n\r\n")
	w.Write(body)
	if err := w.Flush(); err != nil {
		return 0, nil, false, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the server closed the connection
		}
		return 0, nil, false, err
	}
	data, err = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return 0, nil, false, err
	}
	return resp.StatusCode, data, !resp.Close, nil
}

// corked is a worker socket's connection whose writes can be held and
// sent together: a worker's result and the claim behind it are two
// messages, and one write, so the server reads them in one read.
type corked struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	buf  []byte
}

func (c *corked) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold {
		c.buf = append(c.buf, b...)
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// cork holds the writes until uncork.
func (c *corked) cork() {
	c.mu.Lock()
	c.hold = true
	c.mu.Unlock()
}

// uncork sends the writes held since cork, in one write.
func (c *corked) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold = false
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	return err
}

// socket is an open worker socket and its corkable connection.
type socket struct {
	*websocket.Conn
	wire *corked
}

// sendTogether sends msgs as text messages in one write.
func (s socket) sendTogether(msgs ...[]byte) error {
	s.wire.cork()
	var err error
	for _, m := range msgs {
		if err = s.WriteMessage(websocket.TextMessage, m); err != nil {
			break
		}
	}
	if uerr := s.wire.uncork(); err == nil {
		err = uerr
	}
	return err
}
