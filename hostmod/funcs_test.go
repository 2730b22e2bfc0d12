package hostmod

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms/abi"
)

// TestHostFunctionsMatchABIDoc holds the table of host functions to the
// .wat signatures of wasmkeep:alarm in abi/ABI.md: the same functions, with the same
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
		if m[1] != abi.AlarmModule {
			continue // wasmkeep:actor is package engine's
		}
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
	if len(documented) < len(hostFuncs) {
		t.Fatalf("found %d import signatures in ABI.md, the table has %d: the parser or the document changed", len(documented), len(hostFuncs))
	}
	for _, f := range hostFuncs {
		k := [2]string{f.module, f.name}
		want, ok := documented[k]
		if !ok {
			t.Errorf("%s %q is not in ABI.md", f.module, f.name)
			continue
		}
		delete(documented, k)
		var types []string
		for _, p := range f.params {
			types = append(types, api.ValueTypeName(p))
		}
		if !slices.Equal(types, want.types) || !slices.Equal(f.paramNames, want.names) || want.result != "i32" {
			t.Errorf("%s %q: table has params %v %v, ABI.md has %v %v (result %s)", f.module, f.name, f.paramNames, types, want.names, want.types, want.result)
		}
	}
	for k := range documented {
		t.Errorf("ABI.md documents %s %q, which the host does not provide", k[0], k[1])
	}
}

// Functions hands out copies: a caller cannot change the table.
func TestFunctionsIsACopy(t *testing.T) {
	fs := Functions()
	if len(fs) != len(hostFuncs) {
		t.Fatalf("%d functions, want %d", len(fs), len(hostFuncs))
	}
	fs[0].Params[0] = api.ValueTypeF32
	if hostFuncs[0].params[0] == api.ValueTypeF32 {
		t.Error("Functions shares the table's slices")
	}
}
