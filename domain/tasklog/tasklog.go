// Package tasklog is the model of Task Logs (SPEC §9), the local mirror of a
// server's event log: an event line as pulled, where it came from, the
// payloads it archived, and the filters and positions the browser pages by.
// Like the rest of domain it is pure: no clock, no disc, no network.
package tasklog

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/taskhoster/taskhoster/domain"
)

// Key says where a line came from, and is what makes pulling idempotent: a
// line pulled twice has the same key and is stored once.
//
// Offset is the line's byte offset in the server's day file when the puller
// may read every line of that file. The server sends only the lines of one
// host that the user may read, so in general the puller cannot see where a
// line starts; it counts from the offset it asked for, adding the length of
// each line sent before. That is a lower bound of the true offset, strictly
// increasing within a day file, and the same whenever the same offset is
// asked again: unique and stable, which is all a key needs.
type Key struct {
	Source string // the server host pulled from (CanonicalHost of the Host header)
	Day    string // the day file, "2006-01-02"
	Offset int64
}

// Sizes are the byte sizes of a task's payloads as the event line reports them.
type Sizes struct {
	Item     int64 `json:"item"`
	Progress int64 `json:"progress"`
	Result   int64 `json:"result"`
	Error    int64 `json:"error"`
}

// Line is one event line of the server's log, as the mirror keeps it.
type Line struct {
	Seq int64 // the mirror's own number, in order of arrival; 0 until stored
	Key Key

	T      int64     // Unix seconds, as the server wrote them
	At     time.Time // the event's time, to the millisecond, UTC
	Host   string
	Queue  string
	ID     string
	Event  domain.EventKind
	Status domain.Status
	// Error is the task's error code the line tells: a failed or
	// cancelled line's "error" ("failed", "attempts", "corrupt",
	// "cancelled", ...), "timeout" for a timeout line, "cancelled" for a
	// cancelled line even without the field; "" on every other line (and
	// on a failed line of an older server, which did not write it).
	Error    string
	Attempts int
	Worker   string // "" when no worker was involved
	Bytes    Sizes
	Archived []string // payload kinds this event wrote: "item", "progress", "result", "error"

	Raw string // the line exactly as the server sent it, without its newline
}

// wireLine is the seed's line format. Pointers tell a missing field from a
// zero one where the difference matters.
type wireLine struct {
	T        *int64   `json:"t"`
	At       string   `json:"at"`
	Host     string   `json:"host"`
	Queue    string   `json:"queue"`
	ID       string   `json:"id"`
	Event    string   `json:"event"`
	Status   string   `json:"status"`
	Error    *string  `json:"error"`
	Attempts int      `json:"attempts"`
	Worker   *string  `json:"worker"`
	Bytes    Sizes    `json:"bytes"`
	Archived []string `json:"archived"`
}

// maxWorker bounds a worker name, as the server does (ARCHITECTURE.md), in
// characters: the server counts the bytes of the name it was given, but a
// name from a socket's ?worker= may hold bytes that are not UTF-8, which
// the line carries as "\ufffd", three bytes once read back. Each byte the
// server counted is at most one character here.
const maxWorker = 200

// ParseLine reads one event line. The names that will end up in URLs and
// file names of the mirror (host, queue, id) must have the server's forms,
// so a line can never lead the browser or the payload fetch anywhere else.
// Unknown fields and event kinds are kept (in Raw and Event): a newer server
// may add them.
func ParseLine(raw []byte) (Line, error) {
	var w wireLine
	if err := json.Unmarshal(raw, &w); err != nil {
		return Line{}, fmt.Errorf("event line is not a JSON object: %w", err)
	}
	switch {
	case w.T == nil:
		return Line{}, errors.New(`event line has no "t"`)
	case !domain.ValidHost(w.Host):
		return Line{}, fmt.Errorf("event line has a bad host %q", w.Host)
	case !domain.ValidName(w.Queue):
		return Line{}, fmt.Errorf("event line has a bad queue %q", w.Queue)
	case !domain.ValidID(w.ID):
		return Line{}, fmt.Errorf("event line has a bad task id %q", w.ID)
	case !validWord(w.Event):
		return Line{}, fmt.Errorf("event line has a bad event %q", w.Event)
	case w.Worker != nil && utf8.RuneCountInString(*w.Worker) > maxWorker:
		return Line{}, errors.New("event line has a worker name over 200 characters")
	}
	l := Line{
		T:        *w.T,
		Host:     w.Host,
		Queue:    w.Queue,
		ID:       w.ID,
		Event:    domain.EventKind(w.Event),
		Status:   domain.Status(w.Status),
		Attempts: w.Attempts,
		Bytes:    w.Bytes,
		Raw:      string(raw),
	}
	// Archived kinds become file names and list items: keep the ones that
	// are plain words (the raw line still has them all).
	for _, kind := range w.Archived {
		if validWord(kind) {
			l.Archived = append(l.Archived, kind)
		}
	}
	if w.Worker != nil {
		l.Worker = *w.Worker
	}
	// The error code is a short word; anything else stays in the raw line.
	switch {
	case w.Error != nil && validWord(*w.Error):
		l.Error = *w.Error
	case l.Event == domain.EventTimeout:
		l.Error = domain.TimeoutError // SPEC §5: the timeout line's task failed with it
	case l.Event == domain.EventCancelled:
		l.Error = domain.CancelledError // SPEC §12: a cancelled task failed with it
	}
	// "at" carries the milliseconds that order events within one second; a
	// line without a readable "at" still has its second.
	if at, err := time.Parse(time.RFC3339Nano, w.At); err == nil {
		l.At = at.UTC().Truncate(time.Millisecond)
	} else {
		l.At = time.Unix(l.T, 0).UTC()
	}
	return l, nil
}

