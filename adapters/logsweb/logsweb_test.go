package logsweb_test

import (
	"context"
	"errors"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/adapters/logsweb"
	"github.com/taskhoster/taskhoster/adapters/sqlitelogs"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

const (
	host  = "task.example.com"
	queue = "resize"
	idA   = "9f2c1a0b7d4e6f83"
	idB   = "3a71bd0c5e2f9481"
	// evil is a worker name a server's user could pick.
	evil = `<script>alert("x")</script>`
)

// t0 is the time of the fixtures' first line.
var t0 = time.Date(2026, 7, 26, 9, 0, 0, 0, time.UTC)

// mk is a line of day file 2026-07-26 at offset off, t0 + off seconds.
func mk(off int64, id string, ev domain.EventKind, worker string, b tasklog.Sizes, archived ...string) tasklog.Line {
	at := t0.Add(time.Duration(off) * time.Second)
	return tasklog.Line{
		Key: tasklog.Key{Source: host, Day: "2026-07-26", Offset: off},
		T:   at.Unix(), At: at, Host: host, Queue: queue, ID: id, Event: ev, Status: domain.Processing,
		Attempts: 1, Worker: worker, Bytes: b, Archived: archived, Raw: "{}",
	}
}

// mirror is a store holding lines, opened for reading as logs serve opens
// it. fetch, if not nil, stores (or not) each payload the lines archived.
func mirror(t testing.TB, lines []tasklog.Line, fetch func(w *sqlitelogs.Store, ref tasklog.PayloadRef) error) *sqlitelogs.Store {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	w, err := sqlitelogs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(ctx, host, "2026-07-26", tasklog.Cursor{Offset: 1000}, lines); err != nil {
		t.Fatal(err)
	}
	refs, err := w.Wanted(ctx, host)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		if fetch == nil {
			break
		}
		if err := fetch(w, ref); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := sqlitelogs.OpenReader(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// fixture is a mirror with two tasks: A's whole trail with archived
// payloads (one not fetched), and B posted and claimed by an evil name.
func fixture(t testing.TB) *sqlitelogs.Store {
	t.Helper()
	lines := []tasklog.Line{
		mk(0, idA, domain.EventPosted, "", tasklog.Sizes{Item: 74}, "item"),
		mk(10, idB, domain.EventPosted, "", tasklog.Sizes{Item: 31}),
		mk(20, idA, domain.EventClaimed, "box-1", tasklog.Sizes{Item: 74}),
		mk(30, idA, domain.EventProgress, "box-1", tasklog.Sizes{Item: 74, Progress: 14}, "progress"),
		mk(40, idA, domain.EventResult, "box-1", tasklog.Sizes{Item: 74, Progress: 14, Result: 2048}, "result"),
		mk(50, idB, domain.EventClaimed, evil, tasklog.Sizes{Item: 31}),
		mk(60, idA, domain.EventCleaned, "", tasklog.Sizes{Item: 74, Progress: 14, Result: 2048}),
	}
	return mirror(t, lines, func(w *sqlitelogs.Store, ref tasklog.PayloadRef) error {
		ctx := context.Background()
		switch ref.File {
		case "item.json":
			return w.SavePayload(ctx, ref, []byte(`{"url":"https://ex.com/a.png","note":"<b>bold</b>"}`))
		case "progress.jsonl":
			return w.SavePayload(ctx, ref, []byte("{\"percent\":40}\n"))
		case "result.json":
			return w.PayloadGone(ctx, ref) // aged out before it was fetched
		}
		return nil
	})
}

type page struct {
	status int
	header http.Header
	body   string
}

func get(t *testing.T, h http.Handler, target string) page {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return page{rec.Code, rec.Result().Header, string(body)}
}

// taskLinks are the ids the list links to, in page order.
func taskLinks(body string) []string {
	re := regexp.MustCompile(`<a class="task mono" href="/tasks/task.example.com/resize/([0-9a-f]{16})">`)
	var ids []string
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

func TestListShowsEventsNewestFirstWithTaskLinks(t *testing.T) {
	h := logsweb.New(fixture(t), nil)
	p := get(t, h, "/")
	if p.status != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", p.status, p.body)
	}
	if got := p.header.Get("Content-Type"); got != "text/html; charset=utf-8" {
		t.Errorf("Content-Type %q", got)
	}
	if !strings.Contains(p.header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("no CSP: %q", p.header.Get("Content-Security-Policy"))
	}
	want := []string{idA, idB, idA, idA, idA, idB, idA} // times 60, 50, ... 0
	if got := taskLinks(p.body); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("task links %v, want %v", got, want)
	}
	if strings.Contains(p.body, evil) || !strings.Contains(p.body, html.EscapeString(evil)) {
		t.Errorf("the worker name is not escaped")
	}
	if strings.Contains(p.body, "/payloads/") {
		t.Errorf("the list links payloads; they belong on the task page")
	}
}

func TestListFilters(t *testing.T) {
	h := logsweb.New(fixture(t), nil)
	cases := []struct {
		query string
		want  []string
	}{
		{"id=" + idB, []string{idB, idB}},
		{"event=claimed", []string{idB, idA}},
		{"worker=" + url.QueryEscape(evil), []string{idB}},
		{"queue=resize&host=task.example.com&event=posted", []string{idB, idA}},
		{"from=2026-07-26T09:00:30&to=2026-07-26T09:00:50", []string{idA, idA}},
		{"from=2026-07-26T09:00:50Z", []string{idA, idB}},
		{"queue=thumbnail", nil},
		{"id=&queue=&unknown=1", []string{idA, idB, idA, idA, idA, idB, idA}},
	}
	for _, tc := range cases {
		t.Run(tc.query, func(t *testing.T) {
			p := get(t, h, "/?"+tc.query)
			if p.status != http.StatusOK {
				t.Fatalf("%d\n%s", p.status, p.body)
			}
			if got := taskLinks(p.body); strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("task links %v, want %v", got, tc.want)
			}
		})
	}
}

func TestListPagesByPosition(t *testing.T) {
	h := logsweb.New(fixture(t), nil)
	first := get(t, h, "/?limit=3")
	older := regexp.MustCompile(`href="(/\?[^"]*before=[^"]*)" id="older"`).FindStringSubmatch(first.body)
	if older == nil {
		t.Fatalf("no older link on a full first page:\n%s", first.body)
	}
	second := get(t, h, html.UnescapeString(older[1]))
	if got, want := taskLinks(second.body), []string{idA, idA, idB}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("second page links %v, want %v", got, want)
	}
	if !strings.Contains(second.body, `id="newer"`) || !strings.Contains(second.body, "limit=3") {
		t.Errorf("second page lacks a newer link keeping the page size")
	}
}

