package domain

import (
	"errors"
	"fmt"
)

// Kind classifies an error so that the transports can map it to their own
// vocabulary in exactly one place: adapters/httperr, which gives the HTTP
// status and whether the message is masked, for httpapi and wsapi both.
type Kind int

const (
	KindInternal     Kind = iota // a bug or an unexpected failure; its text is never sent
	KindInvalid                  // the request is malformed (bad JSON, a bad query)
	KindSchema                   // well-formed, but breaks the queue's schema
	KindNotFound                 // no such host, queue or task
	KindConflict                 // the task is not in a state that allows the move
	KindUnauthorized             // no or unknown credentials where they are needed
	KindForbidden                // a known user without the right
	KindTooLarge                 // a body over its limit
	KindUnavailable              // the server cannot do it now (disc full, shutting down)
)

func (k Kind) String() string {
	switch k {
	case KindInvalid:
		return "invalid"
	case KindSchema:
		return "schema"
	case KindNotFound:
		return "not found"
	case KindConflict:
		return "conflict"
	case KindUnauthorized:
		return "unauthorized"
	case KindForbidden:
		return "forbidden"
	case KindTooLarge:
		return "too large"
	case KindUnavailable:
		return "unavailable"
	}
	return "internal"
}

// Violation is one way a JSON value breaks a schema: where, and why.
type Violation struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Error is the one error type that crosses layers. Code is the stable
// machine-readable word a client sees (SPEC §3; the constants of codes.go).
type Error struct {
	Kind    Kind
	Code    Code
	Message string
	Details []Violation
	Err     error // the cause, for logs; never shown to clients
}

func (e *Error) Error() string {
	msg := string(e.Code)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// E builds an *Error. Use it where an error is first classified.
func E(kind Kind, code Code, format string, args ...any) *Error {
	return &Error{Kind: kind, Code: code, Message: fmt.Sprintf(format, args...)}
}

// KindOf reports the Kind of the first *Error in err's chain, or KindInternal.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindInternal
}

// Sentinels for the illegal moves of the state machine. They are *Error values
// so callers can both errors.Is them and read their Kind.
var (
	// ErrTerminal: the task is already finished or failed; nothing changes it
	// any more except retention.
	ErrTerminal = &Error{Kind: KindConflict, Code: CodeTerminal, Message: "task is already terminal"}
	// ErrNotPending: only a pending task can be claimed.
	ErrNotPending = &Error{Kind: KindConflict, Code: CodeNotPending, Message: "task is not pending"}
	// ErrNotProcessing: progress and re-queue need a leased task.
	ErrNotProcessing = &Error{Kind: KindConflict, Code: CodeNotProcessing, Message: "task is not processing"}
	// ErrNotLeaseHolder: progress from a worker other than the one holding the lease.
	ErrNotLeaseHolder = &Error{Kind: KindConflict, Code: CodeNotLeaseHolder, Message: "task is leased to another worker"}
	// ErrNotYet: a pending task whose notBefore has not come cannot be
	// claimed.
	ErrNotYet = &Error{Kind: KindConflict, Code: CodeNotYet, Message: "task is not claimable yet"}
	// ErrNotFailed: only a failed task can be retried.
	ErrNotFailed = &Error{Kind: KindConflict, Code: CodeNotFailed, Message: "task is not failed"}
	// ErrKeyTaken: another task of the queue holds the new task's
	// idempotency key.
	ErrKeyTaken = &Error{Kind: KindConflict, Code: CodeIdempotencyConflict, Message: "another task holds this idempotency key"}
	// ErrNotFound: no such task.
	ErrNotFound = &Error{Kind: KindNotFound, Code: CodeNotFound, Message: "no such task"}
	// ErrExists: a new task's id is already taken in its queue. Ids are drawn
	// at random, so a post that meets it draws another.
	ErrExists = &Error{Kind: KindConflict, Code: CodeTaskExists, Message: "task already exists"}
)
