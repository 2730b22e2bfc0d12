package doccheck

import (
	"bufio"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// A rule covers the commands its pattern matches (the first rule that
// matches a command covers it) and says what runs them:
//
//	ci: TEXT           .ci/run runs TEXT (it must appear there)
//	make: TARGET       a Makefile target CI runs (through .ci/run) runs them;
//	                   the target must be in .ci/run and its recipe must
//	                   hold the command
//	test: PKG TestX    the named test, which make test runs, runs the
//	                   same (or does what they do through the same code)
//	script: PATH       the command is that script, which CI runs
//	here               this test runs them, or checks all of them that
//	                   can be checked without a cluster (the checks each
//	                   program gets, listed in doc.go)
//	manual: REASON     nothing runs them, for the reason given
//
// Whatever its rule, every command also gets its program's checks.
var rules = []struct{ pattern, by string }{
	// The README's two commands, and the checks CI makes.
	{`^make demo$`, "ci: make demo"},
	{`^make test$`, "ci: make test"},
	{`^make deploy-check$`, "ci: make deploy-check"},
	{`^make guest-tools$`, "ci: make guest-tools"},
	{`^make fuzz-short$`, "ci: make fuzz-short"},
	{`^make mutate-short$`, "ci: make mutate-short"},
	{`^make extism-host$`, "ci: make extism-host"},
	{`^\.ci/run$`, "script: .ci/run"},
	{`^make promtool$`, "make: deploy-check"},
	{`^build/promtool check rules deploy/prometheus/alerts\.yml$`, "make: deploy-check"},
	{`^cd deploy/prometheus && \.\./\.\./build/promtool test rules alerts_test\.yml$`, "make: deploy-check"},
	{`^promtool (check rules|test rules|check config)$`, "make: deploy-check"},
	{`^systemd-analyze (verify|security)$`, "make: deploy-check"},
	// The demos in the other languages and the single-node ones: each
	// has a test that runs it (the demos' code, with the Go guest).
	{`^make demo GUEST=(rust|as)$`, "test: ./node TestCounterInEveryLanguage"},
	{`^make demo-single$`, "test: ./cmd/demo-single TestTheDemoRuns"},
	{`^make demo-reminders GUEST=`, "test: ./cmd/demo-reminders TestTheDemoRuns"},
	{`^make guests$`, "test: ./node TestCounterInEveryLanguage"},
	{`^make testdata$`, "test: ./internal/testguest TestEveryWatHasItsWasm"},
	// Long runs: CI runs a short form of each, or the same test with
	// fewer seeds or kills (each target is checked by make -n).
	{`^make mutate$`, "ci: make mutate-short"},                                                        // a rotating part of the list
	{`^make fuzz$`, "ci: make fuzz-short"},                                                            // each target for a count of inputs
	{`^make sim SEEDS=N$`, "test: ./sim TestSim"},                                                     // make test runs it over its default seeds
	{`^make (soak|soak-short|soak SOAKFLAGS=\S+)$`, "test: ./cmd/soak TestShortSoak"},                 // the soak's run and checker, fewer kills
	{`^make upgrade UPGRADE_FROM=\S+$`, "test: ./cmd/soak TestARollingUpgradeAndRollbackLoseNothing"}, // the same run, more actors, from the commit given
	{`^go test \./cmd/soak -run TestARollingUpgradeAndRollbackLoseNothing -v$`, "test: ./cmd/soak TestARollingUpgradeAndRollbackLoseNothing"},
	{`^make (noisy|noisy-short)( NOISYFLAGS=.*)?$`, "ci: make noisy-short"}, // the noisy-neighbour run, shorter phases
	{`^go run \./cmd/noisy\b`, "ci: make noisy-short"},
	{`^make (bench|bench-firings|bench-failover|bench-sleep|bench-million)$`,
		"manual: measurements of minutes to tens of minutes"},
	{`^make test-minio MINIO_STEPS=bucket$`, "ci: make test-minio MINIO_STEPS=bucket"},
	{`^make test-minio$`, "manual: CI runs its conformance step alone; the cluster tests and the soak on MinIO are run by hand"},
	{`^make lint$`, "manual: CI checks gofmt (.ci/run) and go vet (make test), not staticcheck"},
	{`^\.ci/test-minio$`, "manual: make test-minio runs it (CI, its conformance step alone)"},
	// go test and go run as the docs give them: each test, benchmark and
	// flag they name exists (checked here); the tests run in make test.
	{`^go test \./sim -run 'TestSim\$' -sim\.seeds=\d+( -timeout 0)?$`, "test: ./sim TestSim"}, // make test runs it over its default seeds
	{`^go test \./sim -run TestLeaseSim$`, "test: ./sim TestLeaseSim"},
	{`^go test \./node -run TestASIGTERMedNodesAlarmsFireOnTheOthersAtOnce -v$`, "test: ./node TestASIGTERMedNodesAlarmsFireOnTheOthersAtOnce"},
	{`^go test \./node -run TestASIGKILLedNodesAlarmsFireOnTimeOnceItsLeaseExpired -v$`, "test: ./node TestASIGKILLedNodesAlarmsFireOnTimeOnceItsLeaseExpired"},
	{`^go test \./sim -run 'TestLeaseSim/defaults\$' -sim\.leaseseeds=20$`, "test: ./sim TestLeaseSim"},
	{`^go test \./sim -run LeaseSim -v$`, "test: ./sim TestLeaseSim"},
	{`^go test \./sim -run 'TestMutations\$' -v$`, "test: ./sim TestMutations"},
	{`^go test \./sim -run 'TestSim\$' -sim\.seed=N -sim\.trace -v$`, "here"},
	{`^go test \./sim$`, "ci: make test"},
	{`^go test \./internal/mutate$`, "ci: make test"},
	{`^go test \./cmd/soak$`, "ci: make test"},
	{`^go test \./\.\.\.$`, "ci: make test"},
	{`^go test -json -count=1$`, "manual: the flags a mutation's catcher runs with (internal/mutate)"},
	{`^go test \./pkg -run 'Pattern'$`, "manual: the form of a catcher, for any package"},
	{`^go test \./internal/testguest -run SDKHostFree$`, "test: ./internal/testguest TestRustSDKHostFreeTests"},
	{`^go test \./node -run 'CounterInEveryLanguage\|CExample'$`, "test: ./node TestCounterInEveryLanguage"},
	{`^go test \./engine -run DefaultMemoryBudget -v$`, "test: ./engine TestTheDefaultMemoryBudgetHoldsTheDefaultInstances"},
	{`^go test \./engine -run FUSE -v$`, "test: ./engine TestAPowerCutOnFUSELosesNoAcknowledgedEvent"},
	{`^go test \./node -run TestRetryAfterIsTheRemainingFailover$`, "test: ./node TestRetryAfterIsTheRemainingFailover"},
	{`^go test \./cmd/keepnode -run SecondStartReusesTheCompilationCache -v$`, "test: ./cmd/keepnode TestASecondStartReusesTheCompilationCache"},
	{`^go test (\./\S+ )?-run '\^\$' -bench `, "manual: a measurement (the benchmark and its flags are checked here; make bench runs the main ones)"},
	{`^go doc -http `, "manual: serving a package's documentation on the reader's machine"},
	{`^go tool pprof `, "manual: reading a profile a benchmark wrote"},
	{`^go run \./internal/mutate`, "make: mutate-short"},
	{`^go run \./cmd/soak `, "test: ./cmd/soak TestShortSoak"},
	{`^go run \./cmd/demo -help$`, "here"},
	// keepnode and keepctl: their flags and commands are checked here
	// against their -help; these run them.
	{`^(keepnode|keepctl) -help$`, "here"},
	{`^make -n$`, "here"},
	{`^keepnode -version$`, "test: ./cmd/keepnode TestVersionFlag"},
	{`^keepctl -config /etc/keepnode/keepnode\.toml$`, "test: ./cmd/keepctl TestKeepctlTakesTheBucketAndPrefixFromKeepnodesFile"},
	{`^keepnode -compile-only$`, "test: ./cmd/keepnode TestCompileOnlyFillsTheCacheBesideARunningNode"},
	{`^keepctl -version$`, "test: ./cmd/keepctl TestKeepctlHelpVersionAndOutputFlags"},
	{`^keepnode -data \./n1 -listen 127\.0\.0\.1:7601 -bucket wasmkeep -create-bucket `, "test: ./cmd/keepnode TestAMissingBucketIsRefusedUnlessCreateBucket"},
	{`^keepnode -data \./n2 -listen 127\.0\.0\.1:7602 -bucket wasmkeep -class `, "test: ./internal/clusterproc TestNodesServeForwardStopAndKill"},
	{`^keepnode -data \./n1 .*-token-file token -tenant-tokens tenant-tokens -peer-token-file peer-token -tls-cert`, "test: ./internal/clusterproc TestKeepnodeWithTokensAndTLS"},
	{`^KEEPNODE_ADVERTISE=\S+ KEEPNODE_NODE_ID=\S+ keepnode -config `, "test: ./cmd/keepnode TestConfigPrecedence"},
	{`^keepnode -config /etc/keepnode/keepnode\.toml$`, "test: ./cmd/keepnode TestImageBinaryServesOnTheExampleConfig"},
	{`^keepnode -(metrics-addr|durable-commits|max-attempts|alarm-deadline|event-deadline|guest-slots|tenant-guest-slots|workers|tenant-weight|tenant-rate|tenant-burst|tenant-concurrency|instance-memory|max-memory|idempotency-keys|ui|drain-timeout|otlp-endpoint|trace-sample-ratio)\b`, "here"},
	{`^keepctl (alarms list|dead-letters redrive -actor)$`, "here"},
	{`^go test \./node/consoletest -run TestConsoleInABrowser -screenshots$`, "test: ./node/consoletest TestConsoleInABrowser"},
	{`^keepctl -bucket \S+ verify$`, "test: ./cmd/keepctl TestKeepctlVerifyBackfillOnVersitygw"},
	{`^keepctl -bucket wasmkeep backfill$`, "test: ./cmd/keepctl TestKeepctlVerifyBackfillOnVersitygw"},
	{`^keepctl -bucket wasmkeep alarms list `, "test: ./cmd/keepctl TestKeepctlVerifyBackfillOnVersitygw"},
	{`^keepctl -bucket wasmkeep actor inspect `, "test: ./cmd/keepctl TestKeepctlAlarmsFailedOnVersitygw"},
	{`^keepctl -bucket wasmkeep alarms failed `, "test: ./cmd/keepctl TestKeepctlAlarmsFailedOnVersitygw"},
	{`^keepctl -bucket wasmkeep nodes$`, "test: ./cmd/keepctl TestKeepctlNodesExportImportOnVersitygw"},
	{`^keepctl -bucket wasmkeep cluster (version|finalize)$`, "test: ./cmd/keepctl TestKeepctlClusterFinalizeWaitsForEveryLiveNode"},
	{`^keepctl -bucket wasmkeep alarms export `, "test: ./cmd/keepctl TestKeepctlNodesExportImportOnVersitygw"},
	{`^keepctl -node \S+ alarms import `, "test: ./cmd/keepctl TestKeepctlNodesExportImportOnVersitygw"},
	{`^keepctl -node \S+ (-token-file token )?alarm (get|set|clear|fire) `, "test: ./cmd/keepctl TestKeepctlChangesAlarmsThroughANode"},
	{`^keepctl -node \S+ (dead-letters (list|redrive|ack)|alarms list) `, "test: ./cmd/keepctl TestKeepctlActsOnDeadLettersThroughANode"},
	{`^curl http://127\.0\.0\.1:7601/v1/tenants/demo/dead-letters$`, "test: ./node TestDeadLettersAreListedRedrivenAndAcknowledged"},
	{`^curl -X POST -d '\{[^']*\}' http://127\.0\.0\.1:7601/v1/tenants/demo/dead-letters:redrive$`, "test: ./node TestDeadLettersAreListedRedrivenAndAcknowledged"},
	{`^keepctl -bucket wasmkeep -node \S+ alarms delete `, "test: ./cmd/keepctl TestKeepctlChangesAlarmsThroughANode"},
	{`^keepctl (verify|backfill|alarms failed|actor inspect|alarm set|alarm clear|nodes|cluster finalize)$`, "here"}, // a command's name in prose
	{`^keepctl alarm set\|clear\|fire$`, "here"},
	{`^keepctl alarms delete$`, "here"},
	// The HTTP API: each request's route and method are checked here
	// against openapi.json; these tests make the same requests.
	{`^curl -d 'start 5000' 'http://127\.0\.0\.1:760[12]/v1/actors/demo/counter/c1\?kind=exec-durable'$`, "test: ./internal/clusterproc TestNodesServeForwardStopAndKill"},
	{`^curl --cacert ca\.pem -H "Authorization: Bearer \$\(cat token\)" `, "test: ./internal/clusterproc TestKeepnodeWithTokensAndTLS"},
	{`^curl -X (PUT|DELETE) .*/alarm$`, "test: ./node TestAnAlarmSetOverHTTPFiresAtThatTime"},
	{`^curl -X POST .*/alarm:fire$`, "test: ./node TestFireRunsOnAlarmNow"},
	{`^curl -X POST -H 'Idempotency-Key: [!-~]+' --data-binary '[^']*' 'http://127\.0\.0\.1:760[12]/v1/actors/demo/counter/c1\?kind=exec-durable'$`, "test: ./node TestAKeyedRequestRunsOnceOnAnyNode"},
	{`^curl 'http://127\.0\.0\.1:7602/v1/actors/demo/counter/c1/alarm'$`, "test: ./node TestAnAlarmSetOverHTTPFiresAtThatTime"},
	// Guest toolchains.
	{`^rustc --edition 2021 `, "test: ./internal/testguest TestRustRemindersNativeTests"},
	{`^\./reminders-test$`, "test: ./internal/testguest TestRustRemindersNativeTests"},
	{`^npm ci`, "make: guest-tools"},
	// Deployment: no container engine or service manager runs in CI. The
	// image's binaries are built as the Dockerfile builds them and run on
	// its configuration, and the unit is verified by systemd-analyze.
	{`^docker (build|run) `, "manual: no container engine in CI; cmd/keepnode's TestImageBinaryServesOnTheExampleConfig builds and runs the binary the image runs, TestDeployFilesAgree holds the Dockerfile to it and checks that docker build passes VERSION and REVISION"},
	{`^make image$`, "manual: no container engine in CI; the stamp it passes is tested by cmd/keepnode's TestVersionLineFallsBackToTheStamp and node's TestBuildInfoFallsBackToTheStamp"},
	{`^make keepnode$`, "manual: a build of the binaries with the checkout's stamp; cmd/keepnode's TestVersionLineFallsBackToTheStamp and node's TestBuildInfoFallsBackToTheStamp test its use"},
	{`^keepnode -probe( http://127\.0\.0\.1:7600/v1/readyz)?$`, "test: ./cmd/keepnode TestProbeExitsZeroOnlyForAReadyNode"},
	{`^make k8s-check$`, "ci: make deploy-check"},
	{`^docker inspect$`, "manual: no container engine in CI; cmd/keepnode's TestDockerfileHealthcheckRunsTheProbe runs the image's HEALTHCHECK command against a node"},
	{`^kubectl (create secret generic keepnode-(s3|tokens|tls) |apply -k deploy/k8s$)`, "manual: no Kubernetes cluster in CI; make k8s-check (in make deploy-check) renders the set and checks it against keepnode, and every Secret key it uses against these commands"},
	{`^docker compose `, "manual: no container engine in CI; TestDeployFilesAgree holds compose.yaml to keepnode's flags, make deploy-check checks its Prometheus configuration"},
	{`^VERSION=\$\(git describe --tags --always --dirty\) REVISION=\$\(git rev-parse HEAD\) docker compose -f deploy/compose\.yaml up `, "manual: no container engine in CI; cmd/keepnode's TestDeployFilesAgree checks that this command and compose.yaml's args pass the image its VERSION and REVISION, TestDockerfileRefusesABuildWithoutRevision that the build stops without them"},
	{`^CGO_ENABLED=0 go build -trimpath -o /usr/local/bin/keepnode \./cmd/keepnode$`, "test: ./cmd/keepnode TestImageBinaryServesOnTheExampleConfig"},
	{`^GOOS=wasip1 GOARCH=wasm go build -C \S+ -buildmode=c-shared -o /opt/wasmkeep/guests/\S+\.wasm \.$`, "manual: installing the guests on a host; cmd/keepnode's TestSystemdStepsInstallTheGuests holds them to keepnode.toml's classes, and the Dockerfile builds the same (TestDeployFilesAgree)"},
	{`^(useradd|install|systemctl|journalctl) `, "manual: installing the systemd unit on a host; make deploy-check verifies the unit (systemd-analyze verify and security)"},
	{`^export AWS_ENDPOINT_URL=`, "manual: the S3 settings of the reader's own server"},
	{`^openssl rand -hex 32 > token; `, "manual: making secrets (TestKeepnodeWithTokensAndTLS makes its own)"},
	{`^printf 'acme %s\\nglobex %s\\n' `, "manual: making secrets (TestKeepnodeWithTokensAndTLS makes its own)"},
	{`^aws s3 mv --recursive `, "manual: a one-off move of an old release's index with the reader's S3 client"},
	// Mentions of a tool in prose, not commands.
	{`^go (test|install)$`, "manual: the tool's name in prose"},
	{`^keepnode (listening|metrics) on \.\.\.$`, "manual: a log line, not a command"},
	{`^rustc libstd-rust-dev-wasm32 wabt$`, "manual: Debian packages' names in prose (.ci/run installs them)"},
}

// programs are the first words that make inline code a command (with
// arguments after them).
var programs = []string{"make", "keepctl", "keepnode", "go", "promtool", "curl", "docker", "systemd-analyze",
	"npm", "rustc", "wat2wasm", "aws", "openssl", "systemctl", ".ci/run", ".ci/test-minio"}

type command struct {
	file string
	line int
	text string
}

func (c command) String() string { return fmt.Sprintf("%s:%d: %s", c.file, c.line, c.text) }

func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r, "go.mod")); err != nil {
		t.Fatal(err)
	}
	return r
}

