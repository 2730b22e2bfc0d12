// Package s3test gives tests a real S3 server: the one named by
// AWS_ENDPOINT_URL if set, otherwise a versitygw process started on
// 127.0.0.1 with a posix backend in a temporary directory, shared by every
// test of the process. Each Start call gets a fresh, uniquely named bucket.
//
// A package that uses Start should stop the shared server when its tests end:
//
//	func TestMain(m *testing.M) { os.Exit(s3test.Run(m)) }
//
// (on Linux the server also dies with the test process if that is skipped).
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"go/build"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/wasmkeep/alarms/bucket"
)

// Server is a test's view of the S3 server: a client on a fresh bucket and
// what is needed to build more clients on it.
type Server struct {
	// Bucket is a client on the test's own, fresh bucket.
	Bucket *bucket.S3
	// Name is the bucket's name.
	Name string
	// Endpoint is the server's URL.
	Endpoint string
	// AccessKey and SecretKey are the local server's root credentials, or
	// empty when the server comes from AWS_ENDPOINT_URL (whose credentials
	// are in the environment).
	AccessKey, SecretKey string
	// Options reach the server (endpoint, credentials, region) and keep
	// retry pauses short for tests. NewClient starts from them.
	Options []bucket.S3Option
}

// NewClient returns another client on the test's bucket: Options followed by
// opts (so opts win; point WithEndpoint at a Proxy to put faults in between).
func (s *Server) NewClient(tb testing.TB, opts ...bucket.S3Option) *bucket.S3 {
	tb.Helper()
	all := append(append([]bucket.S3Option{}, s.Options...), opts...)
	b, err := bucket.NewS3(context.Background(), s.Name, all...)
	if err != nil {
		tb.Fatalf("s3test: client for bucket %q: %v", s.Name, err)
	}
	return b
}

// testBackoff keeps retry pauses short so tests that inject failures run
// quickly.
const testBackoff = 50 * time.Millisecond

// shared is the one server of the test process.
type shared struct {
	endpoint string
	options  []bucket.S3Option
	external bool // named by AWS_ENDPOINT_URL: buckets are removed after each test
	cmd      *exec.Cmd
	exited   chan struct{}
	dir      string
}

var (
	sharedOnce sync.Once
	sharedSrv  *shared
	sharedErr  error
)

// Start returns a ready client on a fresh bucket of the shared server,
// starting the server on first use. It fails the test if no server can be
// had, saying how to install versitygw.
func Start(tb testing.TB) *Server {
	tb.Helper()
	sharedOnce.Do(func() { sharedSrv, sharedErr = startShared() })
	if sharedErr != nil {
		tb.Fatalf("s3test: %v", sharedErr)
	}
	select {
	case <-sharedSrv.exited:
		tb.Fatalf("s3test: versitygw (pid %d) has exited; its log is in %s", sharedSrv.cmd.Process.Pid, sharedSrv.dir)
	default:
	}
	name := bucketName(tb.Name())
	srv := &Server{Name: name, Endpoint: sharedSrv.endpoint, Options: sharedSrv.options}
	if !sharedSrv.external {
		srv.AccessKey, srv.SecretKey = accessKey, secretKey
	}
	srv.Bucket = srv.NewClient(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Bucket.EnsureBucket(ctx); err != nil {
		tb.Fatalf("s3test: creating bucket %q at %s: %v", name, srv.Endpoint, err)
	}
	if sharedSrv.external {
		tb.Cleanup(func() { removeBucket(tb, srv.Bucket) })
	}
	return srv
}

// Run runs the tests and then stops the shared server, if one was started,
// and removes its directory. Call it from TestMain and exit with its result.
func Run(m *testing.M) int {
	code := m.Run()
	if sharedSrv != nil && sharedSrv.cmd != nil {
		_ = sharedSrv.cmd.Process.Kill()
		<-sharedSrv.exited
		_ = os.RemoveAll(sharedSrv.dir)
	}
	return code
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// bucketName makes a valid, unique bucket name from a test name.
func bucketName(testName string) string {
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	base := strings.Trim(unsafeChars.ReplaceAllString(strings.ToLower(testName), "-"), "-")
	if len(base) > 40 {
		base = strings.Trim(base[:40], "-")
	}
	return "t-" + base + "-" + hex.EncodeToString(nonce[:])
}

func startShared() (*shared, error) {
	if ep := os.Getenv("AWS_ENDPOINT_URL"); ep != "" {
		// The environment holds the credentials and region.
		return &shared{
			endpoint: ep,
			options:  []bucket.S3Option{bucket.WithRetryMaxBackoff(testBackoff)},
			external: true,
		}, nil
	}
	bin, err := findVersitygw()
	if err != nil {
		return nil, err
	}
	return startVersitygw(bin)
}

func findVersitygw() (string, error) {
	var dirs []string
	if out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) == 2 {
			if gobin := strings.TrimSpace(lines[0]); gobin != "" {
				dirs = append(dirs, gobin)
			}
			for _, p := range filepath.SplitList(strings.TrimSpace(lines[1])) {
				dirs = append(dirs, filepath.Join(p, "bin"))
			}
		}
	}
	for _, p := range filepath.SplitList(build.Default.GOPATH) {
		dirs = append(dirs, filepath.Join(p, "bin"))
	}
	return locate(exec.LookPath, dirs)
}

