// Package wsapi serves Taskhoster's two WebSocket endpoints with
// gorilla/websocket: the worker socket (SPEC §4), over which a worker claims
// tasks and hands in progress and results, and the watch socket (SPEC §3),
// which streams one task's status view until it is terminal.
//
// httpapi routes the upgrade requests here after it has resolved the host and
// queue and checked access; this package only speaks the socket protocols.
//
// Every connection has exactly one goroutine that writes to it (gorilla allows
// one concurrent writer), fed by a channel, which also sends the keep-alive
// pings. The goroutine that reads drops the peer once it has been silent (no
// message, no pong) for PeerTimeout. A worker socket remembers every task it
// handed out and, however it closes, puts the ones still processing under
// those claims back to pending at once.
package wsapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/adapters/httperr"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
)

// Defaults of Options (SPEC §4: "pings every 15 s and drops a peer silent for 30 s").
const (
	DefaultPingInterval = 15 * time.Second
	DefaultPeerTimeout  = 30 * time.Second
	DefaultWatchBuffer  = 256
)

// MaxClaims is how many claims one worker socket may leave outstanding: its
// concurrency (SPEC §4).
const MaxClaims = 256

// closeGrace is how long the server waits for the peer to answer its close
// frame before it drops the connection anyway.
const closeGrace = 2 * time.Second

// Options configure the sockets. The zero value gives the SPEC's timings.
type Options struct {
	Logger *zap.Logger
	// PingInterval is how often the server pings every socket.
	PingInterval time.Duration
	// PeerTimeout drops a peer that sent nothing (no message, no pong) for
	// this long. It also bounds a single write to a peer that does not read.
	PeerTimeout time.Duration
	// WatchBuffer is how many changes a watcher may fall behind before it is
	// closed with 1013 (try again later) rather than shown a gap.
	WatchBuffer int
	// MaxSocketsPerHost bounds the open sockets (worker and watch) of one
	// host; past it a new socket is refused with 503 too_many_sockets, so
	// one host's clients cannot use up the server for the others.
	MaxSocketsPerHost int
}

// DefaultMaxSocketsPerHost is Options.MaxSocketsPerHost's default.
const DefaultMaxSocketsPerHost = 1024

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.PingInterval <= 0 {
		o.PingInterval = DefaultPingInterval
	}
	if o.PeerTimeout <= 0 {
		o.PeerTimeout = DefaultPeerTimeout
	}
	if o.WatchBuffer <= 0 {
		o.WatchBuffer = DefaultWatchBuffer
	}
	if o.MaxSocketsPerHost <= 0 {
		o.MaxSocketsPerHost = DefaultMaxSocketsPerHost
	}
	return o
}

// Sockets serves the worker and watch sockets; it implements httpapi.Sockets.
// Close it on shutdown, before the task store closes: that is what re-queues
// the tasks the open worker sockets hold.
type Sockets struct {
	svc      *app.Service
	opts     Options
	logger   *zap.Logger
	upgrader websocket.Upgrader
	// goroutines runs the worker sockets' claims, reports and cancel
	// watches.
	goroutines *goroutines

	mu     sync.Mutex
	closed bool
	stop   chan struct{}  // closed by Close: every socket says goodbye
	live   sync.WaitGroup // one per socket handler still running
	open   map[string]int // open sockets by host
	// workers counts the upgraded worker sockets of each queue, for the
	// dashboard and the metrics (an entry goes with the queue's last).
	workers map[domain.QueueRef]int
	// upgraded is every upgraded socket, worker and watch, for Recheck.
	upgraded map[rechecker]struct{}

	// afterSettle, set by tests only (export_test.go), runs between a
	// claim's settling and its task message.
	afterSettle func()
}

// New builds the socket endpoints over the use cases.
func New(svc *app.Service, opts Options) *Sockets {
	opts = opts.withDefaults()
	s := &Sockets{
		svc: svc, opts: opts, logger: opts.Logger,
		stop:     make(chan struct{}),
		open:     make(map[string]int),
		workers:  make(map[domain.QueueRef]int),
		upgraded: make(map[rechecker]struct{}),

		goroutines: newGoroutines(idleLinger),
	}
	s.upgrader = websocket.Upgrader{
		// Sockets authenticate with a bearer token (header or
		// ?access_token=), never with a cookie the browser adds on its
		// own, so a page from another origin gains nothing by opening
		// one: there is no cross-site request to forge.
		CheckOrigin: func(*http.Request) bool { return true },
		Error:       s.upgradeError,
	}
	return s
}

