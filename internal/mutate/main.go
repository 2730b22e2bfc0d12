// Command mutate checks that every line of the module that carries a safety
// rule is caught when that line alone is broken (make mutate).
//
// The list (mutations.txt next to this file) names, for each entry, a file,
// the source text of one line, a one-line change, and the command that must
// fail once the change is made (a named test, or a simulator seed). mutate
// copies the module into a scratch directory, runs each catcher once on the
// unchanged copy (it must pass), then, one entry at a time, makes the
// change, runs the catcher and puts the line back. It fails if a change
// survives (its catcher passes), if a changed copy does not build, or if a
// catcher fails on the unchanged copy or runs no test.
//
//	go run ./internal/mutate                  # every entry
//	go run ./internal/mutate -short 5         # 5 entries, rotating by the day
//	go run ./internal/mutate -short 5 -seed 7 # the same 5 as on day 7
//	go run ./internal/mutate -run 'R3|fence'  # the entries whose name matches
package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

func main() {
	var (
		list     = flag.String("list", "", "the mutation list (default internal/mutate/mutations.txt in the module)")
		run      = flag.String("run", "", "only the entries whose name matches this regexp")
		short    = flag.Int("short", 0, "run only this many entries, chosen by -seed")
		seed     = flag.Int64("seed", -1, "with -short: which entries (default: the day, in days since 1970 UTC, or $MUTATE_SEED)")
		rev      = flag.String("rev", "", "copy this git revision rather than the working tree (tracked files and untracked ones not ignored)")
		keep     = flag.Bool("keep", false, "keep the scratch copy")
		baseline = flag.Bool("baseline", true, "first run each catcher on the unchanged copy (it must pass)")
		check    = flag.Bool("check", false, "only check that every entry's line is found exactly once; run nothing")
		probe    = flag.Bool("probe", false, "run the catcher's whole package (-short, no -run) on each change and list the tests that fail: to find a catcher")
	)
	flag.Parse()
	probeMode = *probe
	if err := mainErr(*list, *run, *short, *seed, *rev, *keep, *baseline && !*probe, *check); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(1)
	}
}

var probeMode bool

func mainErr(listPath, run string, short int, seed int64, rev string, keep, baseline, checkOnly bool) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	if listPath == "" {
		listPath = filepath.Join(root, "internal", "mutate", "mutations.txt")
	}
	all, err := ReadList(listPath)
	if err != nil {
		return err
	}
	sel := all
	if run != "" {
		re, err := regexp.Compile(run)
		if err != nil {
			return fmt.Errorf("-run: %w", err)
		}
		sel = slices.DeleteFunc(slices.Clone(all), func(m Mutation) bool { return !re.MatchString(m.Name) })
		if len(sel) == 0 {
			return fmt.Errorf("-run %q matches no entry", run)
		}
	}
	if short > 0 {
		if seed < 0 {
			seed = time.Now().UTC().Unix() / 86400
			if s := os.Getenv("MUTATE_SEED"); s != "" {
				if _, err := fmt.Sscan(s, &seed); err != nil {
					return fmt.Errorf("MUTATE_SEED=%q: %v", s, err)
				}
			}
		}
		picked := Rotate(sel, short, seed)
		var names []string
		for _, m := range picked {
			names = append(names, m.Name)
		}
		fmt.Printf("mutate: %d of %d entries for seed %d: %s\nmutate: the same run: go run ./internal/mutate -short %d -seed %d\n",
			len(picked), len(sel), seed, strings.Join(names, ", "), short, seed)
		sel = picked
	}

	if checkOnly {
		if err := matchAll(root, sel); err != nil {
			return err
		}
		fmt.Printf("mutate: all %d entries found\n", len(sel))
		return nil
	}

	scratch, err := os.MkdirTemp("", "mutate-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("mutate: scratch copy in", scratch)
	} else {
		defer os.RemoveAll(scratch)
	}
	if err := copyModule(root, scratch, rev); err != nil {
		return fmt.Errorf("copying the module: %w", err)
	}
	// Every entry must match its source before anything runs.
	if err := matchAll(scratch, sel); err != nil {
		return err
	}

	start := time.Now()
	if baseline {
		if err := runBaseline(scratch, sel); err != nil {
			return err
		}
	}
	var results []Result
	for i, m := range sel {
		fmt.Printf("mutate: [%d/%d] %s: %s\n", i+1, len(sel), m.Name, m.Catch)
		r := runOne(scratch, m)
		results = append(results, r)
		fmt.Printf("mutate:   %s in %v%s\n", r.Verdict, r.Took.Round(100*time.Millisecond), r.note())
	}
	return summary(results, time.Since(start))
}

// Rotate returns k entries of sel, consecutive from an offset the seed
// picks (seed*k modulo len(sel)), wrapping: consecutive seeds (days) walk
// the whole list in len(sel)/k steps.
func Rotate(sel []Mutation, k int, seed int64) []Mutation {
	n := len(sel)
	if k >= n {
		return sel
	}
	off := int((seed % int64(n)) * int64(k) % int64(n))
	if off < 0 {
		off += n
	}
	out := make([]Mutation, 0, k)
	for i := range k {
		out = append(out, sel[(off+i)%n])
	}
	return out
}

