package main

// The deployment traps of a first cluster, on real keepnode processes: a
// mistyped -bucket, a -listen address peers cannot reach, and a restart
// that compiles every class again.

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/testguest"
)

func TestMain(m *testing.M) {
	code := s3test.Run(m)
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// keepnodeBinary builds keepnode once for the package's tests.
func keepnodeBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "keepnode-test-"); binErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		binPath, binErr = clusterproc.Build(ctx, binDir)
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// nodeConfig starts nodes of the oneshot fixture class on s3 (a bucket
// named "unused" and no endpoint for tests that pass -bucket "").
func nodeConfig(t *testing.T, s3 clusterproc.S3) clusterproc.Config {
	t.Helper()
	wasm := filepath.Join(t.TempDir(), "oneshot.wasm")
	if err := os.WriteFile(wasm, testguest.Fixture(t, "oneshot_alarm"), 0o644); err != nil {
		t.Fatal(err)
	}
	return clusterproc.Config{Binary: keepnodeBinary(t), S3: s3, Dir: t.TempDir(),
		Classes: map[string]string{"oneshot": wasm}, ReadyTimeout: 2 * time.Minute}
}

func procS3(srv *s3test.Server) clusterproc.S3 {
	return clusterproc.S3{Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Bucket: srv.Name}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// A -bucket that does not exist (a typo) stops keepnode with an error
// naming the bucket and the endpoint, and leaves the store as it was;
// -create-bucket creates it, after which nodes join it without the flag.
func TestAMissingBucketIsRefusedUnlessCreateBucket(t *testing.T) {
	ctx := testContext(t)
	srv := s3test.StartWithoutBucket(t)
	cfg := nodeConfig(t, procS3(srv))

	n, err := clusterproc.StartNode(ctx, cfg, "typo")
	if err == nil {
		n.Kill()
		t.Fatalf("keepnode served on bucket %s, which did not exist", srv.Name)
	}
	for _, want := range []string{"exited before serving", "bucket " + srv.Name + " does not exist at " + srv.Endpoint, "-create-bucket"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("keepnode on a missing bucket: %v\nwant it to say %q", err, want)
		}
	}
	if ok, err := srv.Bucket.Exists(ctx); ok || err != nil {
		t.Fatalf("after the refusal, bucket %s exists = %v, %v; want it still missing", srv.Name, ok, err)
	}

	first, err := clusterproc.StartNode(ctx, cfg, "creator", "-create-bucket")
	if err != nil {
		t.Fatalf("keepnode -create-bucket: %v", err)
	}
	defer first.Kill()
	if first.NodeID == "" {
		t.Fatal("the node started with -create-bucket reports no node ID: it did not join a cluster")
	}
	if ok, err := srv.Bucket.Exists(ctx); !ok || err != nil {
		t.Fatalf("after keepnode -create-bucket, bucket %s exists = %v, %v; want true", srv.Name, ok, err)
	}
	second, err := clusterproc.StartNode(ctx, cfg, "joiner")
	if err != nil {
		t.Fatalf("keepnode without -create-bucket on the bucket now there: %v", err)
	}
	defer second.Kill()
	if second.NodeID == "" || second.NodeID == first.NodeID {
		t.Fatalf("second node's ID %q beside the first's %q: want a node of its own in the cluster", second.NodeID, first.NodeID)
	}
}

// In a cluster, a -listen address with no host or every host would be
// advertised to the other nodes as it is, and they could not forward to
// it: keepnode refuses it without -advertise, and says to pass one. With
// -advertise, or running alone (nothing advertised), it serves.
func TestAWildcardListenNeedsAdvertiseInACluster(t *testing.T) {
	ctx := testContext(t)
	srv := s3test.Start(t)
	cfg := nodeConfig(t, procS3(srv))

	for i, listen := range []string{":0", "0.0.0.0:0", "[::]:0"} {
		n, err := clusterproc.StartNode(ctx, cfg, "wild"+string(rune('a'+i)), "-listen", listen)
		if err == nil {
			n.Kill()
			t.Errorf("keepnode -listen %s -bucket %s without -advertise served, advertising %s to its peers", listen, srv.Name, n.Addr)
			continue
		}
		for _, want := range []string{"exited before serving", "-listen " + listen + " names no host", "pass -advertise HOST:0"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("keepnode -listen %s without -advertise: %v\nwant it to say %q", listen, err, want)
			}
		}
	}

	n, err := clusterproc.StartNode(ctx, cfg, "advertised", "-listen", ":0", "-advertise", "127.0.0.1:7600")
	if err != nil {
		t.Fatalf("keepnode -listen :0 -advertise 127.0.0.1:7600: %v", err)
	}
	n.Kill()
	n, err = clusterproc.StartNode(ctx, cfg, "alone", "-listen", ":0", "-bucket", "")
	if err != nil {
		t.Fatalf("keepnode -listen :0 alone (nothing advertised): %v", err)
	}
	n.Kill()
}

