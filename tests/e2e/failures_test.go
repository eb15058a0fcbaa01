package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// SPEC §11 over HTTP and the worker socket: delays, priorities, heartbeats,
// give-backs, dead letters and failures.
//
// Some of these tests need the index to hold tasks back until their
// notBefore, order claims by priority and keep notBefore, priority and
// failure in the records it hands out; each says so.

// failureQueues adds the queues of these tests to a hosts folder (before
// the server starts):
//   - plain: everything public, a long lease, no retries.
//   - retry: everything public, two attempts, a 1 s retry base, reasons
//     must be objects.
func failureQueues(t *testing.T, d dirs) {
	t.Helper()
	queues := filepath.Join(d.hosts, host, "taskhoster-queues")
	writeFile(t, filepath.Join(queues, "plain.json"), `{
		"item": {},
		"settings": {"leaseSeconds": 60},
		"access": {"post": "public", "status": "public", "work": "public"}
	}`)
	writeFile(t, filepath.Join(queues, "retry.json"), `{
		"item": {}, "failure": {"type": "object"},
		"settings": {"leaseSeconds": 60, "maxAttempts": 2, "retryBaseSeconds": 1},
		"access": {"post": "public", "status": "public", "work": "public"}
	}`)
}

func startFailures(t *testing.T) *server {
	t.Helper()
	d := newDirs(t)
	failureQueues(t, d)
	return start(t, d)
}

// claimHTTP claims a task of queue as worker, waiting up to wait seconds;
// it returns the claim reply, or nil on 204.
func (s *server) claimHTTP(queue, worker string, wait float64) map[string]any {
	s.t.Helper()
	r := s.do("POST", "/"+queue+"/claim", "", fmt.Sprintf(`{"worker":%q,"wait":%g}`, worker, wait))
	switch r.Status {
	case http.StatusNoContent:
		return nil
	case http.StatusOK:
		return r.JSON(s.t)
	}
	s.t.Fatalf("claim on %s: %d %s", queue, r.Status, r.Body)
	return nil
}

// claimed posts {} to queue and claims it as worker w1; it returns the id.
func (s *server) claimed(queue string) string {
	s.t.Helper()
	id := s.post(queue, "", `{}`)
	if c := s.claimHTTP(queue, "w1", 0); c == nil || c["id"] != id {
		s.t.Fatalf("claim on %s: %v, want task %s", queue, c, id)
	}
	return id
}

// call sends a worker's call about task id (heartbeat, release, fail,
// result) and expects 200.
func (s *server) call(queue, id, what, body string) map[string]any {
	s.t.Helper()
	r := s.do("POST", "/"+queue+"/"+id+"/"+what, "", body)
	if r.Status != http.StatusOK {
		s.t.Fatalf("%s of %s: %d %s", what, id, r.Status, r.Body)
	}
	return r.JSON(s.t)
}

// record reads a task's file from a state directory.
func (s *server) record(queue, state, id string) map[string]any {
	s.t.Helper()
	data, err := os.ReadFile(s.taskFile(queue, state, id))
	if err != nil {
		s.t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		s.t.Fatalf("task file %q: %v", data, err)
	}
	return m
}

// eventOf is the last event line of kind for task id, or nil.
func (s *server) eventOf(id, kind string) map[string]any {
	var found map[string]any
	for _, ev := range s.events() {
		if ev["id"] == id && ev["event"] == kind {
			found = ev
		}
	}
	return found
}

// wantReply checks a reply against what it should be.
func wantReply(t *testing.T, what string, got, want map[string]any) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

func nowMillis() int64 { return time.Now().UnixMilli() }

