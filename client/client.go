// Package client talks to a Taskhoster server: producers post tasks, read
// their status and watch them to the end; workers claim tasks, report
// progress and hand in results, over HTTP one call at a time or through a
// Worker that keeps claims open on the worker socket (SPEC §3, §4).
//
// A Client is safe for concurrent use. Every call takes a context; a
// failure the server explains comes back as a *Error carrying its status,
// code, message and schema violations.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client is one server (and one host on it) seen with one token.
type Client struct {
	base  *url.URL // scheme and authority of the server; path "" or a prefix
	err   error    // a bad server URL, reported by every call
	host  string   // the Host header to send; "" sends the URL's host
	token string
	http  *http.Client
}

// Option configures a Client.
type Option func(*Client)

// WithHost sends name as the Host header, which picks the host folder on
// the server. By default the server URL's host is sent.
func WithHost(name string) Option { return func(c *Client) { c.host = name } }

// WithToken authenticates every request with "Authorization: Bearer token".
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient makes requests with hc instead of a client of the
// package's own transport (NewTransport: http.DefaultTransport that also
// takes NAME.localhost to be this machine). The WebSocket dials reuse hc's
// transport's dialer, TLS and proxy settings when it is an *http.Transport.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// New returns a client of the server at URL server (http or https). A bad
// URL is not reported here but by every call, so New can be used inline.
func New(server string, opts ...Option) *Client {
	c := &Client{http: defaultHTTP()}
	u, err := url.Parse(strings.TrimRight(server, "/"))
	switch {
	case err != nil:
		c.err = fmt.Errorf("client: server URL %q: %w", server, err)
	case u.Scheme != "http" && u.Scheme != "https":
		c.err = fmt.Errorf("client: server URL %q: scheme must be http or https", server)
	case u.Host == "":
		c.err = fmt.Errorf("client: server URL %q has no host", server)
	default:
		u.RawQuery, u.Fragment = "", ""
		c.base = u
	}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// View is what a producer sees of a task (SPEC §3, "the status view").
// Times are Unix milliseconds.
type View struct {
	ID       string          `json:"id"`
	Queue    string          `json:"queue"`
	Status   string          `json:"status"` // pending, processing, finished or failed
	Attempts int             `json:"attempts"`
	Progress json.RawMessage `json:"progress"` // the last accepted progress, or null
	Result   json.RawMessage `json:"result"`   // the result once finished, or null
	// Error is the code a failed task ended with: "timeout" (the queue
	// timeout), "attempts" (it came back after its last allowed attempt),
	// "failed" (a worker failed it), "cancelled", "corrupt".
	Error      *string `json:"error"`
	PostedAt   int64   `json:"postedAt"`
	UpdatedAt  int64   `json:"updatedAt"`
	FinishedAt *int64  `json:"finishedAt"`
	// NotBefore, when set, is when the task becomes claimable: from a
	// delayed post, or the backoff after it came back.
	NotBefore *int64 `json:"notBefore,omitempty"`
	// Priority is the post's priority; 0 (the default) is left out.
	Priority int `json:"priority,omitempty"`
	// Failure is the reason of the last give-back or of a worker's failure.
	Failure json.RawMessage `json:"failure,omitempty"`
}

// Terminal reports whether the task is finished or failed: nothing changes
// it any more.
func (v View) Terminal() bool { return v.Status == "finished" || v.Status == "failed" }

// Lease says which worker holds a processing task and until when (Unix ms).
type Lease struct {
	Worker string `json:"worker"`
	Until  int64  `json:"until"`
}

// Ack is the server's answer to a progress report, a heartbeat, a result,
// a give-back or a failure.
type Ack struct {
	// Accepted is false when the report came too late: the task is terminal
	// (a result, a failure), or no longer processing under this worker
	// (progress, heartbeat, release).
	Accepted bool `json:"accepted"`
	// Status is the task's status when not accepted; for an accepted
	// release, the status it went to: "pending", or "failed" after its
	// last allowed attempt (error "attempts").
	Status string `json:"status,omitempty"`
	// Lease is the extended lease after accepted progress or a heartbeat.
	Lease *Lease `json:"lease,omitempty"`
}

// PostOption asks more of a post than its item (SPEC §11, §12).
type PostOption func(*postOptions)

// postOptions are a post's query parameters and headers.
type postOptions struct {
	query url.Values
	key   string // the Idempotency-Key header; "" for none
}

func newPostOptions(opts []PostOption) postOptions {
	p := postOptions{query: url.Values{}}
	for _, opt := range opts {
		opt(&p)
	}
	return p
}

// path is base with the options' query parameters.
func (p postOptions) path(base string) string {
	if len(p.query) == 0 {
		return base
	}
	return base + "?" + p.query.Encode()
}

// Delay makes the task claimable only d after the server took it
// (sent in seconds, to the millisecond; 0 to 365 days).
func Delay(d time.Duration) PostOption {
	return func(p *postOptions) { p.query.Set("delay", seconds(d)) }
}

// NotBefore makes the task claimable only from t on (sent as Unix
// milliseconds; the server's clock decides). Give Delay or NotBefore,
// not both.
func NotBefore(t time.Time) PostOption {
	return func(p *postOptions) { p.query.Set("notBefore", strconv.FormatInt(t.UnixMilli(), 10)) }
}

// Priority sets the task's priority, -1000 to 1000 (default 0): claims
// take the highest priority first, then the oldest.
func Priority(n int) PostOption {
	return func(p *postOptions) { p.query.Set("priority", strconv.Itoa(n)) }
}

// Key makes the post idempotent (SPEC §12): it is sent as the
// Idempotency-Key header (1 to 200 visible ASCII characters). The first
// post with k on a queue makes the task; a later one, while that task is
// kept, makes nothing and answers with the first task's id (Submit says
// which happened); a later one with a different item is a 409
// idempotency_conflict *Error. A batch takes no key (400).
func Key(k string) PostOption {
	return func(p *postOptions) { p.key = k }
}

// seconds writes d as a number of seconds, to the millisecond.
func seconds(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Round(time.Millisecond).Milliseconds())/1000, 'f', -1, 64)
}

