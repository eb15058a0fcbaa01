package client

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// fakeServer is a session on a worker socket of a server on loopback that
// answers each message the session sends with answer.
func fakeServer(t *testing.T, answer func(conn *websocket.Conn, m message)) *session {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		for {
			var m message
			if err := conn.ReadJSON(&m); err != nil {
				return
			}
			answer(conn, m)
		}
	}))
	t.Cleanup(srv.Close)
	conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/q/work", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(conn, slog.New(slog.DiscardHandler))
	t.Cleanup(s.close)
	return s
}

// taskFor is the task message answering claim m with task id.
func taskFor(m message, id string) message {
	return message{Type: "task", Ref: m.Ref, ID: id, Item: []byte(`{}`), Attempts: 1, Lease: &Lease{Worker: "w", Until: 1}}
}

// TestACancelReachesTheLatestClaimOfATask: a task given back can be handed
// out again on the same socket (to another slot, or the same one) before
// the hand-in of its older claim is done with it. The server's cancel then
// concerns the new claim, and must reach its handler even after the older
// claim stopped watching. The server here hands out the same task to every
// claim, and sends the cancel just before it answers a heartbeat.
func TestACancelReachesTheLatestClaimOfATask(t *testing.T) {
	const id = "00000000000000a1"
	s := fakeServer(t, func(conn *websocket.Conn, m message) {
		switch m.Type {
		case "claim":
			_ = conn.WriteJSON(taskFor(m, id))
		case "heartbeat":
			_ = conn.WriteJSON(map[string]string{"type": "cancelled", "id": id})
			_ = conn.WriteJSON(message{Type: "ack", Ref: m.Ref})
		}
	})
	ctx := context.Background()

	claim := func() (<-chan struct{}, func()) {
		t.Helper()
		reply, err := s.request(ctx, message{Type: "claim"}, nil, nil)
		if err != nil || reply.ID != id {
			t.Fatalf("claim = %+v, %v", reply, err)
		}
		return s.cancelSignal(id)
	}
	_, releaseOlder := claim()
	newer, _ := claim()
	releaseOlder() // the older claim's hand-in is done
	// The reader handles the cancel before the heartbeat's ack.
	if _, err := s.request(ctx, message{Type: "heartbeat", ID: id}, nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-newer:
	default:
		t.Fatal("the cancel of the task's newer claim did not reach it: its handler would keep working a cancelled task")
	}
}

// TestAReplyTakenAsItsClaimIsGivenUpIsNotDropped: a claim given up (its
// ctx ended, the worker draining) in the moment the reader has taken its
// reply's waiter but not yet handed it the reply still gets the task: the
// task is held on this socket already, and dropped, nobody would run it or
// give it back until its lease lapsed.
func TestAReplyTakenAsItsClaimIsGivenUpIsNotDropped(t *testing.T) {
	const id = "00000000000000a1"
	s := fakeServer(t, func(conn *websocket.Conn, m message) { _ = conn.WriteJSON(taskFor(m, id)) })

	ctx, giveUp := context.WithCancel(context.Background())
	returned := make(chan struct{})
	// The claim is given up just as the reader takes its waiter; the reader
	// hands over the reply once the claim has returned, or a moment later.
	s.tookReply = func() {
		giveUp()
		select {
		case <-returned:
		case <-time.After(200 * time.Millisecond):
		}
	}
	reply, err := s.request(ctx, message{Type: "claim"}, nil, nil)
	close(returned)
	if err != nil || reply.ID != id {
		t.Fatalf("claim = %+v, %v; want the task the reader had taken for it", reply, err)
	}
}
