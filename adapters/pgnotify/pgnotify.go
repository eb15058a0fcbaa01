// Package pgnotify is the Notifier for several servers on one PostgreSQL
// database (issue 14): the in-process notify.Hub keeps this server's claim
// lines and subscriptions, and LISTEN/NOTIFY carries the news between
// servers.
//
// Sending. Publish hands the event to the local hub at once, then queues a
// notification; one sender goroutine sends what is queued, in order, in
// one statement (pg_notify over an array) on a small pool of its own. One
// sender keeps this server's notifications in publish order, which for one
// queue is store order (Publish runs in the change's Then); a statement's
// notifications are delivered in the order sent, and PostgreSQL delivers
// the transactions' notifications in commit order.
//
// Payload (JSON, on channel Channel): the sending server's id, a sequence
// number (PostgreSQL folds identical payloads of one transaction into one),
// host, queue, id, event kind, time, worker, cause, whether the task is
// claimable now, and the task's record (domain.EncodeTask) when the whole
// payload stays under PostgreSQL's 8000-byte limit. Without the record, a
// receiver wakes a claim if the task is claimable, and if it has watchers
// of the task it reads the record from the store: the record read may
// already be a later one than the event's.
//
// Receiving. A dedicated connection LISTENs; each notification from
// another server (its own are skipped by server id) becomes a Publish on
// the local hub, which wakes one local claim if the task is claimable and
// feeds local watchers.
//
// Wake is broadcast too. Each server's timers would find due tasks on
// their own (every server's Due sees the same rows), but only once its
// sweep has armed a timer for a delay another server stored, and a resume
// (SetPaused) on one server would not reach claims waiting on another. So
// a Wake(q, n) wakes n local claims and n on every other server: a woken
// claim that finds nothing goes back to sleep, and hands its wake on only
// while the queue has pending tasks.
//
// Alone. A server that is the only one on the database sends nothing:
// its notifications would only come back to itself, and they cost the
// database a queue write and a delivery each (a fifth of its CPU per task
// in the bench). Once its listener LISTENs, a server looks for other
// servers' listeners (sessions of pg_stat_activity whose last statement is
// the same LISTEN, or that it may not see); if there are any, it sends
// from then on and says hello, and Start waits (up to helloWait) until
// each of them has acknowledged. A server that gets a hello sends from
// then on, and acknowledges it after that: so by the time a new server
// serves, every server that was there sends to it, and what they did not
// send before is committed, for the new server's claims and watches to
// read. Sending, once begun, never stops (a server that left costs only
// the notifications nobody reads). Each reconnect of the listener looks
// again, as a hello may have been missed meanwhile; a server that finds
// others only then served alone while its listener was down, and its hello
// says so (Unsent): each server that gets it treats it as a reconnect of
// its own listener (below), since the changes made meanwhile were never
// sent.
//
// Reconnects. When the listener's connection drops it reconnects with a
// backoff, LISTENs again and then interrupts the hub (Hub.Interrupt):
// every local waiting claim looks once more, since notifications may have
// been missed meanwhile, and every local watcher is cut off (Lost) to start
// over from a fresh read. A connection lost without a word (a peer gone,
// a route dropped) shows only when written to: after listenIdle without
// news the listener pings, and a ping unanswered within listenPing counts
// as a drop, where TCP would take minutes to tell. The sender bounds each
// send the same way (sendWait) and sends the batch again on another
// connection: the first may have been delivered all the same, so a
// listener drops what it has heard before (each server numbers what it
// sends), and a watcher sees each change once.
//
// Limits. Across servers a notification arrives a little after its change
// committed. A read of such a change waits until its news has arrived
// (readable.go), so a watch does not see it twice; but when one task's
// changes are stored alternately on two servers within a notification's
// latency, a watcher may see them out of order.
package pgnotify

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

var _ ports.Notifier = (*Notifier)(nil)

// Channel is the LISTEN/NOTIFY channel every server uses.
const Channel = "taskhoster_events"

// MaxPayload is the longest payload PostgreSQL takes (it must be shorter
// than 8000 bytes).
const MaxPayload = 7999

// maxQueued bounds the notifications waiting to be sent while the database
// cannot be reached; past it the oldest are dropped (the other servers'
// listeners lose the connection too, and wake their claims on reconnect).
const maxQueued = 100_000

// Hub is the in-process notifier this one wraps (notify.Hub, given by the
// wiring): it keeps this server's claim lines and subscriptions.
type Hub interface {
	ports.Notifier
	// Interrupt wakes every waiting claim once and cuts off every
	// subscription: news may have been missed.
	Interrupt()
	// CutOff cuts off every subscription of task k: its news was missed.
	CutOff(k domain.Key)
}

