package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/internal/testguest"
)

// make demo-single's run with the Go counter actor: three actors armed on a
// node, the node closed and a new one opened on the same data directory,
// and alarms fired (run fails when none did, or when an actor's state
// cannot be read back after the restart).
func TestTheDemoRuns(t *testing.T) {
	wasm := filepath.Join(t.TempDir(), "counter-actor.wasm")
	if err := os.WriteFile(wasm, testguest.Build(t, testguest.CounterActor), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(wasm, t.TempDir(), 1500*time.Millisecond, false); err != nil {
		t.Fatal(err)
	}
}
