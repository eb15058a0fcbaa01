package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// A database restart mid-run loses nothing acknowledged (issue 14): two
// servers on a cluster of the test's own, clients posting and working on
// both, and PostgreSQL stopped twice under them, once with a fast
// shutdown and once with SIGKILL to every one of its processes (a crash,
// recovered from the WAL). During each outage requests answer 503 with a
// code; after it the servers carry on by themselves, not restarted; at the
// end every post answered 201 exists and every result answered
// accepted:true is stored as finished with that result.
func TestPostgresRestartLosesNothingAcknowledged(t *testing.T) {
	bin, ok := pgtest.BinDir()
	if !ok {
		t.Skip(pgtest.NotInstalled)
	}
	cluster, err := pgtest.Start(bin) // its own: the shared cluster serves other tests
	if err != nil {
		t.Fatalf("start PostgreSQL: %v", err)
	}
	t.Cleanup(cluster.Stop)
	url := cluster.URL("postgres")
	a := start(t, newDirs(t), "--store", "postgres", "--database-url", url)
	b := start(t, newDirs(t), "--store", "postgres", "--database-url", url)

	l := &restartLoad{posted: map[string]bool{}, accepted: map[string]string{}, codes: map[string]int{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range []*server{a, b, a, b} {
		wg.Go(func() { l.post(s, i, stop) })
		wg.Go(func() { l.work(s, fmt.Sprintf("box-%d", i), stop) })
	}

	// Before, between and after the outages the clients get acknowledgements.
	progress := func(what string) {
		t.Helper()
		before := l.acks.Load()
		eventually(t, what, func() bool { return l.acks.Load() >= before+20 })
	}
	progress("acknowledgements before the outages")
	outage := func(name string, down func() error) {
		t.Helper()
		if err := down(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, cluster.Log())
		}
		before := l.unavailable.Load()
		eventually(t, "a 503 during the "+name, func() bool { return l.unavailable.Load() > before })
		time.Sleep(500 * time.Millisecond) // the outage lasts a little
		if err := cluster.Resume(); err != nil {
			t.Fatalf("resume after the %s: %v", name, err)
		}
		progress("acknowledgements after the " + name)
	}
	outage("fast shutdown", cluster.Halt)
	outage("crash", cluster.Crash)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()

	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("%d posts acknowledged, %d results accepted, 5xx answers by code: %v", len(l.posted), len(l.accepted), l.codes)
	for _, p := range l.problems {
		t.Error(p)
	}
	if l.codes["503 storage_unavailable"] == 0 {
		t.Error("no request answered 503 storage_unavailable during the outages")
	}
	for code := range l.codes {
		if code != "503 storage_unavailable" {
			t.Errorf("answers %s during the outages: want 503 storage_unavailable only", code)
		}
	}

	// Every acknowledged post exists; every accepted result is stored, as
	// the first and only result of a finished task. Asked of both servers.
	n := 0
	for id := range l.posted {
		s := []*server{a, b}[n%2]
		n++
		r := s.do("GET", "/resize/"+id, aliceToken, "")
		if r.Status != http.StatusOK {
			t.Errorf("task %s, posted with 201: GET answers %d %s", id, r.Status, r.Body)
			continue
		}
		want, ok := l.accepted[id]
		if !ok {
			continue
		}
		view := r.JSON(t)
		if view["status"] != "finished" || !cmp.Equal(view["result"], map[string]any{"by": want}) {
			t.Errorf("task %s, result by %s accepted: stored as %s %v", id, want, view["status"], view["result"])
		}
	}
	for id := range l.accepted {
		if !l.posted[id] {
			t.Errorf("task %s: a result accepted for a task whose post was not acknowledged", id)
		}
	}

	// The notifier reconnected too: a post on A wakes a claim waiting on B.
	claimed := make(chan response, 1)
	go func() { claimed <- b.do("POST", "/resize/claim", boxToken, `{"worker":"box-late","wait":10}`) }()
	time.Sleep(300 * time.Millisecond)
	id := a.post("resize", aliceToken, `{"url":"https://ex.com/late.png"}`)
	select {
	case r := <-claimed:
		if r.Status != http.StatusOK || r.JSON(t)["id"] == nil {
			t.Errorf("claim on B after the restarts: %d %s", r.Status, r.Body)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("a claim waiting on B was not woken within 5 s by post %s on A after the database restarts", id)
	}
}

// restartLoad is what the clients of the restart test were told.
type restartLoad struct {
	acks, unavailable atomic.Int64

	mu       sync.Mutex
	posted   map[string]bool   // ids answered 201
	accepted map[string]string // id → worker whose result was accepted
	codes    map[string]int    // "status code" of 5xx answers → how many
	problems []string
}

var restartClient = &http.Client{Timeout: 15 * time.Second}

// call sends one request; a 5xx is counted (and must carry a JSON code).
func (l *restartLoad) call(s *server, method, path, token, body string) (int, map[string]any) {
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Host = host
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := restartClient.Do(req)
	if err != nil {
		l.problem("%s %s: %v (the servers never stop)", method, path, err)
		return 0, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	if resp.StatusCode >= 500 {
		code, _ := m["error"].(string)
		if code == "" {
			l.problem("%s %s: %d without a JSON code: %q", method, path, resp.StatusCode, data)
		}
		if resp.StatusCode == http.StatusServiceUnavailable && code == "storage_unavailable" {
			l.unavailable.Add(1)
		}
		l.mu.Lock()
		l.codes[fmt.Sprintf("%d %s", resp.StatusCode, code)]++
		l.mu.Unlock()
	}
	return resp.StatusCode, m
}

func (l *restartLoad) problem(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.problems = append(l.problems, fmt.Sprintf(format, args...))
}

// post posts tasks to s until stop, pausing a little after a refusal.
func (l *restartLoad) post(s *server, client int, stop chan struct{}) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		status, m := l.call(s, "POST", "/resize", aliceToken, fmt.Sprintf(`{"url":"https://ex.com/%d-%d.png"}`, client, n))
		switch id, _ := m["id"].(string); {
		case status == http.StatusCreated && id != "":
			l.mu.Lock()
			l.posted[id] = true
			l.mu.Unlock()
			l.acks.Add(1)
		case status >= 500 || status == 0:
			time.Sleep(50 * time.Millisecond)
		default:
			l.problem("post: %d %v", status, m)
			return
		}
	}
}

// work claims tasks on s and posts results until stop; a result refused
// with a 5xx is tried again while the lease (60 s) lasts.
func (l *restartLoad) work(s *server, worker string, stop chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		status, m := l.call(s, "POST", "/resize/claim", boxToken, `{"worker":"`+worker+`","wait":1}`)
		id, _ := m["id"].(string)
		switch {
		case status == http.StatusNoContent:
			continue
		case status == http.StatusOK && id != "":
		case status >= 500 || status == 0:
			time.Sleep(50 * time.Millisecond)
			continue
		default:
			l.problem("claim: %d %v", status, m)
			return
		}
		attempt, _ := m["attempts"].(float64)
		body := fmt.Sprintf(`{"worker":%q,"attempt":%d,"result":{"by":%q}}`, worker, int(attempt), worker)
		for try := 0; ; try++ {
			status, m := l.call(s, "POST", "/resize/"+id+"/result", boxToken, body)
			if status == http.StatusOK {
				if m["accepted"] == true {
					l.mu.Lock()
					l.accepted[id] = worker
					l.mu.Unlock()
					l.acks.Add(1)
				}
				break
			}
			if status == http.StatusConflict && try > 0 {
				break // an earlier try, answered 5xx, may have landed
			}
			if status < 500 && status != 0 {
				l.problem("result of %s: %d %v", id, status, m)
				return
			}
			if try > 200 {
				return // gave up; the task is not counted as finished
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
