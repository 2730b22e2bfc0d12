package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Mutation is one entry of the list: a line of the module's source that
// carries a safety rule, a one-line change that breaks the rule, and the
// test or simulator seed that must fail when the change is made.
type Mutation struct {
	// Name identifies the entry (unique in the list).
	Name string
	// Rule says which safety rule the line carries.
	Rule string
	// File is the source file, relative to the module's root.
	File string
	// In, if set, narrows the search for Line to one function: the line
	// whose text starts with In, up to the next line that is "}".
	In string
	// Line is the source text of the line, without its indentation. It must
	// occur exactly once in File (in In, if set).
	Line string
	// Change replaces Line (its indentation kept); empty removes the line.
	Change string
	// Catch is the command that catches the change: "go test ./pkg -run
	// Pattern [flags]", the package before any custom flags.
	Catch string
	// Pos is where the entry starts in the list (file:line).
	Pos string
}

var namePat = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// ParseList reads the list format: entries that each start with a line
// "[name]", followed by "key: value" lines (rule, file, in, line, change,
// catch). Lines starting with '#' and blank lines are ignored.
func ParseList(r io.Reader, source string) ([]Mutation, error) {
	var (
		out  []Mutation
		cur  *Mutation
		seen = map[string]bool{}
		errs []string
	)
	set := map[string]bool{}
	finish := func() {
		if cur == nil {
			return
		}
		for _, k := range []string{"rule", "file", "line", "change", "catch"} {
			if !set[k] {
				errs = append(errs, fmt.Sprintf("%s: entry [%s] has no %q", cur.Pos, cur.Name, k))
			}
		}
		if cur.Catch != "" {
			if _, err := ParseCatch(cur.Catch); err != nil {
				errs = append(errs, fmt.Sprintf("%s: entry [%s]: %v", cur.Pos, cur.Name, err))
			}
		}
		if set["line"] && set["change"] && strings.TrimSpace(cur.Change) == cur.Line {
			errs = append(errs, fmt.Sprintf("%s: entry [%s]: the change is the line itself", cur.Pos, cur.Name))
		}
		out = append(out, *cur)
		cur = nil
	}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		pos := fmt.Sprintf("%s:%d", source, n)
		if strings.HasPrefix(text, "[") && strings.HasSuffix(text, "]") {
			finish()
			name := text[1 : len(text)-1]
			switch {
			case !namePat.MatchString(name):
				errs = append(errs, fmt.Sprintf("%s: bad entry name %q (letters, digits, '.', '_', '-')", pos, name))
			case seen[name]:
				errs = append(errs, fmt.Sprintf("%s: entry [%s] listed twice", pos, name))
			}
			seen[name] = true
			cur = &Mutation{Name: name, Pos: pos}
			set = map[string]bool{}
			continue
		}
		if cur == nil {
			errs = append(errs, fmt.Sprintf("%s: %q before the first [name]", pos, text))
			continue
		}
		key, val, ok := strings.Cut(text, ":")
		key = strings.TrimSpace(key)
		val = strings.TrimSpace(val)
		if !ok {
			errs = append(errs, fmt.Sprintf("%s: want \"key: value\", got %q", pos, text))
			continue
		}
		if set[key] {
			errs = append(errs, fmt.Sprintf("%s: entry [%s] sets %q twice", pos, cur.Name, key))
			continue
		}
		set[key] = true
		switch key {
		case "rule":
			cur.Rule = val
		case "file":
			cur.File = filepath.ToSlash(val)
		case "in":
			cur.In = val
		case "line":
			cur.Line = val
		case "change":
			cur.Change = val
		case "catch":
			cur.Catch = val
		default:
			errs = append(errs, fmt.Sprintf("%s: unknown key %q (rule, file, in, line, change, catch)", pos, key))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	finish()
	if len(errs) > 0 {
		return nil, fmt.Errorf("mutation list:\n  %s", strings.Join(errs, "\n  "))
	}
	return out, nil
}

// ReadList parses the list file at path.
func ReadList(path string) ([]Mutation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseList(f, filepath.Base(path))
}

// Apply returns src with m's change made, or an error naming the entry if
// its line is not found exactly once (in its function, if m.In is set).
func (m Mutation) Apply(src []byte) ([]byte, error) {
	lines := strings.SplitAfter(string(src), "\n")
	lo, hi := 0, len(lines)
	if m.In != "" {
		var starts []int
		for i, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), m.In) {
				starts = append(starts, i)
			}
		}
		if len(starts) != 1 {
			return nil, fmt.Errorf("[%s] %s: %q starts %d lines, want exactly 1", m.Name, m.File, m.In, len(starts))
		}
		lo, hi = starts[0], len(lines)
		for i := lo + 1; i < len(lines); i++ {
			if strings.TrimRight(lines[i], "\r\n") == "}" {
				hi = i + 1
				break
			}
		}
	}
	var at []int
	for i := lo; i < hi; i++ {
		if strings.TrimSpace(lines[i]) == m.Line {
			at = append(at, i)
		}
	}
	where := m.File
	if m.In != "" {
		where += " in " + m.In
	}
	if len(at) != 1 {
		return nil, fmt.Errorf("[%s] %s: the line %q occurs %d times, want exactly 1 (the source changed: update the entry)", m.Name, where, m.Line, len(at))
	}
	i := at[0]
	old := lines[i]
	if m.Change == "" {
		lines[i] = ""
	} else {
		indent := old[:len(old)-len(strings.TrimLeft(old, " \t"))]
		nl := old[len(strings.TrimRight(old, "\r\n")):]
		lines[i] = indent + m.Change + nl
	}
	return []byte(strings.Join(lines, "")), nil
}

// Catcher is a parsed catch command: go test Pkg Args...
type Catcher struct {
	Pkg string
	// Run is the -run pattern ("" if none).
	Run string
	// Args are the arguments after "go test" other than the package.
	Args []string
}

// ParseCatch reads "go test ./pkg [args]", with single or double quotes
// grouping words as a shell does.
func ParseCatch(s string) (Catcher, error) {
	words, err := splitWords(s)
	if err != nil {
		return Catcher{}, err
	}
	if len(words) < 3 || words[0] != "go" || words[1] != "test" {
		return Catcher{}, fmt.Errorf("catch %q: want \"go test ./pkg -run Pattern [flags]\"", s)
	}
	c := Catcher{Pkg: words[2]}
	if !strings.HasPrefix(c.Pkg, "./") && c.Pkg != "." {
		return Catcher{}, fmt.Errorf("catch %q: the package (%q) comes first, as ./path", s, c.Pkg)
	}
	c.Args = words[3:]
	for i, w := range c.Args {
		switch {
		case w == "-run" && i+1 < len(c.Args):
			c.Run = c.Args[i+1]
		case strings.HasPrefix(w, "-run="):
			c.Run = strings.TrimPrefix(w, "-run=")
		}
	}
	if c.Run == "" {
		return Catcher{}, fmt.Errorf("catch %q: name the test with -run", s)
	}
	return c, nil
}

func splitWords(s string) ([]string, error) {
	var (
		out   []string
		cur   strings.Builder
		quote rune
		in    bool
	)
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed quote in %q", s)
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}
