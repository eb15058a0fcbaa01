package faults

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"
)

// The clients of SPEC §12 on the ops queue: producers that post with an
// Idempotency-Key (and post again with it when the answer was lost, or
// just so, or twice at once), a producer of batch posts, a worker that
// claims several tasks at a time, and a manager that cancels tasks,
// retries the ones it cancelled and pauses and resumes the queue.

// opRecord is one thing a manager asked of a queue and what it was told.
// A cancel is accepted (it failed the task), rejected (the task was
// terminal: Status says how) or unknown; a retry accepted (200, pending
// again), rejected (409 not_failed) or unknown; a pause or resume accepted
// (200) or unknown.
type opRecord struct {
	Client  string
	Kind    string // opCancel, opRetry, opPause or opResume
	Queue   string
	ID      string // of a cancel or retry
	Outcome outcome
	Status  string // a cancel's answered status
	Code    int    // the HTTP status, when there was an answer
	SentAt  int64  // Unix ms, the client's clock before it sent
	AckAt   int64  // Unix ms, when the answer (or its loss) came
}

const (
	opCancel = "cancel"
	opRetry  = "retry"
	opPause  = "pause"
	opResume = "resume"
)

// maxResends bounds the sends of one keyed post, cancel or retry whose
// answers were lost.
const maxResends = 10

// keyProducer posts items with an Idempotency-Key of their own. A post
// whose answer was lost is sent again with the same key and item, as a
// careful producer would; one in four is sent again after its answer too
// (a replay: 200 with the first id), and one in ten is sent twice at once.
type keyProducer struct {
	name string
	api  *api
	hist *history
}

func (p *keyProducer) run(stop <-chan struct{}) {
	for n := range maxPosts {
		if closed(stop) {
			return
		}
		tag := fmt.Sprintf("%s-%d", p.name, n)
		key := "k-" + tag
		if rand.IntN(10) == 0 {
			var wg sync.WaitGroup
			wg.Go(func() { p.postKeyed(stop, tag, key) })
			wg.Go(func() { p.postKeyed(stop, tag, key) })
			wg.Wait()
		} else {
			p.postKeyed(stop, tag, key)
		}
		if rand.IntN(4) == 0 {
			p.postKeyed(stop, tag, key)
		}
		if rand.IntN(8) == 0 {
			p.readBack()
		}
		pause(stop, time.Duration(rand.IntN(20))*time.Millisecond)
	}
}

// postKeyed posts tag's item with key until an answer says which task it
// is (or, on stop, gives up), recording every send.
func (p *keyProducer) postKeyed(stop <-chan struct{}, tag, key string) {
	item := map[string]any{"tag": tag}
	header := http.Header{"Idempotency-Key": {key}}
	var b backoff
	for sends := 0; sends < maxResends; {
		rec := postRecord{Client: p.name, Queue: opsQueue, Tag: tag, Key: key, SentAt: time.Now().UnixMilli()}
		a := p.api.doWith("POST", "/"+opsQueue, item, header)
		if a.refused() && b.next(stop) {
			continue
		}
		var created struct{ ID string }
		switch {
		case a.refused():
			rec.Outcome = unsent
		case a.err != nil:
			rec.Outcome = unknown
		case (a.status == http.StatusCreated || a.status == http.StatusOK) && json.Unmarshal(a.body, &created) == nil && created.ID != "":
			rec.Outcome, rec.ID, rec.Status = acked, created.ID, a.status
		default:
			rec.Outcome, rec.Status = unknown, a.status
		}
		p.hist.post(rec)
		if rec.Outcome != unknown || a.status == http.StatusConflict {
			return
		}
		sends++
		if !pause(stop, time.Duration(20+rand.IntN(100))*time.Millisecond) {
			return
		}
	}
}

func (p *keyProducer) readBack() {
	(&producer{name: p.name, queue: opsQueue, api: p.api, hist: p.hist}).readBack()
}

// batchProducer posts batches of 2 to 20 items. A batch whose answer was
// lost is not sent again: batches take no key, so a resend could make
// twins.
type batchProducer struct {
	name string
	api  *api
	hist *history
}

func (p *batchProducer) run(stop <-chan struct{}) {
	for n := range maxPosts {
		if closed(stop) {
			return
		}
		p.post(stop, fmt.Sprintf("%s-%d", p.name, n), 2+rand.IntN(19))
		pause(stop, time.Duration(10+rand.IntN(50))*time.Millisecond)
	}
}

// post sends one batch named name of size items and records one post
// per item, with the batch's outcome and, acknowledged, its id.
func (p *batchProducer) post(stop <-chan struct{}, name string, size int) {
	items := make([]map[string]any, size)
	for i := range items {
		items[i] = map[string]any{"tag": fmt.Sprintf("%s-%d", name, i)}
	}
	var b backoff
	for {
		sentAt := time.Now().UnixMilli()
		a := p.api.do("POST", "/"+opsQueue+"/batch", map[string]any{"items": items})
		if a.refused() && b.next(stop) {
			continue
		}
		var created struct{ IDs []string }
		out := unknown
		switch {
		case a.refused():
			out = unsent
		case a.err == nil && a.status == http.StatusCreated && json.Unmarshal(a.body, &created) == nil && len(created.IDs) == size:
			out = acked
		}
		for i, item := range items {
			rec := postRecord{Client: p.name, Queue: opsQueue, Tag: item["tag"].(string), Outcome: out, Status: a.status, SentAt: sentAt, Batch: name}
			if out == acked {
				rec.ID = created.IDs[i]
			}
			p.hist.post(rec)
		}
		return
	}
}

