package schema_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

var _ domain.Schema = (*schema.Schema)(nil)

func mustCompile(tb testing.TB, raw string) *schema.Schema {
	tb.Helper()
	s, err := schema.Compile(json.RawMessage(raw))
	if err != nil {
		tb.Fatalf("Compile(%s): %v", raw, err)
	}
	return s
}

const resize = `{
	"type": "object",
	"required": ["url"],
	"properties": {
		"url":   {"type": "string"},
		"width": {"type": "integer", "minimum": 1},
		"a/b c": {"type": "boolean"},
		"tags":  {"type": "array", "items": {"type": "string"}}
	},
	"additionalProperties": false
}`

func TestValidate(t *testing.T) {
	s := mustCompile(t, resize)
	tests := []struct {
		name string
		doc  string
		want []domain.Violation
	}{
		{name: "valid", doc: `{"url": "x", "width": 3, "tags": ["a"]}`},
		{name: "missing required at root", doc: `{}`,
			want: []domain.Violation{{Path: "", Message: "missing properties: 'url'"}}},
		{name: "wrong type", doc: `{"url": "x", "width": "3"}`,
			want: []domain.Violation{{Path: "/width", Message: "expected integer, but got string"}}},
		{name: "below minimum", doc: `{"url": "x", "width": 0}`,
			want: []domain.Violation{{Path: "/width", Message: "must be >= 1 but found 0"}}},
		{name: "array element", doc: `{"url": "x", "tags": ["a", 2]}`,
			want: []domain.Violation{{Path: "/tags/1", Message: "expected string, but got number"}}},
		{name: "pointer escaping", doc: `{"url": "x", "a/b c": 1}`,
			want: []domain.Violation{{Path: "/a~1b c", Message: "expected boolean, but got number"}}},
		{name: "several at once, sorted by path", doc: `{"width": 1.5, "extra": 1}`,
			want: []domain.Violation{
				{Path: "", Message: "additionalProperties 'extra' not allowed"},
				{Path: "", Message: "missing properties: 'url'"},
				{Path: "/width", Message: "expected integer, but got number"},
			}},
		{name: "not an object", doc: `[1]`,
			want: []domain.Violation{{Path: "", Message: "expected object, but got array"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := s.Validate(json.RawMessage(tt.doc))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Validate(%s) (-want +got):\n%s", tt.doc, diff)
			}
		})
	}
}

func TestValidateKeepsBigNumbersExact(t *testing.T) {
	// 2^53+1 is the first integer a float64 cannot hold: decoded as a float
	// both documents below would become 9007199254740992 and pass.
	s := mustCompile(t, `{"type": "integer", "maximum": 9007199254740993}`)
	if v := s.Validate(json.RawMessage(`9007199254740993`)); v != nil {
		t.Errorf("2^53+1 against maximum 2^53+1: %v, want valid", v)
	}
	if v := s.Validate(json.RawMessage(`9007199254740994`)); len(v) != 1 {
		t.Errorf("2^53+2 against maximum 2^53+1: %v, want one violation", v)
	}

	c := mustCompile(t, `{"const": 12345678901234567890123}`)
	if v := c.Validate(json.RawMessage(`12345678901234567890123`)); v != nil {
		t.Errorf("const big integer: %v, want valid", v)
	}
	if v := c.Validate(json.RawMessage(`12345678901234567890124`)); len(v) != 1 {
		t.Errorf("const big integer off by one: %v, want one violation", v)
	}
}

// A number whose exponent the library's big.Rat refuses (beyond 1e6) made
// Validate panic where the library compares it (a bound, a const, an
// enum, "integer", uniqueItems): input any poster can send, and a worker
// socket's claim runs its query on a goroutine of its own, so the panic
// ended the server. Such a value is refused, with a violation.
func TestValidateRefusesNumbersItCannotCompare(t *testing.T) {
	for _, tc := range []struct{ schema, doc string }{
		{`{"type":"integer"}`, `1e2000000`},
		{`{"minimum":0}`, `1e2000000`},
		{`{"properties":{"n":{"maximum":0}}}`, `{"n":-1e2000000}`},
		{`{"const":1}`, `1e-2000000`},
		{`{"enum":[1,2]}`, `1E+2000000`},
		{`{"uniqueItems":true}`, `[1e2000000,1e2000000]`},
		{`{"multipleOf":2}`, `1e2000000`},
	} {
		var v []domain.Violation
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s against %s: panic: %v", tc.doc, tc.schema, r)
				}
			}()
			v = mustCompile(t, tc.schema).Validate(json.RawMessage(tc.doc))
		}()
		if len(v) == 0 {
			t.Errorf("%s against %s: valid, want a violation", tc.doc, tc.schema)
		}
	}
	// Where the library does not compare it, it judges as before.
	if v := mustCompile(t, `{"type":"object"}`).Validate(json.RawMessage(`{"n":1e2000000}`)); v != nil {
		t.Errorf("an object holding 1e2000000 against type object: %v, want valid", v)
	}
}

