// Package logsweb is the Task Logs browser (SPEC §9): server-rendered HTML
// pages over the local mirror, and nothing else. The events list (newest
// first, filtered, paged by position), a task's trail from posted to
// cleaned with its payload sizes, and the stored payload bodies, each
// behind a link that opens in a new tab and never inline in a page.
//
// The pages work without JavaScript and load nothing from elsewhere;
// html/template escapes every value, and a Content-Security-Policy allows
// only the one script this server serves (live.js, which follows new
// lines: live.go), none inline, since the names and bodies shown come from
// a server's users.
package logsweb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// Store is the mirror, read only.
type Store interface {
	Events(ctx context.Context, q tasklog.Query) (tasklog.Page, error)
	Trail(ctx context.Context, host, queue, id string) ([]tasklog.Line, error)
	Payloads(ctx context.Context, host, queue, id string) ([]tasklog.Payload, error)
	Payload(ctx context.Context, host, queue, id, file string) ([]byte, error)
	// Count is how many events match f, up to a cap (more: past it).
	Count(ctx context.Context, f tasklog.Filter) (n int, more bool, err error)
	// Names are the hosts and queues the events name, for the form.
	Names(ctx context.Context) (hosts, queues []string, err error)
	// Latest is the number of the newest line, which grows with each pull.
	Latest(ctx context.Context) (int64, error)
}

// Handler serves the browser's pages.
type Handler struct {
	store   Store
	pages   *template.Template
	onError func(error)
	mux     *http.ServeMux

	closing   chan struct{} // closed by Close: the live streams end
	closeOnce sync.Once
}

// New makes the browser over store. onError hears every failure that
// became a 500 (whose details the page does not show); nil drops them.
func New(store Store, onError func(error)) *Handler {
	if onError == nil {
		onError = func(error) {}
	}
	h := &Handler{store: store, pages: parsePages(), onError: onError, mux: http.NewServeMux(), closing: make(chan struct{})}
	h.mux.HandleFunc("GET /{$}", h.list)
	h.mux.HandleFunc("GET /live", h.live)
	h.mux.HandleFunc("GET /live.js", h.script)
	h.mux.HandleFunc("GET /tasks/{host}/{queue}/{id}", h.task)
	h.mux.HandleFunc("GET /payloads/{host}/{queue}/{id}/{file}", h.payload)
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !loopbackName(r) {
		h.message(w, http.StatusForbidden, "logs serve answers on this machine's own addresses only to localhost or an IP address.")
		return
	}
	h.mux.ServeHTTP(w, r)
}

// loopbackName tells whether r may be answered: any request that came in
// on an address other than loopback (logs serve was told to listen there),
// and on loopback one whose Host is localhost, a *.localhost name or an IP
// address. The pages ask for no password, so a web page elsewhere could
// point a name of its own at 127.0.0.1 (DNS rebinding) and read every line
// and payload of the mirror as its own origin; a browser sends that name
// as the Host, and no resolver can make an IP address or localhost mean
// another site.
func loopbackName(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return true // not from a listener
	}
	tcp, ok := local.(*net.TCPAddr)
	if !ok || !tcp.IP.IsLoopback() {
		return true
	}
	name := r.Host
	if h, _, err := net.SplitHostPort(name); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.ToLower(strings.Trim(name, "[]")), ".")
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	// An HTTP/1.0 request without a Host comes from no browser.
	return name == "" || name == "localhost" || strings.HasSuffix(name, ".localhost")
}

// Links a page builds.

func taskURL(host, queue, id string) string {
	return "/tasks/" + url.PathEscape(host) + "/" + url.PathEscape(queue) + "/" + url.PathEscape(id)
}

func payloadURL(host, queue, id, file string) string {
	return "/payloads/" + url.PathEscape(host) + "/" + url.PathEscape(queue) + "/" +
		url.PathEscape(id) + "/" + url.PathEscape(file)
}

// form is the filter form as typed, shown back on the page.
type form struct {
	Host, Queue, ID, Event, Error, Worker, From, To string
	Limit                                           int
}