func TestBadInputIs400(t *testing.T) {
	h := logsweb.New(fixture(t), nil)
	for _, target := range []string{
		"/?id=zzz",
		"/?id=" + url.QueryEscape("' OR 1=1 --"),
		"/?queue=Bad%20Queue",
		"/?host=..%2F..",
		"/?event=" + url.QueryEscape("<b>"),
		"/?from=yesterday",
		"/?from=2026-07-27&to=2026-07-26",
		"/?limit=abc",
		"/?limit=100000",
		"/?before=12",
		"/?before=1-2&after=1-2",
		"/?worker=" + strings.Repeat("w", 201),
		"/tasks/task.example.com/resize/not-an-id",
		"/tasks/BAD_HOST/resize/" + idA,
		"/payloads/task.example.com/resize/" + idA + "/passwd",
		"/payloads/task.example.com/Resize/" + idA + "/item.json",
	} {
		p := get(t, h, target)
		if p.status != http.StatusBadRequest {
			t.Errorf("GET %s: %d, want 400\n%s", target, p.status, p.body)
		}
	}
	// The form comes back as typed, escaped, with the reason.
	p := get(t, h, "/?id="+url.QueryEscape(`"><script>x</script>`))
	if !strings.Contains(p.body, `id="error"`) || strings.Contains(p.body, "<script>x") {
		t.Errorf("bad id page:\n%s", p.body)
	}
}