func TestAnyAcceptsEverything(t *testing.T) {
	for _, doc := range []string{`null`, `1`, `"x"`, `[]`, `{"a": {}}`} {
		if v := schema.Any().Validate(json.RawMessage(doc)); v != nil {
			t.Errorf("Any().Validate(%s) = %v", doc, v)
		}
	}
}

func TestCompileRejects(t *testing.T) {
	tests := []struct {
		name, schema, reason string
	}{
		{"bad JSON", `{"type": `, "unexpected EOF"},
		{"unknown type", `{"type": "color"}`, `at /type: value must be one of`},
		{"bad keyword value", `{"properties": {"a": {"minimum": "x"}}}`, "at /properties/a/minimum: expected number"},
		{"bad regex", `{"pattern": "(("}`, "at /pattern:"},
		{"dangling local ref", `{"$ref": "#/$defs/nope"}`, "not found"},
		{"null", `null`, "expected object or boolean"},
		{"empty", ` `, "empty"},
		{"unknown $schema is not fetched", `{"$schema": "http://example.com/my-draft"}`, "never fetched"},
		{"relative ref is not a file", `{"$ref": "other.json"}`, `reference "/other.json" is outside the schema`},
		// 153 bytes, 34 K instructions; 9 KB of them, 3 M instructions, took 64 MB.
		{"patterns too large", `{"pattern": "` + strings.Repeat(".{0,1000}", 17) + `"}`, "compile to more than 32768 instructions"},
		{"pattern only a $dynamicRef reaches",
			`{"$defs": {"a": {"$dynamicAnchor": "x", "pattern": "^z"}, "b": {"$id": "b", "$defs": {"x": {"$dynamicAnchor": "x"}}, "$dynamicRef": "#x"}}, "$ref": "b"}`,
			"reached only through $dynamicRef"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := schema.Compile(json.RawMessage(tt.schema))
			if err == nil {
				t.Fatalf("Compile(%s) succeeded, want an error", tt.schema)
			}
			var se *schema.Error
			if !errors.As(err, &se) {
				t.Errorf("error %T is not a *schema.Error", err)
			}
			if !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("error %q does not contain %q", err, tt.reason)
			}
		})
	}
}