// Verdict is what running an entry's catcher on the changed copy showed.
type Verdict string

// Verdicts.
const (
	Caught      Verdict = "caught"
	Survived    Verdict = "SURVIVED"
	BuildFailed Verdict = "BUILD FAILED"
	Broken      Verdict = "CATCHER ERROR"
)

// Result is one entry's run.
type Result struct {
	Mutation
	Verdict Verdict
	Took    time.Duration
	// Failed are the tests that failed.
	Failed []string
	// Tail is the end of the output, for what was not caught.
	Tail string
}

func (r Result) note() string {
	switch r.Verdict {
	case Caught:
		return " by " + strings.Join(r.Failed, ", ")
	case Survived:
		return ": the catcher passed with the line changed"
	default:
		return ":\n" + indent(r.Tail)
	}
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

func runOne(scratch string, m Mutation) Result {
	r := Result{Mutation: m}
	path := filepath.Join(scratch, m.File)
	orig, err := os.ReadFile(path)
	if err != nil {
		r.Verdict, r.Tail = Broken, err.Error()
		return r
	}
	changed, err := m.Apply(orig)
	if err != nil {
		r.Verdict, r.Tail = Broken, err.Error()
		return r
	}
	if err := os.WriteFile(path, changed, 0o644); err != nil {
		r.Verdict, r.Tail = Broken, err.Error()
		return r
	}
	defer func() {
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			panic(fmt.Sprintf("mutate: restoring %s: %v", path, err))
		}
	}()
	c, _ := ParseCatch(m.Catch)
	args := c.Args
	if probeMode {
		args = []string{"-short"}
	}
	t0 := time.Now()
	out := goTest(scratch, c.Pkg, args)
	r.Took = time.Since(t0)
	r.Failed = out.failedTests
	switch {
	case out.buildFailed:
		r.Verdict, r.Tail = BuildFailed, out.tail()
	case len(out.failedTests) > 0:
		r.Verdict = Caught
	case out.err == nil:
		r.Verdict = Survived
	default:
		// The package failed with no test failing (TestMain, a flag the
		// package does not define, the go command).
		r.Verdict, r.Tail = Broken, out.tail()
	}
	return r
}

// runBaseline runs every catcher on the unchanged copy: each must pass and
// run at least one test. Catchers of one package without custom flags run
// together, their -run patterns joined.
func runBaseline(scratch string, sel []Mutation) error {
	type group struct {
		pkg     string
		args    []string
		pattern []string
		names   []string
	}
	var groups []*group
	byKey := map[string]*group{}
	for _, m := range sel {
		c, _ := ParseCatch(m.Catch)
		rest := withoutRun(c.Args)
		if strings.Contains(c.Run, "/") || len(rest) > 0 {
			groups = append(groups, &group{pkg: c.Pkg, args: c.Args, names: []string{m.Name}})
			continue
		}
		g := byKey[c.Pkg]
		if g == nil {
			g = &group{pkg: c.Pkg}
			byKey[c.Pkg] = g
			groups = append(groups, g)
		}
		if !slices.Contains(g.pattern, c.Run) {
			g.pattern = append(g.pattern, c.Run)
		}
		g.names = append(g.names, m.Name)
	}
	var errs []string
	for _, g := range groups {
		args := g.args
		if args == nil {
			args = []string{"-run", "(" + strings.Join(g.pattern, ")|(") + ")"}
		}
		fmt.Printf("mutate: baseline: go test %s %s\n", g.pkg, strings.Join(args, " "))
		t0 := time.Now()
		out := goTest(scratch, g.pkg, args)
		fmt.Printf("mutate:   %d tests passed in %v\n", len(out.passedTests), time.Since(t0).Round(100*time.Millisecond))
		switch {
		case out.buildFailed:
			errs = append(errs, fmt.Sprintf("the catcher of %s does not build without any change (nothing to do with the entries):\n%s",
				strings.Join(g.names, ", "), indent(out.tail())))
			continue
		case out.err != nil || len(out.failedTests) > 0:
			errs = append(errs, fmt.Sprintf("the catcher of %s fails without any change (%s):\n%s",
				strings.Join(g.names, ", "), strings.Join(out.failedTests, ", "), indent(out.tail())))
			continue
		}
		// Each entry's pattern must have run a test.
		for _, m := range sel {
			if !slices.Contains(g.names, m.Name) {
				continue
			}
			c, _ := ParseCatch(m.Catch)
			top, _, _ := strings.Cut(c.Run, "/")
			re, err := regexp.Compile(top)
			if err != nil {
				errs = append(errs, fmt.Sprintf("[%s]: -run %q: %v", m.Name, c.Run, err))
				continue
			}
			if !slices.ContainsFunc(out.passedTests, func(t string) bool {
				t, _, _ = strings.Cut(t, "/")
				return re.MatchString(t)
			}) {
				errs = append(errs, fmt.Sprintf("[%s]: %s runs no test", m.Name, m.Catch))
			}
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "\n"))
	}
	return nil
}

