package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/taskhoster/taskhoster/adapters/clock"
	"github.com/taskhoster/taskhoster/adapters/eventlog"
	"github.com/taskhoster/taskhoster/adapters/folderconfig"
	"github.com/taskhoster/taskhoster/adapters/httpapi"
	"github.com/taskhoster/taskhoster/adapters/index"
	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
)

// The OpenAPI document (openapi.json) against itself and against the
// router. Its replies are checked against the running server in
// tests/e2e/openapi_test.go.

// notAPI are the path prefixes of routes that are not part of the API, and
// so neither in the document nor required to be.
var notAPI = []string{
	"/_dash", // a host's dashboard: HTML pages for people, not a client's API
}

// operationMethods are the keys of an OpenAPI path item that are operations.
var operationMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func mustDocument(t *testing.T) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(httpapi.Document(), &doc); err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	return doc
}

// documented is every "METHOD /path" of the document.
func documented(doc map[string]any) []string {
	var out []string
	for path, item := range doc["paths"].(map[string]any) {
		for method := range item.(map[string]any) {
			if slices.Contains(operationMethods, method) {
				out = append(out, strings.ToUpper(method)+" "+path)
			}
		}
	}
	sort.Strings(out)
	return out
}

// routerAPI is an API with every optional part (the log API, the sockets)
// present, so that its router has every route the server's has.
func routerAPI(t *testing.T) *httpapi.API {
	t.Helper()
	dir := t.TempDir()
	// A queue that allows nobody anything: every request that reaches a
	// handler is answered 401 before it touches a task.
	path := filepath.Join(dir, testHost, "taskhoster-queues", "q.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(`{"item":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	config, problems := folderconfig.Load(dir)
	if folderconfig.HasErrors(problems) {
		t.Fatalf("hosts folder: %v", problems)
	}
	svc := app.New(app.Deps{
		Repo: index.New(), Syncer: nopSync{}, Log: nopLog{}, Notifier: notify.NewHub(),
		Clock: clock.System{}, Compiler: schema.Compiler{}, Pauses: &memPauses{},
	})
	// Dashboard stands in for adapters/dashboard: its routes must be left
	// out of the walk (notAPI), not missing from the router.
	dash := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	return httpapi.New(svc, config, httpapi.Options{Logs: eventlog.NewReader(t.TempDir()), Sockets: noSockets{}, Dashboard: dash})
}

// noSockets stands in for wsapi: the routing, not the socket, is tested here.
type noSockets struct{}

func (noSockets) Work(w http.ResponseWriter, _ *http.Request, _ *domain.Queue, _ string, _ func() (*domain.Queue, error)) {
	w.WriteHeader(http.StatusTeapot)
}

func (noSockets) Watch(w http.ResponseWriter, _ *http.Request, _ *domain.Queue, _ string, _ func() (*domain.Queue, error)) {
	w.WriteHeader(http.StatusTeapot)
}

// routed is every "METHOD /path" the router serves, in the document's
// spelling of paths. chi.Walk lists a route registered for every method
// (HandleFunc, with httpapi's own 405 for the wrong ones) under every
// method, so each listed method is asked once: a method counts unless the
// answer is 405.
func routed(t *testing.T, api *httpapi.API) []string {
	t.Helper()
	example := strings.NewReplacer("{queue}", "q", "{id}", "0123456789abcdef", "{day}", "2026-01-01", "{file}", "item.json")
	seen := map[string]bool{}
	err := chi.Walk(api.Routes(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if len(route) > 1 {
			route = strings.TrimSuffix(route, "/") // chi spells a Route's own "/" as "/{queue}/"
		}
		for _, prefix := range notAPI {
			if strings.HasPrefix(route, prefix) {
				return nil
			}
		}
		// Made as a GET and then given its method: httptest would read a
		// CONNECT's URL as an authority, without the path.
		req := httptest.NewRequest("GET", "http://"+testHost+example.Replace(route), nil)
		req.Method = method
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		if rec.Code != http.StatusMethodNotAllowed {
			seen[method+" "+route] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, 0, len(seen))
	for r := range seen {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// TestEveryRouteIsDocumented holds the document to the router, both ways.
func TestEveryRouteIsDocumented(t *testing.T) {
	doc := documented(mustDocument(t))
	routes := routed(t, routerAPI(t))
	if len(routes) < 20 {
		t.Fatalf("the walk found only %d routes: %v", len(routes), routes)
	}
	var undocumented, unrouted []string
	for _, r := range routes {
		if !slices.Contains(doc, r) {
			undocumented = append(undocumented, r)
		}
	}
	for _, d := range doc {
		if !slices.Contains(routes, d) {
			unrouted = append(unrouted, d)
		}
	}
	if len(undocumented) > 0 {
		t.Errorf("routes the router serves that openapi.json does not document:\n\t%s", strings.Join(undocumented, "\n\t"))
	}
	if len(unrouted) > 0 {
		t.Errorf("operations openapi.json documents that the router does not serve:\n\t%s", strings.Join(unrouted, "\n\t"))
	}
}

// TestServesDocument: every host, and a Host header that names none, gets
// the embedded document.
func TestServesDocument(t *testing.T) {
	api := routerAPI(t)
	for _, h := range []string{testHost, "nosuch.example.com"} {
		req := httptest.NewRequest("GET", "http://"+h+httpapi.DocumentPath, nil)
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" || !bytes.Equal(rec.Body.Bytes(), httpapi.Document()) {
			t.Errorf("GET %s on %s: %d %q, want 200 and the document", httpapi.DocumentPath, h, rec.Code, rec.Header().Get("Content-Type"))
		}
	}
}

// TestDocumentShape checks what a reader of any OpenAPI 3.1 document relies
// on: the top-level fields, one operationId each, responses everywhere, and
// that every $ref resolves.
func TestDocumentShape(t *testing.T) {
	doc := mustDocument(t)
	if v, _ := doc["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		t.Errorf("openapi is %q, want 3.1.x", v)
	}
	info, _ := doc["info"].(map[string]any)
	if info["title"] == nil || info["version"] == nil {
		t.Errorf("info needs a title and a version: %v", info)
	}
	for _, key := range []string{"paths", "components"} {
		if _, ok := doc[key].(map[string]any); !ok {
			t.Fatalf("no %s object", key)
		}
	}
	ids := map[string]string{}
	for path, item := range doc["paths"].(map[string]any) {
		for method, o := range item.(map[string]any) {
			op := o.(map[string]any)
			where := strings.ToUpper(method) + " " + path
			id, _ := op["operationId"].(string)
			if other, dup := ids[id]; id == "" || dup {
				t.Errorf("%s: operationId %q missing or also %s's", where, id, other)
			}
			ids[id] = where
			if responses, _ := op["responses"].(map[string]any); len(responses) == 0 {
				t.Errorf("%s: no responses", where)
			}
			if _, ok := op["security"].([]any); !ok {
				t.Errorf("%s: no security (give [] for none)", where)
			}
			checkPathParams(t, where, path, op, doc)
		}
	}
	walkRefs(t, doc, doc, "")
}

// checkPathParams: every {name} of the path is a path parameter of the
// operation and the other way round.
func checkPathParams(t *testing.T, where, path string, op, doc map[string]any) {
	t.Helper()
	var inPath, declared []string
	for _, m := range regexp.MustCompile(`\{([^}]+)\}`).FindAllStringSubmatch(path, -1) {
		inPath = append(inPath, m[1])
	}
	params, _ := op["parameters"].([]any)
	for _, p := range params {
		param, _ := p.(map[string]any)
		if ref, ok := param["$ref"].(string); ok {
			param, _ = resolve(doc, ref).(map[string]any)
		}
		if param["in"] == "path" {
			declared = append(declared, param["name"].(string))
		}
	}
	sort.Strings(inPath)
	sort.Strings(declared)
	if !slices.Equal(inPath, declared) {
		t.Errorf("%s: path parameters %v, declared %v", where, inPath, declared)
	}
}

// walkRefs fails for every "$ref" under v that does not resolve in doc.
func walkRefs(t *testing.T, doc map[string]any, v any, at string) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		if ref, ok := v["$ref"].(string); ok && resolve(doc, ref) == nil {
			t.Errorf("%s: $ref %q does not resolve", at, ref)
		}
		for k, e := range v {
			walkRefs(t, doc, e, at+"/"+k)
		}
	case []any:
		for i, e := range v {
			walkRefs(t, doc, e, at+"/"+strconv.Itoa(i))
		}
	}
}

// resolve follows a local reference ("#/a/b") into doc; nil if it leads
// nowhere. The document has no other kind.
func resolve(doc map[string]any, ref string) any {
	pointer, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil
	}
	var v any = doc
	for _, part := range strings.Split(pointer, "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		if v, ok = m[part]; !ok {
			return nil
		}
	}
	return v
}

