package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// jsonLog reads a log file whose every line must be a JSON object, and
// returns the messages in order.
func jsonLog(t *testing.T, path string) (msgs []string, lines []map[string]any) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		var v map[string]any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Errorf("line %d of keepnode's output is not JSON: %q", n, sc.Text())
			continue
		}
		msg, _ := v["@message"].(string)
		msgs = append(msgs, msg)
		lines = append(lines, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return msgs, lines
}

// With -log-json, every line keepnode writes, on standard output and
// standard error, from its start to its shutdown, is a JSON object: the
// start-up lines too. At DEBUG each firing has its line; the summary of
// the firings is an INFO line.
func TestLogJSONIsOnlyJSON(t *testing.T) {
	ctx := testContext(t)
	srv := s3test.Start(t)
	cfg := nodeConfig(t, procS3(srv))
	nd, err := clusterproc.StartNode(ctx, cfg, "json", "-log-json", "-log-level", "debug", "-log-summary", "300ms",
		"-metrics-addr", "127.0.0.1:0", "-sweep", "300ms")
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Kill()
	if nd.NodeID == "" || nd.MetricsURL == "" {
		t.Fatalf("the start-up lines as JSON were not read: node %q, metrics %q", nd.NodeID, nd.MetricsURL)
	}
	var due [8]byte
	binary.LittleEndian.PutUint64(due[:], uint64(time.Now().Add(300*time.Millisecond).UnixMilli()))
	if _, err := nd.Client().ExecDurable(ctx, abi.ActorID{Tenant: "t", Class: "oneshot", Name: "a"}, due[:]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		b, _ := os.ReadFile(nd.LogPath)
		if strings.Contains(string(b), `"alarms in the last 300ms"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no summary of the firing in a minute; log:\n%s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := nd.Stop(); err != nil {
		t.Fatal(err)
	}
	msgs, lines := jsonLog(t, nd.LogPath)
	joined := strings.Join(msgs, "\n")
	for _, want := range []string{"keepnode metrics on http://", "keepnode listening on http://", "alarm fired", "alarms in the last 300ms", "shutting down"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no line %q among the %d of the log:\n%s", want, len(msgs), joined)
		}
	}
	for _, l := range lines {
		if strings.HasPrefix(l["@message"].(string), "keepnode listening on ") && (l["url"] != nd.URL || l["node"] != nd.NodeID) {
			t.Errorf("the ready line's fields %v, want url %s and node %s", l, nd.URL, nd.NodeID)
		}
	}
}

// A configuration keepnode cannot use is one JSON line with -log-json,
// naming the cause, and exit status 2.
func TestLogJSONBadConfiguration(t *testing.T) {
	bin := keepnodeBinary(t)
	bad := filepath.Join(t.TempDir(), "bad.toml")
	if err := os.WriteFile(bad, []byte("lease-tll = \"3s\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-log-json", "-config", bad)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("keepnode with a bad config: %v, want exit status 2; output %q", err, out)
	}
	p := filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	msgs, lines := jsonLog(t, p)
	if len(msgs) != 1 || msgs[0] != "bad configuration" || !strings.Contains(lines[0]["error"].(string), `unknown key "lease-tll"`) {
		t.Fatalf("output %q, want one JSON line naming the unknown key", out)
	}
}

// With -log-json on the command line (before or after the bad flag) or in
// the environment, a flag the parser refuses is one JSON line naming it,
// with exit status 2, not the parser's text and usage; without it, the
// parser's text is unchanged; -help prints the usage and exits 0 either way.
func TestLogJSONFlagErrors(t *testing.T) {
	bin := keepnodeBinary(t)
	for _, tc := range []struct {
		name string
		args []string
		env  string
		says string
	}{
		{"an unknown flag after -log-json", []string{"-log-json", "-bogus"}, "", "flag provided but not defined: -bogus"},
		{"an unknown flag before -log-json", []string{"-bogus", "-log-json"}, "", "flag provided but not defined: -bogus"},
		{"a bad value, KEEPNODE_LOG_JSON", []string{"-lease-ttl", "soon"}, "KEEPNODE_LOG_JSON=true", `invalid value "soon" for flag -lease-ttl`},
	} {
		cmd := exec.Command(bin, tc.args...)
		cmd.Env = append(os.Environ(), tc.env)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Fatalf("%s: %v, want exit status 2; output %q", tc.name, err, out)
		}
		p := filepath.Join(t.TempDir(), "out")
		if err := os.WriteFile(p, out, 0o644); err != nil {
			t.Fatal(err)
		}
		msgs, lines := jsonLog(t, p)
		if len(msgs) != 1 || msgs[0] != "bad configuration" || !strings.Contains(lines[0]["error"].(string), tc.says) {
			t.Errorf("%s: output %q, want one JSON line saying %q", tc.name, out, tc.says)
		}
	}
	out, err := exec.Command(bin, "-bogus").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.HasPrefix(string(out), "flag provided but not defined: -bogus\nUsage: keepnode") {
		t.Errorf("without -log-json: %v, %q, want the parser's text and exit status 2", err, out)
	}
	for _, args := range [][]string{{"-help"}, {"-log-json", "-help"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "Usage: keepnode") {
			t.Errorf("keepnode %v: %v, %q, want the usage and exit status 0", args, err, out)
		}
	}
}
