package alarms_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// lightPackages must build without the AWS SDK: a host that embeds the
// plugin, its host module or the alarm index over its own bucket should not
// compile and link an S3 client it does not use. The S3 client lives in
// bucket/s3, which only the hosts that replicate to S3 import.
var lightPackages = []string{
	"github.com/wasmkeep/alarms",
	"github.com/wasmkeep/alarms/hostmod",
	"github.com/wasmkeep/alarms/alarmindex",
}

func TestLightPackagesDoNotImportTheAWSSDK(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if errors.Is(err, exec.ErrNotFound) {
		t.Skip("the go command is not on PATH")
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range lightPackages {
		t.Run(pkg, func(t *testing.T) {
			// Each line: a dependency (in dependency order, the package
			// last), then the packages it imports.
			cmd := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", pkg)
			cmd.Dir = moduleRoot(t, goBin)
			out, err := cmd.Output()
			if err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
				}
				t.Fatalf("go list -deps %s: %v", pkg, err)
			}
			imports := map[string][]string{}
			aws := 0
			for line := range strings.Lines(string(out)) {
				f := strings.Fields(line)
				if len(f) == 0 {
					continue
				}
				imports[f[0]] = f[1:]
				if isAWS(f[0]) {
					aws++
				}
			}
			if _, ok := imports[pkg]; !ok {
				t.Fatalf("go list -deps %s did not list the package itself:\n%s", pkg, out)
			}
			if aws > 0 {
				chain := awsChain(imports, pkg)
				t.Errorf("%s depends on the AWS SDK (%d of its %d packages): the first AWS package found is %s, imported through %s",
					pkg, aws, len(imports), chain[len(chain)-1], strings.Join(chain, " -> "))
			}
		})
	}
}

func isAWS(importPath string) bool { return strings.Contains(importPath, "github.com/aws/") }

// moduleRoot is the directory of the module's go.mod.
func moduleRoot(t *testing.T, goBin string) string {
	t.Helper()
	out, err := exec.Command(goBin, "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		t.Fatal("go list -m: no module directory")
	}
	return dir
}

// awsChain returns a shortest chain of imports from pkg to an AWS package,
// both included, through the import graph imports.
func awsChain(imports map[string][]string, pkg string) []string {
	from := map[string]string{pkg: ""}
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if isAWS(p) {
			var chain []string
			for ; p != ""; p = from[p] {
				chain = append([]string{p}, chain...)
			}
			return chain
		}
		for _, q := range imports[p] {
			if _, seen := from[q]; !seen {
				from[q] = p
				queue = append(queue, q)
			}
		}
	}
	return []string{pkg, "(no import chain found)"}
}
