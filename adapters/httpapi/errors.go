package httpapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/adapters/httperr"
	"github.com/taskhoster/taskhoster/domain"
)

// writeError answers with err's status and body from the error table
// (httperr). An error that is not a *domain.Error is internal: it is logged
// and its text is not sent.
func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var e *domain.Error
	if !errors.As(err, &e) && r.Context().Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// The client went away; nobody is listening. Asked of the request,
		// not only of err: a deadline of the server's own (a store's
		// timeout) with the client still there is an internal error, and
		// answering nothing would send it an empty 200.
		return
	}
	reply := httperr.Of(err)
	if reply.ServerFault() {
		a.logger.Error("request failed", zap.String("path", r.URL.Path), zap.Error(err))
	}
	reply.Write(w)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = httperr.WriteJSON(w, v)
}

var (
	errNotFound     = domain.E(domain.KindNotFound, domain.CodeNotFound, "no such task")
	errNoRoute      = domain.E(domain.KindNotFound, domain.CodeNotFound, "no such path")
	errUnauthorized = domain.E(domain.KindUnauthorized, domain.CodeUnauthorized, "a valid bearer token is required")
	errForbidden    = domain.E(domain.KindForbidden, domain.CodeForbidden, "this user may not do that on this queue")
)

// unknownHost refuses a Host header no host folder answers to, saying how
// hosts are matched: a newcomer's first request usually sends the wrong one
// (curl http://127.0.0.1:8080/ sends Host: 127.0.0.1).
func unknownHost(header string) error {
	name := header
	if h, _, err := net.SplitHostPort(header); err == nil {
		name = h
	}
	return domain.E(domain.KindNotFound, domain.CodeUnknownHost,
		"no host %s: the Host header, without its port and lower-cased, must equal the name of a folder under the hosts folder (NAME.localhost also reaches the folder NAME)",
		quoted(strings.ToLower(name)))
}

// unknownQueue refuses a queue its host does not have (or does not serve:
// its file is missing or has never been valid).
func unknownQueue(host, name string) error {
	return domain.E(domain.KindNotFound, domain.CodeUnknownQueue,
		"no queue %s on host %q: a queue is a file QUEUE.json in the host's taskhoster-queues folder", quoted(name), host)
}

// maxQuoted bounds what a message repeats of a name the client sent: enough
// to recognise it, not a header's worth.
const maxQuoted = 100

// quoted is s as a quoted Go string, cut to maxQuoted bytes.
func quoted(s string) string {
	if len(s) > maxQuoted {
		return strconv.Quote(strings.ToValidUTF8(s[:maxQuoted], "")) + "..."
	}
	return strconv.Quote(s)
}
