package faults

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
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

// unreused is a's server over a client that opens a connection for each
// request. net/http's Transport sends a request again by itself, on a new
// connection, when a reused one fails under it, if it counts the request
// as idempotent: a DELETE, or a post with an Idempotency-Key. The first
// send may then have reached a server that died before answering while
// the caller sees only the second one's refused connection, which would
// pass for "never sent". Without reuse the Transport never resends, so a
// refused connection still means nothing reached a server.
func (a *api) unreused() *api {
	return &api{base: a.base, http: &http.Client{Timeout: a.http.Timeout, Transport: &http.Transport{DisableKeepAlives: true}}}
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
func (a *api) do(method, path string, body any) answer { return a.doWith(method, path, body, nil) }

// doWith sends one JSON request with extra headers.
func (a *api) doWith(method, path string, body any, header http.Header) answer {
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
	for k, v := range header {
		req.Header[k] = v
	}
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
// stallers take (see slowQuery), and seldom, so that they keep up. Some
// posts are delayed; with options, a producer also posts at set times and
// with priorities (SPEC §11).
type producer struct {
	name    string
	queue   string
	slow    bool
	options bool
	api     *api
	hist    *history
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

// priorities are the classes an options producer draws from: every one
// must drain.
var priorities = []int{-2, 0, 0, 3}

// postOptions draws a post's SPEC §11 options into rec and returns them as
// query parameters ("" for none).
func (p *producer) postOptions(rec *postRecord) string {
	var q []string
	switch {
	case p.slow:
	case rand.IntN(4) == 0:
		rec.Delay = int64(100 + rand.IntN(900))
		q = append(q, fmt.Sprintf("delay=%d.%03d", rec.Delay/1000, rec.Delay%1000))
	case p.options && rand.IntN(5) == 0:
		rec.NotBefore = time.Now().UnixMilli() + int64(100+rand.IntN(900))
		q = append(q, fmt.Sprintf("notBefore=%d", rec.NotBefore))
	}
	if p.options {
		rec.Priority = priorities[rand.IntN(len(priorities))]
		q = append(q, fmt.Sprintf("priority=%d", rec.Priority))
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + strings.Join(q, "&")
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
	rec := postRecord{Client: p.name, Queue: p.queue, Tag: tag}
	params := p.postOptions(&rec)
	var b backoff
	for {
		item := map[string]any{"tag": tag}
		if p.slow {
			item["slow"] = true
		}
		rec.SentAt = time.Now().UnixMilli()
		a := p.api.do("POST", "/"+p.queue+params, item)
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
	if a := p.api.do("GET", "/"+p.queue+"/"+id, nil); a.err == nil {
		p.hist.read(readRecord{Client: p.name, ID: id, Status: a.status})
	}
}

// How an HTTP worker treats the tasks it claims.
type workerMode int

const (
	steady  workerMode = iota // progress, then the result
	staller                   // sits past its lease, then hands in a late result
	doubler                   // posts two different results, at once or one after the other
	giver                     // finishes, gives back (with or without delay and reason), fails or stalls
	many                      // claims several at once (SPEC §12's batch claim), then works as steady
	holder                    // works as steady, but holds each task a while (to be cancelled under it)
)

// httpWorker claims with a long poll and reports over HTTP.
type httpWorker struct {
	name  string
	queue string
	mode  workerMode
	api   *api
	hist  *history
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
		if w.mode == many {
			for _, task := range w.claimMany(stop) {
				w.progress(task.ID)
				w.finish(task.ID, newResultTag())
			}
			continue
		}
		task, ok := w.claim(stop)
		if !ok {
			continue
		}
		switch w.mode {
		case steady:
			w.progress(task.ID)
			w.finish(task.ID, newResultTag())
		case holder:
			w.progress(task.ID)
			time.Sleep(time.Duration(100+rand.IntN(300)) * time.Millisecond)
			w.heartbeat(task.ID)
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
		case giver:
			w.give(task)
		}
	}
}

// give does one of the things a worker of SPEC §11 may do with a task.
func (w *httpWorker) give(task claimed) {
	switch r := rand.IntN(10); {
	case r < 3:
		w.heartbeat(task.ID)
		w.finish(task.ID, newResultTag())
	case r < 5:
		w.release(task, 0, rand.IntN(2) == 0)
	case r < 7:
		w.release(task, int64(50+rand.IntN(450)), rand.IntN(2) == 0)
	case r < 9:
		w.send(sendFail, task.ID, newResultTag())
	default:
		// Past the lease: the sweep re-queues it (after the backoff) or,
		// at its last attempt, fails it; the late result may still win.
		time.Sleep(time.Duration(leaseSeconds)*time.Second + time.Duration(200+rand.IntN(500))*time.Millisecond)
		w.finish(task.ID, newResultTag())
	}
}

// claim asks for a task, waiting up to a second for one.
func (w *httpWorker) claim(stop <-chan struct{}) (claimed, bool) {
	query := quickQuery
	if w.mode == staller {
		query = slowQuery
	}
	a := w.api.do("POST", "/"+w.queue+"/claim", map[string]any{"worker": w.name, "wait": 1, "query": query})
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
	w.api.do("POST", "/"+w.queue+"/"+id+"/progress", map[string]any{"worker": w.name, "progress": map[string]int{"percent": 50}})
}

// heartbeat extends the lease once; whatever the answer, the worker goes on.
func (w *httpWorker) heartbeat(id string) {
	w.api.do("POST", "/"+w.queue+"/"+id+"/heartbeat", map[string]any{"worker": w.name})
}

// finish sends a result; see send.
func (w *httpWorker) finish(id, tag string) { w.send(sendResult, id, tag) }

// send sends the result (or, of kind sendFail, the failure) tagged tag
// until an answer says what became of it: a refused connection or a lost
// answer is sent again, as a worker that did the work would. Each send
// without an answer is recorded as unknown.
func (w *httpWorker) send(kind, id, tag string) {
	body := map[string]any{"worker": w.name, "result": map[string]string{"tag": tag}}
	path := "/" + w.queue + "/" + id + "/result"
	if kind == sendFail {
		body = map[string]any{"worker": w.name, "reason": map[string]string{"tag": tag}}
		path = "/" + w.queue + "/" + id + "/fail"
	}
	var b backoff
	for range maxTries {
		sentAt := time.Now().UnixMilli()
		a := w.api.do("POST", path, body)
		if a.refused() {
			if !b.next(nil) {
				break
			}
			continue
		}
		rec := resultRecord{Client: w.name, Kind: kind, ID: id, Tag: tag, SentAt: sentAt, AckAt: time.Now().UnixMilli()}
		rec.Outcome, rec.Status = ackOf(a)
		w.hist.result(rec)
		if rec.Outcome != unknown {
			return
		}
		pause(nil, time.Duration(20+rand.IntN(100))*time.Millisecond)
	}
}

// release gives task back after delay ms (0: none), with a reason or
// without. It is sent again only while the connection is refused: once
// it may have arrived, a second one could give back a later claim.
func (w *httpWorker) release(task claimed, delay int64, reason bool) {
	rec := releaseRecord{Client: w.name, ID: task.ID, Attempts: task.Attempts, Delay: delay}
	body := map[string]any{"worker": w.name}
	if delay > 0 {
		body["delay"] = float64(delay) / 1000
	}
	if reason {
		rec.Tag = newResultTag()
		body["reason"] = map[string]string{"tag": rec.Tag}
	}
	var b backoff
	for {
		a := w.api.do("POST", "/"+w.queue+"/"+task.ID+"/release", body)
		if a.refused() && b.next(nil) {
			continue
		}
		rec.Outcome, rec.Status = ackOf(a)
		w.hist.release(rec)
		return
	}
}

// ackOf reads an answer of the lease holder's calls: {"accepted",
// "status"}, or unknown when there was none.
func ackOf(a answer) (outcome, string) {
	var ack struct {
		Accepted bool
		Status   string
	}
	if a.err != nil || a.status != http.StatusOK || json.Unmarshal(a.body, &ack) != nil {
		return unknown, ""
	}
	if ack.Accepted {
		return accepted, ack.Status
	}
	return rejected, ack.Status
}
