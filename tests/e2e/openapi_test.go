package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/santhosh-tekuri/jsonschema/v5"
)

// The OpenAPI document (adapters/httpapi/openapi.json) against the running
// server: every operation is called, for a success and for errors, and every
// reply must be one the document lists for that operation, with a body its
// schema accepts. The router side (every route documented, and no other) is
// adapters/httpapi/openapi_test.go.

// openapiUsers have one action each on the queue acl, to check what the
// document says each operation needs.
var openapiUsers = map[string]struct{ action, token string }{
	"pu": {"post", "50500000000000000000000000000001"},
	"su": {"status", "50500000000000000000000000000002"},
	"wu": {"work", "50500000000000000000000000000003"},
	"lu": {"logs", "50500000000000000000000000000004"},
	"mu": {"manage", "50500000000000000000000000000005"},
}

// openapiQueues adds the queues of this test: api, where alice may do
// everything, and acl, where each of openapiUsers may do one thing.
func openapiQueues(t *testing.T, d dirs) {
	t.Helper()
	base := filepath.Join(d.hosts, host)
	for name, u := range openapiUsers {
		writeFile(t, filepath.Join(base, "taskhoster-users", name+".json"), `{"name":"`+name+`","token":"`+u.token+`"}`)
	}
	writeFile(t, filepath.Join(base, "taskhoster-queues", "api.json"), `{
		"item": {"type": "object", "properties": {"width": {"type": "integer"}}},
		"progress": {"type": "object"}, "result": {"type": "object"}, "failure": {"type": "object"},
		"settings": {"maxItemBytes": 4096, "maxAttempts": 3, "taskhoster-archivePayloads": true},
		"access": {"post": ["alice"], "status": ["alice"], "work": ["alice"], "logs": ["alice"], "manage": ["alice"]}
	}`)
	writeFile(t, filepath.Join(base, "taskhoster-queues", "acl.json"), `{
		"item": {},
		"settings": {"taskhoster-archivePayloads": true},
		"access": {"post": ["pu"], "status": ["su"], "work": ["wu"], "logs": ["lu"], "manage": ["mu"]}
	}`)
}

// openapiDoc is the document as the server serves it, with its schemas
// compiled on first use, and what the test has seen of each operation.
type openapiDoc struct {
	t        *testing.T
	doc      map[string]any
	compiler *jsonschema.Compiler
	schemas  map[string]*jsonschema.Schema
	ops      []openapiOp
	seen     map[string][]int // operation → statuses seen
}

// openapiOp is one operation: its method, path template and object.
type openapiOp struct {
	method, path string
	segments     []string
	op           map[string]any
}

func (o openapiOp) key() string { return o.method + " " + o.path }

func loadOpenapi(t *testing.T, raw []byte) *openapiDoc {
	t.Helper()
	d := &openapiDoc{t: t, schemas: map[string]*jsonschema.Schema{}, seen: map[string][]int{}}
	if err := json.Unmarshal(raw, &d.doc); err != nil {
		t.Fatalf("the document is not JSON: %v", err)
	}
	d.compiler = jsonschema.NewCompiler()
	d.compiler.Draft = jsonschema.Draft2020
	if err := d.compiler.AddResource("openapi.json", bytes.NewReader(raw)); err != nil {
		t.Fatal(err)
	}
	for path, item := range d.doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			d.ops = append(d.ops, openapiOp{strings.ToUpper(method), path, strings.Split(path, "/"), op.(map[string]any)})
		}
	}
	sort.Slice(d.ops, func(i, j int) bool { return d.ops[i].key() < d.ops[j].key() })
	return d
}

// find is the operation a request is for: the path template that matches,
// literal segments winning over parameters (as OpenAPI says).
func (d *openapiDoc) find(method, path string) (openapiOp, bool) {
	parts := strings.Split(path, "/")
	best, bestLiterals := openapiOp{}, -1
	for _, o := range d.ops {
		if o.method != method || len(o.segments) != len(parts) {
			continue
		}
		literals, match := 0, true
		for i, seg := range o.segments {
			switch {
			case strings.HasPrefix(seg, "{"):
			case seg == parts[i]:
				literals++
			default:
				match = false
			}
		}
		if match && literals > bestLiterals {
			best, bestLiterals = o, literals
		}
	}
	return best, bestLiterals >= 0
}

