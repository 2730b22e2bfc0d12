package main

// The container image cannot be built here without a container engine, so
// these tests hold what it runs: the binaries deploy/Dockerfile builds,
// built the same way, start on the example configuration against
// versitygw and serve; and the deployment files agree with each other and
// with keepnode's flags.

import (
	"context"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// deployFile reads a file of deploy/.
func deployFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The version and commit the image tests build with, as the image's
// build arguments VERSION and REVISION give them.
const (
	imageVersion  = "v9.8.7-image-test"
	imageRevision = "0123456789abcdef0123456789abcdef01234567"
)

// imageLdflags is the -ldflags value of deploy/Dockerfile's build (its
// stamp= line), with version and revision for its arguments VERSION and
// REVISION.
func imageLdflags(t *testing.T, version, revision string) string {
	t.Helper()
	m := regexp.MustCompile(`stamp="([^"]*)"`).FindStringSubmatch(deployFile(t, "Dockerfile"))
	if m == nil {
		t.Fatal(`deploy/Dockerfile has no stamp="..." line: the test cannot build as the image does`)
	}
	return strings.NewReplacer("${VERSION}", version, "${REVISION}", revision).Replace(m[1])
}

// staticBuild builds pkg as deploy/Dockerfile does, stamped as the image
// is with imageVersion and imageRevision (imageLdflags).
func staticBuild(t *testing.T, dir, pkg string) string {
	t.Helper()
	return stampedBuild(t, dir, pkg, imageVersion, imageRevision)
}

// stampedBuild builds pkg as deploy/Dockerfile does, with the build
// arguments VERSION and REVISION given.
func stampedBuild(t *testing.T, dir, pkg, version, revision string) string {
	t.Helper()
	root, err := clusterproc.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags="+imageLdflags(t, version, revision), "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build %s: %v\n%s", pkg, err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s is linked dynamically (it has an interpreter): the distroless static image could not run it", pkg)
		}
	}
	return out
}