// Post posts item (encoded with encoding/json; pass a json.RawMessage to
// send JSON text as is) to queue and returns the new task's id. It returns
// once the server has stored the task durably. Options delay it, give it
// a priority or an idempotency key (with Key, the id may be that of the
// task an earlier post with the key made; Submit tells the two apart); a
// bad option is the server's 400 invalid_request.
func (c *Client) Post(ctx context.Context, queue string, item any, opts ...PostOption) (string, error) {
	p, err := c.Submit(ctx, queue, item, opts...)
	return p.ID, err
}

// Posted is the server's answer to a post.
type Posted struct {
	ID     string `json:"id"`
	Status string `json:"status"` // the task's status now: "pending" for a new one
	// Created is true when this post made the task (201); false when an
	// earlier post with the same Key did (200), and this one made nothing.
	Created bool `json:"-"`
}

// Submit is Post with the whole answer: the task's id and status, and
// whether this post made it or an earlier one with the same Key did.
func (c *Client) Submit(ctx context.Context, queue string, item any, opts ...PostOption) (Posted, error) {
	p := newPostOptions(opts)
	var h http.Header
	if p.key != "" {
		h = http.Header{"Idempotency-Key": {p.key}}
	}
	// Encoded here, not by do: a nil item is the JSON null, where do
	// would send no body at all (400 invalid_json).
	raw, err := marshal(item)
	if err != nil {
		return Posted{}, fmt.Errorf("post to %s: %w", queue, err)
	}
	var posted Posted
	code, err := c.do(ctx, http.MethodPost, p.path("/"+url.PathEscape(queue)), h, raw, &posted)
	if err != nil {
		return Posted{}, fmt.Errorf("post to %s: %w", queue, err)
	}
	posted.Created = code == http.StatusCreated
	return posted, nil
}