// schema compiles the schema at pointer (a JSON pointer into the document).
func (d *openapiDoc) schema(pointer string) *jsonschema.Schema {
	d.t.Helper()
	if s, ok := d.schemas[pointer]; ok {
		return s
	}
	s, err := d.compiler.Compile("openapi.json#" + pointer)
	if err != nil {
		d.t.Fatalf("compile %s: %v", pointer, err)
	}
	d.schemas[pointer] = s
	return s
}

// at is the value at a JSON pointer, following a $ref there; it returns the
// pointer it ended at.
func (d *openapiDoc) at(pointer string) (map[string]any, string) {
	var v any = d.doc
	for _, part := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		m, _ := v.(map[string]any)
		v = m[strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")]
	}
	m, _ := v.(map[string]any)
	if ref, ok := m["$ref"].(string); ok {
		return d.at(strings.TrimPrefix(ref, "#"))
	}
	return m, pointer
}

func escape(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1") }

func (o openapiOp) pointer() string {
	return "/paths/" + escape(o.path) + "/" + strings.ToLower(o.method)
}

// check holds one reply to what the document says of its operation: a
// status it lists, the headers it requires, a content type it lists and a
// body its schema accepts (each line, for JSON lines). A request that
// succeeded must also have had a body the document allows.
func (d *openapiDoc) check(method, path, reqBody string, r response) {
	d.t.Helper()
	path, _, _ = strings.Cut(path, "?")
	o, ok := d.find(method, path)
	if !ok {
		d.t.Errorf("%s %s: no operation in the document", method, path)
		return
	}
	d.seen[o.key()] = append(d.seen[o.key()], r.Status)
	what := fmt.Sprintf("%s %s (%s) answered %d %s", method, path, o.key(), r.Status, r.Body)
	reply, pointer := d.at(o.pointer() + "/responses/" + strconv.Itoa(r.Status))
	if reply == nil {
		d.t.Errorf("%s: a status the document does not list", what)
		return
	}
	headers, _ := reply["headers"].(map[string]any)
	for name, h := range headers {
		if req, _ := h.(map[string]any)["required"].(bool); req && r.Header.Get(name) == "" {
			d.t.Errorf("%s: no %s header", what, name)
		}
	}
	content, _ := reply["content"].(map[string]any)
	if content == nil {
		if len(r.Body) > 0 && r.Status < 300 {
			d.t.Errorf("%s: a body where the document has none", what)
		}
	} else {
		media, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		entry, ok := content[media].(map[string]any)
		if !ok {
			d.t.Errorf("%s: content type %q is not one the document lists", what, media)
			return
		}
		s := d.schema(pointer + "/content/" + escape(media) + "/schema")
		values := [][]byte{r.Body}
		if perLine, _ := entry["x-taskhoster-per-line"].(bool); perLine {
			values = bytes.SplitAfter(r.Body, []byte("\n"))
			values = slices.DeleteFunc(values, func(b []byte) bool { return len(bytes.TrimSpace(b)) == 0 })
		}
		for _, v := range values {
			d.validate(what, s, v)
		}
	}
	if r.Status < 300 && reqBody != "" {
		if _, ok := o.op["requestBody"]; ok {
			d.validate(what+", its request "+reqBody, d.schema(o.pointer()+"/requestBody/content/application~1json/schema"), []byte(reqBody))
		}
	}
}

// validate checks one JSON value against s.
func (d *openapiDoc) validate(what string, s *jsonschema.Schema, raw []byte) {
	d.t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		d.t.Errorf("%s: not JSON: %v", what, err)
		return
	}
	if err := s.Validate(v); err != nil {
		d.t.Errorf("%s: the document's schema refuses it: %#v", what, err)
	}
}

