// Package clusterproc runs the reference host as real processes: it builds
// cmd/keepnode, starts an S3 server (versitygw) when none is given, starts
// keepnode processes on 127.0.0.1 with their own data directories, and talks
// to them over the HTTP API. Cluster tests use it to kill nodes with SIGKILL;
// the demo uses it too, so it depends on no testing package.
//
// A typical run:
//
//	bin, _ := clusterproc.Build(ctx, dir)
//	gw, _ := clusterproc.StartVersitygw(ctx, dir)
//	defer gw.Stop()
//	cfg := clusterproc.Config{Binary: bin, S3: gw.S3("demo"), Dir: dir,
//		Classes: map[string]string{"counter": "counter-actor.wasm"}}
//	nodes, _ := clusterproc.StartNodes(ctx, cfg, 3)
//	out, _ := nodes[0].Client().ExecDurable(ctx, id, []byte("get"))
package clusterproc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Module is the module path of the repository that holds cmd/keepnode.
const Module = "github.com/wasmkeep/alarms"

// KeepnodePackage is the import path Build compiles.
const KeepnodePackage = Module + "/cmd/keepnode"

// ModuleRoot returns the repository root: the nearest directory, from the
// working directory up, whose go.mod declares Module.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("clusterproc: working directory: %w", err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && declares(b, Module) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("clusterproc: no go.mod declaring %s above the working directory", Module)
		}
		dir = parent
	}
}

func declares(gomod []byte, module string) bool {
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" && f[1] == module {
			return true
		}
	}
	return false
}

// Build compiles cmd/keepnode with the Go toolchain on PATH into dir and
// returns the binary's path. It runs in the repository root (ModuleRoot).
func Build(ctx context.Context, dir string) (string, error) {
	return BuildStamped(ctx, dir, "", "")
}

// BuildStamped is Build with the binary stamped with node.Version version
// and node.Revision revision (-ldflags -X; "" stamps nothing), which a
// build records no other way where Go's VCS stamping is off.
func BuildStamped(ctx context.Context, dir, version, revision string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "keepnode")
	args := []string{"build", "-o", bin}
	if version != "" || revision != "" {
		args = append(args, "-ldflags", stamp(version, revision))
	}
	cmd := exec.CommandContext(ctx, "go", append(args, KeepnodePackage)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("clusterproc: go build %s: %w\n%s", KeepnodePackage, err, bytes.TrimSpace(out))
	}
	return bin, nil
}

// S3 is where the nodes' bucket is: the store's endpoint, credentials and
// region, and the bucket's name (keepnode refuses a bucket that does not
// exist unless Config.Flags holds -create-bucket).
type S3 struct {
	Endpoint  string
	AccessKey string
	SecretKey string
	Region    string // default us-east-1
	Bucket    string
}

// Env returns the environment a node process reads its S3 settings from:
// AWS_ENDPOINT_URL, the credentials and the region. Empty fields are left
// out, so the caller's own environment (which child processes inherit)
// provides them.
func (s S3) Env() []string {
	var env []string
	add := func(k, v string) {
		if v != "" {
			env = append(env, k+"="+v)
		}
	}
	add("AWS_ENDPOINT_URL", s.Endpoint)
	add("AWS_ACCESS_KEY_ID", s.AccessKey)
	add("AWS_SECRET_ACCESS_KEY", s.SecretKey)
	region := s.Region
	if region == "" && s.Endpoint != "" {
		region = "us-east-1"
	}
	add("AWS_REGION", region)
	return env
}

// Config says how to start nodes.
type Config struct {
	// Binary is the keepnode executable (see Build). Required.
	Binary string
	// S3 names the shared bucket. Bucket is required; an empty Endpoint
	// leaves the S3 settings to the caller's environment.
	S3 S3
	// Classes maps a class name to its .wasm file. At least one is required.
	Classes map[string]string
	// Flags are passed to every node after those the package sets (-data,
	// -listen, -bucket, -class), so they may override them; for example
	// "-lease-ttl", "1s".
	Flags []string
	// Dir holds one directory per node name: <Dir>/<name>/data is its data
	// directory (kept across restarts under the same name) and
	// <Dir>/<name>/node.log its output. Required.
	Dir string
	// Log, if set, also receives every line the nodes write, prefixed with
	// the node's name. It must be safe for concurrent use.
	Log io.Writer
	// ReadyTimeout bounds the wait for a node's "listening" line (default
	// 30 s).
	ReadyTimeout time.Duration
}