func TestTaskPageShowsTrailSizesAndPayloadLinks(t *testing.T) {
	h := logsweb.New(fixture(t), nil)
	p := get(t, h, "/tasks/"+host+"/"+queue+"/"+idA)
	if p.status != http.StatusOK {
		t.Fatalf("%d\n%s", p.status, p.body)
	}
	events := regexp.MustCompile(`</time></td><td>([a-z]+)</td>`).FindAllStringSubmatch(p.body, -1)
	var trail []string
	for _, m := range events {
		trail = append(trail, m[1])
	}
	if got, want := strings.Join(trail, " "), "posted claimed progress result cleaned"; got != want {
		t.Errorf("trail %q, want %q", got, want)
	}
	if !strings.Contains(p.body, `<td class="num">2048</td>`) || !strings.Contains(p.body, `<td class="num">14</td>`) {
		t.Errorf("sizes missing")
	}

	anchors := regexp.MustCompile(`<a [^>]*class="payload"[^>]*>`).FindAllString(p.body, -1)
	if len(anchors) != 4 { // item and progress in the trail and in the list of payloads
		t.Fatalf("%d payload links, want 4:\n%s", len(anchors), p.body)
	}
	for _, a := range anchors {
		if !strings.Contains(a, `target="_blank"`) || !strings.Contains(a, `rel="noopener"`) {
			t.Errorf("payload link %s does not open in a new tab with noopener", a)
		}
	}
	// result.json aged out before it was fetched: named, not linked.
	if strings.Contains(p.body, "/result.json") || !strings.Contains(p.body, "not in the mirror") {
		t.Errorf("the missing result is linked or not explained")
	}
	// Bodies are never inline.
	if strings.Contains(p.body, "ex.com/a.png") {
		t.Errorf("a payload body is inline in the page")
	}
}

func TestPayloadIsServedAsDataNotAsPage(t *testing.T) {
	h := logsweb.New(fixture(t), nil)
	cases := []struct{ file, contentType, body string }{
		{"item.json", "application/json", `{"url":"https://ex.com/a.png","note":"<b>bold</b>"}`},
		// JSON lines as text: a browser would save application/x-ndjson
		// to disc instead of showing it in the tab.
		{"progress.jsonl", "text/plain; charset=utf-8", "{\"percent\":40}\n"},
	}
	for _, tc := range cases {
		p := get(t, h, "/payloads/"+host+"/"+queue+"/"+idA+"/"+tc.file)
		if p.status != http.StatusOK || p.body != tc.body {
			t.Errorf("%s: %d %q, want 200 %q", tc.file, p.status, p.body, tc.body)
		}
		if got := p.header.Get("Content-Type"); got != tc.contentType {
			t.Errorf("%s: Content-Type %q, want %q", tc.file, got, tc.contentType)
		}
		if got := p.header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q", tc.file, got)
		}
		if !strings.Contains(p.header.Get("Content-Security-Policy"), "sandbox") {
			t.Errorf("%s: not sandboxed", tc.file)
		}
		if got := p.header.Get("Content-Disposition"); !strings.HasPrefix(got, "inline;") {
			t.Errorf("%s: Content-Disposition %q, want inline", tc.file, got)
		}
	}
	for _, target := range []string{
		"/payloads/" + host + "/" + queue + "/" + idA + "/result.json", // aged out
		"/payloads/" + host + "/" + queue + "/" + idB + "/item.json",   // never archived
		"/tasks/" + host + "/" + queue + "/0000000000000000",
		"/nothing",
	} {
		if p := get(t, h, target); p.status != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", target, p.status)
		}
	}
}

// liveScript is the one script tag of a page.
const liveScript = `<script src="/live.js" defer></script>`

// broken is a store whose every read fails.
type broken struct{}

var _ logsweb.Store = broken{}

