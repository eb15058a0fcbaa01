package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/adapters/httpapi"
	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/domain"
)

// send makes one request to api and decodes its JSON object reply.
func send(t *testing.T, api *httpapi.API, method, path, body string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, "http://"+testHost+path, strings.NewReader(body))
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

// postAndClaim posts {} to queue and claims it as worker w1.
func postAndClaim(t *testing.T, api *httpapi.API, queue string) string {
	t.Helper()
	code, m := send(t, api, "POST", "/"+queue, `{}`)
	if code != http.StatusCreated {
		t.Fatalf("post: %d %v", code, m)
	}
	code, m = send(t, api, "POST", "/"+queue+"/claim", `{"worker":"w1"}`)
	if code != http.StatusOK {
		t.Fatalf("claim: %d %v", code, m)
	}
	return m["id"].(string)
}

// TestPostOptionsInTheView needs a store that keeps SPEC §11's fields (the
// index gains them in a parallel change).
func TestPostOptionsInTheView(t *testing.T) {
	api, _ := newAPI(t)
	before := time.Now().UnixMilli()
	code, m := send(t, api, "POST", "/open?delay=2.5&priority=-7", `{}`)
	if code != http.StatusCreated {
		t.Fatalf("post: %d %v", code, m)
	}
	_, view := send(t, api, "GET", "/open/"+m["id"].(string), ``)
	nb, _ := view["notBefore"].(float64)
	if int64(nb) < before+2500 || int64(nb) > time.Now().UnixMilli()+2500 || view["priority"] != -7.0 {
		t.Errorf("view of a delayed post: %v", view)
	}
	at := time.Now().Add(time.Hour).UnixMilli()
	code, m = send(t, api, "POST", "/open?notBefore="+strconv.FormatInt(at, 10), `{}`)
	if code != http.StatusCreated {
		t.Fatalf("post with notBefore: %d %v", code, m)
	}
	_, view = send(t, api, "GET", "/open/"+m["id"].(string), ``)
	if view["notBefore"] != float64(at) {
		t.Errorf("view: %v", view)
	}
	if _, ok := view["priority"]; ok {
		t.Errorf("priority shown though not given: %v", view)
	}
}

func TestPostParameters(t *testing.T) {
	api, _ := newAPI(t)
	for _, query := range []string{"delay=2.5&priority=-7", "delay=0&priority=1000", "delay=31536000", "notBefore=1700000000000", "priority=%2B3", "other=1"} {
		if code, m := send(t, api, "POST", "/open?"+query, `{}`); code != http.StatusCreated {
			t.Errorf("post with %s: %d %v", query, code, m)
		}
	}
	for _, c := range []struct{ query, names string }{
		{"delay=abc", "delay"}, {"delay=-1", "delay"}, {"delay=1e3", "delay"}, {"delay=31536001", "delay"},
		{"delay=", "delay"}, {"delay=1&delay=2", "delay"}, {"delay=NaN", "delay"},
		{"notBefore=soon", "notBefore"}, {"notBefore=-5", "notBefore"}, {"notBefore=1.5", "notBefore"},
		{"priority=1001", "priority"}, {"priority=-1001", "priority"}, {"priority=1.0", "priority"},
		{"priority=99999999999999999999", "priority"},
		{"delay=1&notBefore=1700000000000", "notBefore"},
	} {
		code, m := send(t, api, "POST", "/open?"+c.query, `{}`)
		msg, _ := m["message"].(string)
		if code != http.StatusBadRequest || m["error"] != "invalid_request" || !strings.Contains(msg, c.names) {
			t.Errorf("%s: %d %v", c.query, code, m)
		}
	}
	// Bad parameters are refused before the item is read.
	if code, m := send(t, api, "POST", "/open?priority=x", `{`); code != http.StatusBadRequest || m["error"] != "invalid_request" {
		t.Errorf("bad parameter with a bad body: %d %v", code, m)
	}
}

