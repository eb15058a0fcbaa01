package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/client"
)

// request is what the answer server saw: method, path, decoded query.
func (a *answer) request(t *testing.T) []string {
	t.Helper()
	q, err := url.ParseQuery(a.query)
	if err != nil {
		t.Fatal(err)
	}
	return []string{a.method, a.path, q.Encode()}
}

func TestCancelRetryPurgePause(t *testing.T) {
	ctx := context.Background()
	type call struct {
		name   string
		status int
		body   string
		do     func(c *client.Client) (any, error)
		want   []string // method, path, query
		got    any
	}
	calls := []call{
		{"cancel", 200, `{"accepted":true,"status":"failed"}`,
			func(c *client.Client) (any, error) { return c.Cancel(ctx, "q", "00000000000000a1") },
			[]string{"DELETE", "/q/00000000000000a1", ""}, client.Ack{Accepted: true, Status: "failed"}},
		{"cancel of a finished task", 200, `{"accepted":false,"status":"finished"}`,
			func(c *client.Client) (any, error) { return c.Cancel(ctx, "q", "a2") },
			[]string{"DELETE", "/q/a2", ""}, client.Ack{Status: "finished"}},
		{"retry", 200, `{"id":"a1","status":"pending"}`,
			func(c *client.Client) (any, error) { return nil, c.Retry(ctx, "q", "a1") },
			[]string{"POST", "/q/a1/retry", ""}, nil},
		{"purge", 200, `{"deleted":7}`,
			func(c *client.Client) (any, error) { return c.Purge(ctx, "q", "failed") },
			[]string{"POST", "/q/purge", "status=failed"}, 7},
		{"pause", 200, `{"paused":true}`,
			func(c *client.Client) (any, error) { return nil, c.Pause(ctx, "q") },
			[]string{"POST", "/q/pause", ""}, nil},
		{"resume", 200, `{"paused":false}`,
			func(c *client.Client) (any, error) { return nil, c.Resume(ctx, "q") },
			[]string{"POST", "/q/resume", ""}, nil},
	}
	for _, tt := range calls {
		t.Run(tt.name, func(t *testing.T) {
			a := &answer{status: tt.status, body: tt.body}
			c := client.New(a.server(t).URL, client.WithToken("tok"))
			got, err := tt.do(c)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, a.request(t)); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.got, got); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			if a.auth != "Bearer tok" {
				t.Errorf("Authorization = %q", a.auth)
			}
		})
	}
}

func TestManageRefusals(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name, code string
		status     int
		do         func(c *client.Client) error
	}{
		{"retry of a pending task", "not_failed", 409, func(c *client.Client) error { return c.Retry(ctx, "q", "a1") }},
		{"purge without manage", "forbidden", 403, func(c *client.Client) error { _, err := c.Purge(ctx, "q", "failed"); return err }},
		{"pause with an unknown token", "unauthorized", 401, func(c *client.Client) error { return c.Pause(ctx, "q") }},
		{"cancel of a missing task", "not_found", 404, func(c *client.Client) error { _, err := c.Cancel(ctx, "q", "x"); return err }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := &answer{status: tt.status, body: `{"error":"` + tt.code + `","message":"no","details":[]}`}
			err := tt.do(client.New(a.server(t).URL))
			var e *client.Error
			if !errors.As(err, &e) || e.Status != tt.status || e.Code != tt.code {
				t.Errorf("error = %v, want %s (%d)", err, tt.code, tt.status)
			}
		})
	}
}

func TestPauseAnswerMismatch(t *testing.T) {
	a := &answer{status: 200, body: `{"paused":false}`}
	if err := client.New(a.server(t).URL).Pause(context.Background(), "q"); err == nil {
		t.Error("Pause succeeded although the server answered paused false")
	}
}

