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
	"bytes"
	"encoding/json"
	"errors"
	"io"
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
		// Exactly the challenge SPEC §2 names: a realm would say nothing the
		// Host header does not, and clients comparing the value would miss it.
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(r.Status)
	_ = WriteJSON(w, r.Body)
}

// Marshal is v as a JSON reply: not HTML-escaped, so "<", ">" and "&" in a
// message or an item stay themselves rather than \u003c and the like, which
// a person reading a reply with curl would have to decode (a reply is JSON,
// never HTML). Payloads arrive escaped from the stores, whose records are
// written by json.Marshal (domain.EncodeTask), so escaping them off is not
// enough: unescapeHTML turns them back too.
func Marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return unescapeHTML(b), nil
}

// WriteJSON writes v as a JSON reply (Marshal) and a newline. Every JSON
// reply of both transports is written with it or with Marshal.
func WriteJSON(w io.Writer, v any) error {
	b, err := Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// htmlEscapes are the escapes json.Marshal writes for <, > and &.
var htmlEscapes = map[string]byte{`\u003c`: '<', `\u003e`: '>', `\u0026`: '&'}

// unescapeHTML undoes json.Marshal's HTML escapes in b, valid JSON. A
// backslash only appears in a string, always as the start of an escape
// (two characters, or six for \uXXXX), so reading escape by escape never
// mistakes the text of an escaped backslash (\\u003c, the six characters
// \u003c) for one.
func unescapeHTML(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u00`)) {
		return b // the common case: nothing to undo, nothing copied
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 == len(b) {
			out = append(out, b[i])
			continue
		}
		if i+6 <= len(b) {
			if c, ok := htmlEscapes[string(b[i:i+6])]; ok {
				out = append(out, c)
				i += 5
				continue
			}
		}
		out = append(out, b[i], b[i+1])
		i++
	}
	return out
}

// MethodNotAllowed answers a method a path does not take (SPEC §3: 405),
// listing in Allow the ones it does. It is no use case's error (no Kind
// maps to 405): only routers answer it.
func MethodNotAllowed(w http.ResponseWriter, allow ...string) {
	for _, m := range allow {
		w.Header().Add("Allow", m)
	}
	Reply{Status: http.StatusMethodNotAllowed, Body: Body{
		Error: domain.CodeMethodNotAllowed, Message: "this path does not take that method", Details: []domain.Violation{},
	}}.Write(w)
}
