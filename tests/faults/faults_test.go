// Package faults proves SPEC §5's promise, that a task is never lost and
// never finished twice, under crashes: it runs the real server under load
// from well- and ill-behaved clients, kills it with SIGKILL at random
// moments, restarts it on the same folders and port, and at the end checks
// what every client was told against the store on disc and the event log.
// A second queue runs SPEC §11 under the same kills (maxAttempts, a backoff,
// delayed and prioritised posts, give-backs and failures by workers), and
// the check adds: a task ends exactly once (finished, failed or timed out),
// no claim comes before the task's time, none past maxAttempts, and every
// priority drains. A third queue runs SPEC §12 (see ops_test.go): posts
// with an Idempotency-Key sent again when their answers were lost, batch
// posts, batch claims, and a manager that cancels tasks, retries the ones
// it cancelled and pauses the queue (across kills); the check adds that a
// key makes one task and every answer for it names that task, a batch's
// ids come in order and no task appears that nobody posted, a cancel
// holds unless retried and no result is accepted after it, the log's
// cancelled and retried lines agree with the clients and the store, and
// nothing is claimed while the queue is known to be paused.
//
// TestFaults runs FAULT_CYCLES kills (default 5, a few seconds, part of
// `make test`); `make faults` runs a long series. FAULT_SEED repeats a run's
// schedule of kills, when and of which kind. The clients draw their choices
// from math/rand/v2's shared source (safe for their many goroutines) and run
// at the scheduler's pace, so a seed narrows a failure down rather than
// replaying it exactly.
package faults

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The run's shape. Kills land between minRun and maxRun after the server
// listens. One kill in shutdownKillOdds comes during a clean shutdown
// instead (SIGTERM, then SIGKILL up to shutdownKillMax later, while sockets
// are being closed and their tasks re-queued). One cycle in startupKillOdds
// also kills a server in its start-up (while it recovers the folder), up to
// startupKillMax after it was spawned.
const (
	defaultCycles    = 5
	minRun           = 300 * time.Millisecond
	maxRun           = 1500 * time.Millisecond
	maxDowntime      = 300 * time.Millisecond
	startupKillOdds  = 6
	startupKillMax   = 150 * time.Millisecond
	shutdownKillOdds = 6
	shutdownKillMax  = 300 * time.Millisecond
	drainLimit       = 3 * time.Minute // generous: a long run leaves a backlog
	clientStopLimit  = time.Minute
	maxProblemLines  = 40
)

// TestFaults runs the clients against a server it crashes cycles times,
// then stops producing, restarts the server, lets the workers finish every
// task, stops it cleanly and checks what is left (see check).
func TestFaults(t *testing.T) {
	cycles, seed := config(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	f := newFolders(t)
	port := freePort(t)
	r := &runner{t: t, folders: f, port: port, errors: map[string]int{}}
	t.Cleanup(r.killCurrent)

	r.start()
	cl := startClients(newAPI(port))
	t.Cleanup(cl.abort)

	kills, startupKills, shutdownKills := 0, 0, 0
	for cycle := range cycles {
		time.Sleep(minRun + time.Duration(rng.Int64N(int64(maxRun-minRun))))
		k := r.killAtRandom(rng)
		kills, startupKills, shutdownKills = kills+k.kills, startupKills+k.startup, shutdownKills+k.shutdown
		if cycle < cycles-1 {
			r.start()
		}
	}

	// Stop producing while the server is down: a producer waiting to post
	// gives up (its post was never sent), so none is in flight from here on.
	if !cl.stopProducers(clientStopLimit) {
		t.Fatal("producers did not stop")
	}
	r.start()
	// The manager may have stopped with the ops queue paused: resume it,
	// as a recorded resume, so that the drain can finish.
	if !cl.manager.toggle(nil, opResume) {
		t.Fatal("could not resume the ops queue")
	}
	r.drain(newAPI(port), drainLimit)
	if !cl.stopWorkers(clientStopLimit) {
		t.Fatal("workers did not stop")
	}
	if err := r.current.stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	r.absorb(r.current)

	st, err := readStore(f.items)
	if err != nil {
		t.Fatal(err)
	}
	events, torn, err := readLog(f.logs)
	if err != nil {
		t.Fatal(err)
	}
	// The last server started after the last kill and stopped cleanly, so
	// its start-up repair has run: the log must lack no line at all.
	rep := check(cl.histories(), st, runQueues, events, torn, kills, r.mended, true)
	rep.Seed, rep.Cycles, rep.StartupKills, rep.ShutdownKills = seed, cycles, startupKills, shutdownKills
	t.Log(rep.Summary())
	r.logServerErrors()
	for i, p := range rep.Problems {
		if i == maxProblemLines {
			t.Errorf("... and %d more problems", len(rep.Problems)-i)
			break
		}
		t.Error(p)
	}
}

// config reads FAULT_CYCLES and FAULT_SEED.
func config(t *testing.T) (cycles int, seed uint64) {
	t.Helper()
	cycles = defaultCycles
	if v := os.Getenv("FAULT_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("FAULT_CYCLES=%q: want a positive number", v)
		}
		cycles = n
	}
	seed = uint64(time.Now().UnixNano())
	if v := os.Getenv("FAULT_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("FAULT_SEED=%q: want a number", v)
		}
		seed = n
	}
	return cycles, seed
}

