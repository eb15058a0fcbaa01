package pgnotify_test

import (
	"context"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/adapters/pgnotify"
	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// A listener whose connection goes silent, neither closed nor answering
// (a dropped route, a peer gone without a word), is found out by its ping
// and listens again on a new connection, well before TCP would tell: then
// its local claims look once more, and news flows again.
func TestListenerNoticesASilentlyLostConnection(t *testing.T) {
	ctx, a, b, p := behindAFreezer(t, func(b *pgnotify.Notifier) { b.SetListenCheck(100*time.Millisecond, 300*time.Millisecond) })
	_, done := parked(t, ctx, b)

	p.freeze()
	woken(t, done, 10*time.Second, "the claim on B was not woken: its listener did not notice its silent connection")
	if got := b.Listens(); got < 2 {
		t.Errorf("B listened %d times, want a second time after the silence", got)
	}
	_, done = parked(t, ctx, b)
	a.Publish(posted(1))
	woken(t, done, 5*time.Second, "after B listened again a post on A did not wake it")
}

// A sender whose connection goes silent gives up on it after its wait and
// sends again on a new one: news from the server does not stop at the
// first send that never returns, as it would until TCP gave up (minutes).
func TestSenderNoticesASilentlyLostConnection(t *testing.T) {
	ctx, a, b, p := behindAFreezer(t, func(b *pgnotify.Notifier) { b.SetSendWait(300 * time.Millisecond) })
	_, done := parked(t, ctx, a)

	p.freeze() // the sender's pooled connection with it
	b.Publish(posted(1))
	woken(t, done, 10*time.Second, "a post on B did not wake the claim on A: its sender waits on its silent connection")
}

// behindAFreezer starts two notifiers on one new database: a connected
// directly, b (tuned by tune before its start) through p, a freezer. ctx
// ends after 30 s.
func behindAFreezer(t *testing.T, tune func(*pgnotify.Notifier)) (ctx context.Context, a, b *pgnotify.Notifier, p *freezer) {
	t.Helper()
	dbURL := pgtest.Database(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	p = newFreezer(t, u.Host)
	u.Host = p.addr()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	a = start(t, dbURL, nil)
	b = pgnotify.New(notify.NewHub(), u.String(), nil, nil)
	tune(b)
	if err := b.Start(ctx); err != nil {
		t.Fatalf("start B: %v", err)
	}
	t.Cleanup(b.Stop)
	// First: the pool's connections that froze would keep Stop waiting
	// for PostgreSQL to hear their goodbye.
	t.Cleanup(p.close)
	return ctx, a, b, p
}

// freezer forwards loopback connections to target. freeze silences the
// connections it carries then (nothing more is forwarded either way, and
// nothing closed), as a dropped route leaves them; later ones are
// forwarded as before.
type freezer struct {
	ln     net.Listener
	target string
	closed chan struct{}
	once   sync.Once

	mu     sync.Mutex
	conns  []net.Conn
	frozen []chan struct{}
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, target: target, closed: make(chan struct{})}
	go f.accept()
	t.Cleanup(f.close)
	return f
}

func (f *freezer) addr() string { return f.ln.Addr().String() }

func (f *freezer) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		d, err := net.Dial("tcp", f.target)
		if err != nil {
			c.Close()
			continue
		}
		stop := make(chan struct{})
		f.mu.Lock()
		f.conns = append(f.conns, c, d)
		f.frozen = append(f.frozen, stop)
		f.mu.Unlock()
		go f.pipe(d, c, stop)
		go f.pipe(c, d, stop)
	}
}

// pipe copies from src to dst until stop, then swallows what comes, until
// the freezer closes.
func (f *freezer) pipe(dst, src net.Conn, stop <-chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-stop:
			<-f.closed
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // closed, or the peer's EOF
		}
	}
}

func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, stop := range f.frozen {
		close(stop)
	}
	f.frozen = nil
}

func (f *freezer) close() {
	f.once.Do(func() {
		f.ln.Close()
		close(f.closed)
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, c := range f.conns {
			c.Close()
		}
	})
}
