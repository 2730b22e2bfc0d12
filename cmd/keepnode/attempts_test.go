package main

import (
	"strings"
	"testing"
)

// -max-attempts takes N for every class and CLASS=N for one, and refuses
// what it cannot use: a negative or non-numeric count, a missing class
// name, a class this node does not serve.
func TestMaxAttemptsFlag(t *testing.T) {
	var f attemptsFlag
	if err := f.Set("6,payments=20, batch=0"); err != nil {
		t.Fatal(err)
	}
	if f.all != 6 || f.classes["payments"] != 20 || f.classes["batch"] != 0 || len(f.classes) != 2 {
		t.Fatalf("parsed %+v", f)
	}
	if err := f.Set("mail=3"); err != nil || f.all != 6 || f.classes["mail"] != 3 {
		t.Fatalf("a second -max-attempts adds to the first: %+v, %v", f, err)
	}
	served := classFlags{"payments": "p.wasm", "batch": "b.wasm", "mail": "m.wasm"}
	if opts, err := f.options(served); err != nil || len(opts) != 4 {
		t.Fatalf("options: %d, %v", len(opts), err)
	}
	if _, err := f.options(classFlags{"payments": "p.wasm"}); err == nil || !strings.Contains(err.Error(), "no -class batch") {
		t.Fatalf("a limit for a class not served: %v", err)
	}
	for _, bad := range []string{"-1", "x", "=3", "a=-2", "a=b", ""} {
		var g attemptsFlag
		if err := g.Set(bad); err == nil {
			t.Errorf("-max-attempts %q accepted", bad)
		}
	}
}
