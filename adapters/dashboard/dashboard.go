// Package dashboard serves the live queue dashboard of a host at /_dash:
// the page itself (HTML, JS and CSS embedded in the binary, nothing fetched
// from elsewhere), a JSON endpoint for what the HTTP API does not say
// (every queue's figures at once, live leases, failures grouped by error
// code, a task's record without stamping fetchedAt), and a WebSocket that
// pushes the figures when they change. Lists, searches, actions and the
// event trail come from the HTTP API itself (/{queue}/tasks, pause, retry,
// /_logs, ...), which checks access as it always does.
//
// httpapi mounts the handler on /_dash behind its host resolution, so
// every request here has a host (httpapi.HostOf). Who sees what follows the
// queues' access (SPEC §2, §12): a queue is shown to users with status,
// logs or manage on it; its items, leases, failures and actions only to
// users with manage. Nobody else learns more than GET / tells anyone.
//
// The token travels only in an Authorization header or in the live
// socket's first message: never in a URL, so it reaches no log line.
package dashboard

import (
	"embed"
	"encoding/json"
	"errors"
	"net/http"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/adapters/httpapi"
	"github.com/taskhoster/taskhoster/adapters/httperr"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

//go:embed assets
var assets embed.FS

// Workers tells how many worker sockets of a queue are connected
// (wsapi.Sockets).
type Workers interface {
	Workers(q domain.QueueRef) int
}

// Waiting tells how many claims wait for work on a queue on this server
// (notify.Hub).
type Waiting interface {
	Waiting(q domain.QueueRef) int
}

// Options are what the dashboard reads from.
type Options struct {
	Service  *app.Service
	Config   ports.Config // to follow reloads on a live socket
	Activity *Activity
	Workers  Workers
	Waiting  Waiting
	Clock    ports.Clock
	Logger   *zap.Logger
	// Push is how often a live socket looks for changes (default 250 ms):
	// a change reaches the page within about that, and a socket sends at
	// most one snapshot per Push.
	Push time.Duration
}

// Dashboard is the /_dash handler of every host.
type Dashboard struct {
	opt    Options
	router chi.Router
	live   *lives

	countsMu sync.Mutex
	counted  map[domain.QueueRef]counted // by queue; as many as the host folders ever served
}

// counted is a queue's counts as last read: when, and at which version.
type counted struct {
	at      time.Time
	version uint64
	counts  ports.Counts
}

// DefaultPush is Options.Push's default.
const DefaultPush = 250 * time.Millisecond

// New builds the dashboard. Close it on shutdown, which says goodbye to the
// live sockets.
func New(opt Options) *Dashboard {
	if opt.Logger == nil {
		opt.Logger = zap.NewNop()
	}
	if opt.Push <= 0 {
		opt.Push = DefaultPush
	}
	d := &Dashboard{opt: opt, live: newLives(), counted: make(map[domain.QueueRef]counted)}
	r := chi.NewRouter()
	r.Use(securityHeaders)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) { d.writeError(w, r, errNoPath) })
	r.MethodNotAllowed(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Allow", http.MethodGet)
		httperr.Reply{Status: http.StatusMethodNotAllowed, Body: httperr.Body{
			Error: domain.CodeMethodNotAllowed, Message: "the dashboard only answers GET", Details: []domain.Violation{},
		}}.Write(w)
	})
	r.Get("/", d.page)
	r.Get("/assets/{file}", d.asset)
	r.Get("/live", d.serveLive)
	r.Route("/api", func(r chi.Router) {
		r.Get("/queues", d.queues)
		r.Get("/queues/{queue}", d.queue)
		r.Get("/queues/{queue}/tasks/{id}", d.task)
	})
	d.router = r
	return d
}

func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) { d.router.ServeHTTP(w, r) }

// securityHeaders keep the page to its own scripts and styles, out of other
// sites' frames, and out of shared caches.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
			"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

func (d *Dashboard) page(w http.ResponseWriter, r *http.Request) {
	// /_dash and /_dash/ both land here; relative asset paths need the slash.
	if !strings.HasSuffix(r.URL.Path, "/") {
		http.Redirect(w, r, r.URL.Path+"/", http.StatusMovedPermanently)
		return
	}
	body, err := assets.ReadFile("assets/index.html")
	if err != nil {
		d.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(body)
}

// assetTypes are the embedded files' content types, by extension.
var assetTypes = map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}

