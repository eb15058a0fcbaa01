package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// SPEC §12 over HTTP and the worker socket: listing, cancel, retry, purge,
// pause, idempotent and batch posts, batch claims.
//
// Some of these tests need the index's idempotency keys, lists and pauses
// (built in a parallel change); each says so in its comment.

// manageQueues adds the queues of these tests to a hosts folder (before the
// server starts):
//   - ops: alice and eve post and read, anyone works, alice manages; one
//     attempt, so a give-back makes a dead letter.
//   - opsopen: everything public, manage included.
//   - opspost: post and status public, alice manages.
func manageQueues(t *testing.T, d dirs) {
	t.Helper()
	queues := filepath.Join(d.hosts, host, "taskhoster-queues")
	writeFile(t, filepath.Join(queues, "ops.json"), `{
		"item": {"type": "object", "properties": {"width": {"type": "integer"}, "n": {"type": "integer"}}},
		"settings": {"leaseSeconds": 60, "maxAttempts": 1},
		"access": {"post": ["alice", "eve"], "status": ["alice", "eve"], "work": "public", "manage": ["alice"]}
	}`)
	writeFile(t, filepath.Join(queues, "opsopen.json"), `{
		"item": {},
		"access": {"post": "public", "status": "public", "work": "public", "manage": "public"}
	}`)
	writeFile(t, filepath.Join(queues, "opspost.json"), `{
		"item": {},
		"access": {"post": "public", "status": "public", "work": "public", "manage": ["alice"]}
	}`)
}

func startManage(t *testing.T) (*server, dirs) {
	t.Helper()
	d := newDirs(t)
	manageQueues(t, d)
	return start(t, d), d
}

// want checks a reply's status and, for an error, its code.
func (r response) want(t *testing.T, what string, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Errorf("%s: %d %s, want %d", what, r.Status, r.Body, status)
		return
	}
	if code != "" {
		if got := r.JSON(t)["error"]; got != code {
			t.Errorf("%s: error %v, want %s", what, got, code)
		}
	}
}

// withKey posts item to queue as token with an Idempotency-Key.
func (s *server) withKey(queue, token, key, item string) response {
	s.t.Helper()
	return s.doHeader("POST", "/"+queue, host, token, item, http.Header{"Idempotency-Key": {key}})
}

// TestManageAccess: every new route for each cell of the access table:
// public (anonymous), named (allowed), refused (403), unknown token (401).
func TestManageAccess(t *testing.T) {
	s, _ := startManage(t)
	routes := []struct {
		name, method, path, body string
		named, refused           string // tokens of a user who may, and one who may not
		queue                    string // the named queue, if not ops
	}{
		{"list", "GET", "/%s/tasks", ``, aliceToken, eveToken, ""},
		{"cancel", "DELETE", "/%s/{id}", ``, aliceToken, boxToken, ""},
		{"retry", "POST", "/%s/{id}/retry", ``, aliceToken, eveToken, ""},
		{"purge", "POST", "/%s/purge?status=failed", ``, aliceToken, eveToken, ""},
		{"pause", "POST", "/%s/pause", ``, aliceToken, eveToken, ""},
		{"resume", "POST", "/%s/resume", ``, aliceToken, eveToken, ""},
		{"batch", "POST", "/%s/batch", `{"items":[{}]}`, eveToken, boxToken, ""},
		{"batch claim", "POST", "/%s/claim", `{"max":2}`, boxToken, aliceToken, "resize"},
	}
	for _, r := range routes {
		t.Run(r.name, func(t *testing.T) {
			named := r.queue
			if named == "" {
				named = "ops"
			}
			path := func(queue string) string {
				// A fresh task each time, so that cancel and retry meet a task.
				id := s.post(queue, aliceToken, `{"url":"a"}`)
				return strings.ReplaceAll(fmt.Sprintf(r.path, queue), "{id}", id)
			}
			allowed := func(what string, res response) {
				t.Helper()
				if res.Status == http.StatusUnauthorized || res.Status == http.StatusForbidden || res.Status >= 500 {
					t.Errorf("%s: %d %s", what, res.Status, res.Body)
				}
				if res.Status == http.StatusConflict && res.JSON(t)["error"] != "not_failed" {
					t.Errorf("%s: %d %s", what, res.Status, res.Body)
				}
			}
			allowed("public, anonymous", s.do(r.method, path("opsopen"), "", r.body))
			allowed("named", s.do(r.method, path(named), r.named, r.body))
			s.do(r.method, path(named), r.refused, r.body).want(t, "refused", 403, "forbidden")
			res := s.do(r.method, path(named), "0000000000000000000000000000dead", r.body)
			res.want(t, "unknown token", 401, "unauthorized")
			if res.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("401 without WWW-Authenticate")
			}
			s.do(r.method, path(named), "", r.body).want(t, "no token", 401, "unauthorized")
		})
	}
	s.do("POST", "/opsopen/resume", "", ``) // leave nothing paused
}