// TestDelayedPost: a task posted with delay or notBefore is not claimable
// before its time, and a claim waiting for it wakes once its time has come.
// Needs the index to enforce notBefore.
func TestDelayedPost(t *testing.T) {
	t.Parallel()
	s := startFailures(t)

	before := nowMillis()
	id := s.post("plain?delay=1", "", `{"n":1}`)
	posted := nowMillis()
	if c := s.claimHTTP("plain", "w1", 0); c != nil {
		t.Fatalf("a task delayed by 1 s was claimed at once: %v", c)
	}
	c := s.claimHTTP("plain", "w1", 5)
	got := nowMillis()
	if c == nil || c["id"] != id {
		t.Fatalf("the waiting claim got %v, want task %s", c, id)
	}
	// Not before its time; well within the wait after it (50 ms + slack).
	if got < before+1000-5 || got > posted+1000+1500 {
		t.Errorf("claim answered %d ms after the post, want about 1000", got-before)
	}

	at := nowMillis() + 800
	id = s.post("plain?notBefore="+strconv.FormatInt(at, 10), "", `{"n":2}`)
	if c := s.claimHTTP("plain", "w1", 0); c != nil {
		t.Fatalf("a task with notBefore 800 ms ahead was claimed at once: %v", c)
	}
	c = s.claimHTTP("plain", "w1", 5)
	got = nowMillis()
	if c == nil || c["id"] != id {
		t.Fatalf("the waiting claim got %v, want task %s", c, id)
	}
	if got < at-5 || got > at+1500 {
		t.Errorf("claim answered %d ms after notBefore, want just after it", got-at)
	}
}

// TestPriorityOrder: claims take the highest priority first, then the
// oldest. Needs the index's priority order.
func TestPriorityOrder(t *testing.T) {
	t.Parallel()
	s := startFailures(t)
	ids := map[string]string{}
	for _, p := range []struct{ name, query string }{
		{"a", ""}, {"b", "?priority=5"}, {"c", "?priority=-2"}, {"d", "?priority=5"}, {"e", "?priority=0"},
	} {
		ids[s.post("plain"+p.query, "", `{}`)] = p.name
	}
	var order []string
	for range ids {
		c := s.claimHTTP("plain", "w1", 0)
		if c == nil {
			t.Fatalf("claim found nothing after %v", order)
		}
		order = append(order, ids[c["id"].(string)])
	}
	if diff := cmp.Diff([]string{"b", "d", "a", "e", "c"}, order); diff != "" {
		t.Errorf("claim order (-want +got):\n%s", diff)
	}
}

