package httpapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
)

// Operating queues (SPEC §12): list and search, cancel, retry, purge, pause
// and resume, and batch posts. Idempotent posts and batch claims are in
// handlers.go, with the single post and claim they extend.

// maxBatchBody bounds a batch body: a thousand items of the queue's limit
// each, but no more than this (or one item's limit, when that is larger),
// so that one request cannot make the server hold a gigabyte.
const maxBatchBody = 64 << 20

var (
	limitPattern  = regexp.MustCompile(`^[0-9]{1,4}$`)
	cursorPattern = regexp.MustCompile(`^[\x21-\x7e]{1,512}$`) // a cursor the store made, far shorter
	anyPattern    = regexp.MustCompile(`(?s)^.*$`)
)

// listedTask is one task of a list: the status view with the item and who
// posted it, which lists show and status views do not.
type listedTask struct {
	domain.View
	Item     json.RawMessage `json:"item"`
	PostedBy *string         `json:"postedBy"`
}

// listTasks serves GET /{queue}/tasks.
func (a *API) listTasks(w http.ResponseWriter, r *http.Request) {
	q := queueOf(r)
	if _, err := a.authorize(r, domain.ActionManage); err != nil {
		a.writeError(w, r, err)
		return
	}
	l, err := listQuery(r.URL.Query())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	tasks, next, err := a.svc.ListTasks(r.Context(), q, l)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	views := make([]listedTask, 0, len(tasks))
	for _, t := range tasks {
		views = append(views, listedTask{View: t.View(), Item: t.Item, PostedBy: t.PostedBy})
	}
	var cursor *string
	if next != "" {
		cursor = &next
	}
	writeJSON(w, http.StatusOK, map[string]any{"tasks": views, "next": cursor})
}

// listQuery reads a list's parameters: status (default pending), order
// (oldest, the default, or newest), limit (1 to 1000, default 100), after
// (a cursor from an earlier page) and query (a JSON Schema).
func listQuery(query url.Values) (app.ListQuery, error) {
	l := app.ListQuery{Status: domain.Pending, Limit: 100}
	if v, ok, err := param(query, "status", anyPattern, "pending, processing, finished or failed"); err != nil {
		return l, err
	} else if ok {
		l.Status = domain.Status(v)
		if !l.Status.Valid() {
			return l, badParam("status", "pending, processing, finished or failed")
		}
	}
	switch v, ok, err := param(query, "order", anyPattern, "oldest or newest"); {
	case err != nil:
		return l, err
	case ok && v == "newest":
		l.Newest = true
	case ok && v != "oldest":
		return l, badParam("order", "oldest or newest")
	}
	limitWhat := "an integer from 1 to " + strconv.Itoa(app.MaxListLimit)
	if v, ok, err := param(query, "limit", limitPattern, limitWhat); err != nil {
		return l, err
	} else if ok {
		l.Limit, _ = strconv.Atoi(v)
		if l.Limit < 1 || l.Limit > app.MaxListLimit {
			return l, badParam("limit", limitWhat)
		}
	}
	if v, ok, err := param(query, "after", cursorPattern, "the next cursor of an earlier page"); err != nil {
		return l, err
	} else if ok {
		l.After = v
	}
	if v, ok, err := param(query, "query", anyPattern, "a URL-encoded JSON Schema"); err != nil {
		return l, err
	} else if ok {
		if !json.Valid([]byte(v)) {
			return l, domain.E(domain.KindInvalid, domain.CodeInvalidQuery, "query parameter query is not valid JSON")
		}
		l.Query = json.RawMessage(v)
	}
	return l, nil
}

