package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"

	"github.com/taskhoster/taskhoster/adapters/clock"
	"github.com/taskhoster/taskhoster/adapters/dashboard"
	"github.com/taskhoster/taskhoster/adapters/folderconfig"
	"github.com/taskhoster/taskhoster/adapters/httpapi"
	"github.com/taskhoster/taskhoster/adapters/index"
	"github.com/taskhoster/taskhoster/adapters/memlog"
	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

const (
	testHost    = "dash.example.com"
	aliceToken  = "a11ce0000000000000000000000000a1"
	readerToken = "4ead0000000000000000000000000ead"
	eveToken    = "e0e0000000000000000000000000e0e0"
)

// fixture is a host whose queue ops alice manages (and reads the logs
// of) and reader may only see; eve may only post to it. The queue
// open's status is public.
type fixture struct {
	api      *httpapi.API
	svc      *app.Service
	activity *dashboard.Activity
	dash     *dashboard.Dashboard
	config   ports.Config
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureOn(t, clock.System{})
}

// newFixtureOn is newFixture with the service and the dashboard on clk.
func newFixtureOn(t *testing.T, clk ports.Clock) *fixture {
	t.Helper()
	return newFixtureWith(t, clk, nopSync{})
}

// newFixtureWith is newFixtureOn whose changes syncer makes durable.
func newFixtureWith(t *testing.T, clk ports.Clock, syncer ports.Syncer) *fixture {
	t.Helper()
	return newFixtureOver(t, clk, syncer, index.New())
}

