package clusterproc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// VersitygwVersion is the versitygw release the project installs
// (go install github.com/versity/versitygw/cmd/versitygw@VersitygwVersion).
const VersitygwVersion = "v1.8.0"

// Versitygw is an S3 server process (versitygw, posix backend) listening on
// 127.0.0.1 only, with root credentials made up for this run.
type Versitygw struct {
	// Endpoint is the server's URL, such as http://127.0.0.1:40111.
	Endpoint string
	// AccessKey and SecretKey are the root credentials.
	AccessKey, SecretKey string
	// Dir holds the backend's files and the server's log (versitygw.log).
	Dir string

	cmd    *exec.Cmd
	exited chan struct{}
}

// FindVersitygw returns the versitygw binary: on PATH, or where `go
// install` leaves it (GOBIN if set, else the bin directory of each GOPATH
// entry), whether or not that directory is on PATH.
func FindVersitygw() (string, error) {
	if p, ok := FindGoInstalled("versitygw"); ok {
		return p, nil
	}
	return "", errors.New("clusterproc: versitygw is neither on PATH nor where `go install` puts it (GOBIN, or $(go env GOPATH)/bin); " +
		"install it with `go install github.com/versity/versitygw/cmd/versitygw@" + VersitygwVersion + "` (or `make tools`)")
}

// FindGoInstalled returns the executable name: on PATH, else in the
// directories `go install` writes to, asked of `go env -json GOBIN GOPATH`
// (an unset GOBIN is an empty value there, not a missing line).
func FindGoInstalled(name string) (string, bool) {
	if p, err := exec.LookPath(name); err == nil {
		return p, true
	}
	for _, d := range GoInstallDirs() {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

// GoInstallDirs returns where `go install` puts binaries, in the order it
// would: GOBIN if set, then the bin directory of each GOPATH entry. It is
// empty if the go command cannot be run.
func GoInstallDirs() []string {
	out, err := exec.Command("go", "env", "-json", "GOBIN", "GOPATH").Output()
	if err != nil {
		return nil
	}
	var env struct{ GOBIN, GOPATH string }
	if json.Unmarshal(out, &env) != nil {
		return nil
	}
	var dirs []string
	if env.GOBIN != "" {
		dirs = append(dirs, env.GOBIN)
	}
	for _, p := range filepath.SplitList(env.GOPATH) {
		if p != "" {
			dirs = append(dirs, filepath.Join(p, "bin"))
		}
	}
	return dirs
}

// StartVersitygw starts versitygw with its backend in a new directory under
// dir and returns once it answers HTTP. Stop it with Stop.
func StartVersitygw(ctx context.Context, dir string) (*Versitygw, error) {
	bin, err := FindVersitygw()
	if err != nil {
		return nil, err
	}
	home, err := os.MkdirTemp(dir, "versitygw-")
	if err != nil {
		return nil, fmt.Errorf("clusterproc: versitygw directory: %w", err)
	}
	root := filepath.Join(home, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, fmt.Errorf("clusterproc: versitygw: %w", err)
	}
	var lastErr error
	for try := 0; try < 3; try++ { // another process may take the free port first
		v, err := launchVersitygw(ctx, bin, home, root)
		if err == nil {
			return v, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func launchVersitygw(ctx context.Context, bin, home, root string) (*Versitygw, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("clusterproc: versitygw: a free port: %w", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	logPath := filepath.Join(home, "versitygw.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("clusterproc: versitygw log: %w", err)
	}
	defer logFile.Close()
	v := &Versitygw{
		Endpoint:  "http://" + addr,
		AccessKey: "clusterproc-" + randomHex(4),
		SecretKey: randomHex(16),
		Dir:       home,
		exited:    make(chan struct{}),
	}
	// --keep-alive: versitygw closes every connection after one request
	// unless told otherwise, so each S3 request would dial anew; real S3
	// endpoints keep connections open, and so should the one we measure on.
	v.cmd = exec.Command(bin, "--access", v.AccessKey, "--secret", v.SecretKey,
		"--port", addr, "--region", "us-east-1", "--keep-alive", "--quiet", "posix", root)
	v.cmd.Stdout, v.cmd.Stderr = logFile, logFile
	v.cmd.SysProcAttr = sysProcAttr()
	if err := v.cmd.Start(); err != nil {
		return nil, fmt.Errorf("clusterproc: starting %s: %w", bin, err)
	}
	go func() { _ = v.cmd.Wait(); close(v.exited) }()
	if err := v.waitReady(ctx, 15*time.Second); err != nil {
		v.Stop()
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("clusterproc: versitygw on %s: %w; log:\n%s", addr, err, bytes.TrimSpace(log))
	}
	return v, nil
}

// waitReady polls until the server answers HTTP at all (an unsigned request
// is refused, which proves it serves).
func (v *Versitygw) waitReady(ctx context.Context, within time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(within)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.Endpoint+"/", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-v.exited:
			return errors.New("exited before answering")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not answering after %v: %w", within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// S3 returns the settings for nodes that share the named bucket on this
// server.
func (v *Versitygw) S3(bucket string) S3 {
	return S3{Endpoint: v.Endpoint, AccessKey: v.AccessKey, SecretKey: v.SecretKey, Region: "us-east-1", Bucket: bucket}
}

// Exited is closed once the server process has exited.
func (v *Versitygw) Exited() <-chan struct{} { return v.exited }

// Pid is the server's process ID.
func (v *Versitygw) Pid() int { return v.cmd.Process.Pid }

// Stop kills the server and waits for it. Its directory stays (the caller
// owns dir).
func (v *Versitygw) Stop() {
	_ = v.cmd.Process.Kill()
	<-v.exited
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