// TestCancelOwnTask: a poster cancels the tasks it posted with post access
// alone, not another user's; alice (manage) cancels anyone's.
func TestCancelOwnTask(t *testing.T) {
	s, _ := startManage(t)
	mine := s.post("ops", eveToken, `{}`)
	r := s.do("DELETE", "/ops/"+mine, eveToken, ``)
	wantReply(t, "cancel of eve's own task", r.JSON(t), map[string]any{"accepted": true, "status": "failed"})
	view := s.do("GET", "/ops/"+mine, eveToken, ``).JSON(t)
	if view["status"] != "failed" || view["error"] != "cancelled" {
		t.Errorf("view after cancel: %v", view)
	}
	if ev := s.eventOf(mine, "cancelled"); ev == nil {
		t.Errorf("no cancelled event: %v", s.eventsOf(mine))
	}
	r = s.do("DELETE", "/ops/"+mine, eveToken, ``)
	wantReply(t, "second cancel", r.JSON(t), map[string]any{"accepted": false, "status": "failed"})

	theirs := s.post("ops", aliceToken, `{}`)
	s.do("DELETE", "/ops/"+theirs, eveToken, ``).want(t, "eve cancels alice's task", 403, "forbidden")
	if st := s.do("GET", "/ops/"+theirs, aliceToken, ``).JSON(t)["status"]; st != "pending" {
		t.Errorf("a refused cancel changed the task: %v", st)
	}
	other := s.post("ops", eveToken, `{}`)
	r = s.do("DELETE", "/ops/"+other, aliceToken, ``)
	wantReply(t, "alice cancels eve's task", r.JSON(t), map[string]any{"accepted": true, "status": "failed"})
	s.do("DELETE", "/ops/0123456789abcdef", aliceToken, ``).want(t, "cancel of an unknown task", 404, "not_found")
}

// TestAnonymousCancelNeedsAToken: on a queue whose post access is public,
// a cancel without a token (or with an unknown one) is 401 with
// WWW-Authenticate, not 403: only a named user can be a task's poster, so a
// token is needed. The task is left as it was.
func TestAnonymousCancelNeedsAToken(t *testing.T) {
	s, _ := startManage(t)
	id := s.post("opspost", "", `{}`)
	for what, token := range map[string]string{"no token": "", "unknown token": "0000000000000000000000000000dead"} {
		res := s.do("DELETE", "/opspost/"+id, token, ``)
		res.want(t, what, 401, "unauthorized")
		if res.Status == 401 && res.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", what)
		}
	}
	s.do("DELETE", "/opspost/"+id, eveToken, ``).want(t, "eve, who did not post it", 403, "forbidden")
	if st := s.do("GET", "/opspost/"+id, "", ``).JSON(t)["status"]; st != "pending" {
		t.Errorf("a refused cancel changed the task: %v", st)
	}
	r := s.do("DELETE", "/opspost/"+id, aliceToken, ``)
	wantReply(t, "alice (manage) cancels it", r.JSON(t), map[string]any{"accepted": true, "status": "failed"})
}

