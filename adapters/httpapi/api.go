// Package httpapi serves a host's task queues over HTTP (SPEC §3), routed
// with chi. It resolves the host and queue, authenticates, checks access,
// turns bodies into calls on the app's use cases, and answers errors by the
// one error table, adapters/httperr (errors.go).
package httpapi

import (
	"context"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/go-chi/chi/v5"
	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/adapters/httperr"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// API is the HTTP front of the use cases.
type API struct {
	svc    *app.Service
	config ports.Config
	logger *zap.Logger
	router chi.Router
	// queueRoutes are the routes under /{queue} (methodNotAllowed).
	queueRoutes chi.Router
	// extra routes mounted by other adapters (the worker socket, watch, logs).
	sockets Sockets
	logs    LogReader
	polls   polls // claims waiting now, for Recheck
}

// Sockets serves the WebSocket endpoints; the wsapi adapter provides it.
type Sockets interface {
	// Work serves q's worker socket for user. current resolves the
	// upgrade request's host, queue and access again, against the
	// configuration in force at the time of the call (see recheck).
	Work(w http.ResponseWriter, r *http.Request, q *domain.Queue, user string, current func() (*domain.Queue, error))
	// Watch serves the watch socket of task id of q; current is as
	// Work's, for the status right.
	Watch(w http.ResponseWriter, r *http.Request, q *domain.Queue, id string, current func() (*domain.Queue, error))
}

// Options configure an API.
type Options struct {
	Logger *zap.Logger
	// Middleware wraps every request (request logs, metrics), outermost first.
	Middleware []func(http.Handler) http.Handler
	Sockets    Sockets
	// Logs serves the log API (/_logs, logs.go); without it there is none.
	Logs LogReader
	// Dashboard serves /_dash on every host (adapters/dashboard), behind
	// the host resolution: HostOf gives it the host.
	Dashboard http.Handler
	// Stopped reports a failure after which no write can succeed until a
	// restart (durable.Syncer.Err): /_health then answers 503
	// storage_unavailable, so a load balancer sends no clients. Nil: none.
	Stopped func() error
}

// New builds the handler for every host.
func New(svc *app.Service, config ports.Config, opt Options) *API {
	a := &API{svc: svc, config: config, logger: opt.Logger, sockets: opt.Sockets, logs: opt.Logs,
		polls: polls{waiting: make(map[*poll]struct{})}}
	if a.logger == nil {
		a.logger = zap.NewNop()
	}
	r := chi.NewRouter()
	for _, mw := range opt.Middleware {
		r.Use(mw)
	}
	r.NotFound(func(w http.ResponseWriter, r *http.Request) { a.writeError(w, r, errNoRoute) })
	r.MethodNotAllowed(a.methodNotAllowed)
	// /_health and the document take every method, answering 405 to all
	// but GET themselves: registered for GET alone, chi would fall back
	// to /{queue} for the others and answer 404 unknown_queue (SPEC §3:
	// any other method on a known path is 405).
	r.HandleFunc("/_health", only(http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
		if opt.Stopped != nil {
			if err := opt.Stopped(); err != nil {
				a.writeError(w, r, domain.E(domain.KindUnavailable, domain.CodeStorageUnavailable,
					"the server stopped writing after a failed flush to stable storage; it needs a restart"))
				return
			}
		}
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	}))
	r.HandleFunc(DocumentPath, only(http.MethodGet, serveDocument))
	r.Group(func(r chi.Router) {
		r.Use(a.resolveHost)
		r.Get("/", a.hostInfo)
		if a.logs != nil {
			a.routeLogs(r)
		}
		if opt.Dashboard != nil {
			r.Mount("/_dash", opt.Dashboard)
		}
		a.queueRoutes = r.Route("/{queue}", func(r chi.Router) {
			r.Use(a.resolveQueue)
			r.Get("/", a.queueInfo)
			r.Post("/", a.post)
			r.HandleFunc("/claim", only(http.MethodPost, a.claim))
			r.HandleFunc("/work", only(http.MethodGet, a.work))
			r.HandleFunc("/tasks", only(http.MethodGet, a.listTasks))
			r.HandleFunc("/batch", only(http.MethodPost, a.batch))
			r.HandleFunc("/purge", only(http.MethodPost, a.purge))
			r.HandleFunc("/pause", only(http.MethodPost, a.setPaused(true)))
			r.HandleFunc("/resume", only(http.MethodPost, a.setPaused(false)))
			r.Get("/{id}", a.status)
			r.Delete("/{id}", a.cancel)
			r.Get("/{id}/watch", a.watch)
			r.Post("/{id}/progress", a.onTask(progressCall))
			r.Post("/{id}/result", a.onTask(resultCall))
			r.Post("/{id}/heartbeat", a.onTask(heartbeatCall))
			r.Post("/{id}/release", a.onTask(releaseCall))
			r.Post("/{id}/fail", a.onTask(failCall))
			r.Post("/{id}/retry", a.retry)
		})
	})
	a.router = r
	return a
}

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.router.ServeHTTP(w, r) }

// only lets one method through to h and answers 405 to the others, for the
// fixed paths (claim, work, tasks, ...) that would otherwise fall through to /{id}.
func only(method string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			httperr.MethodNotAllowed(w, method)
			return
		}
		h(w, r)
	}
}

