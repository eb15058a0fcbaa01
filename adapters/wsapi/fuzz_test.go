package wsapi_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/taskhoster/taskhoster/adapters/index"
	"github.com/taskhoster/taskhoster/adapters/wsapi"
)

// FuzzWorkerMessage sends arbitrary frames on one worker socket. Whatever
// comes, every reply is a JSON object with a type, and the socket stays
// open: a sentinel message sent after each input is still answered.
func FuzzWorkerMessage(f *testing.F) {
	for _, seed := range []string{
		`{"type":"claim","ref":1}`,
		`{"type":"claim","ref":2,"query":{"type":"object"}}`,
		`{"type":"claim","query":{"type":7}}`,
		`{"type":"progress","ref":3,"id":"0123456789abcdef","progress":{"percent":1}}`,
		`{"type":"result","ref":[1,2],"id":"0123456789abcdef","result":null}`,
		`{"type":"result","id":"../../etc/passwd","result":1}`,
		`{"type":"heartbeat","ref":4,"id":"0123456789abcdef"}`,
		`{"type":"heartbeat"}`,
		`{"type":"release","ref":5,"id":"0123456789abcdef","delay":1.5,"reason":{"why":"busy"}}`,
		`{"type":"release","id":"0123456789abcdef","delay":-1}`,
		`{"type":"release","id":"0123456789abcdef","delay":1e300}`,
		`{"type":"release","id":"0123456789abcdef","delay":"soon"}`,
		`{"type":"fail","ref":6,"id":"0123456789abcdef","reason":"broken"}`,
		`{"type":"fail","id":"0123456789abcdef"}`,
		`{"type":"nope"}`,
		// Unknown fields and fields of the wrong type (issue 15).
		`{"type":"claim","ref":7,"qeury":{}}`,
		`{"type":"claim","ref":8,"id":"0123456789abcdef"}`,
		`{"type":"heartbeat","id":"0123456789abcdef","progress":1}`,
		`{"type":"progress","id":7,"progress":1}`,
		`{"type":"result","ref":{"a":1},"id":"0123456789abcdef","result":"<b>&</b>","extra":1}`,
		`{"type":"claim"} {"type":"claim"}`,
		`{"type":1}`,
		// The worker field: the socket's own name, another, the wrong type.
		`{"type":"heartbeat","id":"0123456789abcdef","worker":"box"}`,
		`{"type":"result","id":"0123456789abcdef","worker":"someone else","result":1}`,
		`{"type":"claim","worker":7}`,
		`[]`, `null`, `{`, ``, "\xff",
	} {
		f.Add([]byte(seed))
	}
	fx := newFixture(f, index.New(), wsapi.Options{})
	c := fx.dial(f, "/work")
	const sentinel = `{"type":"progress","ref":"sentinel","id":"0000000000000000","progress":1}`
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := c.WriteMessage(websocket.TextMessage, data); err != nil {
			t.Fatalf("socket closed before %q: %v", data, err)
		}
		if err := c.WriteMessage(websocket.TextMessage, []byte(sentinel)); err != nil {
			t.Fatalf("socket closed after %q: %v", data, err)
		}
		for {
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, reply, err := c.ReadMessage()
			if err != nil {
				t.Fatalf("after %q the socket died: %v", data, err)
			}
			var m struct {
				Type string          `json:"type"`
				Ref  json.RawMessage `json:"ref"`
			}
			if err := json.Unmarshal(reply, &m); err != nil || m.Type == "" {
				t.Fatalf("after %q, reply %q is not a typed JSON object", data, reply)
			}
			if string(m.Ref) == `"sentinel"` {
				return
			}
		}
	})
}
