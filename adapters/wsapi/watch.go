package wsapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/adapters/httperr"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
)

// watchReadLimit bounds what a watcher may send: nothing is expected but
// control frames.
const watchReadLimit = 4 << 10

// Watch serves the watch socket of task id of q (SPEC §3): the status view
// at once, then a view on every change, and after a terminal view a close
// with code 1000. httpapi has checked access and that the task exists.
// current, if not nil, gives q as the configuration in force has it now, or
// why this watcher may no longer read it; Recheck asks it after a reload.
func (s *Sockets) Watch(w http.ResponseWriter, r *http.Request, q *domain.Queue, id string, current func() (*domain.Queue, error)) {
	if !websocket.IsWebSocketUpgrade(r) {
		s.refuse(w, errNotUpgrade, "watch socket refused")
		return
	}
	leave, refused := s.enter(q.Host)
	if refused != nil {
		s.refuse(w, refused, "watch socket refused")
		return
	}
	defer leave()

	// The task and every change after it (app.Service.Watch).
	watch, err := s.svc.Watch(r.Context(), q, id, s.opts.WatchBuffer)
	if err != nil {
		s.refuse(w, err, "watch: read the task")
		return
	}
	defer watch.Close()

	conn, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered the request
	}
	conn.SetReadLimit(watchReadLimit)
	wt := &watcher{
		peer: newPeer(conn, s.opts, s.stop),
		s:    s, q: q, id: id, watch: watch, current: current,
		logger: s.logger.With(zap.String("host", q.Host), zap.String("queue", q.Name), zap.String("id", id)),
	}
	defer s.track(wt)()
	wt.recheck() // as a worker socket does: a reload before track missed it
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		wt.read()
	}()
	wt.follow()
	// Wait for the peer to answer our close frame (or to be dropped).
	<-gone
	wt.finish()
}

// watcher is one watch socket.
type watcher struct {
	*peer
	s      *Sockets
	q      *domain.Queue
	id     string
	watch  *app.Watch
	logger *zap.Logger
	// current resolves the queue and the watcher's status right again
	// (Work's current); nil never lets the watcher go.
	current func() (*domain.Queue, error)
}

// recheck closes the socket with 1008 (policy) if the watcher's queue went
// or it may no longer read the task's status (see Sockets.Recheck). A
// watch reads only the task's changes, which the queue's other settings do
// not shape, so the queue it opened on stays its own.
func (wt *watcher) recheck() {
	if wt.current == nil {
		return
	}
	if _, err := wt.current(); err != nil {
		wt.close(websocket.ClosePolicyViolation, string(httperr.Of(err).Body.Error))
	}
}

// read takes whatever the peer sends (only control frames matter: pongs
// keep it alive, its close frame ends the watch) until the socket dies.
func (wt *watcher) read() {
	defer wt.cancel()
	for {
		if _, _, err := wt.conn.ReadMessage(); err != nil {
			return
		}
		wt.alive()
	}
}

// follow sends the views until the task is terminal or gone, the watcher
// falls behind, or the socket dies.
func (wt *watcher) follow() {
	first := wt.watch.Task
	if first.Status.Terminal() {
		wt.final(first)
		return
	}
	if !wt.sendBytes(encodeView(first.View())) {
		return
	}
	for {
		ev, err := wt.watch.Next(wt.ctx)
		switch {
		case errors.Is(err, app.ErrWatchLost):
			// Cut off for falling behind: closing tells the watcher to come
			// back for a fresh view, where skipping would show a gap.
			wt.close(websocket.CloseTryAgainLater, "watcher fell behind; watch again")
			return
		case err != nil && wt.ctx.Err() != nil:
			return // the socket is gone
		case err != nil:
			// The change could not be shown: its commit failed (a read
			// waits for it, Service.shown), and so will every later one
			// until a restart. Returning without a close would leave the
			// socket open, answering pings, with no view ever to come.
			wt.fail(err)
			return
		case ev.Kind == domain.EventCleaned:
			wt.close(websocket.CloseNormalClosure, "task cleaned")
			return
		case ev.Kind == domain.EventFetched:
			continue // a fetch changes nothing a producer sees
		case ev.Task.Status.Terminal():
			wt.final(ev.Task)
			return
		}
		if !wt.sendBytes(encodeView(ev.Task.View())) {
			return
		}
	}
}

// fail closes the socket with 1011 (internal error) and err's code as the
// reason, as the error table gives it; a server fault is logged, its cause
// never sent.
func (wt *watcher) fail(err error) {
	reply := httperr.Of(err)
	if reply.ServerFault() {
		wt.logger.Error("watch: show a change", zap.Error(err))
	}
	wt.close(websocket.CloseInternalServerErr, string(reply.Body.Error))
}

// final sends the terminal view t and closes with 1000. The view is read
// again with Status, which makes it count as the task's fetch (stamped
// once, however many watchers and readers see it).
func (wt *watcher) final(t domain.Task) {
	view, err := wt.s.svc.Status(context.WithoutCancel(wt.ctx), wt.q, wt.id)
	switch {
	case err != nil:
		if !errors.Is(err, domain.ErrNotFound) {
			wt.logger.Error("watch: fetch the terminal view", zap.Error(err))
		}
		view = t.View() // cleaned already (or unreadable): the snapshot is the same view
	case !view.Status.Terminal():
		// A manager's retry came between: the watch ends on the terminal
		// view it followed, as the last view before a 1000 close must be.
		view = t.View()
	}
	if wt.sendBytes(encodeView(view)) {
		wt.close(websocket.CloseNormalClosure, "task is "+string(view.Status))
	}
}

func encodeView(v domain.View) []byte { return encode(v) }