var (
	fenceRe  = regexp.MustCompile("^\\s*```\\s*(\\w*)")
	inlineRe = regexp.MustCompile("`([^`]+)`") // a span may go on to the next line
)

// docCommands reads the commands of README.md and docs/*.md.
func docCommands(t *testing.T, dir string) []command {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "docs", "*.md"))
	files = append([]string{filepath.Join(dir, "README.md")}, files...)
	var cmds []command
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, f)
		cmds = append(cmds, parseCommands(t, rel, string(b))...)
	}
	return cmds
}

func parseCommands(t *testing.T, file, text string) []command {
	var cmds []command
	lines := strings.Split(text, "\n")
	inFence, shell := false, false
	pending, pendingLine := "", 0
	prose := make([]string, len(lines)) // the lines outside the blocks
	for i, l := range lines {
		if m := fenceRe.FindStringSubmatch(l); m != nil {
			if !inFence {
				inFence = true
				shell = slices.Contains([]string{"sh", "bash", "shell", "console"}, m[1])
				if m[1] == "" && i+1 < len(lines) && isCommand(lines[i+1]) {
					t.Errorf("%s:%d: a block of commands without a language: mark it ```sh so its commands are checked", file, i+1)
				}
			} else {
				inFence = false
			}
			continue
		}
		if inFence {
			if !shell {
				continue
			}
			s := strings.TrimPrefix(strings.TrimSpace(l), "$ ")
			if pending == "" {
				if s == "" || strings.HasPrefix(s, "#") {
					continue
				}
				pendingLine = i + 1
			}
			if cont, ok := strings.CutSuffix(s, "\\"); ok {
				pending += strings.TrimSpace(cont) + " "
				continue
			}
			pending += dropComment(s)
			cmds = append(cmds, command{file, pendingLine, strings.TrimSpace(pending)})
			pending = ""
			continue
		}
		prose[i] = l
	}
	all := strings.Join(prose, "\n")
	for _, m := range inlineRe.FindAllStringSubmatchIndex(all, -1) {
		s := strings.Join(strings.Fields(strings.ReplaceAll(all[m[2]:m[3]], `\|`, "|")), " ")
		if isCommand(s) {
			cmds = append(cmds, command{file, strings.Count(all[:m[0]], "\n") + 1, s})
		}
	}
	return cmds
}

