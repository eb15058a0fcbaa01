package postgres

// Claim queries in SQL. A claim with a query (a JSON Schema, SPEC §3) reads
// candidates in claim order and tests each with the Matcher in Go (tasks.go).
// To read fewer, the part of the schema that SQL can judge is translated into
// a condition on the column item, the task's item as jsonb (migration 4):
//
//   - The condition is necessary: it holds for every item the schema accepts.
//     Whatever is not translated (an unknown keyword, "$ref", "not",
//     "pattern", a number PostgreSQL cannot hold...) is left out, which only
//     lets more through, and Match still judges what comes through.
//   - It is exact when every keyword of the schema was translated exactly;
//     then Match is skipped for the candidates whose item is in jsonb (a task
//     whose item PostgreSQL cannot hold as jsonb has item NULL and is always
//     let through and tested in Go).
//
// JSON Schema's rules and jsonb's agree where they are used here: numbers
// compare by value (1 = 1.0, exactly, as numeric), strings by their code
// points, objects as sets of members, arrays in order; "integer" accepts any
// number with no fraction (1.0), as the schema library does.
//
// The condition is split by whether the item is an object, so that the
// common query, required members with a const or an enum, can use the
// indexes: a GIN index over the pending items' jsonb for containment
// (item @> '{"kind":"image"}'), beside a small index of the pending tasks
// whose item is NULL or not an object.

import (
	"bytes"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/ports"
)

// queryMatcher is a Matcher made from a claim query: app's matchers are.
type queryMatcher interface {
	ports.Matcher
	// Query is the JSON Schema document Match applies.
	Query() json.RawMessage
}

// filter is the SQL of a claim query.
type filter struct {
	// where is a condition on the columns of tasks that holds for every
	// task whose item the query accepts.
	where string
	// exact: where holds only for those, among tasks whose item is not NULL.
	exact bool
}

// filters keeps translations by matcher key: workers send the same query
// with every claim.
var filters = struct {
	sync.Mutex
	byKey map[string]*filter
}{byKey: map[string]*filter{}}

// maxFilters bounds the cache; many distinct queries are not being reused.
const maxFilters = 1024

// filterOf is the translation of m's query; nil when m has none or nothing
// of it translates.
func filterOf(m ports.Matcher) *filter {
	qm, ok := m.(queryMatcher)
	if !ok {
		return nil
	}
	key := m.Key()
	if key != "" {
		filters.Lock()
		f, ok := filters.byKey[key]
		filters.Unlock()
		if ok {
			return f
		}
	}
	f := translate(qm.Query())
	if key != "" {
		filters.Lock()
		if len(filters.byKey) >= maxFilters {
			clear(filters.byKey)
		}
		filters.byKey[key] = f
		filters.Unlock()
	}
	return f
}

// Bounds on what is translated, so that a large schema makes a long
// statement only up to a point; what is beyond them is left to Match.
const (
	maxDepth    = 16   // nesting of subschemas
	maxNodes    = 256  // keywords translated
	maxEnum     = 64   // values of one enum
	maxLiteral  = 4096 // bytes of one value's JSON
	maxExponent = 1000 // |exponent| and digits of a number PostgreSQL is handed
)

// drafts are the "$schema" values under which the translated keywords mean
// what this file says; no "$schema" is 2020-12 (adapters/schema). Draft 4
// and older differ (exclusiveMinimum is a boolean, no const).
var drafts = map[string]bool{
	"https://json-schema.org/draft/2020-12/schema": true,
	"https://json-schema.org/draft/2019-09/schema": true,
	"http://json-schema.org/draft-07/schema":       true,
	"http://json-schema.org/draft-06/schema":       true,
}

// annotations are keywords that never reject an item, in these drafts,
// while the schema has no "$ref" ("$defs" and "$id" only matter to one).
var annotations = map[string]bool{
	"$id": true, "$anchor": true, "$dynamicAnchor": true, "$comment": true, "$defs": true, "definitions": true,
	"title": true, "description": true, "default": true, "examples": true,
	"deprecated": true, "readOnly": true, "writeOnly": true,
}

