// Package testguest gives tests the guests they run: the Go guests of this
// repository, built for wasip1 with the Go toolchain once per test process,
// and the hand-written .wasm fixtures in testdata/wasm.
package testguest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Module is the module path whose go.mod marks the repository root.
const Module = "github.com/wasmkeep/alarms"

// Directories of the Go guests, relative to the repository root, for Build.
const (
	// CounterActor is the example actor that counts requests and firings
	// and re-arms itself.
	CounterActor = "examples/counter-actor"
	// Scripted is the test guest driven by its requests.
	Scripted = "testdata/guests/scripted"
)

// Build builds the Go guest in dir (relative to the repository root, such as
// "examples/counter-actor") with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared
//
// and returns the module's bytes (the caller's to keep). Each directory is
// built once per process, however many tests ask, in parallel or not; a
// failed build fails every test that asks for it, with the compiler's output.
func Build(tb testing.TB, dir string) []byte {
	tb.Helper()
	abs := filepath.Join(Root(tb), filepath.FromSlash(dir))
	buildsMu.Lock()
	b := builds[abs]
	if b == nil {
		b = &build{}
		builds[abs] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() { b.wasm, b.err = goBuild(abs) })
	if b.err != nil {
		tb.Fatalf("testguest: build guest %s: %v", dir, b.err)
	}
	return bytes.Clone(b.wasm)
}

// Fixture returns testdata/wasm/<name>.wasm, a fixture compiled from the
// .wat beside it (see testdata/wasm/README.md).
func Fixture(tb testing.TB, name string) []byte {
	tb.Helper()
	path := filepath.Join(Root(tb), "testdata", "wasm", name+".wasm")
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("testguest: fixture %q: %v (rebuild the fixtures with make testdata)", name, err)
	}
	return b
}

// Root returns the repository root: the nearest directory, from the test's
// working directory up, whose go.mod declares the module Module.
func Root(tb testing.TB) string {
	tb.Helper()
	rootOnce.Do(func() { root, rootErr = findRoot() })
	if rootErr != nil {
		tb.Fatalf("testguest: %v", rootErr)
	}
	return root
}

type build struct {
	once sync.Once
	wasm []byte
	err  error
}

var (
	buildsMu sync.Mutex
	builds   = map[string]*build{}

	rootOnce sync.Once
	root     string
	rootErr  error
)

func findRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find the repository root: %w", err)
	}
	for dir := wd; ; {
		if modulePath(filepath.Join(dir, "go.mod")) == Module {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s in %s or above", Module, wd)
		}
		dir = parent
	}
}

// modulePath returns the module path a go.mod declares, or "" when the file
// is missing or has no module line.
func modulePath(gomod string) string {
	f, err := os.Open(gomod)
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if rest, ok := strings.CutPrefix(line, "module"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// goBuild builds the guest in dir into a temporary file and returns its bytes.
func goBuild(dir string) ([]byte, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("the go command is needed to build Go guests: %w", err)
	}
	tmp, err := os.MkdirTemp("", "testguest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "guest.wasm")
	cmd := exec.Command(goBin, "build", "-buildmode=c-shared", "-o", out, ".")
	cmd.Dir = dir
	// The guests are modules of their own; a workspace above them must not
	// change how they build.
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off", "CGO_ENABLED=0")
	if output, err := cmd.CombinedOutput(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil, fmt.Errorf("go build in %s: %v\n%s", dir, err, output)
		}
		return nil, fmt.Errorf("go build in %s: %w", dir, err)
	}
	return os.ReadFile(out)
}
