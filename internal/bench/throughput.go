package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Load is one throughput workload: P producers post N tasks of about
// ItemBytes while W workers finish them, each worker keeping K tasks in
// flight (K open claims on one socket, or K HTTP long-poll loops).
type Load struct {
	N, P, W, K int
	ItemBytes  int
	// Batch, if above 1, has each producer post that many tasks per
	// request (POST /{queue}/batch; River's InsertMany in its peer).
	Batch int
	// Timeout bounds the run; a run that has not finished by then fails.
	Timeout time.Duration
}

// Transports a Taskhoster worker can use.
const (
	Socket = "socket"
	HTTP   = "http"
)

// produce runs the producers: each takes the next sequence number, posts
// its task with post and records the id. It returns when every task is
// posted or the run stopped.
func produce(ctx context.Context, l *ledger, ld Load, post func(ctx context.Context, seq int, item []byte) (string, error)) {
	produceBatches(ctx, l, ld, 1, single(post))
}

// produceBatches runs the producers: each takes the next size sequence
// numbers (fewer at the end), posts their tasks in one request with post
// and records the ids, which must come back one per item, in order.
func produceBatches(ctx context.Context, l *ledger, ld Load, size int, post batchPost) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range ld.P {
		wg.Go(func() {
			for !l.stopped() {
				first := int(next.Add(int64(size))) - size
				if first >= ld.N {
					return
				}
				last := min(first+size, ld.N)
				items := make([][]byte, 0, last-first)
				for seq := first; seq < last; seq++ {
					items = append(items, item(seq, "work", ld.ItemBytes))
				}
				start := l.now()
				for seq := first; seq < last; seq++ {
					l.postStart[seq].Store(start)
				}
				ids, err := post(ctx, first, items)
				end := l.now()
				if err == nil && len(ids) != len(items) {
					err = fmt.Errorf("%d ids for %d items", len(ids), len(items))
				}
				if err != nil {
					what := fmt.Sprintf("task %d", first)
					if size > 1 {
						what = fmt.Sprintf("tasks %d to %d", first, last-1)
					}
					l.fail(fmt.Errorf("post %s: %w", what, err))
					return
				}
				for i, id := range ids {
					l.postEnd[first+i].Store(end)
					l.ids[first+i] = id
				}
			}
		})
	}
	wg.Wait()
}

// batchPost posts items, the tasks first, first+1, ..., in one request and
// returns their ids in order.
type batchPost func(ctx context.Context, first int, items [][]byte) ([]string, error)

// single is post as a batchPost: one request per item, in turn (for a
// peer without batch posts).
func single(post func(ctx context.Context, seq int, item []byte) (string, error)) batchPost {
	return func(ctx context.Context, first int, items [][]byte) ([]string, error) {
		ids := make([]string, 0, len(items))
		for i, it := range items {
			id, err := post(ctx, first+i, it)
			if err != nil {
				return ids, err
			}
			ids = append(ids, id)
		}
		return ids, nil
	}
}

// runLoad starts the workers (each a function returning when the run
// stops), then the producers, and waits for the run to finish or time out.
// The producers post ld.Batch tasks per call of post (at least one).
func runLoad(ctx context.Context, ld Load, l *ledger, workers []func(context.Context), post batchPost) (LoadRun, error) {
	ctx, cancel := context.WithTimeout(ctx, ld.Timeout)
	defer cancel()
	go func() {
		select {
		case <-ctx.Done():
			l.fail(fmt.Errorf("run not finished after %s: %d of %d tasks done", ld.Timeout, l.completed.Load(), ld.N))
		case <-l.done:
		}
	}()
	machine, _ := readMachineTimes()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() { w(ctx) })
	}
	produceBatches(ctx, l, ld, max(ld.Batch, 1), post)
	<-l.done
	idle, kthreads := machine.since()
	cancel()
	wg.Wait()
	r, err := l.verify()
	r.Idle, r.KernelThreads = idle, kthreads
	return r, err
}

// Throughput runs ld against t with workers over transport, and checks
// that every task was finished exactly once as far as the clients saw.
// It returns the ids posted, for checking the server's event log.
func Throughput(ctx context.Context, t Target, transport string, ld Load) (LoadRun, []string, error) {
	return ThroughputOn(ctx, []Target{t}, transport, ld)
}

// ThroughputOn is Throughput against several servers of one queue (on one
// database): worker w talks to ts[w % len(ts)], and the producers post
// task seq (or the batch that starts with it) to ts[seq % len(ts)].
func ThroughputOn(ctx context.Context, ts []Target, transport string, ld Load) (LoadRun, []string, error) {
	apis := make([]*api, len(ts))
	for i, t := range ts {
		apis[i] = newAPI(t)
		defer apis[i].close()
	}
	l := newLedger(ld.N)
	var workers []func(context.Context)
	for w := range ld.W {
		name := fmt.Sprintf("w%d", w)
		a := apis[w%len(apis)]
		switch transport {
		case Socket:
			workers = append(workers, func(ctx context.Context) { socketWorker(ctx, a, name, ld.K, l) })
		case HTTP:
			for k := range ld.K {
				name := fmt.Sprintf("%s-%d", name, k)
				workers = append(workers, func(ctx context.Context) { httpWorker(ctx, a, name, l) })
			}
		default:
			return LoadRun{}, nil, fmt.Errorf("unknown transport %q", transport)
		}
	}
	post := func(ctx context.Context, first int, items [][]byte) ([]string, error) {
		a := apis[first/max(ld.Batch, 1)%len(apis)]
		if len(items) == 1 {
			id, err := a.post(ctx, items[0])
			return []string{id}, err
		}
		return a.postBatch(ctx, items)
	}
	r, err := runLoad(ctx, ld, l, workers, post)
	return r, l.ids, err
}