// component validates a value against a schema of the components.
func (d *openapiDoc) component(what, name string, raw []byte) {
	d.t.Helper()
	d.validate(what, d.schema("/components/schemas/"+name), raw)
}

// openapiClient makes requests to the server under test and checks every
// reply against the document.
type openapiClient struct {
	s   *server
	doc *openapiDoc
}

func (c openapiClient) do(method, path, token, body string, header ...string) response {
	c.s.t.Helper()
	h := http.Header{}
	for i := 0; i+1 < len(header); i += 2 {
		h.Add(header[i], header[i+1])
	}
	r := c.s.doHeader(method, path, host, token, body, h)
	c.doc.check(method, path, body, r)
	return r
}

// dial opens a socket at path as the holder of token and checks the
// upgrade's answer; conn is nil when it was refused.
func (c openapiClient) dial(path, token string) (*websocket.Conn, response) {
	c.s.t.Helper()
	h := http.Header{"Host": {host}}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	conn, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(c.s.url, "http")+path, h)
	if resp == nil {
		c.s.t.Fatalf("dial %s: %v", path, err)
	}
	body, _ := io.ReadAll(resp.Body)
	r := response{Status: resp.StatusCode, Header: resp.Header, Body: body}
	c.doc.check("GET", path, "", r)
	if conn != nil {
		c.s.t.Cleanup(func() { _ = conn.Close() })
	}
	return conn, r
}

