package testguest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/wasmkeep/alarms/internal/guestbuild"
)

// The counter actor in each language, relative to the repository root:
// a Rust crate directory and an AssemblyScript entry file.
const (
	CounterActorRust = "examples/counter-actor-rust"
	CounterActorAS   = "examples/counter-actor-as/assembly/index.ts"
)

// Languages the counter actor is written in, for Counter.
var Languages = []string{"go", "rust", "as"}

// RequireAllEnv names the environment variable that, set to 1, turns a
// missing Rust or AssemblyScript toolchain from a skipped test into a failed
// one. CI sets it: it installs both, so what it tests is what is in the repo.
const RequireAllEnv = "WASMKEEP_ALL_GUESTS"

// BuildRust builds the Rust guest crate in dir (such as
// "examples/counter-actor-rust") against guest-sdk-rust, once per process.
// Without a rustc that targets WASI the test is skipped, or fails when
// WASMKEEP_ALL_GUESTS=1.
func BuildRust(tb testing.TB, dir string) []byte {
	tb.Helper()
	return buildOnce(tb, "rust:"+dir, func(root string) ([]byte, error) { return guestbuild.Rust(root, dir) })
}

// BuildAS compiles the AssemblyScript entry file (such as
// "examples/counter-actor-as/assembly/index.ts") with guest-sdk-as's
// compiler and options, once per process. Without node and npm ci's
// node_modules the test is skipped, or fails when WASMKEEP_ALL_GUESTS=1.
func BuildAS(tb testing.TB, entry string) []byte {
	tb.Helper()
	return buildOnce(tb, "as:"+entry, func(root string) ([]byte, error) { return guestbuild.AssemblyScript(root, entry) })
}

// ReminderC is the C example actor, built with clang and wasi-libc.
const ReminderC = "examples/c-actor/reminder.c"

// BuildC builds a C guest file (such as "examples/c-actor/reminder.c") as a
// WASI reactor with abi/wasmkeep.h, once per process. Without clang, wasi-libc
// and the wasm32 builtins the test is skipped, or fails when
// WASMKEEP_ALL_GUESTS=1.
func BuildC(tb testing.TB, file string) []byte {
	tb.Helper()
	return buildOnce(tb, "c:"+file, func(root string) ([]byte, error) { return guestbuild.C(root, file) })
}

// Counter returns the counter actor written in lang ("go", "rust" or "as").
func Counter(tb testing.TB, lang string) []byte {
	tb.Helper()
	switch lang {
	case "go":
		return Build(tb, CounterActor)
	case "rust":
		return BuildRust(tb, CounterActorRust)
	case "as":
		return BuildAS(tb, CounterActorAS)
	}
	tb.Fatalf("testguest: no counter actor in language %q", lang)
	return nil
}

// NeedToolchain skips the test (or fails it, with WASMKEEP_ALL_GUESTS=1)
// when err says a toolchain is missing, and fails it on any other error.
func NeedToolchain(tb testing.TB, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, guestbuild.ErrNoToolchain) && os.Getenv(RequireAllEnv) != "1" {
		tb.Skipf("testguest: %v (set %s=1 to fail instead)", err, RequireAllEnv)
	}
	tb.Fatalf("testguest: %v", err)
}

func buildOnce(tb testing.TB, key string, f func(root string) ([]byte, error)) []byte {
	tb.Helper()
	root := Root(tb)
	key = filepath.Join(root, key)
	buildsMu.Lock()
	b := builds[key]
	if b == nil {
		b = &build{}
		builds[key] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() { b.wasm, b.err = f(root) })
	NeedToolchain(tb, b.err)
	return bytes.Clone(b.wasm)
}
