// Package logclient reads a server's event log and payload archive over its
// log API (SPEC §8): the day files, their lines from a byte offset, and the
// archived bodies. It is what `logs pull` mirrors from.
package logclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// maxPayload bounds one archived body. The server holds a body to its
// queue's maxItemBytes, but progress.jsonl grows by one progress per line;
// this stops a broken or hostile server from filling the mirror's memory.
const maxPayload = 256 << 20

// maxError bounds the error body read for a message.
const maxError = 64 << 10

// Client talks to one host of one server with one user's token.
type Client struct {
	base  *url.URL
	host  string // the Host header; "" sends the URL's host
	token string
	http  *http.Client
}

// New makes a client of server (a base URL such as http://127.0.0.1:8080).
// host, if not empty, is the Host header to send, which picks the host
// folder. hc is the HTTP client to use (nil: http.DefaultClient).
func New(server, host, token string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(server)
	if err != nil {
		return nil, fmt.Errorf("server URL %q: %w", server, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server URL %q: want http://HOST[:PORT] or https://HOST[:PORT]", server)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return &Client{base: u, host: host, token: token, http: hc}, nil
}

// Host is the host the server is asked for: the Host header sent.
func (c *Client) Host() string {
	if c.host != "" {
		return c.host
	}
	return c.base.Host
}

// Days lists the server's day files for this host: GET /_logs/tasks.
func (c *Client) Days(ctx context.Context) ([]tasklog.Day, error) {
	resp, err := c.get(ctx, "/_logs/tasks")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var days []tasklog.Day
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&days); err != nil {
		return nil, fmt.Errorf("list day files: %w", err)
	}
	for _, d := range days {
		if !tasklog.ValidDay(d.Day) || d.Size < 0 {
			return nil, fmt.Errorf("list day files: the server listed a bad day file %q (size %d)", d.Day, d.Size)
		}
	}
	return days, nil
}

// Lines reads day's lines from byte offset: GET /_logs/tasks/{day}?offset=N.
// It returns the answer's body, whole newline-ended JSON lines that the
// caller reads and closes, and the offset to ask from next time
// (X-Next-Offset). A day the server no longer has (pruned) is an error of
// KindNotFound.
func (c *Client) Lines(ctx context.Context, day string, offset int64) (io.ReadCloser, int64, error) {
	if !tasklog.ValidDay(day) {
		return nil, 0, fmt.Errorf("read day file %q: not a day", day)
	}
	resp, err := c.get(ctx, "/_logs/tasks/"+day+"?offset="+strconv.FormatInt(offset, 10))
	if err != nil {
		return nil, 0, fmt.Errorf("read day file %s: %w", day, err)
	}
	next, err := strconv.ParseInt(resp.Header.Get("X-Next-Offset"), 10, 64)
	if err != nil || next < offset {
		resp.Body.Close()
		return nil, 0, fmt.Errorf("read day file %s: bad X-Next-Offset %q after offset %d",
			day, resp.Header.Get("X-Next-Offset"), offset)
	}
	return resp.Body, next, nil
}

// Payload fetches an archived body: GET /_logs/payloads/{queue}/{id}/{file}.
// A body the server does not have (aged out) is an error of KindNotFound;
// one over maxPayload is KindTooLarge, told by its Content-Length before
// any of it is read when the server sends one, so the caller can skip it.
func (c *Client) Payload(ctx context.Context, queue, id, file string) ([]byte, error) {
	if !domain.ValidName(queue) || !domain.ValidID(id) || !tasklog.ValidPayloadFile(file) {
		return nil, fmt.Errorf("fetch payload %s/%s/%s: not a payload name", queue, id, file)
	}
	resp, err := c.get(ctx, "/_logs/payloads/"+queue+"/"+id+"/"+file)
	if err != nil {
		return nil, fmt.Errorf("fetch payload %s of %s: %w", file, id, err)
	}
	defer resp.Body.Close()
	if resp.ContentLength > maxPayload {
		return nil, payloadTooLarge(file, id)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPayload+1))
	if err != nil {
		return nil, fmt.Errorf("fetch payload %s of %s: %w", file, id, err)
	}
	if len(body) > maxPayload {
		return nil, payloadTooLarge(file, id)
	}
	return body, nil
}

// payloadTooLarge is a body this client will not hold. It is a domain error
// of its own kind because it is no failure of the server: it stays too
// large, so a pull that stopped on it would stop on it every time.
func payloadTooLarge(file, id string) error {
	return &domain.Error{Kind: domain.KindTooLarge, Code: domain.CodeTooLarge,
		Message: fmt.Sprintf("fetch payload %s of %s: larger than %d bytes", file, id, maxPayload)}
}

// get sends an authenticated GET and returns a 200 answer; any other status
// is an error whose Kind follows the status (404 is KindNotFound), with
// the server's error code and message.
func (c *Client) get(ctx context.Context, pathQuery string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base.String()+pathQuery, nil)
	if err != nil {
		return nil, err
	}
	if c.host != "" {
		req.Host = c.host
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, statusError(resp)
}

// statusError turns a refusal into a domain.Error, keeping the server's code
// and message (SPEC §3: {"error", "message"}).
func statusError(resp *http.Response) error {
	var body struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxError))
	if json.Unmarshal(data, &body) != nil || body.Error == "" {
		body.Error = strings.ToLower(strings.ReplaceAll(http.StatusText(resp.StatusCode), " ", "_"))
		body.Message = strings.TrimSpace(string(data))
	}
	kind := domain.KindInternal
	switch resp.StatusCode {
	case http.StatusBadRequest:
		kind = domain.KindInvalid
	case http.StatusUnauthorized:
		kind = domain.KindUnauthorized
	case http.StatusForbidden:
		kind = domain.KindForbidden
	case http.StatusNotFound, http.StatusGone:
		kind = domain.KindNotFound
	case http.StatusServiceUnavailable:
		kind = domain.KindUnavailable
	}
	msg := fmt.Sprintf("(HTTP %d)", resp.StatusCode)
	if body.Message != "" {
		msg = body.Message + " " + msg
	}
	return &domain.Error{Kind: kind, Code: domain.Code(body.Error), Message: msg}
}