// TestDocumentSchemasCompile compiles every schema of the components as
// JSON Schema 2020-12, the dialect of OpenAPI 3.1.
func TestDocumentSchemasCompile(t *testing.T) {
	doc := mustDocument(t)
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	if err := c.AddResource("openapi.json", bytes.NewReader(httpapi.Document())); err != nil {
		t.Fatal(err)
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	for name := range schemas {
		if _, err := c.Compile("openapi.json#/components/schemas/" + name); err != nil {
			t.Errorf("schema %s: %v", name, err)
		}
	}
}

// TestErrorCodesAreTheDomains: the document's ErrorCode enum is exactly the
// codes of domain/codes.go, so a new code cannot be left out of it.
func TestErrorCodesAreTheDomains(t *testing.T) {
	doc := mustDocument(t)
	var documented []string
	for _, c := range resolve(doc, "#/components/schemas/ErrorCode/enum").([]any) {
		documented = append(documented, c.(string))
	}
	codes := domainCodes(t)
	sort.Strings(documented)
	for _, c := range codes {
		if !slices.Contains(documented, c) {
			t.Errorf("code %q of domain/codes.go is not in the document's ErrorCode enum", c)
		}
	}
	for _, c := range documented {
		if !slices.Contains(codes, c) {
			t.Errorf("code %q of the document's ErrorCode enum is not in domain/codes.go", c)
		}
	}
}

// domainCodes reads the values of the Code constants from domain/codes.go.
func domainCodes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "..", "domain", "codes.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		if typ, ok := spec.Type.(*ast.Ident); !ok || typ.Name != "Code" {
			return true
		}
		for _, v := range spec.Values {
			lit, ok := v.(*ast.BasicLit)
			if !ok {
				t.Fatalf("a Code constant that is not a literal: %T", v)
			}
			s, _ := strconv.Unquote(lit.Value)
			codes = append(codes, s)
		}
		return true
	})
	sort.Strings(codes)
	if len(codes) < 20 {
		t.Fatalf("found only %d codes in domain/codes.go", len(codes))
	}
	return codes
}

// TestActionsAreDocumented: every operation on a host's queues names the
// access actions that allow it, and only actions that exist.
func TestActionsAreDocumented(t *testing.T) {
	doc := mustDocument(t)
	known := make([]string, len(domain.Actions))
	for i, a := range domain.Actions {
		known[i] = string(a)
	}
	for path, item := range doc["paths"].(map[string]any) {
		for method, o := range item.(map[string]any) {
			where := strings.ToUpper(method) + " " + path
			actions, has := o.(map[string]any)["x-taskhoster-action"].([]any)
			needs := strings.HasPrefix(path, "/{queue}") || strings.HasPrefix(path, "/_logs")
			if has != needs {
				t.Errorf("%s: x-taskhoster-action given %v, wanted %v", where, has, needs)
			}
			for _, a := range actions {
				if !slices.Contains(known, fmt.Sprint(a)) {
					t.Errorf("%s: unknown action %v", where, a)
				}
			}
		}
	}
}
