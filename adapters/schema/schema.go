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
	"regexp"
	"regexp/syntax"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

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
	made   atomic.Int32 // copies compiled, first included
}

// maxSpares bounds the copies a schema keeps. Calls that run at once can
// outnumber the CPUs (one preempted mid-check, GC assists), so the copies
// follow the peak of them rather than GOMAXPROCS, which left the call
// beyond it compiling on the hot path; past 64 at once, a call compiling
// is the lesser cost.
const maxSpares = 64

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

// A pattern is matched inside one evaluation, yet Go's regexp takes up to
// one step per instruction of its program per byte of text: ".{0,1000}z",
// ten bytes of schema, is 2,000 instructions and took 11 s over a 1 MiB
// string. So each match is charged (len(text)+1) * program size steps
// before it runs (patternCheck, keyCharge). A step took at most 8 ns (the
// NFA, which Go uses for long texts), an evaluation 0.5 to 1 µs, hence 64
// steps a unit. An honest pattern, tens of instructions, over an honest
// 1 MiB string takes well under half the budget.
const patternStepsPerUnit = 64

// maxPatternSize bounds the programs of all the patterns of one schema
// together, in instructions. Go compiles a pattern of up to 3.3 M of them
// (9 KB of ".{0,1000}" is 2 M: 0.8 s and 64 MB), and a claim query of
// 1 MiB holds a hundred such: refused before the library compiles them. Queue files get the same bound: an honest schema's patterns come
// to hundreds of instructions, and every compiled copy holds them.
const maxPatternSize = 1 << 15

// budget counts down the object subschemas one Validate evaluates (the
// extension budgetExt is called once at the end of each evaluation) and
// the steps of its pattern matches.
type budget struct{ left int }

// spend takes n units, or stops the validation when there are not as many.
func (b *budget) spend(n int) {
	if b.left -= n; b.left < 0 {
		panic(overBudget{})
	}
}

// spendSteps takes the units of n pattern steps, at least one.
func (b *budget) spendSteps(n int) {
	b.spend((n + patternStepsPerUnit - 1) / patternStepsPerUnit)
}

// overBudget is what spend panics with to stop a validation at once:
// returning an error would let every sibling branch run on.
type overBudget struct{}

// budgetExt gives every object subschema compiled with it a budgetStep,
// which also marks the subschema as one of this copy's (takePatterns), and
// counts those with patterns.
type budgetExt struct {
	b         *budget
	patterned *int
}

const budgetName = "taskhoster-budget"

func (e budgetExt) Compile(_ jsonschema.CompilerContext, m map[string]any) (jsonschema.ExtSchema, error) {
	_, p := m["pattern"].(string)
	pp, _ := m["patternProperties"].(map[string]any)
	if p || len(pp) > 0 {
		*e.patterned++
	}
	return budgetStep{e.b}, nil
}

type budgetStep struct{ b *budget }

func (s budgetStep) Validate(jsonschema.ValidationContext, any) error {
	s.b.spend(1)
	return nil
}

// patternCheck is "pattern", taken from the library (takePatterns) to be
// charged before it runs; it reports what the library reported.
type patternCheck struct {
	b    *budget
	re   *regexp.Regexp
	size int
}

const patternName = "taskhoster-pattern"

func (p patternCheck) Validate(ctx jsonschema.ValidationContext, v any) error {
	s, ok := v.(string)
	if !ok {
		return nil
	}
	p.b.spendSteps((len(s) + 1) * p.size)
	if p.re.MatchString(s) {
		return nil
	}
	return ctx.Error("pattern", "does not match pattern %s", quote(p.re.String()))
}

// keyCharge charges for the patternProperties of an object schema, whose
// matching the library does itself, with the additionalProperties and
// unevaluatedProperties that depend on it. It is put in that schema's
// propertyNames, which the library applies to each member's name just
// before it matches the names: so the match is paid for before it runs.
type keyCharge struct {
	b    *budget
	size int // of all the patterns together
}