func TestCompileNeverFetches(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte(`{"type": "string"}`))
	}))
	defer srv.Close()

	// A file that would compile fine if it were ever read.
	file := filepath.Join(t.TempDir(), "string.json")
	if err := os.WriteFile(file, []byte(`{"type": "string"}`), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, ref := range []string{
		"http://127.0.0.1:1/x",
		srv.URL + "/schema.json",
		"https://json-schema.org/draft/2020-12/meta/nonexistent",
		"file://" + filepath.ToSlash(file),
		file,
	} {
		t.Run(ref, func(t *testing.T) {
			raw, _ := json.Marshal(map[string]any{"$ref": ref})
			_, err := schema.Compile(raw)
			if err == nil || !strings.Contains(err.Error(), "never fetched") {
				t.Errorf("Compile($ref %s) = %v, want a never-fetched error", ref, err)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the HTTP server was asked %d times, want 0", n)
	}
}

func TestDraftSelection(t *testing.T) {
	// In draft-07 "items" as an array is tuple validation; 2020-12 forbids
	// the array form (it became prefixItems), so the same schema only
	// compiles when it names draft-07.
	tuple := `"items": [{"type": "string"}, {"type": "integer"}]`
	if _, err := schema.Compile(json.RawMessage(`{` + tuple + `}`)); err == nil {
		t.Errorf("array items compiled under the default draft, want 2020-12 to reject it")
	}
	s := mustCompile(t, `{"$schema": "http://json-schema.org/draft-07/schema#", `+tuple+`}`)
	if v := s.Validate(json.RawMessage(`["a", 1]`)); v != nil {
		t.Errorf("draft-07 tuple, valid doc: %v", v)
	}
	if v := s.Validate(json.RawMessage(`["a", "b"]`)); len(v) != 1 || v[0].Path != "/1" {
		t.Errorf("draft-07 tuple, bad second element: %v, want one violation at /1", v)
	}

	// 2020-12 is the default: prefixItems applies without naming it.
	p := mustCompile(t, `{"prefixItems": [{"type": "string"}]}`)
	if v := p.Validate(json.RawMessage(`[1]`)); len(v) != 1 || v[0].Path != "/0" {
		t.Errorf("prefixItems under the default draft: %v, want one violation at /0", v)
	}
}

func TestCompilerImplementsPort(t *testing.T) {
	var c ports.SchemaCompiler = schema.Compiler{}
	s, err := c.Compile(json.RawMessage(`{"type": "object", "properties": {"size": {"const": "big"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if v := s.Validate(json.RawMessage(`{"size": "small"}`)); len(v) != 1 || v[0].Path != "/size" {
		t.Errorf("Validate = %v, want one violation at /size", v)
	}
	bad, err := c.Compile(json.RawMessage(`{"type": 1}`))
	if err == nil || bad != nil {
		t.Errorf("Compile(bad) = %v, %v; want a nil Schema interface and an error", bad, err)
	}
}

// costlySchema is n definitions, each applying the next twice to the same
// value: 1.4 KB whose every check of a value evaluates 2^n subschemas. A
// claim query is any worker's to send and is tried on every pending task
// under its queue's lock, so unbounded, one such query (n = 40) froze the
// queue for good and kept a CPU busy.
func costlySchema(n int) string {
	defs := make([]string, 0, n+1)
	for i := range n {
		defs = append(defs, fmt.Sprintf(`"d%d":{"allOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]}`, i, i+1, i+1))
	}
	defs = append(defs, fmt.Sprintf(`"d%d":{"type":"object"}`, n))
	return `{"$ref":"#/$defs/d0","$defs":{` + strings.Join(defs, ",") + `}}`
}

// A document whose check would take far more work than its size calls for
// is refused, with a violation, instead of being judged at any cost; the
// same schema still judges documents it can afford, and concurrently.
func TestValidateRefusesWorkBeyondItsBudget(t *testing.T) {
	v := mustCompile(t, costlySchema(22)).Validate(json.RawMessage(`{"a":1}`))
	if len(v) != 1 || !strings.Contains(v[0].Message, "too costly") {
		t.Fatalf("4M evaluations for a 7-byte document: violations %v, want one saying it is too costly", v)
	}

	s := mustCompile(t, costlySchema(6))
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if v := s.Validate(json.RawMessage(`{"a":1}`)); v != nil {
					t.Errorf("64 evaluations: %v, want valid", v)
					return
				}
				if v := s.Validate(json.RawMessage(`[1]`)); len(v) == 0 {
					t.Error("an array against type object: valid, want a violation")
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A pattern costs Go's regexp about the text's length times the size of the
// pattern's program, all inside what the budget counted as one evaluation:
// ".{0,1000}z" is ten bytes and two thousand instructions, a few seconds
// over a 1 MiB item, for every pending task a claim query is tried on. Its
// cost is charged before it runs, whether it checks a string or, through
// patternProperties, the names of an object's members.
func TestValidateChargesPatternsByTheirCost(t *testing.T) {
	// 8001 instructions over 1 KiB: 8 M steps, six times the budget of a
	// 1 KiB document (and over 1 MiB, a minute).
	long, pattern := strings.Repeat("a", 1<<10), strings.Repeat(".{0,1000}", 4)+"z"
	for _, c := range []struct{ name, schema, doc string }{
		{"pattern", `{"properties":{"s":{"pattern":"` + pattern + `"}}}`, `{"s":"` + long + `"}`},
		{"patternProperties", `{"patternProperties":{"` + pattern + `":{"type":"string"}}}`, `{"` + long + `":1}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := mustCompile(t, c.schema).Validate(json.RawMessage(c.doc))
			if len(v) != 1 || !strings.Contains(v[0].Message, "too costly") {
				t.Fatalf("8001 instructions over 1 KiB: violations %v, want one saying it is too costly", v)
			}
		})
	}

	// An honest schema's patterns over an honest item of 1 MiB pass, and
	// a pattern still says what the library said.
	s := mustCompile(t, `{
		"type": "object",
		"required": ["url"],
		"properties": {
			"url":    {"type": "string", "pattern": "^https?://[^\\s/$.?#][^\\s]*$"},
			"sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
			"format": {"enum": ["jpg", "png", "webp"]},
			"tags":   {"type": "array", "items": {"type": "string", "pattern": "^[a-z0-9-]{1,32}$"}},
			"note":   {"type": "string", "pattern": "[A-Za-z]"},
			"meta":   {"type": "object", "patternProperties": {"^x-[a-z0-9-]{1,32}$": {"type": "string"}}, "additionalProperties": false}
		}
	}`)
	tags := strings.TrimSuffix(strings.Repeat(`"tag-12345",`, 40000), ",")
	meta := strings.TrimSuffix(strings.Repeat(`"x-header-name-one":"v",`, 4000), ",")
	doc := `{"url":"https://example.com/` + strings.Repeat("p", 256<<10) + `","sha256":"` + strings.Repeat("ab", 32) +
		`","format":"png","tags":[` + tags + `],"note":"` + strings.Repeat("0", 128<<10) + `z","meta":{` + meta + `}}`
	if len(doc) < 800<<10 {
		t.Fatalf("the honest item is %d bytes, want near 1 MiB", len(doc))
	}
	if v := s.Validate(json.RawMessage(doc)); v != nil {
		t.Fatalf("an honest %d-byte item: %v, want valid", len(doc), v)
	}
	got := s.Validate(json.RawMessage(`{"url":"ftp://x","meta":{"y":""}}`))
	want := []domain.Violation{
		{Path: "/meta", Message: "additionalProperties 'y' not allowed"},
		{Path: "/url", Message: `does not match pattern '^https?://[^\\s/$.?#][^\\s]*$'`},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
}
