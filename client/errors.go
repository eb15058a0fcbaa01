package client

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
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

// Release is an error a Handler returns to give its task back (SPEC §11):
// the Worker sends a release instead of a result, and the task is pending
// again, claimable after the larger of Delay and the queue's retry backoff,
// or failed with error "attempts" after its last allowed attempt. Reason
// (any JSON value; nil for none) is kept in the task's failure field.
//
//	return nil, client.Release{Delay: time.Minute, Reason: map[string]string{"why": "rate limited"}}
type Release struct {
	Delay  time.Duration
	Reason any
}

func (r Release) Error() string {
	if r.Delay > 0 {
		return fmt.Sprintf("give the task back for %v", r.Delay)
	}
	return "give the task back"
}

// Failure is an error a Handler returns to fail its task for good: the
// Worker sends a failure instead of a result, and the task ends failed with
// error "failed" and Reason (any JSON value; nil for none) as its failure.
//
//	return nil, client.Failure{Reason: map[string]string{"why": "no such image"}}
type Failure struct {
	Reason any
}

func (Failure) Error() string { return "fail the task" }