// isCommand: s starts with a program's name and gives it arguments (or
// is a script run by its path).
func isCommand(s string) bool {
	f := strings.Fields(s)
	if len(f) == 0 {
		return false
	}
	if f[0] == ".ci/run" || f[0] == ".ci/test-minio" {
		return true
	}
	return len(f) > 1 && slices.Contains(programs, f[0])
}

// dropComment removes a trailing shell comment (# after a space, outside
// quotes).
func dropComment(s string) string {
	q := rune(0)
	for i, r := range s {
		switch {
		case q != 0:
			if r == q {
				q = 0
			}
		case r == '\'' || r == '"':
			q = r
		case r == '#' && i > 0 && s[i-1] == ' ':
			return strings.TrimSpace(s[:i])
		}
	}
	return s
}

// words splits a command as a shell would, well enough for the docs'
// commands: quotes are removed, a redirection ends the words.
func words(s string) []string {
	var out []string
	var cur strings.Builder
	q, in := rune(0), false
	for _, r := range s {
		switch {
		case q != 0:
			if r == q {
				q = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			q, in = r, true
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
	if in {
		out = append(out, cur.String())
	}
	for i, w := range out {
		if w == ">" || w == "<" || w == "|" || w == ";" || strings.HasPrefix(w, ">") {
			return out[:i]
		}
	}
	return out
}

func TestEveryDocCommandIsRun(t *testing.T) {
	dir := root(t)
	cmds := docCommands(t, dir)
	if len(cmds) < 50 {
		t.Fatalf("found %d commands in the docs; the reader is broken", len(cmds))
	}
	ci, err := os.ReadFile(filepath.Join(dir, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	mk := makeTargets(t, dir)
	recipes := map[string]string{} // make -n -B TARGET: what the target runs
	used := make([]bool, len(rules))
	res := make([]*regexp.Regexp, len(rules))
	for i, r := range rules {
		res[i] = regexp.MustCompile(r.pattern)
		kind, arg, _ := strings.Cut(r.by, ":")
		arg = strings.TrimSpace(arg)
		switch kind {
		case "ci":
			if !strings.Contains(string(ci), arg) {
				t.Errorf("rule %q: .ci/run does not run %q", r.pattern, arg)
			}
		case "make":
			if !strings.Contains(string(ci), "make "+arg) {
				t.Errorf("rule %q: .ci/run does not run make %s", r.pattern, arg)
			}
			if _, ok := mk[arg]; !ok {
				t.Errorf("rule %q: the Makefile has no target %s", r.pattern, arg)
			}
		case "test":
			pkg, name, _ := strings.Cut(arg, " ")
			if !hasFunc(t, filepath.Join(dir, pkg), name, true) {
				t.Errorf("rule %q: no func %s in %s", r.pattern, name, pkg)
			}
		case "script":
			if st, err := os.Stat(filepath.Join(dir, arg)); err != nil || st.Mode()&0o111 == 0 {
				t.Errorf("rule %q: %s is not an executable script", r.pattern, arg)
			}
		case "here":
		case "manual":
			if arg == "" {
				t.Errorf("rule %q: manual without a reason", r.pattern)
			}
		default:
			t.Errorf("rule %q: unknown kind %q", r.pattern, kind)
		}
	}
	c := newChecker(t, dir)
	for _, cmd := range cmds {
		matched := -1
		for i, re := range res {
			if re.MatchString(cmd.text) {
				matched = i
				break
			}
		}
		if matched < 0 {
			t.Errorf("%s\n\tno rule says what runs this command: add one to the rules of internal/doccheck (a test or CI script that runs it, or why nothing does)", cmd)
			continue
		}
		used[matched] = true
		t.Logf("%s\n\t%s", cmd, rules[matched].by) // go test -v: the inventory
		if kind, arg, _ := strings.Cut(rules[matched].by, ":"); kind == "make" {
			target := strings.TrimSpace(arg)
			if _, ok := recipes[target]; !ok {
				cmd := exec.Command("make", "-n", "-B", "-s", target)
				cmd.Dir = dir
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("make -n -B %s: %v\n%s", target, err, out)
				}
				recipes[target] = string(out)
			}
			if p := programOf(cmd.text); !strings.Contains(recipes[target], p) {
				t.Errorf("%s\n\tmake %s does not run %s", cmd, target, p)
			}
		}
		if err := c.check(cmd.text); err != nil {
			t.Errorf("%s\n\t%v", cmd, err)
		}
	}
	for i, r := range rules {
		if !used[i] {
			t.Errorf("rule %q matches no command of the docs any more: remove it", r.pattern)
		}
	}
}

// programOf is the program a command runs, as a recipe would name it
// (for go, the subcommand and package too).
func programOf(s string) string {
	w := words(s)
	if len(w) >= 3 && w[0] == "cd" && w[2] == "&&" {
		w = w[3:]
	}
	if len(w) == 0 {
		return s
	}
	if w[0] == "go" && len(w) >= 3 {
		return strings.Join(w[:3], " ")
	}
	return w[0]
}

// makeTargets reads the Makefile's targets and their recipes.
func makeTargets(t *testing.T, dir string) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	targets := map[string]string{}
	cur := ""
	target := regexp.MustCompile(`^([a-zA-Z0-9_./-]+):([^=]|$)`)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if m := target.FindStringSubmatch(l); m != nil {
			cur = m[1]
			targets[cur] += ""
			continue
		}
		if strings.HasPrefix(l, "\t") && cur != "" {
			targets[cur] += l + "\n"
		} else if strings.TrimSpace(l) != "" && !strings.HasPrefix(l, "#") {
			cur = ""
		}
	}
	return targets
}

// hasFunc reports whether the package in dir has a func (in its test
// files if test) whose name matches name exactly.
func hasFunc(t *testing.T, dir, name string, test bool) bool {
	t.Helper()
	return len(funcs(t, dir, test, regexp.MustCompile("^"+regexp.QuoteMeta(name)+"$"))) > 0
}

// funcs lists the funcs of the package in dir (of its _test.go files if
// test, else of the others) whose names re matches.
func funcs(t *testing.T, dir string, test bool, re *regexp.Regexp) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	fset := token.NewFileSet()
	var out []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") != test {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatalf("parsing %s: %v", name, err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && re.MatchString(fd.Name.Name) {
				out = append(out, fd.Name.Name)
			}
		}
	}
	return out
}

