package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// api is a lean client of one queue: the requests the bench makes, with
// nothing between the wire and the clock (the client package retries and
// reconnects, which a measurement must not hide), over the bench's own
// wire (wire.go).
type api struct {
	t     Target
	wire  *conns
	posts atomic.Int64 // for Target.Priorities
}

// newAPI returns a client of t; it keeps the connections its callers
// opened, so that no request but the first of each pays for a new TCP
// connection.
func newAPI(t Target) *api {
	return &api{t: t, wire: newConns(t)}
}

func (a *api) close() { a.wire.close() }

func (a *api) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	return a.wire.do(ctx, method, path, body)
}

// post posts item and returns the new task's id.
func (a *api) post(ctx context.Context, item []byte) (string, error) {
	var created struct{ ID string }
	if err := a.create(ctx, "post", "", item, &created); err != nil {
		return "", err
	}
	if created.ID == "" {
		return "", errors.New("post: answer without an id")
	}
	return created.ID, nil
}

// postBatch posts items in one request (POST /{queue}/batch) and returns
// the new tasks' ids, in the items' order.
func (a *api) postBatch(ctx context.Context, items [][]byte) ([]string, error) {
	raw := make([]json.RawMessage, len(items))
	for i, it := range items {
		raw[i] = it
	}
	body, err := json.Marshal(map[string]any{"items": raw})
	if err != nil {
		return nil, err
	}
	var created struct{ IDs []string }
	if err := a.create(ctx, "batch post", "/batch", body, &created); err != nil {
		return nil, err
	}
	return created.IDs, nil
}

// create posts body to the queue's path plus sub (with a priority, for
// Target.Priorities), wants a 201 and reads its answer into out.
func (a *api) create(ctx context.Context, what, sub string, body []byte, out any) error {
	path := "/" + url.PathEscape(a.t.Queue) + sub
	if a.t.Priorities {
		path += "?priority=" + strconv.FormatInt(a.posts.Add(1)%11-5, 10)
	}
	code, data, err := a.do(ctx, http.MethodPost, path, body)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if code != http.StatusCreated {
		return fmt.Errorf("%s: HTTP %d %s", what, code, bytes.TrimSpace(data))
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s: answer %.200q: %w", what, data, err)
	}
	return nil
}

// counts reads the queue's task counts (GET /{queue}).
func (a *api) counts(ctx context.Context) (map[string]int, error) {
	code, data, err := a.do(ctx, http.MethodGet, "/"+url.PathEscape(a.t.Queue), nil)
	if err != nil {
		return nil, fmt.Errorf("queue info: %w", err)
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("queue info: HTTP %d %s", code, bytes.TrimSpace(data))
	}
	var info struct{ Counts map[string]int }
	if err := json.Unmarshal(data, &info); err != nil || info.Counts == nil {
		return nil, fmt.Errorf("queue info: answer %.200q", data)
	}
	return info.Counts, nil
}

// claimed is a task handed to a worker, over HTTP or the socket.
type claimed struct {
	Type     string          `json:"type"` // socket only
	Ref      int64           `json:"ref"`  // socket only
	ID       string          `json:"id"`
	Item     json.RawMessage `json:"item"`
	Accepted bool            `json:"accepted"` // an ack
	Error    string          `json:"error"`
	Message  string          `json:"message"`
}

// claim asks over HTTP for a task matching query (nil: any), waiting up to
// wait; ok is false on 204.
func (a *api) claim(ctx context.Context, worker string, query json.RawMessage, wait time.Duration) (c claimed, ok bool, err error) {
	body, _ := json.Marshal(map[string]any{"worker": worker, "query": query, "wait": wait.Seconds()})
	if query == nil {
		body, _ = json.Marshal(map[string]any{"worker": worker, "wait": wait.Seconds()})
	}
	code, data, err := a.do(ctx, http.MethodPost, "/"+url.PathEscape(a.t.Queue)+"/claim", body)
	switch {
	case err != nil:
		return c, false, fmt.Errorf("claim: %w", err)
	case code == http.StatusNoContent:
		return c, false, nil
	case code != http.StatusOK:
		return c, false, fmt.Errorf("claim: HTTP %d %s", code, bytes.TrimSpace(data))
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, false, fmt.Errorf("claim: answer %q: %w", data, err)
	}
	return c, true, nil
}

