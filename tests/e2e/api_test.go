package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestLifecycleOverHTTP walks one task from post to fetched through every
// endpoint and checks the answers, the file on disc and the event log.
func TestLifecycleOverHTTP(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))

	r := s.do("POST", "/resize", aliceToken, `{"url": "https://ex.com/a.png", "width": 800}`)
	if r.Status != http.StatusCreated {
		t.Fatalf("post: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	if got, want := r.Header.Get("Location"), "/resize/"+id; got != want {
		t.Errorf("Location = %q, want %q", got, want)
	}
	if diff := cmp.Diff(map[string]any{"id": id, "status": "pending"}, r.JSON(t)); diff != "" {
		t.Errorf("post body (-want +got):\n%s", diff)
	}

	// The file on disc holds exactly the seed's fields, in the pending dir.
	data, err := os.ReadFile(s.taskFile("resize", "pending", id))
	if err != nil {
		t.Fatalf("task file: %v", err)
	}
	var rec map[string]any
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(rec))
	for k := range rec {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	wantKeys := []string{"attempts", "error", "fetchedAt", "finishedAt", "host", "id", "item", "lease", "postedAt", "postedBy", "progress", "queue", "result", "status", "updatedAt"}
	if diff := cmp.Diff(wantKeys, keys); diff != "" {
		t.Errorf("record keys (-want +got):\n%s", diff)
	}
	if rec["postedBy"] != "alice" || rec["host"] != host || rec["status"] != "pending" {
		t.Errorf("record = %s", data)
	}

	// Status: the view, without host, item, postedBy, lease, fetchedAt.
	view := s.do("GET", "/resize/"+id, aliceToken, "").JSON(t)
	viewKeys := make([]string, 0)
	for k := range view {
		viewKeys = append(viewKeys, k)
	}
	sort.Strings(viewKeys)
	if diff := cmp.Diff([]string{"attempts", "error", "finishedAt", "id", "postedAt", "progress", "queue", "result", "status", "updatedAt"}, viewKeys); diff != "" {
		t.Errorf("view keys (-want +got):\n%s", diff)
	}

	// Claim.
	r = s.do("POST", "/resize/claim", boxToken, `{"worker": "box-1"}`)
	if r.Status != http.StatusOK {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	claim := r.JSON(t)
	if claim["id"] != id || claim["attempts"] != 1.0 || claim["lease"].(map[string]any)["worker"] != "box-1" {
		t.Errorf("claim = %s", r.Body)
	}
	// The new file is written before the claim's commit, the old one set
	// aside just after it (fsstore.Put): both may be there for a moment.
	if !exists(s.taskFile("resize", "processing", id)) {
		t.Errorf("after claim the file is not in processing/")
	}
	eventually(t, "the claimed task's file to leave pending/", func() bool { return !exists(s.taskFile("resize", "pending", id)) })
	// Nothing else to claim: 204 at once.
	if r := s.do("POST", "/resize/claim", boxToken, ``); r.Status != http.StatusNoContent {
		t.Errorf("second claim: %d %s", r.Status, r.Body)
	}

	// Progress: accepted from the holder, extends the lease; refused for others.
	until := claim["lease"].(map[string]any)["until"].(float64)
	r = s.do("POST", "/resize/"+id+"/progress", boxToken, `{"worker":"box-1","progress":{"percent":40}}`)
	p := r.JSON(t)
	if r.Status != 200 || p["accepted"] != true || p["lease"].(map[string]any)["until"].(float64) < until {
		t.Errorf("progress: %d %s", r.Status, r.Body)
	}
	r = s.do("POST", "/resize/"+id+"/progress", boxToken, `{"worker":"box-2","progress":{"percent":50}}`)
	if diff := cmp.Diff(map[string]any{"accepted": false, "status": "processing"}, r.JSON(t)); diff != "" {
		t.Errorf("progress from another worker (-want +got):\n%s", diff)
	}
	if got := s.do("GET", "/resize/"+id, aliceToken, "").JSON(t)["progress"]; !cmp.Equal(got, map[string]any{"percent": 40.0}) {
		t.Errorf("progress in view = %v", got)
	}

	// Result: first wins, the second is told accepted false.
	r = s.do("POST", "/resize/"+id+"/result", boxToken, `{"worker":"box-1","result":{"url":"https://ex.com/a.jpg"}}`)
	if diff := cmp.Diff(map[string]any{"accepted": true}, r.JSON(t)); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	r = s.do("POST", "/resize/"+id+"/result", boxToken, `{"worker":"box-2","result":{}}`)
	if diff := cmp.Diff(map[string]any{"accepted": false, "status": "finished"}, r.JSON(t)); diff != "" {
		t.Errorf("second result (-want +got):\n%s", diff)
	}
	if !exists(s.taskFile("resize", "done", id)) {
		t.Errorf("after result the file is not in done/")
	}
	eventually(t, "the finished task's file to leave processing/", func() bool { return !exists(s.taskFile("resize", "processing", id)) })

	// The first terminal read stamps fetchedAt and logs fetched, once.
	view = s.do("GET", "/resize/"+id, aliceToken, "").JSON(t)
	if view["status"] != "finished" || !cmp.Equal(view["result"], map[string]any{"url": "https://ex.com/a.jpg"}) {
		t.Errorf("final view = %v", view)
	}
	s.do("GET", "/resize/"+id, aliceToken, "")
	data, _ = os.ReadFile(s.taskFile("resize", "done", id))
	if !strings.Contains(string(data), `"fetchedAt":1`) {
		t.Errorf("fetchedAt not stamped on disc: %s", data)
	}
	want := []string{"posted", "claimed", "progress", "result", "fetched"}
	if diff := cmp.Diff(want, s.eventsOf(id)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// Queue and host info.
	info := s.do("GET", "/resize", aliceToken, "").JSON(t)
	if diff := cmp.Diff(map[string]any{"pending": 0.0, "processing": 0.0, "done": 1.0}, info["counts"]); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if info["name"] != "resize" || info["settings"].(map[string]any)["leaseSeconds"] != 60.0 {
		t.Errorf("queue info = %s", s.do("GET", "/resize", aliceToken, "").Body)
	}
	hostInfo := s.do("GET", "/", "", "").JSON(t)
	if diff := cmp.Diff(map[string]any{"host": host, "queues": []any{"public", "resize"}}, hostInfo); diff != "" {
		t.Errorf("host info (-want +got):\n%s", diff)
	}
	if r := s.do("GET", "/_health", "", ""); r.Status != 200 || string(r.Body) != "{\"ok\":true}\n" {
		t.Errorf("health: %d %q", r.Status, r.Body)
	}
}

// TestAuthMatrix checks 401, 403 and 404 exactly as SPEC §2 writes them.
func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	id := s.post("resize", aliceToken, `{"url":"x"}`)
	const unknownToken = "00000000000000000000000000000000"
	cases := []struct {
		name, method, path, token, body string
		want                            int
	}{
		{"post without token", "POST", "/resize", "", `{"url":"x"}`, 401},
		{"post with unknown token", "POST", "/resize", unknownToken, `{"url":"x"}`, 401},
		{"post by worker not allowed", "POST", "/resize", boxToken, `{"url":"x"}`, 403},
		{"post by stranger", "POST", "/resize", eveToken, `{"url":"x"}`, 403},
		{"post by alice", "POST", "/resize", aliceToken, `{"url":"x"}`, 201},
		{"status without token", "GET", "/resize/" + id, "", "", 401},
		{"status by worker", "GET", "/resize/" + id, boxToken, "", 403},
		{"status by alice", "GET", "/resize/" + id, aliceToken, "", 200},
		{"status of unknown task", "GET", "/resize/0123456789abcdef", aliceToken, "", 404},
		{"status of task via other queue", "GET", "/public/" + id, "", "", 404},
		{"claim without token", "POST", "/resize/claim", "", "", 401},
		{"claim by alice", "POST", "/resize/claim", aliceToken, "", 403},
		{"progress by alice", "POST", "/resize/" + id + "/progress", aliceToken, `{"progress":{}}`, 403},
		{"result without token", "POST", "/resize/" + id + "/result", "", `{"result":{}}`, 401},
		{"queue info anonymous", "GET", "/resize", "", "", 401},
		{"queue info stranger", "GET", "/resize", eveToken, "", 403},
		{"queue info worker", "GET", "/resize", boxToken, "", 200},
		{"unknown queue", "GET", "/nope", aliceToken, "", 404},
		{"unknown queue anonymous", "POST", "/nope", "", "{}", 404},
		{"public post anonymous", "POST", "/public", "", `{"a":1}`, 201},
		{"public queue info anonymous", "GET", "/public", "", "", 200},
		{"logs-only action does not grant status", "GET", "/resize/" + id, eveToken, "", 403},
		{"method not allowed on task", "PUT", "/resize/" + id, aliceToken, "", 405}, // DELETE is a cancel (SPEC §12)
		{"method not allowed on claim", "GET", "/resize/claim", boxToken, "", 405},
		{"method not allowed on work", "POST", "/resize/work", boxToken, "", 405},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := s.do(c.method, c.path, c.token, c.body)
			if r.Status != c.want {
				t.Fatalf("%s %s: %d %s, want %d", c.method, c.path, r.Status, r.Body, c.want)
			}
			if c.want == 401 && r.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("401 without WWW-Authenticate")
			}
			if c.want >= 400 {
				body := r.JSON(t)
				if _, ok := body["error"].(string); !ok {
					t.Errorf("error body without code: %s", r.Body)
				}
			}
		})
	}
	if r := s.doHost("GET", "/", "nowhere.example.org", "", ""); r.Status != 404 || r.JSON(t)["error"] != "unknown_host" {
		t.Errorf("unknown host: %d %s", r.Status, r.Body)
	}
	if r := s.doHost("GET", "/", "Task.Example.COM:8080", "", ""); r.Status != 200 {
		t.Errorf("host with port and capitals: %d %s", r.Status, r.Body)
	}
	if r := s.doHost("GET", "/", host+".localhost", "", ""); r.Status != 200 || r.JSON(t)["host"] != host {
		t.Errorf("NAME.localhost: %d %s", r.Status, r.Body)
	}
	// A token never reaches the log.
	for _, tok := range []string{aliceToken, boxToken, eveToken, unknownToken} {
		if strings.Contains(s.Stderr(), tok) {
			t.Errorf("token %s appears in the server log", tok)
		}
	}
}