// sources is the text of the package's Go files (its tests' too if test).
func sources(t *testing.T, dir string, test bool) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	var b strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") && !test {
			continue
		}
		s, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(s)
	}
	return b.String()
}

// checker runs the checks of each program.
type checker struct {
	t   *testing.T
	dir string
	bin string

	keepnodeFlags map[string]bool
	keepctlFlags  map[string]bool            // the global ones
	keepctlCmds   map[string]map[string]bool // command: its flags
	routes        map[string][]*regexp.Regexp
}

// bin holds keepnode and keepctl, built once for the tests by TestMain.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "doccheck-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	code := func() int {
		defer os.RemoveAll(dir)
		for _, name := range []string{"keepnode", "keepctl"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "./cmd/"+name)
			cmd.Dir = filepath.Join("..", "..")
			if out, err := cmd.CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "go build ./cmd/%s: %v\n%s", name, err, out)
				return 1
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

func newChecker(t *testing.T, dir string) *checker {
	c := &checker{t: t, dir: dir, bin: bin}
	c.keepnodeFlags = helpFlags(c.help("keepnode", "-help"))
	top := c.help("keepctl", "-help")
	c.keepctlFlags = helpFlags(top)
	c.keepctlCmds = map[string]map[string]bool{}
	cmdRe := regexp.MustCompile(`(?m)^  ([a-z][a-z-]*(?: [a-z]+)?)(?: [A-Z\[-]|$)`)
	for _, m := range cmdRe.FindAllStringSubmatch(top, -1) {
		args := append(strings.Fields(m[1]), "-help")
		c.keepctlCmds[m[1]] = helpFlags(c.help("keepctl", args...))
	}
	if len(c.keepnodeFlags) < 20 || len(c.keepctlFlags) < 4 || len(c.keepctlCmds) < 10 {
		t.Fatalf("read %d keepnode flags, %d keepctl flags and %d keepctl commands from their -help", len(c.keepnodeFlags), len(c.keepctlFlags), len(c.keepctlCmds))
	}
	var api struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "node", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &api); err != nil {
		t.Fatal(err)
	}
	c.routes = map[string][]*regexp.Regexp{}
	param := regexp.MustCompile(`\\\{[a-z_]+\\\}`)
	for p, ops := range api.Paths {
		re := regexp.MustCompile("^" + param.ReplaceAllString(regexp.QuoteMeta(p), `[^/]+`) + "$")
		for m := range ops {
			c.routes[strings.ToUpper(m)] = append(c.routes[strings.ToUpper(m)], re)
		}
	}
	return c
}

