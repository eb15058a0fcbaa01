package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/adapters/httperr"
	"github.com/taskhoster/taskhoster/domain"
)

// writeError answers with err's status and body from the error table
// (httperr). An error that is not a *domain.Error is internal: it is logged
// and its text is not sent.
func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var e *domain.Error
	if !errors.As(err, &e) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return // the client went away; nobody is listening
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
	_ = json.NewEncoder(w).Encode(v)
}

var (
	errUnknownHost  = domain.E(domain.KindNotFound, domain.CodeUnknownHost, "no such host")
	errUnknownQueue = domain.E(domain.KindNotFound, domain.CodeUnknownQueue, "no such queue")
	errNotFound     = domain.E(domain.KindNotFound, domain.CodeNotFound, "no such task")
	errNoRoute      = domain.E(domain.KindNotFound, domain.CodeNotFound, "no such path")
	errUnauthorized = domain.E(domain.KindUnauthorized, domain.CodeUnauthorized, "a valid bearer token is required")
	errForbidden    = domain.E(domain.KindForbidden, domain.CodeForbidden, "this user may not do that on this queue")
)