// Filter tells whether any field of the form filters.
func (f form) Filter() bool {
	return f.Host != "" || f.Queue != "" || f.ID != "" || f.Event != "" || f.Error != "" || f.Worker != "" || f.From != "" || f.To != ""
}

// values are the form's fields as URL parameters, for the paging links.
func (f form) values() url.Values {
	v := url.Values{}
	for name, value := range map[string]string{"host": f.Host, "queue": f.Queue, "id": f.ID,
		"event": f.Event, "error": f.Error, "worker": f.Worker, "from": f.From, "to": f.To} {
		if value != "" {
			v.Set(name, value)
		}
	}
	if f.Limit != tasklog.DefaultLimit {
		v.Set("limit", strconv.Itoa(f.Limit))
	}
	return v
}

// listPage is what the list template shows.
type listPage struct {
	Form   form
	Events []domain.EventKind
	Errors []string
	// Hosts and Queues are the names the mirror's events carry, offered
	// as the host and queue filters are typed.
	Hosts, Queues []string
	Lines         []tasklog.Line
	Error         string
	// Count is how many events match the filter; More says it is only
	// the cap (sqlitelogs.MaxCount), and there are more.
	Count int
	More  bool
	// Latest is the newest line's number when the page was read, for
	// live.js; Follow says the page shows the newest events, so new
	// ones are swapped in (an older page only says that they came).
	Latest int64
	Follow bool
	// Paging links, "" where there is no such page.
	Newest, Newer, Older string
}

// NewestURL is the first page of the same filter, where new events show.
func (p listPage) NewestURL() string { return "/?" + p.Form.values().Encode() }

// eventKinds are offered in the event filter, in the order of a task's life.
func eventKinds() []domain.EventKind {
	return []domain.EventKind{domain.EventPosted, domain.EventClaimed, domain.EventProgress,
		domain.EventResult, domain.EventFailed, domain.EventTimeout, domain.EventRequeue,
		domain.EventReleased, domain.EventCancelled, domain.EventRetried, domain.EventFetched,
		domain.EventCleaned}
}

// errorCodes are offered in the error filter (SPEC §11); the parameter
// takes any code a newer server may write.
func errorCodes() []string {
	return []string{domain.TimeoutError, domain.AttemptsError, domain.FailedError,
		domain.CancelledError, domain.CorruptError}
}

// list is the events list: GET /?host=&queue=&id=&event=&error=&worker=&from=&to=
// &before=|after=&limit=. A filter that cannot be right is a 400 page that
// says why and keeps the form as typed.
func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	page := listPage{Events: eventKinds(), Errors: errorCodes()}
	var err error
	// Read first, so that a line stored while the page is read is news
	// to the page and not missed.
	if page.Latest, err = h.store.Latest(r.Context()); err != nil {
		h.fail(w, fmt.Errorf("read the newest line: %w", err))
		return
	}
	if page.Hosts, page.Queues, err = h.store.Names(r.Context()); err != nil {
		h.fail(w, fmt.Errorf("list names: %w", err))
		return
	}
	q, f, err := parseQuery(r.URL.Query())
	page.Form = f
	if err != nil {
		page.Error = err.Error()
		h.render(w, http.StatusBadRequest, "list", page)
		return
	}
	page.Follow = q.Before == nil && q.After == nil
	events, err := h.store.Events(r.Context(), q)
	if domain.KindOf(err) == domain.KindInvalid {
		page.Error = errorMessage(err)
		h.render(w, http.StatusBadRequest, "list", page)
		return
	}
	if err != nil {
		h.fail(w, fmt.Errorf("list events: %w", err))
		return
	}
	if page.Count, page.More, err = h.store.Count(r.Context(), q.Filter); err != nil {
		h.fail(w, fmt.Errorf("count events: %w", err))
		return
	}
	page.Lines = events.Lines
	link := func(param string, p *tasklog.Position) string {
		if p == nil {
			return ""
		}
		v := f.values()
		v.Set(param, p.String())
		return "/?" + v.Encode()
	}
	page.Older = link("before", events.Older)
	page.Newer = link("after", events.Newer)
	if events.Newer != nil {
		page.Newest = "/?" + f.values().Encode()
	}
	h.render(w, http.StatusOK, "list", page)
}