// Node is a running keepnode process.
type Node struct {
	// Name is the name the node was started under (its directory's name).
	Name string
	// URL is the node's HTTP API, such as http://127.0.0.1:40123.
	URL string
	// Addr is URL without the scheme: the address the node advertises.
	Addr string
	// NodeID is the node's ID in the cluster (random for each start
	// unless -node-id names it).
	NodeID string
	// DataDir is the node's data directory.
	DataDir string
	// LogPath is the file holding everything the node wrote.
	LogPath string
	// MetricsURL is the node's metrics endpoint (http://ADDR/metrics) when
	// it was started with -metrics-addr.
	MetricsURL string

	cmd    *exec.Cmd
	exited chan struct{}
	err    error // the exit status, once exited is closed
	log    *lockedWriter
}

// readyPrefix starts the line keepnode prints when it serves; with
// -metrics-addr, metricsPrefix starts the one it prints before.
const (
	readyPrefix   = "keepnode listening on "
	metricsPrefix = "keepnode metrics on "
)

// StartNodes starts n nodes named node0 .. node<n-1>, one after another.
// On error it kills the ones it started.
func StartNodes(ctx context.Context, cfg Config, n int) ([]*Node, error) {
	var nodes []*Node
	for i := 0; i < n; i++ {
		nd, err := StartNode(ctx, cfg, fmt.Sprintf("node%d", i))
		if err != nil {
			for _, s := range nodes {
				_ = s.Kill()
			}
			return nil, err
		}
		nodes = append(nodes, nd)
	}
	return nodes, nil
}