// runner starts and kills the servers of one run, one at a time.
type runner struct {
	t       *testing.T
	folders folders
	port    int
	current *process

	errors map[string]int // error-level server log messages over the run
	mended []event        // event lines the servers' start-up repairs appended
	// clockBound is the widest error bound of the database's clock a
	// server of the run started on (PostgreSQL only).
	clockBound time.Duration
}

// start starts a server and waits until it listens.
func (r *runner) start() {
	r.t.Helper()
	p, err := start(r.folders, r.port)
	if err != nil {
		r.t.Fatal(err)
	}
	r.current = p
}

// kill crashes the running server. It must still be running: a server that
// exited by itself failed.
func (r *runner) kill() {
	r.t.Helper()
	if r.current.diedOnItsOwn() {
		r.t.Fatalf("server exited by itself (%v):\n%s", r.current.cmd.ProcessState, r.current.Tail())
	}
	r.current.kill()
	r.absorb(r.current)
}

// killDuringShutdown asks the running server to stop and kills it d later,
// most likely while it closes its sockets and re-queues their tasks. (If it
// stopped within d, the kill finds it gone; that is a clean stop.)
func (r *runner) killDuringShutdown(d time.Duration) {
	r.t.Helper()
	if r.current.diedOnItsOwn() {
		r.t.Fatalf("server exited by itself (%v):\n%s", r.current.cmd.ProcessState, r.current.Tail())
	}
	r.current.signalled = true
	_ = r.current.cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(d)
	r.current.kill()
	r.absorb(r.current)
}

// killDuringStartup spawns a server and kills it after d, most likely while
// it is still reading the folder. It reports whether the kill landed before
// the server listened.
func (r *runner) killDuringStartup(d time.Duration) bool {
	r.t.Helper()
	p, err := spawn(r.folders, r.port)
	if err != nil {
		r.t.Fatal(err)
	}
	time.Sleep(d)
	early := true
	select {
	case <-p.listening:
		early = false
	default:
	}
	p.kill()
	r.absorb(p)
	return early
}

// killCount is what one killAtRandom did.
type killCount struct{ kills, startup, shutdown int }

// killAtRandom kills the running server: with SIGKILL, or (one time in
// shutdownKillOdds) during a clean shutdown; one time in startupKillOdds it
// also kills the next start-up, while it recovers the folder. Then it
// waits a random downtime. The caller starts the server again.
func (r *runner) killAtRandom(rng *rand.Rand) killCount {
	var k killCount
	if rng.IntN(shutdownKillOdds) == 0 {
		r.killDuringShutdown(time.Duration(rng.Int64N(int64(shutdownKillMax))))
		k.shutdown++
	} else {
		r.kill()
	}
	k.kills++
	if rng.IntN(startupKillOdds) == 0 {
		if r.killDuringStartup(time.Duration(rng.Int64N(int64(startupKillMax)))) {
			k.startup++
		}
		k.kills++
	}
	time.Sleep(time.Duration(rng.Int64N(int64(maxDowntime))))
	return k
}

// absorb keeps what a finished server logged that matters: a panic or a
// data race fails the run at once; error lines are reported at the end.
func (r *runner) absorb(p *process) {
	r.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.trouble) > 0 {
		r.t.Fatalf("server log shows a bug: %v\n%s", p.trouble, strings.Join(p.tail, "\n"))
	}
	for msg, n := range p.errors {
		r.errors[msg] += n
	}
	r.mended = append(r.mended, p.mended...)
	r.clockBound = max(r.clockBound, p.clockBound)
}

// logServerErrors lists the error lines the servers logged, for the report.
func (r *runner) logServerErrors() {
	for _, msg := range slices.Sorted(maps.Keys(r.errors)) {
		r.t.Logf("server logged %d× error %q", r.errors[msg], msg)
	}
}

func (r *runner) killCurrent() {
	if r.current != nil {
		select {
		case <-r.current.exited:
		default:
			r.current.kill()
		}
	}
}

// drain waits until no task is pending or processing, with the workers
// still running and the producers stopped.
func (r *runner) drain(a *api, limit time.Duration) {
	r.t.Helper()
	deadline := time.After(limit)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := "no answer"
	for {
		left, answered := 0, 0
		var counts []string
		for _, name := range slices.Sorted(maps.Keys(runQueues)) {
			ans := a.do("GET", "/"+name, nil)
			var info struct {
				Counts struct{ Pending, Processing, Done int }
			}
			if ans.err == nil && ans.status == http.StatusOK && json.Unmarshal(ans.body, &info) == nil {
				answered++
				left += info.Counts.Pending + info.Counts.Processing
				counts = append(counts, fmt.Sprintf("%s %+v", name, info.Counts))
			}
		}
		if answered == len(runQueues) {
			if left == 0 {
				return
			}
			last = strings.Join(counts, ", ")
		}
		select {
		case <-deadline:
			r.t.Fatalf("tasks not drained within %v: %s", limit, last)
		case <-tick.C:
		}
	}
}