// TestCancelTellsTheHolder: a worker socket holding a task is told at once
// when it is cancelled, and the holder's next calls are refused.
func TestCancelTellsTheHolder(t *testing.T) {
	s, _ := startManage(t)
	id := s.post("ops", aliceToken, `{}`)
	k := s.dial("/ops/work?worker=w1", "")
	if c := k.claimTask(1); c["id"] != id {
		t.Fatalf("claimed %v, want %s", c, id)
	}
	r := s.do("DELETE", "/ops/"+id, aliceToken, ``)
	wantReply(t, "cancel of a processing task", r.JSON(t), map[string]any{"accepted": true, "status": "failed"})
	wantReply(t, "the socket's message", k.next(), map[string]any{"type": "cancelled", "id": id})
	if ev := s.eventOf(id, "cancelled"); ev == nil || ev["worker"] != "w1" {
		t.Errorf("cancelled event: %v", ev)
	}
	for ref, msg := range []string{
		`{"type":"progress","ref":0,"id":"%s","progress":{}}`,
		`{"type":"heartbeat","ref":1,"id":"%s"}`,
		`{"type":"release","ref":2,"id":"%s"}`,
		`{"type":"result","ref":3,"id":"%s","result":{}}`,
	} {
		k.send(fmt.Sprintf(msg, id))
		wantReply(t, msg, k.next(), map[string]any{"type": "ack", "ref": float64(ref), "accepted": false, "status": "failed"})
	}
	// Over HTTP too.
	for _, call := range []string{"progress", "heartbeat", "release", "result"} {
		got := s.call("ops", id, call, `{"worker":"w1","progress":{},"result":{}}`)
		wantReply(t, call+" over HTTP", got, map[string]any{"accepted": false, "status": "failed"})
	}
}

// TestRetryDeadLetter: a failed task goes back to pending with a fresh
// budget, event retried; anything else is 409 not_failed.
func TestRetryDeadLetter(t *testing.T) {
	s, _ := startManage(t)
	id := s.post("ops", aliceToken, `{"width":3}`)
	if c := s.claimHTTP("ops", "w1", 0); c == nil || c["id"] != id {
		t.Fatalf("claim: %v", c)
	}
	got := s.call("ops", id, "release", `{"worker":"w1"}`)
	wantReply(t, "release after the only attempt", got, map[string]any{"accepted": true, "status": "failed"})
	s.do("POST", "/ops/"+id+"/retry", eveToken, ``).want(t, "retry by eve", 403, "forbidden")

	r := s.do("POST", "/ops/"+id+"/retry", aliceToken, ``)
	r.want(t, "retry", 200, "")
	view := r.JSON(t)
	if view["id"] != id || view["status"] != "pending" || view["attempts"] != 0.0 || view["error"] != nil ||
		view["finishedAt"] != nil || view["result"] != nil {
		t.Errorf("retry reply: %v", view)
	}
	if ev := s.eventOf(id, "retried"); ev == nil {
		t.Errorf("no retried event: %v", s.eventsOf(id))
	}
	rec := s.record("ops", "pending", id)
	if rec["attempts"] != 0.0 || rec["lease"] != nil || rec["error"] != nil || rec["fetchedAt"] != nil {
		t.Errorf("record after retry: %v", rec)
	}
	if item, _ := rec["item"].(map[string]any); item["width"] != 3.0 {
		t.Errorf("item after retry: %v", rec["item"])
	}
	s.do("POST", "/ops/"+id+"/retry", aliceToken, ``).want(t, "retry of a pending task", 409, "not_failed")
	if c := s.claimHTTP("ops", "w2", 0); c == nil || c["id"] != id || c["attempts"] != 1.0 {
		t.Errorf("claim after retry: %v", c)
	}
	s.do("POST", "/ops/"+id+"/retry", aliceToken, ``).want(t, "retry of a processing task", 409, "not_failed")
	s.do("POST", "/ops/0123456789abcdef/retry", aliceToken, ``).want(t, "retry of an unknown task", 404, "not_found")
}

