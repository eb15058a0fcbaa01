package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Operating queues (SPEC §12): most of these need the queue's "manage"
// access; a refusal is a *Error (401 unauthorized, 403 forbidden).

// Cancel ends task id: a pending or processing task goes to failed with
// error "cancelled" (Ack{Accepted: true, Status: "failed"}); a finished or
// failed task is left as it is (Accepted false, with its status). The
// worker holding it has its next report refused, and a Worker holding it
// on the socket has its handler's context cancelled at once. Needs manage
// access, or post access for the user who posted the task.
func (c *Client) Cancel(ctx context.Context, queue, id string) (Ack, error) {
	var ack Ack
	if err := c.call(ctx, http.MethodDelete, taskPath(queue, id), nil, &ack); err != nil {
		return Ack{}, fmt.Errorf("cancel %s/%s: %w", queue, id, err)
	}
	return ack, nil
}

// Retry puts failed task id (a dead letter, a timeout, a cancel) back to
// pending with a fresh attempts budget, its item unchanged. A task in
// another status is a 409 not_failed *Error.
func (c *Client) Retry(ctx context.Context, queue, id string) error {
	var ignored json.RawMessage
	if err := c.call(ctx, http.MethodPost, taskPath(queue, id)+"/retry", map[string]any{}, &ignored); err != nil {
		return fmt.Errorf("retry %s/%s: %w", queue, id, err)
	}
	return nil
}

// Purge deletes every task of queue in status ("failed" or "finished")
// now and returns how many it deleted.
func (c *Client) Purge(ctx context.Context, queue, status string) (int, error) {
	var reply struct {
		Deleted int `json:"deleted"`
	}
	path := "/" + url.PathEscape(queue) + "/purge?" + url.Values{"status": {status}}.Encode()
	if err := c.call(ctx, http.MethodPost, path, map[string]any{}, &reply); err != nil {
		return 0, fmt.Errorf("purge %s tasks of %s: %w", status, queue, err)
	}
	return reply.Deleted, nil
}

// Pause pauses queue: posts are still taken, but claims wait (and find
// nothing at the end of their wait) until Resume. The pause survives
// restarts of the server.
func (c *Client) Pause(ctx context.Context, queue string) error {
	return c.setPaused(ctx, queue, "pause")
}

// Resume ends a pause of queue; the waiting claims get their tasks.
func (c *Client) Resume(ctx context.Context, queue string) error {
	return c.setPaused(ctx, queue, "resume")
}

func (c *Client) setPaused(ctx context.Context, queue, verb string) error {
	var reply struct {
		Paused bool `json:"paused"`
	}
	if err := c.call(ctx, http.MethodPost, "/"+url.PathEscape(queue)+"/"+verb, map[string]any{}, &reply); err != nil {
		return fmt.Errorf("%s %s: %w", verb, queue, err)
	}
	if reply.Paused != (verb == "pause") {
		return fmt.Errorf("%s %s: the server answered paused %v", verb, queue, reply.Paused)
	}
	return nil
}

// TaskQuery asks for one page of a queue's tasks.
type TaskQuery struct {
	// Status is "pending" (the default when ""), "processing", "finished"
	// or "failed".
	Status string
	// Newest lists the newest first; by default the oldest come first.
	Newest bool
	// Limit is the most tasks on the page, 1 to 1000; 0 lets the server
	// choose (100).
	Limit int
	// After is the cursor of the page to read: a previous page's Next; ""
	// for the first page.
	After string
	// Query, if not nil, is a JSON Schema the item must match (as for a
	// claim).
	Query any
}

// ListedTask is a task as a list shows it: its status view, its item and
// who posted it.
type ListedTask struct {
	View
	Item     json.RawMessage `json:"item"`
	PostedBy string          `json:"postedBy"` // the user's name; "" for an anonymous post
}

// MarshalJSON writes the task as the API sent it: postedBy null for an
// anonymous post, not "" (`taskhoster tasks` prints it so).
func (t ListedTask) MarshalJSON() ([]byte, error) {
	type fields ListedTask // the fields, without this method
	v := struct {
		fields
		PostedBy *string `json:"postedBy"` // shallower: it wins over fields'
	}{fields: fields(t)}
	if t.PostedBy != "" {
		v.PostedBy = &t.PostedBy
	}
	return json.Marshal(v)
}

