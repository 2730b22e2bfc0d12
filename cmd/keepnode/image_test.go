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
// stamp= line), with imageVersion and imageRevision for its arguments.
func imageLdflags(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`stamp="([^"]*)"`).FindStringSubmatch(deployFile(t, "Dockerfile"))
	if m == nil {
		t.Fatal(`deploy/Dockerfile has no stamp="..." line: the test cannot build as the image does`)
	}
	return strings.NewReplacer("${VERSION}", imageVersion, "${REVISION}", imageRevision).Replace(m[1])
}

// staticBuild builds pkg as deploy/Dockerfile does, stamped as the image
// is (imageLdflags).
func staticBuild(t *testing.T, dir, pkg string) string {
	t.Helper()
	root, err := clusterproc.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags="+imageLdflags(t), "-o", out, pkg)
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
// metrics port is the one exposed and scraped; and each KEEPNODE_
// variable the compose file and the unit set is a flag's.
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
