// Package httperr is the one table from an error's Kind to what a client is
// told about it: the HTTP status, and whether its message is masked. Both
// transports consult it: httpapi for its responses, wsapi for refused socket
// upgrades (which are HTTP responses) and for the error replies it sends in
// a worker socket (SPEC §4), which carry the same code and message.
//
// HTTP statuses are transport vocabulary, so the table lives on the adapter
// side, not in domain; it imports only domain, so either adapter may use it.
package httperr

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/taskhoster/taskhoster/domain"
)

// InternalMessage is the whole message a client gets for an internal error:
// its text (a path, a driver's words) is logged, never sent.
const InternalMessage = "internal error"

// Rule is how errors of one Kind reach a client.
type Rule struct {
	Status int  // the HTTP status
	Masked bool // the message is replaced by InternalMessage
}

// rules is the table. A Kind missing from it is treated as KindInternal.
var rules = map[domain.Kind]Rule{
	domain.KindInternal:     {Status: http.StatusInternalServerError, Masked: true},
	domain.KindInvalid:      {Status: http.StatusBadRequest},
	domain.KindSchema:       {Status: http.StatusUnprocessableEntity},
	domain.KindNotFound:     {Status: http.StatusNotFound},
	domain.KindConflict:     {Status: http.StatusConflict},
	domain.KindUnauthorized: {Status: http.StatusUnauthorized},
	domain.KindForbidden:    {Status: http.StatusForbidden},
	domain.KindTooLarge:     {Status: http.StatusRequestEntityTooLarge},
	domain.KindUnavailable:  {Status: http.StatusServiceUnavailable},
}

// RuleOf is the table's row for kind.
func RuleOf(kind domain.Kind) Rule {
	if r, ok := rules[kind]; ok {
		return r
	}
	return rules[domain.KindInternal]
}

// Body is what every error reply says (SPEC §3: {"error", "message",
// "details"}); the socket's error reply embeds it after its type and ref.
type Body struct {
	Error   domain.Code        `json:"error"`
	Message string             `json:"message"`
	Details []domain.Violation `json:"details"` // never null: [] when there are none
}

// Internal is the body of an internal error.
func Internal() Body {
	return Body{Error: domain.CodeInternal, Message: InternalMessage, Details: []domain.Violation{}}
}

// Reply is what a client is told about one error.
type Reply struct {
	Status int
	Body   Body
}

// Of classifies err by the table. An error that is not a *domain.Error
// anywhere in its chain is internal: code "internal", message masked.
func Of(err error) Reply {
	var e *domain.Error
	if !errors.As(err, &e) {
		return Reply{Status: RuleOf(domain.KindInternal).Status, Body: Internal()}
	}
	rule := RuleOf(e.Kind)
	body := Body{Error: e.Code, Message: e.Message, Details: e.Details}
	if rule.Masked {
		body.Message = InternalMessage
	}
	if body.Details == nil {
		body.Details = []domain.Violation{}
	}
	return Reply{Status: rule.Status, Body: body}
}

// ServerFault reports whether the error is the server's (a 5xx status):
// whoever sends the reply logs the error itself, since the client is not
// told the cause.
func (r Reply) ServerFault() bool { return r.Status >= http.StatusInternalServerError }

// Write sends the reply as an HTTP response, with the challenge a 401 needs.
func (r Reply) Write(w http.ResponseWriter) {
	if r.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="taskhoster"`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(r.Status)
	_ = json.NewEncoder(w).Encode(r.Body)
}
