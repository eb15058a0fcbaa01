// Package metrics exposes Taskhoster's Prometheus metrics: transitions by
// kind, tasks finished and failed (by error code) counted apart, dead
// letters, give-backs, cancels and retries, refused results, re-queues by
// cause, request latency by route and status, and, read at scrape time:
// queue depths by state from the repository's index (finished and failed
// apart), the age of each queue's oldest claimable task, worker sockets and
// waiting claims per queue and open sockets per host beside the limits that
// refuse them with 503 (--max-sockets, --max-waiting), and the queues served
// from a stale file (SPEC §12).
package metrics

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// Metrics records and serves the metrics. It implements app.Observer.
type Metrics struct {
	registry *prometheus.Registry
	posts    *prometheus.CounterVec
	claims   *prometheus.CounterVec
	results  *prometheus.CounterVec
	requeues *prometheus.CounterVec
	timeouts *prometheus.CounterVec
	finished *prometheus.CounterVec
	failures *prometheus.CounterVec
	dead     *prometheus.CounterVec
	releases *prometheus.CounterVec
	cancels  *prometheus.CounterVec
	retries  *prometheus.CounterVec
	events   *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	flushes  prometheus.Histogram
	batches  prometheus.Histogram
	failed   prometheus.Counter
	live     *liveCollector
}

// Depths reports queue depths; the repository and the config together do.
type Depths interface {
	Queues() []*domain.Queue
	Counts(q domain.QueueRef) ports.Counts
}

// Sockets counts the open sockets; wsapi.Sockets does.
type Sockets interface {
	Workers(q domain.QueueRef) int // worker sockets of q connected
	Open(host string) int          // sockets (worker and watch) of host open
}

// Waiting counts the claims waiting for work on a queue; notify.Hub does.
type Waiting interface {
	Waiting(q domain.QueueRef) int
}

// Sources are what the metrics read when scraped. Depths is required; a
// nil Clock is the system's; a nil Waiting reports no waiting claims. The
// limits are reported as they are given (0: not reported).
type Sources struct {
	Depths  Depths
	Clock   ports.Clock // judges the age of the oldest claimable task
	Waiting Waiting
	// MaxSocketsPerHost and MaxWaiting are the limits past which a socket
	// or a waiting claim is refused with 503 (--max-sockets, --max-waiting).
	MaxSocketsPerHost, MaxWaiting int
}

