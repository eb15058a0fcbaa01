package e2e

import (
	"net/http"
	"testing"
)

// TestSocketsPerHostAreCapped: past --max-sockets open sockets on a host, a
// new one is refused with 503 too_many_sockets; closing one makes room.
func TestSocketsPerHostAreCapped(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t), "--max-sockets", "2")
	first := s.dial("/resize/work?worker=a", boxToken)
	s.dial("/resize/work?worker=b", boxToken)
	_, resp, err := s.dialRaw("/resize/work?worker=c", boxToken)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("third socket: err %v, response %+v; want 503", err, resp)
	}
	first.c.Close()
	eventually(t, "a slot to free up", func() bool {
		c, _, err := s.dialRaw("/resize/work?worker=c", boxToken)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// TestWaitingClaimsAreCapped: past --max-waiting claims waiting for work,
// another waiting claim is refused with 503 too_many_waiting, while a claim
// that does not wait is still answered.
func TestWaitingClaimsAreCapped(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t), "--max-waiting", "1")
	k := s.dial("/resize/work?worker=a", boxToken)
	k.send(`{"type":"claim","ref":1}`)
	k.send(`{"type":"claim","ref":2}`)
	reply := k.next()
	if reply["type"] != "error" || reply["error"] != "too_many_waiting" || reply["ref"] != 2.0 {
		t.Fatalf("second waiting claim: %v", reply)
	}
	r := s.do("POST", "/resize/claim", boxToken, `{"wait":5}`)
	if r.Status != http.StatusServiceUnavailable || r.JSON(t)["error"] != "too_many_waiting" {
		t.Fatalf("HTTP waiting claim: %d %s", r.Status, r.Body)
	}
	if r := s.do("POST", "/resize/claim", boxToken, `{"wait":0}`); r.Status != http.StatusNoContent {
		t.Fatalf("claim without waiting: %d %s", r.Status, r.Body)
	}
	// The waiting socket claim still gets the next task.
	id := s.post("resize", aliceToken, `{"url":"x"}`)
	if got := k.next(); got["type"] != "task" || got["id"] != id {
		t.Fatalf("waiting claim got %v", got)
	}
}
