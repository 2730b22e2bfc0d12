// Package guestbuild builds the Rust and AssemblyScript guests of this
// repository from source with their own toolchains: a rustc that has the
// wasm32-wasip1 (or, before Rust 1.78, wasm32-wasi) standard library, and
// the AssemblyScript compiler that npm ci installs in guest-sdk-as.
package guestbuild

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrNoToolchain is wrapped by the errors of Rust and AssemblyScript when
// the language's toolchain is not installed.
var ErrNoToolchain = errors.New("toolchain not installed")

// Directories and files, relative to the repository root.
const (
	RustSDK    = "guest-sdk-rust"
	ASSDK      = "guest-sdk-as"
	ascScript  = "node_modules/assemblyscript/bin/asc.js"
	ascConfig  = "asconfig.json"
	rustSDKSrc = "src/lib.rs"
)

// RustToolchain finds a rustc that can build for WASI preview 1: $RUSTC if
// set, else the first rustc on PATH whose sysroot has the standard library
// of wasm32-wasip1 or wasm32-wasi. It returns the compiler and the target.
func RustToolchain() (rustc, target string, err error) {
	var candidates []string
	if env := os.Getenv("RUSTC"); env != "" {
		candidates = []string{env}
	} else {
		for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
			if dir == "" {
				continue
			}
			p := filepath.Join(dir, "rustc")
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
				candidates = append(candidates, p)
			}
		}
	}
	seen := map[string]bool{}
	for _, c := range candidates {
		out, err := exec.Command(c, "--print", "sysroot").Output()
		if err != nil {
			continue
		}
		sysroot := strings.TrimSpace(string(out))
		if seen[sysroot] {
			continue
		}
		seen[sysroot] = true
		for _, t := range []string{"wasm32-wasip1", "wasm32-wasi"} {
			if fi, err := os.Stat(filepath.Join(sysroot, "lib", "rustlib", t, "lib")); err == nil && fi.IsDir() {
				return c, t, nil
			}
		}
	}
	return "", "", fmt.Errorf("rust: no rustc with the wasm32-wasip1 or wasm32-wasi standard library on PATH "+
		"(Debian: apt-get install rustc libstd-rust-dev-wasm32): %w", ErrNoToolchain)
}

// Rust builds the cdylib crate whose root is <root>/<dir>/src/lib.rs against
// the SDK in <root>/guest-sdk-rust, optimised for size, with a 64 KiB stack
// (the linker's default is 1 MiB, which every instance would allocate), and
// returns the module's bytes. It runs rustc directly (no cargo, so no
// registry).
func Rust(root, dir string) ([]byte, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	rustc, target, err := RustToolchain()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "guestbuild-rust-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	common := []string{"--edition", "2021", "--target", target, "-C", "opt-level=s", "-C", "panic=abort"}
	rlib := filepath.Join(tmp, "libwasmkeep.rlib")
	if err := run(root, rustc, append(common, "--crate-type", "rlib", "--crate-name", "wasmkeep",
		"-o", rlib, filepath.Join(root, RustSDK, rustSDKSrc))...); err != nil {
		return nil, err
	}
	out := filepath.Join(tmp, "guest.wasm")
	if err := run(root, rustc, append(common, "--crate-type", "cdylib", "--crate-name", "guest",
		"-C", "lto", "-C", "strip=symbols", "-C", "link-arg=-zstack-size=65536", "-L", tmp, "--extern", "wasmkeep="+rlib,
		"-o", out, filepath.Join(root, dir, "src", "lib.rs"))...); err != nil {
		return nil, err
	}
	return os.ReadFile(out)
}

// ASCompiler finds node and the AssemblyScript compiler that npm ci
// installed in <root>/guest-sdk-as.
func ASCompiler(root string) (node, asc string, err error) {
	node, err = exec.LookPath("node")
	if err != nil {
		return "", "", fmt.Errorf("assemblyscript: node is not on PATH (Debian: apt-get install nodejs npm, then make guest-tools): %w", ErrNoToolchain)
	}
	asc = filepath.Join(root, ASSDK, ascScript)
	if _, err := os.Stat(asc); err != nil {
		return "", "", fmt.Errorf("assemblyscript: no compiler in %s (make guest-tools, or npm ci there): %w",
			filepath.Join(root, ASSDK), ErrNoToolchain)
	}
	return node, asc, nil
}

// AssemblyScript compiles the entry file <root>/<entry> with the options of
// guest-sdk-as/asconfig.json (among them the transform that gives the
// exports their ABI names) and returns the module's bytes.
func AssemblyScript(root, entry string) ([]byte, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	node, asc, err := ASCompiler(root)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "guestbuild-as-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "guest.wasm")
	sdk := filepath.Join(root, ASSDK)
	if err := run(sdk, node, asc, filepath.Join(root, entry), "--config", filepath.Join(sdk, ascConfig), "-o", out); err != nil {
		return nil, err
	}
	return os.ReadFile(out)
}

func run(dir, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, output.Bytes())
	}
	return nil
}

// CToolchain finds a clang ($CC if set) that can build for wasm32-wasi:
// one that finds wasi-libc's libc.a and the wasm32 compiler-rt builtins.
func CToolchain() (string, error) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "clang"
	}
	path, err := exec.LookPath(cc)
	if err == nil {
		for _, probe := range [][]string{{"-print-file-name=libc.a"}, {"-print-libgcc-file-name"}} {
			out, perr := exec.Command(path, append([]string{"--target=wasm32-wasi"}, probe...)...).Output()
			if _, serr := os.Stat(strings.TrimSpace(string(out))); perr != nil || serr != nil || !filepath.IsAbs(strings.TrimSpace(string(out))) {
				err = fmt.Errorf("%s %s finds nothing", cc, probe[0])
				break
			}
		}
	}
	if err != nil {
		return "", fmt.Errorf("c: no clang that builds for wasm32-wasi: %v (Debian: apt-get install clang wasi-libc libclang-rt-dev-wasm32): %w", err, ErrNoToolchain)
	}
	return path, nil
}

// C builds the C file <root>/<file> as a WASI reactor with abi/wasmkeep.h on
// the include path, and returns the module's bytes.
func C(root, file string) ([]byte, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	cc, err := CToolchain()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "guestbuild-c-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "guest.wasm")
	if err := run(root, cc, "--target=wasm32-wasi", "-mexec-model=reactor", "-O2", "-Wall", "-Werror",
		"-Wl,--strip-all", "-I", filepath.Join(root, "abi"), "-o", out, filepath.Join(root, file)); err != nil {
		return nil, err
	}
	return os.ReadFile(out)
}

// Built is where the Makefile puts an example actor built in lang: base's
// build/<base>.wasm for Go, build/<base>-rust.wasm and build/<base>-as.wasm
// for Rust and AssemblyScript. Any other lang is an error naming it.
func Built(base, lang string) (string, error) {
	switch lang {
	case "go":
		return "build/" + base + ".wasm", nil
	case "rust", "as":
		return "build/" + base + "-" + lang + ".wasm", nil
	}
	return "", fmt.Errorf("-guest %q: want go, rust or as", lang)
}
