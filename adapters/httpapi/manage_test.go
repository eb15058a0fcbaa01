package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/taskhoster/taskhoster/adapters/httpapi"
)

// SPEC §12 over HTTP, in-process. The queue ops lets alice manage it, alice
// and box post to it, and anyone work it.

const unknownToken = "0000000000000000000000000000dead"

// call makes one request as the holder of token ("" for none), with extra
// headers, and decodes its JSON object reply.
func call(t *testing.T, api *httpapi.API, method, path, token, body string, header ...string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, "http://"+testHost+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, req)
	var m map[string]any
	if rec.Body.Len() > 0 {
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatalf("%s %s: body %q: %v", method, path, rec.Body, err)
		}
	}
	return rec.Code, m
}

// postAs posts item to queue as the holder of token and returns the id.
func postAs(t *testing.T, api *httpapi.API, queue, token, item string) string {
	t.Helper()
	code, m := call(t, api, "POST", "/"+queue, token, item)
	if code != http.StatusCreated {
		t.Fatalf("post to %s: %d %v", queue, code, m)
	}
	return m["id"].(string)
}

func wantError(t *testing.T, what string, code int, m map[string]any, status int, errCode string) {
	t.Helper()
	if code != status || m["error"] != errCode {
		t.Errorf("%s: %d %v, want %d %s", what, code, m, status, errCode)
	}
}

func TestManageRoutesAccess(t *testing.T) {
	api, _ := newAPI(t)
	id := postAs(t, api, "ops", aliceToken, `{}`)
	routes := []struct{ method, path, body string }{
		{"GET", "/ops/tasks", ``},
		{"POST", "/ops/" + id + "/retry", ``},
		{"POST", "/ops/purge?status=failed", ``},
		{"POST", "/ops/pause", ``},
		{"POST", "/ops/resume", ``},
	}
	for _, r := range routes {
		code, m := call(t, api, r.method, r.path, "", r.body)
		wantError(t, r.method+" "+r.path+" without a token", code, m, 401, "unauthorized")
		code, m = call(t, api, r.method, r.path, unknownToken, r.body)
		wantError(t, r.method+" "+r.path+" with an unknown token", code, m, 401, "unauthorized")
		code, m = call(t, api, r.method, r.path, boxToken, r.body)
		wantError(t, r.method+" "+r.path+" by box", code, m, 403, "forbidden")
		if code, m := call(t, api, r.method, r.path, aliceToken, r.body); code >= 400 && m["error"] != "not_failed" {
			t.Errorf("%s %s by alice: %d %v", r.method, r.path, code, m)
		}
	}
	// Batch posts and cancels need post (a cancel by a poster: its own tasks).
	code, m := call(t, api, "POST", "/ops/batch", "", `{"items":[{}]}`)
	wantError(t, "batch without a token", code, m, 401, "unauthorized")
	code, m = call(t, api, "POST", "/resize/batch", boxToken, `{"items":[{"url":"a"}]}`)
	wantError(t, "batch by box on resize", code, m, 403, "forbidden")
	code, m = call(t, api, "DELETE", "/ops/"+id, unknownToken, ``)
	wantError(t, "cancel with an unknown token", code, m, 401, "unauthorized")
	code, m = call(t, api, "DELETE", "/resize/0123456789abcdef", boxToken, ``)
	wantError(t, "cancel by box on resize", code, m, 403, "forbidden")
	for _, path := range []string{"/ops/tasks"} {
		if code, _ := call(t, api, "POST", path, aliceToken, ``); code != http.StatusMethodNotAllowed {
			t.Errorf("POST %s: %d", path, code)
		}
	}
	for _, path := range []string{"/ops/batch", "/ops/purge", "/ops/pause", "/ops/resume", "/ops/" + id + "/retry"} {
		if code, _ := call(t, api, "GET", path, aliceToken, ``); code != http.StatusMethodNotAllowed {
			t.Errorf("GET %s: %d", path, code)
		}
	}
}