// TestBadInput checks the error codes for bad bodies and that they change nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	id := s.post("resize", aliceToken, `{"url":"x"}`)
	s.do("POST", "/resize/claim", boxToken, `{"worker":"w"}`)
	cases := []struct {
		name, path, token, body string
		status                  int
		code                    string
		details                 []any
	}{
		{"item not JSON", "/resize", aliceToken, `{"url":`, 400, "invalid_json", nil},
		{"item breaks schema", "/resize", aliceToken, `{"width": 0}`, 422, "invalid_item", []any{
			map[string]any{"path": "", "message": "missing properties: 'url'"},
			map[string]any{"path": "/width", "message": "must be >= 1 but found 0"},
		}},
		{"item too large", "/resize", aliceToken, `{"url":"` + strings.Repeat("x", 5000) + `"}`, 413, "too_large", nil},
		{"progress breaks schema", "/resize/" + id + "/progress", boxToken, `{"worker":"w","progress":{"percent":"x"}}`, 422, "invalid_progress", nil},
		{"result breaks schema", "/resize/" + id + "/result", boxToken, `{"worker":"w","result":[1]}`, 422, "invalid_result", nil},
		{"result too large", "/resize/" + id + "/result", boxToken, `{"worker":"w","result":{"a":"` + strings.Repeat("x", 5000) + `"}}`, 413, "too_large", nil},
		{"claim with bad query", "/resize/claim", boxToken, `{"query": {"type": 12}}`, 400, "invalid_query", nil},
		{"claim with bad wait", "/resize/claim", boxToken, `{"wait": 61}`, 400, "invalid_request", nil},
		{"claim body not JSON", "/resize/claim", boxToken, `nope`, 400, "invalid_json", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := s.do("POST", c.path, c.token, c.body)
			if r.Status != c.status {
				t.Fatalf("%d %s, want %d", r.Status, r.Body, c.status)
			}
			body := r.JSON(t)
			if body["error"] != c.code {
				t.Errorf("code = %v, want %s", body["error"], c.code)
			}
			if c.details != nil {
				got := body["details"].([]any)
				sort.Slice(got, func(i, j int) bool {
					return fmt.Sprint(got[i]) < fmt.Sprint(got[j])
				})
				if diff := cmp.Diff(c.details, got); diff != "" {
					t.Errorf("details (-want +got):\n%s", diff)
				}
			}
		})
	}
	// Nothing of that changed anything: one task, still processing, two events.
	info := s.do("GET", "/resize", aliceToken, "").JSON(t)
	if diff := cmp.Diff(map[string]any{"pending": 0.0, "processing": 1.0, "done": 0.0}, info["counts"]); diff != "" {
		t.Errorf("counts after bad input (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"posted", "claimed"}, s.eventsOf(id)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestClaimOrderAndQuery checks FIFO hand-out, query filtering and a
// long-poll claim woken by a post.
func TestClaimOrderAndQuery(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	var ids []string
	for i := range 3 {
		ids = append(ids, s.post("resize", aliceToken, fmt.Sprintf(`{"url":"u%d","width":%d}`, i, 100*(i+1))))
	}
	// A query that only the third task matches.
	r := s.do("POST", "/resize/claim", boxToken, `{"query":{"properties":{"width":{"minimum":250}}}}`)
	if r.Status != 200 || r.JSON(t)["id"] != ids[2] {
		t.Fatalf("query claim: %d %s, want %s", r.Status, r.Body, ids[2])
	}
	for _, want := range ids[:2] {
		r := s.do("POST", "/resize/claim", boxToken, ``)
		if got := r.JSON(t)["id"]; got != want {
			t.Fatalf("claim order: got %v, want %s", got, want)
		}
	}
	// A waiting claim gets a task posted while it waits.
	got := make(chan response, 1)
	go func() { got <- s.do("POST", "/resize/claim", boxToken, `{"wait": 20}`) }()
	// Whether the claim is already parked or not when the post lands, it must
	// get the task: a missed wake-up would end in 204 after 20 s.
	id := s.post("resize", aliceToken, `{"url":"late"}`)
	r = <-got
	if r.Status != 200 || r.JSON(t)["id"] != id {
		t.Fatalf("long-poll claim: %d %s, want %s", r.Status, r.Body, id)
	}
}

// TestConcurrentClaimsAndResults: many workers race; every task is handed
// out once and finished once.
func TestConcurrentClaimsAndResults(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	const tasks, workers = 40, 8
	posted := map[string]bool{}
	for i := range tasks {
		posted[s.post("public", "", fmt.Sprintf(`{"n":%d}`, i))] = true
	}
	var mu sync.Mutex
	claimed := map[string]int{}
	accepted := map[string]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r := s.do("POST", "/public/claim", "", fmt.Sprintf(`{"worker":"w%d"}`, w))
				if r.Status == http.StatusNoContent {
					return
				}
				id := r.JSON(t)["id"].(string)
				// Two results per task, from two workers: exactly one is accepted.
				a := s.do("POST", "/public/"+id+"/result", "", fmt.Sprintf(`{"worker":"w%d","result":1}`, w))
				b := s.do("POST", "/public/"+id+"/result", "", `{"worker":"other","result":2}`)
				mu.Lock()
				claimed[id]++
				for _, r := range []response{a, b} {
					if r.JSON(t)["accepted"] == true {
						accepted[id]++
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(claimed) != tasks {
		t.Errorf("claimed %d distinct tasks, want %d", len(claimed), tasks)
	}
	for id := range posted {
		if claimed[id] != 1 || accepted[id] != 1 {
			t.Errorf("task %s: claimed %d times, accepted %d results", id, claimed[id], accepted[id])
		}
	}
	results := 0
	for _, ev := range s.events() {
		if ev["event"] == "result" {
			results++
		}
	}
	if results != tasks {
		t.Errorf("%d result events, want %d", results, tasks)
	}
}

// TestOtherMethodsOnServerPaths: /_health and /_openapi.json are known
// paths too, so any other method on them is 405 method_not_allowed with
// Allow: GET (SPEC §3), not the 404 unknown_queue of a queue named
// "_health" that POST /{queue} would give.
func TestOtherMethodsOnServerPaths(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	for _, path := range []string{"/_health", "/_openapi.json"} {
		for _, method := range []string{"POST", "PUT", "DELETE", "PATCH"} {
			r := s.do(method, path, aliceToken, `{}`)
			if r.Status != http.StatusMethodNotAllowed || r.JSON(t)["error"] != "method_not_allowed" {
				t.Errorf("%s %s: %d %s, want 405 method_not_allowed", method, path, r.Status, r.Body)
			}
			if got := r.Header.Values("Allow"); len(got) != 1 || got[0] != "GET" {
				t.Errorf("%s %s: Allow %q, want [GET]", method, path, got)
			}
		}
		if r := s.do("GET", path, "", ""); r.Status != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, r.Status, r.Body)
		}
	}
}

// TestUnauthorizedChallengeIsBearer: a 401, over HTTP or on a socket's
// upgrade, carries exactly the challenge SPEC §2 names,
// "WWW-Authenticate: Bearer".
func TestUnauthorizedChallengeIsBearer(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	for _, c := range []struct{ method, path, token string }{
		{"POST", "/resize", ""},
		{"GET", "/resize", "00000000000000000000000000000000"},
		{"POST", "/resize/claim", ""},
	} {
		r := s.do(c.method, c.path, c.token, "")
		if got := r.Header.Values("WWW-Authenticate"); r.Status != http.StatusUnauthorized || len(got) != 1 || got[0] != "Bearer" {
			t.Errorf("%s %s: %d, WWW-Authenticate %q, want 401 and [Bearer]", c.method, c.path, r.Status, got)
		}
	}
	_, resp, err := s.dialRaw("/resize/work", "")
	if err == nil || resp == nil {
		t.Fatalf("dial without a token: %v", err)
	}
	resp.Body.Close()
	if got := resp.Header.Values("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || len(got) != 1 || got[0] != "Bearer" {
		t.Errorf("upgrade without a token: %d, WWW-Authenticate %q, want 401 and [Bearer]", resp.StatusCode, got)
	}
}
