package alarmstest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The embedded guest is what kit.wat compiles to (checked where wat2wasm
// is installed; CI requires it).
func TestGuestIsKitWat(t *testing.T) {
	wat2wasm, err := exec.LookPath("wat2wasm")
	if err != nil {
		if os.Getenv("WASMKEEP_REQUIRE_WAT2WASM") != "" {
			t.Fatal("wat2wasm not installed and WASMKEEP_REQUIRE_WAT2WASM is set (install wabt)")
		}
		t.Skip("wat2wasm not installed")
	}
	out := filepath.Join(t.TempDir(), "kit.wasm")
	if b, err := exec.Command(wat2wasm, "-o", out, "kit.wat").CombinedOutput(); err != nil {
		t.Fatalf("wat2wasm: %v\n%s", err, b)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(Guest, want) {
		t.Fatal("kit.wasm is not what kit.wat compiles to: rebuild it with wat2wasm kit.wat -o kit.wasm")
	}
}