// TestPurge deletes every task of one status now, event cleaned each.
func TestPurge(t *testing.T) {
	s, _ := startManage(t)
	var failed []string
	for range 2 {
		id := s.post("ops", aliceToken, `{}`)
		s.do("DELETE", "/ops/"+id, aliceToken, ``)
		failed = append(failed, id)
	}
	finished := s.post("ops", aliceToken, `{}`)
	s.claimHTTP("ops", "w1", 0)
	s.call("ops", finished, "result", `{"worker":"w1","result":{}}`)
	pending := s.post("ops", aliceToken, `{}`)

	s.do("POST", "/ops/purge", aliceToken, ``).want(t, "purge without a status", 400, "invalid_request")
	s.do("POST", "/ops/purge?status=pending", aliceToken, ``).want(t, "purge of pending", 400, "invalid_request")
	wantReply(t, "purge of failed", s.do("POST", "/ops/purge?status=failed", aliceToken, ``).JSON(t), map[string]any{"deleted": 2.0})
	for _, id := range failed {
		if ev := s.eventOf(id, "cleaned"); ev == nil {
			t.Errorf("no cleaned event for %s: %v", id, s.eventsOf(id))
		}
		s.do("GET", "/ops/"+id, aliceToken, ``).want(t, "a purged task", 404, "not_found")
	}
	if s.do("GET", "/ops/"+finished, aliceToken, ``).Status != 200 || s.do("GET", "/ops/"+pending, aliceToken, ``).Status != 200 {
		t.Errorf("purge of failed took other tasks")
	}
	wantReply(t, "purge of finished", s.do("POST", "/ops/purge?status=finished", aliceToken, ``).JSON(t), map[string]any{"deleted": 1.0})
	if s.eventOf(finished, "cleaned") == nil {
		t.Errorf("no cleaned event for the finished task")
	}
}