func TestListParameters(t *testing.T) {
	api, _ := newAPI(t)
	for _, query := range []string{"", "status=failed&order=newest&limit=1000", "status=finished&order=oldest&limit=1",
		"query=%7B%22type%22%3A%22object%22%7D", "status=processing"} {
		code, m := call(t, api, "GET", "/ops/tasks?"+query, aliceToken, ``)
		if _, ok := m["next"]; code != http.StatusOK || m["tasks"] == nil || !ok {
			t.Errorf("list with %q: %d %v", query, code, m)
		}
	}
	for _, query := range []string{"status=done", "status=", "status=failed&status=pending", "order=random", "limit=0", "limit=1001",
		"limit=x", "limit=-1", "after=", "after=a%20b"} {
		code, m := call(t, api, "GET", "/ops/tasks?"+query, aliceToken, ``)
		wantError(t, "list with "+query, code, m, 400, "invalid_request")
	}
	for _, query := range []string{"query=%7B", "query=%7B%22type%22%3A7%7D", "query=nope"} {
		code, m := call(t, api, "GET", "/ops/tasks?"+query, aliceToken, ``)
		wantError(t, "list with "+query, code, m, 400, "invalid_query")
	}
}

func TestCancelAndRetry(t *testing.T) {
	api, _ := newAPI(t)
	mine := postAs(t, api, "ops", boxToken, `{}`)
	code, m := call(t, api, "DELETE", "/ops/"+mine, boxToken, ``)
	if code != http.StatusOK || m["accepted"] != true || m["status"] != "failed" || len(m) != 2 {
		t.Fatalf("cancel of box's own task: %d %v", code, m)
	}
	_, view := call(t, api, "GET", "/ops/"+mine, aliceToken, ``)
	if view["status"] != "failed" || view["error"] != "cancelled" {
		t.Errorf("view after cancel: %v", view)
	}
	code, m = call(t, api, "DELETE", "/ops/"+mine, boxToken, ``)
	if code != http.StatusOK || m["accepted"] != false || m["status"] != "failed" {
		t.Errorf("second cancel: %d %v", code, m)
	}
	theirs := postAs(t, api, "ops", aliceToken, `{}`)
	code, m = call(t, api, "DELETE", "/ops/"+theirs, boxToken, ``)
	wantError(t, "box cancels alice's task", code, m, 403, "forbidden")
	// alice manages: she cancels anyone's.
	other := postAs(t, api, "ops", boxToken, `{}`)
	if code, m := call(t, api, "DELETE", "/ops/"+other, aliceToken, ``); code != http.StatusOK || m["accepted"] != true {
		t.Errorf("alice cancels box's task: %d %v", code, m)
	}
	for _, id := range []string{"0123456789abcdef", "nope"} {
		code, m := call(t, api, "DELETE", "/ops/"+id, aliceToken, ``)
		wantError(t, "cancel of "+id, code, m, 404, "not_found")
		code, m = call(t, api, "POST", "/ops/"+id+"/retry", aliceToken, ``)
		wantError(t, "retry of "+id, code, m, 404, "not_found")
	}

	// Retry: the cancelled task is pending again, as fresh.
	code, m = call(t, api, "POST", "/ops/"+mine+"/retry", aliceToken, ``)
	if code != http.StatusOK || m["id"] != mine || m["status"] != "pending" || m["attempts"] != 0.0 || m["error"] != nil || m["finishedAt"] != nil {
		t.Fatalf("retry: %d %v", code, m)
	}
	code, m = call(t, api, "POST", "/ops/"+mine+"/retry", aliceToken, ``)
	wantError(t, "retry of a pending task", code, m, 409, "not_failed")
}

func TestPurge(t *testing.T) {
	api, _ := newAPI(t)
	for i := 0; i < 3; i++ {
		call(t, api, "DELETE", "/ops/"+postAs(t, api, "ops", aliceToken, `{}`), aliceToken, ``)
	}
	kept := postAs(t, api, "ops", aliceToken, `{}`)
	for _, query := range []string{"", "?status=pending", "?status=processing", "?status=failed&status=finished"} {
		code, m := call(t, api, "POST", "/ops/purge"+query, aliceToken, ``)
		wantError(t, "purge"+query, code, m, 400, "invalid_request")
	}
	if code, m := call(t, api, "POST", "/ops/purge?status=finished", aliceToken, ``); code != http.StatusOK || m["deleted"] != 0.0 {
		t.Errorf("purge of finished: %d %v", code, m)
	}
	if code, m := call(t, api, "POST", "/ops/purge?status=failed", aliceToken, ``); code != http.StatusOK || m["deleted"] != 3.0 {
		t.Errorf("purge of failed: %d %v", code, m)
	}
	if code, _ := call(t, api, "GET", "/ops/"+kept, aliceToken, ``); code != http.StatusOK {
		t.Errorf("purge took a pending task: %d", code)
	}
}

