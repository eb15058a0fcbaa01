package client

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Error is a failure the server explained: the HTTP status and the body
// {"error": code, "message", "details"} of SPEC §3. Over the worker socket
// the same code and message arrive in an "error" message, with Status 0.
type Error struct {
	Status  int         // the HTTP status; 0 for an error message on a socket
	Code    string      // the stable word: "invalid_item", "unauthorized", ...
	Message string      // for humans
	Details []Violation // the schema violations, for invalid_item and the like
}

// Violation is one way a JSON value breaks a queue's schema.
type Violation struct {
	Path    string `json:"path"` // a JSON pointer into the value, "" for the whole
	Message string `json:"message"`
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Code)
	if e.Status != 0 {
		fmt.Fprintf(&b, " (%d)", e.Status)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	for _, v := range e.Details {
		fmt.Fprintf(&b, "; %s: %s", pathOrRoot(v.Path), v.Message)
	}
	return b.String()
}

func pathOrRoot(p string) string {
	if p == "" {
		return "(the whole value)"
	}
	return p
}

// maxErrorBody bounds how much of an error answer is read: enough for any
// list of violations the server sends, not a runaway proxy page.
const maxErrorBody = 1 << 20

// decodeError turns a non-2xx answer into a *Error. A body that is not the
// server's error object (a proxy's page, say) keeps its first line as the
// message and the status text as the code, so the caller still learns
// something useful.
func decodeError(resp *http.Response) *Error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &Error{Status: resp.StatusCode}
	var body struct {
		Error   string      `json:"error"`
		Message string      `json:"message"`
		Details []Violation `json:"details"`
	}
	if json.Unmarshal(data, &body) == nil && body.Error != "" {
		e.Code, e.Message, e.Details = body.Error, body.Message, body.Details
		return e
	}
	e.Code = strings.ToLower(strings.ReplaceAll(http.StatusText(resp.StatusCode), " ", "_"))
	if e.Code == "" {
		e.Code = "http_error"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(data)), "\n")
	if len(line) > 200 {
		line = line[:200] + "…"
	}
	e.Message = line
	return e
}
