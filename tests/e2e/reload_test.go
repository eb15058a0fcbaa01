package e2e

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestReloadReachesOpenSockets: a queue file changed while sockets are open
// applies to them as to a new request (SPEC §1 "Live reload"). A stricter
// result schema refuses a result the old one took; a worker taken off the
// queue's work list is let go at once (close 1008), its waiting claim
// dropped before it takes a task and its task back to pending; a watcher
// taken off the status list is let go too.
func TestReloadReachesOpenSockets(t *testing.T) {
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
		"access": {"post":["alice"], "status":["alice","box"], "work":["box"]}}`)
	eventually(t, "the stricter result schema", func() bool {
		return strings.Contains(string(s.do("GET", "/resize", aliceToken, "").Body), "thumb")
	})
	k.send(`{"type":"result","ref":2,"id":"` + first + `","result":{}}`)
	if m := k.next(); m["type"] != "error" || m["error"] != "invalid_result" {
		t.Errorf("a result the new schema refuses, on a socket opened before the reload: %v, want invalid_result", m)
	}

	// A second socket's claim waits for a task, and box watches the first.
	waiting := s.dial("/resize/work?worker=w2", boxToken)
	waiting.send(`{"type":"claim","ref":7}`)
	s.claimsWaiting("resize", 1)
	watch := s.dial("/resize/"+first+"/watch", boxToken)
	if m := watch.next(); m["id"] != first || m["status"] != "processing" {
		t.Fatalf("first view %v", m)
	}

	// box is taken off the work and status lists: every socket of box is
	// let go, though none of them says anything.
	writeFile(t, queueFile, `{"item":`+item+`,
		"access": {"post":["alice"], "status":["alice"], "work":["alice"]}}`)
	for _, c := range []struct {
		name string
		k    *socket
	}{{"holding", k}, {"waiting", waiting}} {
		if m := c.k.next(); m["type"] != "error" || m["error"] != "forbidden" {
			t.Errorf("%s worker socket after box lost the work right: %v, want forbidden", c.name, m)
		}
		if code := c.k.closed(); code != websocket.ClosePolicyViolation {
			t.Errorf("%s worker socket closed with %d, want %d", c.name, code, websocket.ClosePolicyViolation)
		}
	}
	if code := watch.closed(); code != websocket.ClosePolicyViolation {
		t.Errorf("watch socket closed with %d, want %d", code, websocket.ClosePolicyViolation)
	}
	eventually(t, "task "+first+" pending again, its worker let go", func() bool {
		return exists(s.taskFile("resize", "pending", first))
	})

	// The waiting claim was dropped, not left to take the next task.
	second := s.post("resize", aliceToken, `{"url":"b"}`)
	claim := func() map[string]any {
		r := s.do("POST", "/resize/claim", aliceToken, `{}`)
		if r.Status != http.StatusOK {
			t.Fatalf("claim as alice: %d %s", r.Status, r.Body)
		}
		return r.JSON(t)
	}
	if got := claim(); got["id"] != first {
		t.Errorf("alice claimed %v, want %s back", got["id"], first)
	}
	if got := claim(); got["id"] != second || got["attempts"] != float64(1) {
		t.Errorf("alice claimed %v, want %s at its first attempt", got, second)
	}
}

// TestReloadEndsAWaitingClaim: an HTTP claim waiting (a long poll) when a
// reload takes its worker off the queue's work list is answered 403 at
// once, before it takes a task: the task posted next is claimed by the
// worker still allowed, at its first attempt.
func TestReloadEndsAWaitingClaim(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	s := start(t, d)
	queueFile := filepath.Join(d.hosts, host, "taskhoster-queues", "resize.json")
	const item = `{"type":"object","required":["url"],"properties":{"url":{"type":"string"}}}`

	type answer struct {
		status int
		body   string
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		req, err := http.NewRequest("POST", s.url+"/resize/claim", strings.NewReader(`{"wait":30}`))
		if err != nil {
			answered <- answer{err: err}
			return
		}
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+boxToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		answered <- answer{resp.StatusCode, string(body), err}
	}()
	s.claimsWaiting("resize", 1)

	writeFile(t, queueFile, `{"item":`+item+`,
		"access": {"post":["alice"], "status":["alice"], "work":["alice"]}}`)
	select {
	case a := <-answered:
		if a.err != nil || a.status != http.StatusForbidden || !strings.Contains(a.body, `"forbidden"`) {
			t.Errorf("the waiting claim after box lost the work right: %d %s %v, want 403 forbidden", a.status, a.body, a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting claim was not ended by the reload")
	}

	id := s.post("resize", aliceToken, `{"url":"a"}`)
	r := s.do("POST", "/resize/claim", aliceToken, `{}`)
	if r.Status != http.StatusOK {
		t.Fatalf("claim as alice: %d %s", r.Status, r.Body)
	}
	if got := r.JSON(t); got["id"] != id || got["attempts"] != float64(1) {
		t.Errorf("alice claimed %v, want %s at its first attempt", got, id)
	}
}

// claimsWaiting waits until n claims wait for a task of queue, as the
// server's metrics say.
func (s *server) claimsWaiting(queue string, n float64) {
	s.t.Helper()
	name := `taskhoster_queue_claims_waiting{host="` + host + `",queue="` + queue + `"}`
	eventually(s.t, fmt.Sprintf("%v claims to wait on %s", n, queue), func() bool { return metricValue(s.metrics(), name) == n })
}
