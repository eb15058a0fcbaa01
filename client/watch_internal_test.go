package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// A watch whose server falls silent (no view, no ping, no pong, no close:
// a dropped route) ends with an error once watchSilence passes, instead of
// waiting for TCP to give up; a server that pings, or only answers the
// watch's pings, keeps it open however long the task takes.
func TestAWatchEndsWhenItsServerFallsSilent(t *testing.T) {
	defer func(silence, ping time.Duration) { watchSilence, watchPing = silence, ping }(watchSilence, watchPing)
	watchSilence, watchPing = 600*time.Millisecond, 50*time.Millisecond
	gone := make(chan struct{})
	defer close(gone)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		_ = conn.WriteMessage(websocket.TextMessage, []byte(`{"id":"00000000000000a1","status":"processing"}`))
		if r.URL.Path == "/q/00000000000000a1/watch" {
			<-gone // silent: it does not even read, so it answers no ping
			return
		}
		go func() { // answers pings (in its reads) until the test ends
			for {
				if _, _, err := conn.ReadMessage(); err != nil {
					return
				}
			}
		}()
		if r.URL.Path == "/q/00000000000000a3/watch" {
			// Quiet, but answering the watch's pings: 1.5 s, two and a
			// half times watchSilence, then the end.
			time.Sleep(1500 * time.Millisecond)
			_ = conn.WriteMessage(websocket.TextMessage, []byte(`{"id":"00000000000000a3","status":"finished"}`))
			_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
			<-gone
			return
		}
		// Pinging: 1.5 s of pings, two and a half times watchSilence, then
		// the end.
		for range 30 {
			time.Sleep(50 * time.Millisecond)
			if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second)); err != nil {
				return
			}
		}
		_ = conn.WriteMessage(websocket.TextMessage, []byte(`{"id":"00000000000000a2","status":"finished"}`))
		_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
		<-gone
	}))
	defer srv.Close()
	c := New(srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	watch := func(id string) (statuses []string, err error) {
		t.Helper()
		views, err := c.Watch(ctx, "q", id)
		if err != nil {
			t.Fatal(err)
		}
		for v, err := range views {
			if err != nil {
				return statuses, err
			}
			statuses = append(statuses, v.Status)
		}
		return statuses, nil
	}
	if got, err := watch("00000000000000a1"); err == nil || ctx.Err() != nil || len(got) != 1 {
		t.Errorf("watching a silent server: views %v, error %v (ctx %v); want one view, then the silence's error", got, err, ctx.Err())
	}
	if got, err := watch("00000000000000a2"); err != nil || len(got) != 2 || got[1] != "finished" {
		t.Errorf("watching a server that pings: views %v, error %v; want processing, then finished", got, err)
	}
	if got, err := watch("00000000000000a3"); err != nil || len(got) != 2 || got[1] != "finished" {
		t.Errorf("watching a server that only answers pings: views %v, error %v; want processing, then finished", got, err)
	}
}
