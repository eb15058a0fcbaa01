package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/client"
)

// clientAs is a client of s on the fixture host, authenticated by token.
func (s *server) clientAs(token string) *client.Client {
	return client.New(s.url, client.WithHost(host), client.WithToken(token))
}

// restart kills s (as a crash would) and starts a new server on the same
// folders and the same API address, so that clients of s reach it again.
func restart(t *testing.T, s *server, d dirs) *server {
	t.Helper()
	addr := strings.TrimPrefix(s.url, "http://")
	s.kill()
	// A later --addr wins over the harness's 127.0.0.1:0.
	return start(t, d, "--addr", addr)
}

// TestClientOverHTTP walks a task through the Go client's HTTP calls and
// checks the typed errors on the way.
func TestClientOverHTTP(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	ctx := context.Background()
	alice, box := s.clientAs(aliceToken), s.clientAs(boxToken)

	id, err := alice.Post(ctx, "resize", map[string]any{"url": "https://ex.com/a.png", "width": 800})
	if err != nil {
		t.Fatal(err)
	}
	v, err := alice.Status(ctx, "resize", id)
	if err != nil || v.ID != id || v.Status != "pending" || v.Attempts != 0 || v.Queue != "resize" {
		t.Fatalf("Status = %+v, %v", v, err)
	}

	_, err = alice.Post(ctx, "resize", map[string]any{"width": 0})
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusUnprocessableEntity || e.Code != "invalid_item" || len(e.Details) == 0 {
		t.Errorf("Post of a bad item = %v, want a 422 invalid_item with details", err)
	}
	_, err = s.clientAs(eveToken).Status(ctx, "resize", id)
	if !errors.As(err, &e) || e.Status != http.StatusForbidden {
		t.Errorf("Status as eve = %v, want 403", err)
	}
	_, err = alice.Status(ctx, "resize", "0123456789abcdef")
	if !errors.As(err, &e) || e.Status != http.StatusNotFound {
		t.Errorf("Status of a missing task = %v, want 404", err)
	}

	task, err := box.Claim(ctx, "resize", client.ClaimRequest{Worker: "box-1", Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if task.ID != id || task.Attempts != 1 || task.Lease.Worker != "box-1" || task.Lease.Until == 0 {
		t.Errorf("claimed %+v", task)
	}
	if diff := cmp.Diff(`{"url":"https://ex.com/a.png","width":800}`, compact(t, task.Item)); diff != "" {
		t.Errorf("item (-want +got):\n%s", diff)
	}
	if ok, err := task.Progress(ctx, map[string]int{"percent": 40}); err != nil || !ok {
		t.Errorf("Task.Progress = %v, %v", ok, err)
	}
	if ack, err := box.Progress(ctx, "resize", id, "box-2", map[string]int{"percent": 50}); err != nil || ack.Accepted {
		t.Errorf("Progress by a worker without the lease = %+v, %v", ack, err)
	}
	if ack, err := box.Result(ctx, "resize", id, "box-1", map[string]string{"url": "b"}); err != nil || !ack.Accepted {
		t.Errorf("Result = %+v, %v", ack, err)
	}
	if ack, err := box.Result(ctx, "resize", id, "box-1", map[string]string{"url": "c"}); err != nil || ack.Accepted || ack.Status != "finished" {
		t.Errorf("second Result = %+v, %v, want not accepted, finished", ack, err)
	}
	v, err = alice.Status(ctx, "resize", id)
	if err != nil || v.Status != "finished" || string(v.Result) != `{"url":"b"}` || string(v.Progress) != `{"percent":40}` || v.FinishedAt == nil {
		t.Errorf("final Status = %+v, %v", v, err)
	}
	if _, err := box.Claim(ctx, "resize", client.ClaimRequest{}); !errors.Is(err, client.ErrNoTask) {
		t.Errorf("Claim of an empty queue = %v, want ErrNoTask", err)
	}
}

// TestClientWatch drives a task one step per view it watches, so every
// change shows up as its own view, and the watch ends after the terminal one.
func TestClientWatch(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice, box := s.clientAs(aliceToken), s.clientAs(boxToken)
	id, err := alice.Post(ctx, "resize", map[string]any{"url": "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.clientAs(eveToken).Watch(ctx, "resize", id); err == nil {
		t.Error("eve may watch a task of resize")
	}
	views, err := alice.Watch(ctx, "resize", id)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var task *client.Task
	for v, err := range views {
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		got = append(got, fmt.Sprintf("%s %d %s %s", v.Status, v.Attempts, v.Progress, v.Result))
		switch len(got) {
		case 1:
			task, err = box.Claim(ctx, "resize", client.ClaimRequest{Worker: "box-1"})
		case 2:
			_, err = task.Progress(ctx, map[string]int{"percent": 50})
		case 3:
			_, err = box.Result(ctx, "resize", id, "box-1", map[string]bool{"ok": true})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"pending 0 null null",
		"processing 1 null null",
		`processing 1 {"percent":50} null`,
		`finished 1 {"percent":50} {"ok":true}`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("views (-want +got):\n%s", diff)
	}
	eventually(t, "the watched terminal view to count as a fetch", func() bool {
		events := s.eventsOf(id)
		return len(events) > 0 && events[len(events)-1] == "fetched"
	})
}

// TestClientWorkerSurvivesRestart: a Worker with four claims open finishes
// twenty tasks, each exactly once, across a crash and restart of the
// server between the first ten and the last ten.
func TestClientWorkerSurvivesRestart(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	s := start(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex
	calls := map[string]int{}
	finished := make(chan string, 100)
	w := &client.Worker{
		Client: s.clientAs(boxToken), Queue: "resize", Name: "box-1", Concurrency: 4,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 500 * time.Millisecond,
		Handler: func(ctx context.Context, task *client.Task) (any, error) {
			mu.Lock()
			calls[task.ID]++
			mu.Unlock()
			if ok, err := task.Progress(ctx, map[string]int{"percent": 50}); err != nil || !ok {
				return nil, fmt.Errorf("progress: accepted %v, %w", ok, err)
			}
			return map[string]json.RawMessage{"item": task.Item}, nil
		},
		OnDone: func(task *client.Task, accepted bool, err error) {
			if err != nil || !accepted {
				t.Errorf("task %s: accepted %v, %v", task.ID, accepted, err)
			}
			finished <- task.ID
		},
	}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()

	awaitFinished := func(n int) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for range n {
			select {
			case <-finished:
			case err := <-ran:
				t.Fatalf("Run returned early: %v", err)
			case <-deadline:
				t.Fatal("timed out waiting for the worker to finish tasks")
			}
		}
	}
	postN := func(s *server, from, n int) []string {
		var ids []string
		for i := from; i < from+n; i++ {
			ids = append(ids, s.post("resize", aliceToken, fmt.Sprintf(`{"url":"u%d"}`, i)))
		}
		return ids
	}

	ids := postN(s, 0, 10)
	awaitFinished(10)
	// Nothing is in flight now: the crash drops only the open claims.
	s = restart(t, s, d)
	ids = append(ids, postN(s, 10, 10)...)
	awaitFinished(10)

	w.Drain()
	select {
	case err := <-ran:
		if err != nil {
			t.Errorf("Run after Drain = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after Drain")
	}
	mu.Lock()
	defer mu.Unlock()
	results := map[string]int{}
	for _, ev := range s.events() {
		if ev["event"] == "result" {
			results[ev["id"].(string)]++
		}
	}
	for i, id := range ids {
		if calls[id] != 1 || results[id] != 1 {
			t.Errorf("task %s: handled %d times, %d results logged; want 1 and 1", id, calls[id], results[id])
		}
		v := s.do("GET", "/resize/"+id, aliceToken, "").JSON(t)
		want := fmt.Sprintf(`{"item":{"url":"u%d"}}`, i)
		if got, _ := json.Marshal(v["result"]); v["status"] != "finished" || string(got) != want {
			t.Errorf("task %s: %v %s, want finished %s", id, v["status"], got, want)
		}
	}
	if len(calls) != len(ids) {
		t.Errorf("the handler ran for %d tasks, want %d", len(calls), len(ids))
	}
}

// TestClientWorkerRefused: a worker the server will never let in fails at
// once instead of retrying forever.
func TestClientWorkerRefused(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	w := &client.Worker{Client: s.clientAs(eveToken), Queue: "resize",
		Handler: func(context.Context, *client.Task) (any, error) { return nil, nil }}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := w.Run(ctx)
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusForbidden {
		t.Errorf("Run as eve = %v, want a 403 *client.Error", err)
	}
}

// compact is raw JSON re-encoded without insignificant space.
func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// TestClientWorkerResultTooBigForTheSocket: a result larger than the
// worker socket takes (the queue's maxItemBytes and the envelope) makes
// the server close the socket with 1009, as it reads the frame's header
// (the small result) or while the Worker still writes it (the big one).
// The Worker reports the result as refused, too_large, as over HTTP,
// instead of sending it again on every new socket and never returning.
func TestClientWorkerResultTooBigForTheSocket(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	for _, size := range []int{200 << 10, 16 << 20} {
		// The socket's drop re-queued the task of the round before, which
		// this round's worker may claim first: the same test of it.
		s.post("resize", aliceToken, `{"url":"big"}`)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var outcomes []client.Outcome
		var drops int
		w := &client.Worker{
			Client: s.clientAs(boxToken), Queue: "resize", Name: "box-1", Limit: 1,
			MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(countLines{&drops, "reconnecting"}, nil)),
			Handler: func(context.Context, *client.Task) (any, error) {
				// resize's maxItemBytes is 4096; a frame may carry 64 KiB more.
				return map[string]string{"blob": strings.Repeat("x", size)}, nil
			},
			OnOutcome: func(o client.Outcome) { outcomes = append(outcomes, o) },
		}
		err := w.Run(ctx)
		cancel()
		if err != nil {
			t.Fatalf("%d bytes: Run = %v (after %d reconnections)", size, err, drops)
		}
		var e *client.Error
		if len(outcomes) != 1 || !errors.As(outcomes[0].Err, &e) || e.Code != "too_large" {
			t.Fatalf("%d bytes: outcomes %+v, want one with a too_large *client.Error", size, outcomes)
		}
		id := outcomes[0].Task.ID
		if v := s.do("GET", "/resize/"+id, aliceToken, "").JSON(t); v["status"] == "finished" {
			t.Errorf("%d bytes: task %s finished with a result over the limit: %v", size, id, v)
		}
	}
}

// countLines counts the log lines that contain what.
type countLines struct {
	n    *int
	what string
}

func (c countLines) Write(p []byte) (int, error) {
	if strings.Contains(string(p), c.what) {
		*c.n++
	}
	return len(p), nil
}