// claimMany is a batch claim (SPEC §12's "max"), waiting up to a second.
func (w *httpWorker) claimMany(stop <-chan struct{}) []claimed {
	a := w.api.do("POST", "/"+w.queue+"/claim", map[string]any{"worker": w.name, "wait": 1, "max": 2 + rand.IntN(4)})
	var got struct{ Tasks []claimed }
	switch {
	case a.refused() || a.err != nil:
		pause(stop, time.Duration(20+rand.IntN(100))*time.Millisecond)
		return nil
	case a.status != http.StatusOK || json.Unmarshal(a.body, &got) != nil:
		return nil
	}
	var tasks []claimed
	for _, t := range got.Tasks {
		if t.ID != "" {
			w.hist.claim(claimRecord{Client: w.name, ID: t.ID, Attempts: t.Attempts})
			tasks = append(tasks, t)
		}
	}
	return tasks
}

// manager cancels random recent tasks of the ops queue (pending or
// processing, or already terminal), retries some it cancelled, and pauses
// the queue for a while now and then. It runs with the producers.
type manager struct {
	name string
	api  *api
	hist *history
	from []*history // the producers whose acknowledged tasks it cancels
	held []*history // the workers whose claimed tasks it cancels

	cancelled []string // accepted cancels to retry (half of them)
}

func (m *manager) run(stop <-chan struct{}) {
	paused := false
	next := time.Now().Add(time.Duration(200+rand.IntN(800)) * time.Millisecond)
	for range maxPosts {
		if closed(stop) {
			return
		}
		switch {
		case time.Now().After(next) && paused:
			m.toggle(stop, opResume)
			paused = false
			next = time.Now().Add(time.Duration(200+rand.IntN(400)) * time.Millisecond)
		case time.Now().After(next):
			m.toggle(stop, opPause)
			paused = true
			// Long enough, as often as not, to span a kill and restart.
			next = time.Now().Add(time.Duration(300+rand.IntN(1200)) * time.Millisecond)
		case len(m.cancelled) > 0 && rand.IntN(3) == 0:
			i := rand.IntN(len(m.cancelled))
			id := m.cancelled[i]
			m.cancelled = slices.Delete(m.cancelled, i, i+1)
			m.send(stop, opRetry, id)
		default:
			if id, ok := m.pick(); ok {
				m.send(stop, opCancel, id)
			}
		}
		pause(stop, time.Duration(20+rand.IntN(60))*time.Millisecond)
	}
}

// pick draws one of the last acknowledged tasks of the producers or,
// as often, one of the last the workers claimed (most likely processing).
func (m *manager) pick() (string, bool) {
	var ids []string
	if rand.IntN(2) == 0 {
		for _, h := range m.held {
			ids = append(ids, h.claimedIDs(1)...)
		}
	}
	if len(ids) == 0 {
		for _, h := range m.from {
			got := h.ackedIDs()
			ids = append(ids, got[max(0, len(got)-20):]...)
		}
	}
	if len(ids) == 0 {
		return "", false
	}
	return ids[rand.IntN(len(ids))], true
}

// send cancels or retries task id until an answer says what became of it.
func (m *manager) send(stop <-chan struct{}, kind, id string) {
	method, path := "DELETE", "/"+opsQueue+"/"+id
	if kind == opRetry {
		method, path = "POST", path+"/retry"
	}
	var b backoff
	for sends := 0; sends < maxResends; {
		rec := opRecord{Client: m.name, Kind: kind, Queue: opsQueue, ID: id, SentAt: time.Now().UnixMilli()}
		a := m.api.do(method, path, nil)
		if a.refused() && b.next(stop) {
			continue
		}
		rec.AckAt, rec.Code = time.Now().UnixMilli(), a.status
		switch {
		case a.refused() || a.err != nil:
			rec.Outcome, rec.Code = unknown, 0
		case kind == opRetry && a.status == http.StatusOK:
			rec.Outcome = accepted
		case kind == opRetry && a.status == http.StatusConflict:
			rec.Outcome = rejected
		case kind == opRetry:
			rec.Outcome = unknown
		default:
			rec.Outcome, rec.Status = ackOf(a)
		}
		m.hist.op(rec)
		if a.refused() {
			return // gave up: the server stayed down until stop
		}
		if rec.Outcome != unknown {
			if kind == opCancel && rec.Outcome == accepted && rand.IntN(2) == 0 {
				m.cancelled = append(m.cancelled, id)
			}
			return
		}
		sends++
		if !pause(stop, time.Duration(20+rand.IntN(100))*time.Millisecond) {
			return
		}
	}
}

// toggle pauses or resumes the queue, sending again until it is answered
// (both may be repeated) or stop closes. A nil stop never closes.
func (m *manager) toggle(stop <-chan struct{}, kind string) bool {
	var b backoff
	for {
		rec := opRecord{Client: m.name, Kind: kind, Queue: opsQueue, SentAt: time.Now().UnixMilli()}
		a := m.api.do("POST", "/"+opsQueue+"/"+kind, nil)
		rec.AckAt, rec.Code = time.Now().UnixMilli(), a.status
		var ans struct{ Paused *bool }
		switch {
		case a.err == nil && a.status == http.StatusOK && json.Unmarshal(a.body, &ans) == nil && ans.Paused != nil && *ans.Paused == (kind == opPause):
			rec.Outcome = accepted
		case a.refused():
			// Never reached a server: nothing to record, it cannot have
			// paused or resumed anything.
			if b.next(stop) {
				continue
			}
			return false
		default:
			rec.Outcome = unknown
		}
		m.hist.op(rec)
		if rec.Outcome == accepted {
			return true
		}
		if !b.next(stop) {
			return false
		}
	}
}