func withoutRun(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "-run":
			i++
		case strings.HasPrefix(args[i], "-run="):
		default:
			out = append(out, args[i])
		}
	}
	return out
}

type testOutput struct {
	err            error
	buildFailed    bool
	failedTests    []string // top-level tests
	failedSubtests int
	passedTests    []string
	lines          []string
}

func (o testOutput) tail() string {
	l := o.lines
	if len(l) > 40 {
		l = l[len(l)-40:]
	}
	s := strings.Join(l, "")
	if o.err != nil {
		s += o.err.Error() + "\n"
	}
	return s
}

// goTest runs go test -json -count=1 pkg args in dir (with a 10-minute
// timeout unless args set one) and reads its events.
func goTest(dir, pkg string, args []string) testOutput {
	full := []string{"test", "-json", "-count=1"}
	if !slices.ContainsFunc(args, func(a string) bool { return a == "-timeout" || strings.HasPrefix(a, "-timeout=") }) {
		full = append(full, "-timeout=10m")
	}
	full = append(full, pkg)
	full = append(full, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goCmd(), full...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return testOutput{err: err}
	}
	if err := cmd.Start(); err != nil {
		return testOutput{err: err}
	}
	var o testOutput
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev struct {
			Action, Test, Output, FailedBuild string
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			o.lines = append(o.lines, sc.Text()+"\n")
			continue
		}
		switch ev.Action {
		case "output", "build-output":
			o.lines = append(o.lines, ev.Output)
		case "build-fail":
			o.buildFailed = true
		case "fail":
			switch {
			case ev.FailedBuild != "":
				o.buildFailed = true
			case ev.Test != "" && !strings.Contains(ev.Test, "/"):
				o.failedTests = append(o.failedTests, ev.Test)
			case ev.Test != "":
				o.failedSubtests++
			}
		case "pass":
			if ev.Test != "" {
				o.passedTests = append(o.passedTests, ev.Test)
			}
		}
	}
	o.err = cmd.Wait()
	if s := stderr.String(); s != "" {
		o.lines = append(o.lines, s)
		if strings.Contains(s, "[build failed]") || strings.Contains(s, "[setup failed]") {
			o.buildFailed = true
		}
	}
	return o
}

func goCmd() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

func summary(results []Result, took time.Duration) error {
	fmt.Printf("\nmutate: %d entries in %v\n", len(results), took.Round(time.Second))
	var bad int
	for _, r := range results {
		fmt.Printf("  %-13s %6.1fs  %s\n", r.Verdict, r.Took.Seconds(), r.Name)
		if r.Verdict != Caught {
			bad++
		}
	}
	if bad > 0 {
		var b strings.Builder
		for _, r := range results {
			if r.Verdict == Caught {
				continue
			}
			fmt.Fprintf(&b, "\n[%s] %s (%s): %s -> %s\n  %s\n  %s%s\n", r.Name, r.File, r.Rule, r.Line, r.Change, r.Catch, r.Verdict, r.note())
		}
		return fmt.Errorf("%d of %d entries not caught:%s", bad, len(results), b.String())
	}
	fmt.Println("mutate: every entry caught")
	return nil
}

// moduleRoot is the directory of the go.mod the go command uses here.
func moduleRoot() (string, error) {
	out, err := exec.Command(goCmd(), "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// copyModule copies the module's files under root into dst: at rev, or
// the working tree's files that git tracks or would (untracked ones not
// ignored, such as a new test), as they are on disk.
func copyModule(root, dst, rev string) error {
	if rev != "" {
		cmd := exec.Command("git", "archive", "--format=tar", rev)
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("git archive %s: %v: %s", rev, err, stderr.String())
		}
		return untar(bytes.NewReader(out), dst)
	}
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		src := filepath.Join(root, name)
		fi, err := os.Lstat(src)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree
		}
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(name)), 0o755); err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, filepath.Join(dst, name)); err != nil {
				return err
			}
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, fi.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

func untar(r io.Reader, dst string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Join(dst, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(name, filepath.Clean(dst)+string(os.PathSeparator)) {
			return fmt.Errorf("git archive: %q leaves the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			if err := os.WriteFile(name, b, os.FileMode(h.Mode).Perm()); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, name); err != nil {
				return err
			}
		}
	}
}

// matchAll checks that every entry's line is found, exactly once, in its
// file under dir; the error lists each that is not.
func matchAll(dir string, sel []Mutation) error {
	var errs []string
	for _, m := range sel {
		src, err := os.ReadFile(filepath.Join(dir, m.File))
		if err == nil {
			_, err = m.Apply(src)
		}
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "\n"))
	}
	return nil
}
