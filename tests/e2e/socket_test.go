package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"
)

// socket is a client end of a WebSocket to the server under test.
type socket struct {
	t *testing.T
	c *websocket.Conn
}

// dial opens a WebSocket at path (query string included) on the fixture
// host, with token as a bearer token if it is not empty.
func (s *server) dial(path, token string) *socket {
	s.t.Helper()
	c, resp, err := s.dialRaw(path, token)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		s.t.Fatalf("dial %s: %v (HTTP %d)", path, err, status)
	}
	s.t.Cleanup(func() { _ = c.Close() })
	return &socket{t: s.t, c: c}
}

func (s *server) dialRaw(path, token string) (*websocket.Conn, *http.Response, error) {
	// gorilla sends a "Host" entry of the request header as the Host.
	h := http.Header{"Host": {host}}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(s.url, "http")+path, h)
}

// send writes one text frame.
func (k *socket) send(text string) {
	k.t.Helper()
	if err := k.c.WriteMessage(websocket.TextMessage, []byte(text)); err != nil {
		k.t.Fatalf("send %s: %v", text, err)
	}
}

// nextRaw reads the next text frame, waiting at most 10 s.
func (k *socket) nextRaw() string {
	k.t.Helper()
	_ = k.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	kind, data, err := k.c.ReadMessage()
	if err != nil {
		k.t.Fatalf("read: %v", err)
	}
	if kind != websocket.TextMessage {
		k.t.Fatalf("frame of type %d, want text", kind)
	}
	return string(data)
}

// next reads the next message as a JSON object.
func (k *socket) next() map[string]any {
	k.t.Helper()
	raw := k.nextRaw()
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		k.t.Fatalf("message %q is not a JSON object: %v", raw, err)
	}
	return m
}

// closed reads until the server closes the socket and returns its close
// code; any message before that fails the test.
func (k *socket) closed() int {
	k.t.Helper()
	_ = k.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, data, err := k.c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) {
		k.t.Fatalf("want a close frame, got message %q, error %v", data, err)
	}
	return ce.Code
}

// claimTask sends a claim and reads its task reply.
func (k *socket) claimTask(ref int) map[string]any {
	k.t.Helper()
	k.send(fmt.Sprintf(`{"type":"claim","ref":%d}`, ref))
	m := k.next()
	if m["type"] != "task" || m["ref"] != float64(ref) {
		k.t.Fatalf("claim %d answered %v", ref, m)
	}
	return m
}

// withoutMessage drops the human text of an error reply, which is not part
// of the contract, after checking it is there.
func withoutMessage(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	if msg, ok := m["message"].(string); !ok || msg == "" {
		t.Errorf("error reply without a message: %v", m)
	}
	delete(m, "message")
	return m
}

// TestSocketClaimWaitsForTask: a claim sent before any task is pending is
// answered with the task as soon as one is posted; the reply carries
// exactly the claim view, and the lease names the ?worker= name.
func TestSocketClaimWaitsForTask(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	k := s.dial("/resize/work?worker=box-1", boxToken)
	k.send(`{"type":"claim","ref":1}`)
	id := s.post("resize", aliceToken, `{"url":"https://ex.com/a.png","width":800}`)

	m := k.next()
	lease, _ := m["lease"].(map[string]any)
	until, _ := lease["until"].(float64)
	want := map[string]any{
		"type": "task", "ref": 1.0, "id": id,
		"item":     map[string]any{"url": "https://ex.com/a.png", "width": 800.0},
		"attempts": 1.0,
		"lease":    map[string]any{"worker": "box-1", "until": until},
	}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("task reply (-want +got):\n%s", diff)
	}
	if until == 0 {
		t.Errorf("lease without until: %v", m)
	}
	if !exists(s.taskFile("resize", "processing", id)) {
		t.Errorf("claimed task is not in processing/")
	}
	if diff := cmp.Diff([]string{"posted", "claimed"}, s.eventsOf(id)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// Without ?worker= the worker is the user; the token may come as
	// ?access_token= (browsers cannot set headers on a socket).
	s.post("resize", aliceToken, `{"url":"b"}`)
	k2 := s.dial("/resize/work?access_token="+boxToken, "")
	if got := k2.claimTask(2)["lease"].(map[string]any)["worker"]; got != "box" {
		t.Errorf("default worker = %v, want box", got)
	}

	// The socket needs the work right, like POST /{queue}/claim.
	for _, c := range []struct {
		token string
		want  int
	}{{"", 401}, {aliceToken, 403}, {eveToken, 403}} {
		_, resp, err := s.dialRaw("/resize/work", c.token)
		if err == nil || resp == nil || resp.StatusCode != c.want {
			t.Errorf("dial with token %q: %v, want HTTP %d", c.token, err, c.want)
		}
	}
}

