package s3

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// readOK takes from a 2xx answer what net/http's ReadResponse does (the
// ETag; where the body ends; whether the connection stays open), reads
// exactly the answer and nothing after it, and leaves any other answer
// unread for ReadResponse.
func TestReadOKAsNetHTTP(t *testing.T) {
	long := strings.Repeat("v", 10<<10)
	for _, c := range []struct {
		name, answer string
		fast, reuse  bool
		wantErr      bool
	}{
		{"plain", "HTTP/1.1 200 OK\r\nETag: \"a\"\r\nContent-Length: 0\r\n\r\n", true, true, false},
		{"lower-case", "HTTP/1.1 200 OK\r\netag:   \"b\" \r\ncontent-length:0\r\nx-amz-request-id: 1\r\n\r\n", true, true, false},
		{"bare-lf", "HTTP/1.1 200 OK\nETag: \"c\"\nContent-Length: 0\n\n", true, true, false},
		{"body", "HTTP/1.1 200 OK\r\nETag: \"d\"\r\nContent-Length: 5\r\n\r\nhello", true, true, false},
		{"close", "HTTP/1.1 200 OK\r\nETag: \"e\"\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", true, false, false},
		{"close-among-tokens", "HTTP/1.1 200 OK\r\nETag: \"f\"\r\nConnection: keep-alive, Close\r\nContent-Length: 0\r\n\r\n", true, false, false},
		{"chunked", "HTTP/1.1 200 OK\r\nETag: \"g\"\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true, false, false},
		{"no-length", "HTTP/1.1 200 OK\r\nETag: \"h\"\r\n\r\n", true, false, false},
		{"no-content", "HTTP/1.1 204 No Content\r\nETag: \"i\"\r\n\r\n", true, true, false},
		{"long-header", "HTTP/1.1 200 OK\r\nX-Amz-Meta-Big: " + long + "\r\nETag: \"j\"\r\nContent-Length: 0\r\n\r\n", true, true, false},
		{"two-lengths", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nContent-Length: 3\r\n\r\nabc", true, false, true},
		{"truncated", "HTTP/1.1 200 OK\r\nETag: \"k\"\r\nContent-Le", true, false, true},
		{"truncated-body", "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\nabc", true, false, true},
		{"http-1.0", "HTTP/1.0 200 OK\r\nETag: \"l\"\r\nContent-Length: 0\r\n\r\n", false, false, false},
		{"precondition", "HTTP/1.1 412 Precondition Failed\r\nContent-Length: 0\r\n\r\n", false, false, false},
		{"continue", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			const next = "HTTP/1.1 200 OK\r\n" // the start of what follows on the connection
			br := bufio.NewReaderSize(strings.NewReader(c.answer+next), 4<<10)
			a, fast, err := readOK(br)
			if fast != c.fast || (err != nil) != c.wantErr {
				t.Fatalf("fast %v, err %v; want fast %v, an error %v", fast, err, c.fast, c.wantErr)
			}
			if !fast {
				if rest, _ := io.ReadAll(br); string(rest) != c.answer+next {
					t.Fatalf("read %d bytes of an answer it leaves to ReadResponse", len(c.answer+next)-len(rest))
				}
				return
			}
			if err != nil {
				return
			}
			resp, rerr := http.ReadResponse(bufio.NewReader(strings.NewReader(c.answer)), putMethod)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if a.status != resp.StatusCode || a.etag != resp.Header.Get("ETag") {
				t.Errorf("status %d, ETag %q; ReadResponse: %d, %q", a.status, a.etag, resp.StatusCode, resp.Header.Get("ETag"))
			}
			if a.reuse != c.reuse {
				t.Errorf("reuse %v, want %v", a.reuse, c.reuse)
			}
			if a.reuse {
				if rest, _ := io.ReadAll(br); string(rest) != next {
					t.Errorf("left %q after the answer, want %q", rest, next)
				}
			}
		})
	}
}

// A request that fails on a reused connection before any byte of it left
// (the connection broke while idle, unseen) is sent on a new connection,
// once, as net/http does; the server sees it once.
func TestH1ResendsWhatWasNotWritten(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		requests.Add(1)
		w.Header().Set("ETag", `"new"`)
	}))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := newH1Client(u, &http.Transport{}, time.Minute, 4)
	dead, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	dead.Close() // writing on it fails at once, nothing written
	c.idle = []*h1Conn{{conn: dead, br: bufio.NewReader(dead), idleSince: time.Now()}}
	head := []byte("PUT /b/k HTTP/1.1\r\nHost: " + u.Host + "\r\nContent-Length: 1\r\n\r\n")
	var etag string
	err = c.roundTrip(context.Background(), time.Now().Add(time.Minute), head, []byte("x"), false, func(a *okAnswer, _ *http.Response) bool {
		if a != nil {
			etag = a.etag
		}
		return true
	})
	if err != nil || etag != `"new"` {
		t.Fatalf("PUT on a broken idle connection: ETag %q, %v", etag, err)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("the server saw %d requests, want 1", n)
	}
	if len(c.idle) != 1 || c.idle[0].conn == dead {
		t.Fatalf("the pool holds %d connections after the PUT (the broken one: %v), want the new one", len(c.idle), len(c.idle) > 0 && c.idle[0].conn == dead)
	}
	c.closeIdle()
}

// A connection left idle is closed after the idle timeout even when no
// other request comes to find it stale.
func TestH1ClosesIdleConnectionsAfterTheTimeout(t *testing.T) {
	closed := make(chan struct{}, 4)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			closed <- struct{}{}
		}
	}
	srv.Start()
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := newH1Client(u, &http.Transport{IdleConnTimeout: 100 * time.Millisecond}, time.Minute, 4)
	head := []byte("PUT /b/k HTTP/1.1\r\nHost: " + u.Host + "\r\nContent-Length: 0\r\n\r\n")
	for range 2 { // the second on the first's connection
		if err := c.roundTrip(context.Background(), time.Now().Add(time.Minute), head, nil, false,
			func(*okAnswer, *http.Response) bool { return true }); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the idle connection is still open 10 s after its idle timeout of 100 ms")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.idle) != 0 || c.timer != nil {
		t.Fatalf("after the timeout the pool holds %d connections (timer set: %v)", len(c.idle), c.timer != nil)
	}
}