// TestListTasks: pages by status and order with a cursor, filtered by a
// query, showing item and postedBy. Needs the index's lists.
func TestListTasks(t *testing.T) {
	s, _ := startManage(t)
	var ids []string
	for i := range 5 {
		ids = append(ids, s.post("ops", eveToken, fmt.Sprintf(`{"n":%d}`, i)))
		time.Sleep(2 * time.Millisecond) // distinct postedAt, so the order is the post order
	}
	page := func(query string) ([]string, any) {
		t.Helper()
		r := s.do("GET", "/ops/tasks?"+query, aliceToken, ``)
		if r.Status != 200 {
			t.Fatalf("list %s: %d %s", query, r.Status, r.Body)
		}
		m := r.JSON(t)
		var got []string
		tasks, _ := m["tasks"].([]any)
		for _, x := range tasks {
			got = append(got, x.(map[string]any)["id"].(string))
		}
		return got, m["next"]
	}
	all, next := page("")
	if strings.Join(all, ",") != strings.Join(ids, ",") || next != nil {
		t.Errorf("list of pending: %v next %v, want %v", all, next, ids)
	}
	r := s.do("GET", "/ops/tasks?limit=1", aliceToken, ``).JSON(t)
	if tasks, _ := r["tasks"].([]any); len(tasks) != 1 {
		t.Fatalf("list with limit 1: %v", r)
	}
	first := r["tasks"].([]any)[0].(map[string]any)
	if first["postedBy"] != "eve" || first["item"].(map[string]any)["n"] != 0.0 || first["status"] != "pending" || first["queue"] != "ops" {
		t.Errorf("a listed task: %v", first)
	}
	// Pages of two, oldest and newest first.
	for _, order := range []string{"oldest", "newest"} {
		var got []string
		query := "order=" + order + "&limit=2"
		for range 5 {
			ids, next := page(query)
			got = append(got, ids...)
			if next == nil {
				break
			}
			query = "order=" + order + "&limit=2&after=" + next.(string)
		}
		want := append([]string(nil), ids...)
		if order == "newest" {
			for i, j := 0, len(want)-1; i < j; i, j = i+1, j-1 {
				want[i], want[j] = want[j], want[i]
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("pages %s first: %v, want %v", order, got, want)
		}
	}
	// A filter over the item; other statuses.
	got, _ := page("query=" + `%7B%22properties%22%3A%7B%22n%22%3A%7B%22minimum%22%3A3%7D%7D%7D`)
	if strings.Join(got, ",") != strings.Join(ids[3:], ",") {
		t.Errorf("filtered list: %v, want %v", got, ids[3:])
	}
	s.do("DELETE", "/ops/"+ids[1], aliceToken, ``)
	if got, _ := page("status=failed"); strings.Join(got, ",") != ids[1] {
		t.Errorf("list of failed: %v", got)
	}
	if got, _ := page("status=finished"); len(got) != 0 {
		t.Errorf("list of finished: %v", got)
	}
	s.do("GET", "/ops/tasks?limit=1001", aliceToken, ``).want(t, "limit 1001", 400, "invalid_request")
	s.do("GET", "/ops/tasks?status=done", aliceToken, ``).want(t, "status done", 400, "invalid_request")
	s.do("GET", "/ops/tasks?order=up", aliceToken, ``).want(t, "order up", 400, "invalid_request")
	s.do("GET", "/ops/tasks?query=%7B%22type%22%3A7%7D", aliceToken, ``).want(t, "a bad query", 400, "invalid_query")
}

// TestPauseAndResume: while paused, posts are taken and claims wait; a
// resume wakes them. GET /{queue} shows it. Needs the index's pauses.
func TestPauseAndResume(t *testing.T) {
	s, _ := startManage(t)
	if info := s.do("GET", "/ops", aliceToken, ``).JSON(t); info["paused"] != false {
		t.Errorf("queue info: paused %v", info["paused"])
	}
	wantReply(t, "pause", s.do("POST", "/ops/pause", aliceToken, ``).JSON(t), map[string]any{"paused": true})
	if info := s.do("GET", "/ops", aliceToken, ``).JSON(t); info["paused"] != true {
		t.Errorf("queue info while paused: paused %v", info["paused"])
	}
	id := s.post("ops", aliceToken, `{}`)
	began := time.Now()
	if c := s.claimHTTP("ops", "w1", 1); c != nil {
		t.Fatalf("claim while paused took %v", c)
	}
	if waited := time.Since(began); waited < 900*time.Millisecond {
		t.Errorf("a claim while paused answered after %v, not at the end of its wait", waited)
	}
	k := s.dial("/ops/work?worker=w2", "")
	k.send(`{"type":"claim","ref":1}`)
	got := make(chan map[string]any, 1)
	go func() {
		r := s.do("POST", "/ops/claim", "", `{"worker":"w1","wait":20}`)
		if r.Status != 200 {
			got <- map[string]any{"status": r.Status}
			return
		}
		got <- r.JSON(t)
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case c := <-got:
		t.Fatalf("a waiting claim got %v while paused", c)
	default:
	}
	resumed := time.Now()
	wantReply(t, "resume", s.do("POST", "/ops/resume", aliceToken, ``).JSON(t), map[string]any{"paused": false})
	second := s.post("ops", aliceToken, `{}`)
	var claimed []any
	select {
	case c := <-got:
		claimed = append(claimed, c["id"])
	case <-time.After(5 * time.Second):
		t.Fatalf("the waiting HTTP claim was not woken by the resume")
	}
	m := k.next()
	claimed = append(claimed, m["id"])
	if time.Since(resumed) > 3*time.Second {
		t.Errorf("claims woke %v after the resume", time.Since(resumed))
	}
	if !((claimed[0] == id && claimed[1] == second) || (claimed[0] == second && claimed[1] == id)) {
		t.Errorf("claimed %v, want %s and %s", claimed, id, second)
	}
}

// TestPauseSurvivesRestart: the pause lives with the server's data. Needs
// the index's pauses.
func TestPauseSurvivesRestart(t *testing.T) {
	s, d := startManage(t)
	s.do("POST", "/ops/pause", aliceToken, ``).want(t, "pause", 200, "")
	id := s.post("ops", aliceToken, `{}`)
	s.stop()
	s = start(t, d)
	if info := s.do("GET", "/ops", aliceToken, ``).JSON(t); info["paused"] != true {
		t.Errorf("queue info after a restart: paused %v", info["paused"])
	}
	if c := s.claimHTTP("ops", "w1", 0); c != nil {
		t.Errorf("claim after a restart while paused took %v", c)
	}
	s.do("POST", "/ops/resume", aliceToken, ``).want(t, "resume", 200, "")
	if c := s.claimHTTP("ops", "w1", 0); c == nil || c["id"] != id {
		t.Errorf("claim after resume: %v", c)
	}
	if info := s.do("GET", "/opsopen", "", ``).JSON(t); info["paused"] != false {
		t.Errorf("another queue is paused: %v", info["paused"])
	}
}

// TestIdempotentPostsRace: twenty posts racing with one key make exactly
// one task; all are told its id. Needs the index's keys.
func TestIdempotentPostsRace(t *testing.T) {
	s, _ := startManage(t)
	const n = 20
	type answer struct {
		status int
		body   string
	}
	answers := make(chan answer, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", s.url+"/ops", strings.NewReader(`{"width":7}`))
			req.Host = host
			req.Header.Set("Authorization", "Bearer "+aliceToken)
			req.Header.Set("Idempotency-Key", "order-42")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers <- answer{body: err.Error()}
				return
			}
			defer resp.Body.Close()
			data, _ := io.ReadAll(resp.Body)
			answers <- answer{resp.StatusCode, string(data)}
		}()
	}
	wg.Wait()
	close(answers)
	created, ids := 0, map[string]bool{}
	for a := range answers {
		var reply struct{ ID string }
		switch a.status {
		case 201:
			created++
		case 200:
		default:
			t.Fatalf("a racing post: %d %s", a.status, a.body)
		}
		if err := json.Unmarshal([]byte(a.body), &reply); err != nil {
			t.Fatalf("reply %s: %v", a.body, err)
		}
		ids[reply.ID] = true
	}
	if created != 1 || len(ids) != 1 {
		t.Errorf("%d posts made a task and the replies name %d ids, want 1 and 1: %v", created, len(ids), ids)
	}
	counts := s.do("GET", "/ops", aliceToken, ``).JSON(t)["counts"].(map[string]any)
	if counts["pending"] != 1.0 {
		t.Errorf("counts after the race: %v", counts)
	}
	posted := 0
	for _, ev := range s.events() {
		if ev["event"] == "posted" {
			posted++
		}
	}
	if posted != 1 {
		t.Errorf("%d posted events, want 1", posted)
	}
}

