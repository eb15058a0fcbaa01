package faults

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Bounds on every client loop, beyond the stop channel that normally ends it.
const (
	maxPosts    = 1_000_000 // per producer
	maxTasks    = 1_000_000 // per worker
	maxTries    = 300       // tries of one refused request, about a minute in all
	maxWaitStep = 200 * time.Millisecond
)

// api is the server as every client sees it: one address for the whole run,
// since each restart listens on the same port.
type api struct {
	base string // http://127.0.0.1:port
	http *http.Client
}

func newAPI(port int) *api {
	return &api{
		base: fmt.Sprintf("http://127.0.0.1:%d", port),
		// The timeout only guards against a hung server: a killed one
		// resets its connections at once.
		http: &http.Client{Timeout: 30 * time.Second},
	}
}

// answer is one request's fate: a status and body, or no answer at all.
type answer struct {
	status int
	body   []byte
	err    error
}

// refused reports whether the connection was refused: the request never
// reached a server, so sending it again cannot make it happen twice.
func (a answer) refused() bool { return errors.Is(a.err, syscall.ECONNREFUSED) }

// do sends one JSON request to the queue's host.
func (a *api) do(method, path string, body any) answer {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return answer{err: err}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	if err != nil {
		return answer{err: err}
	}
	req.Host = host
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		// The status came but the body did not: the server died mid-answer.
		return answer{err: err}
	}
	return answer{status: resp.StatusCode, body: data}
}

// backoff paces the retries of a request the server was not there for.
type backoff struct {
	tries int
	wait  time.Duration
}

// next waits before the next try and reports whether to make it: false once
// stop is closed or the tries ran out. A nil stop never closes.
func (b *backoff) next(stop <-chan struct{}) bool {
	b.tries++
	if b.tries > maxTries {
		return false
	}
	b.wait = min(max(2*b.wait, 10*time.Millisecond), maxWaitStep)
	return pause(stop, b.wait)
}

