package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/client"
)

// testTimeout bounds every wait in these tests; nothing here should take
// more than a fraction of it.
const testTimeout = 20 * time.Second

// startWorker runs w in the background; the returned function waits for
// Run to return and gives its error.
func startWorker(t *testing.T, ctx context.Context, w *client.Worker) func() error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	return func() error {
		t.Helper()
		select {
		case err := <-errc:
			return err
		case <-time.After(testTimeout):
			t.Fatal("Worker.Run did not return")
			return nil
		}
	}
}

// waitFinished waits until n task results were accepted and returns their ids.
func waitFinished(t *testing.T, f *fakeQueue, n int) []string {
	t.Helper()
	var ids []string
	deadline := time.After(testTimeout)
	for len(ids) < n {
		select {
		case id := <-f.finished:
			ids = append(ids, id)
		case <-deadline:
			t.Fatalf("only %d of %d tasks finished", len(ids), n)
		}
	}
	return ids
}

func TestWorkerRunsConcurrencyTasksAtOnce(t *testing.T) {
	f := newFakeQueue(t)
	const concurrency = 4
	// Each of the first four tasks waits until all four run: with fewer
	// open claims this would never happen, and the test would time out.
	var mu sync.Mutex
	inside := 0
	all := make(chan struct{})
	w := &client.Worker{
		Client:      client.New(f.srv.URL, client.WithToken("tok"), client.WithHost("task.example.com")),
		Queue:       "q",
		Name:        "box-1",
		Concurrency: concurrency,
		Handler: func(ctx context.Context, task *client.Task) (any, error) {
			mu.Lock()
			inside++
			if inside == concurrency {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if ok, err := task.Progress(ctx, map[string]int{"percent": 50}); err != nil || !ok {
				t.Errorf("progress of %s: accepted %v, %v", task.ID, ok, err)
			}
			return map[string]json.RawMessage{"echo": task.Item}, nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := startWorker(t, ctx, w)

	ids := f.add(12)
	waitFinished(t, f, len(ids))
	for i, id := range ids {
		if want := fmt.Sprintf(`{"echo":{"n":%d}}`, i); string(f.result(id)) != want {
			t.Errorf("result of %s = %s, want %s", id, f.result(id), want)
		}
	}
	f.mu.Lock()
	name, auth, hostHeader := f.lastName, f.lastAuth, f.lastHost
	f.mu.Unlock()
	if name != "box-1" || auth != "Bearer tok" || hostHeader != "task.example.com" {
		t.Errorf("dial had worker %q, Authorization %q, Host %q", name, auth, hostHeader)
	}
	cancel()
	if err := wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("Run after cancel = %v, want context.Canceled", err)
	}
}

// TestWorkerReconnects drops the socket under a running handler and
// refuses the next two dials with 503: the worker backs off, reconnects,
// hands in the result over the new socket and keeps working.
func TestWorkerReconnects(t *testing.T) {
	f := newFakeQueue(t)
	f.refuse = func(dial int) int {
		if dial == 2 || dial == 3 {
			return http.StatusServiceUnavailable
		}
		return 0
	}
	started := make(chan string, 10)
	release := make(chan struct{})
	var mu sync.Mutex
	calls := map[string]int{}
	w := &client.Worker{
		Client: client.New(f.srv.URL), Queue: "q",
		MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
		Handler: func(ctx context.Context, task *client.Task) (any, error) {
			mu.Lock()
			calls[task.ID]++
			mu.Unlock()
			started <- task.ID
			<-release
			return "done", nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := startWorker(t, ctx, w)

	first := f.add(1)[0]
	if got := <-started; got != first {
		t.Fatalf("started %s, want %s", got, first)
	}
	f.dropAll() // the fake puts the task back to pending, as the server does
	close(release)
	if got := waitFinished(t, f, 1); got[0] != first {
		t.Fatalf("finished %s, want %s", got[0], first)
	}
	second := f.add(1)[0]
	if got := waitFinished(t, f, 1); got[0] != second {
		t.Fatalf("finished %s, want %s", got[0], second)
	}
	if n := f.dialCount(); n != 4 {
		t.Errorf("%d dials, want 4 (the first, two refused, the one that held)", n)
	}
	if string(f.result(first)) != `"done"` {
		t.Errorf("result = %s", f.result(first))
	}
	mu.Lock()
	defer mu.Unlock()
	if calls[first] != 1 || calls[second] != 1 {
		t.Errorf("handler calls = %v, want one each", calls)
	}
	cancel()
	_ = wait()
}

func TestWorkerFirstRefusalIsFatal(t *testing.T) {
	f := newFakeQueue(t)
	f.refuse = func(int) int { return http.StatusUnauthorized }
	w := &client.Worker{Client: client.New(f.srv.URL), Queue: "q",
		Handler: func(context.Context, *client.Task) (any, error) { return nil, nil }}
	err := startWorker(t, context.Background(), w)()
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusUnauthorized || e.Code != "refused" {
		t.Fatalf("Run = %v, want the 401 as a *client.Error", err)
	}
}

// TestWorkerDrainFinishesRunningTasks: after Drain the running handler
// finishes and its result is handed in; nothing new is claimed.
func TestWorkerDrainFinishesRunningTasks(t *testing.T) {
	f := newFakeQueue(t)
	started := make(chan struct{}, 10)
	release := make(chan struct{})
	w := &client.Worker{
		Client: client.New(f.srv.URL), Queue: "q",
		Handler: func(ctx context.Context, task *client.Task) (any, error) {
			started <- struct{}{}
			<-release
			if ctx.Err() != nil {
				t.Error("Drain cancelled the handler's context")
			}
			return "ok", nil
		},
	}
	wait := startWorker(t, context.Background(), w)
	ids := f.add(3)
	<-started
	w.Drain()
	close(release)
	if err := wait(); err != nil {
		t.Fatalf("Run after Drain = %v", err)
	}
	if string(f.result(ids[0])) != `"ok"` {
		t.Errorf("the running task's result = %s", f.result(ids[0]))
	}
	for _, id := range ids[1:] {
		if f.result(id) != nil {
			t.Errorf("task %s was worked after Drain", id)
		}
	}
}

// TestWorkerLimitAndHandlerError: with Limit 2 the worker takes two tasks
// and returns; a handler error hands in nothing and reaches OnDone.
func TestWorkerLimitAndHandlerError(t *testing.T) {
	f := newFakeQueue(t)
	ids := f.add(3)
	var mu sync.Mutex
	outcomes := map[string]error{}
	w := &client.Worker{
		Client: client.New(f.srv.URL), Queue: "q", Concurrency: 8, Limit: 2,
		Handler: func(ctx context.Context, task *client.Task) (any, error) {
			if task.ID == ids[0] {
				return nil, errors.New("disc full")
			}
			return 1, nil
		},
		OnDone: func(task *client.Task, accepted bool, err error) {
			mu.Lock()
			defer mu.Unlock()
			outcomes[task.ID] = err
			if (err == nil) != accepted {
				t.Errorf("task %s: accepted %v with error %v", task.ID, accepted, err)
			}
		},
	}
	if err := startWorker(t, context.Background(), w)(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if len(outcomes) != 2 {
		t.Fatalf("handled %d tasks, want 2: %v", len(outcomes), outcomes)
	}
	if err := outcomes[ids[0]]; err == nil {
		t.Errorf("the failing handler's error did not reach OnDone")
	}
	if f.result(ids[0]) != nil || string(f.result(ids[1])) != "1" || f.result(ids[2]) != nil {
		t.Errorf("results = %s, %s, %s", f.result(ids[0]), f.result(ids[1]), f.result(ids[2]))
	}
}

// TestWorkerOverTLS: https becomes wss, with the TLS settings of the
// client's HTTP transport.
func TestWorkerOverTLS(t *testing.T) {
	f := newFakeQueueTLS(t)
	ids := f.add(1)
	w := &client.Worker{
		Client: client.New(f.srv.URL, client.WithHTTPClient(f.srv.Client())), Queue: "q", Limit: 1,
		Handler: func(context.Context, *client.Task) (any, error) { return "tls", nil },
	}
	// The transport has been used for HTTP before the socket is dialled.
	if resp, err := f.srv.Client().Get(f.srv.URL + "/other"); err == nil {
		resp.Body.Close()
	}
	if err := startWorker(t, context.Background(), w)(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if string(f.result(ids[0])) != `"tls"` {
		t.Errorf("result = %s", f.result(ids[0]))
	}
}

// TestWorkerWorksOnWhileResultsWaitForTheirAcks holds back the acks of
// results, as a server does until each result is on the disc: a worker
// with one slot claims, runs and hands in the next tasks meanwhile (it
// would wait forever if it waited for an ack before handing in the next
// result), and Run returns once every hand-in is acked, each outcome with
// its own ack.
func TestWorkerWorksOnWhileResultsWaitForTheirAcks(t *testing.T) {
	f := newFakeQueue(t)
	f.holdAcks = true
	const n = 3
	var mu sync.Mutex
	var outcomes []client.Outcome
	handled := 0
	w := &client.Worker{
		Client:      client.New(f.srv.URL),
		Queue:       "q",
		Concurrency: 1,
		Limit:       n,
		Handler: func(ctx context.Context, task *client.Task) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			handled++
			return map[string]int{"handled": handled}, nil
		},
		OnOutcome: func(o client.Outcome) {
			mu.Lock()
			defer mu.Unlock()
			outcomes = append(outcomes, o)
		},
	}
	wait := startWorker(t, context.Background(), w)
	ids := f.add(n)
	if got := waitFinished(t, f, n); fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Fatalf("results for %v, want %v", got, ids)
	}
	mu.Lock()
	early := len(outcomes)
	mu.Unlock()
	if early != 0 {
		t.Errorf("%d outcomes before any ack, want none: an outcome waits for its ack", early)
	}
	f.mu.Lock()
	behind := f.resultsBehindHeld
	f.mu.Unlock()
	if behind != n-1 {
		t.Errorf("%d results handed in while an earlier ack was held back, want %d", behind, n-1)
	}
	f.releaseAcks()
	if err := wait(); err != nil {
		t.Fatalf("Run = %v, want nil after Limit tasks", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(outcomes) != n {
		t.Fatalf("%d outcomes, want %d: %+v", len(outcomes), n, outcomes)
	}
	seen := map[string]bool{}
	for _, o := range outcomes { // the acks may be told in any order
		seen[o.Task.ID] = true
		if o.Sent != "result" || !o.Ack.Accepted || o.Err != nil {
			t.Errorf("outcome of %s: sent %q, ack %+v, err %v; want an accepted result", o.Task.ID, o.Sent, o.Ack, o.Err)
		}
	}
	for _, id := range ids {
		if !seen[id] {
			t.Errorf("no outcome for %s: %+v", id, outcomes)
		}
	}
}

// Acks come back side by side (each hand-in awaits its own), but the
// Worker tells their outcomes one at a time, so a callback may keep plain
// state, as OnOutcome's documentation promises.
func TestWorkerTellsOutcomesOneAtATime(t *testing.T) {
	f := newFakeQueue(t)
	f.holdAcks = true
	const n = 5
	var inside, overlaps, told atomic.Int32
	w := &client.Worker{
		Client:      client.New(f.srv.URL),
		Queue:       "q",
		Concurrency: 1,
		Limit:       n,
		Handler: func(ctx context.Context, task *client.Task) (any, error) {
			return map[string]bool{"ok": true}, nil
		},
		OnOutcome: func(o client.Outcome) {
			if inside.Add(1) > 1 {
				overlaps.Add(1)
			}
			time.Sleep(5 * time.Millisecond) // long enough for another to come in
			inside.Add(-1)
			told.Add(1)
		},
	}
	wait := startWorker(t, context.Background(), w)
	f.add(n)
	waitFinished(t, f, n)
	f.releaseAcks() // every ack at once
	if err := wait(); err != nil {
		t.Fatalf("Run = %v, want nil after Limit tasks", err)
	}
	if told.Load() != n {
		t.Fatalf("%d outcomes told, want %d", told.Load(), n)
	}
	if overlaps.Load() > 0 {
		t.Errorf("OnOutcome ran beside itself %d times, want one call at a time", overlaps.Load())
	}
}

// TestWorkerSendsNoReleaseOverANewerSocket: a handler gives its task back
// after the socket it was claimed on dropped. The drop re-queued the task
// and another slot has it now, on the new socket, as the same worker: a
// release sent there would give back that newer claim.
func TestWorkerSendsNoReleaseOverANewerSocket(t *testing.T) {
	f := newFakeQueue(t)
	started := make(chan int, 4)
	giveBack := make(chan struct{})
	var mu sync.Mutex
	calls := 0
	w := &client.Worker{
		Client: client.New(f.srv.URL), Queue: "q", Concurrency: 2,
		MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
		Handler: func(ctx context.Context, task *client.Task) (any, error) {
			mu.Lock()
			calls++
			n := calls
			mu.Unlock()
			started <- n
			if n == 1 {
				<-giveBack
				return nil, client.Release{}
			}
			<-giveBack
			return "done", nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := startWorker(t, ctx, w)

	id := f.add(1)[0]
	if n := <-started; n != 1 {
		t.Fatalf("handler call %d, want 1", n)
	}
	f.dropAll() // the fake re-queues the task; the other slot takes it on the new socket
	if n := <-started; n != 2 {
		t.Fatalf("handler call %d, want 2", n)
	}
	close(giveBack) // the first call gives back, the second finishes
	if got := waitFinished(t, f, 1); got[0] != id {
		t.Fatalf("finished %s, want %s", got[0], id)
	}
	f.mu.Lock()
	releases := len(f.releases[id])
	f.mu.Unlock()
	if releases != 0 || string(f.result(id)) != `"done"` {
		t.Errorf("%d releases applied, result %s: the release of the dropped claim reached the newer one", releases, f.result(id))
	}
	cancel()
	_ = wait()
}

// TestWorkerClaimsAgainAfterABusyServer: a claim refused because too many
// claims wait on the server (503 too_many_waiting) passes; the Worker
// claims again later rather than stop.
func TestWorkerClaimsAgainAfterABusyServer(t *testing.T) {
	f := newFakeQueue(t)
	f.busyClaims = 3
	w := &client.Worker{
		Client: client.New(f.srv.URL), Queue: "q",
		MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
		Handler: func(ctx context.Context, task *client.Task) (any, error) { return "done", nil },
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := startWorker(t, ctx, w)
	id := f.add(1)[0]
	if got := waitFinished(t, f, 1); got[0] != id {
		t.Fatalf("finished %s, want %s", got[0], id)
	}
	cancel()
	if err := wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
}

// TestWorkerDrainEndsTheWaitAfterABusyServer: a Worker waiting to claim
// again after a refusal stops waiting when drained.
func TestWorkerDrainEndsTheWaitAfterABusyServer(t *testing.T) {
	f := newFakeQueue(t)
	f.busyClaims = 1
	w := &client.Worker{
		Client: client.New(f.srv.URL), Queue: "q",
		MinBackoff: time.Hour, MaxBackoff: time.Hour,
		Handler: func(ctx context.Context, task *client.Task) (any, error) { return "done", nil },
	}
	wait := startWorker(t, context.Background(), w)
	for { // until the claim was refused
		f.mu.Lock()
		refused := f.busyClaims == 0
		f.mu.Unlock()
		if refused {
			break
		}
		time.Sleep(time.Millisecond)
	}
	w.Drain()
	if err := wait(); err != nil { // within testTimeout, not the hour's wait
		t.Errorf("Run after Drain = %v", err)
	}
}

// TestWorkerStopsOnAClaimOverTheSizeLimit: a query that makes the claim
// message larger than the server reads gets the socket closed with 1009.
// Sent again it would be refused again, and each time it would take the
// socket down with every report in flight on it: Run ends with too_large,
// as for an invalid query, instead of claiming again and again.
func TestWorkerStopsOnAClaimOverTheSizeLimit(t *testing.T) {
	f := newFakeQueue(t)
	f.readLimit = 1024
	redialled := make(chan struct{})
	f.refuse = func(dial int) int {
		if dial == 3 {
			close(redialled)
		}
		return 0
	}
	w := &client.Worker{
		Client: client.New(f.srv.URL), Queue: "q",
		Query:      map[string]any{"properties": map[string]any{"url": map[string]any{"const": strings.Repeat("x", 2048)}}},
		MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
		Handler: func(context.Context, *client.Task) (any, error) { return nil, nil },
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case err := <-done:
		var e *client.Error
		if !errors.As(err, &e) || e.Code != "too_large" {
			t.Fatalf("Run = %v, want a too_large *client.Error", err)
		}
	case <-redialled:
		t.Fatal("the Worker dialled a third time to send the same claim again")
	case <-time.After(testTimeout):
		t.Fatal("Worker.Run did not return")
	}
}