func TestHeartbeat(t *testing.T) {
	api, _ := newAPI(t)
	id := postAndClaim(t, api, "open")
	code, m := send(t, api, "POST", "/open/"+id+"/heartbeat", `{"worker":"w1"}`)
	lease, _ := m["lease"].(map[string]any)
	if code != http.StatusOK || m["accepted"] != true || lease["worker"] != "w1" || len(m) != 2 {
		t.Fatalf("heartbeat: %d %v", code, m)
	}
	code, m = send(t, api, "POST", "/open/"+id+"/heartbeat", `{"worker":"w2"}`)
	if code != http.StatusOK || m["accepted"] != false || m["status"] != "processing" || len(m) != 2 {
		t.Errorf("heartbeat by another worker: %d %v", code, m)
	}
	// The worker defaults to "anonymous" on a public queue, which holds nothing here.
	code, m = send(t, api, "POST", "/open/"+id+"/heartbeat", ``)
	if code != http.StatusOK || m["accepted"] != false {
		t.Errorf("heartbeat without a body: %d %v", code, m)
	}
}

func TestReleaseAndFail(t *testing.T) {
	api, _ := newAPI(t)
	id := postAndClaim(t, api, "retry")
	code, m := send(t, api, "POST", "/retry/"+id+"/release", `{"worker":"w1","reason":"not an object"}`)
	if code != http.StatusUnprocessableEntity || m["error"] != "invalid_failure" {
		t.Errorf("reason against the failure schema: %d %v", code, m)
	}
	code, m = send(t, api, "POST", "/retry/"+id+"/release", `{"worker":"w1","delay":-1}`)
	if code != http.StatusBadRequest || m["error"] != "invalid_request" || !strings.Contains(m["message"].(string), "delay") {
		t.Errorf("negative delay: %d %v", code, m)
	}
	code, m = send(t, api, "POST", "/retry/"+id+"/release", `{"worker":"w2"}`)
	if code != http.StatusOK || m["accepted"] != false || m["status"] != "processing" {
		t.Errorf("release by another worker: %d %v", code, m)
	}
	code, m = send(t, api, "POST", "/retry/"+id+"/release", `{"worker":"w1","delay":30,"reason":{"why":"busy"}}`)
	if code != http.StatusOK || m["accepted"] != true || m["status"] != "pending" || len(m) != 2 {
		t.Fatalf("release: %d %v", code, m)
	}
	if _, view := send(t, api, "GET", "/retry/"+id, ``); view["status"] != "pending" {
		t.Errorf("view after a release: %v", view)
	}
	code, m = send(t, api, "POST", "/retry/"+id+"/release", `{"worker":"w1"}`)
	if code != http.StatusOK || m["accepted"] != false || m["status"] != "pending" {
		t.Errorf("second release: %d %v", code, m)
	}

	// Fail is accepted whenever the task is not terminal, even pending.
	code, m = send(t, api, "POST", "/retry/"+id+"/fail", `{"worker":"w9","reason":{"why":"broken"}}`)
	if code != http.StatusOK || m["accepted"] != true || len(m) != 1 {
		t.Fatalf("fail: %d %v", code, m)
	}
	if _, view := send(t, api, "GET", "/retry/"+id, ``); view["status"] != "failed" || view["error"] != "failed" {
		t.Errorf("view after fail: %v", view)
	}
	for call, body := range map[string]string{"fail": `{"reason":{}}`, "result": `{"result":{}}`} {
		code, m = send(t, api, "POST", "/retry/"+id+"/"+call, body)
		if code != http.StatusOK || m["accepted"] != false || m["status"] != "failed" {
			t.Errorf("%s after fail: %d %v", call, code, m)
		}
	}
}