// cancel serves DELETE /{queue}/{id}: a user with manage access cancels any
// task, one with only post access the tasks it posted.
func (a *API) cancel(w http.ResponseWriter, r *http.Request) {
	q := queueOf(r)
	user, err := a.authorize(r, domain.ActionManage, domain.ActionPost)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	id := chi.URLParam(r, "id")
	if !domain.ValidID(id) {
		a.writeError(w, r, errNotFound)
		return
	}
	by := app.Canceller{User: user, Manage: q.Access.Check(user, domain.ActionManage) == domain.Allowed}
	if user == "" && !by.Manage {
		// Public post access lets anyone in, but only a named user can
		// be the one who posted a task: a token is needed (401).
		a.writeError(w, r, errUnauthorized)
		return
	}
	out, err := a.svc.Cancel(r.Context(), q, id, by)
	if err != nil {
		a.writeError(w, r, notFoundAsTask(err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"accepted": out.Accepted, "status": out.Status})
}

// retry serves POST /{queue}/{id}/retry; it answers the status view of the
// task, pending again.
func (a *API) retry(w http.ResponseWriter, r *http.Request) {
	q := queueOf(r)
	if _, err := a.authorize(r, domain.ActionManage); err != nil {
		a.writeError(w, r, err)
		return
	}
	id := chi.URLParam(r, "id")
	if !domain.ValidID(id) {
		a.writeError(w, r, errNotFound)
		return
	}
	t, err := a.svc.RetryTask(r.Context(), q, id)
	if err != nil {
		a.writeError(w, r, notFoundAsTask(err))
		return
	}
	writeJSON(w, http.StatusOK, t.View())
}

// purge serves POST /{queue}/purge?status=failed|finished. The status must
// be given: a purge deletes, so it never guesses which.
func (a *API) purge(w http.ResponseWriter, r *http.Request) {
	q := queueOf(r)
	if _, err := a.authorize(r, domain.ActionManage); err != nil {
		a.writeError(w, r, err)
		return
	}
	const what = "failed or finished"
	v, ok, err := param(r.URL.Query(), "status", anyPattern, what)
	switch {
	case err != nil:
		a.writeError(w, r, err)
		return
	case !ok || (v != string(domain.Failed) && v != string(domain.Finished)):
		a.writeError(w, r, badParam("status", what))
		return
	}
	n, err := a.svc.Purge(r.Context(), q, domain.Status(v))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"deleted": n})
}

// setPaused serves POST /{queue}/pause and /resume.
func (a *API) setPaused(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := queueOf(r)
		if _, err := a.authorize(r, domain.ActionManage); err != nil {
			a.writeError(w, r, err)
			return
		}
		if err := a.svc.SetPaused(r.Context(), q, paused); err != nil {
			a.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]bool{"paused": paused})
	}
}

// batchRequest is the body of a batch post.
type batchRequest struct {
	Items *[]json.RawMessage `json:"items"`
}

// batch serves POST /{queue}/batch: all the items or none, one flush.
func (a *API) batch(w http.ResponseWriter, r *http.Request) {
	q := queueOf(r)
	user, err := a.authorize(r, domain.ActionPost)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if _, given := r.Header[http.CanonicalHeaderKey(idempotencyHeader)]; given {
		a.writeError(w, r, domain.E(domain.KindInvalid, domain.CodeInvalidRequest, "a batch takes no Idempotency-Key"))
		return
	}
	opts, err := postOptions(r.URL.Query())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	limit := min(q.Settings.MaxItemBytes*app.MaxBatch, maxBatchBody)
	limit = max(limit, q.Settings.MaxItemBytes) + envelopeSlack
	var req batchRequest
	if err := readJSON(w, r, limit, &req); err != nil {
		a.writeError(w, r, err)
		return
	}
	if req.Items == nil {
		a.writeError(w, r, missingField("items"))
		return
	}
	items := make([][]byte, len(*req.Items))
	for i, item := range *req.Items {
		items[i] = item
	}
	tasks, err := a.svc.PostBatch(r.Context(), q, user, items, opts)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	writeJSON(w, http.StatusCreated, map[string][]string{"ids": ids})
}

// idempotencyHeader carries a post's idempotency key (SPEC §12).
const idempotencyHeader = "Idempotency-Key"

// idempotencyKey is the key a post's header gives, "" for none; a header
// given twice or empty is refused (the use case checks the characters).
func idempotencyKey(r *http.Request) (string, error) {
	values, given := r.Header[http.CanonicalHeaderKey(idempotencyHeader)]
	switch {
	case !given:
		return "", nil
	case len(values) != 1 || values[0] == "":
		return "", domain.E(domain.KindInvalid, domain.CodeInvalidRequest,
			"an Idempotency-Key is given once, 1 to %d visible ASCII characters", domain.MaxKeyLength)
	}
	return values[0], nil
}