func TestPauseAndResume(t *testing.T) {
	api, _ := newAPI(t)
	_, info := call(t, api, "GET", "/ops", aliceToken, ``)
	if info["paused"] != false {
		t.Errorf("queue info before a pause: %v", info)
	}
	if _, ok := info["problems"]; ok {
		t.Errorf("queue info shows problems it has not: %v", info)
	}
	if code, m := call(t, api, "POST", "/ops/pause", aliceToken, ``); code != http.StatusOK || m["paused"] != true || len(m) != 1 {
		t.Fatalf("pause: %d %v", code, m)
	}
	if _, info := call(t, api, "GET", "/ops", aliceToken, ``); info["paused"] != true {
		t.Errorf("queue info while paused: %v", info)
	}
	id := postAs(t, api, "ops", aliceToken, `{}`) // posts are still taken
	if code, m := call(t, api, "POST", "/ops/claim", "", `{"worker":"w"}`); code != http.StatusNoContent {
		t.Errorf("claim while paused: %d %v", code, m)
	}
	if code, m := call(t, api, "POST", "/ops/resume", aliceToken, ``); code != http.StatusOK || m["paused"] != false {
		t.Fatalf("resume: %d %v", code, m)
	}
	if code, m := call(t, api, "POST", "/ops/claim", "", `{"worker":"w"}`); code != http.StatusOK || m["id"] != id {
		t.Errorf("claim after resume: %d %v", code, m)
	}
}

func TestBatchPost(t *testing.T) {
	api, repo := newAPI(t)
	code, m := call(t, api, "POST", "/ops/batch?priority=2", boxToken, `{"items":[{"width":1},{},{"width":3}]}`)
	ids, _ := m["ids"].([]any)
	if code != http.StatusCreated || len(ids) != 3 || len(m) != 1 {
		t.Fatalf("batch: %d %v", code, m)
	}
	for _, id := range ids {
		if code, view := call(t, api, "GET", "/ops/"+id.(string), aliceToken, ``); code != http.StatusOK || view["status"] != "pending" {
			t.Errorf("a batch's task %v: %d %v", id, code, view)
		}
	}
	before := total(repo)
	code, m = call(t, api, "POST", "/ops/batch", boxToken, `{"items":[{"width":1},{"width":"x"},{},{"width":1.5}]}`)
	wantError(t, "batch with bad items", code, m, 422, "invalid_item")
	var paths []string
	details, _ := m["details"].([]any)
	for _, d := range details {
		paths = append(paths, d.(map[string]any)["path"].(string))
	}
	if strings.Join(paths, " ") != "/items/1/width /items/3/width" {
		t.Errorf("details of a bad batch: %v", m["details"])
	}
	if total(repo) != before {
		t.Errorf("a refused batch stored tasks")
	}
	for _, c := range []struct{ body, code string }{
		{`{"items":[]}`, "invalid_request"},
		{`{}`, "invalid_request"},
		{`{"items":{}}`, "invalid_json"},
		{`{"items":[{}]`, "invalid_json"},
		{`{"items":[` + strings.TrimSuffix(strings.Repeat(`{},`, 1001), ",") + `]}`, "invalid_request"},
	} {
		code, m := call(t, api, "POST", "/ops/batch", boxToken, c.body)
		wantError(t, "batch "+c.body[:min(len(c.body), 20)], code, m, 400, c.code)
	}
	code, m = call(t, api, "POST", "/ops/batch", boxToken, `{"items":[{}]}`, "Idempotency-Key", "k1")
	wantError(t, "batch with an Idempotency-Key", code, m, 400, "invalid_request")
	code, m = call(t, api, "POST", "/ops/batch?delay=-1", boxToken, `{"items":[{}]}`)
	wantError(t, "batch with a bad delay", code, m, 400, "invalid_request")
	if total(repo) != before {
		t.Errorf("refused batches stored tasks")
	}
}

func TestIdempotencyKeyRefused(t *testing.T) {
	api, repo := newAPI(t)
	before := total(repo)
	for _, key := range []string{"", "has space", "tab\there", strings.Repeat("k", 201), "é"} {
		code, m := call(t, api, "POST", "/ops", aliceToken, `{}`, "Idempotency-Key", key)
		wantError(t, "key "+key, code, m, 400, "invalid_request")
	}
	code, m := call(t, api, "POST", "/ops", aliceToken, `{}`, "Idempotency-Key", "a", "Idempotency-Key", "b")
	wantError(t, "two keys", code, m, 400, "invalid_request")
	if total(repo) != before {
		t.Errorf("refused posts stored tasks")
	}
	if code, m := call(t, api, "POST", "/ops", aliceToken, `{}`, "Idempotency-Key", strings.Repeat("k", 200)); code != http.StatusCreated {
		t.Errorf("a first post with a 200-character key: %d %v", code, m)
	}
}