// Getter reads a task's current record: the store, for notifications too
// large to carry it.
type Getter interface {
	Get(ctx context.Context, k domain.Key) (domain.Task, error)
}

// Notifier implements ports.Notifier across servers. Build it with New,
// Start it, Stop it.
type Notifier struct {
	hub    Hub
	url    string
	get    Getter
	logger *zap.Logger
	id     string // this server's id, to skip its own notifications
	own    []byte // how this server's payloads begin

	pool *pgxpool.Pool

	mu      sync.Mutex
	queued  [][]byte
	sending bool          // the sender holds a batch taken from queued, not yet sent
	more    chan struct{} // signalled when queued grows
	seq     uint64

	watchMu sync.Mutex
	watched map[domain.Key]int // local subscriptions by task; an entry goes with its last
	recent  recent             // the records announced here lately (Readable)
	heard   heard              // the attempts other servers announced lately (Heard)

	others atomic.Bool   // another server may listen: send (Alone)
	met    atomic.Int64  // when others became true, Unix ns by this machine's clock (meet)
	acks   chan struct{} // a hello of this server answered
	sent   atomic.Int64  // notifications sent (tests)

	idle, ping time.Duration // listenIdle and listenPing, shorter in tests
	sendWait   time.Duration // sendWait, shorter in tests

	// latest is the last number heard from each other server (fresh).
	latestMu sync.Mutex
	latest   map[string]uint64

	pid      atomic.Uint32 // the listener's backend pid (tests)
	listened chan struct{} // closed once the first LISTEN succeeded
	listens  atomic.Int64  // how many times LISTEN succeeded
	expected int           // the other servers Start waits for (set before listened closes)
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// New returns a Notifier that wraps hub and talks to the database at url;
// get reads records too large for a notification (nil: such events reach
// other servers' watchers not at all, only their claims).
func New(hub Hub, url string, get Getter, logger *zap.Logger) *Notifier {
	if logger == nil {
		logger = zap.NewNop()
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	return &Notifier{
		hub: hub, url: url, get: get, logger: logger, id: id, own: []byte(`{"s":"` + id + `",`),
		more: make(chan struct{}, 1), listened: make(chan struct{}), acks: make(chan struct{}, 64),
		watched: make(map[domain.Key]int),
		idle:    listenIdle, ping: listenPing, sendWait: sendWait,
		latest: make(map[string]uint64),
	}
}

// How the listener tells a silently lost connection, and how long a send
// may take before the sender tries again on another (see Reconnects). A
// send is one statement of at most a few megabytes: on a live connection
// it takes milliseconds.
const (
	listenIdle = 10 * time.Second
	listenPing = 5 * time.Second
	sendWait   = 10 * time.Second
)

// Start opens the sending pool and the listener, and returns once the
// listener LISTENs (or ctx ends, or the database refuses).
func (n *Notifier) Start(ctx context.Context) error {
	cfg, err := pgxpool.ParseConfig(n.url)
	if err != nil {
		return err
	}
	cfg.MaxConns = 2
	// A notification is news, not data: its transaction need not wait for
	// the WAL to reach the disc (listeners get it at COMMIT either way,
	// and a database that crashes cuts them off, so they look again).
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	n.pool = pool
	run, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.wg.Go(func() { n.send(run) })
	n.wg.Go(func() { n.listen(run) })
	select {
	case <-n.listened:
	case <-ctx.Done():
		n.Stop()
		return ctx.Err()
	}
	// Every other server there acknowledges the hello: it sends to us now.
	wait := time.NewTimer(helloWait)
	defer wait.Stop()
	for range n.expected {
		select {
		case <-n.acks:
		case <-wait.C:
			n.logger.Warn("not every other server answered this one's hello in time; carrying on")
			return nil
		case <-ctx.Done():
			n.Stop()
			return ctx.Err()
		}
	}
	return nil
}

// helloWait bounds how long Start waits for the other servers' answers.
const helloWait = 2 * time.Second

// listenQuery is the statement a listener's session last ran, which other
// servers look for in pg_stat_activity: the LISTEN, and each ping after it
// (listenOnce), must be this very text.
var listenQuery = "LISTEN " + pgx.Identifier{Channel}.Sanitize()

// lookAround counts the other sessions of this database that may be
// another server's listener (see Alone); if there are any, this server
// sends from now on and says hello.
func (n *Notifier) lookAround(ctx context.Context) (int, error) {
	var others int
	err := n.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> $1 AND backend_type = 'client backend'
		AND (query = $2 OR query IS NULL OR query = '<insufficient privilege>')`, int64(n.pid.Load()), listenQuery).Scan(&others)
	if err != nil {
		return 0, err
	}
	if others > 0 {
		// A listener back after a drop that finds others only now served
		// alone meanwhile, sending nothing (a server joined while it was
		// down): its hello says so, for their claims and watchers to look
		// again at what it changed unannounced.
		unsent := !n.others.Load() && n.listens.Load() > 0
		n.meet()
		n.enqueue(message{Hello: true, Unsent: unsent})
	}
	return others, nil
}

// Stop sends what is still queued (for a second at most), stops the
// listener and closes the connections.
func (n *Notifier) Stop() {
	if n.cancel == nil {
		return
	}
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		// A batch the sender has taken is not queued any more, but not
		// sent either: cancelling now would lose it (the last news of a
		// server shutting down, its sockets' tasks re-queued).
		n.mu.Lock()
		left := len(n.queued) > 0 || n.sending
		n.mu.Unlock()
		if !left {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	n.cancel()
	n.wg.Wait()
	n.pool.Close()
	n.cancel = nil
}

// message is a notification's payload.
type message struct {
	Server    string          `json:"s"`
	Seq       uint64          `json:"n"`
	Host      string          `json:"h"`
	Queue     string          `json:"q"`
	ID        string          `json:"i,omitempty"`
	Kind      string          `json:"k,omitempty"` // an event kind; "" for a Wake
	Wake      int             `json:"w,omitempty"` // Wake's n
	At        time.Time       `json:"at,omitzero"`
	Worker    string          `json:"wk,omitempty"`
	Cause     string          `json:"c,omitempty"`
	Claimable bool            `json:"cl,omitempty"`
	Task      json.RawMessage `json:"t,omitempty"`
	Hello     bool            `json:"hi,omitempty"`  // a server begins to listen (Alone)
	Unsent    bool            `json:"un,omitempty"`  // with Hello: the server served alone, and sent none of its changes
	Ack       string          `json:"ack,omitempty"` // the id of the server whose hello this answers
}

// Publish hands ev to the local hub and queues its notification.
func (n *Notifier) Publish(ev domain.Event) {
	n.hub.Publish(ev)
	if !n.others.Load() {
		// Alone: nothing to send, and no read here waits for this news
		// (Readable), so the record is not encoded at all.
		return
	}
	record := domain.EncodeTask(ev.Task)
	n.recent.add(domain.KeyOf(ev.Task), record)
	m := message{
		Host: ev.Task.Host, Queue: ev.Task.Queue, ID: ev.Task.ID, Kind: string(ev.Kind),
		At: ev.At, Worker: ev.Worker, Cause: ev.Cause, Claimable: ev.Task.Claimable(ev.At),
		Task: record,
	}
	n.enqueue(m)
}

// Wake wakes n local claims waiting on q, and n on every other server.
func (n *Notifier) Wake(q domain.QueueRef, k int) {
	n.hub.Wake(q, k)
	if k > 0 {
		n.enqueue(message{Host: q.Host, Queue: q.Queue, Wake: k})
	}
}

// Await waits in the local hub's line: wakes from other servers arrive
// through it.
func (n *Notifier) Await(ctx context.Context, q domain.QueueRef, try func() (bool, error)) error {
	return n.hub.Await(ctx, q, try)
}

// Subscribe subscribes on the local hub, counting the task's watchers so
// that a notification without its record is read from the store only when
// someone here watches.
func (n *Notifier) Subscribe(k domain.Key, buffer int) ports.Subscription {
	n.watchMu.Lock()
	n.watched[k]++
	n.watchMu.Unlock()
	return &subscription{Subscription: n.hub.Subscribe(k, buffer), n: n, key: k}
}

type subscription struct {
	ports.Subscription
	once sync.Once
	n    *Notifier
	key  domain.Key
}

func (s *subscription) Close() {
	s.once.Do(func() { s.n.unwatch(s.key) })
	s.Subscription.Close()
}

// unwatch counts one subscription of k fewer. The entry goes with the last
// one: every claim on a worker socket subscribes to its task, so entries
// kept would grow with every task this server ever handed out.
func (n *Notifier) unwatch(k domain.Key) {
	n.watchMu.Lock()
	defer n.watchMu.Unlock()
	if n.watched[k] <= 1 {
		delete(n.watched, k)
	} else {
		n.watched[k]--
	}
}

func (n *Notifier) watchedHere(k domain.Key) bool {
	n.watchMu.Lock()
	defer n.watchMu.Unlock()
	return n.watched[k] > 0
}

// enqueue encodes m (without its record if that is too long) and queues
// it, unless this server is alone (see Alone).
func (n *Notifier) enqueue(m message) {
	if !n.others.Load() {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.seq++
	m.Server, m.Seq = n.id, n.seq
	b, err := json.Marshal(m)
	if err == nil && len(b) > MaxPayload {
		m.Task = nil
		b, err = json.Marshal(m)
	}
	if err != nil {
		n.logger.Error("encode notification", zap.Error(err))
		return
	}
	if len(n.queued) >= maxQueued {
		n.queued = n.queued[1:]
	}
	n.queued = append(n.queued, b)
	select {
	case n.more <- struct{}{}:
	default:
	}
}

// send sends the queued notifications, in order, until ctx ends.
func (n *Notifier) send(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.more:
		}
		for {
			n.mu.Lock()
			batch := n.queued
			n.queued = nil
			n.sending = len(batch) > 0 // cleared once sent (Stop waits for it)
			n.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			payloads := make([]string, len(batch))
			for i, b := range batch {
				payloads[i] = string(b)
			}
			for attempt := 0; ; attempt++ {
				// A connection gone silent would hold the send, and every
				// notification after it, until TCP gives up: minutes. Cut
				// short, pgx closes the connection and the pool dials anew.
				sctx, cancel := context.WithTimeout(ctx, n.sendWait)
				_, err := n.pool.Exec(sctx, "SELECT pg_notify($1, p) FROM unnest($2::text[]) WITH ORDINALITY AS u(p, i) ORDER BY i", Channel, payloads)
				cancel()
				if err == nil {
					n.sent.Add(int64(len(payloads)))
					break
				}
				if ctx.Err() != nil {
					return
				}
				if attempt == 0 {
					n.logger.Warn("send notifications", zap.Int("count", len(payloads)), zap.Error(err))
				}
				if !sleep(ctx, backoff(attempt)) {
					return
				}
			}
		}
	}
}

// listen LISTENs on a connection of its own and turns other servers'
// notifications into local ones, reconnecting when the connection drops.
func (n *Notifier) listen(ctx context.Context) {
	for attempt := 0; ; attempt++ {
		listened, err := n.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if listened {
			attempt = 0 // it had worked: start the backoff over
		}
		if attempt == 0 {
			n.logger.Warn("notification listener lost its connection; reconnecting", zap.Error(err))
		}
		if !sleep(ctx, backoff(attempt)) {
			return
		}
	}
}

// listenOnce connects, LISTENs and receives until the connection fails;
// listened says whether it got as far as LISTEN.
func (n *Notifier) listenOnce(ctx context.Context) (listened bool, err error) {
	// Parsed as the pool parses it, so that a URL with pool_* settings
	// (pool_max_conns, …: the store's) does not send them as parameters.
	cfg, err := pgxpool.ParseConfig(n.url)
	if err != nil {
		return false, err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(cctx, cfg.ConnConfig)
	cancel()
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, listenQuery); err != nil {
		return false, err
	}
	n.pid.Store(conn.PgConn().PID())
	// Bounded as a ping: after a silent loss the pool's connections may be
	// as dead as the listener's was.
	lctx, cancel := context.WithTimeout(ctx, n.ping)
	others, err := n.lookAround(lctx)
	cancel()
	if err != nil {
		return true, err
	}
	if n.listens.Add(1) == 1 {
		n.expected = others
		close(n.listened)
	} else {
		// Notifications sent while no connection listened are lost: every
		// local claim looks again, every local watcher starts over, and a
		// watch begun from now on cannot tell what it missed (Heard).
		n.heard.lost()
		n.hub.Interrupt()
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, n.idle)
		note, err := conn.WaitForNotification(wctx)
		cancel()
		if note != nil {
			n.receive(ctx, []byte(note.Payload))
		}
		switch {
		case err == nil:
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			// No news for a while: is anyone there? (A timeout leaves
			// pgx's connection usable.) The ping is the LISTEN again (a
			// no-op for a channel already listened to), not pgx's
			// "-- ping": a server joining later finds this one by its
			// session's last statement (lookAround), and after any other
			// it would think itself alone and neither side would send.
			pctx, cancel := context.WithTimeout(ctx, n.ping)
			_, err := conn.Exec(pctx, listenQuery)
			cancel()
			if err != nil {
				return true, fmt.Errorf("listener connection unanswered: %w", err)
			}
		default:
			return true, err
		}
	}
}

// receive turns another server's notification into a local one.
func (n *Notifier) receive(ctx context.Context, payload []byte) {
	// Its own come back too: skipped before decoding them (the server id
	// is the payload's first field).
	if bytes.HasPrefix(payload, n.own) {
		return
	}
	var m message
	if err := json.Unmarshal(payload, &m); err != nil {
		n.logger.Warn("notification not understood", zap.Error(err))
		return
	}
	if m.Server == n.id || !n.fresh(m.Server, m.Seq) {
		return
	}
	switch {
	case m.Hello:
		// Send from now on, then answer: every notification after the
		// answer reaches the new server.
		n.meet()
		n.enqueue(message{Ack: m.Server})
		if m.Unsent {
			// Its changes so far reached no claim or watcher here (and
			// this server, alone too until now, may have parked its claims
			// on a stock that knew nothing of them): as after a reconnect
			// of this server's own listener.
			n.heard.lost()
			n.hub.Interrupt()
		}
		return
	case m.Ack != "":
		n.meet()
		if m.Ack == n.id {
			select {
			case n.acks <- struct{}{}:
			default:
			}
		}
		return
	}
	q := domain.QueueRef{Host: m.Host, Queue: m.Queue}
	if m.Kind == "" {
		n.hub.Wake(q, m.Wake)
		return
	}
	ev := domain.Event{Kind: domain.EventKind(m.Kind), At: m.At, Worker: m.Worker, Cause: m.Cause}
	if m.Task != nil {
		t, err := domain.DecodeTask(m.Task)
		if err != nil {
			n.logger.Warn("notification with a bad record", zap.String("id", m.ID), zap.Error(err))
			return
		}
		ev.Task = t
		n.heard.note(domain.KeyOf(t), t.Attempts) // before the hub has it (Heard)
		n.hub.Publish(ev)
		n.recent.add(domain.KeyOf(t), domain.EncodeTask(t))
		return
	}
	// Too large to carry the record: wake a claim, and read the record
	// only for watchers here.
	k := domain.Key{Host: m.Host, Queue: m.Queue, ID: m.ID}
	n.heard.note(k, anyAttempt)
	if n.get == nil || !n.watchedHere(k) {
		if m.Claimable {
			n.hub.Wake(q, 1)
		}
		return
	}
	gctx, cancel := context.WithTimeout(context.WithValue(ctx, receiving{}, true), 5*time.Second)
	t, err := n.get.Get(gctx, k)
	cancel()
	if err != nil {
		n.logger.Warn("read a task for its watchers", zap.String("id", m.ID), zap.Error(err))
		if m.Claimable {
			n.hub.Wake(q, 1)
		}
		// Its watchers missed this change: carrying on, they would take
		// the next one for the task's whole story (a result never seen).
		// Cut off, they start over from a fresh read.
		n.hub.CutOff(k)
		return
	}
	ev.Task = t
	if m.Claimable && !t.Claimable(ev.At) {
		n.hub.Wake(q, 1) // the record read is a later one; the wake was due
	}
	n.hub.Publish(ev)
	n.recent.add(k, domain.EncodeTask(t))
}

// fresh reports whether notification seq of server is news: each server
// numbers what it sends in the order it sends it, so one numbered no
// higher than the last heard from that server is a repeat (a batch sent
// again after a send that timed out but was delivered). The map keeps an
// entry per server heard since this one started: one per start of another
// server.
func (n *Notifier) fresh(server string, seq uint64) bool {
	n.latestMu.Lock()
	defer n.latestMu.Unlock()
	if seq <= n.latest[server] {
		return false
	}
	n.latest[server] = seq
	return true
}

// Others reports whether another server may listen on the database
// (see Alone): once true, it stays true.
func (n *Notifier) Others() bool { return n.others.Load() }

// meet notes that another server may listen: from now on this one sends.
// The time goes first, so a reader that sees others sees it too.
func (n *Notifier) meet() {
	n.met.CompareAndSwap(0, time.Now().UnixNano())
	n.others.Store(true)
}

// Sent is how many notifications this server has sent (tests).
func (n *Notifier) Sent() int64 { return n.sent.Load() }

// ListenerPID is the backend pid of the listener's connection (0 before
// the first LISTEN), for tests that cut it.
func (n *Notifier) ListenerPID() uint32 { return n.pid.Load() }

// Listens is how many times the listener has LISTENed: 1 after Start, one
// more per reconnect.
func (n *Notifier) Listens() int64 { return n.listens.Load() }

// backoff is the wait before attempt+1: 50 ms doubling to 2 s.
func backoff(attempt int) time.Duration {
	d := 50 * time.Millisecond << min(attempt, 6)
	return min(d, 2*time.Second)
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