// translate turns a claim query into a filter; nil when nothing of it
// translates.
func translate(query json.RawMessage) *filter {
	root, err := schema.Decode(query)
	if err != nil {
		return nil
	}
	if obj, ok := root.(map[string]any); ok {
		if d, ok := obj["$schema"]; ok {
			s, _ := d.(string)
			if !drafts[strings.TrimSuffix(s, "#")] {
				return nil
			}
		}
	}
	t := &translator{exact: true}
	objects := t.schema(root, nil, asObject, true, 0)
	others := t.schema(root, nil, asOther, false, 0)
	if objects == sqlTrue && others == sqlTrue {
		return nil // a condition that holds for every item
	}
	arms := []string{"item IS NULL"}
	switch others {
	case sqlFalse:
	case sqlTrue:
		arms = []string{"(item IS NULL OR jsonb_typeof(item) <> 'object')"}
	default:
		arms = append(arms, "(jsonb_typeof(item) <> 'object' AND "+others+")")
	}
	switch objects {
	case sqlFalse:
	case sqlTrue:
		arms = append(arms, "jsonb_typeof(item) = 'object'")
	default:
		arms = append(arms, "(jsonb_typeof(item) = 'object' AND "+objects+")")
	}
	return &filter{where: "(" + strings.Join(arms, " OR ") + ")", exact: t.exact}
}

// A mode is what is known of the value a condition is about.
type mode int

const (
	asAny    mode = iota // any JSON value
	asObject             // an object
	asOther              // anything but an object
)

const (
	sqlTrue  = "true"
	sqlFalse = "false"
)

type translator struct {
	exact bool // nothing was left out so far
	nodes int
}

// skip notes that a part of the schema is left to Match.
func (t *translator) skip() string {
	t.exact = false
	return sqlTrue
}

// schema is the condition that the value at path in the item (known per m)
// meets s. anchored: every item the query accepts has a value at path,
// through objects from the root, so a const there may be tested by
// containment.
func (t *translator) schema(s any, path []string, m mode, anchored bool, depth int) string {
	switch s := s.(type) {
	case bool:
		if s {
			return sqlTrue
		}
		return sqlFalse
	case map[string]any:
		if depth > maxDepth || t.nodes > maxNodes {
			return t.skip()
		}
		return t.object(s, path, m, anchored, depth)
	}
	return t.skip() // not a schema: the compiler refused it already
}

// object translates a schema object: the AND of its keywords.
func (t *translator) object(s map[string]any, path []string, m mode, anchored bool, depth int) string {
	v := expr(path)
	if _, ok := s["$ref"]; ok {
		// A "$ref" (and in draft 7 its siblings too) is left to Match.
		return t.skip()
	}
	if _, ok := s["$schema"]; ok && depth > 0 {
		return t.skip()
	}
	types, typed := typesOf(s["type"])
	if _, ok := s["type"]; ok && !typed {
		return t.skip()
	}
	isObject := m == asObject || (typed && len(types) == 1 && types[0] == "object")
	var and conj
	for _, k := range sortedKeys(s) {
		t.nodes++
		val := s[k]
		switch k {
		case "$schema":
		case "type":
			and.add(typeCond(types, v, m))
		case "const":
			and.add(t.equals(path, []any{val}, anchored))
		case "enum":
			vals, _ := val.([]any)
			and.add(t.equals(path, vals, anchored))
		case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
			if m != asObject {
				and.add(t.bound(k, val, v))
			}
		case "required", "properties":
			// Below, with the object.
		case "allOf", "anyOf", "oneOf":
			and.add(t.combine(k, val, path, m, anchored, depth))
		default:
			if !annotations[k] {
				t.skip()
			}
		}
	}
	if _, ok := s["required"]; ok || s["properties"] != nil {
		if m != asOther {
			members := t.members(s, path, isObject && anchored, depth)
			if !isObject && members != sqlTrue {
				members = "CASE WHEN jsonb_typeof(" + v + ") = 'object' THEN " + members + " ELSE true END"
			}
			and.add(members)
		}
	}
	return and.sql()
}

