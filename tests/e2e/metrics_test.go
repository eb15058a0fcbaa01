package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// TestMetricsShowWhatQueuesDo scrapes /metrics of the real server: depths
// with finished and failed apart, the age of the oldest claimable task,
// worker sockets, waiting claims and open sockets beside the limits that
// refuse them, and a status for the socket routes (101 once upgraded, the
// JSON error's status for a plain request).
func TestMetricsShowWhatQueuesDo(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t), "--max-sockets", "5", "--max-waiting", "7")
	done, failed := s.post("resize", aliceToken, `{"url":"a"}`), s.post("resize", aliceToken, `{"url":"b"}`)
	for _, id := range []string{done, failed} {
		if r := s.do("POST", "/resize/claim", boxToken, `{}`); r.Status != http.StatusOK || r.JSON(t)["id"] != id {
			t.Fatalf("claim: %d %s", r.Status, r.Body)
		}
	}
	s.do("POST", "/resize/"+done+"/result", boxToken, `{"result":{}}`)
	s.do("POST", "/resize/"+failed+"/fail", boxToken, `{"reason":"broken"}`)
	s.post("resize", aliceToken, `{"url":"c"}`) // left claimable: the queue's age

	// A worker socket whose claim waits (its query matches nothing), and a
	// plain request to the same route.
	k := s.dial("/resize/work?worker=w", boxToken)
	k.send(`{"type":"claim","ref":1,"query":{"required":["nothing"]}}`)
	plain := s.do("GET", "/resize/work", boxToken, "")
	if plain.Status != http.StatusBadRequest || plain.JSON(t)["error"] != "invalid_request" {
		t.Errorf("plain request to the worker socket: %d %s", plain.Status, plain.Body)
	}

	const q = `{host="task.example.com",queue="resize"}`
	var body string
	eventually(t, "the socket's claim to wait", func() bool {
		body = s.metrics()
		return metricValue(body, "taskhoster_queue_claims_waiting"+q) == 1
	})
	for name, want := range map[string]float64{
		`taskhoster_queue_tasks{host="task.example.com",queue="resize",state="finished"}`:          1,
		`taskhoster_queue_tasks{host="task.example.com",queue="resize",state="failed"}`:            1,
		`taskhoster_queue_tasks{host="task.example.com",queue="resize",state="pending"}`:           1,
		`taskhoster_queue_tasks{host="task.example.com",queue="resize",state="processing"}`:        0,
		`taskhoster_queue_delayed_tasks` + q:                                                       0,
		`taskhoster_queue_worker_sockets` + q:                                                      1,
		`taskhoster_queue_claims_waiting{host="task.example.com",queue="public"}`:                  0,
		`taskhoster_host_sockets{host="task.example.com"}`:                                         1,
		`taskhoster_max_sockets_per_host`:                                                          5,
		`taskhoster_max_claims_waiting`:                                                            7,
		`taskhoster_tasks_finished_total` + q:                                                      1,
		`taskhoster_tasks_failed_total{error="failed",host="task.example.com",queue="resize"}`:     1,
		`taskhoster_request_duration_seconds_count{code="400",method="GET",route="/{queue}/work"}`: 1,
	} {
		if got := metricValue(body, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// The claimable task has waited since it was posted; the public queue
	// has none.
	if age := metricValue(body, "taskhoster_queue_oldest_age_seconds"+q); age <= 0 {
		t.Errorf("oldest age of resize = %v, want more than 0", age)
	}
	if age := metricValue(body, `taskhoster_queue_oldest_age_seconds{host="task.example.com",queue="public"}`); age != 0 {
		t.Errorf("oldest age of the empty queue = %v, want 0", age)
	}

	// Once the socket closes, its request is counted with 101 and it is no
	// longer connected.
	_ = k.c.Close()
	eventually(t, "the closed socket to be counted", func() bool {
		return metricValue(s.metrics(), `taskhoster_request_duration_seconds_count{code="101",method="GET",route="/{queue}/work"}`) == 1
	})
	// The socket is counted out before its request is recorded, but one
	// scrape collects the gauges and the histogram at different moments
	// (the registry gathers its collectors concurrently), so the gauges are
	// read from a scrape that begins after the request was recorded.
	body = s.metrics()
	for _, name := range []string{"taskhoster_queue_worker_sockets" + q, "taskhoster_queue_claims_waiting" + q, `taskhoster_host_sockets{host="task.example.com"}`} {
		if got := metricValue(body, name); got != 0 {
			t.Errorf("after the socket closed, %s = %v", name, got)
		}
	}
	if strings.Contains(body, `code="0"`) {
		t.Errorf("a request counted without a status")
	}
}

// TestAdminServesProfiles takes a CPU profile and an execution trace from
// the admin listener, as an operator chasing a slow server would: both
// come back in the Go tools' formats (a gzipped profile, a trace headed
// "go 1.N trace").
func TestAdminServesProfiles(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	for path, prefix := range map[string]string{
		"/debug/pprof/trace?seconds=0.2": "go 1.",
		"/debug/pprof/profile?seconds=1": "\x1f\x8b", // gzip
	} {
		resp, err := http.Get(s.admin + path)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(body, prefix) {
			t.Errorf("GET %s: %d, %q…", path, resp.StatusCode, body[:min(len(body), 20)])
		}
	}
}

// metrics scrapes the server's /metrics.
func (s *server) metrics() string {
	s.t.Helper()
	resp, err := http.Get(s.admin + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	return readAll(s.t, resp)
}
