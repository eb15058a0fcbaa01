package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/client"
)

// TestWorkerReleaseAndFailure: a handler's Release gives the task back
// (delay and reason sent), a wrapped *Failure fails it, a result finishes
// it; OnOutcome hears what was sent and the server's answer.
func TestWorkerReleaseAndFailure(t *testing.T) {
	f := newFakeQueue(t)
	ids := f.add(3)
	var mu sync.Mutex
	outcomes := map[string][]string{} // by task: the acks of different tasks come back in any order
	calls := map[string]int{}
	w := &client.Worker{
		Client: client.New(f.srv.URL), Queue: "q", Limit: 4,
		Handler: func(ctx context.Context, task *client.Task) (any, error) {
			mu.Lock()
			calls[task.ID]++
			n := calls[task.ID]
			mu.Unlock()
			switch {
			case task.ID == ids[0] && n == 1:
				return nil, client.Release{Delay: 1500 * time.Millisecond, Reason: map[string]string{"why": "busy"}}
			case task.ID == ids[1]:
				return nil, fmt.Errorf("wrapped: %w", &client.Failure{Reason: map[string]string{"why": "no such image"}})
			}
			return map[string]int{"attempts": task.Attempts}, nil
		},
		OnOutcome: func(o client.Outcome) {
			mu.Lock()
			defer mu.Unlock()
			outcomes[o.Task.ID] = append(outcomes[o.Task.ID], fmt.Sprintf("%s accepted=%v status=%q err=%v",
				o.Sent, o.Ack.Accepted, o.Ack.Status, o.Err))
			if o.Took <= 0 {
				t.Errorf("task %s: Took = %v", o.Task.ID, o.Took)
			}
		},
	}
	if err := startWorker(t, context.Background(), w)(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	want := map[string][]string{
		ids[0]: {`release accepted=true status="pending" err=<nil>`, `result accepted=true status="" err=<nil>`},
		ids[1]: {`fail accepted=true status="" err=<nil>`},
		ids[2]: {`result accepted=true status="" err=<nil>`},
	}
	if diff := cmp.Diff(want, outcomes); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	rel := f.releases[ids[0]]
	if len(rel) != 1 || string(rel[0].Delay) != "1.5" || string(rel[0].Reason) != `{"why":"busy"}` {
		t.Errorf("release messages = %+v", rel)
	}
	if got := string(f.failures[ids[1]]); got != `{"why":"no such image"}` {
		t.Errorf("failure reason = %s", got)
	}
	if got := string(f.results[ids[0]]); got != `{"attempts":2}` {
		t.Errorf("result of the released task = %s, want it run again as attempt 2", got)
	}
}

// TestWorkerReleaseOfTheLastAttempt: with the queue's attempts used up a
// release ends the task failed, which the Ack says; a release without delay
// or reason sends neither.
func TestWorkerReleaseOfTheLastAttempt(t *testing.T) {
	f := newFakeQueue(t)
	f.maxAttempts = 1
	id := f.add(1)[0]
	var got client.Outcome
	w := &client.Worker{
		Client: client.New(f.srv.URL), Queue: "q", Limit: 1,
		Handler:   func(context.Context, *client.Task) (any, error) { return nil, client.Release{} },
		OnOutcome: func(o client.Outcome) { got = o },
	}
	if err := startWorker(t, context.Background(), w)(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if got.Sent != "release" || !got.Ack.Accepted || got.Ack.Status != "failed" || got.Err != nil {
		t.Errorf("outcome = %+v", got)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if rel := f.releases[id]; len(rel) != 1 || rel[0].Delay != nil || rel[0].Reason != nil || !f.deadLetters[id] {
		t.Errorf("release messages = %+v, dead letter %v", rel, f.deadLetters[id])
	}
}

// TestWorkerHeartbeats: with a 300 ms lease a handler running 1.2 s gets
// heartbeats (one every ~100 ms) on its own; they stop with the handler.
// A refused heartbeat stops them at once.
func TestWorkerHeartbeats(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("refused=%v", refuse), func(t *testing.T) {
			f := newFakeQueue(t)
			f.lease = 300 * time.Millisecond
			f.refuseBeats = refuse
			id := f.add(1)[0]
			w := &client.Worker{
				Client: client.New(f.srv.URL), Queue: "q", Limit: 1,
				Handler: func(ctx context.Context, task *client.Task) (any, error) {
					time.Sleep(1200 * time.Millisecond)
					return "done", nil
				},
			}
			if err := startWorker(t, context.Background(), w)(); err != nil {
				t.Fatalf("Run = %v", err)
			}
			n := f.beatCount(id)
			switch {
			case refuse && n != 0:
				t.Errorf("%d heartbeats accepted although refused", n)
			case !refuse && (n < 4 || n > 14):
				t.Errorf("%d heartbeats in 1.2 s with a 300 ms lease, want about 10", n)
			}
			time.Sleep(300 * time.Millisecond)
			if later := f.beatCount(id); later != n {
				t.Errorf("heartbeats went on after the handler returned: %d, then %d", n, later)
			}
			if string(f.result(id)) != `"done"` {
				t.Errorf("result = %s", f.result(id))
			}
		})
	}
}

// TestHTTPHeartbeatReleaseFail: the paths, bodies and answers of the
// lease holder's HTTP calls.
func TestHTTPHeartbeatReleaseFail(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name, answer string
		call         func(c *client.Client) (client.Ack, error)
		path, body   string
		want         client.Ack
	}{
		{"heartbeat", `{"accepted":true,"lease":{"worker":"w","until":1234}}`,
			func(c *client.Client) (client.Ack, error) { return c.Heartbeat(ctx, "q", "a1", "w") },
			"/q/a1/heartbeat", `{"worker":"w"}`, client.Ack{Accepted: true, Lease: &client.Lease{Worker: "w", Until: 1234}}},
		{"release", `{"accepted":true,"status":"pending"}`,
			func(c *client.Client) (client.Ack, error) {
				return c.Release(ctx, "q", "a1", "w", 2500*time.Millisecond, map[string]int{"code": 7})
			},
			"/q/a1/release", `{"delay":2.5,"reason":{"code":7},"worker":"w"}`, client.Ack{Accepted: true, Status: "pending"}},
		{"release, nothing more", `{"accepted":false,"status":"finished"}`,
			func(c *client.Client) (client.Ack, error) { return c.Release(ctx, "q", "a1", "", 0, nil) },
			"/q/a1/release", `{}`, client.Ack{Status: "finished"}},
		{"fail", `{"accepted":true}`,
			func(c *client.Client) (client.Ack, error) { return c.Fail(ctx, "q", "a1", "w", "broken") },
			"/q/a1/fail", `{"reason":"broken","worker":"w"}`, client.Ack{Accepted: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &answer{status: http.StatusOK, body: tt.answer}
			ack, err := tt.call(client.New(a.server(t).URL))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, ack); diff != "" {
				t.Errorf("ack (-want +got):\n%s", diff)
			}
			if a.method != "POST" || a.path != tt.path || string(a.sent) != tt.body {
				t.Errorf("sent %s %s %s, want POST %s %s", a.method, a.path, a.sent, tt.path, tt.body)
			}
		})
	}
}