// locate finds versitygw on PATH (through lookPath) or in one of dirs.
func locate(lookPath func(string) (string, error), dirs []string) (string, error) {
	if p, err := lookPath("versitygw"); err == nil {
		return p, nil
	}
	for _, d := range dirs {
		p := filepath.Join(d, "versitygw")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("no S3 server: AWS_ENDPOINT_URL is not set and versitygw is neither on PATH nor in $(go env GOPATH)/bin; " +
		"run `make tools` (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)")
}

// Root credentials of the local server; it listens on 127.0.0.1 only.
const (
	accessKey = "s3test-access"
	secretKey = "s3test-secret-key-0123456789"
)

func startVersitygw(bin string) (*shared, error) {
	dir, err := os.MkdirTemp("", "s3test-versitygw-")
	if err != nil {
		return nil, fmt.Errorf("versitygw: temp dir: %w", err)
	}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, fmt.Errorf("versitygw: %w", err)
	}
	var lastErr error
	for try := 0; try < 3; try++ { // the free port may be taken before versitygw binds it
		s, err := launch(bin, dir, root)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

func launch(bin, dir, root string) (*shared, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("versitygw: finding a free port: %w", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	logPath := filepath.Join(dir, "versitygw.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("versitygw: log file: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin,
		"--access", accessKey, "--secret", secretKey,
		"--port", addr, "--region", bucket.DefaultRegion, "--quiet",
		"posix", root)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("versitygw: starting %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s := &shared{
		endpoint: "http://" + addr,
		options: []bucket.S3Option{
			bucket.WithEndpoint("http://" + addr),
			bucket.WithCredentials(accessKey, secretKey),
			bucket.WithRegion(bucket.DefaultRegion),
			bucket.WithRetryMaxBackoff(testBackoff),
		},
		cmd:    cmd,
		exited: exited,
		dir:    dir,
	}
	if err := waitReady(s.endpoint, exited, 15*time.Second); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("versitygw on %s: %w; log:\n%s", addr, err, bytes.TrimSpace(log))
	}
	return s, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls until the server answers HTTP (any status: an unsigned
// request is refused, which proves it is serving).
func waitReady(endpoint string, exited <-chan struct{}, within time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(within)
	for {
		resp, err := client.Get(endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-exited:
			return errors.New("exited before answering")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not answering after %v: %w", within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// removeBucket empties and deletes a test bucket on an external server.
func removeBucket(tb testing.TB, b *bucket.S3) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := b.Client()
	name := b.Name()
	for {
		keys, err := b.List(ctx, "", "", bucket.MaxPage)
		if err != nil {
			tb.Logf("s3test: listing bucket %q for removal: %v", name, err)
			return
		}
		if len(keys) == 0 {
			break
		}
		ids := make([]types.ObjectIdentifier, len(keys))
		for i := range keys {
			ids[i] = types.ObjectIdentifier{Key: aws.String(keys[i])}
		}
		if _, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: aws.String(name), Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		}); err != nil {
			tb.Logf("s3test: emptying bucket %q: %v", name, err)
			return
		}
	}
	if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(name)}); err != nil {
		tb.Logf("s3test: removing bucket %q: %v", name, err)
	}
}