// Failure tells whether the line is of a task failing for good (failed,
// timeout, cancelled): one of the lines the browser makes stand out.
func (l Line) Failure() bool {
	switch l.Event {
	case domain.EventFailed, domain.EventTimeout, domain.EventCancelled:
		return true
	}
	return false
}

// GaveBack tells whether the line is of a give-back (SPEC §11).
func (l Line) GaveBack() bool { return l.Event == domain.EventReleased }

// Retried tells whether the line is of a failed task put back to pending
// by a user (SPEC §12).
func (l Line) Retried() bool { return l.Event == domain.EventRetried }

// validWord accepts an event kind a future server might add, as long as it
// is a plain lower-case word.
func validWord(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// PayloadFile is the archive file an archived kind names (SPEC §8), and
// whether the kind is one of the four. A progress event rewrites
// progress.jsonl (one more line), so the mirror fetches that file again.
func PayloadFile(kind string) (string, bool) {
	switch kind {
	case "item", "result", "error":
		return kind + ".json", true
	case "progress":
		return "progress.jsonl", true
	}
	return "", false
}

// ValidPayloadFile reports whether file is one of the four archive files.
func ValidPayloadFile(file string) bool {
	switch file {
	case "item.json", "progress.jsonl", "result.json", "error.json":
		return true
	}
	return false
}

// ContentType is the media type of an archive file: progress.jsonl holds one
// JSON value per line, the others one JSON value.
func ContentType(file string) string {
	if strings.HasSuffix(file, ".jsonl") {
		return "application/x-ndjson"
	}
	return "application/json"
}

// PayloadRef names one archived body and the version of it the mirror wants:
// Want counts the lines that archived it, so a body fetched for an older
// line does not satisfy a newer one.
type PayloadRef struct {
	Source, Host, Queue, ID, File string
	Want                          int64
}

// Payload is what the mirror knows of one archived body.
type Payload struct {
	File   string
	Size   int64
	Stored bool // false while not fetched yet, or gone from the server before it was
}

// Day is one day file the server lists.
type Day struct {
	Day  string `json:"day"`
	Size int64  `json:"size"`
}

// ValidDay reports whether s names a day file: a date "2006-01-02".
func ValidDay(s string) bool {
	_, err := time.Parse(time.DateOnly, s)
	return err == nil && len(s) == len(time.DateOnly)
}

// Cursor is how far the mirror has read a day file: ask the server from
// Offset, and skip the first Skip lines of its answer, already stored. Skip
// lets a long answer be committed in several batches and resumed after an
// interruption without knowing where each line ends in the file.
type Cursor struct {
	Offset int64
	Skip   int
}

// Less orders cursors by progress through a day file.
func (c Cursor) Less(d Cursor) bool {
	return c.Offset < d.Offset || (c.Offset == d.Offset && c.Skip < d.Skip)
}

// CanonicalHost is the host folder a Host header picks (SPEC §1): lower
// case, port dropped, the root's dot dropped (as the server drops it), and
// "NAME.localhost" meaning NAME, so that pulling through any of these names
// keys lines alike; lines keyed by another source would be stored again.
func CanonicalHost(hostport string) string {
	h := strings.ToLower(hostport)
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	h = strings.TrimSuffix(h, ".")
	if name, ok := strings.CutSuffix(h, ".localhost"); ok && name != "" {
		h = name
	}
	return h
}