// asset serves one embedded script or style sheet.
func (d *Dashboard) asset(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "file")
	kind, ok := assetTypes[path.Ext(name)]
	body, err := assets.ReadFile("assets/" + name)
	if !ok || err != nil {
		d.writeError(w, r, errNoPath)
		return
	}
	w.Header().Set("Content-Type", kind)
	_, _ = w.Write(body)
}

// viewer is who asks, on which host.
type viewer struct {
	host *domain.Host
	user string // "" for anonymous
}

// viewerOf authenticates r's bearer token among its host's users. A token
// that names nobody is refused (401) rather than taken for anonymous, so a
// mistyped token is told at once instead of showing an empty page.
func viewerOf(r *http.Request) (viewer, error) {
	h := httpapi.HostOf(r)
	tok, given, err := bearer(r)
	if err != nil {
		return viewer{}, err
	}
	if !given {
		return viewer{host: h}, nil
	}
	user, ok := h.Authenticate(tok)
	if !ok {
		return viewer{}, errBadToken
	}
	return viewer{host: h, user: user}, nil
}

// bearer is r's bearer token, and whether one was given.
func bearer(r *http.Request) (string, bool, error) {
	v := r.Header.Get("Authorization")
	if v == "" {
		return "", false, nil
	}
	scheme, tok, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", false, errBadToken
	}
	return strings.TrimSpace(tok), true, nil
}

// sees reports whether user may see q's figures: status, logs or manage.
func sees(q *domain.Queue, user string) bool {
	return q.Access.Check(user, domain.ActionStatus, domain.ActionLogs, domain.ActionManage) == domain.Allowed
}

