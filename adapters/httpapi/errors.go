package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/domain"
)

// errorBody is every error response (SPEC §3).
type errorBody struct {
	Error   string             `json:"error"`
	Message string             `json:"message"`
	Details []domain.Violation `json:"details"`
}

// statusOf maps an error's Kind to its HTTP status: the one place where
// that mapping lives.
func statusOf(kind domain.Kind) int {
	switch kind {
	case domain.KindInvalid:
		return http.StatusBadRequest
	case domain.KindSchema:
		return http.StatusUnprocessableEntity
	case domain.KindNotFound:
		return http.StatusNotFound
	case domain.KindConflict:
		return http.StatusConflict
	case domain.KindUnauthorized:
		return http.StatusUnauthorized
	case domain.KindForbidden:
		return http.StatusForbidden
	case domain.KindTooLarge:
		return http.StatusRequestEntityTooLarge
	case domain.KindUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// writeError answers with err's status and code. An error that is not a
// *domain.Error is internal: it is logged and its text is not sent.
func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var e *domain.Error
	if !errors.As(err, &e) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return // the client went away; nobody is listening
		}
		e = &domain.Error{Kind: domain.KindInternal, Code: "internal", Message: "internal error"}
	}
	status := statusOf(e.Kind)
	if status >= 500 {
		a.logger.Error("request failed", zap.String("path", r.URL.Path), zap.Error(err))
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="taskhoster"`)
	}
	msg := e.Message
	if e.Kind == domain.KindInternal {
		msg = "internal error"
	}
	details := e.Details
	if details == nil {
		details = []domain.Violation{}
	}
	writeJSON(w, status, errorBody{Error: e.Code, Message: msg, Details: details})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

var (
	errUnknownHost  = domain.E(domain.KindNotFound, "unknown_host", "no such host")
	errUnknownQueue = domain.E(domain.KindNotFound, "unknown_queue", "no such queue")
	errNotFound     = domain.E(domain.KindNotFound, "not_found", "no such task")
	errNoRoute      = domain.E(domain.KindNotFound, "not_found", "no such path")
	errUnauthorized = domain.E(domain.KindUnauthorized, "unauthorized", "a valid bearer token is required")
	errForbidden    = domain.E(domain.KindForbidden, "forbidden", "this user may not do that on this queue")
)
