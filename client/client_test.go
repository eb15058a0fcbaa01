package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"

	"github.com/taskhoster/taskhoster/client"
)

// answer serves one canned response and records the request it got.
type answer struct {
	status int
	body   string

	method, path, query, host, auth, contentType string
	sent                                         []byte
}

func (a *answer) server(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.method, a.path, a.query, a.host = r.Method, r.URL.Path, r.URL.RawQuery, r.Host
		a.auth, a.contentType = r.Header.Get("Authorization"), r.Header.Get("Content-Type")
		a.sent, _ = io.ReadAll(r.Body)
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestErrorDecoding(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   client.Error
		text   string
	}{
		{
			name:   "schema violations",
			status: http.StatusUnprocessableEntity,
			body:   `{"error":"invalid_item","message":"the item breaks the schema","details":[{"path":"/width","message":"must be >= 1"},{"path":"","message":"missing url"}]}`,
			want: client.Error{Status: 422, Code: "invalid_item", Message: "the item breaks the schema",
				Details: []client.Violation{{Path: "/width", Message: "must be >= 1"}, {Path: "", Message: "missing url"}}},
			text: "invalid_item (422): the item breaks the schema; /width: must be >= 1; (the whole value): missing url",
		},
		{
			name:   "no details",
			status: http.StatusUnauthorized,
			body:   `{"error":"unauthorized","message":"a token is needed","details":[]}`,
			want:   client.Error{Status: 401, Code: "unauthorized", Message: "a token is needed", Details: []client.Violation{}},
			text:   "unauthorized (401): a token is needed",
		},
		{
			name:   "a proxy's page",
			status: http.StatusBadGateway,
			body:   "<html>bad gateway</html>\nmore",
			want:   client.Error{Status: 502, Code: "bad_gateway", Message: "<html>bad gateway</html>"},
			text:   "bad_gateway (502): <html>bad gateway</html>",
		},
		{
			name:   "empty body",
			status: http.StatusServiceUnavailable,
			want:   client.Error{Status: 503, Code: "service_unavailable"},
			text:   "service_unavailable (503)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := (&answer{status: tt.status, body: tt.body}).server(t)
			_, err := client.New(srv.URL).Post(context.Background(), "q", map[string]int{"n": 1})
			var got *client.Error
			if !errors.As(err, &got) {
				t.Fatalf("Post error = %v, want a *client.Error", err)
			}
			if diff := cmp.Diff(tt.want, *got); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if got.Error() != tt.text {
				t.Errorf("Error() = %q, want %q", got.Error(), tt.text)
			}
		})
	}
}

func TestPostSendsHostTokenAndItem(t *testing.T) {
	a := &answer{status: http.StatusCreated, body: `{"id":"00000000000000a1","status":"pending"}`}
	srv := a.server(t)
	c := client.New(srv.URL+"/", client.WithHost("task.example.com"), client.WithToken("tok"))
	id, err := c.Post(context.Background(), "resize", json.RawMessage(` {"url": "a"} `))
	if err != nil {
		t.Fatal(err)
	}
	got := []string{id, a.method, a.path, a.host, a.auth, a.contentType, string(a.sent)}
	want := []string{"00000000000000a1", "POST", "/resize", "task.example.com", "Bearer tok", "application/json", `{"url":"a"}`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestPostRejectsInvalidJSONText(t *testing.T) {
	a := &answer{status: http.StatusCreated}
	srv := a.server(t)
	if _, err := client.New(srv.URL).Post(context.Background(), "q", json.RawMessage(`{`)); err == nil {
		t.Fatal("Post of malformed JSON text succeeded")
	}
	if a.method != "" {
		t.Error("malformed JSON text was sent to the server")
	}
}

func TestClaimWithoutTask(t *testing.T) {
	a := &answer{status: http.StatusNoContent}
	srv := a.server(t)
	_, err := client.New(srv.URL).Claim(context.Background(), "q", client.ClaimRequest{Worker: "w", Wait: 1500 * time.Millisecond})
	if !errors.Is(err, client.ErrNoTask) {
		t.Fatalf("Claim = %v, want ErrNoTask", err)
	}
	var body map[string]any
	if err := json.Unmarshal(a.sent, &body); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]any{"worker": "w", "wait": 1.5}, body); diff != "" {
		t.Errorf("claim body (-want +got):\n%s", diff)
	}
}

func TestBadServerURL(t *testing.T) {
	for _, server := range []string{"127.0.0.1:8080", "ftp://x", "http://"} {
		if _, err := client.New(server).Status(context.Background(), "q", "id"); err == nil {
			t.Errorf("New(%q): Status succeeded", server)
		}
	}
}