// parseQuery reads the list's parameters. Empty ones are unset; unknown
// ones are ignored.
func parseQuery(v url.Values) (tasklog.Query, form, error) {
	get := func(name string) string { return strings.TrimSpace(v.Get(name)) }
	f := form{Host: get("host"), Queue: get("queue"), ID: get("id"), Event: get("event"), Error: get("error"),
		Worker: get("worker"), From: get("from"), To: get("to"), Limit: tasklog.DefaultLimit}
	q := tasklog.Query{
		Filter: tasklog.Filter{Host: strings.ToLower(f.Host), Queue: f.Queue, ID: strings.ToLower(f.ID),
			Event: domain.EventKind(f.Event), Error: f.Error, Worker: f.Worker},
	}
	var err error
	if q.Filter.From, err = parseTime("from", f.From); err != nil {
		return q, f, err
	}
	if q.Filter.To, err = parseTime("to", f.To); err != nil {
		return q, f, err
	}
	if s := get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return q, f, fmt.Errorf("page size %q is not a number", s)
		}
		f.Limit = n
	}
	q.Limit = f.Limit
	if q.Before, err = parsePosition(get("before")); err != nil {
		return q, f, err
	}
	if q.After, err = parsePosition(get("after")); err != nil {
		return q, f, err
	}
	if err := q.Validate(); err != nil {
		return q, f, errors.New(errorMessage(err))
	}
	return q, f, nil
}

// parsePosition reads a paging position; "" is none.
func parsePosition(s string) (*tasklog.Position, error) {
	if s == "" {
		return nil, nil
	}
	p, err := tasklog.ParsePosition(s)
	if err != nil {
		return nil, errors.New(errorMessage(err))
	}
	return &p, nil
}

// timeLayouts are accepted in the time range: what a datetime-local field
// sends (without a zone, read as UTC like every time on the page), RFC 3339,
// and a bare date.
func timeLayouts() []string {
	return []string{"2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02T15:04:05.000",
		time.RFC3339Nano, "2006-01-02 15:04", "2006-01-02 15:04:05", time.DateOnly}
}