// Status reads the status view of task id. Reading a finished or failed
// task for the first time marks it fetched, which may start its retention.
func (c *Client) Status(ctx context.Context, queue, id string) (View, error) {
	var v View
	if err := c.call(ctx, http.MethodGet, taskPath(queue, id), nil, &v); err != nil {
		return View{}, fmt.Errorf("status of %s/%s: %w", queue, id, err)
	}
	return v, nil
}

// ClaimRequest asks for a task over HTTP.
type ClaimRequest struct {
	// Worker names the lease holder; "" lets the server use the user's name.
	Worker string
	// Query, if not nil, is a JSON Schema the item must match.
	Query any
	// Wait is how long the server may hold the request for a task to
	// arrive (0 to 60 s; rounded to milliseconds).
	Wait time.Duration
}

// ErrNoTask is returned by Claim when no matching task arrived in time.
var ErrNoTask = errors.New("client: no task to claim")

// Claim leases the oldest pending task of queue that matches req.Query, or
// returns ErrNoTask when none arrived within req.Wait. The returned task's
// Progress method reports over HTTP.
func (c *Client) Claim(ctx context.Context, queue string, req ClaimRequest) (*Task, error) {
	body := map[string]any{"wait": req.Wait.Seconds()}
	if req.Worker != "" {
		body["worker"] = req.Worker
	}
	if req.Query != nil {
		body["query"] = req.Query
	}
	var claimed claim
	err := c.call(ctx, http.MethodPost, "/"+url.PathEscape(queue)+"/claim", body, &claimed)
	switch {
	case errors.Is(err, errNoContent):
		return nil, ErrNoTask
	case err != nil:
		return nil, fmt.Errorf("claim from %s: %w", queue, err)
	}
	t := claimed.task(queue)
	t.report = httpReporter{c: c, queue: queue, worker: t.Lease.Worker, attempt: t.Attempts}
	return t, nil
}

// Progress reports progress on task id for worker, which must hold its
// lease; an accepted report extends the lease.
func (c *Client) Progress(ctx context.Context, queue, id, worker string, progress any) (Ack, error) {
	return c.report(ctx, queue, id, "progress", worker, progress)
}

// Result hands in the result of task id. It is accepted whenever the task
// is not yet finished or failed, whoever holds the lease: the first result
// wins, and Ack.Accepted is false for any later one.
func (c *Client) Result(ctx context.Context, queue, id, worker string, result any) (Ack, error) {
	return c.report(ctx, queue, id, "result", worker, result)
}

// Heartbeat extends the lease worker holds on task id to now + the queue's
// leaseSeconds, without a progress record. Ack.Accepted is false when
// worker does not hold the lease (any more), with the task's status.
func (c *Client) Heartbeat(ctx context.Context, queue, id, worker string) (Ack, error) {
	return c.send(ctx, queue, id, "heartbeat", worker, map[string]any{})
}

// Release gives task id back, at the request of worker, which must hold
// its lease: it is pending again, claimable after the larger of delay and
// the queue's retry backoff, or, after its last allowed attempt, failed
// with error "attempts" (Ack.Status says which). reason (any JSON value, or
// nil for none; checked against the queue's failure schema) is kept in the
// task's failure field.
func (c *Client) Release(ctx context.Context, queue, id, worker string, delay time.Duration, reason any) (Ack, error) {
	body := map[string]any{}
	if delay > 0 {
		body["delay"] = json.Number(seconds(delay))
	}
	return c.withReason(ctx, queue, id, "release", worker, body, reason)
}

// Fail ends task id for good: failed with error "failed" and reason (any
// JSON value, or nil for none) as its failure. Like a result it is accepted
// whenever the task is not yet finished or failed, whoever holds the lease;
// the first of a result and a failure wins.
func (c *Client) Fail(ctx context.Context, queue, id, worker string, reason any) (Ack, error) {
	return c.withReason(ctx, queue, id, "fail", worker, map[string]any{}, reason)
}

