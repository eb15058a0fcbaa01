package domain

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// readBack is DecodeTask(data) for data = EncodeTask(t): the record a
// restart (or a read of the row) would load, which is what a store keeps
// and returns. Most records read back as they are, and then it checks t
// and copies its payloads instead of decoding (a decode of every record is
// a tenth of the server's CPU under load); otherwise it decodes. It lives
// beside EncodeTask because the shortcut leans on how encoding/json
// compacts and escapes. FuzzReadBack holds the two to the same answer.
func readBack(t Task, data []byte) (Task, error) {
	if !readsBackAsIs(t) {
		return DecodeTask(data)
	}
	if err := CheckRecord(t); err != nil {
		return Task{}, err
	}
	// The caller's buffers are not the store's to keep.
	t.Item = bytes.Clone(t.Item)
	t.Progress = bytes.Clone(t.Progress)
	t.Result = bytes.Clone(t.Result)
	t.Failure = bytes.Clone(t.Failure)
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
	for _, raw := range []json.RawMessage{t.Item, t.Progress, t.Result, t.Failure} {
		if raw == nil {
			continue
		}
		if len(raw) == 0 || string(raw) == "null" || bytes.ContainsAny(raw, " \t\r\n<>&") ||
			bytes.Contains(raw, lineSep) || bytes.Contains(raw, paraSep) {
			return false
		}
	}
	for _, s := range []*string{&t.ID, &t.Host, &t.Queue, (*string)(&t.Status), t.PostedBy, t.Error, &t.IdempotencyKey} {
		if s != nil && !utf8.ValidString(*s) {
			return false
		}
	}
	return t.Lease == nil || utf8.ValidString(t.Lease.Worker)
}