// The static keepnode of the image starts on deploy/keepnode.toml, with
// the flags a test needs in front of it (data directory, listen address,
// bucket, class: a flag wins over the file), joins the cluster on
// versitygw and answers /v1/readyz as ready; keepctl runs.
func TestImageBinaryServesOnTheExampleConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries")
	}
	ctx := testContext(t)
	dir := t.TempDir()
	keepnode := staticBuild(t, dir, "./cmd/keepnode")
	keepctl := staticBuild(t, dir, "./cmd/keepctl")
	// Each binary says the version and commit the image was built with.
	for _, bin := range []string{keepnode, keepctl} {
		out, err := exec.Command(bin, "-version").CombinedOutput()
		name := filepath.Base(bin)
		if err != nil || !strings.HasPrefix(string(out), name+" "+imageVersion) || !strings.Contains(string(out), imageRevision[:12]) {
			t.Errorf("%s -version of the image's build: %q, %v; want it to name %s and commit %s", name, out, err, imageVersion, imageRevision[:12])
		}
	}

	srv := s3test.Start(t)
	cfg := nodeConfig(t, procS3(srv))
	cfg.Binary = keepnode
	example, err := filepath.Abs(filepath.Join("..", "..", "deploy", "keepnode.toml"))
	if err != nil {
		t.Fatal(err)
	}
	nd, err := clusterproc.StartNode(ctx, cfg, "image", "-config", example, "-metrics-addr", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Kill()
	if nd.NodeID == "" || nd.MetricsURL == "" {
		t.Fatalf("node %q, metrics %q: the example's cluster and metrics settings were not applied", nd.NodeID, nd.MetricsURL)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if r, err := nd.Client().Ready(ctx); err == nil && r.Ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready in a minute; log:\n%s", tailFile(nd.LogPath))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, body := get(ctx, t, nd.MetricsURL); code != http.StatusOK || !strings.Contains(string(body), "wasmkeep_build_info{") ||
		!strings.Contains(string(body), `revision="`+imageRevision+`"`) || !strings.Contains(string(body), `version="`+imageVersion+`"`) {
		t.Errorf("metrics: %d, without wasmkeep_build_info naming the image's version and revision", code)
	}
	// keepctl nodes shows the node's build, from its lease.
	kc := exec.CommandContext(ctx, keepctl, "-bucket", cfg.S3.Bucket, "nodes")
	kc.Env = append(os.Environ(), cfg.S3.Env()...)
	if out, err := kc.CombinedOutput(); err != nil || !strings.Contains(string(out), imageVersion) || !strings.Contains(string(out), imageRevision[:12]) {
		t.Errorf("keepctl nodes: %v\n%s\nwant the node's line to name %s and %s", err, out, imageVersion, imageRevision[:12])
	}
	if err := nd.Stop(); err != nil {
		t.Fatal(err)
	}
	// The example logs JSON: every line of the run is one.
	jsonLog(t, nd.LogPath)

	// A build from a tree with no git passes REVISION=unknown, on purpose
	// (deploy/Dockerfile refuses an empty one), and VERSION not at all:
	// the binary says "unknown" where it names its commit, in -version, in
	// wasmkeep_build_info and in its lease, rather than nothing.
	t.Run("REVISION=unknown", func(t *testing.T) {
		unknown := stampedBuild(t, t.TempDir(), "./cmd/keepnode", "", "unknown")
		if out, err := exec.Command(unknown, "-version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "keepnode (devel) commit unknown ") {
			t.Errorf("keepnode -version of a build with REVISION=unknown and no VERSION: %q, %v; want \"keepnode (devel) commit unknown go...\"", out, err)
		}
		cfg := cfg
		cfg.Binary = unknown
		nd, err := clusterproc.StartNode(ctx, cfg, "unknown", "-config", example, "-metrics-addr", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer nd.Kill()
		if code, body := get(ctx, t, nd.MetricsURL); code != http.StatusOK || !regexp.MustCompile(`wasmkeep_build_info\{[^}]*revision="unknown"`).Match(body) ||
			!regexp.MustCompile(`wasmkeep_build_info\{[^}]*version="\(devel\)"`).Match(body) {
			t.Errorf("metrics: %d, without wasmkeep_build_info{revision=\"unknown\",version=\"(devel)\"}", code)
		}
		kc := exec.CommandContext(ctx, keepctl, "-bucket", cfg.S3.Bucket, "nodes")
		kc.Env = append(os.Environ(), cfg.S3.Env()...)
		if out, err := kc.CombinedOutput(); err != nil || !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(nd.NodeID)+`\s.*\(devel\)\s+unknown\s`).Match(out) {
			t.Errorf("keepctl nodes: %v\n%s\nwant the line of node %s to name (devel) and commit unknown", err, out, nd.NodeID)
		}
		if err := nd.Stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// get GETs url (the metrics endpoint, which is not the API's).
func get(ctx context.Context, t *testing.T, url string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func tailFile(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// The deployment files agree: the image builds both commands static and
// runs them as a non-root user on the configuration it copies; each guest
// the example configuration names is one the image builds; the data
// directory is the image's volume and the unit's one writable path; the
// metrics port is the one exposed and scraped; each KEEPNODE_ variable
// the compose file and the unit set is a flag's; and every way the docs
// give to build the image stamps it with VERSION and REVISION
// (checkImageBuildsAreStamped).
func TestDeployFilesAgree(t *testing.T) {
	docker := deployFile(t, "Dockerfile")
	compose := deployFile(t, "compose.yaml")
	unit := deployFile(t, "keepnode.service")
	prom := deployFile(t, "prometheus/prometheus.yml")
	o, err := parse(t, []string{"-config", filepath.Join("..", "..", "deploy", "keepnode.toml")}, nil)
	if err != nil {
		t.Fatal(err)
	}

	for _, want := range []string{"CGO_ENABLED=0", "-o /out/keepnode ./cmd/keepnode", "-o /out/keepctl ./cmd/keepctl",
		"COPY deploy/keepnode.toml /etc/keepnode/keepnode.toml", `CMD ["-config", "/etc/keepnode/keepnode.toml"]`,
		"VOLUME " + o.dataDir, "--chown=65532:65532 /out/data " + o.dataDir, "USER 65532:65532"} {
		if !strings.Contains(docker, want) {
			t.Errorf("deploy/Dockerfile lacks %q", want)
		}
	}
	built := map[string]bool{}
	for _, m := range regexp.MustCompile(`-o /out/guests/(\S+\.wasm)`).FindAllStringSubmatch(docker, -1) {
		built["/opt/wasmkeep/guests/"+m[1]] = true
	}
	if !strings.Contains(docker, "COPY --from=build /out/guests/ /opt/wasmkeep/guests/") {
		t.Error("deploy/Dockerfile does not copy the guests to /opt/wasmkeep/guests/")
	}
	for class, path := range o.classes {
		if !built[path] {
			t.Errorf("the example configuration's class %s is %s, which the image does not build (it builds %v)", class, path, built)
		}
	}

	for _, want := range []string{"ReadWritePaths=" + o.dataDir, "StateDirectory=" + filepath.Base(o.dataDir),
		"ExecStart=/usr/local/bin/keepnode -config /etc/keepnode/keepnode.toml", "NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes"} {
		if !strings.Contains(unit, want) {
			t.Errorf("deploy/keepnode.service lacks %q", want)
		}
	}
	if regexp.MustCompile(`(?m)^User=root`).MatchString(unit) {
		t.Error("deploy/keepnode.service runs as root")
	}

	_, port, ok := strings.Cut(o.metrics.addr, ":")
	if !ok || !strings.Contains(docker, "EXPOSE 7600 "+port) || strings.Count(prom, ":"+port+`"`) != 3 {
		t.Errorf("metrics port %q: not the one the image exposes and Prometheus scrapes on the three nodes", port)
	}

	fs, _ := newFlags(flag.ContinueOnError)
	known := map[string]bool{envToken: true, envPeerToken: true}
	fs.VisitAll(func(f *flag.Flag) { known[envName(f.Name)] = true })
	for file, text := range map[string]string{"compose.yaml": compose, "keepnode.service": unit, "keepnode.toml": deployFile(t, "keepnode.toml")} {
		for _, v := range regexp.MustCompile(`KEEPNODE_[A-Z_]+`).FindAllString(text, -1) {
			if !known[v] {
				t.Errorf("deploy/%s sets %s, which is no flag's variable", file, v)
			}
		}
	}
	for _, node := range []string{"node1", "node2", "node3"} {
		if !strings.Contains(compose, "KEEPNODE_ADVERTISE: "+node+":7600") {
			t.Errorf("deploy/compose.yaml: %s does not advertise %s:7600 (the example listens on every address)", node, node)
		}
	}

	checkImageBuildsAreStamped(t, docker, compose)
}

// composeServices splits the services of a compose file into their
// blocks of text, by name (the file's own layout: two spaces, then the
// name).
func composeServices(t *testing.T, compose string) map[string]string {
	t.Helper()
	_, rest, ok := strings.Cut(compose, "\nservices:\n")
	if !ok {
		t.Fatal("deploy/compose.yaml has no services")
	}
	if i := regexp.MustCompile(`(?m)^\S`).FindStringIndex(rest); i != nil {
		rest = rest[:i[0]]
	}
	out := map[string]string{}
	names := regexp.MustCompile(`(?m)^  ([a-z0-9_-]+):\s*$`)
	idx := names.FindAllStringSubmatchIndex(rest, -1)
	for i, m := range idx {
		end := len(rest)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		out[rest[m[2]:m[3]]] = rest[m[1]:end]
	}
	return out
}

// Every named volume of the compose file is writable by the user its
// service runs as: a new named volume is created with the ownership of the
// directory it is mounted over in the image, root's when the image lacks
// it, and a service running as 65532 over such a volume cannot write
// (versitygw answered every request 500, and keepnode -create-bucket
// exited). So each service that runs as a user other than root mounts its
// named volumes only over a directory its image creates owned by that
// user (COPY --chown=UID:GID ... PATH).
func TestComposeVolumesAreWritableByTheirUser(t *testing.T) {
	compose := deployFile(t, "compose.yaml")
	services := composeServices(t, compose)
	if len(services) < 5 {
		t.Fatalf("deploy/compose.yaml: found services %v, want s3, three nodes and prometheus", slices.Sorted(maps.Keys(services)))
	}
	_, anchor, _ := strings.Cut(compose, "\nx-node: &node\n")
	anchor, _, _ = strings.Cut(anchor, "\n\n")
	volume := regexp.MustCompile(`^"?([a-z0-9_-]+):(/[^":]*)`)
	checked := 0
	for name, block := range services {
		var dockerfile string
		switch {
		case strings.Contains(block, "dockerfile_inline: |"):
			_, inline, _ := strings.Cut(block, "dockerfile_inline: |\n")
			for line := range strings.Lines(inline) {
				if !strings.HasPrefix(line, "        ") {
					break
				}
				dockerfile += strings.TrimSpace(line) + "\n"
			}
		case strings.Contains(block, "<<: *node") && strings.Contains(anchor, "dockerfile: deploy/Dockerfile"):
			dockerfile = deployFile(t, "Dockerfile")
		}
		user := "0"
		if m := regexp.MustCompile(`(?m)^USER (\S+)`).FindAllStringSubmatch(dockerfile, -1); m != nil {
			user = m[len(m)-1][1]
		}
		if m := regexp.MustCompile(`(?m)^    user: "?([^"\s]+)`).FindStringSubmatch(block); m != nil {
			user = m[1]
		}
		var mounts [][]string
		if _, list, ok := strings.Cut(block, "volumes: ["); ok {
			list, _, _ = strings.Cut(list, "]")
			for v := range strings.SplitSeq(list, ",") {
				if m := volume.FindStringSubmatch(strings.TrimSpace(v)); m != nil {
					mounts = append(mounts, m)
				}
			}
		}
		for _, m := range regexp.MustCompile(`(?m)^      - ([^\n]+)`).FindAllStringSubmatch(block, -1) {
			if v := volume.FindStringSubmatch(m[1]); v != nil {
				mounts = append(mounts, v)
			}
		}
		for _, m := range mounts {
			vol, path := m[1], m[2]
			checked++
			if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(vol) + `:`).MatchString(compose[strings.LastIndex(compose, "\nvolumes:\n"):]) {
				t.Errorf("deploy/compose.yaml: %s mounts the volume %s, which the file's volumes do not declare", name, vol)
			}
			if user == "0" || user == "root" || strings.HasPrefix(user, "0:") {
				continue
			}
			if dockerfile == "" {
				t.Errorf("deploy/compose.yaml: %s runs as %s over the volume %s at %s, from an image this test cannot read", name, user, vol, path)
				continue
			}
			owned := regexp.MustCompile(`(?m)^COPY .*--chown=` + regexp.QuoteMeta(user) + ` \S+ ` + regexp.QuoteMeta(path) + `/?$`)
			if !owned.MatchString(dockerfile) {
				t.Errorf("deploy/compose.yaml: %s runs as %s over the named volume %s at %s, which its image does not create owned by %s (COPY --chown=%s ... %s): a new volume would be root's, and not writable",
					name, user, vol, path, user, user, path)
			}
		}
	}
	if checked < 4 {
		t.Errorf("deploy/compose.yaml: checked %d named volumes, want s3's and the three nodes'", checked)
	}
}

// The systemd steps of docs/deploy.md install every guest the example
// configuration names, into the directory an earlier step made, from a
// package that exists: without them keepnode exits at once and
// Restart=on-failure starts it again every 2 s.
func TestSystemdStepsInstallTheGuests(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## systemd\n")
	if !ok {
		t.Fatal("docs/deploy.md has no systemd section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, steps, ok := strings.Cut(section, "```sh\n")
	steps, _, _ = strings.Cut(steps, "```")
	if !ok || !strings.Contains(steps, "install -m 0644 deploy/keepnode.toml /etc/keepnode/keepnode.toml") {
		t.Fatalf("docs/deploy.md's systemd steps do not install deploy/keepnode.toml:\n%s", steps)
	}
	o, err := parse(t, []string{"-config", filepath.Join("..", "..", "deploy", "keepnode.toml")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(steps, "\n")
	made := func(dir string, before int) bool {
		for _, l := range lines[:before] {
			if f := strings.Fields(l); len(f) > 2 && f[0] == "install" && f[1] == "-d" && slices.Contains(f[2:], dir) {
				return true
			}
		}
		return false
	}
	build := regexp.MustCompile(`^GOOS=wasip1 GOARCH=wasm go build -C (\S+) -buildmode=c-shared -o (\S+) \.$`)
	for class, path := range o.classes {
		found := false
		for i, l := range lines {
			m := build.FindStringSubmatch(strings.TrimSpace(l))
			if m == nil || m[2] != path {
				continue
			}
			found = true
			if !made(filepath.Dir(path), i) {
				t.Errorf("docs/deploy.md: %s is built into %s before a step makes that directory", path, filepath.Dir(path))
			}
			if _, err := os.Stat(filepath.Join("..", "..", m[1], "main.go")); err != nil {
				t.Errorf("docs/deploy.md: class %s is built from %s, which has no main.go: %v", class, m[1], err)
			}
		}
		if !found {
			t.Errorf("docs/deploy.md's systemd steps do not install class %s's guest %s, which deploy/keepnode.toml names", class, path)
		}
	}
}

// dockerfileRevisionCheck is the command of deploy/Dockerfile's RUN that
// checks REVISION, as the shell runs it (the lines it continues joined),
// and the offset in the Dockerfile of the line it starts on.
func dockerfileRevisionCheck(t *testing.T, docker string) (string, int) {
	t.Helper()
	off := 0
	lines := strings.SplitAfter(docker, "\n")
	for i := 0; i < len(lines); i++ {
		at := off
		off += len(lines[i])
		cmd, ok := strings.CutPrefix(lines[i], "RUN ")
		if !ok {
			continue
		}
		cmd = strings.TrimSuffix(cmd, "\n")
		for strings.HasSuffix(cmd, "\\") && i+1 < len(lines) {
			i++
			off += len(lines[i])
			cmd = strings.TrimSuffix(cmd, "\\") + strings.TrimSuffix(lines[i], "\n")
		}
		if strings.Contains(cmd, `"$REVISION"`) && !strings.Contains(cmd, "go build") {
			return cmd, at
		}
	}
	t.Fatal(`deploy/Dockerfile has no RUN that checks "$REVISION" before its build: an image built without REVISION would say (devel) and no commit`)
	return "", 0
}

// deploy/Dockerfile stops at its first step when REVISION is empty or
// names no commit, with a message that says what to pass; it goes on with
// a commit (what git rev-parse HEAD gives, long or short) or with
// "unknown", which a build from a tree without git passes on purpose.
// The check runs in the build stage after its ARG REVISION, before the
// module download and the stamped build.
func TestDockerfileRefusesABuildWithoutRevision(t *testing.T) {
	docker := deployFile(t, "Dockerfile")
	check, at := dockerfileRevisionCheck(t, docker)
	arg := strings.Index(docker, "\nARG REVISION")
	stage := strings.Index(docker, " AS build\n")
	download := strings.Index(docker, "RUN go mod download")
	stamp := strings.Index(docker, `RUN stamp="`)
	if stage < 0 || arg < stage || at < arg || download < at || stamp < at {
		t.Errorf("deploy/Dockerfile: the REVISION check (at %d) must follow FROM ... AS build (%d) and ARG REVISION (%d), and come before go mod download (%d) and the stamped build (%d)",
			at, stage, arg, download, stamp)
	}
	revisions := map[string]bool{ // REVISION: the build goes on
		"":                       false, // no --build-arg, or an empty variable in compose
		"HEAD":                   false,
		"main":                   false,
		"v1.2.3":                 false,
		"0123456":                true,
		"01234ab":                true,
		"012345":                 false, // too short to name a commit
		"unknown":                true,
		"Unknown":                false,
		"unknown ":               false,
		imageRevision:            true,
		imageRevision + "\nmain": false,
		strings.Repeat("ab", 32): true, // a SHA-256 repository's
	}
	if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		revisions[strings.TrimSpace(string(out))] = true
		short, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
		revisions[strings.TrimSpace(string(short))] = true
	} else {
		t.Logf("git rev-parse HEAD: %v (not a git checkout): the documented command's own value not tried", err)
	}
	for rev, ok := range revisions {
		cmd := exec.Command("sh", "-c", check)
		cmd.Env = append(os.Environ(), "REVISION="+rev)
		out, err := cmd.CombinedOutput()
		switch {
		case ok && err != nil:
			t.Errorf("REVISION=%q: deploy/Dockerfile's check refuses it: %v\n%s", rev, err, out)
		case !ok && err == nil:
			t.Errorf("REVISION=%q: deploy/Dockerfile's check lets it through; want the build to stop (it names no commit)", rev)
		case !ok:
			for _, want := range []string{"REVISION", "--build-arg REVISION=$(git rev-parse HEAD)", "REVISION=$(git rev-parse HEAD) docker compose", "--build-arg REVISION=unknown"} {
				if !strings.Contains(string(out), want) {
					t.Errorf("REVISION=%q: deploy/Dockerfile's refusal does not say %q:\n%s", rev, want, out)
				}
			}
		}
	}
}

// shellWords splits a command into words as the shell would, for the
// commands the docs give: quotes removed, $(...) kept whole.
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	q, depth, in := rune(0), 0, false
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case q != 0:
			if r == q {
				q = 0
			} else {
				cur.WriteRune(r)
			}
			continue
		case depth > 0:
			if r == '(' {
				depth++
			} else if r == ')' {
				depth--
			}
		case r == '$' && i+1 < len(rs) && rs[i+1] == '(':
			cur.WriteString("$(")
			depth, in = 1, true
			i++
			continue
		case r == '\'' || r == '"':
			q, in = r, true
			continue
		case r == ' ' || r == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
			continue
		}
		cur.WriteRune(r)
		in = true
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

// A docCommand is a shell command in one of the repository's files.
type docCommand struct {
	where string // file:line
	text  string
}

// continued joins the lines a trailing backslash continues, keeping the
// number of each command's first line.
func continued(file string, lines []string, first []int) []docCommand {
	var out []docCommand
	pending, at := "", 0
	for i, l := range lines {
		if pending == "" {
			at = first[i]
		}
		if c, ok := strings.CutSuffix(strings.TrimSpace(l), "\\"); ok {
			pending += strings.TrimSpace(c) + " "
			continue
		}
		out = append(out, docCommand{fmt.Sprintf("%s:%d", file, at), strings.TrimSpace(pending + strings.TrimSpace(l))})
		pending = ""
	}
	return out
}

// commandsIn reads the shell commands of a file of the repository: in
// Markdown, the lines of sh blocks and the inline code outside them; in a
// Dockerfile or a YAML file, its comments; in the Makefile, its recipes.
func commandsIn(t *testing.T, rel string) []docCommand {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	var nums []int
	var out []docCommand
	text := strings.Split(string(b), "\n")
	switch {
	case strings.HasSuffix(rel, ".md"):
		fence, shell := false, false
		var prose []string
		for i, l := range text {
			if m := regexp.MustCompile("^\\s*```\\s*(\\w*)").FindStringSubmatch(l); m != nil {
				fence = !fence
				shell = fence && slices.Contains([]string{"sh", "bash", "shell", "console"}, m[1])
				prose = append(prose, "")
				continue
			}
			if !fence {
				prose = append(prose, l)
				continue
			}
			prose = append(prose, "")
			if l = strings.TrimPrefix(strings.TrimSpace(l), "$ "); shell && l != "" && !strings.HasPrefix(l, "#") {
				lines, nums = append(lines, l), append(nums, i+1)
			}
		}
		all := strings.Join(prose, "\n")
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatchIndex(all, -1) {
			out = append(out, docCommand{fmt.Sprintf("%s:%d", rel, strings.Count(all[:m[0]], "\n")+1), strings.Join(strings.Fields(all[m[2]:m[3]]), " ")})
		}
	case rel == "Makefile":
		for i, l := range text {
			if strings.HasPrefix(l, "\t") {
				lines, nums = append(lines, strings.TrimPrefix(strings.TrimSpace(l), "@")), append(nums, i+1)
			}
		}
	default: // comments
		for i, l := range text {
			if c, ok := strings.CutPrefix(strings.TrimSpace(l), "#"); ok {
				lines, nums = append(lines, strings.TrimSpace(c)), append(nums, i+1)
			}
		}
	}
	return append(continued(rel, lines, nums), out...)
}

// buildArgs is what a command that builds deploy/Dockerfile gives its
// build arguments VERSION and REVISION, with ok false for a command that
// does not build it: docker (or podman) build with -f deploy/Dockerfile,
// whose --build-arg flags give them, and docker compose up, build, create
// or run, which take them from the environment (deploy/compose.yaml's
// args), so from the VAR=value words in front of the command.
func buildArgs(text string) (args map[string]string, kind string, ok bool) {
	// kind is "build" (--build-arg) or "compose" (the environment).
	w := shellWords(text)
	env := map[string]string{}
	for len(w) > 0 && regexp.MustCompile(`^[A-Z_]+=`).MatchString(w[0]) {
		k, v, _ := strings.Cut(w[0], "=")
		env[k] = v
		w = w[1:]
	}
	if len(w) < 2 || (w[0] != "docker" && w[0] != "podman" && w[0] != "docker-compose") {
		return nil, "", false
	}
	if w[0] == "docker-compose" {
		w = append([]string{"docker", "compose"}, w[1:]...)
	}
	if w[1] == "buildx" {
		w = w[1:]
	}
	switch w[1] {
	case "build":
		args = map[string]string{}
		dockerfile := ""
		for i := 2; i < len(w); i++ {
			a := w[i]
			if v, ok := strings.CutPrefix(a, "--build-arg="); ok {
				k, v, _ := strings.Cut(v, "=")
				args[k] = v
			} else if a == "--build-arg" && i+1 < len(w) {
				k, v, _ := strings.Cut(w[i+1], "=")
				args[k] = v
				i++
			} else if (a == "-f" || a == "--file") && i+1 < len(w) {
				dockerfile = w[i+1]
				i++
			} else if v, ok := strings.CutPrefix(a, "--file="); ok {
				dockerfile = v
			}
		}
		return args, "build", dockerfile == "deploy/Dockerfile"
	case "compose":
		valued := map[string]bool{"-f": true, "--file": true, "-p": true, "--project-name": true, "--profile": true, "--env-file": true, "--project-directory": true}
		for i := 2; i < len(w); i++ {
			if valued[w[i]] {
				i++
				continue
			}
			if strings.HasPrefix(w[i], "-") {
				continue
			}
			return env, "compose", slices.Contains([]string{"up", "build", "create", "run"}, w[i])
		}
	}
	return nil, "", false
}

// makeVariable is the value the Makefile gives VAR (VAR ?= value, or
// VAR := value).
func makeVariable(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` *[?:]?= *(.*)$`).FindStringSubmatch(string(b))
	if m == nil {
		return ""
	}
	return m[1]
}

// Every way the docs give to build the image passes it VERSION and
// REVISION, from git: docker build as docs/deploy.md and the Dockerfile's
// own comment show it, make image, and docker compose up --build as
// docs/deploy.md and compose.yaml's comment show it, with compose.yaml
// passing both from the environment to the build (args:). The build
// context has no .git, so without them the binaries say (devel) and no
// commit (and deploy/Dockerfile stops: TestDockerfileRefusesABuildWithoutRevision).
func checkImageBuildsAreStamped(t *testing.T, docker, compose string) {
	t.Helper()
	for _, a := range []string{"VERSION", "REVISION"} {
		if !regexp.MustCompile(`(?m)^ARG ` + a + `\b`).MatchString(docker[max(strings.Index(docker, " AS build\n"), 0):]) {
			t.Errorf("deploy/Dockerfile's build stage declares no ARG %s", a)
		}
		if !strings.Contains(docker, "node."+goName(a)+"=${"+a+"}") {
			t.Errorf("deploy/Dockerfile's build does not stamp node.%s with ${%s}", goName(a), a)
		}
	}

	// compose.yaml: each block that builds deploy/Dockerfile (the nodes'
	// anchor) passes both, each from the variable of its name.
	blocks := composeServices(t, compose)
	_, anchor, _ := strings.Cut(compose, "\nx-node: &node\n")
	anchor, _, _ = strings.Cut(anchor, "\n\n")
	blocks["x-node"] = anchor
	builders := 0
	for name, block := range blocks {
		if !strings.Contains(block, "dockerfile: deploy/Dockerfile") {
			continue
		}
		builders++
		_, build, _ := strings.Cut(block, "build:\n")
		_, args, ok := strings.Cut(build, "args:\n")
		given := map[string]string{}
		for line := range strings.Lines(args) {
			m := regexp.MustCompile(`^\s{4,}([A-Z_]+): *(.*?)\s*$`).FindStringSubmatch(line)
			if m == nil {
				break
			}
			given[m[1]] = m[2]
		}
		for _, a := range []string{"VERSION", "REVISION"} {
			if v := given[a]; !ok || !regexp.MustCompile(`^"?\$\{`+a+`(:?-[^}]*)?\}"?$`).MatchString(v) {
				t.Errorf("deploy/compose.yaml: %s builds deploy/Dockerfile without passing %s from the environment (build: args: %s: ${%s:-}); found %q: its image would say (devel) and no commit",
					name, a, a, a, v)
			}
		}
	}
	if builders == 0 {
		t.Error("deploy/compose.yaml: no service builds deploy/Dockerfile (dockerfile: deploy/Dockerfile): this test is out of date")
	}

	// The commands: each one that builds the image gives both from git.
	files := []string{"README.md", "Makefile", "deploy/Dockerfile", "deploy/compose.yaml"}
	docs, _ := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	for _, d := range docs {
		files = append(files, filepath.Join("docs", filepath.Base(d)))
	}
	from := map[string]string{"VERSION": "git describe", "REVISION": "git rev-parse HEAD"}
	found := map[string]int{}
	for _, f := range files {
		for _, c := range commandsIn(t, f) {
			args, kind, ok := buildArgs(c.text)
			if !ok {
				continue
			}
			found[f+" "+kind]++
			via := map[string]string{"build": "its --build-arg", "compose": "the environment in front of it"}[kind]
			for _, a := range []string{"VERSION", "REVISION"} {
				v := args[a]
				if f == "Makefile" && v == "$("+a+")" {
					v = makeVariable(t, a)
				}
				if !strings.Contains(v, "$("+from[a]) && !strings.Contains(v, "$(shell "+from[a]) {
					t.Errorf("%s: %s\n\tbuilds the image without %s from %s (%s gives it %q): the image would not name its build",
						c.where, c.text, a, from[a], via, v)
				}
			}
		}
	}
	for _, want := range []string{"docs/deploy.md build", "docs/deploy.md compose", "deploy/Dockerfile build", "deploy/compose.yaml compose", "Makefile build"} {
		if found[want] == 0 {
			t.Errorf("found no command that builds the image in %s (%s): the test reads the files wrongly, or the command has gone (found %v)",
				strings.Fields(want)[0], strings.Fields(want)[1], found)
		}
	}
}

// goName is a build argument's name as the node package's variable names
// it: VERSION is node.Version.
func goName(s string) string { return s[:1] + strings.ToLower(s[1:]) }
