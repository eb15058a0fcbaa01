package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/adapters/clock"
	"github.com/taskhoster/taskhoster/adapters/folderconfig"
	"github.com/taskhoster/taskhoster/adapters/httpapi"
	"github.com/taskhoster/taskhoster/adapters/index"
	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

const (
	testHost   = "task.example.com"
	aliceToken = "a11ce0000000000000000000000000a1"
	boxToken   = "b0b0000000000000000000000000b0b0"
)

type nopLog struct{}

func (nopLog) Append(context.Context, domain.Event, bool) error { return nil }

type nopSync struct{}

func (nopSync) Sync(context.Context) error { return nil }

// memPauses keeps pauses in memory, for the tests of pause and resume.
type memPauses struct{ paused sync.Map }

func (p *memPauses) Paused(q domain.QueueRef) bool { _, ok := p.paused.Load(q); return ok }

func (p *memPauses) SetPaused(_ context.Context, q domain.QueueRef, paused bool) error {
	if paused {
		p.paused.Store(q, true)
	} else {
		p.paused.Delete(q)
	}
	return nil
}

// newAPI builds the HTTP API in-process over the memory store, with one
// host and a strict and a public queue, a public one with retries and a
// failure schema, and one that alice manages (ops).
func newAPI(tb testing.TB) (*httpapi.API, *index.Store) {
	tb.Helper()
	return newAPIWith(tb, notify.NewHub())
}

// newAPIWith is newAPI with the given notifier.
func newAPIWith(tb testing.TB, n ports.Notifier) (*httpapi.API, *index.Store) {
	tb.Helper()
	return newAPIOptions(tb, n, httpapi.Options{})
}

// newAPIOptions is newAPIWith with the given options.
func newAPIOptions(tb testing.TB, n ports.Notifier, opt httpapi.Options) (*httpapi.API, *index.Store) {
	tb.Helper()
	return newAPIDeps(tb, opt, func(d *app.Deps) { d.Notifier = n })
}

