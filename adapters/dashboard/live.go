package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/adapters/httpapi"
	"github.com/taskhoster/taskhoster/adapters/httperr"
	"github.com/taskhoster/taskhoster/domain"
)

// The live socket, GET /_dash/live. The page sends one message first,
// {"token": "..."} ("" or absent: anonymous), since a browser cannot set
// headers on a WebSocket and a token in the URL would reach logs and
// history. The server answers with a snapshot of every queue the token may
// see ({"type": "snapshot", ...}, the shape of GET /_dash/api/queues with
// only the last few seconds of rates), and again whenever it differs from
// the last one sent: it looks every Push, so changes are coalesced to at
// most one snapshot per Push. A token that names nobody gets {"type":
// "error", ...} and close 1008. The page sends nothing more; pings keep
// the connection alive and drop a silent peer.

// Limits of the live sockets.
const (
	maxLivePerHost = 64               // open live sockets of one host; past it 503 too_many_sockets
	liveReadLimit  = 4 << 10          // the first message is a token; nothing else is expected
	helloTimeout   = 10 * time.Second // to send the first message
	livePing       = 15 * time.Second
	liveSilence    = 2 * livePing
	writeTimeout   = 10 * time.Second
	// liveRates is how many seconds of rates a snapshot carries: enough
	// that a page that missed no snapshot has every second's final count.
	liveRates = 5
)

// lives counts the open live sockets and ends them on Close.
type lives struct {
	mu     sync.Mutex
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup
	open   map[string]int // by host
}

func newLives() *lives { return &lives{stop: make(chan struct{}), open: make(map[string]int)} }

func (l *lives) enter(host string) (leave func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return nil, errShuttingDown
	case l.open[host] >= maxLivePerHost:
		return nil, errTooManyLive
	}
	l.open[host]++
	l.wg.Add(1)
	return func() {
		l.mu.Lock()
		if l.open[host]--; l.open[host] == 0 {
			delete(l.open, host)
		}
		l.mu.Unlock()
		l.wg.Done()
	}, nil
}

// Close says goodbye (1001) to every live socket, refuses new ones, and
// waits until each has ended.
func (d *Dashboard) Close(ctx context.Context) error {
	l := d.live
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.stop)
	}
	l.mu.Unlock()
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close dashboard sockets: %w", ctx.Err())
	}
}

var upgrader = websocket.Upgrader{
	// The socket authenticates by the token in its first message, never
	// by a cookie the browser adds on its own: a page of another origin
	// that opens one learns only what an anonymous visitor may see.
	CheckOrigin: func(*http.Request) bool { return true },
}

// hello is the page's first message.
type hello struct {
	Token string `json:"token"`
}

// errorMessage is what a refused socket is sent before its close.
type errorMessage struct {
	Type string `json:"type"`
	httperr.Body
}

func (d *Dashboard) serveLive(w http.ResponseWriter, r *http.Request) {
	hostName := httpapi.HostOf(r).Name
	leave, err := d.live.enter(hostName)
	if err != nil {
		d.writeError(w, r, err)
		return
	}
	defer leave()
	if !websocket.IsWebSocketUpgrade(r) {
		d.writeError(w, r, errNotUpgrade)
		return
	}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered
	}
	defer conn.Close()
	conn.SetReadLimit(liveReadLimit)

	token, err := readHello(conn)
	if err != nil {
		refuse(conn, httperr.Of(err).Body)
		return
	}
	if h, ok := d.opt.Config.Host(hostName); token != "" && (!ok || !authenticates(h, token)) {
		refuse(conn, httperr.Of(errBadToken).Body)
		return
	}

	// The reader only answers control frames (pongs, the peer's close);
	// when it stops, the peer is gone.
	gone := make(chan struct{})
	_ = conn.SetReadDeadline(time.Now().Add(liveSilence))
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(liveSilence)) })
	go func() {
		defer close(gone)
		for {
			if _, _, err := conn.NextReader(); err != nil {
				return
			}
		}
	}()
	d.push(conn, hostName, token, gone)
}

// readHello reads the first message within helloTimeout.
func readHello(conn *websocket.Conn) (string, error) {
	_ = conn.SetReadDeadline(time.Now().Add(helloTimeout))
	kind, data, err := conn.ReadMessage()
	if err != nil {
		return "", errNoHello
	}
	var h hello
	if kind != websocket.TextMessage || json.Unmarshal(data, &h) != nil {
		return "", errNoHello
	}
	return h.Token, nil
}

func authenticates(h *domain.Host, token string) bool {
	_, ok := h.Authenticate(token)
	return ok
}

// refuse sends body as an error message and closes with 1008 (policy).
func refuse(conn *websocket.Conn, body httperr.Body) {
	deadline := time.Now().Add(writeTimeout)
	_ = conn.SetWriteDeadline(deadline)
	data, _ := json.Marshal(errorMessage{Type: "error", Body: body})
	_ = conn.WriteMessage(websocket.TextMessage, data)
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.ClosePolicyViolation, string(body.Error)), deadline)
}

// push sends a snapshot at once and then whenever it changed, until the
// peer goes, a write fails or the dashboard closes. The host and the
// token's user are looked up afresh each time, so a reloaded hosts folder
// (a queue added, an access list changed, a user removed) shows at once.
func (d *Dashboard) push(conn *websocket.Conn, hostName, token string, gone <-chan struct{}) {
	tick := time.NewTicker(d.opt.Push)
	defer tick.Stop()
	ping := time.NewTicker(livePing)
	defer ping.Stop()
	var last []byte
	for {
		snap := d.snapshot(hostName, token)
		now := snap.Now
		snap.Now = 0 // the clock alone is no change
		key, err := json.Marshal(snap)
		if err != nil {
			d.opt.Logger.Error("dashboard snapshot", zap.Error(err))
			return
		}
		if !bytes.Equal(key, last) {
			last = key
			snap.Now = now
			data, _ := json.Marshal(snap)
			_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
			if err := conn.WriteMessage(websocket.TextMessage, data); err != nil {
				return
			}
		}
		select {
		case <-tick.C:
		case <-ping.C:
			if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeTimeout)); err != nil {
				return
			}
		case <-gone:
			return
		case <-d.live.stop:
			_ = conn.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.CloseGoingAway, "server shutting down"), time.Now().Add(writeTimeout))
			return
		}
	}
}

// snapshot is what token's user may see of host now. A token that stopped
// naming a user (the user file went) sees what anyone sees.
func (d *Dashboard) snapshot(hostName, token string) hostJSON {
	now := d.opt.Clock.Now()
	h, ok := d.opt.Config.Host(hostName)
	if !ok {
		return hostJSON{Type: "snapshot", Host: hostName, Now: domain.Millis(now), Queues: []queueJSON{}}
	}
	user, _ := h.Authenticate(token)
	s := d.summary(viewer{host: h, user: user}, now, liveRates)
	s.Type = "snapshot"
	return s
}

var (
	errShuttingDown = domain.E(domain.KindUnavailable, domain.CodeUnavailable, "the server is shutting down")
	errTooManyLive  = domain.E(domain.KindUnavailable, domain.CodeTooManySockets, "this host has as many open dashboard sockets as it may; try again later")
	errNotUpgrade   = domain.E(domain.KindInvalid, domain.CodeInvalidRequest, "/_dash/live is a WebSocket: ask with Upgrade: websocket")
	errNoHello      = domain.E(domain.KindInvalid, domain.CodeInvalidJSON, `the first message must be {"token": "..."} within 10 s`)
)