// members is the condition of "required" and "properties" on the value at
// path, an object.
func (t *translator) members(s map[string]any, path []string, anchored bool, depth int) string {
	v := expr(path)
	var and conj
	required := map[string]bool{}
	if names, ok := s["required"].([]any); ok {
		for _, n := range names {
			name, _ := n.(string)
			if !safeString(name) {
				t.skip()
				continue
			}
			required[name] = true
			and.add(v + " ? " + quote(name))
		}
	} else if _, ok := s["required"]; ok {
		t.skip()
	}
	props, ok := s["properties"].(map[string]any)
	if !ok {
		if _, ok := s["properties"]; ok {
			t.skip()
		}
		return and.sql()
	}
	for _, name := range sortedKeys(props) {
		if !safeString(name) {
			t.skip()
			continue
		}
		cond := t.schema(props[name], append(path[:len(path):len(path)], name), asAny, anchored && required[name], depth+1)
		if cond == sqlTrue {
			continue
		}
		if !required[name] {
			// An absent member meets its schema.
			cond = "(NOT " + v + " ? " + quote(name) + " OR " + cond + ")"
		}
		and.add(cond)
	}
	return and.sql()
}

// combine translates allOf (AND), anyOf (OR) and oneOf (OR: one branch
// holding is necessary, not sufficient).
func (t *translator) combine(k string, val any, path []string, m mode, anchored bool, depth int) string {
	branches, ok := val.([]any)
	if !ok || len(branches) == 0 {
		return t.skip()
	}
	if k == "allOf" {
		var and conj
		for _, b := range branches {
			and.add(t.schema(b, path, m, anchored, depth+1))
		}
		return and.sql()
	}
	if k == "oneOf" {
		t.skip()
	}
	var or []string
	for _, b := range branches {
		switch c := t.schema(b, path, m, false, depth+1); c {
		case sqlTrue:
			return sqlTrue
		case sqlFalse:
		default:
			or = append(or, c)
		}
	}
	if len(or) == 0 {
		return sqlFalse
	}
	return "(" + strings.Join(or, " OR ") + ")"
}

// typeNames are the names "type" may use.
var typeNames = map[string]bool{"object": true, "array": true, "string": true, "number": true, "integer": true, "boolean": true, "null": true}

