package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tinyModule writes a module with one package, p, whose tests check Max
// fully and Min barely, and returns its directory.
func tinyModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module tiny\n\ngo 1.26\n",
		"p/p.go": `package p

func Max(a, b int) int {
	if a > b {
		return a
	}
	return b
}

func Min(a, b int) int {
	if a < b {
		return a
	}
	return b
}
`,
		"p/p_test.go": `package p

import "testing"

func TestMax(t *testing.T) {
	if Max(1, 2) != 2 || Max(3, 2) != 3 {
		t.Fatal("max")
	}
}

func TestMinWeak(t *testing.T) {
	if Min(1, 1) != 1 {
		t.Fatal("min")
	}
}
`,
	}
	for name, body := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestVerdicts: a change its test catches is caught, one it misses
// survives, one that does not compile and a catcher that fails for want
// of a flag are each reported as such, never as caught; and the file is
// put back after each.
func TestVerdicts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test on a module of its own")
	}
	dir := tinyModule(t)
	orig, err := os.ReadFile(filepath.Join(dir, "p", "p.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		m    Mutation
		want Verdict
	}{
		{Mutation{Name: "caught", File: "p/p.go", Line: "if a > b {", Change: "if a < b {", Catch: "go test ./p -run 'TestMax$'"}, Caught},
		{Mutation{Name: "survives", File: "p/p.go", Line: "if a < b {", Change: "if a > b {", Catch: "go test ./p -run 'TestMinWeak$'"}, Survived},
		{Mutation{Name: "no-build", File: "p/p.go", In: "func Min(", Line: "return b", Change: "return c", Catch: "go test ./p -run 'TestMinWeak$'"}, BuildFailed},
		{Mutation{Name: "bad-flag", File: "p/p.go", In: "func Max(", Line: "return b", Change: "return a", Catch: "go test ./p -run 'TestMax$' -nosuchflag"}, Broken},
	} {
		r := runOne(dir, c.m)
		if r.Verdict != c.want {
			t.Errorf("[%s]: %s, want %s\n%s", c.m.Name, r.Verdict, c.want, r.Tail)
		}
		if c.want == Caught && (len(r.Failed) != 1 || r.Failed[0] != "TestMax") {
			t.Errorf("[%s]: failed tests %v, want [TestMax]", c.m.Name, r.Failed)
		}
		if now, _ := os.ReadFile(filepath.Join(dir, "p", "p.go")); string(now) != string(orig) {
			t.Fatalf("[%s]: p/p.go not put back:\n%s", c.m.Name, now)
		}
	}

	// The baseline: a catcher that runs no test, and one that does not
	// build on the unchanged copy, are refused before any change is made.
	noTest := Mutation{Name: "no-test", File: "p/p.go", Line: "if a > b {", Change: "if a < b {", Catch: "go test ./p -run 'TestNothing$'"}
	if err := runBaseline(dir, []Mutation{noTest}); err == nil || !strings.Contains(err.Error(), "[no-test]") || !strings.Contains(err.Error(), "runs no test") {
		t.Errorf("baseline of a catcher that runs no test: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p", "broken.go"), []byte("package p\n\nvar x = y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ok := Mutation{Name: "ok", File: "p/p.go", Line: "if a > b {", Change: "if a < b {", Catch: "go test ./p -run 'TestMax$'"}
	if err := runBaseline(dir, []Mutation{ok}); err == nil || !strings.Contains(err.Error(), "does not build without any change") {
		t.Errorf("baseline of a package that does not build: %v", err)
	}
}