func (broken) Events(context.Context, tasklog.Query) (tasklog.Page, error) {
	return tasklog.Page{}, errors.New("disk on fire")
}
func (broken) Trail(context.Context, string, string, string) ([]tasklog.Line, error) {
	return nil, errors.New("disk on fire")
}
func (broken) Payloads(context.Context, string, string, string) ([]tasklog.Payload, error) {
	return nil, errors.New("disk on fire")
}
func (broken) Payload(context.Context, string, string, string, string) ([]byte, error) {
	return nil, errors.New("disk on fire")
}
func (broken) Count(context.Context, tasklog.Filter) (int, bool, error) {
	return 0, false, errors.New("disk on fire")
}
func (broken) Names(context.Context) ([]string, []string, error) {
	return nil, nil, errors.New("disk on fire")
}
func (broken) Latest(context.Context) (int64, error) { return 0, errors.New("disk on fire") }

func TestStoreFailureIs500WithoutDetails(t *testing.T) {
	var heard []error
	h := logsweb.New(broken{}, func(err error) { heard = append(heard, err) })
	for _, target := range []string{"/", "/tasks/" + host + "/" + queue + "/" + idA,
		"/payloads/" + host + "/" + queue + "/" + idA + "/item.json"} {
		p := get(t, h, target)
		if p.status != http.StatusInternalServerError || strings.Contains(p.body, "fire") {
			t.Errorf("GET %s: %d %q", target, p.status, p.body)
		}
	}
	if len(heard) != 3 {
		t.Errorf("onError heard %d errors, want 3: %v", len(heard), heard)
	}
}

// FuzzList: whatever the query string, the list answers 200 or 400, never
// 500, and never echoes a raw tag back.
func FuzzList(f *testing.F) {
	for _, q := range []string{"", "id=" + idA, "event=result&queue=resize", "from=2026-07-26T09:00&to=2026-07-27",
		"before=1-2", "after=9223372036854775807-9223372036854775807", "limit=-1", "worker=%3Cb%3E", "host=%00"} {
		f.Add(q)
	}
	h := logsweb.New(fixture(f), func(err error) { f.Errorf("500: %v", err) })
	f.Fuzz(func(t *testing.T, query string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/", RawQuery: query}, Header: http.Header{}})
		if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest {
			t.Fatalf("GET /?%s: %d", query, rec.Code)
		}
		if strings.Count(rec.Body.String(), "<script") != 1 || !strings.Contains(rec.Body.String(), liveScript) {
			t.Fatalf("GET /?%s: a raw tag in the page", query)
		}
	})
}

// A web page elsewhere can point a name of its own at 127.0.0.1 (DNS
// rebinding) and make the browser read logs serve as that page's origin.
// On a loopback address only a loopback name is answered, so such a page
// reads no line and no payload; localhost, *.localhost and IPs still are.
func TestForeignHostNameOnLoopbackIsRefused(t *testing.T) {
	srv := httptest.NewServer(logsweb.New(fixture(t), nil))
	t.Cleanup(srv.Close)
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]
	ask := func(hostHeader, path string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel() // ends a /live stream, which is read no further than its start
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = hostHeader
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.Header.Get("Content-Type") == "text/event-stream" {
			return resp.StatusCode, "a stream"
		}
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, name := range []string{"attacker.example:" + port, "attacker.example", "rebind.attacker.example:" + port} {
		for _, path := range []string{"/", "/tasks/" + host + "/" + queue + "/" + idA, "/payloads/" + host + "/" + queue + "/" + idA + "/item.json", "/live"} {
			status, body := ask(name, path)
			if status != http.StatusForbidden || strings.Contains(body, idA) || strings.Contains(body, "ex.com") {
				t.Errorf("Host %s, GET %s: %d %.200q, want 403 without the mirror's data", name, path, status, body)
			}
		}
	}
	for _, name := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST:" + port, "logs.localhost:" + port, "[::1]:" + port} {
		if status, body := ask(name, "/"); status != http.StatusOK || !strings.Contains(body, idA) {
			t.Errorf("Host %s: %d, want 200 with the events", name, status)
		}
	}
}