// help runs a program's -help, which must succeed.
func (c *checker) help(name string, args ...string) string {
	out, err := exec.Command(filepath.Join(c.bin, name), args...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

var flagLine = regexp.MustCompile(`(?m)^  -([a-z0-9.-]+)`)

func helpFlags(help string) map[string]bool {
	_, flags, _ := strings.Cut(help, "Flags:")
	m := map[string]bool{"help": true, "h": true}
	for _, f := range flagLine.FindAllStringSubmatch(flags, -1) {
		m[f[1]] = true
	}
	return m
}

// flagName is the name of a flag word (-name or -name=value), or "" for a
// word that is not a flag.
func flagName(w string) string {
	if len(w) < 2 || w[0] != '-' || w == "--" || (w[1] >= '0' && w[1] <= '9') {
		return ""
	}
	name, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
	return name
}

func (c *checker) check(text string) error {
	w := words(text)
	// Leading VAR=value words: keepnode's are its flags.
	for len(w) > 0 && regexp.MustCompile(`^[A-Z_]+=`).MatchString(w[0]) {
		if v, ok := strings.CutPrefix(strings.SplitN(w[0], "=", 2)[0], "KEEPNODE_"); ok {
			if f := strings.ReplaceAll(strings.ToLower(v), "_", "-"); !c.keepnodeFlags[f] {
				return fmt.Errorf("%s names -%s, which keepnode -help does not list", w[0], f)
			}
		}
		w = w[1:]
	}
	if len(w) >= 3 && w[0] == "cd" && w[2] == "&&" {
		w = w[3:]
	}
	if len(w) == 0 {
		return nil
	}
	switch w[0] {
	case "make":
		return c.checkMake(w[1:])
	case "keepnode":
		return c.checkKeepnode(w[1:])
	case "keepctl":
		return c.checkKeepctl(w[1:])
	case "go":
		if len(w) > 1 && w[1] == "test" {
			return c.checkGoTest(w[2:])
		}
		if len(w) > 1 && w[1] == "run" {
			return c.checkGoRun(w[2:])
		}
		if len(w) > 1 && w[1] == "build" {
			return c.checkPackage(w[len(w)-1])
		}
	case "curl":
		return c.checkCurl(w[1:])
	}
	return nil
}

// checkMake runs make -n on the target with its variables (A|B|C: each;
// an upper-case placeholder value: 1).
func (c *checker) checkMake(args []string) error {
	runs := [][]string{nil}
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			if regexp.MustCompile(`^[A-Z]+$`).MatchString(v) {
				v = "1"
			}
			var next [][]string
			for _, alt := range strings.Split(v, "|") {
				for _, r := range runs {
					next = append(next, append(slices.Clone(r), k+"="+alt))
				}
			}
			runs = next
			continue
		}
		for i := range runs {
			runs[i] = append(runs[i], a)
		}
	}
	for _, r := range runs {
		cmd := exec.Command("make", append([]string{"-n", "-s"}, r...)...)
		cmd.Dir = c.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("make -n %s: %v\n%s", strings.Join(r, " "), err, out)
		}
	}
	return nil
}

