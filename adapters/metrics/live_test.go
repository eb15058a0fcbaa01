package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskhoster/taskhoster/adapters/clock"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// fakeQueues are two queues with fixed counts, sockets and waiting claims.
type fakeQueues struct{ counts map[string]ports.Counts }

func (f fakeQueues) Queues() []*domain.Queue {
	return []*domain.Queue{{Host: "a.example", Name: "resize"}, {Host: "b.example", Name: "idle"}}
}
func (f fakeQueues) Counts(q domain.QueueRef) ports.Counts { return f.counts[q.Queue] }

type fakeSockets struct{}

func (fakeSockets) Workers(q domain.QueueRef) int { return map[string]int{"resize": 3}[q.Queue] }
func (fakeSockets) Open(host string) int          { return map[string]int{"a.example": 5}[host] }

type fakeWaiting struct{}

func (fakeWaiting) Waiting(q domain.QueueRef) int { return map[string]int{"resize": 2}[q.Queue] }

var (
	_ Sockets = fakeSockets{}
	_ Waiting = fakeWaiting{}
)

// TestLiveGauges: depths by state with finished and failed apart, the age
// of the oldest claimable task by the clock, sockets and waiting claims,
// and the limits, as /metrics serves them.
func TestLiveGauges(t *testing.T) {
	now := time.Date(2026, 7, 26, 9, 0, 0, 0, time.UTC)
	fake := &clock.Fake{}
	fake.Set(now)
	q := fakeQueues{counts: map[string]ports.Counts{
		"resize": {Pending: 7, Delayed: 2, Processing: 3, Done: 5, Failed: 2, Oldest: now.Add(-90 * time.Second)},
	}}
	m := New(Sources{Depths: q, Clock: fake, Waiting: fakeWaiting{}, MaxSocketsPerHost: 1024, MaxWaiting: 50000})
	depths := `
# HELP taskhoster_queue_tasks Tasks in a queue by state (pending, processing, finished, failed); the states add up to the queue's tasks.
# TYPE taskhoster_queue_tasks gauge
taskhoster_queue_tasks{host="a.example",queue="resize",state="failed"} 2
taskhoster_queue_tasks{host="a.example",queue="resize",state="finished"} 3
taskhoster_queue_tasks{host="a.example",queue="resize",state="pending"} 7
taskhoster_queue_tasks{host="a.example",queue="resize",state="processing"} 3
taskhoster_queue_tasks{host="b.example",queue="idle",state="failed"} 0
taskhoster_queue_tasks{host="b.example",queue="idle",state="finished"} 0
taskhoster_queue_tasks{host="b.example",queue="idle",state="pending"} 0
taskhoster_queue_tasks{host="b.example",queue="idle",state="processing"} 0
# HELP taskhoster_queue_delayed_tasks Pending tasks not claimable yet (a delay, a notBefore or a retry backoff), of taskhoster_queue_tasks{state="pending"}.
# TYPE taskhoster_queue_delayed_tasks gauge
taskhoster_queue_delayed_tasks{host="a.example",queue="resize"} 2
taskhoster_queue_delayed_tasks{host="b.example",queue="idle"} 0
# HELP taskhoster_queue_oldest_age_seconds How long the queue's oldest claimable task has been claimable (0 when none is): whether workers keep up.
# TYPE taskhoster_queue_oldest_age_seconds gauge
taskhoster_queue_oldest_age_seconds{host="a.example",queue="resize"} 90
taskhoster_queue_oldest_age_seconds{host="b.example",queue="idle"} 0
# HELP taskhoster_queue_claims_waiting Claims waiting for a task of the queue, over HTTP and sockets (all of them, on all queues, count against --max-waiting).
# TYPE taskhoster_queue_claims_waiting gauge
taskhoster_queue_claims_waiting{host="a.example",queue="resize"} 2
taskhoster_queue_claims_waiting{host="b.example",queue="idle"} 0
# HELP taskhoster_max_sockets_per_host The sockets one host may have open (--max-sockets); past it a new one is refused with 503 too_many_sockets.
# TYPE taskhoster_max_sockets_per_host gauge
taskhoster_max_sockets_per_host 1024
# HELP taskhoster_max_claims_waiting The claims that may wait for work on this server, all hosts together (--max-waiting); past it a claim is refused with 503 too_many_waiting.
# TYPE taskhoster_max_claims_waiting gauge
taskhoster_max_claims_waiting 50000
`
	names := []string{"taskhoster_queue_tasks", "taskhoster_queue_delayed_tasks", "taskhoster_queue_oldest_age_seconds",
		"taskhoster_queue_claims_waiting", "taskhoster_max_sockets_per_host", "taskhoster_max_claims_waiting",
		"taskhoster_queue_worker_sockets", "taskhoster_host_sockets"}
	if err := testutil.GatherAndCompare(m.registry, strings.NewReader(depths), names...); err != nil {
		t.Error(err)
	}

	// The age follows the clock; the sockets appear once counted.
	fake.Advance(30 * time.Second)
	m.CountSockets(fakeSockets{})
	later := strings.Replace(depths, `queue="resize"} 90`, `queue="resize"} 120`, 1) + `
# HELP taskhoster_queue_worker_sockets Worker sockets connected to the queue.
# TYPE taskhoster_queue_worker_sockets gauge
taskhoster_queue_worker_sockets{host="a.example",queue="resize"} 3
taskhoster_queue_worker_sockets{host="b.example",queue="idle"} 0
# HELP taskhoster_host_sockets Sockets (worker and watch) of the host open (against --max-sockets).
# TYPE taskhoster_host_sockets gauge
taskhoster_host_sockets{host="a.example"} 5
taskhoster_host_sockets{host="b.example"} 0
`
	if err := testutil.GatherAndCompare(m.registry, strings.NewReader(later), names...); err != nil {
		t.Error(err)
	}
}

// TestSocketRoutesReportAStatus: an upgraded socket is counted with 101, a
// plain request to the same route with the status it was answered.
func TestSocketRoutesReportAStatus(t *testing.T) {
	m := New(Sources{Depths: noDepths{}})
	r := chi.NewRouter()
	r.Use(m.Middleware)
	upgrader := websocket.Upgrader{}
	r.Get("/{queue}/work", func(w http.ResponseWriter, r *http.Request) {
		if !websocket.IsWebSocketUpgrade(r) {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		c, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		_ = c.Close()
	})
	r.Get("/quiet", func(http.ResponseWriter, *http.Request) {})
	srv := httptest.NewServer(r)
	defer srv.Close()

	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/resize/work", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, _ = c.ReadMessage() // until the server closes it
	_ = c.Close()
	for _, path := range []string{"/resize/work", "/quiet"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// The socket's request is recorded when its handler returns, which may be
	// after the client saw the close: read until all three are in, boundedly.
	want := map[string]uint64{"/{queue}/work 101": 1, "/{queue}/work 400": 1, "/quiet 200": 1}
	var got map[string]uint64
	for try := 0; try < 200; try++ {
		got = requestsByRouteAndStatus(t, m)
		if cmp.Equal(want, got) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requests by route and status (-want +got):\n%s", diff)
	}
}

// requestsByRouteAndStatus counts the recorded requests by "route status".
func requestsByRouteAndStatus(t *testing.T, m *Metrics) map[string]uint64 {
	t.Helper()
	got := map[string]uint64{}
	families, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "taskhoster_request_duration_seconds" {
			continue
		}
		for _, s := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["route"]+" "+labels["code"]] += s.GetHistogram().GetSampleCount()
		}
	}
	return got
}
