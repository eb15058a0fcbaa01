package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"
)

// DecodeTask rebuilds a task from its stored bytes. It is the one way back
// from storage: it rejects a record that does not hold together (so the store
// can move it to corrupt/) and normalises JSON nulls to empty values.
func DecodeTask(data []byte) (Task, error) {
	var t Task
	// json.Unmarshal accepts exactly one JSON value (and white space), as
	// the decoder below does, at a third less cost: start-up decodes every
	// task file. The decoder only says why a record is refused.
	if json.Unmarshal(data, &t) != nil {
		return Task{}, decodeError(data)
	}
	t.Item = nonNull(t.Item)
	t.Progress = nonNull(t.Progress)
	t.Result = nonNull(t.Result)
	if err := checkRecord(t); err != nil {
		return Task{}, err
	}
	return t, nil
}

// checkRecord is what a record must be beyond valid JSON.
func checkRecord(t Task) error {
	switch {
	case !ValidID(t.ID):
		return fmt.Errorf("decode task: bad id %q", t.ID)
	case !t.Status.Valid():
		return fmt.Errorf("decode task %s: bad status %q", t.ID, t.Status)
	case t.Status == Processing && t.Lease == nil:
		return fmt.Errorf("decode task %s: processing without a lease", t.ID)
	case t.Status.Terminal() && t.FinishedAt == nil:
		return fmt.Errorf("decode task %s: terminal without finishedAt", t.ID)
	case t.Attempts < 0:
		return fmt.Errorf("decode task %s: negative attempts", t.ID)
	}
	return nil
}

// ReadBack is DecodeTask(data) for data = EncodeTask(t): the record a
// restart would load. Most records read back as they are, and then it
// checks t and copies its payloads instead of decoding (the decode was a
// tenth of the server's CPU under load); otherwise it decodes.
// FuzzReadBack holds the two to the same answer.
func ReadBack(t Task, data []byte) (Task, error) {
	if !readsBackAsIs(t) {
		return DecodeTask(data)
	}
	if err := checkRecord(t); err != nil {
		return Task{}, err
	}
	// The caller's buffers are not the store's to keep.
	t.Item = bytes.Clone(t.Item)
	t.Progress = bytes.Clone(t.Progress)
	t.Result = bytes.Clone(t.Result)
	return t, nil
}

// U+2028 and U+2029 in UTF-8: json.Marshal escapes them.
var lineSep, paraSep = []byte("\u2028"), []byte("\u2029")

// readsBackAsIs reports whether json.Marshal writes t's payloads unchanged
// and json.Unmarshal gives its strings back unchanged: no payload is null
// (which decodes as absent), holds white space (which Marshal compacts, and
// which may be inside a string too: then the slow path is taken anyway) or
// a character Marshal escapes (<, >, &, U+2028, U+2029); every string is
// valid UTF-8 (Marshal replaces bad bytes). Payloads are valid JSON: else
// EncodeTask, which made the data, would have failed.
func readsBackAsIs(t Task) bool {
	for _, raw := range []json.RawMessage{t.Item, t.Progress, t.Result} {
		if raw == nil {
			continue
		}
		if len(raw) == 0 || string(raw) == "null" || bytes.ContainsAny(raw, " \t\r\n<>&") ||
			bytes.Contains(raw, lineSep) || bytes.Contains(raw, paraSep) {
			return false
		}
	}
	for _, s := range []*string{&t.ID, &t.Host, &t.Queue, (*string)(&t.Status), t.PostedBy, t.Error} {
		if s != nil && !utf8.ValidString(*s) {
			return false
		}
	}
	return t.Lease == nil || utf8.ValidString(t.Lease.Worker)
}

// decodeError is why data, which json.Unmarshal refused, is not a record.
func decodeError(data []byte) error {
	var t Task
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&t); err != nil {
		return fmt.Errorf("decode task: %w", err)
	}
	// More() says false before a stray '}' or ']', so ask for the next token:
	// anything but the end means a torn or doubled write.
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("decode task: trailing data")
	}
	// Unreachable while both accept the same inputs; say so rather than
	// let a refused record through.
	return fmt.Errorf("decode task: not a single JSON object")
}

// EncodeTask is the stored form of t: one JSON object and a newline.
func EncodeTask(t Task) []byte {
	b, err := json.Marshal(t)
	if err != nil {
		// Every field is a plain value or already-valid raw JSON.
		panic(fmt.Sprintf("encode task %s: %v", t.ID, err))
	}
	return append(b, '\n')
}

// IsNull reports whether raw is absent or the JSON literal null.
func IsNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

func nonNull(raw json.RawMessage) json.RawMessage {
	if IsNull(raw) {
		return nil
	}
	return raw
}