func TestTasksPage(t *testing.T) {
	a := &answer{status: 200, body: `{"tasks":[
		{"id":"a1","queue":"q","status":"failed","attempts":2,"error":"cancelled","postedAt":1,"updatedAt":2,"item":{"n":1},"postedBy":"alice"},
		{"id":"a2","queue":"q","status":"failed","attempts":1,"postedAt":3,"updatedAt":4,"item":{"n":2},"postedBy":""}
	],"next":"c2"}`}
	c := client.New(a.server(t).URL)
	page, err := c.Tasks(context.Background(), "q", client.TaskQuery{
		Status: "failed", Newest: true, Limit: 2, After: "c0", Query: map[string]any{"required": []string{"n"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"GET", "/q/tasks", url.Values{
		"status": {"failed"}, "order": {"newest"}, "limit": {"2"}, "after": {"c0"}, "query": {`{"required":["n"]}`},
	}.Encode()}
	if diff := cmp.Diff(want, a.request(t)); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	cancelled := "cancelled"
	wantPage := client.TaskPage{Next: "c2", Tasks: []client.ListedTask{
		{View: client.View{ID: "a1", Queue: "q", Status: "failed", Attempts: 2, Error: &cancelled, PostedAt: 1, UpdatedAt: 2},
			Item: json.RawMessage(`{"n":1}`), PostedBy: "alice"},
		{View: client.View{ID: "a2", Queue: "q", Status: "failed", Attempts: 1, PostedAt: 3, UpdatedAt: 4},
			Item: json.RawMessage(`{"n":2}`)},
	}}
	if diff := cmp.Diff(wantPage, page); diff != "" {
		t.Errorf("page (-want +got):\n%s", diff)
	}

	// The last page: next null; no parameters for a zero query.
	a = &answer{status: 200, body: `{"tasks":[],"next":null}`}
	page, err = client.New(a.server(t).URL).Tasks(context.Background(), "q", client.TaskQuery{})
	if err != nil || page.Next != "" || len(page.Tasks) != 0 || a.query != "" {
		t.Errorf("last page = %+v, %v; query %q", page, err, a.query)
	}
}

func TestSubmitWithKey(t *testing.T) {
	for _, tt := range []struct {
		status  int
		created bool
	}{{http.StatusCreated, true}, {http.StatusOK, false}} {
		var key string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key = r.Header.Get("Idempotency-Key")
			w.WriteHeader(tt.status)
			_, _ = w.Write([]byte(`{"id":"00000000000000a1","status":"processing"}`))
		}))
		c := client.New(srv.URL)
		got, err := c.Submit(context.Background(), "q", map[string]int{"n": 1}, client.Key("order-17"), client.Priority(3))
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		want := client.Posted{ID: "00000000000000a1", Status: "processing", Created: tt.created}
		if diff := cmp.Diff(want, got); diff != "" || key != "order-17" {
			t.Errorf("%d: Submit (-want +got):\n%s; key %q", tt.status, diff, key)
		}
	}

	// Without a key no header goes out; Post gives the id alone.
	a := &answer{status: 201, body: `{"id":"b1","status":"pending"}`}
	id, err := client.New(a.server(t).URL).Post(context.Background(), "q", 1, client.Delay(1500*time.Millisecond))
	if err != nil || id != "b1" || a.query != "delay=1.5" {
		t.Errorf("Post = %q, %v; query %q", id, err, a.query)
	}
}

func TestSubmitConflict(t *testing.T) {
	a := &answer{status: 409, body: `{"error":"idempotency_conflict","message":"another item","details":[]}`}
	_, err := client.New(a.server(t).URL).Submit(context.Background(), "q", 2, client.Key("k"))
	var e *client.Error
	if !errors.As(err, &e) || e.Code != "idempotency_conflict" {
		t.Errorf("Submit = %v, want idempotency_conflict", err)
	}
}

func TestPostBatch(t *testing.T) {
	a := &answer{status: 201, body: `{"ids":["a1","a2","a3"]}`}
	c := client.New(a.server(t).URL)
	items := []json.RawMessage{json.RawMessage(`{"n":1}`), json.RawMessage(` {"n": 2}`), json.RawMessage(`3`)}
	ids, err := c.PostBatch(context.Background(), "q", items, client.Priority(-5))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a1", "a2", "a3"}, ids); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
	got := append(a.request(t), string(a.sent))
	want := []string{"POST", "/q/batch", "priority=-5", `{"items":[{"n":1},{"n":2},3]}`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}

	a = &answer{status: 201}
	if _, err := client.New(a.server(t).URL).PostBatch(context.Background(), "q", map[string]int{"n": 1}); err == nil || a.method != "" {
		t.Errorf("PostBatch of a map: %v; sent %q", err, a.method)
	}
}

func TestPostBatchInvalidItem(t *testing.T) {
	a := &answer{status: 422, body: `{"error":"invalid_item","message":"item 1 breaks the schema","details":[{"path":"/items/1/width","message":"must be >= 1"}]}`}
	_, err := client.New(a.server(t).URL).PostBatch(context.Background(), "q", []any{map[string]int{"width": 1}, map[string]int{"width": 0}})
	var e *client.Error
	if !errors.As(err, &e) || e.Code != "invalid_item" || len(e.Details) != 1 || e.Details[0].Path != "/items/1/width" {
		t.Errorf("PostBatch = %v", err)
	}
}