// typesOf reads "type": a name or a list of names.
func typesOf(val any) ([]string, bool) {
	list, ok := val.([]any)
	if !ok {
		list = []any{val}
	}
	var out []string
	for _, n := range list {
		s, ok := n.(string)
		if !ok || !typeNames[s] {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// typeCond is the condition that v has one of types.
func typeCond(types []string, v string, m mode) string {
	var names []string
	integer := false
	for _, ty := range types {
		switch {
		case ty == "object" && m == asObject:
			return sqlTrue
		case ty == "object" && m == asOther, ty != "object" && m == asObject:
			// Not this value's type.
		case ty == "integer":
			integer = true
		default:
			names = append(names, ty)
		}
	}
	if contains(names, "number") {
		integer = false
	}
	var or []string
	if len(names) > 0 {
		sort.Strings(names)
		or = append(or, "jsonb_typeof("+v+") IN ('"+strings.Join(names, "', '")+"')")
	}
	if integer {
		// A number with no fraction: 1.0 is an integer.
		or = append(or, "CASE WHEN jsonb_typeof("+v+") = 'number' THEN ("+v+")::numeric = trunc(("+v+")::numeric) ELSE false END")
	}
	switch len(or) {
	case 0:
		return sqlFalse
	case 1:
		return or[0]
	}
	return "(" + strings.Join(or, " OR ") + ")"
}

// equals is the condition that the value at path equals one of vals
// (const, enum). At an anchored path it adds containment tests, which the
// GIN index answers.
func (t *translator) equals(path []string, vals []any, anchored bool) string {
	v := expr(path)
	if len(vals) == 0 || len(vals) > maxEnum {
		return t.skip()
	}
	var lits []string
	for _, val := range vals {
		lit, ok := jsonLiteral(val)
		if !ok {
			return t.skip()
		}
		lits = append(lits, lit)
	}
	eq := v + " = " + lits[0] + "::jsonb"
	if len(lits) > 1 {
		eq = v + " IN (" + strings.Join(lits, "::jsonb, ") + "::jsonb)"
	}
	if !anchored || len(path) == 0 {
		return eq
	}
	var or []string
	for _, val := range vals {
		doc := val
		for i := len(path) - 1; i >= 0; i-- {
			doc = map[string]any{path[i]: doc}
		}
		lit, ok := jsonLiteral(doc)
		if !ok {
			return eq
		}
		or = append(or, "item @> "+lit+"::jsonb")
	}
	contain := or[0]
	if len(or) > 1 {
		contain = "(" + strings.Join(or, " OR ") + ")"
	}
	return contain + " AND " + eq
}

// bound is the condition of a numeric bound on v, which only numbers have
// to meet.
func (t *translator) bound(k string, val any, v string) string {
	n, ok := val.(json.Number)
	if !ok || !safeNumber(n) {
		return t.skip()
	}
	op := map[string]string{"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}[k]
	return "CASE WHEN jsonb_typeof(" + v + ") = 'number' THEN (" + v + ")::numeric " + op + " " + quote(n.String()) + "::numeric ELSE true END"
}

// conj collects the conditions of an AND.
type conj []string

func (c *conj) add(cond string) {
	if cond != sqlTrue {
		*c = append(*c, cond)
	}
}

func (c conj) sql() string {
	switch {
	case len(c) == 0:
		return sqlTrue
	case contains(c, sqlFalse):
		return sqlFalse
	case len(c) == 1:
		return c[0]
	}
	return "(" + strings.Join(c, " AND ") + ")"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// expr is the SQL of the value at path in the item: item -> 'a' -> 'b'
// (NULL where there is none).
func expr(path []string) string {
	v := "item"
	for _, name := range path {
		v += " -> " + quote(name)
	}
	return v
}

var quoted = strings.NewReplacer(`\`, `\\`, `'`, `''`)

// quote is s as an SQL string constant: the E'...' form, which reads the
// same whatever standard_conforming_strings says.
func quote(s string) string {
	return "E'" + quoted.Replace(s) + "'"
}

// jsonLiteral is val as an SQL constant for a cast to jsonb; false when
// PostgreSQL could not hold it (a U+0000, a number beyond numeric) or it is
// too long to be worth it.
func jsonLiteral(val any) (string, bool) {
	if !safeValue(val) {
		return "", false
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(val); err != nil || buf.Len() > maxLiteral {
		return "", false
	}
	return quote(strings.TrimSuffix(buf.String(), "\n")), true
}

// safeValue: jsonb holds val as the schema library sees it.
func safeValue(val any) bool {
	switch val := val.(type) {
	case string:
		return safeString(val)
	case json.Number:
		return safeNumber(val)
	case []any:
		for _, x := range val {
			if !safeValue(x) {
				return false
			}
		}
	case map[string]any:
		for k, x := range val {
			if !safeString(k) || !safeValue(x) {
				return false
			}
		}
	}
	return true
}

// safeString: jsonb and text hold s (no U+0000; decoding already made it
// valid UTF-8).
func safeString(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// safeNumber: numeric holds n exactly, without a number far beyond any
// sensible bound making the statement fail.
func safeNumber(n json.Number) bool {
	s := n.String()
	mant, exp, _ := strings.Cut(strings.ToLower(s), "e")
	if len(mant) > maxExponent {
		return false
	}
	if exp != "" {
		e, err := strconv.Atoi(exp)
		if err != nil || e > maxExponent || e < -maxExponent {
			return false
		}
	}
	return true
}
