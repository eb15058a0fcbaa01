package httperr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	"github.com/taskhoster/taskhoster/domain"
)

// Decode reads data, one JSON value, into v (a pointer to a struct): the
// envelope of a request body or a socket message. It is strict, since a
// misspelt field would otherwise be a silent default (`{"wiat":1}` a claim
// that waits 0 s): a field v has no place for is refused, naming it and
// the fields v takes. The fields that hold a user's JSON (an item, a
// progress record, a result) are json.RawMessage, which the queue's schemas
// judge, so the strictness stops at the envelope.
//
// Its errors are for a client to read, in JSON's words rather than Go's: a
// field of the wrong type says which type it must be, a syntax error says
// at which byte. what names the value in them ("the body", "a message").
// Those errors are invalid_json, an unknown field invalid_request.
func Decode(data []byte, v any, what string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, what, Fields(v))
	}
	if _, err := dec.Token(); err != io.EOF {
		return domain.E(domain.KindInvalid, domain.CodeInvalidJSON, "%s must be one JSON object, with nothing after it", what)
	}
	return nil
}

// unknownFieldPrefix starts the error DisallowUnknownFields makes, which has
// no type of its own: `json: unknown field "wiat"`.
const unknownFieldPrefix = "json: unknown field "

func decodeError(err error, what string, takes []string) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return domain.E(domain.KindInvalid, domain.CodeInvalidJSON, "%s is empty: it must be a JSON object", what)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return domain.E(domain.KindInvalid, domain.CodeInvalidJSON, "%s is not valid JSON: it ends before its value does", what)
	case errors.As(err, &syntax):
		return domain.E(domain.KindInvalid, domain.CodeInvalidJSON, "%s is not valid JSON: %s (at byte %d)", what, syntax.Error(), syntax.Offset)
	case errors.As(err, &typ):
		return typeError(typ, what)
	case strings.HasPrefix(err.Error(), unknownFieldPrefix):
		field, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), unknownFieldPrefix))
		return unknownField(field, what, takes)
	}
	return fmt.Errorf("decode %s: %w", what, err) // v is not a pointer: the caller's bug, internal
}

// typeError names the field, the JSON type it must be and the one it is:
// `"wait" must be a number, not a string`.
func typeError(e *json.UnmarshalTypeError, what string) error {
	want := jsonType(e.Type)
	got, isNumber := strings.CutPrefix(e.Value, "number ")
	if !isNumber {
		got = article(e.Value)
	} // else the number itself says more: "must be an integer, not 1.5"
	name := what
	if e.Field != "" {
		name = strconv.Quote(e.Field)
	}
	if isNumber && want == "a number" {
		// A number into a float fails only when it is out of its range.
		return domain.E(domain.KindInvalid, domain.CodeInvalidJSON, "%s is a number too large to hold: %s", name, got)
	}
	return domain.E(domain.KindInvalid, domain.CodeInvalidJSON, "%s must be %s, not %s", name, want, got)
}

// jsonType is the JSON type a Go type is decoded from, as a client reads it.
func jsonType(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "a JSON value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "a JSON value"
}

// article turns the decoder's word for a JSON value ("string", "array",
// "object", "bool") into the words of a message.
func article(kind string) string {
	switch kind {
	case "bool":
		return "true or false"
	case "array", "object":
		return "an " + kind
	}
	return "a " + kind
}

// Fields are the JSON names of the fields of the struct v points to, in
// their order: what a body or message of its shape may hold.
func Fields(v any) []string {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		names = append(names, name)
	}
	return names
}

// unknownField refuses a field, saying which ones what takes.
func unknownField(field, what string, takes []string) error {
	return domain.E(domain.KindInvalid, domain.CodeInvalidRequest, "unknown field %q (%s takes %s)", field, what, strings.Join(takes, ", "))
}
