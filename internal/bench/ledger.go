package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ledger records what happened to each of a run's N tasks, by sequence
// number (the item carries it, so a worker may be handed a task before its
// producer has read the id). Times are nanoseconds since the run began,
// plus one, so that zero means "never".
type ledger struct {
	n  int
	t0 time.Time

	postStart, postEnd, delivered, resultSent, accepted []atomic.Int64
	accepts                                             []atomic.Int32

	ids        []string // the id each post returned; one writer per index
	acceptedID []string // the id the accepted result was for; written by the first acceptance only

	completed atomic.Int64
	done      chan struct{} // closed when every task is accepted, or on the first failure
	doneOnce  sync.Once

	mu  sync.Mutex
	err error
}

func newLedger(n int) *ledger {
	return &ledger{
		n:          n,
		t0:         time.Now(),
		postStart:  make([]atomic.Int64, n),
		postEnd:    make([]atomic.Int64, n),
		delivered:  make([]atomic.Int64, n),
		resultSent: make([]atomic.Int64, n),
		accepted:   make([]atomic.Int64, n),
		accepts:    make([]atomic.Int32, n),
		ids:        make([]string, n),
		acceptedID: make([]string, n),
		done:       make(chan struct{}),
	}
}

// now is the time since the run began, plus one.
func (l *ledger) now() int64 { return int64(time.Since(l.t0)) + 1 }

func (l *ledger) stop() { l.doneOnce.Do(func() { close(l.done) }) }

// fail records the run's first error and stops it.
func (l *ledger) fail(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.mu.Unlock()
	l.stop()
}

func (l *ledger) failed() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *ledger) stopped() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// check validates a sequence number a worker read from an item.
func (l *ledger) check(seq int) error {
	if seq < 0 || seq >= l.n {
		return fmt.Errorf("task with sequence number %d, want 0..%d", seq, l.n-1)
	}
	return nil
}

// deliver records that a worker got the task whose item is item and is
// sending its result now, and returns its sequence number. An item that is
// not one of the run's fails the run, and deliver reports false.
func (l *ledger) deliver(item json.RawMessage) (int, bool) {
	seq, err := seqOf(item)
	if err == nil {
		err = l.check(seq)
	}
	if err != nil {
		l.fail(err)
		return 0, false
	}
	l.delivered[seq].Store(l.now())
	l.resultSent[seq].Store(l.now())
	return seq, true
}

// accept records an accepted result for seq (task id): the run is over
// when every task has one. A second acceptance of one task fails the run.
func (l *ledger) accept(seq int, id string) {
	l.accepted[seq].Store(l.now())
	if l.accepts[seq].Add(1) > 1 {
		l.fail(fmt.Errorf("task %d (%s) finished twice", seq, id))
		return
	}
	l.acceptedID[seq] = id
	if l.completed.Add(1) == int64(l.n) {
		l.stop()
	}
}

// LoadRun is one throughput run's figures.
type LoadRun struct {
	Completed int           `json:"completed"`
	Elapsed   time.Duration `json:"elapsed_ns"`
	// Rates over the run: tasks posted, handed to a worker and finished per
	// second, each from the start to the last such event.
	PostTPS    float64 `json:"post_tps"`
	DeliverTPS float64 `json:"deliver_tps"`
	TPS        float64 `json:"tps"`
	// Latencies in milliseconds: post sent → result accepted (the whole
	// trip), post sent → answered (201), post sent → task delivered to a
	// worker, result sent → accepted.
	LatP50, LatP99         float64
	PostP50, PostP99       float64
	DeliverP50, DeliverP99 float64
	ResultP50, ResultP99   float64
	// CPU milliseconds per task used by the server process and by the
	// bench's own clients (which share the machine with it).
	ServerCPU, ClientCPU float64
	// Idle is the share of the whole machine's CPU time, in per cent, that
	// was idle or waiting for I/O from the workers' start to the last
	// accepted result (nil: not measured). With the CPU per task, it says whether a run was
	// bound by its processors or by waiting (for a flush, say).
	Idle *float64 `json:"machine_idle_pct,omitempty"`
	// KernelThreads is the share of the machine's CPU time, in per cent,
	// the kernel's threads used over the same span: writeback, the loop
	// device's and AIO's workers, jbd2. A process's CPU time leaves out
	// what its flushes cost there.
	KernelThreads *float64 `json:"kernel_threads_pct,omitempty"`
	// FlushMs and FlushCallers are a file-store server's mean group commit
	// over the run, in milliseconds, and the callers each served (its
	// /metrics; 0 under --sync none, which flushes nothing).
	FlushMs      float64 `json:"flush_ms,omitempty"`
	FlushCallers float64 `json:"flush_callers,omitempty"`
}

// verify checks, after the run, that every task was posted once, handed
// in once and accepted once, for the id its post returned, and computes
// the figures.
func (l *ledger) verify() (LoadRun, error) {
	if err := l.failed(); err != nil {
		return LoadRun{}, err
	}
	var errs []error
	seen := make(map[string]int, l.n)
	for i := range l.n {
		switch {
		case l.ids[i] == "":
			errs = append(errs, fmt.Errorf("task %d was never posted", i))
		case l.accepts[i].Load() != 1:
			errs = append(errs, fmt.Errorf("task %d (%s) accepted %d times", i, l.ids[i], l.accepts[i].Load()))
		case l.acceptedID[i] != l.ids[i]:
			errs = append(errs, fmt.Errorf("task %d posted as %s, finished as %s", i, l.ids[i], l.acceptedID[i]))
		}
		if j, dup := seen[l.ids[i]]; dup && l.ids[i] != "" {
			errs = append(errs, fmt.Errorf("tasks %d and %d got the same id %s", j, i, l.ids[i]))
		}
		seen[l.ids[i]] = i
		if len(errs) > 10 {
			errs = append(errs, errors.New("and more, not listed"))
			break
		}
	}
	if len(errs) > 0 {
		return LoadRun{}, errors.Join(errs...)
	}
	lat := make([]time.Duration, 0, l.n)
	post := make([]time.Duration, 0, l.n)
	deliver := make([]time.Duration, 0, l.n)
	result := make([]time.Duration, 0, l.n)
	var lastPost, lastDeliver, lastAccept int64
	for i := range l.n {
		ps, pe, dl := l.postStart[i].Load(), l.postEnd[i].Load(), l.delivered[i].Load()
		rs, ac := l.resultSent[i].Load(), l.accepted[i].Load()
		lat = append(lat, time.Duration(ac-ps))
		post = append(post, time.Duration(pe-ps))
		if dl > 0 {
			deliver = append(deliver, time.Duration(dl-ps))
		}
		if rs > 0 {
			result = append(result, time.Duration(ac-rs))
		}
		lastPost, lastDeliver, lastAccept = max(lastPost, pe), max(lastDeliver, dl), max(lastAccept, ac)
	}
	r := LoadRun{
		Completed:  l.n,
		Elapsed:    time.Duration(lastAccept),
		PostTPS:    rate(l.n, time.Duration(lastPost)),
		DeliverTPS: rate(l.n, time.Duration(lastDeliver)),
		TPS:        rate(l.n, time.Duration(lastAccept)),
		LatP50:     ms(Percentile(lat, 50)), LatP99: ms(Percentile(lat, 99)),
		PostP50: ms(Percentile(post, 50)), PostP99: ms(Percentile(post, 99)),
		DeliverP50: ms(Percentile(deliver, 50)), DeliverP99: ms(Percentile(deliver, 99)),
		ResultP50: ms(Percentile(result, 50)), ResultP99: ms(Percentile(result, 99)),
	}
	return r, nil
}