// cacheFiles lists the files under dir.
func cacheFiles(t *testing.T, dir string) map[string]os.FileInfo {
	t.Helper()
	files := map[string]os.FileInfo{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		files[rel] = info
		return nil
	})
	if err != nil {
		t.Fatalf("compilation cache %s: %v", dir, err)
	}
	return files
}

// keepnode keeps compiled classes in <data>/.compilation-cache, and a
// second start on the same data directory takes its class from there: a
// compile that missed the cache would write the class's file anew (wazero
// writes a temporary file and renames it over the entry). -cache-dir moves
// the cache, and -cache-dir off turns it off.
func TestASecondStartReusesTheCompilationCache(t *testing.T) {
	ctx := testContext(t)
	cfg := nodeConfig(t, clusterproc.S3{Bucket: "unused"})
	start := func(name string, flags ...string) *clusterproc.Node {
		t.Helper()
		began := time.Now()
		n, err := clusterproc.StartNode(ctx, cfg, name, append([]string{"-bucket", ""}, flags...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("node %s %q serving after %v", name, flags, time.Since(began).Round(time.Millisecond))
		if err := n.Stop(); err != nil {
			t.Fatal(err)
		}
		return n
	}

	n := start("node")
	cache := filepath.Join(n.DataDir, ".compilation-cache")
	first := cacheFiles(t, cache)
	compiled := 0
	for name, f := range first {
		if strings.HasSuffix(name, ".tmp") {
			t.Errorf("cache file %s: a write left unfinished", name)
		}
		if f.Size() > 0 {
			compiled++
		}
	}
	if compiled != 1 {
		t.Fatalf("after the first start, %s holds %d non-empty files (%v); want the one compiled class", cache, compiled, first)
	}

	start("node")
	second := cacheFiles(t, cache)
	if len(second) != len(first) {
		t.Errorf("after the second start the cache holds %d files, after the first %d: want the same", len(second), len(first))
	}
	for name, f := range first {
		g, ok := second[name]
		if !ok {
			t.Errorf("cache file %s is gone after the second start", name)
			continue
		}
		if !os.SameFile(f, g) || !g.ModTime().Equal(f.ModTime()) || g.Size() != f.Size() {
			t.Errorf("cache file %s was written again by the second start: the class was compiled, not taken from the cache", name)
		}
	}

	// A damaged entry stops the start with the remedy; following it works.
	for name, f := range first {
		path := filepath.Join(cache, name)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[f.Size()/2] ^= 0xff
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := clusterproc.StartNode(ctx, cfg, "node", "-bucket", ""); err == nil {
		n.Kill()
		t.Log("keepnode started on a damaged cache entry (wazero compiled the class again)")
	} else if want := "the compilation cache in " + cache + " is damaged: remove that directory"; !strings.Contains(err.Error(), want) {
		t.Errorf("keepnode on a damaged cache entry: %v\nwant it to say %q", err, want)
	}
	if err := os.RemoveAll(cache); err != nil {
		t.Fatal(err)
	}
	start("node")
	if got := len(cacheFiles(t, cache)); got != 1 {
		t.Errorf("after the cache was removed, a start left %d files in it, want the one compiled class", got)
	}

	elsewhere := filepath.Join(t.TempDir(), "cache")
	n = start("moved", "-cache-dir", elsewhere)
	if got := len(cacheFiles(t, elsewhere)); got != 1 {
		t.Errorf("-cache-dir %s holds %d files after a start, want the one compiled class", elsewhere, got)
	}
	if _, err := os.Stat(filepath.Join(n.DataDir, ".compilation-cache")); !os.IsNotExist(err) {
		t.Errorf("with -cache-dir elsewhere, the data directory has a cache too (%v)", err)
	}
	n = start("uncached", "-cache-dir", "off")
	if _, err := os.Stat(filepath.Join(n.DataDir, ".compilation-cache")); !os.IsNotExist(err) {
		t.Errorf("with -cache-dir off, the data directory has a cache (%v)", err)
	}
}

// A node whose lease object someone else replaced (another process
// started under its node ID) is not valid again in this process: keepnode
// exits with an error naming the node and the cause, so that its
// supervisor restarts it, rather than serve on as a node that can hold
// nothing.
func TestANodeWhoseLeaseIsReplacedExits(t *testing.T) {
	ctx := testContext(t)
	srv := s3test.Start(t)
	cfg := nodeConfig(t, procS3(srv))
	n, err := clusterproc.StartNode(ctx, cfg, "replaced")
	if err != nil {
		t.Fatal(err)
	}
	defer n.Kill()
	key := "cluster/nodes/" + n.NodeID
	if _, err := srv.Bucket.Put(ctx, key, []byte(`{"node_id":"`+n.NodeID+`","instance":"another","seq":1}`), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.Exited():
	case <-time.After(30 * time.Second): // renewals go out every few seconds
		t.Fatalf("node %s still runs 30 s after its lease object was replaced", n.NodeID)
	}
	err = n.Stop()
	log, _ := os.ReadFile(n.LogPath)
	if err == nil {
		t.Fatalf("keepnode exited without an error after its lease was replaced; log:\n%s", log)
	}
	for _, want := range []string{"node " + n.NodeID + ": its lease object in the bucket was replaced or removed", "another process running as node " + n.NodeID} {
		if !strings.Contains(string(log), want) {
			t.Errorf("keepnode's log does not say %q; log:\n%s", want, log)
		}
	}
}

// keepnode -compile-only, run beside a node on its data directory (as an
// operator runs a new build before it replaces the running one), compiles
// a class into the cache and exits 0, opening neither the node journal the
// running node holds nor any database; the next start takes the class
// from the cache, compiling nothing.
func TestCompileOnlyFillsTheCacheBesideARunningNode(t *testing.T) {
	ctx := testContext(t)
	cfg := nodeConfig(t, clusterproc.S3{Bucket: "unused"})
	running, err := clusterproc.StartNode(ctx, cfg, "node", "-bucket", "")
	if err != nil {
		t.Fatal(err)
	}
	defer running.Kill()
	cache := filepath.Join(running.DataDir, ".compilation-cache")
	before := cacheFiles(t, cache)

	// Another class: its code is not in the cache yet.
	other := filepath.Join(t.TempDir(), "counter.wasm")
	if err := os.WriteFile(other, testguest.Fixture(t, "bench_alarm"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, keepnodeBinary(t), "-compile-only", "-data", running.DataDir, "-class", "counter="+other).CombinedOutput()
	if err != nil {
		t.Fatalf("keepnode -compile-only beside a running node: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "class compiled into the cache") || !strings.Contains(string(out), "class=counter") {
		t.Errorf("keepnode -compile-only said %q, want a line naming the class compiled", out)
	}
	after := cacheFiles(t, cache)
	if len(after) != len(before)+1 {
		t.Fatalf("the cache held %d files before -compile-only and %d after, want one more", len(before), len(after))
	}
	if _, err := running.Client().Exec(ctx, abi.ActorID{Tenant: "t", Class: "oneshot", Name: "a"}, make([]byte, 8)); err != nil {
		t.Errorf("the running node after -compile-only beside it: %v", err)
	}
	if err := running.Stop(); err != nil {
		t.Fatal(err)
	}

	// The start with both classes compiles neither.
	cfg.Classes["counter"] = other
	n, err := clusterproc.StartNode(ctx, cfg, "node", "-bucket", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	for name, f := range cacheFiles(t, cache) {
		if g, ok := after[name]; !ok || !os.SameFile(f, g) {
			t.Errorf("cache file %s was written by the start after -compile-only: a class was compiled again", name)
		}
	}

	if out, err := exec.CommandContext(ctx, keepnodeBinary(t), "-compile-only", "-data", t.TempDir(), "-cache-dir", "off", "-class", "counter="+other).CombinedOutput(); err == nil || !strings.Contains(string(out), "-cache-dir off") {
		t.Errorf("keepnode -compile-only -cache-dir off: %v, %q; want an error naming -cache-dir off", err, out)
	}
}
