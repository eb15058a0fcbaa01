package eventlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/taskhoster/taskhoster/domain"
)

// A line is one event as it appears in a day file. Its fields, in the
// order of the seed's example line with "error" after "status": t, at,
// host, queue, id, event, status, error, attempts, worker (null when no
// worker is involved), bytes (item, progress, result, error: the byte
// lengths of the task's payloads as its file holds them) and archived.
// "error" is the task's error code on a failed line (SPEC §8: a worker's
// failure "failed", a dead letter "attempts", a corrupt file "corrupt"); no
// other line has the field. A cancelled line is the seed's, without it: its
// event names the cause (Task Logs reads it as error "cancelled",
// tasklog.ParseLine). encodeLine writes it.

// atLayout always prints three fractional digits, so lines of one file line
// up and sort as text.
const atLayout = "2006-01-02T15:04:05.000Z"

// dayLayout names a day file (without its .jsonl suffix).
const dayLayout = "2006-01-02"

// dayOf is the day file an event at t belongs to: the UTC day of its "t".
func dayOf(t time.Time) string { return t.UTC().Format(dayLayout) }

// encodeLine is ev's line, newline included, ready for a single write.
// archived names the payload bodies this event wrote to the archive (see
// archiveBodies); nil is written as []. The line holds exactly what
// encoding/json writes for a line (without HTML escaping: the log is read
// by tools, so a worker name's < > & stay readable), field by field, but
// appended by hand: it is written for every event, and reflection was most
// of its cost. TestLinesAreWhatEncodingJSONWrites holds the two together.
func encodeLine(ev domain.Event, archived []string) []byte {
	return appendLine(make([]byte, 0, 256), ev, archived)
}

// appendLine appends encodeLine's line to b.
func appendLine(b []byte, ev domain.Event, archived []string) []byte {
	t := ev.Task
	b = append(b, `{"t":`...)
	b = strconv.AppendInt(b, ev.At.Unix(), 10)
	b = append(b, `,"at":"`...)
	b = ev.At.UTC().AppendFormat(b, atLayout)
	b = append(b, `","host":`...)
	b = appendString(b, t.Host)
	b = append(b, `,"queue":`...)
	b = appendString(b, t.Queue)
	b = append(b, `,"id":`...)
	b = appendString(b, t.ID)
	b = append(b, `,"event":`...)
	b = appendString(b, string(ev.Kind))
	b = append(b, `,"status":`...)
	b = appendString(b, string(t.Status))
	if ev.Kind == domain.EventFailed && t.Error != nil { // SPEC §8: only a failed line
		b = append(b, `,"error":`...)
		b = appendString(b, *t.Error)
	}
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(t.Attempts), 10)
	b = append(b, `,"worker":`...)
	if ev.Worker != "" {
		b = appendString(b, ev.Worker)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"bytes":{"item":`...)
	b = strconv.AppendInt(b, int64(storedLen(t.Item)), 10)
	b = append(b, `,"progress":`...)
	b = strconv.AppendInt(b, int64(storedLen(t.Progress)), 10)
	b = append(b, `,"result":`...)
	b = strconv.AppendInt(b, int64(storedLen(t.Result)), 10)
	b = append(b, `,"error":`...)
	b = strconv.AppendInt(b, int64(errorLen(t)), 10)
	b = append(b, `},"archived":[`...)
	for i, name := range archived {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, name)
	}
	return append(b, "]}\n"...)
}

// appendString appends s as a JSON string, as encoding/json writes it
// without HTML escaping. Names, codes and archive file names are plain
// ASCII and are copied as they are; anything else (a worker name may be
// any text) goes through encoding/json itself.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(s); err != nil {
				panic(fmt.Sprintf("encode string: %v", err)) // a string always encodes
			}
			return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
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

// AppendLine appends EncodeLine's line to b.
func AppendLine(b []byte, ev domain.Event, archived []string) []byte {
	return appendLine(b, ev, archived)
}

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
