package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/httpapi"
	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/app"
)

// goWords are what a message must never say: Go's names for things.
var goWords = []string{"Go struct", "float64", "json:", "unmarshal", "RawMessage", "*"}

// TestErrorsNameWhatIsWrong: refusals of a body, a host, a queue, a path
// and a method are JSON with the SPEC's code, in a client's words: they
// name the field and the JSON type it must be, or the host or queue asked
// for, and never a Go type.
func TestErrorsNameWhatIsWrong(t *testing.T) {
	api, _ := newAPI(t)
	id := postAs(t, api, "open", "", `{}`)
	cases := []struct {
		name, method, host, path, body string
		status                         int
		code                           string
		says                           []string // in the message
	}{
		{"misspelt claim field", "POST", "", "/open/claim", `{"wiat":1}`, 400, "invalid_request",
			[]string{`unknown field "wiat"`, "worker, query, wait, max"}},
		{"wait of the wrong type", "POST", "", "/open/claim", `{"wait":"5"}`, 400, "invalid_json",
			[]string{`"wait" must be a number, not a string`}},
		{"max not an integer", "POST", "", "/open/claim", `{"max":1.5}`, 400, "invalid_json",
			[]string{`"max" must be an integer, not 1.5`}},
		{"worker not a string", "POST", "", "/open/claim", `{"worker":{"a":1}}`, 400, "invalid_json",
			[]string{`"worker" must be a string, not an object`}},
		{"wait out of range", "POST", "", "/open/claim", `{"wait":1e999}`, 400, "invalid_json",
			[]string{`"wait" is a number too large`}},
		{"a body that is no object", "POST", "", "/open/claim", `[1]`, 400, "invalid_json",
			[]string{"the body must be an object, not an array"}},
		{"syntax", "POST", "", "/open/claim", `{"wait":1,}`, 400, "invalid_json",
			[]string{"not valid JSON", "at byte 11"}},
		{"cut short", "POST", "", "/open/claim", `{"wait":`, 400, "invalid_json",
			[]string{"ends before its value does"}},
		{"two values", "POST", "", "/open/claim", `{} {}`, 400, "invalid_json",
			[]string{"one JSON object, with nothing after it"}},
		{"misspelt progress field", "POST", "", "/open/" + id + "/progress", `{"progress":1,"resutl":2}`, 400, "invalid_request",
			[]string{`unknown field "resutl"`, "worker, progress, result, delay, reason, attempt"}},
		{"a field no call takes", "POST", "", "/open/" + id + "/heartbeat", `{"worker":"w","lease":1}`, 400, "invalid_request",
			[]string{`unknown field "lease"`}},
		{"misspelt batch field", "POST", "", "/open/batch", `{"item":[{}]}`, 400, "invalid_request",
			[]string{`unknown field "item"`, "takes items"}},
		{"batch items not a list", "POST", "", "/open/batch", `{"items":{}}`, 400, "invalid_json",
			[]string{`"items" must be an array, not an object`}},
		{"unknown host", "GET", "Nope.Example:8080", "/", ``, 404, "unknown_host",
			[]string{`no host "nope.example"`, "Host header", "without its port", "folder under the hosts folder"}},
		{"unknown queue", "GET", "", "/nope", ``, 404, "unknown_queue",
			[]string{`no queue "nope"`, `"task.example.com"`}},
		{"no such path", "GET", "", "/open/" + id + "/nothing/here", ``, 404, "not_found", nil},
		{"method on a task", "PUT", "", "/open/" + id, ``, 405, "method_not_allowed", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			host := c.host
			if host == "" {
				host = testHost
			}
			req := httptest.NewRequest(c.method, "http://"+host+c.path, strings.NewReader(c.body))
			rec := httptest.NewRecorder()
			api.ServeHTTP(rec, req)
			var body struct {
				Error   string            `json:"error"`
				Message string            `json:"message"`
				Details []json.RawMessage `json:"details"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("%d, body %q is not JSON: %v", rec.Code, rec.Body, err)
			}
			if rec.Code != c.status || body.Error != c.code || body.Details == nil {
				t.Errorf("got %d %s, want %d %s", rec.Code, rec.Body, c.status, c.code)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			for _, s := range c.says {
				if !strings.Contains(body.Message, s) {
					t.Errorf("message %q does not say %q", body.Message, s)
				}
			}
			for _, s := range goWords {
				if strings.Contains(body.Message, s) {
					t.Errorf("message %q says %q", body.Message, s)
				}
			}
		})
	}
}

// TestRouterMethodNotAllowedListsAllow: chi's own 405 (a method the path
// has no route for) lists in Allow the methods it has.
func TestRouterMethodNotAllowedListsAllow(t *testing.T) {
	api, _ := newAPI(t)
	for _, c := range []struct {
		method, path string
		allow        []string
	}{
		{"PUT", "/open/0123456789abcdef", []string{"GET", "DELETE"}},
		// A queue's own path: DELETE is a task's (/{queue}/{id}), not the
		// queue's, so it is no method the queue's path allows.
		{"DELETE", "/open", []string{"GET", "POST"}},
		{"PUT", "/open/", []string{"GET", "POST"}},
	} {
		req := httptest.NewRequest(c.method, "http://"+testHost+c.path, nil)
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		if diff := cmp.Diff(c.allow, rec.Header().Values("Allow")); rec.Code != 405 || diff != "" {
			t.Errorf("%s %s: %d, Allow (-want +got):\n%s", c.method, c.path, rec.Code, diff)
		}
	}
}

// TestRefusedBodyChangesNothing: a claim with a misspelt field is refused
// before it claims; the task stays pending.
func TestRefusedBodyChangesNothing(t *testing.T) {
	api, _ := newAPI(t)
	id := postAs(t, api, "open", "", `{}`)
	code, m := call(t, api, "POST", "/open/claim", "", `{"worker":"w","wiat":1}`)
	wantError(t, "claim", code, m, 400, "invalid_request")
	if _, view := call(t, api, "GET", "/open/"+id, "", ``); view["status"] != "pending" || view["attempts"] != 0.0 {
		t.Errorf("after a refused claim: %v", view)
	}
}

// TestRepliesAreNotHTMLEscaped: "<", ">" and "&" in an item and a result
// come back as themselves, not as \u003c and the like.
func TestRepliesAreNotHTMLEscaped(t *testing.T) {
	api, _ := newAPI(t)
	const item = `{"name":"<b>&</b>"}`
	id := postAs(t, api, "ops", aliceToken, item)
	raw := func(method, path, token, body string) string {
		t.Helper()
		req := httptest.NewRequest(method, "http://"+testHost+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	if got := raw("GET", "/ops/tasks", aliceToken, ``); !strings.Contains(got, item) {
		t.Errorf("task list %s does not hold the item %s as it was posted", got, item)
	}
	if got := raw("POST", "/ops/claim", "", `{"worker":"w"}`); !strings.Contains(got, item) {
		t.Errorf("claim %s does not hold the item %s", got, item)
	}
	raw("POST", "/ops/"+id+"/result", "", `{"worker":"w","result":{"html":"<i>&amp;</i>"}}`)
	if got := raw("GET", "/ops/"+id, aliceToken, ``); !strings.Contains(got, `"result":{"html":"<i>&amp;</i>"}`) {
		t.Errorf("status view %s escapes the result", got)
	}
}

// /_health is {"ok": true} until the server has stopped writing after a
// failed flush; then 503 storage_unavailable, without the cause (which
// may name folders: the admin listener's /healthz gives it).
func TestHealthFailsOnceWritesHaveStopped(t *testing.T) {
	var stopped error
	api, _ := newAPIOptions(t, notify.NewHub(), httpapi.Options{Stopped: func() error { return stopped }})
	probe := func() (int, map[string]any) {
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/_health", nil))
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("/_health answered %q: %v", rec.Body, err)
		}
		return rec.Code, body
	}
	if code, body := probe(); code != http.StatusOK || body["ok"] != true {
		t.Errorf("/_health while writing: %d %v", code, body)
	}
	stopped = errors.New("journal write failed; restart the server: write /srv/items/.journal/journal-a: EIO")
	code, body := probe()
	if code != http.StatusServiceUnavailable || body["error"] != "storage_unavailable" {
		t.Errorf("/_health once stopped: %d %v, want 503 storage_unavailable", code, body)
	}
	if msg, _ := body["message"].(string); strings.Contains(msg, "/srv") {
		t.Errorf("/_health tells a client the cause: %q", msg)
	}
}

// timedOutSync fails every flush as a store does whose own deadline passed
// (the PostgreSQL store's batches run under a minute's timeout).
type timedOutSync struct{}

func (timedOutSync) Sync(context.Context) error {
	return fmt.Errorf("commit: %w", context.DeadlineExceeded)
}

// TestADeadlineOfTheServersOwnIsNoSilentSuccess: a use case failing with a
// context error of its own, while the client is still there, is answered
// 500 internal; only a request whose client has gone is left unanswered.
func TestADeadlineOfTheServersOwnIsNoSilentSuccess(t *testing.T) {
	api, _ := newAPIDeps(t, httpapi.Options{}, func(d *app.Deps) { d.Syncer = timedOutSync{} })
	code, m := call(t, api, "POST", "/open", "", `{}`)
	wantError(t, "a post whose flush timed out", code, m, 500, "internal")
}