// methodNotAllowed answers chi's 405s. chi keeps the methods it found for
// the path to itself once a handler of our own answers, so the Allow header
// asks the router again, method by method: only a refused request pays.
func (a *API) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	router, path := a.router, r.URL.Path
	if rest := strings.TrimSuffix(strings.TrimPrefix(path, "/"), "/"); rest != "" && !strings.Contains(rest, "/") {
		// A queue's own path: chi's Match takes it for the mount of the
		// queue's routes, which takes every method; its routes say.
		router, path = a.queueRoutes, "/"
	}
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		if router.Match(chi.NewRouteContext(), m, path) {
			allow = append(allow, m)
		}
	}
	httperr.MethodNotAllowed(w, allow...)
}

type ctxKey int

const (
	hostKey ctxKey = iota
	queueKey
)

// resolveHost finds the host folder the Host header names: port dropped,
// lower-cased, and NAME.localhost also reaching the folder NAME.
func (a *API) resolveHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, ok := a.lookupHost(r.Host)
		if !ok {
			a.writeError(w, r, unknownHost(r.Host))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), hostKey, h)))
	})
}

func (a *API) lookupHost(header string) (*domain.Host, bool) {
	name := header
	if h, _, err := net.SplitHostPort(header); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if !domain.ValidHost(name) {
		return nil, false
	}
	if h, ok := a.config.Host(name); ok {
		return h, true
	}
	if base, ok := strings.CutSuffix(name, ".localhost"); ok {
		return a.config.Host(base)
	}
	return nil, false
}

func (a *API) resolveQueue(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := hostOf(r)
		name := chi.URLParam(r, "queue")
		q, ok := h.Queues[name]
		if !ok || !domain.ValidName(name) {
			a.writeError(w, r, unknownQueue(h.Name, name))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), queueKey, q)))
	})
}

func hostOf(r *http.Request) *domain.Host   { return r.Context().Value(hostKey).(*domain.Host) }
func queueOf(r *http.Request) *domain.Queue { return r.Context().Value(queueKey).(*domain.Queue) }

// HostOf is the host of a request routed behind the host resolution.
func HostOf(r *http.Request) *domain.Host { return hostOf(r) }

// authorize returns the requesting user's name ("" for anonymous) if it may
// do at least one of the actions on the request's queue.
func (a *API) authorize(r *http.Request, actions ...domain.Action) (string, error) {
	return allowed(hostOf(r), queueOf(r), r, actions...)
}

func allowed(h *domain.Host, q *domain.Queue, r *http.Request, actions ...domain.Action) (string, error) {
	user, _ := h.Authenticate(token(r))
	switch q.Access.Check(user, actions...) {
	case domain.Unauthorized:
		return "", errUnauthorized
	case domain.Forbidden:
		return "", errForbidden
	}
	return user, nil
}

// recheck resolves r's host and queue and checks its token for action
// again, against the configuration in force now, as if r came now. r must
// have been authorized for action when it came. A
// worker socket lives for hours over one upgrade request: it asks this at
// each message, so a reload's schemas, settings and access reach it too,
// and a worker whose queue went or whose right was taken away is let go.
func (a *API) recheck(r *http.Request, action domain.Action) (*domain.Queue, error) {
	h, ok := a.lookupHost(r.Host)
	if !ok {
		return nil, unknownHost(r.Host)
	}
	if h == hostOf(r) {
		// No reload since r came (a host is never changed in place): r
		// was authorized for action on this very configuration.
		return queueOf(r), nil
	}
	name := queueOf(r).Name
	q, ok := h.Queues[name]
	if !ok {
		return nil, unknownQueue(h.Name, name)
	}
	if _, err := allowed(h, q, r, action); err != nil {
		return nil, err
	}
	return q, nil
}

// rechecker is recheck of r for action, for a socket, which asks at every
// message: its answer is kept for the host configuration it was read from,
// and read again only once a reload has put another in force (a new
// *domain.Host), so a message costs no token comparisons with every user.
func (a *API) rechecker(r *http.Request, action domain.Action) func() (*domain.Queue, error) {
	type answer struct {
		host *domain.Host
		q    *domain.Queue
		err  error
	}
	var last atomic.Pointer[answer]
	return func() (*domain.Queue, error) {
		h, _ := a.lookupHost(r.Host)
		if l := last.Load(); l != nil && h != nil && l.host == h {
			return l.q, l.err
		}
		q, err := a.recheck(r, action)
		last.Store(&answer{host: h, q: q, err: err})
		return q, err
	}
}

// token is the bearer token of r; WebSocket upgrades may pass it as
// ?access_token= because browsers cannot set headers there.
func token(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	if websocket.IsWebSocketUpgrade(r) {
		return r.URL.Query().Get("access_token")
	}
	return ""
}

func (a *API) hostInfo(w http.ResponseWriter, r *http.Request) {
	h := hostOf(r)
	names := make([]string, 0, len(h.Queues))
	for name := range h.Queues {
		names = append(names, name)
	}
	sort.Strings(names)
	writeJSON(w, http.StatusOK, map[string]any{"host": h.Name, "queues": names})
}