func (c *checker) checkKeepnode(args []string) error {
	for _, a := range args {
		if f := flagName(a); f != "" && !c.keepnodeFlags[f] {
			return fmt.Errorf("keepnode -help lists no flag -%s", f)
		}
	}
	return nil
}

// checkKeepctl checks the global flags, the command and its flags against
// keepctl's -help and the command's.
func (c *checker) checkKeepctl(args []string) error {
	i := 0
	for ; i < len(args); i++ {
		f := flagName(args[i])
		if f == "" {
			break
		}
		if !c.keepctlFlags[f] {
			return fmt.Errorf("keepctl -help lists no flag -%s", f)
		}
		if f != "version" && f != "help" && f != "h" && !strings.Contains(args[i], "=") {
			i++ // its value
		}
	}
	rest := args[i:]
	if len(rest) == 0 {
		return nil
	}
	var flags map[string]bool
	for _, n := range []int{2, 1} {
		if len(rest) >= n {
			if fl, ok := c.keepctlCmds[strings.Join(rest[:n], " ")]; ok {
				flags, rest = fl, rest[n:]
				break
			}
		}
	}
	if flags == nil {
		if strings.Contains(rest[0]+" "+strings.Join(rest[1:], " "), "|") {
			rest = strings.Fields(strings.ReplaceAll(strings.Join(rest, " "), "|", " "))
			for _, sub := range rest[1:] {
				if _, ok := c.keepctlCmds[rest[0]+" "+sub]; !ok {
					return fmt.Errorf("keepctl -help lists no command %q", rest[0]+" "+sub)
				}
			}
			return nil
		}
		return fmt.Errorf("keepctl -help lists no command %q", strings.Join(rest, " "))
	}
	for _, a := range rest {
		if f := flagName(a); f != "" && !flags[f] {
			return fmt.Errorf("keepctl's command -help lists no flag -%s", f)
		}
	}
	return nil
}

