package wsapi

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/taskhoster/taskhoster/domain"
)

// The task and ack messages are the hot path of the worker socket: one
// each per task. encode (json.Marshal, then httperr's un-escaping) would
// walk the struct by reflection and re-compact the item, which the store
// already holds as compact JSON. appendTask and appendAck write the same
// bytes by hand when every part is plain (see plainRaw, plainString);
// anything else goes through encode, so the bytes on the wire are the same
// either way (TestHandBuiltMessagesAreWhatEncodeWrites).

// encodeTask is the task message handing t out for the claim ref.
func encodeTask(ref json.RawMessage, id string, item json.RawMessage, attempts int, lease *domain.Lease) []byte {
	if b, ok := appendTask(nil, ref, id, item, attempts, lease); ok {
		return b
	}
	return encode(taskReply{Type: "task", Ref: ref, ID: id, Item: item, Attempts: attempts, Lease: lease})
}

// encodeAck is the answer to the report ref.
func encodeAck(ref json.RawMessage, accepted bool, status domain.Status, lease *domain.Lease) []byte {
	if b, ok := appendAck(nil, ref, accepted, status, lease); ok {
		return b
	}
	return encode(ackReply{Type: "ack", Ref: ref, Accepted: accepted, Status: status, Lease: lease})
}

// appendTask appends what encode(taskReply{...}) writes, or reports false
// (with b unspecified) if a part is not plain.
func appendTask(b []byte, ref json.RawMessage, id string, item json.RawMessage, attempts int, lease *domain.Lease) ([]byte, bool) {
	if len(item) == 0 || !plainRaw(ref) || !plainRaw(item) || !plainString(id) {
		return b, false
	}
	b = append(b, `{"type":"task"`...)
	if len(ref) > 0 {
		b = append(append(b, `,"ref":`...), ref...)
	}
	b = append(append(append(b, `,"id":"`...), id...), '"')
	b = append(append(b, `,"item":`...), item...)
	b = strconv.AppendInt(append(b, `,"attempts":`...), int64(attempts), 10)
	b = append(b, `,"lease":`...)
	if lease == nil {
		return append(b, "null}"...), true
	}
	b, ok := appendLease(b, lease)
	return append(b, '}'), ok
}

// appendAck appends what encode(ackReply{...}) writes, or reports false.
func appendAck(b []byte, ref json.RawMessage, accepted bool, status domain.Status, lease *domain.Lease) ([]byte, bool) {
	if !plainRaw(ref) || !plainString(string(status)) {
		return b, false
	}
	b = append(b, `{"type":"ack"`...)
	if len(ref) > 0 {
		b = append(append(b, `,"ref":`...), ref...)
	}
	b = strconv.AppendBool(append(b, `,"accepted":`...), accepted)
	if status != "" {
		b = append(append(append(b, `,"status":"`...), status...), '"')
	}
	if lease != nil {
		var ok bool
		if b, ok = appendLease(append(b, `,"lease":`...), lease); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

func appendLease(b []byte, l *domain.Lease) ([]byte, bool) {
	if !plainString(l.Worker) {
		return b, false
	}
	b = append(append(append(b, `{"worker":"`...), l.Worker...), `","until":`...)
	return append(strconv.AppendInt(b, l.Until, 10), '}'), true
}

// plainString says whether s is written between quotes as it is: printable
// ASCII without a quote or a backslash. (<, > and & are escaped by
// json.Marshal and un-escaped again by httperr.Marshal.)
func plainString(s string) bool {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// plainRaw says whether raw, valid JSON (a stored item, or a ref the
// message decoder parsed), is written by encode as it is: compact (no
// space outside a string, which json.Marshal would drop), without U+2028
// or U+2029 (which it escapes), and without the text \u00 (httperr.Marshal
// turns \u003c, \u003e and \u0026 anywhere in the message into <, > and &;
// such a raw goes the slow way, which does the same to it).
func plainRaw(raw []byte) bool {
	if bytes.Contains(raw, []byte(`\u00`)) {
		return false
	}
	inString := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && raw[i+2]&^1 == 0xA8:
			return false
		case inString && c == '\\':
			i++ // the escaped character, which cannot end the string
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		}
	}
	return true
}
