package httpapi

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/taskhoster/taskhoster/adapters/eventlog"
	"github.com/taskhoster/taskhoster/domain"
)

// The log API (SPEC §8): a host's users read the event log's day files and
// the payload archive, each line and body only if they have logs access on
// its queue. It only reads files (eventlog.Reader): reading the log never
// touches a task, so it never stamps fetchedAt nor starts a retention clock.

// LogReader reads the event log and the payload archive; eventlog.Reader is
// one.
type LogReader interface {
	// Days lists the day files, oldest first.
	Days() ([]eventlog.DayFile, error)
	// ReadLines returns the whole lines of day's file from offset on (at
	// most limit bytes read) that keep accepts, and the offset to read from
	// next time.
	ReadLines(day string, offset int64, limit int, keep func(host, queue string) bool) ([]byte, int64, error)
	// OpenPayload opens one archived body of a task.
	OpenPayload(host, queue, id, name string) (*eventlog.Payload, error)
}

// maxLogRead caps the bytes of a day file one request reads, lines filtered
// out included, so that a request costs the same whatever the offset. A
// client reading everything asks again from X-Next-Offset until it stops
// moving.
const maxLogRead = 4 << 20

// routeLogs mounts the log API on r. Queue names cannot start with "_", so
// /_logs never shadows a queue.
func (a *API) routeLogs(r chi.Router) {
	r.Route("/_logs", func(r chi.Router) {
		r.Get("/tasks", a.logDays)
		r.Get("/tasks/{day}", a.logLines)
		r.With(a.resolveQueue).Get("/payloads/{queue}/{id}/{file}", a.logPayload)
	})
}

type dayJSON struct {
	Day  string `json:"day"`
	Size int64  `json:"size"`
}

// logDays answers GET /_logs/tasks: every day file with its size. The sizes
// are those of the shared files (every host's lines), as offsets into them
// are what a client asks with.
func (a *API) logDays(w http.ResponseWriter, r *http.Request) {
	if _, err := a.readableQueues(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	days, err := a.logs.Days()
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := make([]dayJSON, len(days))
	for i, d := range days {
		out[i] = dayJSON{Day: d.Day, Size: d.Size}
	}
	writeJSON(w, http.StatusOK, out)
}

// logLines answers GET /_logs/tasks/{day}?offset=N: this host's lines the
// user may read, exactly as stored, and X-Next-Offset.
func (a *API) logLines(w http.ResponseWriter, r *http.Request) {
	readable, err := a.readableQueues(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	offset, err := parseOffset(r.URL.Query().Get("offset"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	host := hostOf(r).Name
	lines, next, err := a.logs.ReadLines(chi.URLParam(r, "day"), offset, maxLogRead, func(h, q string) bool {
		return h == host && readable[q]
	})
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Next-Offset", strconv.FormatInt(next, 10))
	// The lines name other users' workers: no shared cache may keep them.
	w.Header().Set("Cache-Control", "private, no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(lines)
}

// logPayload answers GET /_logs/payloads/{queue}/{id}/{file} with the body as
// archived. http.ServeContent adds Range, If-Modified-Since and, by the
// ETag, If-None-Match and If-Range, so a client can resume a large body or
// skip one it already has. Last-Modified names a whole second, within which
// a body can change (progress.jsonl grows with each report): the ETag, of
// the body's size and its change to the nanosecond, tells a client that
// holds an older body, where If-Modified-Since alone would answer 304.
func (a *API) logPayload(w http.ResponseWriter, r *http.Request) {
	q := queueOf(r)
	if _, err := a.authorize(r, domain.ActionLogs); err != nil {
		a.writeError(w, r, err)
		return
	}
	file := chi.URLParam(r, "file")
	p, err := a.logs.OpenPayload(q.Host, q.Name, chi.URLParam(r, "id"), file)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	defer p.Close()
	contentType := "application/json"
	if file == eventlog.ProgressFile {
		contentType = "application/x-ndjson"
	}
	w.Header().Set("Content-Type", contentType)
	// A body is whatever a client posted: never let a browser sniff it into
	// a page of this host.
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "private, no-cache")
	w.Header().Set("ETag", fmt.Sprintf(`"%x-%x"`, p.Size(), p.ModTime.UnixNano()))
	http.ServeContent(w, r, file, p.ModTime, p)
}

// readableQueues is the set of the request's host's queues whose logs the
// requester may read. None is 401 for a requester without a known token and
// 403 for a known user, as for any action; a queue whose logs are public is
// readable without a token. Queues that are not in the live configuration
// (removed, or invalid) are not in the set, so their lines stay unread.
func (a *API) readableQueues(r *http.Request) (map[string]bool, error) {
	h := hostOf(r)
	user, _ := h.Authenticate(token(r))
	readable := make(map[string]bool)
	for name, q := range h.Queues {
		if q.Access[domain.ActionLogs].Allows(user) {
			readable[name] = true
		}
	}
	switch {
	case len(readable) > 0:
		return readable, nil
	case user == "":
		return nil, errUnauthorized
	}
	return nil, errForbiddenLogs
}

// parseOffset reads ?offset=: absent is 0, anything but a decimal count of
// bytes is invalid. Whether it is a line start is the reader's to say.
func parseOffset(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, domain.E(domain.KindInvalid, domain.CodeInvalidOffset, "offset must be a byte offset, 0 or more")
	}
	return n, nil
}

var errForbiddenLogs = domain.E(domain.KindForbidden, domain.CodeForbidden, "this user may not read the logs of any queue of this host")

var _ LogReader = (*eventlog.Reader)(nil)
