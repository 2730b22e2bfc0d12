package s3test

import (
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/bucket"
)

func TestMain(m *testing.M) { os.Exit(Run(m)) }

func TestStartGivesEachTestItsOwnBucket(t *testing.T) {
	a, b := Start(t), Start(t)
	if a.Name == b.Name {
		t.Fatalf("two Start calls share bucket %q", a.Name)
	}
	if !strings.HasPrefix(a.Endpoint, "http://127.0.0.1:") && os.Getenv("AWS_ENDPOINT_URL") == "" {
		t.Fatalf("the local server is not on 127.0.0.1: %s", a.Endpoint)
	}
	if _, err := a.Bucket.Put(t.Context(), "only-in-a", []byte("x"), bucket.Cond{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Bucket.Get(t.Context(), "only-in-a"); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("the key written to one test bucket shows in another: %v", err)
	}
	if err := a.Bucket.Check(t.Context()); err != nil {
		t.Fatalf("the server does not honour conditional writes: %v", err)
	}
	// A second client on the same bucket sees the same objects.
	body, _, err := a.NewClient(t).Get(t.Context(), "only-in-a")
	if err != nil || string(body) != "x" {
		t.Fatalf("NewClient: Get = %q, %v", body, err)
	}
}

func TestStartLocalKeepsItsFilesUnderDirAndRemovesThem(t *testing.T) {
	dir := t.TempDir()
	t.Run("server", func(t *testing.T) {
		srv := StartLocal(t, dir)
		if !strings.HasPrefix(srv.Endpoint, "http://127.0.0.1:") {
			t.Fatalf("the server is not on 127.0.0.1: %s", srv.Endpoint)
		}
		if shared := Start(t); shared.Endpoint == srv.Endpoint {
			t.Fatalf("StartLocal returned the shared server %s", srv.Endpoint)
		}
		if _, err := srv.Bucket.Put(t.Context(), "k", []byte("in dir"), bucket.Cond{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
		body, _, err := srv.NewClient(t).Get(t.Context(), "k")
		if err != nil || string(body) != "in dir" {
			t.Fatalf("Get = %q, %v", body, err)
		}
		found := false
		err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && d.Name() == "k" {
				found = true
			}
			return err
		})
		if err != nil || !found {
			t.Fatalf("the object is not stored under %s (walk: %v)", dir, err)
		}
	})
	// The subtest's end stopped the server and removed its files.
	left, err := os.ReadDir(dir)
	if err != nil || len(left) != 0 {
		t.Fatalf("after the test, %s holds %d entries (%v), want none", dir, len(left), err)
	}
}

func TestProxyFailsCountsAndDelays(t *testing.T) {
	var (
		mu     sync.Mutex
		served []string
	)
	backend := http.NewServeMux()
	backend.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served = append(served, r.Method+" "+r.Host)
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	})
	srv := &http.Server{Handler: backend}
	l := listen(t)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	p := NewProxy(t, "http://"+l.Addr().String())
	if !strings.HasPrefix(p.URL, "http://127.0.0.1:") {
		t.Fatalf("proxy URL %s is not on 127.0.0.1", p.URL)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	do := func(method string) (int, error) {
		req, _ := http.NewRequest(method, p.URL+"/b/k", nil)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	p.FailNext("PUT", 2, Respond503)
	p.FailNext("", 1, Drop)
	steps := []struct {
		method string
		status int // 0: the connection is dropped
	}{
		{"GET", 0}, // the any-method rule is queued behind the PUT rule but matches GET first
		{"PUT", 503},
		{"GET", 200},
		{"PUT", 503},
		{"PUT", 200},
		{"DELETE", 200},
	}
	for i, s := range steps {
		status, err := do(s.method)
		if s.status == 0 {
			if err == nil {
				t.Fatalf("step %d: %s answered %d, want a dropped connection", i, s.method, status)
			}
			continue
		}
		if err != nil || status != s.status {
			t.Fatalf("step %d: %s = %d, %v; want %d", i, s.method, status, err, s.status)
		}
	}
	if p.Count("GET") != 2 || p.Count("put") != 3 || p.Count("DELETE") != 1 || p.Count("") != 6 {
		t.Fatalf("counts GET %d PUT %d DELETE %d all %d", p.Count("GET"), p.Count("PUT"), p.Count("DELETE"), p.Count(""))
	}
	want := []string{"GET " + strings.TrimPrefix(p.URL, "http://"), "PUT " + strings.TrimPrefix(p.URL, "http://"), "DELETE " + strings.TrimPrefix(p.URL, "http://")}
	mu.Lock()
	got := strings.Join(served, ",")
	mu.Unlock()
	if got != strings.Join(want, ",") {
		t.Fatalf("backend served %q, want %q (only what passed, with the proxy's Host kept)", got, want)
	}

	// A delay longer than the client waits makes the request time out.
	p.SetDelay("GET", time.Minute)
	client.Timeout = 100 * time.Millisecond
	if _, err := do("GET"); err == nil {
		t.Fatal("a delayed GET answered within the client's timeout")
	}
	if status, err := do("PUT"); err != nil || status != 200 {
		t.Fatalf("PUT is not delayed: %d, %v", status, err)
	}
	p.SetDelay("GET", 0)
	if status, err := do("GET"); err != nil || status != 200 {
		t.Fatalf("GET after removing the delay: %d, %v", status, err)
	}
}

func listen(t *testing.T) net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}