// newFixtureOver is newFixtureWith over the task store repo.
func newFixtureOver(t *testing.T, clk ports.Clock, syncer ports.Syncer, repo ports.TaskRepository) *fixture {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"taskhoster-users/alice.json":  `{"name":"alice","token":"` + aliceToken + `"}`,
		"taskhoster-users/reader.json": `{"name":"reader","token":"` + readerToken + `"}`,
		"taskhoster-users/eve.json":    `{"name":"eve","token":"` + eveToken + `"}`,
		"taskhoster-queues/ops.json": `{"item":{},"settings":{"maxAttempts":1},
			"access":{"post":["alice","eve"],"status":["alice","reader"],"work":"public","logs":["alice"],"manage":["alice"]}}`,
		"taskhoster-queues/open.json": `{"item":{},"access":{"post":"public","status":"public"}}`,
	}
	for name, content := range files {
		path := filepath.Join(dir, testHost, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	config, problems := folderconfig.Load(dir)
	if folderconfig.HasErrors(problems) {
		t.Fatalf("fixture: %v", problems)
	}
	activity := dashboard.NewActivity()
	hub := notify.NewHub()
	svc := app.New(app.Deps{
		Repo: repo, Syncer: syncer, Log: &memlog.Log{}, Notifier: hub,
		Clock: clk, Compiler: schema.Compiler{}, Pauses: &pauses{}, Observer: activity,
	})
	d := dashboard.New(dashboard.Options{
		Service: svc, Config: config, Activity: activity, Waiting: hub, Clock: clk, Push: 10 * time.Millisecond,
	})
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	return &fixture{api: httpapi.New(svc, config, httpapi.Options{Dashboard: d}), svc: svc, activity: activity, dash: d, config: config}
}

// get asks the dashboard's path as the holder of token ("" for none).
func (f *fixture) get(t *testing.T, path, token string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest("GET", "http://"+testHost+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	f.api.ServeHTTP(rec, req)
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatalf("GET %s: body %q: %v", path, rec.Body, err)
	}
	return rec.Code, m
}

func (f *fixture) queue(t *testing.T, name string) *domain.Queue {
	t.Helper()
	h, _ := f.config.Host(testHost)
	return h.Queues[name]
}

func (f *fixture) post(t *testing.T, queue string) domain.Task {
	t.Helper()
	task, err := f.svc.Post(context.Background(), f.queue(t, queue), "alice", []byte(`{"n":1}`), app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func names(m map[string]any) map[string]bool {
	out := map[string]bool{}
	for _, q := range m["queues"].([]any) {
		q := q.(map[string]any)
		out[q["name"].(string)] = q["manage"].(bool)
	}
	return out
}

// Who sees which queue, and who may manage it: the access rules.
func TestQueuesShowWhatAccessAllows(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		who, token string
		want       map[string]bool // queue -> manage
	}{
		{"alice", aliceToken, map[string]bool{"ops": true, "open": false}},
		{"reader", readerToken, map[string]bool{"ops": false, "open": false}},
		{"eve, who may only post to ops", eveToken, map[string]bool{"open": false}},
		{"anyone", "", map[string]bool{"open": false}},
	} {
		code, m := f.get(t, "/_dash/api/queues", c.token)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %v", c.who, code, m)
		}
		if diff := cmp.Diff(c.want, names(m)); diff != "" {
			t.Errorf("%s sees (-want +got):\n%s", c.who, diff)
		}
	}
	code, m := f.get(t, "/_dash/api/queues", "0000000000000000000000000000dead")
	if code != http.StatusUnauthorized || m["error"] != "unauthorized" {
		t.Errorf("an unknown token: %d %v, want 401 unauthorized", code, m)
	}
}

func TestFiguresCountEveryState(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ops := f.queue(t, "ops")
	for range 3 {
		f.post(t, "ops")
	}
	// Two claims; the second claimed fails, the first stays leased.
	var got [2]domain.Task
	for i := range got {
		var err error
		if got[i], err = f.svc.Claim(ctx, ops, "w1", nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	claimed, failed := got[0], got[1]
	if _, err := f.svc.Fail(ctx, ops, failed.ID, "w1", []byte(`{"why":"no"}`)); err != nil {
		t.Fatal(err)
	}
	_, m := f.get(t, "/_dash/api/queues", aliceToken)
	var q map[string]any
	for _, v := range m["queues"].([]any) {
		if v.(map[string]any)["name"] == "ops" {
			q = v.(map[string]any)
		}
	}
	want := map[string]any{"claimable": 1.0, "delayed": 0.0, "processing": 1.0, "finished": 0.0, "failed": 1.0}
	if diff := cmp.Diff(want, q["counts"]); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	rates := q["rates"].([]any)
	var posted, failures float64
	for _, r := range rates {
		r := r.([]any)
		posted += r[1].(float64)
		failures += r[3].(float64)
	}
	if posted != 3 || failures != 1 {
		t.Errorf("rates %v: %v posted and %v failed, want 3 and 1", rates, posted, failures)
	}
	if q["oldest"] == nil || q["paused"] != false {
		t.Errorf("oldest %v, paused %v: want a time and false", q["oldest"], q["paused"])
	}

	_, d := f.get(t, "/_dash/api/queues/ops", aliceToken)
	leases := d["leases"].([]any)
	if len(leases) != 1 || leases[0].(map[string]any)["id"] != claimed.ID || leases[0].(map[string]any)["worker"] != "w1" {
		t.Errorf("leases %v, want %s held by w1", leases, claimed.ID)
	}
	groups := d["failures"].([]any)
	if len(groups) != 1 {
		t.Fatalf("failure groups %v, want one", groups)
	}
	g := groups[0].(map[string]any)
	if g["error"] != "failed" || g["count"] != 1.0 || g["tasks"].([]any)[0].(map[string]any)["id"] != failed.ID {
		t.Errorf("failure group %v, want error failed with task %s", g, failed.ID)
	}
}

// The detail and a task's record need manage, after the queue exists.
func TestDetailNeedsManage(t *testing.T) {
	f := newFixture(t)
	id := f.post(t, "ops").ID
	for _, path := range []string{"/_dash/api/queues/ops", "/_dash/api/queues/ops/tasks/" + id} {
		for _, c := range []struct {
			who, token string
			status     int
			code       string
		}{
			{"anyone", "", 401, "unauthorized"},
			{"reader", readerToken, 403, "forbidden"},
			{"eve", eveToken, 403, "forbidden"},
		} {
			if code, m := f.get(t, path, c.token); code != c.status || m["error"] != c.code {
				t.Errorf("%s by %s: %d %v, want %d %s", path, c.who, code, m, c.status, c.code)
			}
		}
	}
	if code, m := f.get(t, "/_dash/api/queues/nope", aliceToken); code != 404 || m["error"] != "unknown_queue" {
		t.Errorf("an unknown queue: %d %v", code, m)
	}
	if code, m := f.get(t, "/_dash/api/queues/ops/tasks/0123456789abcdef", aliceToken); code != 404 || m["error"] != "not_found" {
		t.Errorf("an unknown task: %d %v", code, m)
	}
	if code, m := f.get(t, "/_dash/nothing", ""); code != 404 || m["error"] != "not_found" {
		t.Errorf("an unknown path: %d %v", code, m)
	}
}

// Reading a finished task from the dashboard does not stamp fetchedAt,
// which would start a retainFrom fetched queue's retention clock.
func TestTaskReadDoesNotFetch(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ops := f.queue(t, "ops")
	task := f.post(t, "ops")
	if _, err := f.svc.Result(ctx, ops, task.ID, "w1", []byte(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	code, m := f.get(t, "/_dash/api/queues/ops/tasks/"+task.ID, aliceToken)
	got := m["task"].(map[string]any)
	if code != 200 || got["status"] != "finished" || got["item"] == nil {
		t.Fatalf("the task: %d %v", code, m)
	}
	stored, err := f.svc.Get(ctx, ops, task.ID)
	if err != nil || stored.FetchedAt != nil {
		t.Errorf("after the dashboard read it: fetchedAt %v (%v), want none", stored.FetchedAt, err)
	}
}

func TestActivityKeepsAnHourPerSecond(t *testing.T) {
	a := dashboard.NewActivity()
	ref := domain.QueueRef{Host: "h", Queue: "q"}
	t0 := time.Unix(1_800_000_000, 0)
	ev := func(kind domain.EventKind, at time.Time) {
		a.Observe(domain.Event{Kind: kind, At: at, Task: domain.Task{Host: "h", Queue: "q"}})
	}
	ev(domain.EventPosted, t0)
	ev(domain.EventPosted, t0.Add(500*time.Millisecond))
	ev(domain.EventResult, t0.Add(time.Second))
	ev(domain.EventTimeout, t0.Add(2*time.Second))
	ev(domain.EventCancelled, t0.Add(2*time.Second))
	ev(domain.EventProgress, t0.Add(3*time.Second)) // counts nowhere, but is a change
	got, version := a.Rates(ref, t0.Add(3*time.Second), dashboard.Window)
	want := []dashboard.Second{{t0.Unix(), 2, 0, 0}, {t0.Unix() + 1, 0, 1, 0}, {t0.Unix() + 2, 0, 0, 2}}
	if diff := cmp.Diff(want, got); diff != "" || version != 6 {
		t.Errorf("rates (-want +got):\n%s\nversion %d, want 6", diff, version)
	}
	// A span of 2 seconds ending at t0+2 leaves out t0.
	if got, _ := a.Rates(ref, t0.Add(2*time.Second), 2); len(got) != 2 || got[0][0] != t0.Unix()+1 {
		t.Errorf("the last 2 seconds: %v", got)
	}
	// An hour on, the slot of t0 is reused for the new second.
	later := t0.Add(dashboard.Window * time.Second)
	ev(domain.EventPosted, later)
	got, _ = a.Rates(ref, later, dashboard.Window)
	if diff := cmp.Diff([]dashboard.Second{{t0.Unix() + 1, 0, 1, 0}, {t0.Unix() + 2, 0, 0, 2}, {later.Unix(), 1, 0, 0}}, got); diff != "" {
		t.Errorf("an hour later (-want +got):\n%s", diff)
	}
	if got, v := a.Rates(domain.QueueRef{Host: "h", Queue: "other"}, later, 60); len(got) != 0 || v != 0 {
		t.Errorf("a queue without events: %v %d", got, v)
	}
}

// dial opens the live socket of the test server and says hello with token.
func dial(t *testing.T, srv *httptest.Server, hello string) *websocket.Conn {
	t.Helper()
	header := http.Header{"Host": {testHost}}
	conn, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/_dash/live", header)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.WriteMessage(websocket.TextMessage, []byte(hello)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// next reads the next message, which must come within the deadline.
func next(t *testing.T, conn *websocket.Conn) map[string]any {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var m map[string]any
	if err := conn.ReadJSON(&m); err != nil {
		t.Fatalf("read: %v", err)
	}
	return m
}

func claimable(m map[string]any, queue string) float64 {
	for _, q := range m["queues"].([]any) {
		if q := q.(map[string]any); q["name"] == queue {
			return q["counts"].(map[string]any)["claimable"].(float64)
		}
	}
	return -1
}

// The live socket sends a snapshot at once, another when a task is
// posted, and only what the token may see.
func TestLiveSocketPushesChanges(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(f.api)
	t.Cleanup(srv.Close)

	alice := dial(t, srv, `{"token":"`+aliceToken+`"}`)
	first := next(t, alice)
	if first["type"] != "snapshot" || first["user"] != "alice" || claimable(first, "ops") != 0 {
		t.Fatalf("first snapshot: %v", first)
	}
	f.post(t, "ops")
	// Every snapshot after the first differs from the one before; the
	// post shows in one of the next few.
	for i := 0; ; i++ {
		if i == 10 {
			t.Fatal("no snapshot showed the post")
		}
		if claimable(next(t, alice), "ops") == 1 {
			break
		}
	}

	anyone := dial(t, srv, `{}`)
	if m := next(t, anyone); m["user"] != nil || claimable(m, "ops") != -1 || claimable(m, "open") != 0 {
		t.Errorf("an anonymous snapshot: %v", m)
	}

	bad := dial(t, srv, `{"token":"0000000000000000000000000000dead"}`)
	if m := next(t, bad); m["type"] != "error" || m["error"] != "unauthorized" {
		t.Errorf("an unknown token: %v", m)
	}
	_ = bad.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := bad.ReadMessage(); !websocket.IsCloseError(err, websocket.ClosePolicyViolation) {
		t.Errorf("after the refusal: %v, want close 1008", err)
	}

	notJSON := dial(t, srv, `token`)
	if m := next(t, notJSON); m["type"] != "error" || m["error"] != "invalid_json" {
		t.Errorf("a first message that is not JSON: %v", m)
	}
}

// countingRepo counts the calls of Counts, which on PostgreSQL is a
// COUNT over every row of the queue.
type countingRepo struct {
	ports.TaskRepository
	mu    sync.Mutex
	calls map[domain.QueueRef]int
}

func (r *countingRepo) Counts(q domain.QueueRef) ports.Counts {
	r.mu.Lock()
	r.calls[q]++
	r.mu.Unlock()
	return r.TaskRepository.Counts(q)
}

func (r *countingRepo) called(q domain.QueueRef) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[q]
}

// Live sockets share a queue's counts: many viewers of an unchanged queue,
// anonymous ones included, cost one count per Push between them rather
// than one each per Push, and a post still shows at once.
func TestViewersShareTheCounts(t *testing.T) {
	fake := &clock.Fake{}
	fake.Set(time.Date(2026, 7, 26, 9, 0, 0, 0, time.UTC))
	repo := &countingRepo{TaskRepository: index.New(), calls: map[domain.QueueRef]int{}}
	f := newFixtureOver(t, fake, nopSync{}, repo)
	srv := httptest.NewServer(f.api)
	t.Cleanup(srv.Close)
	open := domain.QueueRef{Host: testHost, Queue: "open"}

	for range 5 {
		if m := next(t, dial(t, srv, `{}`)); claimable(m, "open") != 0 {
			t.Fatalf("a first snapshot: %v", m)
		}
	}
	if n := repo.called(open); n != 1 {
		t.Errorf("five viewers of an unchanged queue within one Push counted it %d times, want once", n)
	}

	// A post is a transition: the next read counts afresh.
	f.post(t, "open")
	if _, m := f.get(t, "/_dash/api/queues", ""); claimable(m, "open") != 1 {
		t.Errorf("after a post: %v", m)
	}
}

// Close says goodbye with 1001 to every live socket.
func TestCloseEndsLiveSockets(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(f.api)
	t.Cleanup(srv.Close)
	conn := dial(t, srv, `{}`)
	next(t, conn)
	if err := f.dash.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, _, err := conn.ReadMessage(); err != nil {
			if !websocket.IsCloseError(err, websocket.CloseGoingAway) {
				t.Errorf("after Close: %v, want close 1001", err)
			}
			return
		}
	}
}

func TestPageAndAssets(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct{ path, typ, has string }{
		{"/_dash/", "text/html; charset=utf-8", `<script src="assets/app.js"`},
		{"/_dash/assets/app.js", "text/javascript; charset=utf-8", "sessionStorage"},
		{"/_dash/assets/app.css", "text/css; charset=utf-8", ".chart"},
	} {
		req := httptest.NewRequest("GET", "http://"+testHost+c.path, nil)
		rec := httptest.NewRecorder()
		f.api.ServeHTTP(rec, req)
		if rec.Code != 200 || rec.Header().Get("Content-Type") != c.typ || !strings.Contains(rec.Body.String(), c.has) {
			t.Errorf("%s: %d %q", c.path, rec.Code, rec.Header().Get("Content-Type"))
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s: Content-Security-Policy %q", c.path, csp)
		}
	}
	req := httptest.NewRequest("GET", "http://"+testHost+"/_dash", nil)
	rec := httptest.NewRecorder()
	f.api.ServeHTTP(rec, req)
	if rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/_dash/" {
		t.Errorf("/_dash: %d to %q, want a redirect to /_dash/", rec.Code, rec.Header().Get("Location"))
	}
	req = httptest.NewRequest("GET", "http://elsewhere.example.com/_dash/", nil)
	rec = httptest.NewRecorder()
	f.api.ServeHTTP(rec, req)
	if rec.Code != 404 || !strings.Contains(rec.Body.String(), "unknown_host") {
		t.Errorf("another host: %d %s", rec.Code, rec.Body)
	}
}

type nopSync struct{}

func (nopSync) Sync(ctx context.Context) error { return ctx.Err() }

// pauses keeps pauses in memory.
type pauses struct {
	mu sync.Mutex
	m  map[domain.QueueRef]bool
}

func (p *pauses) Paused(q domain.QueueRef) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[q]
}

func (p *pauses) SetPaused(_ context.Context, q domain.QueueRef, paused bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[domain.QueueRef]bool{}
	}
	p.m[q] = paused
	return nil
}

// gateSyncer is a Syncer whose flushes, once gated, say on entered that
// they began and wait for release. Ungated, it returns at once.
type gateSyncer struct {
	gated   chan struct{} // closed: gated
	entered chan struct{}
	release chan struct{}
}

func (g *gateSyncer) Sync(context.Context) error {
	select {
	case <-g.gated:
	default:
		return nil
	}
	g.entered <- struct{}{}
	<-g.release
	return nil
}

// A task's record on the dashboard is a read like GET /{queue}/{id}: it
// shows a change only once it is durable (ARCHITECTURE.md's invariant), or
// a manager could be shown a result that a power loss then takes away.
func TestATasksRecordIsShownOnlyOnceDurable(t *testing.T) {
	g := &gateSyncer{gated: make(chan struct{}), entered: make(chan struct{}, 1), release: make(chan struct{})}
	f := newFixtureWith(t, clock.System{}, g)
	task := f.post(t, "ops")
	close(g.gated)

	done := make(chan int, 1)
	go func() {
		req := httptest.NewRequest("GET", "http://"+testHost+"/_dash/api/queues/ops/tasks/"+task.ID, nil)
		req.Header.Set("Authorization", "Bearer "+aliceToken)
		rec := httptest.NewRecorder()
		f.api.ServeHTTP(rec, req)
		done <- rec.Code
	}()
	select {
	case <-g.entered:
	case code := <-done:
		t.Fatalf("the task's record answered %d without waiting for a flush", code)
	case <-time.After(10 * time.Second):
		t.Fatal("the task's record neither answered nor flushed")
	}
	g.release <- struct{}{}
	select {
	case code := <-done:
		if code != http.StatusOK {
			t.Errorf("the task's record: %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the task's record still waits after its flush")
	}
}
