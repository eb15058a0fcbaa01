package e2e

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

// TestReloadReachesOpenWorkerSockets: a queue file changed while a worker
// socket is open applies to that socket's later messages, as to a new
// request (SPEC §1 "Live reload"): a stricter result schema refuses a result
// the old one took, and a worker taken off the queue's work list can neither
// hand in nor claim, and is let go with its tasks back to pending.
func TestReloadReachesOpenWorkerSockets(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	s := start(t, d)
	queueFile := filepath.Join(d.hosts, host, "taskhoster-queues", "resize.json")
	const item = `{"type":"object","required":["url"],"properties":{"url":{"type":"string"}}}`

	k := s.dial("/resize/work?worker=w1", boxToken)
	first := s.post("resize", aliceToken, `{"url":"a"}`)
	if got := k.claimTask(1)["id"]; got != first {
		t.Fatalf("claimed %v, want %s", got, first)
	}

	// The result schema now wants "thumb".
	writeFile(t, queueFile, `{"item":`+item+`,
		"result": {"type":"object","required":["thumb"]},
		"access": {"post":["alice"], "status":["alice"], "work":["box"]}}`)
	eventually(t, "the stricter result schema", func() bool {
		return strings.Contains(string(s.do("GET", "/resize", aliceToken, "").Body), "thumb")
	})
	k.send(`{"type":"result","ref":2,"id":"` + first + `","result":{}}`)
	if m := k.next(); m["type"] != "error" || m["error"] != "invalid_result" {
		t.Errorf("a result the new schema refuses, on a socket opened before the reload: %v, want invalid_result", m)
	}

	// A second socket's claim waits for a task while box is taken off the
	// work list: the task it then takes must not reach it.
	waiting := s.dial("/resize/work?worker=w2", boxToken)
	waiting.send(`{"type":"claim","ref":7}`)
	eventually(t, "the claim to wait", func() bool {
		resp, err := http.Get(s.admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return strings.Contains(readAll(t, resp), `taskhoster_queue_claims_waiting{host="`+host+`",queue="resize"} 1`)
	})

	// box is taken off the work list.
	writeFile(t, queueFile, `{"item":`+item+`,
		"access": {"post":["alice"], "status":["alice"], "work":["alice"]}}`)
	eventually(t, "box to lose the work right", func() bool {
		return s.do("POST", "/resize/claim", boxToken, `{}`).Status == 403
	})
	second := s.post("resize", aliceToken, `{"url":"b"}`)
	if m := waiting.next(); m["type"] != "error" || m["error"] != "forbidden" || m["ref"] != float64(7) {
		t.Errorf("a claim that waited while its worker lost the right: %v, want forbidden", m)
	}
	if code := waiting.closed(); code != websocket.ClosePolicyViolation {
		t.Errorf("waiting socket closed with %d, want %d", code, websocket.ClosePolicyViolation)
	}
	k.send(`{"type":"claim","ref":3}`)
	if m := k.next(); m["type"] != "error" || m["error"] != "forbidden" || m["ref"] != float64(3) {
		t.Errorf("a claim by a worker no longer allowed: %v, want forbidden", m)
	}
	if code := k.closed(); code != websocket.ClosePolicyViolation {
		t.Errorf("socket closed with %d, want %d", code, websocket.ClosePolicyViolation)
	}
	for _, id := range []string{first, second} {
		eventually(t, "task "+id+" pending again, its worker let go", func() bool {
			return exists(s.taskFile("resize", "pending", id))
		})
	}
}
