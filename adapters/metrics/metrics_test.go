package metrics

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

type noDepths struct{}

func (noDepths) Queues() []*domain.Queue             { return nil }
func (noDepths) Counts(domain.QueueRef) ports.Counts { return ports.Counts{} }

var _ Depths = noDepths{}

// TestFinishedAndFailedAreCountedApart walks tasks through every way to
// end (and to come back) and reads what /metrics serves.
func TestFinishedAndFailedAreCountedApart(t *testing.T) {
	now := time.Date(2026, 7, 26, 9, 0, 0, 0, time.UTC)
	m := New(Sources{Depths: noDepths{}})
	must := func(t2 domain.Task, ev domain.Event, err error) domain.Task {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		m.Observe(ev)
		return t2
	}
	twice := domain.Retry{Settings: domain.Settings{MaxAttempts: 2}}
	post := func(id string) domain.Task {
		task, ev := domain.Post(id, "task.example.com", "resize", json.RawMessage(`{}`), "", now)
		m.Observe(ev)
		return task
	}
	reason := json.RawMessage(`{"exitCode":3}`)

	// Finished after a give-back.
	a := post("0000000000000001")
	a = must(a.Claim("box-1", time.Minute, now))
	a = must(a.Release("box-1", 0, reason, twice, now))
	a = must(a.Claim("box-1", time.Minute, now))
	must(a.Finish("box-1", json.RawMessage(`1`), now))
	// Failed by its worker.
	b := post("0000000000000002")
	b = must(b.Claim("box-1", time.Minute, now))
	must(b.Fail("box-1", reason, now))
	// Dead letters: by a lapsed lease, and by a give-back.
	c := post("0000000000000003")
	c = must(c.Claim("box-1", time.Minute, now))
	c = must(c.Requeue(domain.CauseSocket, twice, now))
	c = must(c.Claim("box-1", time.Minute, now))
	must(c.Requeue(domain.CauseLease, twice, now))
	d := post("0000000000000004")
	d = must(d.Claim("box-1", time.Minute, now))
	d = must(d.Release("box-1", 0, nil, twice, now))
	d = must(d.Claim("box-1", time.Minute, now))
	must(d.Release("box-1", 0, reason, twice, now))
	// Timed out.
	must(post("0000000000000005").Timeout(now.Add(48 * time.Hour)))
	// Cancelled while processing, retried, cancelled again while pending.
	e := post("0000000000000006")
	e = must(e.Claim("box-1", time.Minute, now))
	e = must(e.Cancel(now))
	e = must(e.Retry(now))
	must(e.Cancel(now))

	want := `
# HELP taskhoster_attempts_exhausted_total Dead letters: tasks failed with error attempts, by how they came back the last time (lease, socket, release).
# TYPE taskhoster_attempts_exhausted_total counter
taskhoster_attempts_exhausted_total{cause="lease",host="task.example.com",queue="resize"} 1
taskhoster_attempts_exhausted_total{cause="release",host="task.example.com",queue="resize"} 1
# HELP taskhoster_releases_total Tasks given back by their worker, including those that became dead letters by it.
# TYPE taskhoster_releases_total counter
taskhoster_releases_total{host="task.example.com",queue="resize"} 3
# HELP taskhoster_requeues_total Tasks put back to pending, by cause (lease, socket).
# TYPE taskhoster_requeues_total counter
taskhoster_requeues_total{cause="socket",host="task.example.com",queue="resize"} 1
# HELP taskhoster_results_total Results by outcome (accepted or refused).
# TYPE taskhoster_results_total counter
taskhoster_results_total{host="task.example.com",outcome="accepted",queue="resize"} 1
# HELP taskhoster_tasks_cancelled_total Tasks cancelled by a user (also counted in taskhoster_tasks_failed_total with error cancelled).
# TYPE taskhoster_tasks_cancelled_total counter
taskhoster_tasks_cancelled_total{host="task.example.com",queue="resize"} 2
# HELP taskhoster_tasks_failed_total Tasks that ended failed, by error (timeout, attempts, failed, corrupt, ...).
# TYPE taskhoster_tasks_failed_total counter
taskhoster_tasks_failed_total{error="attempts",host="task.example.com",queue="resize"} 2
taskhoster_tasks_failed_total{error="cancelled",host="task.example.com",queue="resize"} 2
taskhoster_tasks_failed_total{error="failed",host="task.example.com",queue="resize"} 1
taskhoster_tasks_failed_total{error="timeout",host="task.example.com",queue="resize"} 1
# HELP taskhoster_tasks_finished_total Tasks that ended finished (an accepted result).
# TYPE taskhoster_tasks_finished_total counter
taskhoster_tasks_finished_total{host="task.example.com",queue="resize"} 1
# HELP taskhoster_tasks_retried_total Failed tasks put back to pending by a user.
# TYPE taskhoster_tasks_retried_total counter
taskhoster_tasks_retried_total{host="task.example.com",queue="resize"} 1
# HELP taskhoster_timeouts_total Tasks failed by the queue timeout.
# TYPE taskhoster_timeouts_total counter
taskhoster_timeouts_total{host="task.example.com",queue="resize"} 1
`
	names := []string{"taskhoster_attempts_exhausted_total", "taskhoster_releases_total",
		"taskhoster_requeues_total", "taskhoster_results_total", "taskhoster_tasks_cancelled_total",
		"taskhoster_tasks_failed_total", "taskhoster_tasks_finished_total", "taskhoster_tasks_retried_total",
		"taskhoster_timeouts_total"}
	if err := testutil.GatherAndCompare(m.registry, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	events := `
# HELP taskhoster_events_total Transitions written to the event log, by event.
# TYPE taskhoster_events_total counter
taskhoster_events_total{event="cancelled"} 2
taskhoster_events_total{event="claimed"} 8
taskhoster_events_total{event="failed"} 3
taskhoster_events_total{event="posted"} 6
taskhoster_events_total{event="released"} 2
taskhoster_events_total{event="requeue"} 1
taskhoster_events_total{event="result"} 1
taskhoster_events_total{event="retried"} 1
taskhoster_events_total{event="timeout"} 1
`
	if err := testutil.GatherAndCompare(m.registry, strings.NewReader(events), "taskhoster_events_total"); err != nil {
		t.Error(err)
	}
}

type someQueues []*domain.Queue

func (q someQueues) Queues() []*domain.Queue           { return q }
func (someQueues) Counts(domain.QueueRef) ports.Counts { return ports.Counts{} }

// TestStaleQueueFiles: a queue kept at the last valid version of its file
// (it has Problems) reads 1, the others 0, at every scrape.
func TestStaleQueueFiles(t *testing.T) {
	qs := someQueues{
		{Host: "task.example.com", Name: "resize"},
		{Host: "task.example.com", Name: "thumbnail",
			Problems: []string{"thumbnail.json: /settings/leaseSecond: unknown setting"}},
	}
	m := New(Sources{Depths: qs})
	want := `
# HELP taskhoster_queue_file_stale 1 when a queue is served from the last valid version of its file because the file is invalid now (see the server log or taskhoster check), else 0.
# TYPE taskhoster_queue_file_stale gauge
taskhoster_queue_file_stale{host="task.example.com",queue="resize"} 0
taskhoster_queue_file_stale{host="task.example.com",queue="thumbnail"} 1
`
	if err := testutil.GatherAndCompare(m.registry, strings.NewReader(want), "taskhoster_queue_file_stale"); err != nil {
		t.Error(err)
	}
	qs[1].Problems = nil // the file is valid again
	want = strings.Replace(want, `queue="thumbnail"} 1`, `queue="thumbnail"} 0`, 1)
	if err := testutil.GatherAndCompare(m.registry, strings.NewReader(want), "taskhoster_queue_file_stale"); err != nil {
		t.Error(err)
	}
}

// TestLatencyMethodsAreBounded: net/http takes any token as a method, and
// anyone can send one without a token; each new method must not make new
// series (unbounded memory and scrape size). Those the API serves keep
// their names, the rest count as one.
func TestLatencyMethodsAreBounded(t *testing.T) {
	m := New(Sources{Depths: noDepths{}})
	h := m.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusMethodNotAllowed)
	}))
	for i := range 50 {
		req := httptest.NewRequest("BOGUS"+strconv.Itoa(i), "/", nil)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(method, "/", nil))
	}
	methods := map[string]bool{}
	families, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "taskhoster_request_duration_seconds" {
			continue
		}
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				if l.GetName() == "method" {
					methods[l.GetValue()] = true
				}
			}
		}
	}
	want := map[string]bool{"GET": true, "POST": true, "DELETE": true, "other": true}
	if !maps.Equal(methods, want) {
		t.Errorf("method labels %v (%d), want %v", slices.Sorted(maps.Keys(methods)), len(methods), slices.Sorted(maps.Keys(want)))
	}
}