// TestFailureFieldsInTheView needs a store that keeps SPEC §11's fields (the
// index gains them in a parallel change).
func TestFailureFieldsInTheView(t *testing.T) {
	api, _ := newAPI(t)
	id := postAndClaim(t, api, "retry")
	send(t, api, "POST", "/retry/"+id+"/release", `{"worker":"w1","delay":30,"reason":{"why":"busy"}}`)
	_, view := send(t, api, "GET", "/retry/"+id, ``)
	nb, _ := view["notBefore"].(float64)
	if int64(nb) < time.Now().UnixMilli()+25000 || view["failure"] == nil {
		t.Errorf("view after a release with delay 30: %v", view)
	}
	send(t, api, "POST", "/retry/"+id+"/fail", `{"reason":{"why":"broken"}}`)
	_, view = send(t, api, "GET", "/retry/"+id, ``)
	if f, _ := view["failure"].(map[string]any); f["why"] != "broken" {
		t.Errorf("view after fail: %v", view)
	}
}

func TestTaskCallsOnUnknownTasks(t *testing.T) {
	api, _ := newAPI(t)
	for _, call := range []string{"heartbeat", "release", "fail"} {
		for _, id := range []string{"0123456789abcdef", "nope"} {
			code, m := send(t, api, "POST", "/open/"+id+"/"+call, `{}`)
			if code != http.StatusNotFound || m["error"] != "not_found" {
				t.Errorf("%s of %s: %d %v", call, id, code, m)
			}
		}
		if code, _ := send(t, api, "GET", "/open/0123456789abcdef/"+call, ``); code != http.StatusMethodNotAllowed {
			t.Errorf("GET %s: %d", call, code)
		}
	}
}

func TestQueueInfoShowsFailureSettings(t *testing.T) {
	api, _ := newAPI(t)
	_, m := send(t, api, "GET", "/retry", ``)
	settings := m["settings"].(map[string]any)
	schemas := m["schemas"].(map[string]any)
	if settings["maxAttempts"] != 2.0 || settings["retryBaseSeconds"] != 1.0 || schemas["failure"] == nil {
		t.Errorf("GET /retry: %v", m)
	}
	_, m = send(t, api, "GET", "/open", ``)
	if _, ok := m["schemas"].(map[string]any)["failure"]; ok {
		t.Errorf("GET /open shows a failure schema it does not have: %v", m)
	}
	if _, ok := m["settings"].(map[string]any)["maxAttempts"]; ok {
		t.Errorf("GET /open shows maxAttempts: %v", m)
	}
}

// cuttingNotifier is the hub with a twist: when a claim starts to wait,
// post runs (a task comes), and the moment the claim has taken it, cut
// (its client goes): the claim has taken a task for a client that is gone.
type cuttingNotifier struct {
	*notify.Hub
	post, cut func()
}

func (n cuttingNotifier) Await(ctx context.Context, q domain.QueueRef, try func() (bool, error)) error {
	n.post()
	return n.Hub.Await(ctx, q, func() (bool, error) {
		claimed, err := try()
		if claimed {
			n.cut()
		}
		return claimed, err
	})
}

// A long-poll claim cut off just as a task comes still takes the task (the
// claim runs on after its client went); the handler then hands it back at
// once, under that very claim, rather than leave it processing until the
// lease lapses.
func TestClaimForAClientThatHasGoneHandsTheTaskBack(t *testing.T) {
	for _, body := range []string{`{"worker":"w1","wait":5}`, `{"worker":"w1","wait":5,"max":2}`} {
		var api *httpapi.API
		var id string
		ctx, cancel := context.WithCancel(context.Background())
		n := cuttingNotifier{Hub: notify.NewHub(), cut: cancel, post: func() {
			code, m := send(t, api, "POST", "/open", `{}`)
			if code != http.StatusCreated {
				t.Fatalf("post: %d %v", code, m)
			}
			id = m["id"].(string)
		}}
		api, repo := newAPIWith(t, n)
		req := httptest.NewRequestWithContext(ctx, "POST", "http://"+testHost+"/open/claim", strings.NewReader(body))
		api.ServeHTTP(httptest.NewRecorder(), req)
		got, err := repo.Get(context.Background(), domain.Key{Host: testHost, Queue: "open", ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != domain.Pending || got.Attempts != 1 || got.Lease != nil {
			t.Errorf("claim %s for a client gone: task %s, attempts %d, lease %v; want pending after one attempt, no lease", body, got.Status, got.Attempts, got.Lease)
		}
	}
}