// errNotUpgrade refuses a request to a socket endpoint that does not ask
// for a WebSocket (a curl or a browser tab on /{queue}/work).
var errNotUpgrade = domain.E(domain.KindInvalid, domain.CodeInvalidRequest,
	"this is a WebSocket endpoint: connect with a WebSocket client (GET with Connection: Upgrade and Upgrade: websocket)")

// upgradeError answers a handshake the upgrader refused in JSON, as every
// error is (SPEC §3), where gorilla would write plain text. Its reasons
// name the header at fault; they start with the library's "websocket: ".
func (s *Sockets) upgradeError(w http.ResponseWriter, _ *http.Request, status int, reason error) {
	msg := strings.TrimPrefix(reason.Error(), "websocket: ")
	var err error
	switch status {
	case http.StatusBadRequest:
		err = domain.E(domain.KindInvalid, domain.CodeInvalidRequest, "not a WebSocket handshake: %s", msg)
	case http.StatusMethodNotAllowed:
		httperr.MethodNotAllowed(w, http.MethodGet)
		return
	case http.StatusForbidden:
		err = domain.E(domain.KindForbidden, domain.CodeForbidden, "%s", msg)
	default:
		err = reason // internal: logged, masked
	}
	s.refuse(w, err, "socket upgrade failed")
}

// Open is how many sockets (worker and watch) of host are open, of the
// --max-sockets it may have.
func (s *Sockets) Open(host string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open[host]
}

// Workers is how many worker sockets of q are connected.
func (s *Sockets) Workers(q domain.QueueRef) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.workers[q]
}

// connected counts a worker socket of q in until the returned function
// counts it out.
func (s *Sockets) connected(q domain.QueueRef) (gone func()) {
	s.mu.Lock()
	s.workers[q]++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		if s.workers[q]--; s.workers[q] == 0 {
			delete(s.workers, q)
		}
		s.mu.Unlock()
	}
}

// rechecker is an upgraded socket that can ask again whether it may go on.
type rechecker interface {
	// recheck resolves the socket's queue and access against the
	// configuration in force, and lets the socket go (close 1008) if its
	// queue went or its right was taken away.
	recheck()
}

// track counts an upgraded socket in for Recheck until the returned
// function counts it out.
func (s *Sockets) track(r rechecker) (untrack func()) {
	s.mu.Lock()
	s.upgraded[r] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.upgraded, r)
		s.mu.Unlock()
	}
}

// Recheck asks every open socket whether its queue and its token's right
// are still there, as a request made now would: call it after each reload
// of the configuration (SPEC §1, live reload). A socket whose worker or
// watcher lost them is closed with 1008 (policy), its outstanding claims
// dropped before they take a task, and a worker's tasks put back to
// pending. Sockets that may go on take the reloaded queue for their next
// messages (a worker socket also does so at each message).
func (s *Sockets) Recheck() {
	s.mu.Lock()
	open := make([]rechecker, 0, len(s.upgraded))
	for r := range s.upgraded {
		open = append(open, r)
	}
	s.mu.Unlock()
	for _, r := range open {
		r.recheck()
	}
}

// Close says goodbye (close code 1001, going away) to every open socket,
// refuses new ones, and waits until every socket has finished, which for a
// worker socket includes re-queuing the tasks it held.
func (s *Sockets) Close(ctx context.Context) error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.stop)
	}
	s.mu.Unlock()

	done := make(chan struct{})
	go func() {
		s.live.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close sockets: %w", ctx.Err())
	}
}

// enter counts a new socket of host in, unless Close has begun or the host
// has all the sockets it may have; it returns the function that counts the
// socket out. Counting under the lock Close takes means Close never misses
// a socket.
func (s *Sockets) enter(host string) (leave func(), err *domain.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, errShuttingDown
	case s.open[host] >= s.opts.MaxSocketsPerHost:
		return nil, errTooManySockets
	}
	s.open[host]++
	s.live.Add(1)
	return func() {
		s.mu.Lock()
		if s.open[host]--; s.open[host] == 0 {
			delete(s.open, host)
		}
		s.mu.Unlock()
		s.live.Done()
	}, nil
}

var (
	errShuttingDown   = domain.E(domain.KindUnavailable, domain.CodeUnavailable, "the server is shutting down")
	errTooManySockets = domain.E(domain.KindUnavailable, domain.CodeTooManySockets, "this host has as many open sockets as it may; try again later")
)

// refuse answers a request that is not upgraded with err's status and body
// from the error table, as the HTTP API would (SPEC §3). A server fault is
// logged as what; its cause is not sent.
func (s *Sockets) refuse(w http.ResponseWriter, err error, what string) {
	reply := httperr.Of(err)
	if reply.ServerFault() {
		s.logger.Error(what, zap.Error(err))
	}
	reply.Write(w)
}