// New registers every metric on a fresh registry. The sockets are counted
// once CountSockets is given them.
func New(src Sources) *Metrics {
	depths := src.Depths
	reg := prometheus.NewRegistry()
	queue := []string{"host", "queue"}
	m := &Metrics{
		registry: reg,
		posts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskhoster_posts_total", Help: "Tasks posted.",
		}, queue),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskhoster_claims_total", Help: "Tasks handed to workers.",
		}, queue),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskhoster_results_total", Help: "Results by outcome (accepted or refused).",
		}, append(queue, "outcome")),
		requeues: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskhoster_requeues_total", Help: "Tasks put back to pending, by cause (lease, socket).",
		}, append(queue, "cause")),
		timeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskhoster_timeouts_total", Help: "Tasks failed by the queue timeout.",
		}, queue),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskhoster_tasks_finished_total", Help: "Tasks that ended finished (an accepted result).",
		}, queue),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskhoster_tasks_failed_total",
			Help: "Tasks that ended failed, by error (timeout, attempts, failed, corrupt, ...).",
		}, append(queue, "error")),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskhoster_attempts_exhausted_total",
			Help: "Dead letters: tasks failed with error attempts, by how they came back the last time (lease, socket, release).",
		}, append(queue, "cause")),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskhoster_releases_total",
			Help: "Tasks given back by their worker, including those that became dead letters by it.",
		}, queue),
		cancels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskhoster_tasks_cancelled_total",
			Help: "Tasks cancelled by a user (also counted in taskhoster_tasks_failed_total with error cancelled).",
		}, queue),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskhoster_tasks_retried_total", Help: "Failed tasks put back to pending by a user.",
		}, queue),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskhoster_events_total", Help: "Transitions written to the event log, by event.",
		}, []string{"event"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "taskhoster_request_duration_seconds",
			Help:    "HTTP request latency by route, method and status.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30, 60},
		}, []string{"route", "method", "code"}),
		flushes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "taskhoster_flush_duration_seconds",
			Help:    "How long each group commit of the journal took.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
		batches: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "taskhoster_flush_callers",
			Help:    "Writes made durable together by each group commit.",
			Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskhoster_flush_failures_total", Help: "Flushes that failed (the disc refused them).",
		}),
	}
	m.live = newLiveCollector(src)
	reg.MustRegister(m.posts, m.claims, m.results, m.requeues, m.timeouts,
		m.finished, m.failures, m.dead, m.releases, m.cancels, m.retries,
		m.events, m.latency, m.flushes, m.batches, m.failed,
		newDepthCollector(depths), newStaleCollector(depths), m.live,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Observe counts a transition.
func (m *Metrics) Observe(ev domain.Event) {
	host, queue := ev.Task.Host, ev.Task.Queue
	m.events.WithLabelValues(string(ev.Kind)).Inc()
	switch ev.Kind {
	case domain.EventPosted:
		m.posts.WithLabelValues(host, queue).Inc()
	case domain.EventClaimed:
		m.claims.WithLabelValues(host, queue).Inc()
	case domain.EventResult:
		m.results.WithLabelValues(host, queue, "accepted").Inc()
		m.finished.WithLabelValues(host, queue).Inc()
	case domain.EventRequeue:
		m.requeues.WithLabelValues(host, queue, ev.Cause).Inc()
	case domain.EventReleased:
		m.releases.WithLabelValues(host, queue).Inc()
	case domain.EventTimeout:
		m.timeouts.WithLabelValues(host, queue).Inc()
		m.failures.WithLabelValues(host, queue, domain.TimeoutError).Inc()
	case domain.EventFailed:
		m.observeFailed(ev)
	case domain.EventCancelled:
		// A cancelled task ends failed with error "cancelled": it counts
		// among the failures by error as the others do.
		m.cancels.WithLabelValues(host, queue).Inc()
		m.failures.WithLabelValues(host, queue, domain.CancelledError).Inc()
	case domain.EventRetried:
		m.retries.WithLabelValues(host, queue).Inc()
	}
}

// observeFailed counts a failed event: a worker's failure, a dead letter, a
// corrupt file. A dead letter came back one last time by a lapsed lease or
// a closed socket (its cause), or else by its worker's give-back, which
// counts as a give-back too.
func (m *Metrics) observeFailed(ev domain.Event) {
	host, queue := ev.Task.Host, ev.Task.Queue
	code := "unknown"
	if ev.Task.Error != nil {
		code = *ev.Task.Error
	}
	m.failures.WithLabelValues(host, queue, code).Inc()
	if code != domain.AttemptsError {
		return
	}
	cause := ev.Cause
	if cause == "" {
		cause = "release"
		m.releases.WithLabelValues(host, queue).Inc()
	}
	m.dead.WithLabelValues(host, queue, cause).Inc()
}

// Flushed records one group-commit flush: how long it took, how many
// writes it made durable together, whether it failed.
func (m *Metrics) Flushed(d time.Duration, callers int, err error) {
	m.flushes.Observe(d.Seconds())
	m.batches.Observe(float64(callers))
	if err != nil {
		m.failed.Inc()
	}
}

// ResultRefused counts a result that came after the task was terminal.
func (m *Metrics) ResultRefused(q domain.QueueRef) {
	m.results.WithLabelValues(q.Host, q.Queue, "refused").Inc()
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// Middleware records each request's latency under its route pattern (not
// its path, which would make a series per task id) and its status. A
// WebSocket's status is 101 once upgraded: the upgrade writes it on the
// hijacked connection, where the wrapped writer never sees it. Its latency
// is then the socket's whole life.
func (m *Metrics) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := &statusWriter{WrapResponseWriter: middleware.NewWrapResponseWriter(w, r.ProtoMajor)}
		next.ServeHTTP(ww, r)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		m.latency.WithLabelValues(route, methodLabel(r.Method), strconv.Itoa(ww.status())).Observe(time.Since(start).Seconds())
	})
}

