package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/adapters/httperr"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// envelopeSlack is what a progress or result body may hold beyond its
// payload's limit: the worker name and the JSON around them.
const envelopeSlack = 64 << 10

// claimBodyLimit bounds a claim body (a worker name, a query and a wait).
const claimBodyLimit = 1 << 20

// maxWorkerName bounds the worker name that ends up in records and logs.
const maxWorkerName = 200

func (a *API) post(w http.ResponseWriter, r *http.Request) {
	q := queueOf(r)
	user, err := a.authorize(r, domain.ActionPost)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	opts, err := postOptions(r.URL.Query())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if opts.Key, err = idempotencyKey(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	body, err := readBody(w, r, q.Settings.MaxItemBytes)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	t, err := a.svc.Post(r.Context(), q, user, body, opts)
	status := http.StatusCreated
	switch {
	case errors.Is(err, app.ErrPostedBefore):
		status = http.StatusOK // the first post with this key made it (SPEC §12)
	case err != nil:
		a.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/"+q.Name+"/"+t.ID)
	writeJSON(w, status, map[string]any{"id": t.ID, "status": t.Status})
}

func (a *API) status(w http.ResponseWriter, r *http.Request) {
	q := queueOf(r)
	if _, err := a.authorize(r, domain.ActionStatus); err != nil {
		a.writeError(w, r, err)
		return
	}
	view, err := a.svc.Status(r.Context(), q, chi.URLParam(r, "id"))
	if err != nil {
		a.writeError(w, r, notFoundAsTask(err))
		return
	}
	writeJSON(w, http.StatusOK, view)
}

func (a *API) queueInfo(w http.ResponseWriter, r *http.Request) {
	q := queueOf(r)
	if _, err := a.authorize(r, domain.Actions...); err != nil {
		a.writeError(w, r, err)
		return
	}
	schemas := map[string]json.RawMessage{"item": q.ItemRaw, "progress": q.ProgressRaw, "result": q.ResultRaw}
	if q.FailureRaw != nil {
		schemas["failure"] = q.FailureRaw // only when the queue file gives one (SPEC §11)
	}
	info := map[string]any{
		"name":     q.Name,
		"settings": q.Settings,
		"schemas":  schemas,
		"counts":   countsView(a.svc.Counts(q)),
		"paused":   a.svc.Paused(q),
	}
	if len(q.Problems) > 0 {
		info["problems"] = q.Problems // the file on disc is invalid; this is its last valid version
	}
	writeJSON(w, http.StatusOK, info)
}

// countsView is the JSON shape of a queue's counts (SPEC §3).
func countsView(c ports.Counts) map[string]int {
	return map[string]int{"pending": c.Pending, "processing": c.Processing, "done": c.Done}
}

type claimRequest struct {
	Worker *string         `json:"worker"`
	Query  json.RawMessage `json:"query"`
	Wait   *float64        `json:"wait"`
	Max    *int            `json:"max"` // a batch claim (SPEC §12)
}

func (a *API) claim(w http.ResponseWriter, r *http.Request) {
	q := queueOf(r)
	user, err := a.authorize(r, domain.ActionWork)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	var req claimRequest
	if err := readJSON(w, r, claimBodyLimit, &req); err != nil {
		a.writeError(w, r, err)
		return
	}
	worker, err := workerName(req.Worker, user)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wait, err := seconds("wait", req.Wait, int64(app.MaxWait.Seconds()))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	ctx := r.Context()
	if wait > 0 { // a claim that looks once has nothing for a reload to end
		var done func()
		if ctx, done, err = a.waitFor(r); err != nil {
			a.writeError(w, r, err)
			return
		}
		defer done()
	}
	if req.Max != nil {
		a.claimMany(ctx, w, r, worker, req, wait)
		return
	}
	t, err := a.svc.Claim(ctx, q, worker, req.Query, wait)
	if errors.Is(err, domain.ErrNotFound) {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if err != nil {
		a.writeError(w, r, ended(ctx, err))
		return
	}
	if !a.keep(w, r, t) {
		return
	}
	writeJSON(w, http.StatusOK, ClaimView(t))
}

// keep reports whether tasks just claimed for r go to it. They go back to
// pending at once, under the very claim, as a worker socket's do when it
// drops, rather than wait out their lease, when nobody would read the
// answer (the client has gone: a long poll cut off as a task came), or
// when the worker may no longer have them (a reload took its queue or its
// work right as it claimed), which is answered the error.
func (a *API) keep(w http.ResponseWriter, r *http.Request, tasks ...domain.Task) bool {
	var denied error
	if r.Context().Err() == nil {
		if _, denied = a.recheck(r, domain.ActionWork); denied == nil {
			return true
		}
	}
	held := make([]app.Held, len(tasks))
	for i, t := range tasks {
		held[i] = app.Held{ID: t.ID, By: domain.HolderOf(t)}
	}
	if _, err := a.svc.RequeueAll(context.WithoutCancel(r.Context()), queueOf(r), held, domain.CauseSocket); err != nil {
		a.logger.Error("re-queue tasks claimed for a worker that has gone", zap.Error(err))
	}
	if denied != nil {
		a.writeError(w, r, denied)
	}
	return false
}

// claimMany answers a claim that asks for up to max tasks: 200 {"tasks"},
// one or more, or 204. ctx is the claim's (waitFor).
func (a *API) claimMany(ctx context.Context, w http.ResponseWriter, r *http.Request, worker string, req claimRequest, wait time.Duration) {
	tasks, err := a.svc.ClaimMany(ctx, queueOf(r), worker, req.Query, wait, *req.Max)
	if errors.Is(err, domain.ErrNotFound) {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if err != nil && len(tasks) == 0 {
		a.writeError(w, r, ended(ctx, err))
		return
	}
	if !a.keep(w, r, tasks...) {
		return
	}
	// A store failure after some claims still hands those out: they are
	// processing under this worker's lease, and would otherwise wait for it.
	views := make([]map[string]any, len(tasks))
	for i, t := range tasks {
		views[i] = ClaimView(t)
	}
	writeJSON(w, http.StatusOK, map[string]any{"tasks": views})
}

// ClaimView is what a worker is handed with a task (over HTTP and sockets).
func ClaimView(t domain.Task) map[string]any {
	return map[string]any{"id": t.ID, "item": t.Item, "attempts": t.Attempts, "lease": t.Lease}
}

func (a *API) work(w http.ResponseWriter, r *http.Request) {
	user, err := a.authorize(r, domain.ActionWork)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if a.sockets == nil {
		a.writeError(w, r, errNoRoute)
		return
	}
	a.sockets.Work(w, r, queueOf(r), user, a.rechecker(r, domain.ActionWork))
}

func (a *API) watch(w http.ResponseWriter, r *http.Request) {
	q := queueOf(r)
	if _, err := a.authorize(r, domain.ActionStatus); err != nil {
		a.writeError(w, r, err)
		return
	}
	id := chi.URLParam(r, "id")
	if _, err := a.svc.Get(r.Context(), q, id); err != nil {
		a.writeError(w, r, notFoundAsTask(err))
		return
	}
	if a.sockets == nil {
		a.writeError(w, r, errNoRoute)
		return
	}
	a.sockets.Watch(w, r, q, id, a.rechecker(r, domain.ActionStatus))
}

// notFoundAsTask gives a missing task the task's own error code.
func notFoundAsTask(err error) error {
	if errors.Is(err, domain.ErrNotFound) {
		return errNotFound
	}
	return err
}

// workerName is the worker a request names, by default its user's name.
func workerName(given *string, user string) (string, error) {
	switch {
	case given == nil && user != "":
		return user, nil
	case given == nil:
		return "anonymous", nil
	case *given == "" || len(*given) > maxWorkerName:
		return "", domain.E(domain.KindInvalid, domain.CodeInvalidRequest, "worker must be 1 to %d characters", maxWorkerName)
	}
	return *given, nil
}

// readBody reads a body of at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, domain.E(domain.KindTooLarge, domain.CodeTooLarge, "body is over the limit of %d bytes", limit)
	}
	if err != nil {
		return nil, domain.E(domain.KindInvalid, domain.CodeInvalidRequest, "could not read the body")
	}
	return body, nil
}

// readJSON reads a JSON object body into v, strictly (httperr.Decode: a
// field v has no place for is refused, naming it); an empty body leaves v
// as is.
func readJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	body, err := readBody(w, r, limit)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	return httperr.Decode(body, v, "the body")
}