// resultBody is what every bench worker hands in.
var resultBody = json.RawMessage(`{"ok":true}`)

// result hands in the result of task id over HTTP.
func (a *api) result(ctx context.Context, id, worker string) (bool, error) {
	body, _ := json.Marshal(map[string]any{"worker": worker, "result": resultBody})
	code, data, err := a.do(ctx, http.MethodPost, "/"+url.PathEscape(a.t.Queue)+"/"+id+"/result", body)
	if err != nil {
		return false, fmt.Errorf("result: %w", err)
	}
	if code != http.StatusOK {
		return false, fmt.Errorf("result: HTTP %d %s", code, bytes.TrimSpace(data))
	}
	var ack claimed
	if err := json.Unmarshal(data, &ack); err != nil {
		return false, fmt.Errorf("result: answer %q: %w", data, err)
	}
	return ack.Accepted, nil
}

// dial opens the worker socket as worker.
func (a *api) dial(ctx context.Context, worker string) (socket, error) {
	u := "ws" + strings.TrimPrefix(a.t.URL, "http") + "/" + url.PathEscape(a.t.Queue) + "/work?worker=" + url.QueryEscape(worker)
	h := http.Header{"Host": {a.t.Host}} // gorilla sends this as the Host
	if a.t.Token != "" {
		h.Set("Authorization", "Bearer "+a.t.Token)
	}
	var wire *corked
	d := websocket.Dialer{
		HandshakeTimeout: 10 * time.Second,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			wire = &corked{Conn: c}
			return wire, nil
		},
	}
	c, resp, err := d.DialContext(ctx, u, h)
	if err != nil {
		if resp != nil {
			return socket{}, fmt.Errorf("dial worker socket: %w (HTTP %d)", err, resp.StatusCode)
		}
		return socket{}, fmt.Errorf("dial worker socket: %w", err)
	}
	return socket{c, wire}, nil
}

// socketClaim and socketResult are the two messages a bench worker sends.
func socketClaim(ref int64, query json.RawMessage) []byte {
	if query == nil {
		return fmt.Appendf(nil, `{"type":"claim","ref":%d}`, ref)
	}
	return fmt.Appendf(nil, `{"type":"claim","ref":%d,"query":%s}`, ref, query)
}

func socketResult(ref int64, id string) []byte {
	return fmt.Appendf(nil, `{"type":"result","ref":%d,"id":%q,"result":%s}`, ref, id, resultBody)
}

// readMsg reads one socket message.
func readMsg(c socket) (claimed, error) {
	var m claimed
	_, data, err := c.ReadMessage()
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("socket message %q: %w", data, err)
	}
	if m.Type == "error" {
		return m, fmt.Errorf("socket error %s: %s", m.Error, m.Message)
	}
	return m, nil
}

// item is a bench task's item: its sequence number, padded to about size
// bytes. kind lets the depth bench tell fillers from the task it claims.
func item(seq int, kind string, size int) []byte {
	head := fmt.Sprintf(`{"seq":%d,"kind":%q,"pad":"`, seq, kind)
	pad := max(size-len(head)-2, 0)
	return []byte(head + strings.Repeat("x", pad) + `"}`)
}

// seqOf reads the sequence number back from an item.
func seqOf(raw json.RawMessage) (int, error) {
	var it struct {
		Seq *int `json:"seq"`
	}
	if err := json.Unmarshal(raw, &it); err != nil || it.Seq == nil {
		return 0, fmt.Errorf("item %.80q is not a bench item", raw)
	}
	return *it.Seq, nil
}