// TestSocketOutstandingClaims: several claims wait at once, and each is
// answered with a task of its own.
func TestSocketOutstandingClaims(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	k := s.dial("/resize/work?worker=box-1", boxToken)
	refs := []string{`"a"`, `{"n":2}`, `3`}
	for _, ref := range refs {
		k.send(`{"type":"claim","ref":` + ref + `}`)
	}
	posted := map[string]bool{}
	for i := range refs {
		posted[s.post("resize", aliceToken, fmt.Sprintf(`{"url":"u%d"}`, i))] = true
	}
	gotRefs := map[string]bool{}
	gotIDs := map[string]bool{}
	for range refs {
		m := k.next()
		if m["type"] != "task" {
			t.Fatalf("want a task, got %v", m)
		}
		ref, _ := json.Marshal(m["ref"])
		gotRefs[string(ref)] = true
		gotIDs[m["id"].(string)] = true
	}
	if diff := cmp.Diff(map[string]bool{`"a"`: true, `{"n":2}`: true, `3`: true}, gotRefs); diff != "" {
		t.Errorf("refs answered (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(posted, gotIDs); diff != "" {
		t.Errorf("tasks handed out (-want +got):\n%s", diff)
	}
}

// TestSocketProgress: progress from the lease holder is acknowledged and
// extends the lease; from anyone else it is refused; a bad record is an
// error reply.
func TestSocketProgress(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	id := s.post("resize", aliceToken, `{"url":"a"}`)
	k := s.dial("/resize/work?worker=box-1", boxToken)
	task := k.claimTask(1)

	k.send(`{"type":"progress","ref":2,"id":"` + id + `","progress":{"percent":40}}`)
	ack := k.next()
	lease, _ := ack["lease"].(map[string]any)
	if ack["type"] != "ack" || ack["ref"] != 2.0 || ack["accepted"] != true || lease["worker"] != "box-1" {
		t.Fatalf("progress ack = %v", ack)
	}
	if lease["until"].(float64) < task["lease"].(map[string]any)["until"].(float64) {
		t.Errorf("progress shortened the lease: %v then %v", task["lease"], lease)
	}
	view := s.do("GET", "/resize/"+id, aliceToken, "").JSON(t)
	if diff := cmp.Diff(map[string]any{"percent": 40.0}, view["progress"]); diff != "" {
		t.Errorf("stored progress (-want +got):\n%s", diff)
	}

	other := s.dial("/resize/work?worker=box-2", boxToken)
	other.send(`{"type":"progress","ref":3,"id":"` + id + `","progress":{"percent":90}}`)
	if got, want := other.nextRaw(), `{"type":"ack","ref":3,"accepted":false,"status":"processing"}`; got != want {
		t.Errorf("progress by another worker:\n got %s\nwant %s", got, want)
	}

	k.send(`{"type":"progress","ref":4,"id":"` + id + `","progress":{"percent":"x"}}`)
	got := withoutMessage(t, k.next())
	want := map[string]any{"type": "error", "ref": 4.0, "error": "invalid_progress", "details": []any{
		map[string]any{"path": "/percent", "message": "expected number, but got string"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bad progress (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"posted", "claimed", "progress"}, s.eventsOf(id)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestSocketResult: a result is acknowledged once durable and finishes the
// task; a later one is refused.
func TestSocketResult(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	id := s.post("resize", aliceToken, `{"url":"a"}`)
	k := s.dial("/resize/work?worker=box-1", boxToken)
	k.claimTask(1)

	k.send(`{"type":"result","ref":3,"id":"` + id + `","result":{"url":"b"}}`)
	if got, want := k.nextRaw(), `{"type":"ack","ref":3,"accepted":true}`; got != want {
		t.Errorf("result ack:\n got %s\nwant %s", got, want)
	}
	if !exists(s.taskFile("resize", "done", id)) {
		t.Errorf("finished task is not in done/")
	}
	view := s.do("GET", "/resize/"+id, aliceToken, "").JSON(t)
	if view["status"] != "finished" || fmt.Sprint(view["result"]) != "map[url:b]" {
		t.Errorf("view after result = %v", view)
	}

	k.send(`{"type":"result","ref":4,"id":"` + id + `","result":{"url":"late"}}`)
	if got, want := k.nextRaw(), `{"type":"ack","ref":4,"accepted":false,"status":"finished"}`; got != want {
		t.Errorf("late result:\n got %s\nwant %s", got, want)
	}
	if diff := cmp.Diff([]string{"posted", "claimed", "result", "fetched"}, s.eventsOf(id)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestSocketMalformedMessages: every malformed message gets an error reply
// with its ref (when it had one) and the socket keeps working.
func TestSocketMalformedMessages(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	const unknown = "0123456789abcdef"
	cases := []struct {
		name, msg string
		want      map[string]any
	}{
		{"not JSON", `{"type":`, map[string]any{"error": "invalid_json"}},
		{"not an object", `[1,2]`, map[string]any{"error": "invalid_json"}},
		{"wrong field type", `{"type":5,"ref":1}`, map[string]any{"ref": 1.0, "error": "invalid_json"}},
		{"unknown type", `{"type":"dance","ref":2}`, map[string]any{"ref": 2.0, "error": "invalid_request"}},
		{"no type", `{"ref":"x"}`, map[string]any{"ref": "x", "error": "invalid_request"}},
		{"progress without id", `{"type":"progress","ref":3,"progress":{}}`, map[string]any{"ref": 3.0, "error": "invalid_request"}},
		{"result without result", `{"type":"result","ref":4,"id":"` + unknown + `"}`, map[string]any{"ref": 4.0, "error": "invalid_request"}},
		{"unknown task", `{"type":"result","ref":5,"id":"` + unknown + `","result":{}}`, map[string]any{"ref": 5.0, "error": "not_found"}},
		{"malformed id", `{"type":"progress","ref":6,"id":"../x","progress":{}}`, map[string]any{"ref": 6.0, "error": "not_found"}},
		{"bad query", `{"type":"claim","ref":7,"query":{"type":12}}`, map[string]any{"ref": 7.0, "error": "invalid_query"}},
		{"result over maxItemBytes", `{"type":"result","ref":8,"id":"` + unknown + `","result":"` + strings.Repeat("x", 5000) + `"}`, map[string]any{"ref": 8.0, "error": "too_large"}},
		{"result breaks schema", `{"type":"result","ref":9,"id":"` + unknown + `","result":[1]}`, map[string]any{"ref": 9.0, "error": "invalid_result", "details": []any{
			map[string]any{"path": "", "message": "expected object, but got array"},
		}}},
	}
	k := s.dial("/resize/work?worker=box-1", boxToken)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k.t = t
			k.send(c.msg)
			want := map[string]any{"type": "error", "details": []any{}}
			for key, v := range c.want {
				want[key] = v
			}
			if diff := cmp.Diff(want, withoutMessage(t, k.next())); diff != "" {
				t.Errorf("reply (-want +got):\n%s", diff)
			}
		})
	}
	k.t = t
	// Still open and working.
	id := s.post("resize", aliceToken, `{"url":"a"}`)
	if got := k.claimTask(10)["id"]; got != id {
		t.Errorf("claim after errors got %v, want %s", got, id)
	}
}

// TestSocketClaimLimit: 256 claims may wait on one socket; the 257th is
// refused, and the socket keeps working.
func TestSocketClaimLimit(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	k := s.dial("/resize/work?worker=box-1", boxToken)
	for ref := 1; ref <= 257; ref++ {
		k.send(fmt.Sprintf(`{"type":"claim","ref":%d}`, ref))
	}
	got := withoutMessage(t, k.next())
	want := map[string]any{"type": "error", "ref": 257.0, "error": "too_many_claims", "details": []any{}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("257th claim (-want +got):\n%s", diff)
	}
	id := s.post("resize", aliceToken, `{"url":"a"}`)
	m := k.next()
	if m["type"] != "task" || m["id"] != id || m["ref"].(float64) > 256 {
		t.Errorf("after the refusal, a waiting claim got %v", m)
	}
}

// requeueAt returns the time (Unix ms) of id's requeue event, and the
// worker it names, or false if there is none yet.
func (s *server) requeueAt(id string) (int64, string, bool) {
	for _, ev := range s.events() {
		if ev["id"] != id || ev["event"] != "requeue" {
			continue
		}
		at, err := time.Parse("2006-01-02T15:04:05.000Z", ev["at"].(string))
		if err != nil {
			s.t.Fatalf("event time %v: %v", ev["at"], err)
		}
		worker, _ := ev["worker"].(string)
		return at.UnixMilli(), worker, true
	}
	return 0, "", false
}

// TestSocketDropRequeues: a worker holding tasks whose TCP connection
// drops (no close frame) gets its tasks re-queued at once, long before
// their 60 s leases lapse.
func TestSocketDropRequeues(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	ids := []string{s.post("resize", aliceToken, `{"url":"a"}`), s.post("resize", aliceToken, `{"url":"b"}`)}
	k := s.dial("/resize/work?worker=box-1", boxToken)
	until := map[string]int64{}
	for ref := range ids {
		m := k.claimTask(ref)
		until[m["id"].(string)] = int64(m["lease"].(map[string]any)["until"].(float64))
	}
	// One of the two is finished: it is no longer held and stays finished.
	done := s.post("resize", aliceToken, `{"url":"c"}`)
	k.claimTask(9)
	k.send(`{"type":"result","ref":10,"id":"` + done + `","result":{}}`)
	if m := k.next(); m["accepted"] != true {
		t.Fatalf("result: %v", m)
	}

	if err := k.c.NetConn().Close(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		eventually(t, "the dropped socket's task "+id+" to be re-queued", func() bool {
			_, _, ok := s.requeueAt(id)
			return ok
		})
		at, worker, _ := s.requeueAt(id)
		if at >= until[id]-30_000 {
			t.Errorf("task %s re-queued at %d, not well before its lease until %d", id, at, until[id])
		}
		if worker != "box-1" {
			t.Errorf("requeue event names worker %q, want box-1", worker)
		}
		if !exists(s.taskFile("resize", "pending", id)) {
			t.Errorf("re-queued task %s is not in pending/", id)
		}
		if diff := cmp.Diff([]string{"posted", "claimed", "requeue"}, s.eventsOf(id)); diff != "" {
			t.Errorf("events of %s (-want +got):\n%s", id, diff)
		}
	}
	if diff := cmp.Diff([]string{"posted", "claimed", "result"}, s.eventsOf(done)); diff != "" {
		t.Errorf("events of the finished task (-want +got):\n%s", diff)
	}
	// The re-queued tasks are handed out again, one more attempt each.
	r := s.do("POST", "/resize/claim", boxToken, `{"worker":"box-2"}`)
	if r.Status != 200 || r.JSON(t)["attempts"] != 2.0 {
		t.Errorf("claim after re-queue: %d %s", r.Status, r.Body)
	}
}

// socketClosedInLog reports whether the server has finished with a worker
// socket of queue: its request line is logged when the handler returns,
// which is after the socket's claims have stopped and its tasks are back.
func (s *server) socketClosedInLog(queue string) bool {
	for _, line := range strings.Split(s.Stderr(), "\n") {
		var entry struct{ Msg, Path string }
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "request" && entry.Path == "/"+queue+"/work" {
			return true
		}
	}
	return false
}

// TestSocketClosedClaimTakesNoTask: claims still waiting when a socket
// closes are dropped; a task posted afterwards stays pending.
func TestSocketClosedClaimTakesNoTask(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t), "--log-level", "debug") // socketClosedInLog reads the request lines
	k := s.dial("/resize/work?worker=box-1", boxToken)
	k.send(`{"type":"claim","ref":1}`)
	k.send(`{"type":"claim","ref":2,"query":{"required":["url"]}}`)
	// Messages are handled in order: once this is answered the claims wait.
	k.send(`{"type":"nothing","ref":3}`)
	if m := k.next(); m["ref"] != 3.0 {
		t.Fatalf("want the error for ref 3, got %v", m)
	}
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye")
	if err := k.c.WriteControl(websocket.CloseMessage, msg, time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if code := k.closed(); code != websocket.CloseNormalClosure {
		t.Errorf("server answered the close with %d", code)
	}
	eventually(t, "the server to finish with the socket", func() bool { return s.socketClosedInLog("resize") })

	id := s.post("resize", aliceToken, `{"url":"a"}`)
	if diff := cmp.Diff([]string{"posted"}, s.eventsOf(id)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	r := s.do("POST", "/resize/claim", boxToken, `{"worker":"box-2"}`)
	if r.Status != 200 || r.JSON(t)["id"] != id || r.JSON(t)["attempts"] != 1.0 {
		t.Errorf("the task was not left pending for others: %d %s", r.Status, r.Body)
	}
}

// TestSocketShutdownRequeues: on SIGTERM the server says goodbye (1001)
// to every socket and re-queues what the worker sockets held before exiting.
func TestSocketShutdownRequeues(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	id := s.post("resize", aliceToken, `{"url":"a"}`)
	k := s.dial("/resize/work?worker=box-1", boxToken)
	k.claimTask(1)
	k.send(`{"type":"claim","ref":2}`) // still waiting at shutdown
	w := s.dial("/resize/"+id+"/watch", aliceToken)
	if v := w.next(); v["status"] != "processing" {
		t.Fatalf("watch view = %v", v)
	}

	// Each client answers the close frame as it reads it, in the background.
	codes := make(chan int, 2)
	for _, c := range []*socket{k, w} {
		go func() {
			for {
				_ = c.c.SetReadDeadline(time.Now().Add(30 * time.Second))
				_, _, err := c.c.ReadMessage()
				var ce *websocket.CloseError
				if errors.As(err, &ce) {
					codes <- ce.Code
					return
				}
				if err != nil {
					codes <- -1
					return
				}
			}
		}()
	}
	s.stop()
	got := []int{<-codes, <-codes}
	sort.Ints(got)
	// The watcher may have seen the re-queue first; either way both close 1001.
	if diff := cmp.Diff([]int{websocket.CloseGoingAway, websocket.CloseGoingAway}, got); diff != "" {
		t.Errorf("close codes (-want +got):\n%s", diff)
	}
	if !exists(s.taskFile("resize", "pending", id)) {
		t.Errorf("held task is not pending after shutdown")
	}
	if diff := cmp.Diff([]string{"posted", "claimed", "requeue"}, s.eventsOf(id)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestSocketPingDrop runs the server with 200 ms pings (a peer is dropped
// after 400 ms of silence).
func TestSocketPingDrop(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t), "--ws-ping", "200ms")

	// A worker that answers pings stays connected through many of them.
	alive := s.dial("/resize/work?worker=alive", boxToken)
	pings := make(chan struct{}, 10)
	alive.c.SetPingHandler(func(data string) error {
		select {
		case pings <- struct{}{}:
		default: // counted enough; keep answering
		}
		return alive.c.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(5*time.Second))
	})
	replies := make(chan string, 10)
	go func() {
		for {
			// gorilla answers pings only while reading.
			_, data, err := alive.c.ReadMessage()
			if err != nil {
				close(replies)
				return
			}
			replies <- string(data)
		}
	}()

	// A worker that holds a task and then stops reading: its pings go
	// unanswered, so the server drops it and re-queues the task.
	id := s.post("resize", aliceToken, `{"url":"a"}`)
	silent := s.dial("/resize/work?worker=silent", boxToken)
	silent.claimTask(1)
	eventually(t, "the silent worker's task to be re-queued", func() bool {
		_, _, ok := s.requeueAt(id)
		return ok
	})
	if _, worker, _ := s.requeueAt(id); worker != "silent" {
		t.Errorf("requeue names %q, want silent", worker)
	}

	// Wait for more pings than the silence limit spans, then check the
	// answering worker is still served.
	for range 5 {
		select {
		case <-pings:
		case <-time.After(10 * time.Second):
			t.Fatal("no ping from the server")
		}
	}
	alive.send(`{"type":"claim","ref":7}`)
	select {
	case m, ok := <-replies:
		if !ok || !strings.Contains(m, `"ref":7`) || !strings.Contains(m, `"id":"`+id+`"`) {
			t.Errorf("claim on the live socket: %q (open: %v)", m, ok)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer on the live socket")
	}
}
