package folderconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// syntaxError checks that data is one JSON value and, if it is not, says
// where: line, column and byte offset, so an editor can jump there. With
// detail false the decoder's message (which quotes the offending character)
// is left out; user files use that, since the character may be part of a
// token.
func syntaxError(data []byte, detail bool) (string, bool) {
	// json.Unmarshal checks the whole input before decoding anything, so its
	// offsets count from the start of the file (a json.Decoder's do not).
	err := json.Unmarshal(data, new(json.RawMessage))
	if err == nil {
		return "", false
	}
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return "invalid JSON: " + err.Error(), true
	}
	// Offset counts the bytes read, including the offending one; at the end
	// of a truncated file the place to point at is just past the last byte.
	at := min(max(int(se.Offset)-1, 0), len(data))
	if se.Error() == "unexpected end of JSON input" {
		at = len(data)
	}
	line := 1 + bytes.Count(data[:at], []byte("\n"))
	col := at - bytes.LastIndexByte(data[:at], '\n')
	reason := fmt.Sprintf("invalid JSON at line %d, column %d (byte %d)", line, col, at)
	if detail {
		reason += ": " + se.Error()
	}
	return reason, true
}

// member is one key of a JSON object and its value, in file order.
type member struct {
	key   string
	value json.RawMessage
}

// object splits raw, which must be valid JSON, into its members in file
// order. ok is false when raw is not an object. dup names the first key that
// appears twice: encoding/json would silently keep the last one, and a queue
// file with two "access" blocks is a mistake worth reporting.
func object(raw json.RawMessage) (members []member, dup string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, "", false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, "", false
		}
		key, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, "", false
		}
		if seen[key] && dup == "" {
			dup = key
		}
		seen[key] = true
		members = append(members, member{key: key, value: value})
	}
	return members, dup, true
}

// value decodes raw, which must be valid JSON, keeping numbers as
// json.Number so that 1.5 and 1e3 can be told apart from integers.
func value(raw json.RawMessage) any {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil
	}
	return v
}

// pointer appends tokens to the JSON pointer base, escaping each (RFC 6901).
func pointer(base string, tokens ...string) string {
	for _, t := range tokens {
		t = strings.ReplaceAll(t, "~", "~0")
		t = strings.ReplaceAll(t, "/", "~1")
		base += "/" + t
	}
	return base
}

// kind names a decoded JSON value's type for messages ("got a string").
func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