// newAPIDeps is newAPI with the given options, its use cases' Deps as
// change leaves them.
func newAPIDeps(tb testing.TB, opt httpapi.Options, change func(*app.Deps)) (*httpapi.API, *index.Store) {
	tb.Helper()
	dir := tb.TempDir()
	files := map[string]string{
		"taskhoster-users/alice.json": `{"name":"alice","token":"` + aliceToken + `"}`,
		"taskhoster-users/box.json":   `{"name":"box","token":"` + boxToken + `"}`,
		"taskhoster-queues/resize.json": `{"item":{"type":"object","required":["url"],"properties":{"url":{"type":"string"}}},
			"progress":{"type":"object"},"result":{"type":"object"},
			"settings":{"maxItemBytes":2048},
			"access":{"post":["alice"],"status":["alice"],"work":["box"]}}`,
		"taskhoster-queues/open.json": `{"item":{},"access":{"post":"public","status":"public","work":"public"}}`,
		"taskhoster-queues/retry.json": `{"item":{},"failure":{"type":"object"},
			"settings":{"maxAttempts":2,"retryBaseSeconds":1},
			"access":{"post":"public","status":"public","work":"public"}}`,
		"taskhoster-queues/ops.json": `{"item":{"type":"object","properties":{"width":{"type":"integer"}}},
			"access":{"post":["alice","box"],"status":["alice"],"work":"public","manage":["alice"]}}`,
	}
	for name, content := range files {
		path := filepath.Join(dir, testHost, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	config, problems := folderconfig.Load(dir)
	if folderconfig.HasErrors(problems) {
		tb.Fatalf("fixture hosts folder: %v", problems)
	}
	repo := index.New()
	deps := app.Deps{
		Repo: repo, Syncer: nopSync{}, Log: nopLog{}, Notifier: notify.NewHub(),
		Clock: clock.System{}, Compiler: schema.Compiler{}, Pauses: &memPauses{},
	}
	change(&deps)
	return httpapi.New(app.New(deps), config, opt), repo
}

// FuzzRequest sends arbitrary methods, paths, tokens and bodies. Whatever
// comes in, the server answers with a status below 500 and a JSON body
// (or none), never panics, and a refused request changes no task.
func FuzzRequest(f *testing.F) {
	seeds := []struct{ method, path, token, body string }{
		{"POST", "/resize", aliceToken, `{"url":"https://ex.com/a.png"}`},
		{"POST", "/resize", aliceToken, `{"url":1}`},
		{"POST", "/resize", aliceToken, `{"url":`},
		{"POST", "/open", "", `[1,2,{"a":null}]`},
		{"POST", "/open/claim", "", `{"worker":"w","query":{"type":"array"},"wait":0}`},
		{"POST", "/open/claim", "", `{"query":{"$ref":"http://127.0.0.1:1/x"}}`},
		{"POST", "/open/claim", "", `{"wait":-1}`},
		{"POST", "/open/0123456789abcdef/result", "", `{"worker":"w","result":{}}`},
		{"POST", "/open/0123456789abcdef/progress", "", `{"progress":1e999}`},
		{"GET", "/open/0123456789abcdef", "", ``},
		{"POST", "/open?delay=1.5&priority=-3", "", `{}`},
		{"POST", "/open?notBefore=1700000000000", "", `{}`},
		{"POST", "/open?delay=1&notBefore=1", "", `{}`},
		{"POST", "/open?delay=1e9&priority=99999999999999999999", "", `{}`},
		{"POST", "/open/0123456789abcdef/heartbeat", "", `{"worker":"w"}`},
		{"POST", "/open/0123456789abcdef/release", "", `{"worker":"w","delay":2,"reason":{"why":1}}`},
		{"POST", "/open/0123456789abcdef/release", "", `{"delay":1e300}`},
		{"POST", "/retry/0123456789abcdef/release", "", `{"reason":7}`},
		{"POST", "/open/0123456789abcdef/fail", "", `{"reason":"broken"}`},
		{"GET", "/open/0123456789abcdef/fail", "", ``},
		{"GET", "/resize/..%2f..%2fetc", aliceToken, ``},
		{"GET", "/", "", ``},
		{"DELETE", "/open", "", ``},
		{"POST", "/open", "not a token", "\x00\xff"},
		// SPEC §12.
		{"GET", "/ops/tasks?status=failed&order=newest&limit=5&after=abc&query=%7B%22type%22%3A%22object%22%7D", aliceToken, ``},
		{"GET", "/ops/tasks?limit=0&query=%7B", aliceToken, ``},
		{"DELETE", "/ops/0123456789abcdef", aliceToken, ``},
		{"DELETE", "/ops/0123456789abcdef", boxToken, ``},
		{"DELETE", "/open/0123456789abcdef", "", ``},
		{"POST", "/ops/0123456789abcdef/retry", aliceToken, ``},
		{"POST", "/ops/purge?status=finished", aliceToken, ``},
		{"POST", "/ops/purge?status=pending", aliceToken, ``},
		{"POST", "/ops/batch", aliceToken, `{"items":[{"width":1},{"width":"x"}]}`},
		{"POST", "/ops/batch?priority=3", boxToken, `{"items":[]}`},
		{"POST", "/ops/batch", aliceToken, `{"items":{}}`},
		{"POST", "/open/claim", "", `{"worker":"w","max":3}`},
		{"POST", "/open/claim", "", `{"max":101}`},
		{"GET", "/ops", aliceToken, ``},
		{"GET", "/ops/pause", aliceToken, ``},
		// Unknown fields and fields of the wrong type (issue 15).
		{"POST", "/open/claim", "", `{"wiat":1}`},
		{"POST", "/open/claim", "", `{"wait":"5","worker":7}`},
		{"POST", "/open/claim", "", `{"max":1.5}`},
		{"POST", "/open/claim", "", `{"query":{},"wait":1e999} {}`},
		{"POST", "/open/0123456789abcdef/progress", "", `{"progress":1,"result":2}`},
		{"POST", "/open/0123456789abcdef/heartbeat", "", `{"attempt":"1"}`},
		{"POST", "/open/0123456789abcdef/release", "", `{"delay":[1],"reason":{}}`},
		{"POST", "/ops/batch", aliceToken, `{"items":[{}],"item":{}}`},
		{"POST", "/open", "", `{"html":"<b>&</b>"}`},
		{"GET", "/open/work", "", ``},
		{"PUT", "/open/0123456789abcdef", "", ``},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.token, s.body)
	}
	api, repo := newAPI(f)
	f.Fuzz(func(t *testing.T, method, path, token, body string) {
		if !validMethod(method) || !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n\t#") {
			t.Skip()
		}
		if _, err := url.ParseRequestURI(path); err != nil {
			t.Skip() // no HTTP client can send it; net/http would refuse it first
		}
		before := total(repo)
		// A claim may wait up to 60 s for work; the client gives up sooner.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, method, "http://"+testHost+path, strings.NewReader(body))
		if token != "" && !strings.ContainsAny(token, "\r\n") {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s %q: %d %s", method, path, body, rec.Code, rec.Body)
		}
		if rec.Body.Len() > 0 && !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s %s: body is not JSON: %q", method, path, rec.Body)
		}
		var refusal struct{ Error, Message string }
		if rec.Code >= 400 && (json.Unmarshal(rec.Body.Bytes(), &refusal) != nil || refusal.Error == "" || refusal.Message == "") {
			t.Fatalf("%s %s: %d without a JSON error: %q", method, path, rec.Code, rec.Body)
		}
		if rec.Code >= 400 && total(repo) != before {
			t.Fatalf("%s %s refused with %d but changed the store", method, path, rec.Code)
		}
	})
}

