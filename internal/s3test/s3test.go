// Package s3test gives tests a real S3 server: the one named by
// AWS_ENDPOINT_URL if set, otherwise a versitygw process started on
// 127.0.0.1 with a posix backend in a temporary directory (under
// WASMKEEP_S3TEST_DIR if set, else the system's), shared by every test of
// the process. Each Start call gets a fresh, uniquely named bucket.
//
// A package that uses Start should stop the shared server when its tests end:
//
//	func TestMain(m *testing.M) { os.Exit(s3test.Run(m)) }
//
// (on Linux the server also dies with the test process if that is skipped).
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/internal/clusterproc"
)

// Server is a test's view of the S3 server: a client on a fresh bucket and
// what is needed to build more clients on it.
type Server struct {
	// Bucket is a client on the test's own, fresh bucket.
	Bucket *s3.Bucket
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
	Options []s3.Option
	// Pid is the local server's process ID (benchmarks read its CPU
	// time), or 0 when the server comes from AWS_ENDPOINT_URL.
	Pid int
}

// NewClient returns another client on the test's bucket: Options followed by
// opts (so opts win; point WithEndpoint at a Proxy to put faults in between).
func (s *Server) NewClient(tb testing.TB, opts ...s3.Option) *s3.Bucket {
	tb.Helper()
	all := append(append([]s3.Option{}, s.Options...), opts...)
	b, err := s3.New(context.Background(), s.Name, all...)
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
	options  []s3.Option
	external bool                   // from AWS_ENDPOINT_URL
	gw       *clusterproc.Versitygw // the local server, when not external
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
	case <-sharedSrv.gwExited():
		tb.Fatalf("s3test: versitygw (pid %d) has exited; its log is in %s", sharedSrv.gw.Pid(), sharedSrv.gw.Dir)
	default:
	}
	name := bucketName(tb.Name())
	srv := &Server{Name: name, Endpoint: sharedSrv.endpoint, Options: sharedSrv.options}
	if !sharedSrv.external {
		srv.AccessKey, srv.SecretKey = sharedSrv.gw.AccessKey, sharedSrv.gw.SecretKey
		srv.Pid = sharedSrv.gw.Pid()
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

// StartWithoutBucket is Start without creating the bucket: the server, and
// a client on a fresh bucket name that does not exist there yet. If the
// test creates the bucket, it is removed when the test ends, as Start's are.
func StartWithoutBucket(tb testing.TB) *Server {
	tb.Helper()
	srv := Start(tb)
	missing := &Server{Name: srv.Name + "-new", Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Options: srv.Options}
	missing.Bucket = missing.NewClient(tb)
	if sharedSrv.external {
		tb.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if ok, err := missing.Bucket.Exists(ctx); ok || err != nil {
				removeBucket(tb, missing.Bucket)
			}
		})
	}
	return missing
}

// StartLocal starts a versitygw of the test's own, whose backend keeps its
// files under dir (a tmpfs such as /dev/shm keeps them in memory), and
// returns a client on a fresh bucket of it. The server stops and its files
// go when the test ends. Use it where the server's storage is part of what
// is measured; Start is the shared server every other test uses.
func StartLocal(tb testing.TB, dir string) *Server {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gw, err := clusterproc.StartVersitygw(ctx, dir)
	if err != nil {
		tb.Fatalf("s3test: versitygw under %s: %v", dir, err)
	}
	tb.Cleanup(func() {
		gw.Stop()
		_ = os.RemoveAll(gw.Dir)
	})
	srv := &Server{
		Name: bucketName(tb.Name()), Endpoint: gw.Endpoint,
		AccessKey: gw.AccessKey, SecretKey: gw.SecretKey,
		Options: localOptions(gw),
	}
	srv.Bucket = srv.NewClient(tb)
	if err := srv.Bucket.EnsureBucket(ctx); err != nil {
		tb.Fatalf("s3test: creating bucket %q at %s: %v", srv.Name, srv.Endpoint, err)
	}
	return srv
}

// Run runs the tests and then stops the shared server, if one was started,
// and removes its directory. Call it from TestMain and exit with its result.
func Run(m *testing.M) int {
	code := m.Run()
	if sharedSrv != nil && sharedSrv.gw != nil {
		sharedSrv.gw.Stop()
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
			options:  []s3.Option{s3.WithRetryMaxBackoff(testBackoff)},
			external: true,
		}, nil
	}
	// A benchmark can keep the server's files apart from the nodes'
	// (TMPDIR): on another file system, or another directory of one.
	dir, err := os.MkdirTemp(os.Getenv("WASMKEEP_S3TEST_DIR"), "s3test-versitygw-")
	if err != nil {
		return nil, fmt.Errorf("versitygw: temp dir: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gw, err := clusterproc.StartVersitygw(ctx, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &shared{
		endpoint: gw.Endpoint,
		options:  localOptions(gw),
		gw:       gw,
		dir:      dir,
	}, nil
}

// localOptions reach a versitygw this package started.
func localOptions(gw *clusterproc.Versitygw) []s3.Option {
	return []s3.Option{
		s3.WithEndpoint(gw.Endpoint),
		s3.WithCredentials(gw.AccessKey, gw.SecretKey),
		s3.WithRegion(s3.DefaultRegion),
		s3.WithRetryMaxBackoff(testBackoff),
	}
}

// gwExited is closed once the local server exited (never for an external one).
func (s *shared) gwExited() <-chan struct{} {
	if s.gw == nil {
		return nil
	}
	return s.gw.Exited()
}

// removeBucket empties and deletes a test bucket on an external server.
func removeBucket(tb testing.TB, b *s3.Bucket) {
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
		if _, err := c.DeleteObjects(ctx, &awss3.DeleteObjectsInput{
			Bucket: aws.String(name), Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		}); err != nil {
			tb.Logf("s3test: emptying bucket %q: %v", name, err)
			return
		}
	}
	if _, err := c.DeleteBucket(ctx, &awss3.DeleteBucketInput{Bucket: aws.String(name)}); err != nil {
		tb.Logf("s3test: removing bucket %q: %v", name, err)
	}
}