// methodLabel is the method as a label: the standard methods by name, any
// other as "other". net/http accepts any token as a method, and a client
// needs no token to send one: a series per method it invents would grow
// the server's memory and every scrape without bound.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return method
	}
	return "other"
}

// statusWriter tells a hijacked connection (an upgraded WebSocket) from a
// handler that wrote nothing. Hijack and Flush are passed on, so the
// handlers below see a writer that can do what the server's can.
type statusWriter struct {
	middleware.WrapResponseWriter
	hijacked bool
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.WrapResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, fmt.Errorf("metrics: the response writer cannot be hijacked")
	}
	conn, rw, err := h.Hijack()
	if err == nil {
		w.hijacked = true
	}
	return conn, rw, err
}

func (w *statusWriter) Flush() {
	if f, ok := w.WrapResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// status is what the client was answered: 101 for a hijacked connection
// without a status written (gorilla writes its 101 on the connection), and
// 200 for a handler that wrote nothing, as net/http answers then.
func (w *statusWriter) status() int {
	switch s := w.Status(); {
	case s != 0:
		return s
	case w.hijacked:
		return http.StatusSwitchingProtocols
	}
	return http.StatusOK
}

// depthCollector reads queue depths from the index when scraped, so depth
// costs nothing between scrapes.
type depthCollector struct {
	d       Depths
	desc    *prometheus.Desc
	delayed *prometheus.Desc
}

func newDepthCollector(d Depths) depthCollector {
	return depthCollector{d: d,
		desc: prometheus.NewDesc("taskhoster_queue_tasks",
			"Tasks in a queue by state (pending, processing, finished, failed); the states add up to the queue's tasks.",
			[]string{"host", "queue", "state"}, nil),
		delayed: prometheus.NewDesc("taskhoster_queue_delayed_tasks",
			"Pending tasks not claimable yet (a delay, a notBefore or a retry backoff), of taskhoster_queue_tasks{state=\"pending\"}.",
			[]string{"host", "queue"}, nil),
	}
}

func (c depthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc; ch <- c.delayed }

func (c depthCollector) Collect(ch chan<- prometheus.Metric) {
	for _, q := range c.d.Queues() {
		n := c.d.Counts(q.Ref())
		for state, v := range map[string]int{
			"pending": n.Pending, "processing": n.Processing, "finished": n.Done - n.Failed, "failed": n.Failed,
		} {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(v), q.Host, q.Name, state)
		}
		ch <- prometheus.MustNewConstMetric(c.delayed, prometheus.GaugeValue, float64(n.Delayed), q.Host, q.Name)
	}
}

// staleCollector reads, when scraped, which served queues are kept at the
// last valid version of a file that is invalid now (domain.Queue.Problems,
// SPEC §12): 1 for those, 0 for the others, so an alert can fire on any 1.
type staleCollector struct {
	d    Depths
	desc *prometheus.Desc
}

func newStaleCollector(d Depths) staleCollector {
	return staleCollector{d: d, desc: prometheus.NewDesc("taskhoster_queue_file_stale",
		"1 when a queue is served from the last valid version of its file because the file is invalid now (see the server log or taskhoster check), else 0.",
		[]string{"host", "queue"}, nil)}
}

func (c staleCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c staleCollector) Collect(ch chan<- prometheus.Metric) {
	for _, q := range c.d.Queues() {
		v := 0.0
		if len(q.Problems) > 0 {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, q.Host, q.Name)
	}
}
