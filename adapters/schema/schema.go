// Package schema compiles and applies JSON Schemas (SPEC §1 and §3) on top of
// github.com/santhosh-tekuri/jsonschema/v5.
//
// Two promises hold for every schema, whether it comes from a queue file or
// from a worker's claim query:
//
//   - Draft 2020-12 applies unless the schema names its own "$schema".
//   - Nothing is ever fetched: a "$ref" can only point inside the schema
//     itself (or at the built-in draft meta-schemas). Any other URL, be it
//     http(s) or a file path, makes the schema fail to compile.
//
// Numbers are compared exactly: documents are decoded with json.Number, so
// 9007199254740993 stays 9007199254740993 and is not rounded to a float64.
//
// "format" follows each draft's own rule (an annotation in 2019-09 and
// 2020-12, an assertion in draft-07 and older), as the library does.
package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// baseURL is where a compiled schema pretends to live. It uses a scheme that
// no loader serves, so a relative "$ref" such as "other.json" or
// "/etc/passwd" resolves to a URL under it and fails like any other remote
// reference, instead of becoming a file path on this machine.
const baseURL = "taskhoster:///schema.json"

// Schema is a compiled JSON Schema. The zero value, and Any(), accept every
// JSON value.
type Schema struct {
	raw json.RawMessage
	// spares are compiled copies of raw not in use. Each copy counts the
	// subschemas one Validate evaluates (budget), so a call needs a copy
	// of its own: one is taken per call, and compiled afresh when none is
	// spare (only while more calls run at once than ever before).
	spares chan *compiled
}

// compiled is one compiled copy of a schema and the budget its
// evaluations draw on.
type compiled struct {
	schema *jsonschema.Schema
	budget *budget
}

// The budget of one Validate: the subschemas it may evaluate. A schema of a
// few hundred bytes can apply one subschema twice, that one the next twice,
// and so on, so that checking a single value evaluates 2^40 subschemas: the
// library keeps no count, and a claim query (any worker's to send, tried on
// every pending task under its queue's lock) froze a queue for good. An
// honest schema evaluates a few subschemas per value of the document, and a
// value takes at least a byte or two; what is beyond this is refused.
const (
	budgetBase    = 1 << 14
	budgetPerByte = 4
)

// budget counts down the object subschemas one Validate evaluates; the
// extension (budgetExt) is called once at the end of each evaluation.
type budget struct{ left int }

// overBudget is what budgetStep panics with to stop a validation at once:
// returning an error would let every sibling branch run on.
type overBudget struct{}

type budgetExt struct{ b *budget }

func (e budgetExt) Compile(jsonschema.CompilerContext, map[string]any) (jsonschema.ExtSchema, error) {
	return budgetStep(e), nil
}

type budgetStep struct{ b *budget }

func (s budgetStep) Validate(jsonschema.ValidationContext, any) error {
	if s.b.left--; s.b.left < 0 {
		panic(overBudget{})
	}
	return nil
}

// Any returns a schema that accepts any JSON value: what a queue file's
// progress or result becomes when the file leaves it out.
func Any() *Schema { return &Schema{} }

// Compiler compiles schemas at run time (worker claim queries). It
// implements ports.SchemaCompiler.
type Compiler struct{}

var _ ports.SchemaCompiler = Compiler{}

// Compile is the package function Compile, typed for ports.SchemaCompiler.
func (Compiler) Compile(raw json.RawMessage) (domain.Schema, error) {
	s, err := Compile(raw)
	if err != nil {
		// Return a nil interface, not a typed nil *Schema.
		return nil, err
	}
	return s, nil
}

// Error is why a schema did not compile. Its text is meant for the person who
// wrote the schema; the library's own error stays reachable through Unwrap.
type Error struct {
	Reason string
	err    error
}

func (e *Error) Error() string { return "invalid schema: " + e.Reason }
func (e *Error) Unwrap() error { return e.err }

// notFetched is what the compiler's loader answers for every URL it is asked
// to load: the only documents a schema may use are itself and the draft
// meta-schemas, which the library embeds and never asks the loader for.
type notFetched struct{ url string }

func (e *notFetched) Error() string {
	// A relative reference resolved against baseURL: show it as written.
	u := strings.TrimPrefix(e.url, "taskhoster://")
	return fmt.Sprintf("reference %q is outside the schema: remote and file references are never fetched", u)
}

// Compile compiles raw, a JSON Schema document.
func Compile(raw json.RawMessage) (s *Schema, err error) {
	// The schema may come from a client (a claim query). The library should
	// report every bad schema as an error, but if a corner of it panics
	// instead, that must not take the server down.
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, &Error{Reason: fmt.Sprintf("the schema could not be compiled (%v)", r)}
		}
	}()

	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, &Error{Reason: "empty: a schema is a JSON object or a boolean"}
	}
	first, err := compile(raw)
	if err != nil {
		return nil, err
	}
	if acceptsAll(raw) {
		// `{}` and `true` accept every value: validating against them is
		// a decode and a walk for nothing, on every post of a queue
		// whose items are free (1.5 % of the server's CPU in a profile).
		return Any(), nil
	}
	s = &Schema{raw: slices.Clone(raw), spares: make(chan *compiled, runtime.GOMAXPROCS(0))}
	s.spares <- first
	return s, nil
}