// TestHeartbeat: the lease holder's heartbeat extends its lease, on disc
// too, and logs nothing; anyone else's is refused.
func TestHeartbeat(t *testing.T) {
	t.Parallel()
	s := startFailures(t)
	id := s.post("plain", "", `{}`)
	c := s.claimHTTP("plain", "w1", 0)
	first := c["lease"].(map[string]any)["until"].(float64)
	time.Sleep(20 * time.Millisecond)

	m := s.call("plain", id, "heartbeat", `{"worker":"w1"}`)
	lease, _ := m["lease"].(map[string]any)
	until, _ := lease["until"].(float64)
	if m["accepted"] != true || lease["worker"] != "w1" || until <= first || len(m) != 2 {
		t.Fatalf("heartbeat: %v (lease was until %v)", m, first)
	}
	if disc := s.record("plain", "processing", id)["lease"].(map[string]any)["until"]; disc != until {
		t.Errorf("the file's lease.until is %v, want %v", disc, until)
	}
	wantReply(t, "another worker's heartbeat", s.call("plain", id, "heartbeat", `{"worker":"w2"}`), map[string]any{"accepted": false, "status": "processing"})
	if diff := cmp.Diff([]string{"posted", "claimed"}, s.eventsOf(id)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	s.call("plain", id, "result", `{"worker":"w1","result":1}`)
	wantReply(t, "heartbeat after the result", s.call("plain", id, "heartbeat", `{"worker":"w1"}`), map[string]any{"accepted": false, "status": "finished"})
}

// TestReleaseWithDelay: a give-back puts the task back to pending, not
// claimable before its delay, with the reason kept and a released event.
// Needs the index to enforce notBefore.
func TestReleaseWithDelay(t *testing.T) {
	t.Parallel()
	s := startFailures(t)
	id := s.claimed("plain")
	wantReply(t, "release by another worker", s.call("plain", id, "release", `{"worker":"w2"}`), map[string]any{"accepted": false, "status": "processing"})
	released := nowMillis()
	wantReply(t, "release", s.call("plain", id, "release", `{"worker":"w1","delay":1,"reason":{"why":"busy"}}`), map[string]any{"accepted": true, "status": "pending"})
	rec := s.record("plain", "pending", id)
	if rec["lease"] != nil || rec["failure"].(map[string]any)["why"] != "busy" {
		t.Errorf("record after release: %v", rec)
	}
	if ev := s.eventOf(id, "released"); ev == nil {
		t.Errorf("no released event: %v", s.eventsOf(id))
	}
	if c := s.claimHTTP("plain", "w1", 0); c != nil {
		t.Fatalf("a task released with delay 1 was claimed at once: %v", c)
	}
	c := s.claimHTTP("plain", "w1", 5)
	if c == nil || c["id"] != id || c["attempts"] != 2.0 {
		t.Fatalf("claim after the delay: %v", c)
	}
	if got := nowMillis(); got < released+1000-5 {
		t.Errorf("claimed %d ms after the release, before its delay", got-released)
	}
}

// TestReleaseToDeadLetter: on a queue with maxAttempts 2, the give-back
// after the second claim ends the task as failed, error "attempts", with
// its item and attempts kept.
func TestReleaseToDeadLetter(t *testing.T) {
	t.Parallel()
	s := startFailures(t)
	id := s.post("retry", "", `{"n":7}`)
	s.claimHTTP("retry", "w1", 0)
	if m := s.call("retry", id, "release", `{"worker":"w1"}`); m["accepted"] != true || m["status"] != "pending" {
		t.Fatalf("first release: %v", m)
	}
	// The backoff (0.5 to 1 s) passes within the wait.
	c := s.claimHTTP("retry", "w1", 5)
	if c == nil || c["id"] != id || c["attempts"] != 2.0 {
		t.Fatalf("second claim: %v", c)
	}
	wantReply(t, "last release", s.call("retry", id, "release", `{"worker":"w1","reason":{"why":"again"}}`), map[string]any{"accepted": true, "status": "failed"})
	rec := s.record("retry", "done", id)
	if rec["status"] != "failed" || rec["error"] != "attempts" || rec["attempts"] != 2.0 || rec["lease"] != nil {
		t.Errorf("dead letter on disc: %v", rec)
	}
	if diff := cmp.Diff(map[string]any{"n": 7.0}, rec["item"]); diff != "" {
		t.Errorf("dead letter's item (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"posted", "claimed", "released", "claimed", "failed"}, s.eventsOf(id)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	r := s.do("GET", "/retry/"+id, "", "")
	if v := r.JSON(t); v["status"] != "failed" || v["error"] != "attempts" {
		t.Errorf("view of the dead letter: %v", v)
	}
	if c := s.claimHTTP("retry", "w1", 0); c != nil {
		t.Errorf("a dead letter was claimed: %v", c)
	}
}

// TestWorkerFail: a failure is accepted whenever the task is not terminal,
// ends it with error "failed" and keeps the reason; a later result is
// refused.
func TestWorkerFail(t *testing.T) {
	t.Parallel()
	s := startFailures(t)
	id := s.claimed("plain")
	wantReply(t, "fail", s.call("plain", id, "fail", `{"worker":"w1","reason":{"why":"broken"}}`), map[string]any{"accepted": true})
	rec := s.record("plain", "done", id)
	if rec["status"] != "failed" || rec["error"] != "failed" || rec["failure"].(map[string]any)["why"] != "broken" {
		t.Errorf("record after fail: %v", rec)
	}
	if ev := s.eventOf(id, "failed"); ev == nil || ev["bytes"].(map[string]any)["error"] == 0.0 {
		t.Errorf("failed event without the reason's size: %v", ev)
	}
	for _, what := range []string{"result", "fail"} {
		if diff := cmp.Diff(map[string]any{"accepted": false, "status": "failed"}, s.call("plain", id, what, `{"worker":"w1","result":{}}`)); diff != "" {
			t.Errorf("%s after the failure (-want +got):\n%s", what, diff)
		}
	}
	// A pending task can be failed too, by anyone with work access.
	id2 := s.post("plain", "", `{}`)
	if m := s.call("plain", id2, "fail", `{"worker":"other"}`); m["accepted"] != true {
		t.Errorf("fail of a pending task: %v", m)
	}
}

// TestFailedEventCarriesError: a failed line carries the task's error code
// (SPEC §8), "attempts" for a dead letter and "failed" for a worker's
// failure. Needs the event log to write it.
func TestFailedEventCarriesError(t *testing.T) {
	t.Parallel()
	s := startFailures(t)
	failed := s.post("plain", "", `{}`)
	s.call("plain", failed, "fail", `{"reason":{"why":"broken"}}`)
	dead := s.post("retry", "", `{}`)
	for n := 1; n <= 2; n++ {
		if c := s.claimHTTP("retry", "w1", 5); c == nil || c["id"] != dead {
			t.Fatalf("claim %d: %v", n, c)
		}
		s.call("retry", dead, "release", `{"worker":"w1"}`)
	}
	for id, want := range map[string]string{failed: "failed", dead: "attempts"} {
		if ev := s.eventOf(id, "failed"); ev == nil || ev["error"] != want {
			t.Errorf("failed event, want error %q: %v", want, ev)
		}
	}
}

// TestInvalidFailure: a reason that breaks the failure schema is 422
// invalid_failure and changes nothing.
func TestInvalidFailure(t *testing.T) {
	t.Parallel()
	s := startFailures(t)
	id := s.claimed("retry")
	file := s.taskFile("retry", "processing", id)
	before, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ what, body string }{
		{"release", `{"worker":"w1","reason":"not an object"}`},
		{"fail", `{"worker":"w1","reason":[1]}`},
	} {
		r := s.do("POST", "/retry/"+id+"/"+c.what, "", c.body)
		if m := r.JSON(t); r.Status != http.StatusUnprocessableEntity || m["error"] != "invalid_failure" {
			t.Errorf("%s %s: %d %s", c.what, c.body, r.Status, r.Body)
		}
	}
	after, err := os.ReadFile(file)
	if err != nil || string(after) != string(before) {
		t.Errorf("the task file changed: %s, was %s (%v)", after, before, err)
	}
	if diff := cmp.Diff([]string{"posted", "claimed"}, s.eventsOf(id)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestInvalidRequestParameters: malformed or out-of-range post parameters
// and release delays are 400 invalid_request naming the parameter, and
// make nothing.
func TestInvalidRequestParameters(t *testing.T) {
	t.Parallel()
	s := startFailures(t)
	for _, c := range []struct{ query, names string }{
		{"delay=soon", "delay"}, {"delay=-1", "delay"}, {"delay=31536001", "delay"},
		{"notBefore=tomorrow", "notBefore"}, {"priority=1001", "priority"}, {"priority=1.5", "priority"},
		{"delay=1&notBefore=" + strconv.FormatInt(nowMillis()+1000, 10), "notBefore"},
	} {
		r := s.do("POST", "/plain?"+c.query, "", `{}`)
		m := r.JSON(t)
		if msg, _ := m["message"].(string); r.Status != http.StatusBadRequest || m["error"] != "invalid_request" || !strings.Contains(msg, c.names) {
			t.Errorf("post ?%s: %d %s", c.query, r.Status, r.Body)
		}
	}
	id := s.claimed("plain")
	for _, body := range []string{`{"worker":"w1","delay":-1}`, `{"worker":"w1","delay":31536001}`} {
		r := s.do("POST", "/plain/"+id+"/release", "", body)
		if m := r.JSON(t); r.Status != http.StatusBadRequest || m["error"] != "invalid_request" {
			t.Errorf("release %s: %d %s", body, r.Status, r.Body)
		}
	}
	if r := s.do("POST", "/plain/0123456789abcdef/heartbeat", "", `{}`); r.Status != http.StatusNotFound {
		t.Errorf("heartbeat of an unknown task: %d %s", r.Status, r.Body)
	}
	counts := s.do("GET", "/plain", "", "").JSON(t)["counts"]
	if diff := cmp.Diff(map[string]any{"pending": 0.0, "processing": 1.0, "done": 0.0}, counts); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
}

// TestQueueInfoFailureSettings: GET /{queue} shows the new settings and
// the failure schema, only where the queue file gives them.
func TestQueueInfoFailureSettings(t *testing.T) {
	t.Parallel()
	s := startFailures(t)
	m := s.do("GET", "/retry", "", "").JSON(t)
	settings, _ := m["settings"].(map[string]any)
	schemas, _ := m["schemas"].(map[string]any)
	if settings["maxAttempts"] != 2.0 || settings["retryBaseSeconds"] != 1.0 || schemas["failure"] == nil {
		t.Errorf("GET /retry: %v", m)
	}
	m = s.do("GET", "/plain", "", "").JSON(t)
	if _, ok := m["schemas"].(map[string]any)["failure"]; ok {
		t.Errorf("GET /plain shows a failure schema: %v", m)
	}
	if _, ok := m["settings"].(map[string]any)["maxAttempts"]; ok {
		t.Errorf("GET /plain shows maxAttempts: %v", m)
	}
}

// TestStatusViewShowsNewFields: the status view carries notBefore and
// priority when set, and failure when set. Needs the index to keep them.
func TestStatusViewShowsNewFields(t *testing.T) {
	t.Parallel()
	s := startFailures(t)
	plain := s.post("plain", "", `{}`)
	v := s.do("GET", "/plain/"+plain, "", "").JSON(t)
	for _, field := range []string{"notBefore", "priority", "failure"} {
		if _, ok := v[field]; ok {
			t.Errorf("a plain task's view shows %s: %v", field, v)
		}
	}
	before := nowMillis()
	id := s.post("plain?delay=30&priority=3", "", `{}`)
	v = s.do("GET", "/plain/"+id, "", "").JSON(t)
	if nb, _ := v["notBefore"].(float64); int64(nb) < before+30000 || v["priority"] != 3.0 {
		t.Errorf("a delayed task's view: %v", v)
	}
	s.call("plain", id, "fail", `{"reason":{"why":"broken"}}`)
	v = s.do("GET", "/plain/"+id, "", "").JSON(t)
	if f, _ := v["failure"].(map[string]any); f["why"] != "broken" {
		t.Errorf("a failed task's view: %v", v)
	}
}

// TestSocketHeartbeatReleaseFail: the same calls as worker socket messages,
// answered with acks shaped like the HTTP replies. A task given back or
// failed is no longer held by the socket, so closing it re-queues nothing.
func TestSocketHeartbeatReleaseFail(t *testing.T) {
	t.Parallel()
	s := startFailures(t)
	k := s.dial("/plain/work?worker=s1", "")
	id := s.post("plain", "", `{}`)
	k.claimTask(1)

	k.send(fmt.Sprintf(`{"type":"heartbeat","ref":2,"id":%q}`, id))
	m := k.next()
	lease, _ := m["lease"].(map[string]any)
	if m["type"] != "ack" || m["ref"] != 2.0 || m["accepted"] != true || lease["worker"] != "s1" || len(m) != 4 {
		t.Errorf("heartbeat ack: %v", m)
	}
	k.send(fmt.Sprintf(`{"type":"release","ref":3,"id":%q,"reason":{"why":"busy"}}`, id))
	if diff := cmp.Diff(map[string]any{"type": "ack", "ref": 3.0, "accepted": true, "status": "pending"}, k.next()); diff != "" {
		t.Errorf("release ack (-want +got):\n%s", diff)
	}
	k.send(fmt.Sprintf(`{"type":"heartbeat","ref":4,"id":%q}`, id))
	if diff := cmp.Diff(map[string]any{"type": "ack", "ref": 4.0, "accepted": false, "status": "pending"}, k.next()); diff != "" {
		t.Errorf("heartbeat after release (-want +got):\n%s", diff)
	}
	if c := k.claimTask(5); c["id"] != id || c["attempts"] != 2.0 {
		t.Errorf("claim after release: %v", c)
	}
	k.send(fmt.Sprintf(`{"type":"fail","ref":6,"id":%q,"reason":{"why":"broken"}}`, id))
	if diff := cmp.Diff(map[string]any{"type": "ack", "ref": 6.0, "accepted": true}, k.next()); diff != "" {
		t.Errorf("fail ack (-want +got):\n%s", diff)
	}
	k.send(fmt.Sprintf(`{"type":"release","ref":7,"id":%q}`, id))
	if diff := cmp.Diff(map[string]any{"type": "ack", "ref": 7.0, "accepted": false, "status": "failed"}, k.next()); diff != "" {
		t.Errorf("release after fail (-want +got):\n%s", diff)
	}
	if rec := s.record("plain", "done", id); rec["error"] != "failed" {
		t.Errorf("record after the socket's fail: %v", rec)
	}

	// A second task, given back with a delay, then the socket closes.
	id2 := s.post("plain", "", `{}`)
	k.claimTask(8)
	k.send(fmt.Sprintf(`{"type":"release","ref":9,"id":%q,"delay":60}`, id2))
	if m := k.next(); m["accepted"] != true || m["status"] != "pending" {
		t.Errorf("release ack: %v", m)
	}
	k.send(`{"type":"nope","ref":10}`)
	m = k.next()
	if msg, _ := m["message"].(string); m["type"] != "error" || m["error"] != "invalid_request" || !strings.Contains(msg, "heartbeat, release or fail") {
		t.Errorf("unknown type: %v", m)
	}
	k.send(`{"type":"release","ref":11,"id":"0123456789abcdef","delay":-1}`)
	if m := k.next(); m["type"] != "error" || m["error"] != "invalid_request" {
		t.Errorf("negative delay: %v", m)
	}
	_ = k.c.Close()
	// The close is handled at once; give it time, then look for requeues.
	time.Sleep(300 * time.Millisecond)
	for _, task := range []string{id, id2} {
		if ev := s.eventOf(task, "requeue"); ev != nil {
			t.Errorf("task %s re-queued on close though it left the socket: %v", task, s.eventsOf(task))
		}
	}
	if diff := cmp.Diff([]string{"posted", "claimed", "released"}, s.eventsOf(id2)); diff != "" {
		t.Errorf("events of the released task (-want +got):\n%s", diff)
	}
}

// A report that names an older attempt of the same worker is refused: the
// worker's lease lapsed and it claimed the task again, and its late report
// of the first claim must not touch the second.
func TestStaleAttemptIsRefused(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	id := s.post("public", "", `{"n":1}`)
	claim := func() float64 {
		t.Helper()
		r := s.do("POST", "/public/claim", "", `{"worker":"w","wait":5}`)
		if r.Status != 200 || r.JSON(t)["id"] != id {
			t.Fatalf("claim: %d %s", r.Status, r.Body)
		}
		return r.JSON(t)["attempts"].(float64)
	}
	if a := claim(); a != 1 {
		t.Fatalf("first claim's attempts = %v", a)
	}
	// The lease (1 s) lapses; the sweep puts the task back; w claims again.
	if a := claim(); a != 2 {
		t.Fatalf("second claim's attempts = %v", a)
	}
	for _, c := range []struct {
		attempt  int
		accepted bool
	}{{1, false}, {2, true}} {
		for _, call := range []string{"progress", "heartbeat"} {
			body := fmt.Sprintf(`{"worker":"w","attempt":%d,"progress":{"n":%d}}`, c.attempt, c.attempt)
			r := s.do("POST", "/public/"+id+"/"+call, "", body)
			if r.Status != 200 || r.JSON(t)["accepted"] != c.accepted {
				t.Errorf("%s naming attempt %d: %d %s, want accepted %v", call, c.attempt, r.Status, r.Body, c.accepted)
			}
		}
	}
}
