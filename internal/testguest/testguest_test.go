package testguest_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// importSigs are the signatures of every import, from the host's table of
// functions (the engine's test holds that table to abi/ABI.md).
var importSigs = func() map[[2]string][2][]api.ValueType {
	m := map[[2]string][2][]api.ValueType{}
	for _, f := range engine.Functions() {
		m[[2]string{f.Module, f.Name}] = [2][]api.ValueType{f.Params, {api.ValueTypeI32}}
	}
	return m
}()

// exportSigs are the exports' signatures from package abi.
var exportSigs = map[string][2][]byte{
	abi.ExportOnAlarm:    {abi.OnAlarmParams, abi.OnAlarmResults},
	abi.ExportOnRequest:  {abi.OnRequestParams, abi.OnRequestResults},
	abi.ExportOnInit:     {abi.OnInitParams, abi.OnInitResults},
	abi.ExportInitialize: {{}, {}},
}

func sameSig(f api.FunctionDefinition, params, results []api.ValueType) bool {
	return slices.Equal(f.ParamTypes(), params) && slices.Equal(f.ResultTypes(), results)
}

// checkExport fails the test unless cm exports name with the ABI's signature.
func checkExport(t testing.TB, cm wazero.CompiledModule, name string) {
	t.Helper()
	f, ok := cm.ExportedFunctions()[name]
	if !ok {
		t.Errorf("no export %q", name)
		return
	}
	want := exportSigs[name]
	if !sameSig(f, want[0], want[1]) {
		t.Errorf("export %q: params %v results %v, want %v %v", name, f.ParamTypes(), f.ResultTypes(), want[0], want[1])
	}
}

// checkImports fails the test unless every wasmkeep import of cm is one the
// ABI defines, with its signature; it returns the ones it saw.
func checkImports(t testing.TB, cm wazero.CompiledModule) map[[2]string]bool {
	t.Helper()
	seen := map[[2]string]bool{}
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		if !strings.HasPrefix(mod, "wasmkeep:") {
			continue
		}
		k := [2]string{mod, name}
		want, ok := importSigs[k]
		if !ok {
			t.Errorf("imports %s %q, which the ABI does not define", mod, name)
			continue
		}
		if !sameSig(f, want[0], want[1]) {
			t.Errorf("import %s %q: params %v results %v, want %v %v", mod, name, f.ParamTypes(), f.ResultTypes(), want[0], want[1])
		}
		seen[k] = true
	}
	return seen
}

func TestGoGuestsHaveTheABIsExportsAndImports(t *testing.T) {
	seen := map[[2]string]bool{}
	for _, dir := range []string{testguest.CounterActor, testguest.Scripted} {
		cm := compile(t, testguest.Build(t, dir))
		for name := range exportSigs {
			checkExport(t, cm, name)
		}
		if _, ok := cm.ExportedMemories()["memory"]; !ok {
			t.Errorf("%s: no exported memory", dir)
		}
		for k := range checkImports(t, cm) {
			seen[k] = true
		}
	}
	// Together the two guests use every import, so each of the SDK's
	// declarations was checked.
	for k := range importSigs {
		if !seen[k] {
			t.Errorf("neither guest imports %s %q", k[0], k[1])
		}
	}
}

func TestBuildIsCachedAndReturnsACopy(t *testing.T) {
	a := testguest.Build(t, testguest.Scripted)
	a[0] ^= 0xff
	b := testguest.Build(t, testguest.Scripted)
	if !bytes.HasPrefix(b, []byte("\x00asm")) {
		t.Fatalf("second Build returned % x..., want a wasm module (the first caller's change leaked)", b[:4])
	}
}

func TestBuildOfAMissingDirectoryFails(t *testing.T) {
	ft := &fatalRecorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		testguest.Build(ft, "testdata/guests/no-such-guest")
	}()
	if !ft.failed || !strings.Contains(ft.msg, "no-such-guest") {
		t.Fatalf("Build of a missing directory: failed=%v msg %q", ft.failed, ft.msg)
	}
}

// fatalRecorder records Fatalf instead of ending the test; it panics to stop
// the caller, as runtime.Goexit would.
type fatalRecorder struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.failed = true
	f.msg = fmt.Sprintf(format, args...)
	panic("fatal")
}

// fixtures are the ones testdata/wasm/README.md describes; others may sit
// beside them.
var fixtures = []string{
	"bad_pointer", "bad_time", "embedder_imports", "fail_on_alarm", "fuzz_calls", "hang_on_alarm", "init_calls",
	"missing_on_alarm", "trap_on_alarm", "trap_on_request", "wrong_signature",
}

func TestEveryWatHasItsWasm(t *testing.T) {
	dir := filepath.Join(testguest.Root(t), "testdata", "wasm")
	wats, err := filepath.Glob(filepath.Join(dir, "*.wat"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range wats {
		names = append(names, strings.TrimSuffix(filepath.Base(w), ".wat"))
	}
	for _, f := range fixtures {
		if !slices.Contains(names, f) {
			t.Errorf("no fixture %s.wat", f)
		}
	}
	wat2wasm, lookErr := exec.LookPath("wat2wasm")
	if lookErr != nil {
		if os.Getenv("WASMKEEP_REQUIRE_WAT2WASM") != "" {
			// CI sets it: there the check must run, not pass by default.
			t.Fatal("wat2wasm not installed and WASMKEEP_REQUIRE_WAT2WASM is set (install wabt)")
		}
		t.Log("wat2wasm not installed: not checking that each .wasm is up to date")
	}
	for _, name := range names {
		got := testguest.Fixture(t, name)
		if wat2wasm == "" {
			continue
		}
		out := filepath.Join(t.TempDir(), name+".wasm")
		if b, err := exec.Command(wat2wasm, "-o", out, filepath.Join(dir, name+".wat")).CombinedOutput(); err != nil {
			t.Errorf("wat2wasm %s.wat: %v\n%s", name, err, b)
			continue
		}
		want, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s.wasm is not what %s.wat compiles to: run make testdata", name, name)
		}
	}
}
