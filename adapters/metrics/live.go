package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskhoster/taskhoster/ports"
)

// liveCollector reads, when scraped, what a queue is doing now: how long
// its oldest claimable task has waited, and the worker sockets and claims
// waiting on it; and per host the open sockets. Beside the limits, these
// show the 503s of --max-sockets and --max-waiting coming.
type liveCollector struct {
	src     Sources
	sockets atomic.Pointer[Sockets] // set once the sockets exist (CountSockets)

	age, workers, waiting, open, maxSockets, maxWaiting *prometheus.Desc
}

func newLiveCollector(src Sources) *liveCollector {
	queue := []string{"host", "queue"}
	return &liveCollector{src: src,
		age: prometheus.NewDesc("taskhoster_queue_oldest_age_seconds",
			"How long the queue's oldest claimable task has been claimable (0 when none is): whether workers keep up.", queue, nil),
		workers: prometheus.NewDesc("taskhoster_queue_worker_sockets",
			"Worker sockets connected to the queue.", queue, nil),
		waiting: prometheus.NewDesc("taskhoster_queue_claims_waiting",
			"Claims waiting for a task of the queue, over HTTP and sockets (all of them, on all queues, count against --max-waiting).", queue, nil),
		open: prometheus.NewDesc("taskhoster_host_sockets",
			"Sockets (worker and watch) of the host open (against --max-sockets).", []string{"host"}, nil),
		maxSockets: prometheus.NewDesc("taskhoster_max_sockets_per_host",
			"The sockets one host may have open (--max-sockets); past it a new one is refused with 503 too_many_sockets.", nil, nil),
		maxWaiting: prometheus.NewDesc("taskhoster_max_claims_waiting",
			"The claims that may wait for work on this server, all hosts together (--max-waiting); past it a claim is refused with 503 too_many_waiting.", nil, nil),
	}
}

// CountSockets makes the metrics report the sockets of s. It is given them
// after New because the sockets are built on the use cases, which report to
// the metrics.
func (m *Metrics) CountSockets(s Sockets) { m.live.sockets.Store(&s) }

func (c *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.age, c.workers, c.waiting, c.open, c.maxSockets, c.maxWaiting} {
		ch <- d
	}
}

func (c *liveCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.now()
	var sockets Sockets
	if p := c.sockets.Load(); p != nil {
		sockets = *p
	}
	hosts := make(map[string]bool)
	for _, q := range c.src.Depths.Queues() {
		ref := q.Ref()
		hosts[q.Host] = true
		gauge(ch, c.age, age(c.src.Depths.Counts(ref), now), q.Host, q.Name)
		if sockets != nil {
			gauge(ch, c.workers, float64(sockets.Workers(ref)), q.Host, q.Name)
		}
		if c.src.Waiting != nil {
			gauge(ch, c.waiting, float64(c.src.Waiting.Waiting(ref)), q.Host, q.Name)
		}
	}
	if sockets != nil {
		for host := range hosts {
			gauge(ch, c.open, float64(sockets.Open(host)), host)
		}
	}
	if c.src.MaxSocketsPerHost > 0 {
		gauge(ch, c.maxSockets, float64(c.src.MaxSocketsPerHost))
	}
	if c.src.MaxWaiting > 0 {
		gauge(ch, c.maxWaiting, float64(c.src.MaxWaiting))
	}
}

func (c *liveCollector) now() time.Time {
	if c.src.Clock == nil {
		return time.Now()
	}
	return c.src.Clock.Now()
}

// age is how long the oldest claimable task of n has been claimable, in
// seconds: 0 when none is (or its time is still ahead, by a clock step).
func age(n ports.Counts, now time.Time) float64 {
	if n.Oldest.IsZero() || !now.After(n.Oldest) {
		return 0
	}
	return now.Sub(n.Oldest).Seconds()
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}
