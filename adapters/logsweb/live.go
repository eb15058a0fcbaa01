package logsweb

import (
	_ "embed"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// The pages follow new lines while a `logs pull --follow` adds them: /live
// is a stream of server-sent events that says the number of the newest
// stored line whenever it changes, and live.js, the pages' one script,
// fetches the page again on news and swaps in the parts marked data-swap
// (on an older page of the list it only says that newer events came).
// The pull is another process, so the stream looks at the store; a look is
// one index read, and there is one stream per open tab.

// pollEvery is how often a stream looks for new lines.
const pollEvery = 500 * time.Millisecond

//go:embed live.js
var liveJS []byte

// script serves live.js. It is the only script, from this server, so the
// pages' CSP can allow 'self' and still refuse any inline script a name or
// a body might smuggle in.
func (h *Handler) script(w http.ResponseWriter, _ *http.Request) {
	hd := w.Header()
	hd.Set("Content-Type", "text/javascript; charset=utf-8")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Cache-Control", "no-cache")
	_, _ = w.Write(liveJS)
}

// live streams the newest line's number: GET /live, as "event: latest"
// with the number as data, at once and then on every change, until the
// client goes or the server shuts down (Close).
func (h *Handler) live(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	// A stream outlives any write timeout the server sets for pages.
	_ = rc.SetWriteDeadline(time.Time{})
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	// A broken stream is tried again after a second (the browser does it).
	if _, err := fmt.Fprint(w, "retry: 1000\n\n"); err != nil {
		return
	}
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var sent int64 = -1
	for {
		seq, err := h.store.Latest(r.Context())
		if err != nil {
			if r.Context().Err() == nil {
				h.onError(fmt.Errorf("live: %w", err))
			}
			return
		}
		if seq != sent {
			if _, err := fmt.Fprintf(w, "event: latest\ndata: %s\n\n", strconv.FormatInt(seq, 10)); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			sent = seq
		}
		select {
		case <-tick.C:
		case <-r.Context().Done():
			return
		case <-h.closing:
			return
		}
	}
}

// Close ends the live streams, so that a server shutting down need not
// wait for the tabs to go: give it to http.Server.RegisterOnShutdown. The
// tabs reconnect to whatever serves next. Pages are still served.
func (h *Handler) Close() {
	h.closeOnce.Do(func() { close(h.closing) })
}