// resultsInFlight bounds the results a socket worker keeps waiting for
// their acks (at least its k claims). A result is durable only once it is
// acked, so a worker that works its next task without waiting for the last
// result's flush keeps several waiting; the bound keeps them far below what
// the server applies at once on one socket (wsapi's maxReports, 256), so
// the server never stops reading the socket for them.
const resultsInFlight = 64

// socketWorker keeps k claims open on one socket, and up to
// max(k, resultsInFlight) results waiting for their acks: each task it is
// handed is answered with a result at once, and the next claim goes out
// right behind the result, without waiting for the result's ack (the
// server's flush), as client.Worker does. A task that arrives while that
// many results wait is held until an ack frees a place, and is not claimed
// behind. It returns when the run stops.
func socketWorker(ctx context.Context, a *api, name string, k int, l *ledger) {
	limit := max(k, resultsInFlight)
	c, err := a.dial(ctx, name)
	if err != nil {
		l.fail(err)
		return
	}
	// Closing the socket ends the read loop; the server drops the claims
	// still open.
	go func() {
		select {
		case <-ctx.Done():
		case <-l.done:
		}
		_ = c.Close()
	}()
	ref := int64(0)
	// send writes msgs in one write: a result and the claim behind it
	// reach the server together.
	send := func(msgs ...[]byte) bool {
		if err := c.sendTogether(msgs...); err != nil {
			if !l.stopped() {
				l.fail(fmt.Errorf("worker %s: %w", name, err))
			}
			return false
		}
		return true
	}
	claim := func() bool {
		ref++
		return send(socketClaim(ref, nil))
	}
	for range k {
		if !claim() {
			return
		}
	}
	type held struct {
		seq int
		id  string
	}
	inFlight := map[int64]held{} // result ref → its task
	var waiting []held           // handed, its result not yet sent
	// handIn sends a result and claims the next task behind it.
	handIn := func(h held) bool {
		ref++
		inFlight[ref] = h
		result := socketResult(ref, h.id)
		ref++
		return send(result, socketClaim(ref, nil))
	}
	for {
		m, err := readMsg(c)
		if err != nil {
			if !l.stopped() {
				l.fail(fmt.Errorf("worker %s: %w", name, err))
			}
			return
		}
		switch m.Type {
		case "task":
			seq, ok := l.deliver(m.Item)
			if !ok {
				return
			}
			h := held{seq, m.ID}
			if len(inFlight) >= limit {
				waiting = append(waiting, h)
				continue
			}
			if !handIn(h) {
				return
			}
		case "ack":
			h, ok := inFlight[m.Ref]
			if !ok {
				l.fail(fmt.Errorf("worker %s: ack for unknown ref %d", name, m.Ref))
				return
			}
			delete(inFlight, m.Ref)
			if !m.Accepted {
				l.fail(fmt.Errorf("worker %s: result of task %d (%s) refused", name, h.seq, h.id))
				return
			}
			l.accept(h.seq, h.id)
			if len(waiting) > 0 {
				next := waiting[0]
				waiting = waiting[1:]
				if !handIn(next) {
					return
				}
			}
		default:
			l.fail(fmt.Errorf("worker %s: unexpected message %q", name, m.Type))
			return
		}
	}
}

// httpWorker claims over HTTP (long-poll, up to a second), hands in the
// result and claims again, until the run stops.
func httpWorker(ctx context.Context, a *api, name string, l *ledger) {
	for !l.stopped() {
		c, ok, err := a.claim(ctx, name, nil, time.Second)
		if err != nil {
			if !l.stopped() {
				l.fail(fmt.Errorf("worker %s: %w", name, err))
			}
			return
		}
		if !ok {
			continue
		}
		seq, ok := l.deliver(c.Item)
		if !ok {
			return
		}
		accepted, err := a.result(ctx, c.ID, name)
		if err != nil {
			if !l.stopped() {
				l.fail(fmt.Errorf("worker %s: %w", name, err))
			}
			return
		}
		if !accepted {
			l.fail(fmt.Errorf("worker %s: result of task %d (%s) refused", name, seq, c.ID))
			return
		}
		l.accept(seq, c.ID)
	}
}

// CountResults reads the event log under logs and counts the "result"
// events of queue's tasks: each of ids must have exactly one. With strict,
// no other task of the queue may have any (a queue the bench created holds
// only the run's tasks); an existing server's queue may hold older ones.
func CountResults(logs, queue string, ids []string, strict bool) error {
	want := make(map[string]int, len(ids))
	for _, id := range ids {
		want[id] = 0
	}
	files, err := filepath.Glob(filepath.Join(logs, "tasks", "*.jsonl"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no event log day files under %s", logs)
	}
	var errs []error
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var ev struct{ ID, Event, Queue string }
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				errs = append(errs, fmt.Errorf("%s: line %.80q: %w", f, sc.Bytes(), err))
				continue
			}
			if ev.Event != "result" || ev.Queue != queue {
				continue
			}
			n, ok := want[ev.ID]
			if !ok {
				if !strict {
					continue
				}
				errs = append(errs, fmt.Errorf("result event for task %s, which the run did not post", ev.ID))
				continue
			}
			want[ev.ID] = n + 1
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			return err
		}
	}
	for id, n := range want {
		if n != 1 {
			errs = append(errs, fmt.Errorf("task %s has %d result events, want 1", id, n))
		}
		if len(errs) > 10 {
			break
		}
	}
	return errors.Join(errs...)
}
