package engine

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms/hostmod"
)

// TestHostFunctionsMatchABIDoc holds the engine's host functions (hostmod's
// wasmkeep:alarm and its own wasmkeep:actor) to the .wat signatures in
// abi/ABI.md: the same functions, with the same
// parameter names and types, each returning one i32 errno.
func TestHostFunctionsMatchABIDoc(t *testing.T) {
	doc, err := os.ReadFile("../abi/ABI.md")
	if err != nil {
		t.Fatal(err)
	}
	imp := regexp.MustCompile(`\(import "([^"]+)" "([^"]+)"\s*\(func \$\w+((?:\s*\(param \$\w+ \w+\))*)\s*\(result (\w+)\)\)\)`)
	param := regexp.MustCompile(`\(param \$(\w+) (\w+)\)`)
	type sig struct {
		names, types []string
		result       string
	}
	documented := map[[2]string]sig{}
	for _, m := range imp.FindAllStringSubmatch(string(doc), -1) {
		var s sig
		for _, p := range param.FindAllStringSubmatch(m[3], -1) {
			s.names = append(s.names, p[1])
			s.types = append(s.types, p[2])
		}
		s.result = m[4]
		k := [2]string{m[1], m[2]}
		if prev, dup := documented[k]; dup && !slices.Equal(prev.types, s.types) {
			t.Errorf("ABI.md gives %s %q two signatures", m[1], m[2])
		}
		documented[k] = s
	}
	fs := Functions()
	if len(documented) < len(fs) {
		t.Fatalf("found %d import signatures in ABI.md, the table has %d: the parser or the document changed", len(documented), len(fs))
	}
	for _, f := range fs {
		k := [2]string{f.Module, f.Name}
		want, ok := documented[k]
		if !ok {
			t.Errorf("%s %q is not in ABI.md", f.Module, f.Name)
			continue
		}
		delete(documented, k)
		var types []string
		for _, p := range f.Params {
			types = append(types, api.ValueTypeName(p))
		}
		if !slices.Equal(types, want.types) || !slices.Equal(f.ParamNames, want.names) || want.result != "i32" {
			t.Errorf("%s %q: table has params %v %v, ABI.md has %v %v (result %s)", f.Module, f.Name, f.ParamNames, types, want.names, want.types, want.result)
		}
	}
	for k := range documented {
		t.Errorf("ABI.md documents %s %q, which the host does not provide", k[0], k[1])
	}
}

// Functions hands out copies: a caller cannot change the table.
func TestFunctionsIsACopy(t *testing.T) {
	fs := Functions()
	if len(fs) != len(hostmod.Functions())+len(actorFuncs) {
		t.Fatalf("%d functions, want %d", len(fs), len(hostmod.Functions())+len(actorFuncs))
	}
	last := len(fs) - 1
	fs[last].Params[0] = api.ValueTypeF32
	if actorFuncs[len(actorFuncs)-1].params[0] == api.ValueTypeF32 {
		t.Error("Functions shares the table's slices")
	}
}