// TestWatchRefusedAndEnded: a refused handshake is the server's *Error; an
// accepted one yields each view and ends cleanly after the terminal one.
func TestWatchRefusedAndEnded(t *testing.T) {
	views := []string{
		`{"id":"a","queue":"q","status":"pending","attempts":0}`,
		`{"id":"a","queue":"q","status":"processing","attempts":1}`,
		`{"id":"a","queue":"q","status":"finished","attempts":1,"result":{"ok":true}}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/q/a/watch" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":"not_found","message":"no such task","details":[]}`)
			return
		}
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		for _, v := range views {
			_ = ws.WriteMessage(websocket.TextMessage, []byte(v))
		}
		_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
		_, _, _ = ws.ReadMessage() // the client's close answer
	}))
	defer srv.Close()
	c := client.New(srv.URL)

	_, err := c.Watch(context.Background(), "q", "nope")
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusNotFound || e.Code != "not_found" {
		t.Fatalf("Watch of a missing task = %v, want the 404 as a *client.Error", err)
	}

	seq, err := c.Watch(context.Background(), "q", "a")
	if err != nil {
		t.Fatal(err)
	}
	var statuses []string
	for v, err := range seq {
		if err != nil {
			t.Fatalf("after %v: %v", statuses, err)
		}
		statuses = append(statuses, v.Status)
	}
	if diff := cmp.Diff([]string{"pending", "processing", "finished"}, statuses); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
}

// TestAnHTTPClaimsReportsNameItsAttempt: a task claimed over HTTP reports
// progress and heartbeats with its claim's attempt, so that should the
// same worker name claim it again after this lease lapsed, the server
// refuses the older claim's reports rather than extend the newer one.
func TestAnHTTPClaimsReportsNameItsAttempt(t *testing.T) {
	a := &answer{status: http.StatusOK, body: `{"id":"0123456789abcdef","item":{},"attempts":3,"lease":{"worker":"w","until":1}}`}
	srv := a.server(t)
	ctx := context.Background()
	task, err := client.New(srv.URL).Claim(ctx, "q", client.ClaimRequest{Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	for name, report := range map[string]func() error{
		"progress":  func() error { _, err := task.Progress(ctx, 40); return err },
		"heartbeat": func() error { _, err := task.Heartbeat(ctx); return err },
	} {
		if err := report(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var body map[string]any
		if err := json.Unmarshal(a.sent, &body); err != nil {
			t.Fatal(err)
		}
		if a.path != "/q/0123456789abcdef/"+name || body["worker"] != "w" || body["attempt"] != 3.0 {
			t.Errorf("%s sent %s to %s, want worker w and attempt 3", name, a.sent, a.path)
		}
	}
}

// TestNoPathFromAnEmptyOrDottedName: a queue name or task id that cannot
// be a path segment ("", ".", "..") is refused before anything is sent.
// The server serves the queue's page at GET /{queue}/, which Status would
// otherwise read as an empty view without an error, and a path cleaned on
// the way would take /{queue}/../retry to POST /retry.
func TestNoPathFromAnEmptyOrDottedName(t *testing.T) {
	a := &answer{status: http.StatusOK, body: `{"name":"q","settings":{},"counts":{}}`}
	srv := a.server(t)
	c := client.New(srv.URL)
	ctx := context.Background()
	for _, name := range []string{"", ".", ".."} {
		calls := map[string]error{}
		_, calls["Status"] = c.Status(ctx, "q", name)
		calls["Retry"] = c.Retry(ctx, "q", name)
		_, calls["Cancel"] = c.Cancel(ctx, "q", name)
		_, calls["Result"] = c.Result(ctx, "q", name, "w", 1)
		calls["Pause"] = c.Pause(ctx, name)
		_, calls["Post"] = c.Post(ctx, name, 1)
		_, calls["Watch"] = c.Watch(ctx, "q", name)
		for call, err := range calls {
			if err == nil {
				t.Errorf("%s with %q: no error", call, name)
			}
		}
		if a.method != "" {
			t.Errorf("name %q: %s %s was sent", name, a.method, a.path)
			a.method = ""
		}
	}
}

// TestPostOfNilSendsNull: a nil item is the JSON value null, which a
// queue whose item schema allows it takes; it is not an empty body (the
// server's 400 invalid_json).
func TestPostOfNilSendsNull(t *testing.T) {
	a := &answer{status: http.StatusCreated, body: `{"id":"00000000000000a1","status":"pending"}`}
	srv := a.server(t)
	if _, err := client.New(srv.URL).Post(context.Background(), "q", nil); err != nil {
		t.Fatal(err)
	}
	if got := []string{a.contentType, string(a.sent)}; !cmp.Equal(got, []string{"application/json", "null"}) {
		t.Errorf("sent %q, want the JSON null", got)
	}
}
