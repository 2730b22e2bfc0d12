package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheListMatchesTheSource: every entry of the repository's list finds
// its line exactly once in the source as it is, so an edit that moves or
// rewrites a line the list names fails here, in make test, naming the
// entry, rather than only when make mutate runs.
func TestTheListMatchesTheSource(t *testing.T) {
	list, err := ReadList("mutations.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) < 25 {
		t.Errorf("the list has %d entries; it must keep at least 25", len(list))
	}
	for _, m := range list {
		src, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(m.File)))
		if err != nil {
			t.Errorf("[%s]: %v", m.Name, err)
			continue
		}
		changed, err := m.Apply(src)
		if err != nil {
			t.Error(err)
			continue
		}
		if string(changed) == string(src) {
			t.Errorf("[%s]: the change leaves %s as it was", m.Name, m.File)
		}
	}
}

const sample = `package p

func a() {
	if x {
		return 1
	}
}

func b() {
	if x {
		return 2
	}
}
`

func TestApplyChangesExactlyTheNamedLine(t *testing.T) {
	m := Mutation{Name: "e", File: "p.go", In: "func b(", Line: "if x {", Change: "if !x {"}
	got, err := m.Apply([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(sample, "func b() {\n\tif x {", "func b() {\n\tif !x {", 1)
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}

	m = Mutation{Name: "e", File: "p.go", Line: "return 2", Change: ""}
	got, err = m.Apply([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(sample, "\t\treturn 2\n", "", 1); string(got) != want {
		t.Errorf("an empty change must remove the line; got\n%s", got)
	}
}

func TestApplyRefusesALineNotFoundExactlyOnce(t *testing.T) {
	for _, c := range []struct {
		m    Mutation
		want string
	}{
		{Mutation{Name: "twice", File: "p.go", Line: "if x {", Change: "if y {"}, "occurs 2 times"},
		{Mutation{Name: "gone", File: "p.go", Line: "return 3", Change: "return 4"}, "occurs 0 times"},
		{Mutation{Name: "partial", File: "p.go", Line: "return", Change: "return 4"}, "occurs 0 times"},
		{Mutation{Name: "nofunc", File: "p.go", In: "func c(", Line: "if x {", Change: "if y {"}, `"func c(" starts 0 lines`},
		{Mutation{Name: "outside", File: "p.go", In: "func a(", Line: "return 2", Change: "return 4"}, "occurs 0 times"},
	} {
		_, err := c.m.Apply([]byte(sample))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "["+c.m.Name+"]") {
			t.Errorf("%s: got %v, want an error naming the entry with %q", c.m.Name, err, c.want)
		}
	}
}

func TestParseListRejectsIncompleteEntries(t *testing.T) {
	for _, c := range []struct{ list, want string }{
		{"[a]\nrule: r\nfile: f\nline: l\nchange: c\n", `no "catch"`},
		{"[a]\nrule: r\nfile: f\nline: l\nchange: c\ncatch: go test ./p\n", "name the test with -run"},
		{"[a]\nrule: r\nfile: f\nline: l\nchange: c\ncatch: go test -run X ./p\n", "the package"},
		{"[a]\nrule: r\nfile: f\nline: l\nchange: l\ncatch: go test ./p -run X\n", "the change is the line itself"},
		{"[a]\nrule: r\nfile: f\nline: l\nchange: c\ncatch: go test ./p -run X\nwhy: w\n", `unknown key "why"`},
		{"[a]\nrule: r\nfile: f\nline: l\nchange: c\ncatch: go test ./p -run X\n[a]\nrule: r\nfile: f\nline: l\nchange: c\ncatch: go test ./p -run X\n", "listed twice"},
		{"rule: r\n", "before the first [name]"},
	} {
		_, err := ParseList(strings.NewReader(c.list), "list")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.list, err, c.want)
		}
	}
	l, err := ParseList(strings.NewReader("# c\n[a]\nrule: r\nfile: f\nline: l\nchange:\ncatch: go test ./p -run 'TestX$' -sim.seed=3\n"), "list")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseCatch(l[0].Catch)
	if err != nil || c.Pkg != "./p" || c.Run != "TestX$" || strings.Join(c.Args, " ") != "-run TestX$ -sim.seed=3" || l[0].Change != "" {
		t.Errorf("got %+v, %+v, %v", l[0], c, err)
	}
}

// TestRotateCoversTheListInTurn: consecutive seeds (days) of make
// mutate-short pick different entries and, within ceil(n/k) days, every
// one.
func TestRotateCoversTheListInTurn(t *testing.T) {
	var list []Mutation
	for i := range 11 {
		list = append(list, Mutation{Name: string(rune('a' + i))})
	}
	const k = 3
	seen := map[string]bool{}
	for day := int64(20000); day < 20000+(11+k-1)/k; day++ {
		got := Rotate(list, k, day)
		if len(got) != k {
			t.Fatalf("day %d: %d entries, want %d", day, len(got), k)
		}
		for _, m := range got {
			seen[m.Name] = true
		}
	}
	if len(seen) != len(list) {
		t.Errorf("%d consecutive days picked %d of %d entries", (11+k-1)/k, len(seen), len(list))
	}
	if a, b := Rotate(list, k, 5), Rotate(list, k, 5); a[0].Name != b[0].Name {
		t.Error("the same seed picked different entries")
	}
}
