package main

import (
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// parse runs configure on a new flag set as main does, with env as the
// whole environment.
func parse(t *testing.T, args []string, env map[string]string) (*options, error) {
	t.Helper()
	fs, o := newFlags(flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	err := configure(fs, args, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	return o, err
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "keepnode.toml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A flag wins over its environment variable, which wins over the file,
// which wins over the default; each setting is decided on its own.
func TestConfigPrecedence(t *testing.T) {
	file := writeConfig(t, `
data = "/from/file"
listen = "10.0.0.1:7600"
lease-ttl = "3s"
sweep = "4s"
idle = "5m"
max-open-dbs = 77
durable-commits = true
class = ["counter=/file/counter.wasm", "other=/file/other.wasm"]
`)
	o, err := parse(t, []string{"-config", file, "-sweep", "9s"}, map[string]string{
		"KEEPNODE_LEASE_TTL": "7s",
		"KEEPNODE_SWEEP":     "8s",
		"KEEPNODE_BUCKET":    "from-env",
		"KEEPNODE_IDLE":      "", // empty: unset, the file's value stands
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"data (file)", o.dataDir, "/from/file"},
		{"listen (file)", o.listen, "10.0.0.1:7600"},
		{"lease-ttl (env over file)", o.leaseTTL, 7 * time.Second},
		{"sweep (flag over env and file)", o.sweep, 9 * time.Second},
		{"idle (file; empty env)", o.idle, 5 * time.Minute},
		{"bucket (env)", o.bucketName, "from-env"},
		{"max-open-dbs (file, a number)", o.maxDBs, 77},
		{"durable-commits (file, a boolean)", o.mem.durable, true},
		{"lease-grace (default)", o.leaseGrace, 2 * time.Second},
		{"class (file, a list)", len(o.classes), 2},
		{"class counter", o.classes["counter"], "/file/counter.wasm"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	// A list flag on the command line replaces the file's and the
	// environment's list; in the environment the list is comma-separated.
	o, err = parse(t, []string{"-config", file, "-class", "x=/flag/x.wasm"}, map[string]string{"KEEPNODE_CLASS": "y=/env/y.wasm"})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.classes) != 1 || o.classes["x"] != "/flag/x.wasm" {
		t.Errorf("classes with -class on the command line = %v, want only x", o.classes)
	}
	o, err = parse(t, []string{"-config", file}, map[string]string{"KEEPNODE_CLASS": "y=/env/y.wasm, z=/env/z.wasm"})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.classes) != 2 || o.classes["y"] != "/env/y.wasm" || o.classes["z"] != "/env/z.wasm" {
		t.Errorf("classes from KEEPNODE_CLASS = %v, want y and z", o.classes)
	}

	// KEEPNODE_CONFIG names the file as -config does.
	o, err = parse(t, nil, map[string]string{"KEEPNODE_CONFIG": file})
	if err != nil || o.listen != "10.0.0.1:7600" {
		t.Errorf("file from KEEPNODE_CONFIG: listen %q, %v", o.listen, err)
	}
}

// Every flag has its variable: each, set to a value its flag takes, is
// read.
func TestEveryFlagHasAnEnvironmentVariable(t *testing.T) {
	fs, _ := newFlags(flag.ContinueOnError)
	env := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		v := f.DefValue
		switch {
		case f.Name == "class":
			v = "a=a.wasm"
		case f.Name == configFlag:
			return // tested above
		case f.Name == probeFlag:
			return // command line only (TestProbeIsCommandLineOnly)
		case v == "" || v == "false":
			v = "true"
			if _, isBool := f.Value.(interface{ IsBoolFlag() bool }); !isBool {
				v = "x"
			}
		}
		env[envName(f.Name)] = v
	})
	fs2, _ := newFlags(flag.ContinueOnError)
	if err := configure(fs2, nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	fs2.Visit(func(f *flag.Flag) { seen[f.Name] = true })
	fs2.VisitAll(func(f *flag.Flag) {
		if f.Name != configFlag && f.Name != probeFlag && !seen[f.Name] {
			t.Errorf("-%s was not set from $%s", f.Name, envName(f.Name))
		}
	})
	if envName("lease-ttl") != "KEEPNODE_LEASE_TTL" || envName("metrics-addr") != "KEEPNODE_METRICS_ADDR" {
		t.Errorf("envName: %s, %s", envName("lease-ttl"), envName("metrics-addr"))
	}
}

// A mistake in the file or the environment stops keepnode with an error
// naming the key (or the variable) and the file, before it starts.
func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		name, file string
		env        map[string]string
		want       []string
	}{
		{name: "unknown key", file: "lese-ttl = \"3s\"\n", want: []string{`unknown key "lese-ttl"`}},
		{name: "a flag with its dash", file: "-listen = \"x:1\"\n", want: []string{`unknown key "-listen"`}},
		{name: "config in the config", file: "config = \"other.toml\"\n", want: []string{`unknown key "config"`}},
		{name: "bad duration", file: "lease-ttl = \"ten seconds\"\n", want: []string{`key "lease-ttl"`, `"ten seconds"`}},
		{name: "duration as a number", file: "sweep = 10\n", want: []string{`key "sweep"`, `invalid value "10"`}},
		{name: "a duration as a number says how to write it", file: "lease-ttl = 10\n", want: []string{`key "lease-ttl"`, `write lease-ttl = "10s"`}},
		{name: "bad number", file: "max-open-dbs = \"many\"\n", want: []string{`key "max-open-dbs"`}},
		{name: "array for a single flag", file: "listen = [\"a:1\", \"b:2\"]\n", want: []string{`key "listen"`, "takes one value"}},
		{name: "a table", file: "[lease]\nttl = \"3s\"\n", want: []string{`unknown key "lease"`}},
		{name: "a table under a flag's name", file: "[data]\nx = 1\n", want: []string{`key "data"`, "want a string"}},
		{name: "not TOML", file: "listen = \n", want: []string{"keepnode.toml"}},
		{name: "bad class", file: "class = [\"counter\"]\n", want: []string{`key "class"`, "name=path.wasm"}},
		{name: "bad log level", env: map[string]string{"KEEPNODE_LOG_LEVEL": "loud"}, want: []string{`-log-level "loud"`}},
		{name: "bad value in the environment", env: map[string]string{"KEEPNODE_LEASE_TTL": "soon"}, want: []string{"$KEEPNODE_LEASE_TTL", "-lease-ttl", `"soon"`}},
		{name: "a bad file is an error even when every key is overridden", file: "lease-ttl = \"x\"\n", env: map[string]string{"KEEPNODE_LEASE_TTL": "3s"}, want: []string{`key "lease-ttl"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{}
			var path string
			if c.file != "" {
				path = writeConfig(t, c.file)
				args = append(args, "-config", path)
			}
			_, err := parse(t, args, c.env)
			if err == nil {
				t.Fatalf("no error")
			}
			want := c.want
			if path != "" {
				want = append(want, path)
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
	if _, err := parse(t, []string{"-config", filepath.Join(t.TempDir(), "missing.toml")}, nil); err == nil || !strings.Contains(err.Error(), "missing.toml") {
		t.Errorf("a missing file: %v", err)
	}
}

// The example configuration in deploy/ is one keepnode reads: every key a
// flag, every value one it takes.
func TestExampleConfigParses(t *testing.T) {
	o, err := parse(t, []string{"-config", filepath.Join("..", "..", "deploy", "keepnode.toml")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.dataDir == "" || o.bucketName == "" || len(o.classes) == 0 || o.metrics.addr == "" {
		t.Errorf("the example leaves out what a cluster node needs: data %q, bucket %q, classes %v, metrics %q", o.dataDir, o.bucketName, o.classes, o.metrics.addr)
	}
}

// A KEEPNODE_ variable that names no flag is refused, naming it and the
// variable it most likely meant: a misspelt KEEPNODE_NODEID would
// otherwise leave the node under a random ID. The flags' own variables
// and the tokens' are accepted, and other variables are not looked at.
func TestMisspeltEnvironmentVariables(t *testing.T) {
	fs, _ := newFlags(flag.ContinueOnError)
	if err := checkEnvNames(fs, []string{"KEEPNODE_NODE_ID=n1", "KEEPNODE_LEASE_TTL=3s", "KEEPNODE_TOKEN=x", "KEEPNODE_PEER_TOKEN=y", "KEEPNODE_CONFIG=k.toml", "HOME=/root", "AWS_REGION=x"}); err != nil {
		t.Fatalf("known variables: %v", err)
	}
	for bad, nearest := range map[string]string{
		"KEEPNODE_NODEID=n2":      "$KEEPNODE_NODE_ID",
		"KEEPNODE_LEASE_TLL=3s":   "$KEEPNODE_LEASE_TTL",
		"KEEPNODE_METRICS_ADR=:1": "$KEEPNODE_METRICS_ADDR",
	} {
		err := checkEnvNames(fs, []string{"KEEPNODE_DATA=/d", bad})
		name, _, _ := strings.Cut(bad, "=")
		if err == nil || !strings.Contains(err.Error(), "$"+name+" is not a variable keepnode reads") || !strings.Contains(err.Error(), "did you mean "+nearest+"?") {
			t.Errorf("%s: %v; want an error naming it and %s", bad, err, nearest)
		}
	}
}

// Without -data or -class keepnode cannot start: a usage error, as a bad
// flag is (exit status 2), naming the flag and where else it may come
// from; -version needs neither. So is a value no flag may take.
func TestMissingRequiredSettingsAreUsageErrors(t *testing.T) {
	bin := keepnodeBinary(t)
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"-data", t.TempDir()}, "at least one -class NAME=FILE.wasm is required"},
		{[]string{"-class", "c=c.wasm"}, "-data is required"},
		// Values no flag may take, and combinations that cannot work, are
		// refused before anything starts, the same way.
		{[]string{"-data", t.TempDir(), "-class", "c=c.wasm", "-drain-timeout", "0s"}, "-drain-timeout 0s: must be positive"},
		{[]string{"-data", t.TempDir(), "-class", "c=c.wasm", "-max-instances", "0"}, "-max-instances 0: each must be at least 1"},
		{[]string{"-data", t.TempDir(), "-class", "c=c.wasm", "-pprof"}, "-pprof needs -metrics-addr"},
		{[]string{"-data", t.TempDir(), "-class", "c=c.wasm", "-compile-only", "-cache-dir", "off"}, "-compile-only with -cache-dir off"},
	} {
		cmd := exec.Command(bin, tc.args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.says) {
			t.Errorf("keepnode %v: %v, %q; want exit status 2 saying %q", tc.args, err, out, tc.says)
		}
	}
	if out, err := exec.Command(bin, "-version").CombinedOutput(); err != nil {
		t.Errorf("keepnode -version alone: %v, %q", err, out)
	}
}