// TestIdempotencyKey: a replay answers 200 with the first task's id and
// current status, also after a restart; another item is 409; a key is per
// queue. Needs the index's keys.
func TestIdempotencyKey(t *testing.T) {
	s, d := startManage(t)
	first := s.withKey("ops", aliceToken, "k-1", `{"width":1}`)
	first.want(t, "first post", 201, "")
	id := first.JSON(t)["id"].(string)
	if first.Header.Get("Location") != "/ops/"+id {
		t.Errorf("Location: %q", first.Header.Get("Location"))
	}
	again := s.withKey("ops", aliceToken, "k-1", `{ "width": 1 }`)
	again.want(t, "replay", 200, "")
	wantReply(t, "replay", again.JSON(t), map[string]any{"id": id, "status": "pending"})
	s.withKey("ops", aliceToken, "k-1", `{"width":2}`).want(t, "another item", 409, "idempotency_conflict")
	if c := s.claimHTTP("ops", "w1", 0); c == nil || c["id"] != id {
		t.Fatalf("claim: %v", c)
	}
	wantReply(t, "replay while processing", s.withKey("ops", eveToken, "k-1", `{"width":1}`).JSON(t),
		map[string]any{"id": id, "status": "processing"})
	// The same key on another queue is another task.
	if r := s.withKey("opsopen", "", "k-1", `{"width":1}`); r.Status != 201 || r.JSON(t)["id"] == id {
		t.Errorf("the key on another queue: %d %s", r.Status, r.Body)
	}
	for _, key := range []string{"", "with space", strings.Repeat("k", 201)} {
		s.withKey("ops", aliceToken, key, `{}`).want(t, fmt.Sprintf("key %.10q", key), 400, "invalid_request")
	}
	s.stop()
	s = start(t, d)
	wantReply(t, "replay after a restart", s.withKey("ops", aliceToken, "k-1", `{"width":1}`).JSON(t),
		map[string]any{"id": id, "status": "processing"})
	if n := s.do("GET", "/ops", aliceToken, ``).JSON(t)["counts"].(map[string]any); n["pending"] != 0.0 || n["processing"] != 1.0 {
		t.Errorf("counts: %v", n)
	}
}

