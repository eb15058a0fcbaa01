package wsapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"

	"github.com/taskhoster/taskhoster/adapters/clock"
	"github.com/taskhoster/taskhoster/adapters/durable"
	"github.com/taskhoster/taskhoster/adapters/index"
	"github.com/taskhoster/taskhoster/adapters/memlog"
	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/adapters/wsapi"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// gatedRepo holds a claim that has just taken a task until the test lets
// it go: the window in which a socket can die under a winning claim.
type gatedRepo struct {
	ports.TaskRepository
	took    chan struct{}
	release chan struct{}
}

func (g *gatedRepo) ClaimNext(ctx context.Context, q domain.QueueRef, m ports.Matcher, now time.Time, fn func(*domain.Task) error, then ports.Then) (domain.Task, error) {
	t, err := g.TaskRepository.ClaimNext(ctx, q, m, now, fn, then)
	if err == nil {
		g.took <- struct{}{}
		<-g.release
	}
	return t, err
}

type fixture struct {
	svc     *app.Service
	hub     *notify.Hub
	repo    ports.TaskRepository
	log     *memlog.Log
	q       *domain.Queue
	url     string
	sockets *wsapi.Sockets
	workEnd chan struct{} // one value each time a Work handler returns
	// revoked, once set, is what the sockets' recheck answers: the
	// configuration took their queue or their right away.
	revoked atomic.Pointer[domain.Error]
}

// current is the sockets' recheck (httpapi's, over the fixture's queue).
func (f *fixture) current() (*domain.Queue, error) {
	if err := f.revoked.Load(); err != nil {
		return nil, err
	}
	return f.q, nil
}

var errRevoked = domain.E(domain.KindForbidden, domain.CodeForbidden, "box may no longer work on resize")

func newFixture(t testing.TB, repo ports.TaskRepository, opts wsapi.Options) *fixture {
	t.Helper()
	return newFixtureSyncing(t, repo, durable.None{}, opts)
}

// newFixtureSyncing is newFixture with a Syncer of the test's.
func newFixtureSyncing(t testing.TB, repo ports.TaskRepository, syncer ports.Syncer, opts wsapi.Options) *fixture {
	t.Helper()
	f := &fixture{
		hub: notify.NewHub(), repo: repo, log: &memlog.Log{},
		q: &domain.Queue{
			Host: "task.example.com", Name: "resize", Settings: domain.DefaultSettings(),
			Progress: schema.Any(), Result: schema.Any(),
		},
		workEnd: make(chan struct{}, 10),
	}
	f.svc = app.New(app.Deps{
		Repo: repo, Syncer: syncer, Log: f.log, Notifier: f.hub,
		Clock: clock.System{}, Compiler: schema.Compiler{},
	})
	sockets := wsapi.New(f.svc, opts)
	f.sockets = sockets
	mux := http.NewServeMux()
	mux.HandleFunc("/work", func(w http.ResponseWriter, r *http.Request) {
		defer func() { f.workEnd <- struct{}{} }()
		sockets.Work(w, r, f.q, "box", f.current)
	})
	mux.HandleFunc("/watch/{id}", func(w http.ResponseWriter, r *http.Request) {
		sockets.Watch(w, r, f.q, r.PathValue("id"), f.current)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := sockets.Close(ctx); err != nil {
			t.Errorf("close sockets: %v", err)
		}
		srv.Close()
	})
	f.url = "ws" + strings.TrimPrefix(srv.URL, "http")
	return f
}