func TestBatchClaim(t *testing.T) {
	api, _ := newAPI(t)
	posted := map[any]bool{}
	for i := 0; i < 3; i++ {
		posted[postAs(t, api, "open", "", `{}`)] = true
	}
	code, m := call(t, api, "POST", "/open/claim", "", `{"worker":"w","max":2}`)
	tasks, _ := m["tasks"].([]any)
	if code != http.StatusOK || len(tasks) != 2 || len(m) != 1 {
		t.Fatalf("claim of 2: %d %v", code, m)
	}
	for i, task := range tasks {
		c := task.(map[string]any)
		if !posted[c["id"]] || c["attempts"] != 1.0 || c["item"] == nil || c["lease"].(map[string]any)["worker"] != "w" {
			t.Errorf("claimed task %d: %v", i, c)
		}
		delete(posted, c["id"]) // each once
	}
	code, m = call(t, api, "POST", "/open/claim", "", `{"worker":"w","max":100}`)
	if tasks, _ := m["tasks"].([]any); code != http.StatusOK || len(tasks) != 1 {
		t.Errorf("claim of up to 100 with one left: %d %v", code, m)
	}
	if code, m := call(t, api, "POST", "/open/claim", "", `{"worker":"w","max":5}`); code != http.StatusNoContent {
		t.Errorf("claim with none left: %d %v", code, m)
	}
	for _, body := range []string{`{"max":0}`, `{"max":101}`, `{"max":-1}`} {
		code, m := call(t, api, "POST", "/open/claim", "", body)
		wantError(t, "claim "+body, code, m, 400, "invalid_request")
	}
}

// TestURLTokenOnlyOnWebSocketUpgrades: ?access_token= authenticates a
// WebSocket upgrade only (SPEC §2); on another request, whatever its
// Upgrade header, it is no token at all.
func TestURLTokenOnlyOnWebSocketUpgrades(t *testing.T) {
	api, _ := newAPI(t)
	id := postAs(t, api, "resize", aliceToken, `{"url":"a"}`)
	for _, h := range []http.Header{{"Authorization": {"Bearer " + aliceToken}}, {}, {"Upgrade": {"x"}}, {"Upgrade": {"websocket"}}} {
		req := httptest.NewRequest("GET", "/resize/"+id+"?access_token="+aliceToken, nil)
		req.Host = testHost
		for k, v := range h {
			req.Header[k] = v
		}
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		want := http.StatusUnauthorized
		if h.Get("Authorization") != "" {
			want = http.StatusOK
		}
		if rec.Code != want {
			t.Errorf("GET with the token in the URL and headers %v: %d %s, want %d", h, rec.Code, rec.Body, want)
		}
	}
}

// TestIdempotentReplayOfAnItemWithHTMLCharacters: a replay of a post whose
// item holds "&", "<" or ">" (a URL with a query string) is the same post,
// answered 200 with the first task, though the store keeps the item as
// json.Marshal writes it (\u0026 and the like).
func TestIdempotentReplayOfAnItemWithHTMLCharacters(t *testing.T) {
	api, repo := newAPI(t)
	item := `{"url":"https://ex.com/a.png?w=1&h=2","note":"<b>` + "\u2028" + `"}`
	code, first := call(t, api, "POST", "/open", "", item, "Idempotency-Key", "k1")
	if code != http.StatusCreated {
		t.Fatalf("first post: %d %v", code, first)
	}
	code, again := call(t, api, "POST", "/open", "", item, "Idempotency-Key", "k1")
	if code != http.StatusOK || again["id"] != first["id"] {
		t.Errorf("replay: %d %v, want 200 with id %v", code, again, first["id"])
	}
	code, m := call(t, api, "POST", "/open", "", `{"url":"https://ex.com/a.png?w=1&h=3"}`, "Idempotency-Key", "k1")
	wantError(t, "another item with the key", code, m, 409, "idempotency_conflict")
	if n := total(repo)[1].Pending; n != 1 {
		t.Errorf("%d tasks pending, want 1", n)
	}
}