// TestBatchPost: all or nothing, ids in order, the query parameters for all.
func TestBatchPost(t *testing.T) {
	s, _ := startManage(t)
	bad := `{"items":[{"width":1},{},{"n":2},{"width":"wide"},{"width":0.5}]}`
	r := s.do("POST", "/ops/batch", eveToken, bad)
	r.want(t, "a batch with bad items", 422, "invalid_item")
	var paths []string
	for _, d := range r.JSON(t)["details"].([]any) {
		paths = append(paths, d.(map[string]any)["path"].(string))
	}
	if strings.Join(paths, " ") != "/items/3/width /items/4/width" {
		t.Errorf("details: %v", paths)
	}
	if n := s.do("GET", "/ops", aliceToken, ``).JSON(t)["counts"].(map[string]any); n["pending"] != 0.0 {
		t.Errorf("a refused batch left tasks: %v", n)
	}
	if len(s.events()) != 0 {
		t.Errorf("a refused batch logged events: %v", s.events())
	}

	r = s.do("POST", "/ops/batch?priority=5", eveToken, `{"items":[{"n":0},{"n":1},{"n":2}]}`)
	r.want(t, "batch", 201, "")
	var ids []string
	for _, id := range r.JSON(t)["ids"].([]any) {
		ids = append(ids, id.(string))
	}
	if len(ids) != 3 {
		t.Fatalf("ids: %v", ids)
	}
	for i, id := range ids {
		rec := s.record("ops", "pending", id)
		if rec["item"].(map[string]any)["n"] != float64(i) || rec["priority"] != 5.0 || rec["postedBy"] != "eve" {
			t.Errorf("task %d of the batch: %v", i, rec)
		}
		if got := s.eventsOf(id); len(got) != 1 || got[0] != "posted" {
			t.Errorf("events of task %d: %v", i, got)
		}
	}
	s.doHeader("POST", "/ops/batch", host, eveToken, `{"items":[{}]}`, http.Header{"Idempotency-Key": {"k"}}).
		want(t, "a batch with a key", 400, "invalid_request")
	s.do("POST", "/ops/batch", eveToken, `{"items":[]}`).want(t, "an empty batch", 400, "invalid_request")
	s.do("POST", "/ops/batch", eveToken, `{"items":[`+strings.TrimSuffix(strings.Repeat(`{},`, 1001), ",")+`]}`).
		want(t, "1001 items", 400, "invalid_request")
	s.do("POST", "/ops/batch?delay=x", eveToken, `{"items":[{}]}`).want(t, "a bad delay", 400, "invalid_request")
	s.do("POST", "/ops/batch", eveToken, `{"items":`).want(t, "bad JSON", 400, "invalid_json")
	big := `{"items":[` + strings.TrimSuffix(strings.Repeat(`{"n":1},`, 1000), ",") + `]}`
	r = s.do("POST", "/ops/batch", eveToken, big)
	if r.Status != 201 || len(r.JSON(t)["ids"].([]any)) != 1000 {
		t.Errorf("a batch of 1000: %d", r.Status)
	}
}