// clients are every producer and worker of a run.
type clients struct {
	hists                     []*history
	manager                   *manager
	producers, workers        sync.WaitGroup
	stopProducing, stopWork   chan struct{}
	stopProdOnce, stopWorkOne sync.Once
}

// startClients starts the run's clients. Each kind is there for a part of
// the lifecycle: producers post (and read back); steady HTTP and socket
// workers do most of the work; the stallers' late results race the sweep
// and each other (on the slow producer's items); a doubler's two results race each other; a dropper's socket
// dies under the tasks it holds. On the retry queue (SPEC §11) producers
// post delayed and prioritised tasks, and givers over HTTP and the socket
// also give tasks back and fail them. On the ops queue (SPEC §12) keyed and
// batch producers post, a manager cancels, retries and pauses, and HTTP
// workers (one claiming several at once) and a socket worker work.
//
// With several servers (apis, one per server) the clients are dealt out
// over them in turn, so that every kind of client runs on each when there
// are two.
func startClients(apis ...*api) *clients {
	c := &clients{stopProducing: make(chan struct{}), stopWork: make(chan struct{})}
	dealt := 0
	next := func() *api {
		a := apis[dealt%len(apis)]
		dealt++
		return a
	}
	add := func() *history {
		h := &history{}
		c.hists = append(c.hists, h)
		return h
	}
	for i := range 4 {
		p := &producer{name: fmt.Sprintf("prod-%d", i), queue: queue, api: next()}
		if i == 3 {
			p.name, p.slow = "slowprod-0", true
		}
		p.hist = add()
		c.producers.Go(func() { p.run(c.stopProducing) })
	}
	for i := range 2 {
		p := &producer{name: fmt.Sprintf("rprod-%d", i), queue: retryQueue, options: true, api: next()}
		p.hist = add()
		c.producers.Go(func() { p.run(c.stopProducing) })
	}
	// Keyed posts and cancels (a DELETE) go over connections of their own:
	// see unreused.
	c.manager = &manager{name: "manager-0", api: next().unreused()}
	for i := range 2 {
		p := &keyProducer{name: fmt.Sprintf("kprod-%d", i), api: next().unreused(), hist: add()}
		c.manager.from = append(c.manager.from, p.hist)
		c.producers.Go(func() { p.run(c.stopProducing) })
	}
	bp := &batchProducer{name: "bprod-0", api: next(), hist: add()}
	c.manager.from = append(c.manager.from, bp.hist)
	c.producers.Go(func() { bp.run(c.stopProducing) })
	c.manager.hist = add()
	httpWorkers := []struct {
		name, queue string
		mode        workerMode
	}{
		{"http-0", queue, steady}, {"http-1", queue, steady}, {"stall-0", queue, staller}, {"stall-1", queue, staller},
		{"double-0", queue, doubler}, {"give-0", retryQueue, giver}, {"give-1", retryQueue, giver},
		{"ohttp-0", opsQueue, steady}, {"ohold-0", opsQueue, holder}, {"omany-0", opsQueue, many},
	}
	for _, hw := range httpWorkers {
		w := &httpWorker{name: hw.name, queue: hw.queue, mode: hw.mode, api: next()}
		w.hist = add()
		if hw.queue == opsQueue {
			c.manager.held = append(c.manager.held, w.hist)
		}
		c.workers.Go(func() { w.run(c.stopWork) })
	}
	sockWorkers := []struct {
		name, queue string
		claims      int
		drop, giver bool
	}{
		{"sock-0", queue, 4, false, false}, {"sock-1", queue, 4, false, false}, {"drop-0", queue, 3, true, false},
		{"rsock-0", retryQueue, 3, false, true}, {"rdrop-0", retryQueue, 2, true, true},
		{"osock-0", opsQueue, 3, false, false},
	}
	for _, sw := range sockWorkers {
		w := &sockWorker{name: sw.name, queue: sw.queue, claims: sw.claims, drop: sw.drop, giver: sw.giver, api: next()}
		w.hist = add()
		c.workers.Go(func() { w.run(c.stopWork) })
	}
	// Last: it reads the workers' histories.
	c.producers.Go(func() { c.manager.run(c.stopProducing) })
	return c
}

func (c *clients) stopProducers(limit time.Duration) bool {
	c.stopProdOnce.Do(func() { close(c.stopProducing) })
	return waitGroup(&c.producers, limit)
}

func (c *clients) stopWorkers(limit time.Duration) bool {
	c.stopWorkOne.Do(func() { close(c.stopWork) })
	return waitGroup(&c.workers, limit)
}

// abort stops every client, for a run that failed half-way.
func (c *clients) abort() {
	c.stopProdOnce.Do(func() { close(c.stopProducing) })
	c.stopWorkOne.Do(func() { close(c.stopWork) })
}

func (c *clients) histories() histories { return merge(c.hists) }

// waitGroup waits for wg, up to limit.
func waitGroup(wg *sync.WaitGroup, limit time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(limit):
		return false
	}
}
