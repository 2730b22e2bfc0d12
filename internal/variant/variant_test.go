package variant_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/internal/variant"
)

// The unsafe variants are reachable only from inside the module: no
// exported identifier of a package outside internal/ (and the simulator,
// whose job is to run them) names this package, so no user of the module
// can turn a safety rule off.
func TestNoExportedSwitchOutsideTheModule(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	users := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch {
			case rel == ".":
				return nil
			case rel == "internal", rel == "sim", rel == "testdata", strings.HasPrefix(d.Name(), "."):
				return filepath.SkipDir
			case fileExists(filepath.Join(path, "go.mod")):
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		name := ""
		for _, im := range f.Imports {
			if strings.Trim(im.Path.Value, `"`) == "github.com/wasmkeep/alarms/internal/variant" {
				name = "variant"
				if im.Name != nil {
					name = im.Name.Name
				}
			}
		}
		if name == "" {
			return nil
		}
		users++
		for _, decl := range f.Decls {
			for _, exp := range exported(decl) {
				if mentions(exp, name) {
					t.Errorf("%s: the exported %s names package variant: a user could turn a safety rule off", rel, describe(fset, exp))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if users == 0 {
		t.Fatal("no package outside internal/ uses the variants: the walk found nothing to check")
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// exported returns the parts of decl a user of the package can see: an
// exported function's signature, an exported type's exported fields and
// methods, an exported variable's or constant's type and value.
func exported(decl ast.Decl) []ast.Node {
	var out []ast.Node
	switch d := decl.(type) {
	case *ast.FuncDecl:
		if d.Name.IsExported() && (d.Recv == nil || recvExported(d.Recv)) {
			out = append(out, d.Type)
		}
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				if !s.Name.IsExported() {
					continue
				}
				st, ok := s.Type.(*ast.StructType)
				if !ok {
					out = append(out, s.Type)
					continue
				}
				for _, f := range st.Fields.List {
					for _, n := range f.Names {
						if n.IsExported() {
							out = append(out, f.Type)
						}
					}
					if len(f.Names) == 0 { // embedded
						out = append(out, f.Type)
					}
				}
			case *ast.ValueSpec:
				for _, n := range s.Names {
					if n.IsExported() {
						if s.Type != nil {
							out = append(out, s.Type)
						}
						for _, v := range s.Values {
							out = append(out, v)
						}
					}
				}
			}
		}
	}
	return out
}

func recvExported(r *ast.FieldList) bool {
	t := r.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if ix, ok := t.(*ast.IndexExpr); ok {
		t = ix.X
	}
	id, ok := t.(*ast.Ident)
	return ok && id.IsExported()
}

func mentions(n ast.Node, pkg string) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == pkg {
				found = true
			}
		}
		return !found
	})
	return found
}

func describe(fset *token.FileSet, n ast.Node) string {
	return "declaration at " + fset.Position(n.Pos()).String()
}

// The hook reaches the rules: a variant set through it changes what the
// rules decide (here NoFence: stale entries of a hold that uploaded nothing
// are removed without the fence).
func TestRulesTurnsARuleOff(t *testing.T) {
	src, err := alarmindex.NewNonceSource(rand.NewChaCha8([32]byte{1}))
	if err != nil {
		t.Fatal(err)
	}
	a := alarmindex.Key{}.Actor
	a.Tenant, a.Class, a.Name = "t", "c", "n"
	stale := alarmindex.Key{Actor: a, DueMs: 1_700_000_000_000, Tag: alarmindex.Tag{Generation: 1, Nonce: "1"}}
	facts := alarmindex.DeliveryFacts{Delivered: stale, Generation: 2, HoldValid: true, BucketHadActor: true}
	safe := alarmindex.Rules{Nonces: src}
	p, err := safe.Deliver(facts)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Fence {
		t.Fatalf("the safe rules remove a stale entry of a hold that uploaded nothing without the fence: %+v", p)
	}
	unsafe := variant.Rules(safe, variant.Set{NoFence: true})
	p, err = unsafe.Deliver(facts)
	if err != nil {
		t.Fatal(err)
	}
	if p.Fence {
		t.Fatal("variant.Rules with NoFence still fences: the hook does not reach the rules")
	}
	if p, _ := safe.Deliver(facts); !p.Fence {
		t.Fatal("variant.Rules changed the rules it was given, not a copy")
	}
}
