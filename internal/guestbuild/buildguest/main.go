// Command buildguest builds a Rust or AssemblyScript guest of this
// repository (make runs it; run it from the repository root):
//
//	go run ./internal/guestbuild/buildguest rust examples/counter-actor-rust build/counter-actor-rust.wasm
//	go run ./internal/guestbuild/buildguest as examples/counter-actor-as/assembly/index.ts build/counter-actor-as.wasm
package main

import (
	"fmt"
	"os"

	"github.com/wasmkeep/alarms/internal/guestbuild"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: buildguest rust|as <source> <out.wasm>")
		os.Exit(2)
	}
	var wasm []byte
	var err error
	switch os.Args[1] {
	case "rust":
		wasm, err = guestbuild.Rust(".", os.Args[2])
	case "as":
		wasm, err = guestbuild.AssemblyScript(".", os.Args[2])
	default:
		err = fmt.Errorf("unknown language %q (want rust or as)", os.Args[1])
	}
	if err == nil {
		err = os.WriteFile(os.Args[3], wasm, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "buildguest:", err)
		os.Exit(1)
	}
}