// goTestFlags are the go test flags the docs use.
var goTestFlags = map[string]bool{"run": true, "bench": true, "benchtime": true, "count": true, "timeout": true,
	"v": true, "json": true, "list": true, "fuzz": true, "fuzztime": true, "args": true, "cpuprofile": true}

// checkGoTest checks that the package exists, that -run and -bench match
// a test or benchmark of it, and that its other flags are defined there.
func (c *checker) checkGoTest(args []string) error {
	pkg := "."
	type flag struct{ name, val string }
	var flags []flag
	for i := 0; i < len(args); i++ {
		f := flagName(args[i])
		if f == "" {
			if args[i] == "." || strings.HasPrefix(args[i], "./") {
				pkg = args[i]
			}
			continue
		}
		val := ""
		if _, v, ok := strings.Cut(args[i], "="); ok {
			val = v
		} else if f != "v" && f != "json" && f != "args" && i+1 < len(args) && flagName(args[i+1]) == "" {
			val = args[i+1]
			i++
		}
		flags = append(flags, flag{f, val})
	}
	if pkg == "./..." || pkg == "./pkg" {
		return nil
	}
	if err := c.checkPackage(pkg); err != nil {
		return err
	}
	dir := filepath.Join(c.dir, pkg)
	src := ""
	for _, fl := range flags {
		switch f, val := fl.name, fl.val; {
		case f == "run" || f == "bench":
			if val == "^$" || val == "Pattern" {
				continue
			}
			prefix := map[string]string{"run": "Test", "bench": "Benchmark"}[f]
			re, err := regexp.Compile(splitTop(val))
			if err != nil {
				return fmt.Errorf("-%s %q: %v", f, val, err)
			}
			var hits []string
			for _, n := range funcs(c.t, dir, true, re) {
				if strings.HasPrefix(n, prefix) {
					hits = append(hits, n)
				}
			}
			if len(hits) == 0 {
				return fmt.Errorf("-%s %q matches no %s func of %s", f, val, prefix, pkg)
			}
		case goTestFlags[f]:
		default:
			if src == "" {
				src = sources(c.t, dir, true)
			}
			if !strings.Contains(src, `"`+f+`"`) {
				return fmt.Errorf("-%s is not a flag %s defines", f, pkg)
			}
		}
	}
	return nil
}

// splitTop is the part of a -run or -bench pattern that matches the
// top-level names (before the first / outside brackets and parentheses).
func splitTop(p string) string {
	depth := 0
	for i, r := range p {
		switch r {
		case '(', '[':
			depth++
		case ')', ']':
			depth--
		case '/':
			if depth == 0 {
				return p[:i]
			}
		}
	}
	return p
}

// checkGoRun checks that the program exists and defines each flag.
func (c *checker) checkGoRun(args []string) error {
	if len(args) == 0 {
		return nil
	}
	pkg := args[0]
	if err := c.checkPackage(pkg); err != nil {
		return err
	}
	src := sources(c.t, filepath.Join(c.dir, pkg), false)
	for _, a := range args[1:] {
		if f := flagName(a); f != "" && f != "help" && !strings.Contains(src, `"`+f+`"`) {
			return fmt.Errorf("%s defines no flag -%s", pkg, f)
		}
	}
	if len(args) == 2 && args[1] == "-help" {
		// The program's usage: it must print it and exit 0.
		cmd := exec.Command("go", "run", pkg, "-help")
		cmd.Dir = c.dir
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "Usage") {
			return fmt.Errorf("go run %s -help: %v\n%s", pkg, err, out)
		}
	}
	return nil
}

func (c *checker) checkPackage(pkg string) error {
	if st, err := os.Stat(filepath.Join(c.dir, pkg)); err != nil || !st.IsDir() {
		return fmt.Errorf("no package %s", pkg)
	}
	return nil
}

// checkCurl checks the request's method and path against openapi.json.
func (c *checker) checkCurl(args []string) error {
	method, url := "", ""
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-X" && i+1 < len(args):
			method = args[i+1]
			i++
		case a == "-d" || a == "-H" || a == "--cacert":
			if a == "-d" && method == "" {
				method = "POST"
			}
			i++
		case strings.HasPrefix(a, "http://") || strings.HasPrefix(a, "https://"):
			url = a
		}
	}
	if method == "" {
		method = "GET"
	}
	_, path, ok := strings.Cut(strings.SplitN(strings.SplitN(url, "://", 2)[1], "?", 2)[0], "/")
	if !ok {
		return fmt.Errorf("no path in %q", url)
	}
	for _, re := range c.routes[method] {
		if re.MatchString("/" + path) {
			return nil
		}
	}
	return fmt.Errorf("openapi.json has no %s /%s", method, path)
}