// TestOpenAPIReplies calls every operation of the document on the running
// server and checks each reply against it.
func TestOpenAPIReplies(t *testing.T) {
	d := newDirs(t)
	openapiQueues(t, d)
	s := start(t, d)

	served := s.do("GET", "/_openapi.json", "", "")
	inRepo, err := os.ReadFile(filepath.Join("..", "..", "adapters", "httpapi", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	if served.Status != http.StatusOK || !bytes.Equal(served.Body, inRepo) {
		t.Fatalf("GET /_openapi.json: %d, %d bytes; want 200 and the %d bytes of adapters/httpapi/openapi.json", served.Status, len(served.Body), len(inRepo))
	}
	doc := loadOpenapi(t, served.Body)
	c := openapiClient{s: s, doc: doc}
	doc.check("GET", "/_openapi.json", "", served)

	// One after the other on one t (no subtests): the harness and the
	// document's checks report to the t they were made with.
	openapiHost(t, c)
	openapiTasks(t, c)
	openapiSockets(t, c)
	openapiLogs(t, c)
	openapiActions(t, c)

	// Every operation answered at least one success and one client error.
	for _, o := range doc.ops {
		statuses := doc.seen[o.key()]
		okSeen := slices.ContainsFunc(statuses, func(s int) bool { return s < 300 })
		errSeen := slices.ContainsFunc(statuses, func(s int) bool { return s >= 400 && s < 500 })
		hostless := o.path == "/_health" || o.path == "/_openapi.json"
		if !okSeen || (!errSeen && !hostless) {
			t.Errorf("%s: statuses seen %v, want a success and a client error", o.key(), statuses)
		}
	}
}

func openapiHost(t *testing.T, c openapiClient) {
	c.do("GET", "/_health", "", "").want(t, "health", 200, "")
	c.do("GET", "/", "", "").want(t, "host info", 200, "")
	r := c.s.doHost("GET", "/", "nosuch.example.com", "", "")
	c.doc.check("GET", "/", "", r)
	r.want(t, "unknown host", 404, "unknown_host")

	c.do("GET", "/api", aliceToken, "").want(t, "queue info", 200, "")
	c.do("GET", "/api", "", "").want(t, "queue info, no token", 401, "unauthorized")
	c.do("GET", "/api", eveToken, "").want(t, "queue info, eve", 403, "forbidden")
	c.do("GET", "/nosuch", aliceToken, "").want(t, "unknown queue", 404, "unknown_queue")

	// Any other method on a known path: 405 with the error body.
	r = c.s.do("PUT", "/api/claim", aliceToken, "{}")
	r.want(t, "PUT /api/claim", 405, "method_not_allowed")
	c.doc.component("PUT /api/claim", "Error", r.Body)
}

func openapiTasks(t *testing.T, c openapiClient) {
	const a = aliceToken
	post := func(item string, header ...string) string {
		t.Helper()
		r := c.do("POST", "/api", a, item, header...)
		if r.Status != 201 {
			t.Fatalf("post %s: %d %s", item, r.Status, r.Body)
		}
		return r.JSON(t)["id"].(string)
	}
	id := post(`{"width": 1}`)
	post(`{"width": 2}`, "Idempotency-Key", "k1")
	c.do("POST", "/api", a, `{"width": 2}`, "Idempotency-Key", "k1").want(t, "idempotent repeat", 200, "")
	c.do("POST", "/api", a, `{"width": 3}`, "Idempotency-Key", "k1").want(t, "key reused", 409, "idempotency_conflict")
	c.do("POST", "/api", a, `{"width": "x"}`).want(t, "invalid item", 422, "invalid_item")
	c.do("POST", "/api", a, `{`).want(t, "invalid JSON", 400, "invalid_json")
	c.do("POST", "/api?priority=5000", a, `{}`).want(t, "bad priority", 400, "invalid_request")
	c.do("POST", "/api", a, `{"pad": "`+strings.Repeat("x", 5000)+`"}`).want(t, "too large", 413, "too_large")
	c.do("POST", "/api?delay=0.5&priority=3", a, `{"width": 4}`).want(t, "delayed post", 201, "")

	c.do("POST", "/api/batch", a, `{"items": [{}, {"width": 5}]}`).want(t, "batch", 201, "")
	c.do("POST", "/api/batch", a, `{"items": [{"width": "x"}]}`).want(t, "batch, invalid item", 422, "invalid_item")
	c.do("POST", "/api/batch", a, `{}`).want(t, "batch without items", 400, "invalid_request")

	c.do("GET", "/api/"+id, a, "").want(t, "status", 200, "")
	c.do("GET", "/api/ffffffffffffffff", a, "").want(t, "status of no task", 404, "not_found")

	// Claims: one, then two at once; a bad query; none left.
	r := c.do("POST", "/api/claim", a, `{"worker": "w1"}`)
	r.want(t, "claim", 200, "")
	claimed := r.JSON(t)["id"].(string)
	r = c.do("POST", "/api/claim", a, `{"worker": "w1", "max": 2, "query": {"type": "object"}}`)
	r.want(t, "batch claim", 200, "")
	var batch struct{ Tasks []struct{ ID string } }
	_ = json.Unmarshal(r.Body, &batch)
	if len(batch.Tasks) != 2 {
		t.Fatalf("batch claim: %s", r.Body)
	}
	c.do("POST", "/api/claim", a, `{"query": {"type": 5}}`).want(t, "invalid query", 400, "invalid_query")
	c.do("POST", "/api/claim", a, `{"wait": 99}`).want(t, "wait out of range", 400, "invalid_request")

	// The lease holder's calls.
	task := "/api/" + claimed
	c.do("POST", task+"/progress", a, `{"worker": "w1", "progress": {"percent": 5}}`).want(t, "progress", 200, "")
	c.do("POST", task+"/progress", a, `{"worker": "w1", "progress": 5}`).want(t, "invalid progress", 422, "invalid_progress")
	c.do("POST", task+"/progress", a, `{"worker": "w1"}`).want(t, "progress without progress", 400, "invalid_request")
	c.do("POST", task+"/progress", a, `{"worker": "other", "progress": {}}`).want(t, "progress by another worker", 200, "")
	c.do("POST", task+"/heartbeat", a, `{"worker": "w1"}`).want(t, "heartbeat", 200, "")
	c.do("POST", task+"/heartbeat", a, `{`).want(t, "heartbeat, bad JSON", 400, "invalid_json")
	c.do("POST", task+"/release", a, `{"worker": "w1", "reason": 5}`).want(t, "invalid reason", 422, "invalid_failure")
	c.do("POST", task+"/release", a, `{"worker": "w1", "delay": 0, "reason": {"why": "busy"}}`).want(t, "release", 200, "")
	c.do("POST", task+"/release", a, `{"worker": "w1"}`).want(t, "release, not held", 200, "")

	first, second := "/api/"+batch.Tasks[0].ID, "/api/"+batch.Tasks[1].ID
	c.do("POST", first+"/result", a, `{"worker": "w1", "result": 5}`).want(t, "invalid result", 422, "invalid_result")
	c.do("POST", first+"/result", a, `{"worker": "w1", "result": {"ok": true}}`).want(t, "result", 200, "")
	c.do("POST", first+"/result", a, `{"worker": "w1", "result": {}}`).want(t, "result, terminal", 200, "")
	c.do("POST", first+"/result", a, `{"worker": "w1", "result": {"pad": "`+strings.Repeat("x", 70<<10)+`"}}`).want(t, "result too large", 413, "too_large")
	c.do("POST", second+"/fail", a, `{"worker": "w1", "reason": 5}`).want(t, "invalid failure", 422, "invalid_failure")
	c.do("POST", second+"/fail", a, `{"worker": "w1", "reason": {"why": "broken"}}`).want(t, "fail", 200, "")
	c.do("POST", second+"/fail", a, `{"worker": "w1"}`).want(t, "fail, terminal", 200, "")
	c.do("POST", "/api/ffffffffffffffff/result", a, `{"result": {}}`).want(t, "result of no task", 404, "not_found")

	// Operating the queue.
	c.do("DELETE", "/api/"+id, a, "").want(t, "cancel", 200, "")
	c.do("DELETE", "/api/"+id, a, "").want(t, "cancel, terminal", 200, "")
	c.do("GET", "/api/"+id, a, "").want(t, "status of a cancelled task", 200, "")
	c.do("POST", "/api/"+id+"/retry", a, "").want(t, "retry", 200, "")
	c.do("POST", "/api/"+id+"/retry", a, "").want(t, "retry, not failed", 409, "not_failed")
	c.do("GET", "/api/tasks?status=failed&order=newest&limit=10", a, "").want(t, "list", 200, "")
	r = c.do("GET", "/api/tasks?limit=1", a, "")
	r.want(t, "list, first page", 200, "")
	if next, _ := r.JSON(t)["next"].(string); next == "" {
		t.Errorf("list of one of several pending: no next cursor: %s", r.Body)
	} else {
		c.do("GET", "/api/tasks?limit=1&after="+next, a, "").want(t, "list, next page", 200, "")
	}
	c.do("GET", "/api/tasks?limit=0", a, "").want(t, "list, bad limit", 400, "invalid_request")
	c.do("GET", `/api/tasks?query={"type":`, a, "").want(t, "list, bad query", 400, "invalid_query")
	c.do("POST", "/api/purge?status=finished", a, "").want(t, "purge", 200, "")
	c.do("POST", "/api/purge", a, "").want(t, "purge without status", 400, "invalid_request")
	c.do("POST", "/api/pause", a, "").want(t, "pause", 200, "")
	c.do("POST", "/api/claim", a, `{"wait": 0}`).want(t, "claim while paused", 204, "")
	c.do("POST", "/api/resume", a, "").want(t, "resume", 200, "")
	c.do("POST", "/api/resume", "", "").want(t, "resume, no token", 401, "unauthorized")
	c.do("POST", "/api/pause", eveToken, "").want(t, "pause, eve", 403, "forbidden")
}

func openapiSockets(t *testing.T, c openapiClient) {
	const a = aliceToken
	// The worker socket: a claim answered by a task, a progress and a
	// result acknowledged, a malformed message answered with an error.
	conn, r := c.dial("/api/work?worker=ws1", a)
	r.want(t, "worker socket", 101, "")
	send := func(msg string) {
		t.Helper()
		c.doc.component("sent "+msg, "WorkerClientMessage", []byte(msg))
		if err := conn.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	next := func() map[string]any {
		t.Helper()
		k := &socket{t: t, c: conn}
		raw := k.nextRaw()
		c.doc.component("received "+raw, "WorkerServerMessage", []byte(raw))
		var m map[string]any
		_ = json.Unmarshal([]byte(raw), &m)
		return m
	}
	send(`{"type": "claim", "ref": 1, "query": {"required": ["socket"]}}`)
	id := c.do("POST", "/api", a, `{"socket": true}`).JSON(t)["id"].(string)
	if m := next(); m["type"] != "task" || m["id"] != id {
		t.Fatalf("want the task %s, got %v", id, m)
	}
	send(`{"type": "progress", "ref": 2, "id": "` + id + `", "progress": {"percent": 50}}`)
	if m := next(); m["type"] != "ack" || m["accepted"] != true {
		t.Errorf("progress: %v", m)
	}
	if err := conn.WriteMessage(websocket.TextMessage, []byte(`{"type": "nonsense", "ref": 3}`)); err != nil {
		t.Fatal(err)
	}
	if m := next(); m["type"] != "error" {
		t.Errorf("nonsense: %v", m)
	}
	send(`{"type": "heartbeat", "ref": 4, "id": "` + id + `"}`)
	if m := next(); m["type"] != "ack" {
		t.Errorf("heartbeat: %v", m)
	}

	// The watch socket of that task: views until the result, then 1000.
	watch, r := c.dial("/api/"+id+"/watch", a)
	r.want(t, "watch socket", 101, "")
	w := &socket{t: t, c: watch}
	raw := w.nextRaw()
	c.doc.component("watched "+raw, "StatusView", []byte(raw))
	send(`{"type": "result", "ref": 5, "id": "` + id + `", "result": {"done": true}}`)
	if m := next(); m["type"] != "ack" || m["accepted"] != true {
		t.Errorf("result: %v", m)
	}
	for range 10 { // a progress or two may come before the finished view
		raw = w.nextRaw()
		c.doc.component("watched "+raw, "StatusView", []byte(raw))
		if strings.Contains(raw, `"status":"finished"`) {
			break
		}
	}
	if code := w.closed(); code != websocket.CloseNormalClosure {
		t.Errorf("watch closed with %d, want 1000", code)
	}

	// Cancelled while held: the socket is told.
	send(`{"type": "claim", "ref": 6, "query": {"required": ["held"]}}`)
	held := c.do("POST", "/api", a, `{"held": true}`).JSON(t)["id"].(string)
	if m := next(); m["type"] != "task" || m["id"] != held {
		t.Fatalf("want the task %s, got %v", held, m)
	}
	c.do("DELETE", "/api/"+held, a, "").want(t, "cancel a held task", 200, "")
	if m := next(); m["type"] != "cancelled" || m["id"] != held {
		t.Errorf("want cancelled %s, got %v", held, m)
	}

	// Refused upgrades are HTTP errors the document lists.
	_, r = c.dial("/api/work", "")
	r.want(t, "worker socket, no token", 401, "unauthorized")
	_, r = c.dial("/api/work?worker=", a)
	r.want(t, "worker socket, empty worker", 400, "invalid_request")
	_, r = c.dial("/api/ffffffffffffffff/watch", a)
	r.want(t, "watch of no task", 404, "not_found")
	_, r = c.dial("/api/"+id+"/watch", eveToken)
	r.want(t, "watch, eve", 403, "forbidden")
}

func openapiLogs(t *testing.T, c openapiClient) {
	const a = aliceToken
	id := c.do("POST", "/api", a, `{"width": 7}`).JSON(t)["id"].(string)
	r := c.do("GET", "/_logs/tasks", a, "")
	r.want(t, "log days", 200, "")
	var days []struct{ Day string }
	_ = json.Unmarshal(r.Body, &days)
	if len(days) == 0 {
		t.Fatalf("no day files: %s", r.Body)
	}
	day := days[len(days)-1].Day
	r = c.do("GET", "/_logs/tasks/"+day+"?offset=0", a, "")
	r.want(t, "log lines", 200, "")
	if !bytes.Contains(r.Body, []byte(id)) {
		t.Errorf("the lines of %s do not name the task %s just posted", day, id)
	}
	c.do("GET", "/_logs/tasks/"+day+"?offset=1", a, "").want(t, "log lines from mid-line", 400, "invalid_offset")
	c.do("GET", "/_logs/tasks/"+day+"?offset=x", a, "").want(t, "log lines from x", 400, "invalid_offset")
	c.do("GET", "/_logs/tasks/2000-01-01", a, "").want(t, "log lines of no day", 404, "not_found")
	c.do("GET", "/_logs/tasks", "", "").want(t, "log days, no token", 401, "unauthorized")
	c.do("GET", "/_logs/tasks", eveToken, "").want(t, "log days, eve", 403, "forbidden")
	c.do("GET", "/_logs/tasks/"+day, eveToken, "").want(t, "log lines, eve", 403, "forbidden")

	payload := "/_logs/payloads/api/" + id
	r = c.do("GET", payload+"/item.json", a, "")
	r.want(t, "archived item", 200, "")
	if !bytes.Contains(r.Body, []byte(`"width":7`)) && !bytes.Contains(r.Body, []byte(`"width": 7`)) {
		t.Errorf("archived item: %s", r.Body)
	}
	c.do("GET", payload+"/result.json", a, "").want(t, "no archived result", 404, "not_found")
	c.do("GET", payload+"/item.json", eveToken, "").want(t, "archived item, eve", 403, "forbidden")
	c.do("GET", "/_logs/payloads/nosuch/"+id+"/item.json", a, "").want(t, "archive of no queue", 404, "unknown_queue")
}

// openapiActions checks x-taskhoster-action: on the queue acl, where each
// of openapiUsers has one action, every operation is refused with 403 to
// exactly the users whose action it does not list.
func openapiActions(t *testing.T, c openapiClient) {
	poster := openapiUsers["pu"].token
	r := c.do("POST", "/acl", poster, `{"n": 1}`)
	r.want(t, "post to acl", 201, "")
	id := r.JSON(t)["id"].(string)
	r = c.do("GET", "/_logs/tasks", openapiUsers["lu"].token, "")
	var days []struct{ Day string }
	_ = json.Unmarshal(r.Body, &days)
	if len(days) == 0 {
		t.Fatalf("no day files: %d %s", r.Status, r.Body)
	}
	fill := strings.NewReplacer("{queue}", "acl", "{id}", id, "{day}", days[len(days)-1].Day, "{file}", "item.json")
	bodies := map[string]string{
		"post": `{}`, "postBatch": `{"items": [{}]}`, "claim": `{}`, "progress": `{"progress": {}}`,
		"result": `{"result": {}}`, "heartbeat": `{}`, "release": `{}`, "fail": `{}`,
	}
	queries := map[string]string{"purge": "?status=finished"}

	names := make([]string, 0, len(openapiUsers))
	for name := range openapiUsers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, o := range c.doc.ops {
		actions, ok := o.op["x-taskhoster-action"].([]any)
		if !ok {
			continue
		}
		opID := o.op["operationId"].(string)
		path := fill.Replace(o.path) + queries[opID]
		socket := strings.HasSuffix(o.path, "/work") || strings.HasSuffix(o.path, "/watch")
		for _, name := range names {
			u := openapiUsers[name]
			allowed := slices.Contains(actions, any(u.action))
			var r response
			if socket {
				var conn *websocket.Conn
				conn, r = c.dial(path, u.token)
				if conn != nil {
					_ = conn.Close()
				}
			} else {
				r = c.do(o.method, path, u.token, bodies[opID])
			}
			if allowed == (r.Status == http.StatusForbidden) {
				t.Errorf("%s as %s (%s; the document lists %v): %d %s", o.key(), name, u.action, actions, r.Status, r.Body)
			}
		}
	}
}