func parseTime(name, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range timeLayouts() {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%s time %q is not a time like 2026-07-26T09:06 (UTC)", name, s)
}

// errorMessage is the part of an error a page shows: a domain error's
// message, without its code.
func errorMessage(err error) string {
	var de *domain.Error
	if errors.As(err, &de) && de.Message != "" {
		return de.Message
	}
	return err.Error()
}

// taskPage is what the task template shows.
type taskPage struct {
	Host, Queue, ID string
	Lines           []tasklog.Line
	Payloads        []tasklog.Payload
	stored          map[string]bool // file → body stored
	ListURL         string
	Timing          timing
	Latest          int64 // the newest line's number when read, for live.js
}

// PayloadURL is the link of an archived kind of this task, "" when the
// mirror has no body for it (not fetched yet, or aged out first).
func (p taskPage) PayloadURL(kind string) string {
	file, ok := tasklog.PayloadFile(kind)
	if !ok || !p.stored[file] {
		return ""
	}
	return payloadURL(p.Host, p.Queue, p.ID, file)
}

// FileURL is the link of a stored payload file of this task.
func (p taskPage) FileURL(file string) string { return payloadURL(p.Host, p.Queue, p.ID, file) }

// task is one task's trail: GET /tasks/{host}/{queue}/{id}.
func (h *Handler) task(w http.ResponseWriter, r *http.Request) {
	host, queue, id, ok := h.taskPath(w, r)
	if !ok {
		return
	}
	latest, err := h.store.Latest(r.Context())
	if err != nil {
		h.fail(w, fmt.Errorf("read the newest line: %w", err))
		return
	}
	lines, err := h.store.Trail(r.Context(), host, queue, id)
	if err != nil {
		h.fail(w, err)
		return
	}
	if len(lines) == 0 {
		h.message(w, http.StatusNotFound, fmt.Sprintf("No events of task %s in queue %s of %s.", id, queue, host))
		return
	}
	payloads, err := h.store.Payloads(r.Context(), host, queue, id)
	if err != nil {
		h.fail(w, err)
		return
	}
	page := taskPage{Host: host, Queue: queue, ID: id, Lines: lines, Payloads: payloads,
		stored: map[string]bool{}, ListURL: "/?" + url.Values{"id": {id}}.Encode(),
		Timing: timingOf(lines), Latest: latest}
	for _, p := range payloads {
		page.stored[p.File] = p.Stored
	}
	h.render(w, http.StatusOK, "task", page)
}

// taskPath reads and checks the task named in the path, answering 400 for
// a name the server could never have written.
func (h *Handler) taskPath(w http.ResponseWriter, r *http.Request) (host, queue, id string, ok bool) {
	host, queue, id = r.PathValue("host"), r.PathValue("queue"), r.PathValue("id")
	switch {
	case !domain.ValidHost(host):
		h.message(w, http.StatusBadRequest, fmt.Sprintf("%q is not a host name.", host))
	case !domain.ValidName(queue):
		h.message(w, http.StatusBadRequest, fmt.Sprintf("%q is not a queue name.", queue))
	case !domain.ValidID(id):
		h.message(w, http.StatusBadRequest, fmt.Sprintf("%q is not a task id.", id))
	default:
		return host, queue, id, true
	}
	return "", "", "", false
}

// payload serves one stored body in a tab of its own, shown rather than
// downloaded: JSON as JSON, and progress.jsonl (JSON lines, a type
// browsers save to disc) as plain text. GET /payloads/{host}/{queue}/{id}/{file}.
// nosniff and a sandboxing CSP make sure a body is never run as a page,
// whatever it holds.
func (h *Handler) payload(w http.ResponseWriter, r *http.Request) {
	host, queue, id, ok := h.taskPath(w, r)
	if !ok {
		return
	}
	file := r.PathValue("file")
	if !tasklog.ValidPayloadFile(file) {
		h.message(w, http.StatusBadRequest, fmt.Sprintf("%q is not a payload file (item.json, progress.jsonl, result.json, error.json).", file))
		return
	}
	body, err := h.store.Payload(r.Context(), host, queue, id, file)
	if domain.KindOf(err) == domain.KindNotFound {
		h.message(w, http.StatusNotFound, fmt.Sprintf("The mirror has no %s for task %s.", file, id))
		return
	}
	if err != nil {
		h.fail(w, err)
		return
	}
	hd := w.Header()
	contentType := tasklog.ContentType(file)
	if contentType != "application/json" {
		contentType = "text/plain; charset=utf-8"
	}
	hd.Set("Content-Type", contentType)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	hd.Set("Content-Disposition", fmt.Sprintf(`inline; filename="%s-%s"`, id, file))
	hd.Set("Cache-Control", "no-cache") // progress.jsonl grows with each pull
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// render executes a page into a buffer first, so a template failure is a
// clean 500 rather than half a page.
func (h *Handler) render(w http.ResponseWriter, status int, name string, data any) {
	var buf bytes.Buffer
	if err := h.pages.ExecuteTemplate(&buf, name, data); err != nil {
		h.fail(w, fmt.Errorf("render %s: %w", name, err))
		return
	}
	pageHeaders(w.Header())
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// message is a page with one sentence: for 400 and 404.
func (h *Handler) message(w http.ResponseWriter, status int, text string) {
	h.render(w, status, "message", struct {
		Status int
		Title  string
		Text   string
	}{status, http.StatusText(status), text})
}

// fail answers 500 without details and hands the error to onError.
func (h *Handler) fail(w http.ResponseWriter, err error) {
	h.onError(err)
	pageHeaders(w.Header())
	w.WriteHeader(http.StatusInternalServerError)
	_, _ = w.Write([]byte("<!doctype html><title>Error</title><p>The task log store could not be read. See the log of logs serve.\n"))
}

// pageHeaders are the headers of every HTML page: scripts only from this
// server (live.js) and none inline, fetches and streams only to it, no
// framing, styles only from the page itself, forms only to this server,
// and no Referer to where a link leads.
func pageHeaders(hd http.Header) {
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Security-Policy",
		"default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-cache")
}