// compile compiles one copy of raw with its budget.
func compile(raw json.RawMessage) (*compiled, error) {
	b := &budget{}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.LoadURL = func(u string) (io.ReadCloser, error) { return nil, &notFetched{url: u} }
	c.RegisterExtension("taskhoster-budget", nil, budgetExt{b})
	if err := c.AddResource(baseURL, bytes.NewReader(raw)); err != nil {
		return nil, &Error{Reason: strings.TrimPrefix(err.Error(), "jsonschema: invalid json "+baseURL+": "), err: err}
	}
	sch, err := c.Compile(baseURL)
	if err != nil {
		return nil, &Error{Reason: compileReason(err), err: err}
	}
	return &compiled{schema: sch, budget: b}, nil
}

// take is a copy of s for one Validate, to give back with put.
func (s *Schema) take() (*compiled, error) {
	select {
	case c := <-s.spares:
		return c, nil
	default:
		return compile(s.raw) // it compiled once: it compiles again
	}
}

func (s *Schema) put(c *compiled) {
	select {
	case s.spares <- c:
	default: // as many spares as can run at once: let this one go
	}
}

// acceptsAll reports whether raw is the schema `true` or an object with no
// keywords at all, the two schemas that accept every JSON value.
func acceptsAll(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if string(raw) == "true" {
		return true
	}
	var keywords map[string]json.RawMessage
	return len(raw) > 0 && raw[0] == '{' && json.Unmarshal(raw, &keywords) == nil && len(keywords) == 0
}

// compileReason turns the library's compile error into one line that names
// where in the schema the problem is, without the internal base URL.
func compileReason(err error) string {
	var nf *notFetched
	if errors.As(err, &nf) {
		return nf.Error()
	}
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		// The schema broke its draft's meta-schema: the instance locations
		// are places in the schema document.
		var parts []string
		for _, v := range flatten(ve) {
			where := v.Path
			if where == "" {
				where = "the root"
			}
			parts = append(parts, "at "+where+": "+v.Message)
		}
		return strings.Join(parts, "; ")
	}
	var se *jsonschema.SchemaError
	if errors.As(err, &se) && se.Err != nil {
		err = se.Err
	}
	msg := strings.TrimPrefix(err.Error(), "jsonschema: ")
	return strings.ReplaceAll(msg, baseURL, "")
}

// Validate checks doc, which must be valid JSON, and lists every leaf
// violation sorted by path, then message. None means doc is valid.
func (s *Schema) Validate(doc json.RawMessage) []domain.Violation {
	if s == nil || s.spares == nil {
		return nil
	}
	v, err := Decode(doc)
	if err != nil {
		return []domain.Violation{{Path: "", Message: "not valid JSON: " + err.Error()}}
	}
	c, err := s.take()
	if err != nil {
		return []domain.Violation{{Path: "", Message: err.Error()}}
	}
	c.budget.left = budgetBase + budgetPerByte*len(doc)
	err = validate(c.schema, v)
	s.put(c)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		return flatten(ve)
	}
	// An infinite $ref loop found while validating: the schema's fault, but
	// the caller can only report it against the document.
	return []domain.Violation{{Path: "", Message: strings.TrimPrefix(err.Error(), "jsonschema: ")}}
}

// validate is the library's Validate with a panic turned into an error.
// The library reads each number it compares (a bound, multipleOf, const,
// enum, "integer", uniqueItems) with big.Rat's SetString, which refuses an
// exponent beyond 1e6 (1e2000000), and then uses the nil it got: a
// document any poster can send, and a claim query runs on a worker
// socket's own goroutine, where a panic ends the server. Such a document
// is refused; PostgreSQL cannot hold its number as jsonb either, so every
// store leaves the verdict to this.
//
// A validation that outruns its budget (budgetStep) is refused too.
func validate(c *jsonschema.Schema, v any) (err error) {
	defer func() {
		switch r := recover(); r {
		case nil:
		case overBudget{}:
			err = errors.New("the value is too costly to check against the schema: the schema applies its parts to it too many times over")
		default:
			err = errors.New("the value cannot be checked against the schema: a number in it is beyond what can be compared")
		}
	}()
	return c.Validate(v)
}

// Decode parses one JSON value as the schema library reads it: numbers kept
// as json.Number, which it needs to compare big integers and decimals
// exactly, and the last of duplicate members winning. Anything that must
// judge a document as Validate does (the PostgreSQL store's translation of
// a claim query) decodes with it.
func Decode(doc json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

// flatten lists the leaves of the library's error tree: the inner nodes only
// say "doesn't validate with ...", the leaves say what is wrong and where.
// The result is sorted by path and free of duplicates (anyOf branches often
// repeat each other), so the same document always gets the same details.
func flatten(root *jsonschema.ValidationError) []domain.Violation {
	var out []domain.Violation
	seen := map[domain.Violation]bool{}
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			v := domain.Violation{Path: pointer(e.InstanceLocation), Message: e.Message}
			if !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(root)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].Message < out[j].Message
	})
	return out
}

// pointer turns the library's instance location into a plain RFC 6901 JSON
// pointer: the library percent-encodes each token (a property "a b" comes out
// as "/a%20b"), clients expect "/a b".
func pointer(loc string) string {
	if loc == "" {
		return ""
	}
	tokens := strings.Split(loc, "/")
	for i, tok := range tokens {
		if un, err := url.PathUnescape(tok); err == nil {
			tokens[i] = un
		}
	}
	return strings.Join(tokens, "/")
}
