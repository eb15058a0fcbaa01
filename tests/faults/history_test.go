package faults

import "sync"

// What a client was told about something it sent. Only "acked" and
// "accepted" are promises; "unknown" means no answer came (the server died
// with the request in flight, or its reply), so it may or may not have
// happened.
type outcome string

const (
	acked    outcome = "acked"    // a post answered 201 with an id
	unsent   outcome = "unsent"   // the connection was refused: it never reached a server
	accepted outcome = "accepted" // a result answered accepted: true
	rejected outcome = "rejected" // a result answered accepted: false
	unknown  outcome = "unknown"  // no answer, or an error answer: it may have happened
)

// postRecord is one item a producer posted.
type postRecord struct {
	Client  string
	Queue   string
	Tag     string // the item's "tag", unique across the run
	Outcome outcome
	ID      string // when acked
	Status  int    // the HTTP status, when there was an answer

	// SPEC §11's options, when the post gave them.
	SentAt    int64 // Unix ms, the client's clock just before it sent the post
	Delay     int64 // ?delay=, in ms (0: none)
	NotBefore int64 // ?notBefore=, Unix ms (0: none)
	Priority  int   // ?priority=

	// SPEC §12: a post's Idempotency-Key ("": none; sends with one key
	// carry one item and are recorded one each), and for an item of a
	// batch post, the batch's name (every item of it has one record, with
	// the batch's outcome and, acknowledged, the id at its index).
	Key   string
	Batch string
}

// earliest is the earliest time (Unix ms) the post let its task be
// claimed: the server's clock read the request after SentAt, and its
// notBefore is that time plus the delay, in whole milliseconds (1 ms
// allows for a delay that is not whole in floating point).
func (p postRecord) earliest() int64 {
	var at int64
	if p.Delay > 0 {
		at = p.SentAt + p.Delay - 1
	}
	return max(at, p.NotBefore)
}

// claimRecord is one task a worker was handed.
type claimRecord struct {
	Client   string
	ID       string
	Attempts int
}

// The kinds of terminal sends: a result, or a failure by the worker
// (SPEC §11's fail). The first accepted of either ends the task.
const (
	sendResult = "result"
	sendFail   = "fail"
)

// releaseRecord is one give-back a worker sent for the claim it held
// (its attempts), with a delay (ms, 0: none) and a reason (its tag, "":
// none). Status is where the task went (pending, or failed when out of
// attempts) or, refused, what it was.
type releaseRecord struct {
	Client   string
	ID       string
	Attempts int
	Delay    int64
	Tag      string
	Outcome  outcome
	Status   string
}

// resultRecord is one result a worker sent (or sent again: a resend keeps
// its tag, so the checker can tell which send the stored result came from).
type resultRecord struct {
	Client  string
	Kind    string // sendResult ("" too) or sendFail
	ID      string
	Tag     string // the result's "tag", unique per result body
	Outcome outcome
	Status  string // the task's status given with a refusal
	SentAt  int64  // Unix ms, the client's clock before it sent (0: not kept)
	AckAt   int64  // Unix ms, when the answer (or its loss) came
}

// readRecord is one status read of a task whose post was acknowledged.
type readRecord struct {
	Client string
	ID     string
	Status int // the HTTP status
}

// history is what one client sent and what it was told, in order. Clients
// run goroutines of their own, so it is guarded.
type history struct {
	mu       sync.Mutex
	posts    []postRecord
	claims   []claimRecord
	results  []resultRecord
	releases []releaseRecord
	reads    []readRecord
	ops      []opRecord
}

func (h *history) op(r opRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, r)
}

func (h *history) post(r postRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.posts = append(h.posts, r)
}

func (h *history) claim(r claimRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.claims = append(h.claims, r)
}

func (h *history) result(r resultRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.results = append(h.results, r)
}

func (h *history) release(r releaseRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.releases = append(h.releases, r)
}

func (h *history) read(r readRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reads = append(h.reads, r)
}

// ackedIDs lists the ids of this client's acknowledged posts so far.
func (h *history) ackedIDs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ids []string
	for _, p := range h.posts {
		if p.Outcome == acked {
			ids = append(ids, p.ID)
		}
	}
	return ids
}

// claimedIDs lists the ids of this client's last n claims.
func (h *history) claimedIDs(n int) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ids []string
	for _, c := range h.claims[max(0, len(h.claims)-n):] {
		ids = append(ids, c.ID)
	}
	return ids
}

// histories is every client's history merged, for the checker. Call it
// once the clients have stopped.
type histories struct {
	posts    []postRecord
	claims   []claimRecord
	results  []resultRecord
	releases []releaseRecord
	reads    []readRecord
	ops      []opRecord
}

func merge(hs []*history) histories {
	var all histories
	for _, h := range hs {
		h.mu.Lock()
		all.posts = append(all.posts, h.posts...)
		all.claims = append(all.claims, h.claims...)
		all.results = append(all.results, h.results...)
		all.releases = append(all.releases, h.releases...)
		all.reads = append(all.reads, h.reads...)
		all.ops = append(all.ops, h.ops...)
		h.mu.Unlock()
	}
	return all
}