// TestBatchClaim: a claim with max takes up to that many tasks.
func TestBatchClaim(t *testing.T) {
	s, _ := startManage(t)
	r := s.do("POST", "/ops/batch", aliceToken, `{"items":[{},{},{},{},{}]}`)
	posted := map[any]bool{}
	for _, id := range r.JSON(t)["ids"].([]any) {
		posted[id] = true
	}
	claim := func(body string) []any {
		t.Helper()
		r := s.do("POST", "/ops/claim", "", body)
		if r.Status == 204 {
			return nil
		}
		if r.Status != 200 {
			t.Fatalf("claim %s: %d %s", body, r.Status, r.Body)
		}
		return r.JSON(t)["tasks"].([]any)
	}
	got := claim(`{"worker":"w1","max":3}`)
	got = append(got, claim(`{"worker":"w1","max":3}`)...)
	if len(got) != 5 {
		t.Fatalf("claims of 3 and 3 took %d tasks: %v", len(got), got)
	}
	for _, c := range got {
		m := c.(map[string]any)
		if !posted[m["id"]] || m["attempts"] != 1.0 || m["lease"].(map[string]any)["worker"] != "w1" {
			t.Errorf("claimed %v", m)
		}
		delete(posted, m["id"])
	}
	if rest := claim(`{"worker":"w1","max":3}`); rest != nil {
		t.Errorf("claim with nothing pending: %v", rest)
	}
	s.do("POST", "/ops/claim", "", `{"max":101}`).want(t, "max 101", 400, "invalid_request")
	s.do("POST", "/ops/claim", "", `{"max":0}`).want(t, "max 0", 400, "invalid_request")
}

// TestQueueInfoShowsProblems: a served queue whose file turns invalid keeps
// its last valid version, and GET /{queue} lists why, until it is fixed.
func TestQueueInfoShowsProblems(t *testing.T) {
	s, d := startManage(t)
	if _, ok := s.do("GET", "/ops", aliceToken, ``).JSON(t)["problems"]; ok {
		t.Fatalf("a valid queue shows problems")
	}
	file := filepath.Join(d.hosts, host, "taskhoster-queues", "opsopen.json")
	writeFile(t, file, `{"item": {}, "settings": {"leaseSeconds": -1}, "access": {"post": "public", "manage": "public"}}`)
	var info map[string]any
	eventually(t, "the problems in GET /opsopen", func() bool {
		info = s.do("GET", "/opsopen", "", ``).JSON(t)
		return info["problems"] != nil
	})
	problems, _ := info["problems"].([]any)
	if len(problems) == 0 || !strings.Contains(fmt.Sprint(problems), "leaseSeconds") {
		t.Errorf("problems: %v", info["problems"])
	}
	if info["paused"] != false || s.do("POST", "/opsopen", "", `{}`).Status != 201 {
		t.Errorf("the last valid version is not served: %v", info)
	}
	writeFile(t, file, `{"item": {}, "access": {"post": "public", "status": "public", "work": "public", "manage": "public"}}`)
	eventually(t, "the problems gone", func() bool {
		_, ok := s.do("GET", "/opsopen", "", ``).JSON(t)["problems"]
		return !ok
	})
}
