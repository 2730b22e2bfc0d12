package main

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/faultproxy"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/testca"
)

// runProbe runs keepnode with args in an environment of its own (PATH,
// HOME and env: none of the test's KEEPNODE_ variables) and returns its
// exit status and standard error.
func runProbe(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(keepnodeBinary(t), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stderr.String()
	}
	t.Fatalf("keepnode %v: %v", args, err)
	return -1, ""
}

// wantProbe checks a probe's exit status, and on failure that it said
// why in one line holding each of says.
func wantProbe(t *testing.T, what string, code int, stderr string, want int, says ...string) {
	t.Helper()
	if code != want {
		t.Errorf("%s: keepnode -probe exited %d, want %d; stderr: %q", what, code, want, stderr)
		return
	}
	if want == 0 {
		if stderr != "" {
			t.Errorf("%s: a probe that passed wrote %q", what, stderr)
		}
		return
	}
	if !strings.HasPrefix(stderr, "keepnode -probe ") || strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
		t.Errorf("%s: stderr %q: want one line saying why", what, stderr)
	}
	for _, s := range says {
		if !strings.Contains(stderr, s) {
			t.Errorf("%s: stderr %q does not say %q", what, stderr, s)
		}
	}
}

// keepnode -probe exits 0 against a cluster node that is ready, also with
// API tokens set (the probes need none), and 1, saying why in one line,
// once the node is no longer ready: its bucket answers 503.
func TestProbeExitsZeroOnlyForAReadyNode(t *testing.T) {
	ctx := testContext(t)
	srv := s3test.Start(t)
	proxy := s3test.NewProxy(t, srv.Endpoint)
	s3 := procS3(srv)
	s3.Endpoint = proxy.URL
	cfg := nodeConfig(t, s3)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("operator-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nd, err := clusterproc.StartNode(ctx, cfg, "probed", "-token-file", token, "-sweep", "1s")
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Kill()
	for {
		r, err := nd.Client().Ready(ctx)
		if err == nil && r.Ready {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("node not ready: %+v, %v; log:\n%s", r, err, tailFile(nd.LogPath))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, path := range []string{"/v1/readyz", "/v1/healthz"} {
		code, stderr := runProbe(t, nil, "-probe", nd.URL+path)
		wantProbe(t, "a ready node's "+path, code, stderr, 0)
	}

	proxy.SetOutage(faultproxy.Outage503)
	code, stderr := runProbe(t, nil, "-probe", nd.URL+"/v1/readyz")
	wantProbe(t, "a node whose bucket answers 503", code, stderr, 1, "503 Service Unavailable", `"ready":false`, `"bucket"`)
}

// keepnode -probe exits 1, saying why in one line, where nothing answers
// 2xx: a closed port, a 500, a redirect, a server that does not answer
// within the probe's timeout, a URL that is not one; and a mistake on
// its command line is also 1, not the usage error's 2, which Docker's
// health checks reserve.
func TestProbeExitsOneWithoutA2xx(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/v1/readyz"
	ln.Close()
	code, stderr := runProbe(t, nil, "-probe", closed)
	wantProbe(t, "a closed port", code, stderr, 1, closed, "connection refused")

	hang := make(chan struct{})
	defer close(hang)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/500":
			http.Error(w, "internal\nerror", http.StatusInternalServerError)
		case "/302":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/ok":
			w.WriteHeader(http.StatusNoContent)
		case "/hang":
			select {
			case <-r.Context().Done():
			case <-hang:
			}
		}
	}))
	defer srv.Close()
	code, stderr = runProbe(t, nil, "-probe", srv.URL+"/ok")
	wantProbe(t, "a 204", code, stderr, 0)
	code, stderr = runProbe(t, nil, "-probe", srv.URL+"/500")
	wantProbe(t, "a 500", code, stderr, 1, "500 Internal Server Error: internal error")
	code, stderr = runProbe(t, nil, "-probe", srv.URL+"/302")
	wantProbe(t, "a redirect", code, stderr, 1, "302 Found")
	code, stderr = runProbe(t, nil, "-probe", srv.URL+"/hang")
	wantProbe(t, "a server that does not answer", code, stderr, 1, "no answer within "+probeTimeout.String())

	code, stderr = runProbe(t, nil, "-probe", "127.0.0.1:7600")
	wantProbe(t, "no scheme", code, stderr, 1, "want an http:// or https:// URL")
	code, stderr = runProbe(t, nil, "-probe", srv.URL+"/ok", "-no-such-flag")
	wantProbe(t, "an unknown flag", code, stderr, 1, "no-such-flag")
}

// An https URL is verified against the CA the node checks its peers'
// certificates against (-tls-ca), taken from wherever keepnode reads its
// settings: the command line, the environment or the -config file.
// Without it the node's certificate is not trusted, and the probe fails.
func TestProbeVerifiesHTTPSWithTheNodesCA(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, caFile := testca.Write(t, dir)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()
	u := srv.URL + "/v1/readyz"

	code, stderr := runProbe(t, nil, "-probe", u)
	wantProbe(t, "https without -tls-ca", code, stderr, 1, "certificate")
	code, stderr = runProbe(t, nil, "-probe", u, "-tls-ca", caFile)
	wantProbe(t, "https with -tls-ca", code, stderr, 0)
	code, stderr = runProbe(t, []string{envName("tls-ca") + "=" + caFile}, "-probe", u)
	wantProbe(t, "https with $"+envName("tls-ca"), code, stderr, 0)
	conf := writeConfig(t, "tls-ca = "+strconv.Quote(caFile)+"\n")
	code, stderr = runProbe(t, []string{envName(configFlag) + "=" + conf}, "-probe", u)
	wantProbe(t, "https with tls-ca in $"+envName(configFlag), code, stderr, 0)
	code, stderr = runProbe(t, nil, "-probe", u, "-tls-ca", filepath.Join(dir, "missing.pem"))
	wantProbe(t, "a -tls-ca that is not there", code, stderr, 1, "-tls-ca", "missing.pem")
}