// visible is the host's queues user may see, by name.
func visible(h *domain.Host, user string) []*domain.Queue {
	var out []*domain.Queue
	for _, q := range h.Queues {
		if sees(q, user) {
			out = append(out, q)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// hostJSON is every visible queue's summary: GET /_dash/api/queues, and
// the live socket's snapshot.
type hostJSON struct {
	Type   string      `json:"type,omitempty"` // "snapshot" on the socket
	Host   string      `json:"host"`
	User   *string     `json:"user"`
	Now    int64       `json:"now"` // the server's clock (Unix ms), for ages and time left
	Queues []queueJSON `json:"queues"`
}

// queueJSON is one queue's figures.
type queueJSON struct {
	Name   string `json:"name"`
	Manage bool   `json:"manage"` // the viewer may list, act and see items
	Logs   bool   `json:"logs"`   // the viewer may read the queue's event log
	Paused bool   `json:"paused"`
	Counts struct {
		Claimable  int `json:"claimable"`
		Delayed    int `json:"delayed"`
		Processing int `json:"processing"`
		Finished   int `json:"finished"`
		Failed     int `json:"failed"`
	} `json:"counts"`
	// Oldest is when the longest-waiting claimable task became claimable
	// (Unix ms), null when none waits; the page shows its age.
	Oldest  *int64 `json:"oldest"`
	Workers int    `json:"workers"`
	Waiting int    `json:"waiting"`
	Version uint64 `json:"version"`
	// Rates are the seconds with posts, results or failures this server
	// stored, oldest first: the last hour in the API's answer, the last
	// few seconds in a live snapshot.
	Rates []Second `json:"rates"`
	// LeaseSeconds is the queue's lease, for the page's time-left bars.
	LeaseSeconds int64 `json:"leaseSeconds"`
	MaxAttempts  int64 `json:"maxAttempts,omitempty"`
}

// summary is v's view of its host's queues at now, with span seconds of rates.
func (d *Dashboard) summary(v viewer, now time.Time, span int) hostJSON {
	out := hostJSON{Host: v.host.Name, Now: domain.Millis(now), Queues: []queueJSON{}}
	if v.user != "" {
		out.User = &v.user
	}
	for _, q := range visible(v.host, v.user) {
		out.Queues = append(out.Queues, d.figures(q, v.user, now, span))
	}
	return out
}

func (d *Dashboard) figures(q *domain.Queue, user string, now time.Time, span int) queueJSON {
	ref := q.Ref()
	rates, version := d.opt.Activity.Rates(ref, now, span)
	c := d.countsOf(q, version, now)
	j := queueJSON{
		Name:         q.Name,
		Manage:       q.Access[domain.ActionManage].Allows(user),
		Logs:         q.Access[domain.ActionLogs].Allows(user),
		Paused:       d.opt.Service.Paused(q),
		LeaseSeconds: q.Settings.LeaseSeconds,
		MaxAttempts:  q.Settings.MaxAttempts,
	}
	j.Counts.Claimable = max(c.Pending-c.Delayed, 0)
	j.Counts.Delayed = c.Delayed
	j.Counts.Processing = c.Processing
	j.Counts.Finished = max(c.Done-c.Failed, 0)
	j.Counts.Failed = c.Failed
	if !c.Oldest.IsZero() {
		ms := domain.Millis(c.Oldest)
		j.Oldest = &ms
	}
	if d.opt.Workers != nil {
		j.Workers = d.opt.Workers.Workers(ref)
	}
	if d.opt.Waiting != nil {
		j.Waiting = d.opt.Waiting.Waiting(ref)
	}
	j.Rates, j.Version = rates, version
	return j
}

// countsOf is q's counts, read again only once this server stored a
// transition of q since the last read (its version moved) or that read is
// a Push old. On PostgreSQL a read is a COUNT over the queue's rows: each
// live socket, anonymous ones too, asks every Push, so without sharing 64
// open tabs on a queue of a million tasks kept the database counting.
// The version is read before the count: a transition between the two
// leaves a newer count under an older version, which is read again.
func (d *Dashboard) countsOf(q *domain.Queue, version uint64, now time.Time) ports.Counts {
	ref := q.Ref()
	d.countsMu.Lock()
	last, ok := d.counted[ref]
	d.countsMu.Unlock()
	if ok && last.version == version && !now.Before(last.at) && now.Sub(last.at) < d.opt.Push {
		return last.counts
	}
	c := d.opt.Service.Counts(q)
	d.countsMu.Lock()
	d.counted[ref] = counted{at: now, version: version, counts: c}
	d.countsMu.Unlock()
	return c
}

// queues answers GET /_dash/api/queues: the figures of every queue the
// viewer may see, with the last hour of rates.
func (d *Dashboard) queues(w http.ResponseWriter, r *http.Request) {
	v, err := viewerOf(r)
	if err != nil {
		d.writeError(w, r, err)
		return
	}
	writeJSON(w, d.summary(v, d.opt.Clock.Now(), Window))
}

// managed resolves the request's queue for a viewer who must have manage
// on it, checked in the API's order: the queue (404), then the token and
// access (401, 403).
func (d *Dashboard) managed(r *http.Request) (*domain.Queue, error) {
	v, err := viewerOf(r)
	if err != nil {
		return nil, err
	}
	name := chi.URLParam(r, "queue")
	q, ok := v.host.Queues[name]
	if !ok || !domain.ValidName(name) {
		return nil, errUnknownQueue
	}
	switch q.Access.Check(v.user, domain.ActionManage) {
	case domain.Unauthorized:
		return nil, errUnauthorized
	case domain.Forbidden:
		return nil, errForbidden
	}
	return q, nil
}

// leaseJSON is one task being worked on.
type leaseJSON struct {
	ID       string `json:"id"`
	Worker   string `json:"worker"`
	Attempts int    `json:"attempts"`
	Until    int64  `json:"until"`
}

// failedJSON is one failed task of a group.
type failedJSON struct {
	ID         string          `json:"id"`
	Attempts   int             `json:"attempts"`
	FinishedAt *int64          `json:"finishedAt"`
	Failure    json.RawMessage `json:"failure,omitempty"`
}

// groupJSON is the failed tasks of one error code.
type groupJSON struct {
	Error string       `json:"error"`
	Count int          `json:"count"`
	Tasks []failedJSON `json:"tasks"` // the newest, at most groupShown
}

// How much of a queue GET /_dash/api/queues/{queue} looks at: the oldest
// leases, and the newest failures grouped by their error code. Bounded, so
// that the answer costs the same on a queue of a million tasks; the page
// says how many failures were looked at when there are more.
const (
	leasesShown    = 100
	failuresLooked = 1000
	groupShown     = 20
)

// detailJSON is GET /_dash/api/queues/{queue}.
type detailJSON struct {
	Now      int64       `json:"now"`
	Leases   []leaseJSON `json:"leases"`
	Failures []groupJSON `json:"failures"`
	// Looked is how many of the newest failed tasks the groups count.
	Looked int `json:"looked"`
}

// queue answers GET /_dash/api/queues/{queue}: the live leases, oldest
// claim first, and the newest failures grouped by error code.
func (d *Dashboard) queue(w http.ResponseWriter, r *http.Request) {
	q, err := d.managed(r)
	if err != nil {
		d.writeError(w, r, err)
		return
	}
	ctx := r.Context()
	processing, _, err := d.opt.Service.ListTasks(ctx, q, app.ListQuery{Status: domain.Processing, Limit: leasesShown})
	if err != nil {
		d.writeError(w, r, err)
		return
	}
	failed, _, err := d.opt.Service.ListTasks(ctx, q, app.ListQuery{Status: domain.Failed, Newest: true, Limit: failuresLooked})
	if err != nil {
		d.writeError(w, r, err)
		return
	}
	out := detailJSON{Now: domain.Millis(d.opt.Clock.Now()), Leases: []leaseJSON{}, Looked: len(failed)}
	for _, t := range processing {
		if t.Lease != nil {
			out.Leases = append(out.Leases, leaseJSON{ID: t.ID, Worker: t.Lease.Worker, Attempts: t.Attempts, Until: t.Lease.Until})
		}
	}
	out.Failures = groupFailures(failed)
	writeJSON(w, out)
}

// groupFailures groups failed tasks (newest first) by error code, the
// largest group first.
func groupFailures(failed []domain.Task) []groupJSON {
	groups := []groupJSON{}
	at := map[string]int{}
	for _, t := range failed {
		code := "failed"
		if t.Error != nil {
			code = *t.Error
		}
		i, ok := at[code]
		if !ok {
			i = len(groups)
			at[code] = i
			groups = append(groups, groupJSON{Error: code, Tasks: []failedJSON{}})
		}
		g := &groups[i]
		g.Count++
		if len(g.Tasks) < groupShown {
			g.Tasks = append(g.Tasks, failedJSON{ID: t.ID, Attempts: t.Attempts, FinishedAt: t.FinishedAt, Failure: t.Failure})
		}
	}
	sort.SliceStable(groups, func(i, j int) bool { return groups[i].Count > groups[j].Count })
	return groups
}

// taskJSON is a task as its page shows it: the status view with the item,
// who posted it, and the lease.
type taskJSON struct {
	domain.View
	Item      json.RawMessage `json:"item"`
	PostedBy  *string         `json:"postedBy"`
	Lease     *domain.Lease   `json:"lease"`
	FetchedAt *int64          `json:"fetchedAt"`
}

// task answers GET /_dash/api/queues/{queue}/tasks/{id}. Unlike GET
// /{queue}/{id} it never stamps fetchedAt: looking at a task from the
// dashboard must not start its retention clock. Like it, it shows only a
// durable record (Service.Record): a result a power loss can take away is
// never shown.
func (d *Dashboard) task(w http.ResponseWriter, r *http.Request) {
	q, err := d.managed(r)
	if err != nil {
		d.writeError(w, r, err)
		return
	}
	t, err := d.opt.Service.Record(r.Context(), q, chi.URLParam(r, "id"))
	if err != nil {
		d.writeError(w, r, notFoundAsTask(err))
		return
	}
	writeJSON(w, map[string]any{"now": domain.Millis(d.opt.Clock.Now()), "task": taskJSON{
		View: t.View(), Item: t.Item, PostedBy: t.PostedBy, Lease: t.Lease, FetchedAt: t.FetchedAt,
	}})
}

// notFoundAsTask gives a missing task the API's not_found body.
func notFoundAsTask(err error) error {
	if errors.Is(err, domain.ErrNotFound) {
		return errNotFound
	}
	return err
}

// writeError answers with err's status and body from the one error table.
// A server fault is logged here, since the client is not told its cause.
func (d *Dashboard) writeError(w http.ResponseWriter, r *http.Request, err error) {
	reply := httperr.Of(err)
	if reply.ServerFault() {
		d.opt.Logger.Error("dashboard request failed", zap.String("path", r.URL.Path), zap.Error(err))
	}
	reply.Write(w)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

var (
	errNoPath       = domain.E(domain.KindNotFound, domain.CodeNotFound, "no such path under /_dash")
	errUnknownQueue = domain.E(domain.KindNotFound, domain.CodeUnknownQueue, "no such queue")
	errNotFound     = domain.E(domain.KindNotFound, domain.CodeNotFound, "no such task")
	errBadToken     = domain.E(domain.KindUnauthorized, domain.CodeUnauthorized, "this token is not one of this host's users (send Authorization: Bearer TOKEN)")
	errUnauthorized = domain.E(domain.KindUnauthorized, domain.CodeUnauthorized, "a valid bearer token is required")
	errForbidden    = domain.E(domain.KindForbidden, domain.CodeForbidden, "this user may not manage this queue")
)
