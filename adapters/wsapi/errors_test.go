package wsapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/taskhoster/taskhoster/adapters/index"
	"github.com/taskhoster/taskhoster/adapters/wsapi"
	"github.com/taskhoster/taskhoster/app"
)

// TestPlainRequestsGetJSON: the socket endpoints asked without an upgrade
// (curl, a browser tab), or with a broken handshake, answer a JSON error
// with a code, as every other endpoint does, and open no socket.
func TestPlainRequestsGetJSON(t *testing.T) {
	f := newFixture(t, index.New(), wsapi.Options{})
	base := "http" + strings.TrimPrefix(f.url, "ws")
	cases := []struct {
		name, path string
		header     map[string]string
		says       string
	}{
		{"work without upgrade", "/work", nil, "this is a WebSocket endpoint"},
		{"watch without upgrade", "/watch/0123456789abcdef", nil, "this is a WebSocket endpoint"},
		{"handshake without its key", "/work", map[string]string{
			"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
		}, "not a WebSocket handshake: "},
		{"old protocol version", "/work", map[string]string{
			"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "8", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
		}, "not a WebSocket handshake: unsupported version"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", base+c.path, nil)
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			data, _ := io.ReadAll(resp.Body)
			var body struct{ Error, Message string }
			if err := json.Unmarshal(data, &body); err != nil {
				t.Fatalf("%d %q is not JSON", resp.StatusCode, data)
			}
			if resp.StatusCode != 400 || body.Error != "invalid_request" || !strings.Contains(body.Message, c.says) ||
				resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("got %d %s %q, want 400 invalid_request saying %q", resp.StatusCode, resp.Header.Get("Content-Type"), data, c.says)
			}
		})
	}
	if n := f.sockets.Open(f.q.Host); n != 0 {
		t.Errorf("%d sockets open after refusals", n)
	}
}

// TestMessageFieldsAreStrict: a message field no message has is refused
// naming it and the fields messages have; a field of the wrong type
// says which it must be; the socket stays open and the task untouched.
func TestMessageFieldsAreStrict(t *testing.T) {
	f := newFixture(t, index.New(), wsapi.Options{})
	c := f.dial(t, "/work")
	cases := []struct{ send, want string }{
		{`{"type":"claim","ref":1,"qeury":{}}`,
			`{"type":"error","ref":1,"error":"invalid_request","message":"unknown field \"qeury\" (a message takes type, ref, id, worker, query, progress, result, delay, reason)","details":[]}`},
		{`{"type":"heartbeat","ref":3,"id":"0123456789abcdef","lease":{}}`,
			`{"type":"error","ref":3,"error":"invalid_request","message":"unknown field \"lease\" (a message takes type, ref, id, worker, query, progress, result, delay, reason)","details":[]}`},
		{`{"type":"release","ref":4,"id":"0123456789abcdef","delay":"soon"}`,
			`{"type":"error","ref":4,"error":"invalid_json","message":"\"delay\" must be a number, not a string","details":[]}`},
		{`{"type":"claim","ref":5,`,
			`{"type":"error","error":"invalid_json","message":"a message is not valid JSON: it ends before its value does","details":[]}`},
	}
	for _, tc := range cases {
		if err := c.WriteMessage(websocket.TextMessage, []byte(tc.send)); err != nil {
			t.Fatal(err)
		}
		if got := read(t, c); got != tc.want {
			t.Errorf("%s\n got %s\nwant %s", tc.send, got, tc.want)
		}
	}
	// The socket is still open, and no claim was left waiting: a task
	// posted now goes to the next claim, and to none of the refused ones.
	ctx := context.Background()
	task, err := f.svc.Post(ctx, f.q, "", []byte(`{"name":"<b>&</b>"}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"claim","ref":6}`)); err != nil {
		t.Fatal(err)
	}
	got := read(t, c)
	if !strings.HasPrefix(got, `{"type":"task","ref":6,"id":"`+task.ID+`","item":{"name":"<b>&</b>"}`) {
		t.Errorf("claim after refusals: %s (the item must not be HTML-escaped)", got)
	}
}

// TestMessagesMayNameTheirWorker: a socket message is the HTTP body of the
// same call with type and id (SPEC §11), and those bodies name the worker.
// The socket speaks for the worker it connected as (?worker=): a message
// naming that worker is taken as it is, one naming another is refused and
// changes nothing.
func TestMessagesMayNameTheirWorker(t *testing.T) {
	f := newFixture(t, index.New(), wsapi.Options{})
	c := f.dial(t, "/work?worker=w1")
	task, err := f.svc.Post(context.Background(), f.q, "", []byte(`{"url":"a"}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	send := func(msg string) map[string]any {
		t.Helper()
		if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		var reply map[string]any
		if err := json.Unmarshal([]byte(read(t, c)), &reply); err != nil {
			t.Fatal(err)
		}
		return reply
	}
	if r := send(`{"type":"claim","ref":1,"worker":"w1"}`); r["type"] != "task" || r["id"] != task.ID {
		t.Fatalf("claim naming its worker: %v, want the task", r)
	}
	if r := send(`{"type":"heartbeat","ref":2,"id":"` + task.ID + `","worker":"w1"}`); r["type"] != "ack" || r["accepted"] != true {
		t.Errorf("heartbeat naming its worker: %v, want accepted", r)
	}
	if r := send(`{"type":"progress","ref":3,"id":"` + task.ID + `","worker":"w2","progress":1}`); r["type"] != "error" || r["error"] != "invalid_request" {
		t.Errorf("progress naming another worker: %v, want invalid_request", r)
	}
	if got, err := f.svc.Get(context.Background(), f.q, task.ID); err != nil || got.Progress != nil {
		t.Errorf("after the refused progress the task has progress %s (%v), want none", got.Progress, err)
	}
	if r := send(`{"type":"result","ref":4,"id":"` + task.ID + `","worker":"w1","result":{}}`); r["type"] != "ack" || r["accepted"] != true {
		t.Errorf("result naming its worker: %v, want accepted", r)
	}
}
