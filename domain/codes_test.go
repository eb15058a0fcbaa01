package domain

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// specOnly are the codes SPEC names (§11, §12) for features not built yet:
// no code uses them, and they are defined so that the feature, when it comes,
// uses the SPEC's word.
var specOnly = map[string]bool{}

// codeConsts parses codes.go: every constant of type Code, name to value.
func codeConsts(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "codes.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			if typ, ok := vs.Type.(*ast.Ident); !ok || typ.Name != "Code" {
				t.Errorf("constant %s of codes.go is not of type Code", vs.Names[0])
				continue
			}
			for i, name := range vs.Names {
				value, err := strconv.Unquote(vs.Values[i].(*ast.BasicLit).Value)
				if err != nil {
					t.Fatal(err)
				}
				consts[name.Name] = value
			}
		}
	}
	return consts
}

// sources parses every non-test Go file of the module but codes.go.
func sources(t *testing.T) map[string]*ast.File {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	self := filepath.Join(root, "domain", "codes.go")
	files := map[string]*ast.File{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || path == self {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		files[rel] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestCodes: every code is snake_case and distinct, and is used by some code
// outside codes.go, or is one SPEC names for a feature still to come.
func TestCodes(t *testing.T) {
	consts := codeConsts(t)
	if len(consts) == 0 {
		t.Fatal("no codes in codes.go")
	}
	snake := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	seen := map[string]string{}
	for name, value := range consts {
		if !snake.MatchString(value) {
			t.Errorf("%s = %q is not snake_case", name, value)
		}
		if other, ok := seen[value]; ok {
			t.Errorf("%s and %s are both %q", name, other, value)
		}
		seen[value] = name
	}
	used := map[string]bool{}
	for _, f := range sources(t) {
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				used[id.Name] = true
			}
			return true
		})
	}
	for name := range consts {
		if !used[name] && !specOnly[name] {
			t.Errorf("%s is used nowhere: use it, or remove it, or list it in specOnly with its SPEC section", name)
		}
	}
	for name := range specOnly {
		if _, ok := consts[name]; !ok {
			t.Errorf("specOnly lists %s, which codes.go does not define", name)
		}
	}
}

// TestNoLiteralCodes: every error is built with a Code constant, never a
// string literal: in domain.E's code argument, or a domain.Error's Code field.
func TestNoLiteralCodes(t *testing.T) {
	for path, f := range sources(t) {
		inDomain := f.Name.Name == "domain"
		isName := func(e ast.Expr, name string) bool {
			switch e := e.(type) {
			case *ast.Ident:
				return inDomain && e.Name == name
			case *ast.SelectorExpr:
				x, ok := e.X.(*ast.Ident)
				return ok && x.Name == "domain" && e.Sel.Name == name
			}
			return false
		}
		literal := func(e ast.Expr) bool {
			lit, ok := e.(*ast.BasicLit)
			return ok && lit.Kind == token.STRING
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if isName(n.Fun, "E") && len(n.Args) > 1 && literal(n.Args[1]) {
					t.Errorf("%s: domain.E with the literal code %s", path, n.Args[1].(*ast.BasicLit).Value)
				}
			case *ast.CompositeLit:
				if !isName(n.Type, "Error") {
					return true
				}
				for _, elt := range n.Elts {
					if kv, ok := elt.(*ast.KeyValueExpr); ok && literal(kv.Value) {
						if key, ok := kv.Key.(*ast.Ident); ok && key.Name == "Code" {
							t.Errorf("%s: domain.Error with the literal code %s", path, kv.Value.(*ast.BasicLit).Value)
						}
					}
				}
			}
			return true
		})
	}
}
