package testguest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/wasmkeep/alarms/internal/guestbuild"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// The Rust and AssemblyScript SDKs' own host-free tests, run from go test so
// that one command runs every test (skipped without the toolchain, failed
// without it under WASMKEEP_ALL_GUESTS=1).

func TestRustSDKHostFreeTests(t *testing.T) {
	rustc, _, err := guestbuild.RustToolchain()
	testguest.NeedToolchain(t, err)
	bin := filepath.Join(t.TempDir(), "sdk-test")
	src := filepath.Join(testguest.Root(t), guestbuild.RustSDK, "src", "lib.rs")
	if out, err := exec.Command(rustc, "--edition", "2021", "--test", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("rustc --test %s: %v\n%s", src, err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil {
		t.Fatalf("the Rust SDK's tests failed: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

func TestASSDKHostFreeTests(t *testing.T) {
	root := testguest.Root(t)
	node, _, err := guestbuild.ASCompiler(root)
	testguest.NeedToolchain(t, err)
	cmd := exec.Command(node, "--test", "tests/")
	cmd.Dir = filepath.Join(root, guestbuild.ASSDK)
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the AssemblyScript SDK's tests failed: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