func validMethod(m string) bool {
	switch m {
	case "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD":
		return true
	}
	return false
}

// total is every task of every queue, by state.
func total(repo *index.Store) [4]ports.Counts {
	return [4]ports.Counts{
		repo.Counts(domain.QueueRef{Host: testHost, Queue: "resize"}),
		repo.Counts(domain.QueueRef{Host: testHost, Queue: "open"}),
		repo.Counts(domain.QueueRef{Host: testHost, Queue: "retry"}),
		repo.Counts(domain.QueueRef{Host: testHost, Queue: "ops"}),
	}
}

// TestStatusCodesInOnePlace pins the mapping from error kinds to statuses
// through real requests.
func TestStatusCodesInOnePlace(t *testing.T) {
	api, _ := newAPI(t)
	cases := []struct {
		name, method, path, token, body string
		want                            int
		code                            string
	}{
		{"invalid json", "POST", "/resize", aliceToken, `{`, 400, "invalid_json"},
		{"schema", "POST", "/resize", aliceToken, `{}`, 422, "invalid_item"},
		{"too large", "POST", "/resize", aliceToken, `{"url":"` + strings.Repeat("a", 3000) + `"}`, 413, "too_large"},
		{"unauthorized", "POST", "/resize", "", `{"url":"a"}`, 401, "unauthorized"},
		{"forbidden", "POST", "/resize", boxToken, `{"url":"a"}`, 403, "forbidden"},
		{"unknown queue", "GET", "/nope", "", ``, 404, "unknown_queue"},
		{"unknown task", "GET", "/open/0123456789abcdef", "", ``, 404, "not_found"},
		{"malformed task id", "GET", "/open/xyz", "", ``, 404, "not_found"},
		{"method", "PUT", "/open", "", ``, 405, "method_not_allowed"},
		{"invalid query", "POST", "/open/claim", "", `{"query":{"type":7}}`, 400, "invalid_query"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(c.method, "http://"+testHost+c.path, strings.NewReader(c.body))
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			rec := httptest.NewRecorder()
			api.ServeHTTP(rec, req)
			var body struct {
				Error   string            `json:"error"`
				Message string            `json:"message"`
				Details []json.RawMessage `json:"details"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			if rec.Code != c.want || body.Error != c.code || body.Message == "" || body.Details == nil {
				t.Errorf("got %d %s, want %d %s", rec.Code, rec.Body, c.want, c.code)
			}
			if c.want == http.StatusUnauthorized && rec.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("401 without WWW-Authenticate")
			}
		})
	}
}