// pause waits d, or less if stop closes; it reports whether stop is open.
func pause(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

func closed(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// resultTags numbers every result body of the run, so that the checker can
// tell which send a stored result came from.
var resultTags atomic.Int64

func newResultTag() string { return fmt.Sprintf("r%d", resultTags.Add(1)) }

// producer posts items, each with a tag of its own, and now and then reads
// back one of its acknowledged tasks. A slow producer posts items only the
// stallers take (see slowQuery), and seldom, so that they keep up.
type producer struct {
	name string
	slow bool
	api  *api
	hist *history
}

func (p *producer) run(stop <-chan struct{}) {
	for n := range maxPosts {
		if closed(stop) {
			return
		}
		p.post(stop, fmt.Sprintf("%s-%d", p.name, n))
		if rand.IntN(8) == 0 {
			p.readBack()
		}
		gap := time.Duration(rand.IntN(20)) * time.Millisecond
		if p.slow {
			gap = time.Duration(2000+rand.IntN(2000)) * time.Millisecond
		}
		pause(stop, gap)
	}
}

// The claim queries. Slow items go to the stallers alone: a task a staller
// lost to the sweep is then claimed next by the other staller (or by
// nobody), so its late result has a real chance to win, as SPEC §5 says it
// may. With every worker taking every task, the lapsed task is re-claimed
// and finished by a quick worker long before the late result comes.
var (
	slowQuery  = json.RawMessage(`{"required": ["slow"]}`)
	quickQuery = json.RawMessage(`{"not": {"required": ["slow"]}}`)
)

// post posts one item. A refused connection is retried (nothing was sent);
// any other failure is recorded as unknown and not retried: the task may
// exist, and posting it again could make a twin.
func (p *producer) post(stop <-chan struct{}, tag string) {
	rec := postRecord{Client: p.name, Tag: tag}
	var b backoff
	for {
		item := map[string]any{"tag": tag}
		if p.slow {
			item["slow"] = true
		}
		a := p.api.do("POST", "/"+queue, item)
		if a.refused() && b.next(stop) {
			continue
		}
		var created struct{ ID string }
		switch {
		case a.refused():
			rec.Outcome = unsent // gave up while the server was down
		case a.err != nil:
			rec.Outcome = unknown
		case a.status == http.StatusCreated && json.Unmarshal(a.body, &created) == nil && created.ID != "":
			rec.Outcome, rec.ID, rec.Status = acked, created.ID, a.status
		default:
			rec.Outcome, rec.Status = unknown, a.status
		}
		p.hist.post(rec)
		return
	}
}

// readBack reads the status of one acknowledged task: it must be there.
// Reading a terminal task also stamps fetchedAt, one more transition a
// crash can land on.
func (p *producer) readBack() {
	ids := p.hist.ackedIDs()
	if len(ids) == 0 {
		return
	}
	id := ids[rand.IntN(len(ids))]
	if a := p.api.do("GET", "/"+queue+"/"+id, nil); a.err == nil {
		p.hist.read(readRecord{Client: p.name, ID: id, Status: a.status})
	}
}

// How an HTTP worker treats the tasks it claims.
type workerMode int

const (
	steady  workerMode = iota // progress, then the result
	staller                   // sits past its lease, then hands in a late result
	doubler                   // posts two different results, at once or one after the other
)

// httpWorker claims with a long poll and reports over HTTP.
type httpWorker struct {
	name string
	mode workerMode
	api  *api
	hist *history
}

// claimed is a task as a worker was handed it.
type claimed struct {
	ID       string `json:"id"`
	Attempts int    `json:"attempts"`
}

func (w *httpWorker) run(stop <-chan struct{}) {
	for range maxTasks {
		if closed(stop) {
			return
		}
		task, ok := w.claim(stop)
		if !ok {
			continue
		}
		switch w.mode {
		case steady:
			w.progress(task.ID)
			w.finish(task.ID, newResultTag())
		case staller:
			// Past the lease, so the sweep re-queues the task and someone
			// else may finish it first; then the late result is refused.
			late := time.Duration(leaseSeconds)*time.Second + time.Duration(500+rand.IntN(1000))*time.Millisecond
			time.Sleep(late)
			w.finish(task.ID, newResultTag())
		case doubler:
			first, second := newResultTag(), newResultTag()
			if rand.IntN(2) == 0 {
				w.finish(task.ID, first)
				w.finish(task.ID, second)
				break
			}
			var wg sync.WaitGroup
			wg.Go(func() { w.finish(task.ID, first) })
			wg.Go(func() { w.finish(task.ID, second) })
			wg.Wait()
		}
	}
}

// claim asks for a task, waiting up to a second for one.
func (w *httpWorker) claim(stop <-chan struct{}) (claimed, bool) {
	query := quickQuery
	if w.mode == staller {
		query = slowQuery
	}
	a := w.api.do("POST", "/"+queue+"/claim", map[string]any{"worker": w.name, "wait": 1, "query": query})
	var t claimed
	switch {
	case a.refused() || a.err != nil:
		// The server is down (or died while answering: a task it handed
		// out then is leased to nobody who knows, until the lease lapses).
		pause(stop, time.Duration(20+rand.IntN(100))*time.Millisecond)
		return t, false
	case a.status != http.StatusOK:
		return t, false // 204: nothing pending
	}
	if err := json.Unmarshal(a.body, &t); err != nil || t.ID == "" {
		return t, false
	}
	w.hist.claim(claimRecord{Client: w.name, ID: t.ID, Attempts: t.Attempts})
	return t, true
}

// progress reports once; whatever the answer, the worker goes on to the result.
func (w *httpWorker) progress(id string) {
	w.api.do("POST", "/"+queue+"/"+id+"/progress", map[string]any{"worker": w.name, "progress": map[string]int{"percent": 50}})
}

// finish sends the result tagged tag until an answer says what became of
// it: a refused connection or a lost answer is sent again, as a worker that
// did the work would. Each send without an answer is recorded as unknown.
func (w *httpWorker) finish(id, tag string) {
	body := map[string]any{"worker": w.name, "result": map[string]string{"tag": tag}}
	var b backoff
	for range maxTries {
		a := w.api.do("POST", "/"+queue+"/"+id+"/result", body)
		if a.refused() {
			if !b.next(nil) {
				break
			}
			continue
		}
		rec := resultRecord{Client: w.name, ID: id, Tag: tag, Outcome: unknown}
		var ack struct {
			Accepted bool
			Status   string
		}
		if a.err == nil && a.status == http.StatusOK && json.Unmarshal(a.body, &ack) == nil {
			rec.Outcome, rec.Status = rejected, ack.Status
			if ack.Accepted {
				rec.Outcome = accepted
			}
		}
		w.hist.result(rec)
		if rec.Outcome != unknown {
			return
		}
		pause(nil, time.Duration(20+rand.IntN(100))*time.Millisecond)
	}
}