// TestPostOptions: delay, notBefore and priority go in the query string;
// a post without options sends none.
func TestPostOptions(t *testing.T) {
	at := time.UnixMilli(1_800_000_000_123)
	for _, tt := range []struct {
		opts  []client.PostOption
		query string
	}{
		{nil, ""},
		{[]client.PostOption{client.Delay(90 * time.Second), client.Priority(-5)}, "delay=90&priority=-5"},
		{[]client.PostOption{client.Delay(1234567 * time.Microsecond)}, "delay=1.235"},
		{[]client.PostOption{client.NotBefore(at), client.Priority(1000)}, "notBefore=1800000000123&priority=1000"},
	} {
		a := &answer{status: http.StatusCreated, body: `{"id":"00000000000000a1","status":"pending"}`}
		if _, err := client.New(a.server(t).URL).Post(context.Background(), "q", 1, tt.opts...); err != nil {
			t.Fatal(err)
		}
		if a.path != "/q" || a.query != tt.query {
			t.Errorf("posted to %s?%s, want /q?%s", a.path, a.query, tt.query)
		}
	}
}

// TestViewShowsRetryFields: notBefore, priority and failure are read, and
// left out of the view's JSON when the server left them out.
func TestViewShowsRetryFields(t *testing.T) {
	for _, body := range []string{
		`{"id":"a","queue":"q","status":"pending","attempts":1,"progress":null,"result":null,"error":null,"postedAt":1,"updatedAt":2,"finishedAt":null,"notBefore":5000,"priority":3,"failure":{"exitCode":3}}`,
		`{"id":"a","queue":"q","status":"pending","attempts":0,"progress":null,"result":null,"error":null,"postedAt":1,"updatedAt":1,"finishedAt":null}`,
	} {
		a := &answer{status: http.StatusOK, body: body}
		v, err := client.New(a.server(t).URL).Status(context.Background(), "q", "a")
		if err != nil {
			t.Fatal(err)
		}
		again, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != body {
			t.Errorf("view read and written again:\n got %s\nwant %s", again, body)
		}
	}
}