// TaskPage is one page of a queue's tasks.
type TaskPage struct {
	Tasks []ListedTask
	// Next is the cursor of the next page (TaskQuery.After); "" when this
	// page is the last.
	Next string
}

// Tasks lists one page of queue's tasks in q.Status, oldest (or newest)
// first. Paging is by cursor: pass the page's Next as the next query's
// After until Next is "".
func (c *Client) Tasks(ctx context.Context, queue string, q TaskQuery) (TaskPage, error) {
	v := url.Values{}
	if q.Status != "" {
		v.Set("status", q.Status)
	}
	if q.Newest {
		v.Set("order", "newest")
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	if q.Query != nil {
		raw, err := marshal(q.Query)
		if err != nil {
			return TaskPage{}, fmt.Errorf("tasks of %s: query: %w", queue, err)
		}
		v.Set("query", string(raw))
	}
	path := "/" + url.PathEscape(queue) + "/tasks"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var reply struct {
		Tasks []ListedTask `json:"tasks"`
		Next  *string      `json:"next"`
	}
	if err := c.call(ctx, http.MethodGet, path, nil, &reply); err != nil {
		return TaskPage{}, fmt.Errorf("tasks of %s: %w", queue, err)
	}
	page := TaskPage{Tasks: reply.Tasks}
	if reply.Next != nil {
		page.Next = *reply.Next
	}
	return page, nil
}

// PostBatch posts every element of items (a slice or array, encoded with
// encoding/json; 1 to 1000 items) to queue in one request and returns the
// new tasks' ids in order. It is all or nothing: one bad item is a 422
// invalid_item *Error whose violation paths name it (/items/3/width), and
// nothing is posted. Delay, NotBefore and Priority apply to every item;
// Key is refused (400).
func (c *Client) PostBatch(ctx context.Context, queue string, items any, opts ...PostOption) ([]string, error) {
	raw, err := marshal(items)
	if err != nil {
		return nil, fmt.Errorf("batch post to %s: %w", queue, err)
	}
	if !bytes.HasPrefix(raw, []byte("[")) {
		return nil, fmt.Errorf("batch post to %s: items must be a slice or array, not %.40s", queue, raw)
	}
	p := newPostOptions(opts)
	var h http.Header
	if p.key != "" {
		h = http.Header{"Idempotency-Key": {p.key}} // for the server to refuse
	}
	var reply struct {
		IDs []string `json:"ids"`
	}
	body := map[string]json.RawMessage{"items": raw}
	if _, err := c.do(ctx, http.MethodPost, p.path("/"+url.PathEscape(queue)+"/batch"), h, body, &reply); err != nil {
		return nil, fmt.Errorf("batch post to %s: %w", queue, err)
	}
	return reply.IDs, nil
}

// MaxClaimMany is the most tasks one ClaimMany takes (SPEC §12).
const MaxClaimMany = 100

// ClaimMany leases up to max (1 to 100) pending tasks of queue that match
// query (a JSON Schema, or nil for any) for worker ("" for the user's
// name) in one request: the first as Claim does, waiting up to wait for it,
// the rest from what is pending then. It returns ErrNoTask when none
// arrived in time. Each task's Progress and Heartbeat report over HTTP.
func (c *Client) ClaimMany(ctx context.Context, queue, worker string, query any, wait time.Duration, max int) ([]*Task, error) {
	if max < 1 || max > MaxClaimMany {
		return nil, fmt.Errorf("claim from %s: max must be 1 to %d, not %d", queue, MaxClaimMany, max)
	}
	body := map[string]any{"wait": wait.Seconds(), "max": max}
	if worker != "" {
		body["worker"] = worker
	}
	if query != nil {
		body["query"] = query
	}
	var reply struct {
		Tasks []claim `json:"tasks"`
	}
	err := c.call(ctx, http.MethodPost, "/"+url.PathEscape(queue)+"/claim", body, &reply)
	switch {
	case errors.Is(err, errNoContent):
		return nil, ErrNoTask
	case err != nil:
		return nil, fmt.Errorf("claim from %s: %w", queue, err)
	case len(reply.Tasks) == 0:
		return nil, ErrNoTask
	}
	tasks := make([]*Task, len(reply.Tasks))
	for i, cl := range reply.Tasks {
		t := cl.task(queue)
		t.report = httpReporter{c: c, queue: queue, worker: t.Lease.Worker, attempt: t.Attempts}
		tasks[i] = t
	}
	return tasks, nil
}