func (f *fixture) dial(t testing.TB, path string) *websocket.Conn {
	t.Helper()
	c, _, err := websocket.DefaultDialer.Dial(f.url+path, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func read(t *testing.T, c *websocket.Conn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, data, err := c.ReadMessage()
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(data)
}

// claimHeldAtItsWin is a worker socket whose claim (ref 1) has just taken
// a posted task, held there until the test closes repo.release: the task
// is claimed in the store, and its reply not yet sent.
func claimHeldAtItsWin(t *testing.T) (*fixture, *gatedRepo, *websocket.Conn, domain.Task) {
	t.Helper()
	repo := &gatedRepo{TaskRepository: index.New(), took: make(chan struct{}), release: make(chan struct{})}
	f := newFixture(t, repo, wsapi.Options{})
	c := f.dial(t, "/work?worker=w1")
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"claim","ref":1}`)); err != nil {
		t.Fatal(err)
	}
	task, err := f.svc.Post(context.Background(), f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	<-repo.took
	return f, repo, c, task
}

// TestClaimWonAsSocketDies: a claim that takes a task just as its socket
// dies must not lose the task: it goes back to pending at once.
func TestClaimWonAsSocketDies(t *testing.T) {
	f, repo, c, task := claimHeldAtItsWin(t)
	if err := c.NetConn().Close(); err != nil {
		t.Fatal(err)
	}
	close(repo.release)
	<-f.workEnd // the socket is finished with

	got, err := repo.Get(context.Background(), domain.KeyOf(task))
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != domain.Pending || got.Attempts != 1 || got.Lease != nil {
		t.Errorf("task after the socket died: status %s, attempts %d, lease %v", got.Status, got.Attempts, got.Lease)
	}
	var kinds []string
	for _, ev := range f.log.Of(task.ID) {
		kinds = append(kinds, string(ev.Kind)+"/"+ev.Cause)
	}
	if diff := cmp.Diff([]string{"posted/", "claimed/", "requeue/socket"}, kinds); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// closeCode reads c until the server closes it, and returns the code.
func closeCode(t *testing.T, c *websocket.Conn) int {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, data, err := c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) {
		t.Fatalf("want a close frame, got %q, error %v", data, err)
	}
	return ce.Code
}

// TestRecheckLetsGoASocketThatLostItsRight: after a reload that took a
// worker's right away, Recheck closes its socket (1008) before its waiting
// claim takes a task: the next task is not claimed in its name, and no
// attempt of it is spent.
func TestRecheckLetsGoASocketThatLostItsRight(t *testing.T) {
	f := newFixture(t, index.New(), wsapi.Options{})
	c := f.dial(t, "/work?worker=w1")
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"claim","ref":1}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claim to wait", func() bool { return f.hub.Waiting(f.q.Ref()) == 1 })

	f.revoked.Store(errRevoked)
	f.sockets.Recheck()
	if got := read(t, c); !strings.Contains(got, `"error":"forbidden"`) || strings.Contains(got, `"ref"`) {
		t.Errorf("told %s, want a forbidden error without a ref", got)
	}
	if code := closeCode(t, c); code != websocket.ClosePolicyViolation {
		t.Errorf("closed with %d, want %d", code, websocket.ClosePolicyViolation)
	}
	<-f.workEnd

	task, err := f.svc.Post(context.Background(), f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.repo.Get(context.Background(), domain.KeyOf(task))
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != domain.Pending || got.Attempts != 0 {
		t.Errorf("task posted after the socket was let go: status %s, attempts %d", got.Status, got.Attempts)
	}
}

// TestASocketOpenedAcrossAReloadIsCheckedOnce: a reload that took the
// right between the upgrade request's check and the socket's joining the
// ones Recheck sees is not missed: the socket looks once as it joins, and
// is let go without a word from its peer.
func TestASocketOpenedAcrossAReloadIsCheckedOnce(t *testing.T) {
	f := newFixture(t, index.New(), wsapi.Options{})
	task, err := f.svc.Post(context.Background(), f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.revoked.Store(errRevoked) // the fixture's routes check nothing before the upgrade
	c := f.dial(t, "/work?worker=w1")
	if got := read(t, c); !strings.Contains(got, `"error":"forbidden"`) {
		t.Errorf("worker socket told %s, want forbidden", got)
	}
	if code := closeCode(t, c); code != websocket.ClosePolicyViolation {
		t.Errorf("worker socket closed with %d, want %d", code, websocket.ClosePolicyViolation)
	}
	w := f.dial(t, "/watch/"+task.ID)
	if code := closeCode(t, w); code != websocket.ClosePolicyViolation {
		t.Errorf("watch socket closed with %d, want %d", code, websocket.ClosePolicyViolation)
	}
}

// TestAClaimWonAfterTheRightWentIsNotSent: a claim that takes a task after
// its worker lost the right (a reload between the claim's wait and its
// win) does not send the item: it answers the claim with the error, closes
// the socket 1008, and the task is pending again.
func TestAClaimWonAfterTheRightWentIsNotSent(t *testing.T) {
	f, repo, c, task := claimHeldAtItsWin(t)
	f.revoked.Store(errRevoked)
	close(repo.release)

	if got := read(t, c); !strings.Contains(got, `"error":"forbidden"`) || !strings.Contains(got, `"ref":1`) {
		t.Errorf("claim answered %s, want forbidden with ref 1", got)
	}
	if code := closeCode(t, c); code != websocket.ClosePolicyViolation {
		t.Errorf("closed with %d, want %d", code, websocket.ClosePolicyViolation)
	}
	<-f.workEnd
	got, err := repo.Get(context.Background(), domain.KeyOf(task))
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != domain.Pending || got.Lease != nil {
		t.Errorf("task after its worker was let go: status %s, lease %v", got.Status, got.Lease)
	}
}

// TestRecheckLetsGoAWatcherThatLostItsRight: a watcher whose status right
// a reload took away is closed 1008.
func TestRecheckLetsGoAWatcherThatLostItsRight(t *testing.T) {
	f := newFixture(t, index.New(), wsapi.Options{})
	task, err := f.svc.Post(context.Background(), f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := f.dial(t, "/watch/"+task.ID)
	if got := read(t, c); !strings.Contains(got, `"status":"pending"`) {
		t.Fatalf("first view %s", got)
	}
	f.revoked.Store(errRevoked)
	f.sockets.Recheck()
	if code := closeCode(t, c); code != websocket.ClosePolicyViolation {
		t.Errorf("closed with %d, want %d", code, websocket.ClosePolicyViolation)
	}
}

// TestSlowWatcherIsToldToComeBack: a watcher that falls too far behind is
// closed with 1013 after the views it did get, never shown a gap.
func TestSlowWatcherIsToldToComeBack(t *testing.T) {
	f := newFixture(t, index.New(), wsapi.Options{WatchBuffer: 1})
	task, err := f.svc.Post(context.Background(), f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := f.dial(t, "/watch/"+task.ID)
	if first := read(t, c); !strings.Contains(first, `"status":"pending"`) {
		t.Fatalf("first view = %s", first)
	}

	// While the watcher reads nothing, publish far more (and larger) views
	// than the buffers between here and it can hold.
	pad := strings.Repeat("x", 32<<10)
	const changes = 2000
	for i := range changes {
		ev := task
		ev.Status = domain.Processing
		ev.Attempts = 1
		ev.UpdatedAt = task.UpdatedAt + 1
		ev.Progress = json.RawMessage(fmt.Sprintf(`"%d %s"`, i, pad))
		f.hub.Publish(domain.Event{Kind: domain.EventProgress, Task: ev})
	}

	next := 0
	for {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, data, err := c.ReadMessage()
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			if ce.Code != websocket.CloseTryAgainLater {
				t.Errorf("closed with %d, want 1013", ce.Code)
			}
			break
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		var v struct{ Progress string }
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%d ", next); !strings.HasPrefix(v.Progress, want) {
			t.Fatalf("view %d shows progress %.20q: a gap", next, v.Progress)
		}
		next++
	}
	if next >= changes {
		t.Errorf("the watcher got all %d views; it was never cut off", next)
	}
}

// TestHolderIsToldOfCancel: a worker socket holding a task is sent
// {"type":"cancelled","id"} as soon as the task is cancelled (SPEC §12), and
// its next report about it is refused with the status.
func TestHolderIsToldOfCancel(t *testing.T) {
	f := newFixture(t, index.New(), wsapi.Options{})
	ctx := context.Background()
	c := f.dial(t, "/work?worker=w1")
	send := func(msg string) {
		t.Helper()
		if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	for i := range 2 {
		task, err := f.svc.Post(ctx, f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, task.ID)
		send(fmt.Sprintf(`{"type":"claim","ref":%d}`, i))
		if got := read(t, c); !strings.Contains(got, `"type":"task"`) {
			t.Fatalf("claim: %s", got)
		}
	}
	// The first is handed in: a cancel after that changes nothing and tells nothing.
	send(`{"type":"result","ref":5,"id":"` + ids[0] + `","result":{}}`)
	if got := read(t, c); got != `{"type":"ack","ref":5,"accepted":true}` {
		t.Fatalf("result: %s", got)
	}
	if out, err := f.svc.Cancel(ctx, f.q, ids[0], app.Canceller{Manage: true}); err != nil || out.Accepted {
		t.Fatalf("cancel of a finished task: %+v %v", out, err)
	}
	out, err := f.svc.Cancel(ctx, f.q, ids[1], app.Canceller{User: "alice"})
	if err != nil || !out.Accepted {
		t.Fatalf("cancel: %+v %v", out, err)
	}
	if got, want := read(t, c), `{"type":"cancelled","id":"`+ids[1]+`"}`; got != want {
		t.Fatalf("after the cancel the socket got %s, want %s", got, want)
	}
	send(`{"type":"progress","ref":6,"id":"` + ids[1] + `","progress":{}}`)
	if got := read(t, c); got != `{"type":"ack","ref":6,"accepted":false,"status":"failed"}` {
		t.Errorf("progress after the cancel: %s", got)
	}
	send(`{"type":"heartbeat","ref":7,"id":"` + ids[1] + `"}`)
	if got := read(t, c); got != `{"type":"ack","ref":7,"accepted":false,"status":"failed"}` {
		t.Errorf("heartbeat after the cancel: %s", got)
	}
	_ = c.Close()
	<-f.workEnd
	got, err := f.repo.Get(ctx, domain.Key{Host: f.q.Host, Queue: f.q.Name, ID: ids[1]})
	if err != nil || got.Status != domain.Failed || got.Error == nil || *got.Error != domain.CancelledError {
		t.Errorf("cancelled task after its socket closed: %+v %v", got, err)
	}
}

// Workers and Open count the sockets connected now: the dashboard's and the
// metrics' "workers connected".
func TestWorkersCountsConnectedSockets(t *testing.T) {
	f := newFixture(t, index.New(), wsapi.Options{})
	a, b := f.dial(t, "/work"), f.dial(t, "/work")
	if got := f.sockets.Workers(f.q.Ref()); got != 2 {
		t.Errorf("workers = %d, want 2", got)
	}
	if got := f.sockets.Open(f.q.Host); got != 2 {
		t.Errorf("open sockets = %d, want 2", got)
	}
	_ = a.Close()
	<-f.workEnd
	if got := f.sockets.Workers(f.q.Ref()); got != 1 {
		t.Errorf("workers after one left = %d, want 1", got)
	}
	_ = b.Close()
	<-f.workEnd
	if got := f.sockets.Workers(f.q.Ref()); got != 0 {
		t.Errorf("workers after both left = %d, want 0", got)
	}
}

// TestAClosingSocketLeavesAClaimMadeAfterARetry: a socket that still lists
// a task whose claim ended without it (another worker failed the task)
// must not, when it closes, re-queue a newer claim of the task, though a
// retry made its attempt number the same and the worker's name is too.
func TestAClosingSocketLeavesAClaimMadeAfterARetry(t *testing.T) {
	f := newFixture(t, index.New(), wsapi.Options{})
	ctx := context.Background()
	task, err := f.svc.Post(ctx, f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := f.dial(t, "/work?worker=w1")
	if err := old.WriteMessage(websocket.TextMessage, []byte(`{"type":"claim","ref":1}`)); err != nil {
		t.Fatal(err)
	}
	if got := read(t, old); !strings.Contains(got, `"attempts":1`) {
		t.Fatalf("claim: %s", got)
	}
	if out, err := f.svc.Fail(ctx, f.q, task.ID, "w9", nil); err != nil || !out.Accepted {
		t.Fatalf("fail: %+v %v", out, err)
	}
	if _, err := f.svc.RetryTask(ctx, f.q, task.ID); err != nil {
		t.Fatalf("retry: %v", err)
	}
	newer := f.dial(t, "/work?worker=w1")
	if err := newer.WriteMessage(websocket.TextMessage, []byte(`{"type":"claim","ref":1}`)); err != nil {
		t.Fatal(err)
	}
	if got := read(t, newer); !strings.Contains(got, `"attempts":1`) {
		t.Fatalf("claim after the retry: %s", got)
	}
	// A late release of the old claim, on the old socket, is refused.
	if err := old.WriteMessage(websocket.TextMessage, []byte(`{"type":"release","ref":2,"id":"`+task.ID+`"}`)); err != nil {
		t.Fatal(err)
	}
	if got := read(t, old); got != `{"type":"ack","ref":2,"accepted":false,"status":"processing"}` {
		t.Errorf("release of the claim before the retry: %s", got)
	}
	if err := old.NetConn().Close(); err != nil {
		t.Fatal(err)
	}
	<-f.workEnd // the old socket is finished with

	got, err := f.repo.Get(ctx, domain.KeyOf(task))
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != domain.Processing || got.Attempts != 1 || got.Lease == nil || got.Lease.Worker != "w1" {
		t.Errorf("the newer claim after the old socket closed: status %s, attempts %d, lease %v", got.Status, got.Attempts, got.Lease)
	}
	for _, ev := range f.log.Of(task.ID) {
		if ev.Kind == domain.EventRequeue || ev.Kind == domain.EventReleased {
			t.Errorf("event %s/%s: the newer claim was given back", ev.Kind, ev.Cause)
		}
	}
}

// heldSyncer holds every claim's flush until the test lets it go: the
// window in which a task is claimed and watched but not yet sent.
type heldSyncer struct {
	durable.None
	arrived chan struct{}
	go_     chan struct{}
}

func (h *heldSyncer) Arrive(ctx context.Context) error {
	h.arrived <- struct{}{}
	<-h.go_
	return nil
}

// TestACancelIsToldAfterTheTaskItCancels: a task cancelled while its claim
// is being flushed reaches the worker first, then its cancel; a cancel for
// a task it never saw would be dropped by the worker, which would then do
// the work for nothing. The socket pauses between the claim's settling and
// its task message, time enough for a watch already running to speak.
func TestACancelIsToldAfterTheTaskItCancels(t *testing.T) {
	syncer := &heldSyncer{arrived: make(chan struct{}), go_: make(chan struct{})}
	f := newFixtureSyncing(t, index.New(), syncer, wsapi.Options{})
	f.sockets.AfterSettle(func() { time.Sleep(20 * time.Millisecond) })
	ctx := context.Background()
	c := f.dial(t, "/work?worker=w1")
	for i := range 3 {
		task, err := f.svc.Post(ctx, f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WriteMessage(websocket.TextMessage, []byte(fmt.Sprintf(`{"type":"claim","ref":%d}`, i))); err != nil {
			t.Fatal(err)
		}
		<-syncer.arrived // claimed and watched, not yet answered
		if out, err := f.svc.Cancel(ctx, f.q, task.ID, app.Canceller{Manage: true}); err != nil || !out.Accepted {
			t.Fatalf("cancel: %+v %v", out, err)
		}
		syncer.go_ <- struct{}{}
		first, second := read(t, c), read(t, c)
		if !strings.Contains(first, `"type":"task"`) || second != `{"type":"cancelled","id":"`+task.ID+`"}` {
			t.Fatalf("round %d: the socket got %s then %s, want the task then its cancel", i, first, second)
		}
	}
}

// failingSyncer commits until the test makes every later commit fail, as a
// journal whose disc failed does (fail-stop).
type failingSyncer struct {
	durable.None
	failing atomic.Bool
}

func (s *failingSyncer) Sync(ctx context.Context) error {
	if s.failing.Load() {
		return domain.E(domain.KindUnavailable, domain.CodeStorageUnavailable, "the journal failed")
	}
	return s.None.Sync(ctx)
}

// TestAWatchWhoseChangeCannotBeShownIsClosed: a watcher is shown a change
// only once it is durable; when the store can no longer commit, the watch
// socket is closed (1011), not left open with no view ever to come, the
// socket's slot of the host's taken for good.
func TestAWatchWhoseChangeCannotBeShownIsClosed(t *testing.T) {
	syncer := &failingSyncer{}
	f := newFixtureSyncing(t, index.New(), syncer, wsapi.Options{})
	task, err := f.svc.Post(context.Background(), f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := f.dial(t, "/watch/"+task.ID)
	if first := read(t, c); first == "" {
		t.Fatal("no first view")
	}
	syncer.failing.Store(true)
	ev := task
	ev.Progress = []byte(`1`)
	ev.UpdatedAt++
	f.hub.Publish(domain.Event{Kind: domain.EventProgress, Task: ev})

	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, data, err := c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseInternalServerErr || ce.Text != "storage_unavailable" {
		t.Fatalf("after a change the store could not commit, the watcher got %q, error %v; want close 1011 storage_unavailable", data, err)
	}
}

// waitFor retries cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// A claim that ends without a word from its socket (here another worker's
// failure comes first) leaves the socket's hands: what a socket keeps does
// not grow with every lease that lapses on it. A late report of that claim
// still names it, so it cannot touch the task's next claim under the same
// worker name (here after a manager's retry, which counts attempts from 0
// again).
func TestAClaimEndedElsewhereLeavesTheSocket(t *testing.T) {
	f := newFixture(t, index.New(), wsapi.Options{})
	ctx := context.Background()
	c := f.dial(t, "/work?worker=w1")
	posted, err := f.svc.Post(ctx, f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"claim","ref":1}`)); err != nil {
		t.Fatal(err)
	}
	if got := read(t, c); !strings.Contains(got, `"type":"task"`) {
		t.Fatalf("claim: %s", got)
	}
	if held, _ := f.sockets.Held(); held != 1 {
		t.Fatalf("the socket holds %d tasks after its claim, want 1", held)
	}
	if out, err := f.svc.Fail(ctx, f.q, posted.ID, "w2", nil); err != nil || !out.Accepted {
		t.Fatalf("another worker's failure: %+v, %v", out, err)
	}
	waitFor(t, "the socket to let go of the task another worker ended", func() bool {
		held, ended := f.sockets.Held()
		return held == 0 && ended == 1
	})

	if _, err := f.svc.RetryTask(ctx, f.q, posted.ID); err != nil {
		t.Fatal(err)
	}
	again, err := f.svc.Claim(ctx, f.q, "w1", nil, 0)
	if err != nil || again.ID != posted.ID {
		t.Fatalf("claim after the retry: %s, %v", again.ID, err)
	}
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"release","ref":2,"id":"`+posted.ID+`"}`)); err != nil {
		t.Fatal(err)
	}
	if got, want := read(t, c), `{"type":"ack","ref":2,"accepted":false,"status":"processing"}`; got != want {
		t.Errorf("the socket's late release got %s, want %s", got, want)
	}
	got, err := f.repo.Get(ctx, domain.KeyOf(again))
	if err != nil || got.Status != domain.Processing || !domain.HolderOf(got).Equal(domain.HolderOf(again)) {
		t.Errorf("after the late release the task is %+v, %v; want it still under the claim after the retry", got, err)
	}
}

// A message over the size limit is refused with close 1009, and the server
// reads the rest of it before it lets the connection go: a client that
// writes the whole message before it reads again (Node's ws) still gets the
// close, where a reset would have lost it, and the client would have taken
// the drop for a network fault and sent the message again, forever.
func TestAMessageOverTheLimitIsReadToItsEndBeforeTheClose(t *testing.T) {
	f := newFixture(t, index.New(), wsapi.Options{})
	c := f.dial(t, "/work?worker=w1")
	big := make([]byte, 8<<20) // eight times the queue's maxItemBytes
	for i := range big {
		big[i] = 'x'
	}
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := c.WriteMessage(websocket.TextMessage, big); err != nil {
		t.Fatalf("writing the message over the limit: %v; want the server to read it to its end", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err := c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseMessageTooBig {
		t.Fatalf("after the message over the limit the client read %v, want close 1009", err)
	}
}

// TestAWatchEndsOnTheTerminalViewItWasShown: a watch ends with the
// terminal view and close 1000 (SPEC §4). Its final view is read again to
// count as the task's fetch; should a manager's retry have put the task
// back to pending in between, the watch still ends on the terminal view
// whose change it followed, not on a pending view closed as if final.
func TestAWatchEndsOnTheTerminalViewItWasShown(t *testing.T) {
	f := newFixture(t, index.New(), wsapi.Options{})
	task, err := f.svc.Post(context.Background(), f.q, "alice", []byte(`{"url":"a"}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := f.dial(t, "/watch/"+task.ID)
	if first := read(t, c); !strings.Contains(first, `"status":"pending"`) {
		t.Fatalf("first view %s, want pending", first)
	}
	// The task failed, and was retried before the watch read it again:
	// the store holds it pending, the watch has the failed change.
	failed, _, err := task.Cancel(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f.hub.Publish(domain.Event{Kind: domain.EventFailed, Task: failed})

	var view domain.View
	if err := json.Unmarshal([]byte(read(t, c)), &view); err != nil {
		t.Fatal(err)
	}
	_, _, err = c.ReadMessage()
	var ce *websocket.CloseError
	if view.Status != domain.Failed || !errors.As(err, &ce) || ce.Code != websocket.CloseNormalClosure {
		t.Fatalf("the watch ended on status %q and %v; want the failed view, then close 1000", view.Status, err)
	}
}