func TestClaimMany(t *testing.T) {
	a := &answer{status: 200, body: `{"tasks":[
		{"id":"a1","item":{"n":1},"attempts":1,"lease":{"worker":"w","until":5}},
		{"id":"a2","item":{"n":2},"attempts":3,"lease":{"worker":"w","until":6}}]}`}
	c := client.New(a.server(t).URL)
	tasks, err := c.ClaimMany(context.Background(), "q", "w", json.RawMessage(`{"required":["n"]}`), 2*time.Second, 10)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		ID, Queue, Item string
		Attempts        int
		Lease           client.Lease
	}
	var gots []got
	for _, task := range tasks {
		gots = append(gots, got{task.ID, task.Queue, string(task.Item), task.Attempts, task.Lease})
	}
	want := []got{{"a1", "q", `{"n":1}`, 1, client.Lease{Worker: "w", Until: 5}}, {"a2", "q", `{"n":2}`, 3, client.Lease{Worker: "w", Until: 6}}}
	if diff := cmp.Diff(want, gots); diff != "" {
		t.Errorf("tasks (-want +got):\n%s", diff)
	}
	var body map[string]any
	if err := json.Unmarshal(a.sent, &body); err != nil {
		t.Fatal(err)
	}
	wantBody := map[string]any{"worker": "w", "wait": 2.0, "max": 10.0, "query": map[string]any{"required": []any{"n"}}}
	if diff := cmp.Diff(wantBody, body); diff != "" || a.path != "/q/claim" {
		t.Errorf("claim %s body (-want +got):\n%s", a.path, diff)
	}

	none := &answer{status: http.StatusNoContent}
	if _, err := client.New(none.server(t).URL).ClaimMany(context.Background(), "q", "", nil, 0, 5); !errors.Is(err, client.ErrNoTask) {
		t.Errorf("ClaimMany on 204 = %v, want ErrNoTask", err)
	}
	for _, max := range []int{0, 101} {
		if _, err := c.ClaimMany(context.Background(), "q", "", nil, 0, max); err == nil {
			t.Errorf("ClaimMany max %d succeeded", max)
		}
	}
}

// TestWorkerCancelledTask: a cancelled message for a running task cancels
// its handler's context with cause ErrCancelled, nothing is handed in, and
// the outcome says cancelled; the worker goes on to the next task.
func TestWorkerCancelledTask(t *testing.T) {
	f := newFakeQueue(t)
	running := make(chan string, 2)
	var mu sync.Mutex
	var outcomes []client.Outcome
	var causes []error
	calls := 0
	w := &client.Worker{
		Client: client.New(f.srv.URL), Queue: "q", Limit: 2,
		Handler: func(ctx context.Context, task *client.Task) (any, error) {
			mu.Lock()
			calls++
			later := calls > 1
			mu.Unlock()
			if later {
				return map[string]bool{"ok": true}, nil
			}
			running <- task.ID
			<-ctx.Done()
			mu.Lock()
			causes = append(causes, context.Cause(ctx))
			mu.Unlock()
			return map[string]bool{"late": true}, nil // not handed in
		},
		OnOutcome: func(o client.Outcome) {
			mu.Lock()
			outcomes = append(outcomes, o)
			mu.Unlock()
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	wait := startWorker(t, ctx, w)
	first := f.add(1)[0]
	select {
	case id := <-running:
		if id != first {
			t.Fatalf("running %s, want %s", id, first)
		}
	case <-time.After(testTimeout):
		t.Fatal("the handler did not start")
	}
	f.cancel(first)
	second := f.add(1)[0] // finished normally
	if err := wait(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if got := f.handedInCount(first); got != 0 {
		t.Errorf("%d messages handed in for the cancelled task", got)
	}
	if f.result(second) == nil {
		t.Error("the next task was not finished")
	}
	if len(causes) != 1 || !errors.Is(causes[0], client.ErrCancelled) {
		t.Errorf("handler context causes = %v, want [ErrCancelled]", causes)
	}
	if len(outcomes) != 2 {
		t.Fatalf("outcomes = %+v", outcomes)
	}
	o := outcomes[0]
	if o.Task.ID != first || !errors.Is(o.Err, client.ErrCancelled) || o.Sent != "" || o.Ack.Accepted || o.Ack.Status != "failed" {
		t.Errorf("outcome of the cancelled task = %+v", o)
	}
}

// TestWorkerCancelRightAfterClaim: a cancel that follows its task on the
// socket at once is not lost: the handler's context is cancelled.
func TestWorkerCancelRightAfterClaim(t *testing.T) {
	f := newFakeQueue(t)
	f.cancelOnClaim = true
	var got error
	w := &client.Worker{
		Client: client.New(f.srv.URL), Queue: "q", Limit: 1,
		Handler: func(ctx context.Context, task *client.Task) (any, error) {
			select {
			case <-ctx.Done():
			case <-time.After(testTimeout):
			}
			return nil, nil
		},
		OnOutcome: func(o client.Outcome) { got = o.Err },
	}
	id := f.add(1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := startWorker(t, ctx, w)(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(got, client.ErrCancelled) || f.handedInCount(id) != 0 {
		t.Errorf("outcome error %v, %d handed in; want ErrCancelled, nothing", got, f.handedInCount(id))
	}
}

// A listed task marshals as the API sent it: postedBy null for an
// anonymous post, the name otherwise, beside the view's fields.
func TestListedTaskMarshalsAsTheAPISentIt(t *testing.T) {
	for postedBy, want := range map[string]string{"": `"postedBy":null`, "alice": `"postedBy":"alice"`} {
		got, err := json.Marshal(client.ListedTask{View: client.View{ID: "00000000000000a1"}, Item: json.RawMessage(`{"n":1}`), PostedBy: postedBy})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(got), want) || !strings.Contains(string(got), `"id":"00000000000000a1"`) || !strings.Contains(string(got), `"item":{"n":1}`) {
			t.Errorf("posted by %q: %s, want %s beside the id and item", postedBy, got, want)
		}
	}
}