// StartNode starts one node under name, with its data in <Dir>/<name>/data
// (a node started again under the same name finds its earlier data), and
// any extra flags after Config.Flags. It listens on a port of 127.0.0.1
// the kernel picks, and returns once the node printed that it serves, or
// with an error holding the end of its log if it exited first or
// ReadyTimeout passed. ctx bounds only the start; the process runs until
// Stop or Kill.
func StartNode(ctx context.Context, cfg Config, name string, extra ...string) (*Node, error) {
	if cfg.Binary == "" || cfg.Dir == "" || cfg.S3.Bucket == "" || len(cfg.Classes) == 0 {
		return nil, errors.New("clusterproc: Config needs Binary, Dir, S3.Bucket and at least one class")
	}
	if name == "" || strings.ContainsAny(name, `/\`) {
		return nil, fmt.Errorf("clusterproc: node name %q: must be non-empty, without slashes", name)
	}
	timeout := cfg.ReadyTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	home := filepath.Join(cfg.Dir, name)
	data := filepath.Join(home, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, fmt.Errorf("clusterproc: node %s: %w", name, err)
	}
	logPath := filepath.Join(home, "node.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("clusterproc: node %s: log file: %w", name, err)
	}
	args := []string{"-data", data, "-listen", "127.0.0.1:0", "-bucket", cfg.S3.Bucket}
	for class, path := range cfg.Classes {
		args = append(args, "-class", class+"="+path)
	}
	args = append(append(args, cfg.Flags...), extra...)
	cmd := exec.Command(cfg.Binary, args...)
	cmd.Env = append(os.Environ(), cfg.S3.Env()...)
	cmd.SysProcAttr = sysProcAttr()
	lw := &lockedWriter{w: logFile}
	var out io.Writer = lw
	if cfg.Log != nil {
		out = io.MultiWriter(lw, &prefixWriter{prefix: name + ": ", w: cfg.Log})
	}
	cmd.Stderr = out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("clusterproc: node %s: %w", name, err)
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("clusterproc: node %s: starting %s: %w", name, cfg.Binary, err)
	}
	nd := &Node{Name: name, DataDir: data, LogPath: logPath, cmd: cmd, exited: make(chan struct{}), log: lw}
	ready := make(chan string, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(out, line)
			line = startupMessage(line)
			if u, ok := strings.CutPrefix(line, metricsPrefix); ok && !sent {
				nd.MetricsURL = strings.TrimSpace(u) // before the ready line
			}
			if !sent && strings.HasPrefix(line, readyPrefix) {
				ready <- line
				sent = true
			}
		}
		_, _ = io.Copy(out, stdout) // a line too long for the scanner
	}()
	go func() {
		<-copied // Wait closes the pipe: read it to the end first
		nd.err = cmd.Wait()
		logFile.Close()
		close(nd.exited)
	}()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case line := <-ready:
		if err := nd.parseReady(line); err != nil {
			_ = nd.Kill()
			return nil, err
		}
		return nd, nil
	case <-nd.exited:
		return nil, fmt.Errorf("clusterproc: node %s exited before serving (%v); log:\n%s", name, nd.err, tail(logPath))
	case <-timer.C:
		_ = nd.Kill()
		return nil, fmt.Errorf("clusterproc: node %s not serving after %v; log:\n%s", name, timeout, tail(logPath))
	case <-ctx.Done():
		_ = nd.Kill()
		return nil, fmt.Errorf("clusterproc: node %s: %w", name, ctx.Err())
	}
}

// startupMessage is a start-up line's text: the line, or with -log-json
// the message of its JSON object.
func startupMessage(line string) string {
	if !strings.HasPrefix(line, "{") {
		return line
	}
	var v struct {
		Message string `json:"@message"`
	}
	if json.Unmarshal([]byte(line), &v) != nil {
		return line
	}
	return v.Message
}

// parseReady reads "keepnode listening on http://ADDR node=ID" (https://
// with -tls-cert).
func (n *Node) parseReady(line string) error {
	rest := strings.TrimPrefix(line, readyPrefix)
	u, id, ok := strings.Cut(rest, " node=")
	addr, found := strings.CutPrefix(u, "http://")
	if !found {
		addr, found = strings.CutPrefix(u, "https://")
	}
	if !ok || !found {
		return fmt.Errorf("clusterproc: node %s: unexpected ready line %q", n.Name, line)
	}
	n.URL, n.Addr, n.NodeID = u, addr, strings.TrimSpace(id)
	return nil
}

// Pid is the process ID.
func (n *Node) Pid() int { return n.cmd.Process.Pid }

// Exited is closed once the process has exited.
func (n *Node) Exited() <-chan struct{} { return n.exited }

// Kill stops the process with SIGKILL, as a crash does (no upload, no
// release: its lease is left to expire), and waits until it is gone.
func (n *Node) Kill() error {
	select {
	case <-n.exited:
		return nil
	default:
	}
	if err := n.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("clusterproc: kill node %s: %w", n.Name, err)
	}
	<-n.exited
	return nil
}

// StopTimeout bounds how long Stop waits for a clean exit before it kills.
const StopTimeout = 45 * time.Second

// Stop asks the process to shut down cleanly (SIGTERM: it uploads what is
// pending, releases its actors and deletes its lease) and waits for it. It
// returns an error if the process exited with a failure, or did not exit
// within StopTimeout (it is then killed).
func (n *Node) Stop() error {
	select {
	case <-n.exited:
		return n.exitErr()
	default:
	}
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("clusterproc: stop node %s: %w", n.Name, err)
	}
	t := time.NewTimer(StopTimeout)
	defer t.Stop()
	select {
	case <-n.exited:
		return n.exitErr()
	case <-t.C:
		_ = n.Kill()
		return fmt.Errorf("clusterproc: node %s did not stop within %v; killed", n.Name, StopTimeout)
	}
}

func (n *Node) exitErr() error {
	if n.err != nil {
		return fmt.Errorf("clusterproc: node %s exited: %w; log:\n%s", n.Name, n.err, tail(n.LogPath))
	}
	return nil
}

// tail returns the last lines of a log file, for error messages.
func tail(path string) string { return Tail(path, 20) }

// Tail is the last n lines of the log file at path, or why there is none.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// lockedWriter serialises writes from the stdout copier and the process's
// stderr.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// prefixWriter prefixes each line with the node's name. Lines are split at
// write boundaries; a partial line waits for its end.
type prefixWriter struct {
	mu     sync.Mutex
	prefix string
	w      io.Writer
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := append([]byte(p.prefix), p.buf[:i+1]...)
		p.buf = p.buf[i+1:]
		if _, err := p.w.Write(line); err != nil {
			return len(b), err
		}
	}
}
