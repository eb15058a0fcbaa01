package domain

// Code is the stable machine-readable word a client sees in an error reply
// (SPEC §3: {"error": "<code>"}; SPEC §4: {"type": "error", "error": "<code>"}).
// Every error is built with one of the constants below, never a literal, so
// that the words a client may meet are all listed here.
//
// A code does not fix the HTTP status: the error's Kind does (see
// adapters/httperr). The Kind each code is built with is noted beside it.
type Code string

// Requests a client got wrong (KindInvalid, 400 unless noted).
const (
	CodeInvalidJSON    Code = "invalid_json"    // a body or socket message that is not JSON of the expected shape
	CodeInvalidRequest Code = "invalid_request" // a malformed or out-of-range parameter or field
	CodeInvalidQuery   Code = "invalid_query"   // a claim's query that is not a valid JSON Schema
	CodeInvalidFilter  Code = "invalid_filter"  // a task-log filter that does not parse
	CodeInvalidOffset  Code = "invalid_offset"  // a log read from an offset that is not a line start
	CodeTooManyClaims  Code = "too_many_claims" // a worker socket over MaxClaims outstanding claims
)

// Values that break a queue's schema (KindSchema, 422), with details.
const (
	CodeInvalidItem     Code = "invalid_item"
	CodeInvalidProgress Code = "invalid_progress"
	CodeInvalidResult   Code = "invalid_result"
	CodeInvalidFailure  Code = "invalid_failure" // SPEC §11: a release's or failure's reason
)

// Things that do not exist (KindNotFound, 404).
const (
	CodeNotFound     Code = "not_found"     // no such task, path, log day or payload
	CodeUnknownHost  Code = "unknown_host"  // no host folder for the Host header
	CodeUnknownQueue Code = "unknown_queue" // no such queue on the host
	CodeNoStore      Code = "no_store"      // the log store is not open for that host
)

// Moves the task's state does not allow (KindConflict, 409).
const (
	CodeTerminal            Code = "terminal"
	CodeNotPending          Code = "not_pending"
	CodeNotProcessing       Code = "not_processing"
	CodeNotLeaseHolder      Code = "not_lease_holder"
	CodeTaskExists          Code = "task_exists"
	CodeNotYet              Code = "not_yet"              // a claim of a pending task before its notBefore
	CodeNotFailed           Code = "not_failed"           // SPEC §12: retry of a task that is not failed
	CodeIdempotencyConflict Code = "idempotency_conflict" // SPEC §12: a key reused with another item
)

// Who may do what (KindUnauthorized 401, KindForbidden 403).
const (
	CodeUnauthorized Code = "unauthorized"
	CodeForbidden    Code = "forbidden"
)

// Limits (KindTooLarge 413, KindUnavailable 503).
const (
	CodeTooLarge       Code = "too_large"        // a body over its limit (413)
	CodeTooManyWaiting Code = "too_many_waiting" // too many claims waiting on the server (503)
	CodeTooManySockets Code = "too_many_sockets" // a host with all the sockets it may have (503)
)

// The server cannot do it now (KindUnavailable, 503).
const (
	CodeUnavailable        Code = "unavailable"         // shutting down
	CodeStorageUnavailable Code = "storage_unavailable" // the task store is closed or failing
	CodeLogUnavailable     Code = "log_unavailable"     // the event log cannot be written
)

// Records that do not hold together (KindInvalid when a caller handed them
// in, KindInternal when the server found them so) and other bugs.
const (
	CodeInvalidTask       Code = "invalid_task"
	CodeInvalidStage      Code = "invalid_stage"
	CodeIllegalTransition Code = "illegal_transition" // KindInternal: a stored change that is no move of the state machine (domain.CheckTransition)
	CodeInternal          Code = "internal"           // KindInternal: anything unclassified; its text is never sent
)

// CodeMethodNotAllowed answers any other method on a known path (SPEC §3:
// 405). It has no Kind: no use case ever returns it, only the router.
const CodeMethodNotAllowed Code = "method_not_allowed"