// Each check catches the command it is there for: a wrong flag, command,
// target, test, benchmark or route each fails, and the right one passes.
func TestTheChecksCatchWrongCommands(t *testing.T) {
	c := newChecker(t, root(t))
	for _, tc := range []struct{ good, bad string }{
		{"make deploy-check", "make deploy-checks"},
		{"make demo-reminders GUEST=go|rust|as", "make demo-reminder GUEST=go|rust|as"},
		{"keepnode -data ./n1 -listen 127.0.0.1:7601 -bucket b -class counter=c.wasm", "keepnode -data ./n1 -lisen 127.0.0.1:7601"},
		{"KEEPNODE_NODE_ID=n2 keepnode -config k.toml", "KEEPNODE_NODEID=n2 keepnode -config k.toml"},
		{"keepctl -bucket b verify -parallel 4", "keepctl -bucket b verify -paralel 4"},
		{"keepctl -bucket b alarms list -tenant demo", "keepctl -bucket b alarms lst -tenant demo"},
		{"keepctl -node http://n:1 alarm set -json demo/c/x +5m", "keepctl -nod http://n:1 alarm set demo/c/x +5m"},
		{"keepctl alarm set|clear|fire", "keepctl alarm set|clear|stop"},
		{"go test ./sim -run 'TestSim$' -sim.seeds=20", "go test ./sim -run 'TestSimm$'"},
		{"go test ./sim -run 'TestSim$' -sim.seeds=20", "go test ./sim -run 'TestSim$' -sim.sedes=20"},
		{"go test ./node -run '^$' -bench 'ReplicatedFirings(MemoryServer)?/actors-(1|200)$' -benchtime 2000x", "go test ./node -run '^$' -bench 'ReplicatedFyrings/actors-1$'"},
		{"go test -run '^$' -bench ClusterCost -benchtime 1x .", "go test -run '^$' -bench ClusterCost -benchtime 1x ./nodes"},
		{"go run ./cmd/soak -kills 100 -seed 100", "go run ./cmd/soak -kill 100"},
		{"curl -X POST http://127.0.0.1:7602/v1/actors/demo/counter/c1/alarm:fire", "curl -X PATCH http://127.0.0.1:7602/v1/actors/demo/counter/c1/alarm"},
		{"curl -d 'start 5000' 'http://127.0.0.1:7602/v1/actors/demo/counter/c1?kind=exec-durable'", "curl -d 'start 5000' 'http://127.0.0.1:7602/v1/actor/demo/counter/c1'"},
	} {
		if err := c.check(tc.good); err != nil {
			t.Errorf("%s: %v", tc.good, err)
		}
		if err := c.check(tc.bad); err == nil {
			t.Errorf("%s: no error", tc.bad)
		}
	}
}

// Every code block of README.md and docs/*.md is closed, by a line that is
// the fence alone: a fence with text after it, or none at the end, turns
// the prose after it into code on GitHub.
func TestDocCodeBlocksClose(t *testing.T) {
	dir := root(t)
	files, _ := filepath.Glob(filepath.Join(dir, "docs", "*.md"))
	files = append([]string{filepath.Join(dir, "README.md")}, files...)
	opening := regexp.MustCompile("^\\s*```[A-Za-z0-9_+-]*$")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, f)
		open := 0 // the line of the open block's fence
		for i, l := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "```") {
				continue
			}
			switch {
			case open == 0 && !opening.MatchString(l):
				t.Errorf("%s:%d: %q: a fence with text after it", rel, i+1, l)
			case open == 0:
				open = i + 1
			case strings.TrimSpace(l) != "```":
				t.Errorf("%s:%d: %q closes the block of line %d with text after the fence: put the text on a line of its own", rel, i+1, l, open)
				open = 0
			default:
				open = 0
			}
		}
		if open != 0 {
			t.Errorf("%s:%d: a code block never closed", rel, open)
		}
	}
}

// Every picture of docs/img is shown by a doc, and every picture a doc
// shows is there; each view the console's browser test takes a screenshot
// of (go test ./node/consoletest -run TestConsoleInABrowser -screenshots
// writes them) is among them, so a view's picture is neither missing nor
// left unshown.
func TestEveryPictureIsShown(t *testing.T) {
	dir := root(t)
	files, _ := filepath.Glob(filepath.Join(dir, "docs", "*.md"))
	files = append([]string{filepath.Join(dir, "README.md")}, files...)
	shown := map[string]bool{} // docs/img/NAME
	image := regexp.MustCompile(`!\[[^\]]*\]\(([^)\s]+)\)`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, f)
		for _, m := range image.FindAllStringSubmatch(string(b), -1) {
			if strings.Contains(m[1], "://") {
				continue
			}
			p := filepath.Join(filepath.Dir(rel), m[1])
			if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
				t.Errorf("%s shows %s, which is not there: %v", rel, m[1], err)
			}
			shown[filepath.ToSlash(p)] = true
		}
	}
	pics, _ := filepath.Glob(filepath.Join(dir, "docs", "img", "*"))
	for _, p := range pics {
		if rel := "docs/img/" + filepath.Base(p); !shown[rel] {
			t.Errorf("%s is shown by no doc: show it where it belongs, or delete it", rel)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "node", "consoletest", "browser_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	shots := regexp.MustCompile(`\bshot\("([a-z0-9-]+)"\)`).FindAllStringSubmatch(string(b), -1)
	if len(shots) < 5 {
		t.Fatalf("found %d screenshots in node/consoletest/browser_test.go (shot(\"NAME\")): this test reads it wrongly", len(shots))
	}
	for _, m := range shots {
		if rel := "docs/img/console-" + m[1] + ".png"; !shown[rel] {
			t.Errorf("the console's browser test takes a screenshot of %s, which no doc shows as %s (go test ./node/consoletest -run TestConsoleInABrowser -screenshots writes it)", m[1], rel)
		}
	}
}

// make demo says what it builds, and that a first build takes minutes,
// before the first of its builds: they print little for minutes the
// first time, and a silent terminal reads as a hang.
func TestMakeDemoSaysWhatItBuildsFirst(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not found")
	}
	// --no-print-directory: under another make (make test) a sub-make
	// prints the directory it enters first.
	cmd := exec.Command("make", "--no-print-directory", "-n", "-B", "demo")
	cmd.Dir = root(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n -B demo: %v\n%s", err, out)
	}
	var says []string
	for l := range strings.Lines(string(out)) {
		if !strings.HasPrefix(l, "echo ") {
			break
		}
		says = append(says, l)
	}
	text := strings.Join(says, "")
	for _, want := range []string{"counter actor", "versitygw", "keepnode", "minutes"} {
		if !strings.Contains(text, want) {
			t.Errorf("make demo says %q before its first build, which does not name %q; make -n -B demo:\n%s", text, want, out)
		}
	}
}