// -probe comes from the command line only: a KEEPNODE_PROBE variable or a
// probe key in the file, which would turn every node started with them
// into a probe that exits, is refused as no setting of keepnode's.
func TestProbeIsCommandLineOnly(t *testing.T) {
	o, err := parse(t, nil, map[string]string{envName(probeFlag): "http://127.0.0.1:7600/v1/readyz"})
	if err != nil || o.probe != "" {
		t.Errorf("with $%s set: probe %q, %v; want it unset", envName(probeFlag), o.probe, err)
	}
	fs, _ := newFlags(0)
	if err := checkEnvNames(fs, []string{envName(probeFlag) + "=x"}); err == nil || !strings.Contains(err.Error(), "$"+envName(probeFlag)+" is not a variable keepnode reads") {
		t.Errorf("$%s: %v; want it refused", envName(probeFlag), err)
	}
	_, err = parse(t, []string{"-config", writeConfig(t, `probe = "http://127.0.0.1:7600/v1/readyz"`+"\n")}, nil)
	if err == nil || !strings.Contains(err.Error(), `unknown key "probe"`) {
		t.Errorf("a probe key in the file: %v; want it refused as an unknown key", err)
	}
}

// The image's HEALTHCHECK runs keepnode's probe, in exec form (the
// distroless image has no shell), from where the image installs keepnode,
// on /v1/readyz at the loopback address and the port the image's
// configuration listens on and the image exposes, with a timeout above
// the probe's own; run as written against a ready node, it passes.
func TestDockerfileHealthcheckRunsTheProbe(t *testing.T) {
	docker := deployFile(t, "Dockerfile")
	checks := regexp.MustCompile(`(?m)^HEALTHCHECK\s+(.*)$`).FindAllStringSubmatch(docker, -1)
	if len(checks) != 1 {
		t.Fatalf("deploy/Dockerfile has %d HEALTHCHECK lines, want one", len(checks))
	}
	opts, cmdJSON, ok := strings.Cut(checks[0][1], "CMD ")
	if !ok {
		t.Fatalf("HEALTHCHECK %s: no CMD", checks[0][1])
	}
	var argv []string
	if err := json.Unmarshal([]byte(cmdJSON), &argv); err != nil {
		t.Fatalf("HEALTHCHECK CMD %s: not the exec form (a JSON array), which needs no shell: %v", cmdJSON, err)
	}
	var entry []string
	if m := regexp.MustCompile(`(?m)^ENTRYPOINT (.*)$`).FindStringSubmatch(docker); m == nil || json.Unmarshal([]byte(m[1]), &entry) != nil || len(entry) == 0 {
		t.Fatal("deploy/Dockerfile has no ENTRYPOINT in exec form")
	}
	if len(argv) != 3 || argv[0] != entry[0] || argv[1] != "-probe" {
		t.Fatalf("HEALTHCHECK CMD %q: want [%q \"-probe\" URL]", argv, entry[0])
	}
	if !strings.Contains(docker, "COPY --from=build /out/keepnode /out/keepctl "+filepath.Dir(entry[0])+"/") {
		t.Errorf("deploy/Dockerfile does not install keepnode at %s", entry[0])
	}
	o, err := parse(t, []string{"-config", filepath.Join("..", "..", "deploy", "keepnode.toml")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(o.listen)
	u, err := url.Parse(argv[2])
	if err != nil || u.Scheme != "http" || u.Hostname() != "127.0.0.1" || u.Port() != port || u.Path != "/v1/readyz" {
		t.Fatalf("HEALTHCHECK probes %q: want http://127.0.0.1:%s/v1/readyz (the configuration listens on %s)", argv[2], port, o.listen)
	}
	if !regexp.MustCompile(`(?m)^EXPOSE .*\b` + port + `\b`).MatchString(docker) {
		t.Errorf("deploy/Dockerfile does not expose the probed port %s", port)
	}
	if m := regexp.MustCompile(`--timeout=(\S+)`).FindStringSubmatch(opts); m != nil {
		if d, err := time.ParseDuration(m[1]); err != nil || d <= probeTimeout {
			t.Errorf("HEALTHCHECK --timeout=%s: want longer than the probe's own %v", m[1], probeTimeout)
		}
	}

	ctx := testContext(t)
	nd, err := clusterproc.StartNode(ctx, nodeConfig(t, clusterproc.S3{Bucket: "unused"}), "image-health", "-bucket", "")
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Kill()
	_, nodePort, _ := net.SplitHostPort(nd.Addr)
	u.Host = "127.0.0.1:" + nodePort
	code, stderr := runProbe(t, nil, argv[1], u.String())
	wantProbe(t, "the HEALTHCHECK against a ready node", code, stderr, 0)
	if err := nd.Stop(); err != nil {
		t.Fatal(err)
	}
	code, stderr = runProbe(t, nil, argv[1], u.String())
	wantProbe(t, "the HEALTHCHECK once the node stopped", code, stderr, 1)
}