func (k keyCharge) Validate(_ jsonschema.ValidationContext, v any) error {
	if name, ok := v.(string); ok {
		k.b.spendSteps((len(name) + 1) * k.size)
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
	if patternsSize(raw) > maxPatternSize {
		return nil, &Error{Reason: fmt.Sprintf("its patterns compile to more than %d instructions, the most allowed", maxPatternSize)}
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
	s = &Schema{raw: slices.Clone(raw), spares: make(chan *compiled, maxSpares)}
	s.made.Store(1)
	s.spares <- first
	return s, nil
}

// compile compiles one copy of raw with its budget.
func compile(raw json.RawMessage) (*compiled, error) {
	b := &budget{}
	patterned := 0
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.LoadURL = func(u string) (io.ReadCloser, error) { return nil, &notFetched{url: u} }
	c.RegisterExtension(budgetName, nil, budgetExt{b, &patterned})
	if err := c.AddResource(baseURL, bytes.NewReader(raw)); err != nil {
		return nil, &Error{Reason: strings.TrimPrefix(err.Error(), "jsonschema: invalid json "+baseURL+": "), err: err}
	}
	sch, err := c.Compile(baseURL)
	if err != nil {
		return nil, &Error{Reason: compileReason(err), err: err}
	}
	if takePatterns(sch, b) != patterned {
		// The library keeps the schemas a $dynamicRef may switch to in a
		// field of its own; one that nothing else reaches would match its
		// patterns uncharged.
		return nil, &Error{Reason: "a subschema with a pattern is reached only through $dynamicRef, which is not supported"}
	}
	return &compiled{schema: sch, budget: b}, nil
}

// takePatterns moves the pattern of every subschema of this copy (those
// with its budgetStep) into a patternCheck, and charges for its
// patternProperties through its propertyNames (keyCharge), so that no
// match runs before it is paid for. It returns how many subschemas had
// patterns. Each subschema is visited once: $ref makes cycles. A draft's
// meta-schema, which a "$ref" may name, is shared by every compiler and
// left alone: its few patterns are short.
func takePatterns(root *jsonschema.Schema, b *budget) int {
	seen := map[*jsonschema.Schema]bool{}
	found := 0
	var visit func(*jsonschema.Schema)
	visitAll := func(list []*jsonschema.Schema) {
		for _, s := range list {
			visit(s)
		}
	}
	visitAny := func(v any) { // nil, a bool, a *Schema or a []*Schema
		switch v := v.(type) {
		case *jsonschema.Schema:
			visit(v)
		case []*jsonschema.Schema:
			visitAll(v)
		}
	}
	visit = func(s *jsonschema.Schema) {
		if s == nil || seen[s] {
			return
		}
		seen[s] = true
		if step, ok := s.Extensions[budgetName].(budgetStep); !ok || step.b != b {
			return
		}
		visitAll([]*jsonschema.Schema{s.Ref, s.RecursiveRef, s.DynamicRef, s.Not, s.If, s.Then, s.Else,
			s.PropertyNames, s.UnevaluatedProperties, s.Items2020, s.Contains, s.UnevaluatedItems, s.ContentSchema})
		visitAll(s.AllOf)
		visitAll(s.AnyOf)
		visitAll(s.OneOf)
		visitAll(s.PrefixItems)
		for _, p := range s.Properties {
			visit(p)
		}
		for _, p := range s.PatternProperties {
			visit(p)
		}
		for _, d := range s.DependentSchemas {
			visit(d)
		}
		for _, d := range s.Dependencies {
			visitAny(d)
		}
		visitAny(s.AdditionalProperties)
		visitAny(s.Items)
		visitAny(s.AdditionalItems)

		if s.Pattern == nil && len(s.PatternProperties) == 0 {
			return
		}
		found++
		if s.Pattern != nil {
			s.Extensions[patternName] = patternCheck{b: b, re: s.Pattern, size: patternSize(s.Pattern.String())}
			s.Pattern = nil
		}
		if len(s.PatternProperties) > 0 {
			size := 0
			for re := range s.PatternProperties {
				size += patternSize(re.String())
			}
			names := &jsonschema.Schema{
				Location: s.Location + "/propertyNames", Draft: s.Draft,
				// The library's defaults for "not given".
				MinProperties: -1, MaxProperties: -1, MinItems: -1, MaxItems: -1,
				MinContains: 1, MaxContains: -1, MinLength: -1, MaxLength: -1,
				Extensions: map[string]jsonschema.ExtSchema{patternName: keyCharge{b: b, size: size}},
			}
			if s.PropertyNames != nil {
				names.AllOf = []*jsonschema.Schema{s.PropertyNames}
			}
			seen[names] = true
			s.PropertyNames = names
		}
	}
	visit(root)
	return found
}

// patternSize is the size of pattern's program in instructions, as
// regexp/syntax reckons it to bound programs (parser.calcSize), from the
// parse tree alone: a pattern is sized before any program is built. An
// invalid pattern is 0: the library reports it.
func patternSize(pattern string) int {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0
	}
	return min(treeSize(re), maxPatternSize+1)
}

func treeSize(re *syntax.Regexp) int {
	size := 0
	switch re.Op {
	case syntax.OpLiteral:
		size = len(re.Rune)
	case syntax.OpCapture, syntax.OpStar:
		size = 2 + treeSize(re.Sub[0])
	case syntax.OpPlus, syntax.OpQuest:
		size = 1 + treeSize(re.Sub[0])
	case syntax.OpConcat, syntax.OpAlternate:
		for _, sub := range re.Sub {
			size += treeSize(sub)
		}
		if re.Op == syntax.OpAlternate {
			size += len(re.Sub) - 1
		}
	case syntax.OpRepeat:
		sub := treeSize(re.Sub[0])
		switch {
		case re.Max == -1 && re.Min == 0:
			size = 2 + sub
		case re.Max == -1:
			size = 1 + re.Min*sub
		default:
			size = re.Max*sub + re.Max - re.Min
		}
	}
	return max(1, size)
}

// patternsSize adds up the sizes of the patterns in raw, a schema not yet
// compiled: every string named "pattern" and every member name of an
// object named "patternProperties", wherever it is (one in a "const" is
// counted too, which only errs on the safe side).
func patternsSize(raw json.RawMessage) int {
	var doc any
	if json.Unmarshal(raw, &doc) != nil {
		return 0 // the library says what is wrong with it
	}
	total := 0
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if p, ok := x.(string); ok && k == "pattern" {
					total += patternSize(p)
				}
				if pp, ok := x.(map[string]any); ok && k == "patternProperties" {
					for p := range pp {
						total += patternSize(p)
					}
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
		total = min(total, maxPatternSize+1) // no overflow, whatever the count
	}
	walk(doc)
	return total
}

// quote is how the library quotes a pattern in its message.
func quote(s string) string {
	s = fmt.Sprintf("%q", s)
	s = strings.ReplaceAll(s, `\"`, `"`)
	s = strings.ReplaceAll(s, `'`, `\'`)
	return "'" + s[1:len(s)-1] + "'"
}

// take is a copy of s for one Validate, to give back with put.
func (s *Schema) take() (*compiled, error) {
	select {
	case c := <-s.spares:
		return c, nil
	default:
		s.made.Add(1)
		return compile(s.raw) // it compiled once: it compiles again
	}
}

func (s *Schema) put(c *compiled) {
	select {
	case s.spares <- c:
	default: // maxSpares kept already: let this one go
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
			err = errors.New("the value is too costly to check against the schema: the schema applies its parts, or its patterns, to it too many times over")
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
