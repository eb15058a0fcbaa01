package client

import (
	"context"
	"encoding/json"
	"fmt"
)

// Task is a task leased to a worker: what it has to do and the lease it
// holds while it does it.
type Task struct {
	ID       string
	Queue    string
	Item     json.RawMessage // the item as posted
	Attempts int             // how many times it was claimed, this claim included
	Lease    Lease

	// report sends progress the way the task was claimed: over HTTP, or
	// over the worker socket.
	report reporter
	// cancelled is closed when the server cancels the task (over the
	// worker socket; nil for a task claimed over HTTP); release stops
	// watching.
	cancelled <-chan struct{}
	release   func()
}

type reporter interface {
	progress(ctx context.Context, id string, value json.RawMessage) (Ack, error)
	heartbeat(ctx context.Context, id string) (Ack, error)
}

// Progress reports v (encoded with encoding/json) as the task's progress,
// which also extends the lease. accepted is false when the lease is gone:
// the task lapsed back to the queue, the worker socket it was claimed on
// dropped (which re-queues it), or someone finished it; a handler may then
// stop early, since its result will probably not count.
func (t *Task) Progress(ctx context.Context, v any) (accepted bool, err error) {
	raw, err := marshal(v)
	if err != nil {
		return false, fmt.Errorf("progress of %s/%s: %w", t.Queue, t.ID, err)
	}
	if t.report == nil {
		return false, fmt.Errorf("progress of %s/%s: the task was not claimed through this package", t.Queue, t.ID)
	}
	ack, err := t.report.progress(ctx, t.ID, raw)
	return ack.Accepted, err
}

// Heartbeat extends the lease without a progress record. accepted is false
// when the lease is gone, as for Progress. A Worker sends heartbeats on its
// own while a handler runs; this is for tasks claimed over HTTP.
func (t *Task) Heartbeat(ctx context.Context) (accepted bool, err error) {
	if t.report == nil {
		return false, fmt.Errorf("heartbeat of %s/%s: the task was not claimed through this package", t.Queue, t.ID)
	}
	ack, err := t.report.heartbeat(ctx, t.ID)
	return ack.Accepted, err
}

// httpReporter reports progress of a task claimed over HTTP. Its reports
// name the claim's attempt: should the same worker name have claimed the
// task again since (this lease lapsed), the server refuses them rather than
// touch the newer claim. (Over the worker socket the server knows the
// claim of every task the socket holds.)
type httpReporter struct {
	c             *Client
	queue, worker string
	attempt       int
}

func (r httpReporter) progress(ctx context.Context, id string, value json.RawMessage) (Ack, error) {
	return r.c.send(ctx, r.queue, id, "progress", r.worker, map[string]any{"progress": value, "attempt": r.attempt})
}

func (r httpReporter) heartbeat(ctx context.Context, id string) (Ack, error) {
	return r.c.send(ctx, r.queue, id, "heartbeat", r.worker, map[string]any{"attempt": r.attempt})
}