func (c *Client) withReason(ctx context.Context, queue, id, kind, worker string, body map[string]any, reason any) (Ack, error) {
	if reason != nil {
		raw, err := marshal(reason)
		if err != nil {
			return Ack{}, fmt.Errorf("%s of %s/%s: reason: %w", kind, queue, id, err)
		}
		body["reason"] = raw
	}
	return c.send(ctx, queue, id, kind, worker, body)
}

func (c *Client) report(ctx context.Context, queue, id, kind, worker string, value any) (Ack, error) {
	raw, err := marshal(value)
	if err != nil {
		return Ack{}, fmt.Errorf("%s of %s/%s: %w", kind, queue, id, err)
	}
	return c.send(ctx, queue, id, kind, worker, map[string]any{kind: raw})
}

// send posts body, with the worker's name added, to the task's kind path
// and decodes the Ack.
func (c *Client) send(ctx context.Context, queue, id, kind, worker string, body map[string]any) (Ack, error) {
	if worker != "" {
		body["worker"] = worker
	}
	var ack Ack
	if err := c.call(ctx, http.MethodPost, taskPath(queue, id)+"/"+kind, body, &ack); err != nil {
		return Ack{}, fmt.Errorf("%s of %s/%s: %w", kind, queue, id, err)
	}
	return ack, nil
}

// errNoContent is how call reports a 204, which only claims expect.
var errNoContent = errors.New("no content")

// call sends one request with a JSON body (unless in is nil) and decodes a
// 2xx JSON answer into out; any other answer becomes a *Error.
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	_, err := c.do(ctx, method, path, nil, in, out)
	return err
}

// do is call with extra request headers, and says which 2xx status came.
func (c *Client) do(ctx context.Context, method, path string, header http.Header, in, out any) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	var body io.Reader
	if in != nil {
		data, err := marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(data)
	}
	addr, err := c.url("http", path)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, method, addr, body)
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	c.authorize(req.Header)
	req.Host = c.host
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err // already names the method and URL
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNoContent:
		return resp.StatusCode, errNoContent
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return resp.StatusCode, decodeError(resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: decode the answer: %w", method, path, err)
	}
	return resp.StatusCode, nil
}

// url is the address of the escaped path on the server, with scheme
// http(s) or, for scheme "ws", ws(s). A path with an empty, "." or ".."
// segment is refused: it comes from a queue name or task id that cannot
// be one (url.PathEscape leaves dots alone). An empty id would make
// Status read GET /{queue}/, the queue's own page, as an empty view
// without an error; ".." would climb to another path wherever one is
// cleaned on the way (a proxy, a ServeMux's redirect), so that Retry of
// id ".." could post {} to a queue named "retry".
func (c *Client) url(scheme, path string) (string, error) {
	segments, _, _ := strings.Cut(path, "?")
	for _, s := range strings.Split(strings.TrimPrefix(segments, "/"), "/") {
		if s == "" || s == "." || s == ".." {
			return "", fmt.Errorf("client: %s: a queue name or task id is empty, \".\" or \"..\"", path)
		}
	}
	u := *c.base
	if scheme == "ws" {
		u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	}
	return u.String() + path, nil
}

func (c *Client) authorize(h http.Header) {
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
}

func taskPath(queue, id string) string {
	return "/" + url.PathEscape(queue) + "/" + url.PathEscape(id)
}

// marshal encodes v as JSON. A json.RawMessage is checked and compacted
// rather than trusted, so malformed text fails here, not on the server.
func marshal(v any) (json.RawMessage, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode as JSON: %w", err)
	}
	return data, nil
}

// claim is a task as the server hands it out, over HTTP and the socket.
type claim struct {
	ID       string          `json:"id"`
	Item     json.RawMessage `json:"item"`
	Attempts int             `json:"attempts"`
	Lease    *Lease          `json:"lease"`
}

func (cl claim) task(queue string) *Task {
	t := &Task{ID: cl.ID, Queue: queue, Item: cl.Item, Attempts: cl.Attempts}
	if cl.Lease != nil {
		t.Lease = *cl.Lease
	}
	return t
}
