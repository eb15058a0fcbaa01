package eventlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/taskhoster/taskhoster/domain"
)

// line is one event as it appears in a day file. The field order is the order
// of the seed's example line, with "error" (failed and cancelled lines
// only) after "status"; encoding/json keeps the order of the struct.
type line struct {
	T      int64            `json:"t"`
	At     string           `json:"at"`
	Host   string           `json:"host"`
	Queue  string           `json:"queue"`
	ID     string           `json:"id"`
	Event  domain.EventKind `json:"event"`
	Status domain.Status    `json:"status"`
	// Error is the task's error code on a failed line (SPEC §8: a
	// worker's failure "failed", a dead letter "attempts", a corrupt file
	// "corrupt") and on a cancelled line ("cancelled", SPEC §12: the task
	// failed with it, so Task Logs finds it by error code as well as by
	// event); no other line has the field.
	Error    *string  `json:"error,omitempty"`
	Attempts int      `json:"attempts"`
	Worker   *string  `json:"worker"` // null when no worker is involved
	Bytes    sizes    `json:"bytes"`
	Archived []string `json:"archived"`
}

// sizes are the byte lengths of a task's payloads as its file holds them.
type sizes struct {
	Item     int `json:"item"`
	Progress int `json:"progress"`
	Result   int `json:"result"`
	Error    int `json:"error"`
}

// atLayout always prints three fractional digits, so lines of one file line
// up and sort as text.
const atLayout = "2006-01-02T15:04:05.000Z"

// dayLayout names a day file (without its .jsonl suffix).
const dayLayout = "2006-01-02"

// dayOf is the day file an event at t belongs to: the UTC day of its "t".
func dayOf(t time.Time) string { return t.UTC().Format(dayLayout) }

// encodeLine is ev's line, newline included, ready for a single write.
// archived names the payload bodies this event wrote to the archive (see
// archiveBodies); nil is written as [].
func encodeLine(ev domain.Event, archived []string) []byte {
	if archived == nil {
		archived = []string{}
	}
	t := ev.Task
	l := line{
		T:        ev.At.Unix(),
		At:       ev.At.UTC().Format(atLayout),
		Host:     t.Host,
		Queue:    t.Queue,
		ID:       t.ID,
		Event:    ev.Kind,
		Status:   t.Status,
		Attempts: t.Attempts,
		Bytes: sizes{
			Item:     storedLen(t.Item),
			Progress: storedLen(t.Progress),
			Result:   storedLen(t.Result),
			Error:    errorLen(t),
		},
		Archived: archived,
	}
	if ev.Kind == domain.EventFailed || ev.Kind == domain.EventCancelled {
		l.Error = t.Error
	}
	if ev.Worker != "" {
		l.Worker = &ev.Worker
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // Encode ends the line with '\n'
	// The log is read by tools, not embedded in HTML: keep a worker name's
	// < > & readable.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(l); err != nil {
		// Every field is a string, a number or a list of strings.
		panic(fmt.Sprintf("encode event line for %s: %v", t.ID, err))
	}
	return buf.Bytes()
}

// storedLen is the length of a raw payload as the task file holds it, 0 for
// null. The store writes tasks with encoding/json (domain.EncodeTask), which
// compacts raw JSON and escapes <, >, & and U+2028/U+2029 on the way, so a
// payload can be longer or shorter on disc than in memory. Counting the way
// the encoder writes spares re-encoding a payload of up to a megabyte on
// every event of its task.
func storedLen(raw json.RawMessage) int {
	if domain.IsNull(bytes.TrimSpace(raw)) {
		return 0
	}
	n, inString, escaped := 0, false, false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '<' || c == '>' || c == '&':
			n += len(`\u003c`)
		case c == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && raw[i+2]&^1 == 0xA8:
			n += len(`\u2028`)
			i += 2
		case inString:
			n++
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			// Whitespace between tokens: compaction drops it.
		default:
			n++
			inString = c == '"'
		}
	}
	return n
}

// errorLen is the size of the task's error payload (SPEC §11): its failure,
// the reason of a give-back or failure, when it has one, as its file holds
// it; otherwise its error code as a JSON string, so "timeout" counts 9
// bytes. It is the size of the error.json the archive writes (errorBody).
func errorLen(t domain.Task) int {
	if n := storedLen(t.Failure); n > 0 {
		return n
	}
	if t.Error == nil {
		return 0
	}
	b, err := json.Marshal(*t.Error)
	if err != nil {
		panic(fmt.Sprintf("encode error string: %v", err)) // a string always encodes
	}
	return len(b)
}

// EncodeLine is ev's line as a day file holds it, newline included,
// listing the archived bodies (Body.Name; nil: none): for an event log kept
// elsewhere (adapters/postgres keeps its lines in the database), so every
// log writes the same bytes.
func EncodeLine(ev domain.Event, archived []string) []byte { return encodeLine(ev, archived) }

// Body is one payload body an event archives: Name is what the line's
// "archived" lists, File the archive file it goes to (ItemFile, …), Data
// its bytes, and Appended whether it adds a line to the file (progress)
// rather than replacing it.
type Body struct {
	Name, File string
	Data       []byte
	Appended   bool
}

// Bodies lists what ev archives under archivePayloads, as Log.Append
// archives it; most events archive nothing.
func Bodies(ev domain.Event) ([]Body, error) {
	bodies, err := bodiesOf(ev)
	out := make([]Body, len(bodies))
	for i, b := range bodies {
		out[i] = Body{Name: b.name, File: b.file, Data: b.data, Appended: b.appended}
	}
	return out, err
}

// DayOf is the day (YYYY-MM-DD, UTC) whose file an event at t goes to.
func DayOf(t time.Time) string { return dayOf(t) }

// ValidDay reports whether day names a day as the log API takes it
// (YYYY-MM-DD).
func ValidDay(day string) bool {
	_, ok := dayOfName(day + ".jsonl")
	return ok
}
