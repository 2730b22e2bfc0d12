package s3

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/encoding/httpbinding"

	"github.com/wasmkeep/alarms/bucket"
)

// captureDoer records the requests sent through it and answers each with
// 200 and an ETag, without a network.
type captureDoer struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (c *captureDoer) Do(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
	}
	c.mu.Lock()
	c.reqs = append(c.reqs, r)
	c.mu.Unlock()
	return &http.Response{StatusCode: 200, Header: http.Header{"Etag": {`"e"`}}, Body: http.NoBody, Request: r}, nil
}

func (c *captureDoer) last(t *testing.T) *http.Request {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.reqs) == 0 {
		t.Fatal("no request sent")
	}
	return c.reqs[len(c.reqs)-1]
}

// credentialScope is the "date/region/service/aws4_request" part of a SigV4
// Authorization header, and its signed headers.
func credentialScope(auth string) (scope, signed string) {
	for _, part := range strings.Split(strings.TrimPrefix(auth, "AWS4-HMAC-SHA256 "), ", ") {
		switch {
		case strings.HasPrefix(part, "Credential="):
			_, scope, _ = strings.Cut(strings.TrimPrefix(part, "Credential="), "/")
		case strings.HasPrefix(part, "SignedHeaders="):
			signed = strings.TrimPrefix(part, "SignedHeaders=")
		}
	}
	return scope, signed
}

// The lean PUT goes to the URL the SDK's PutObject goes to, whatever the
// addressing (virtual-hosted on AWS, path-style for a bucket name with
// dots and for a custom endpoint, an endpoint with a path of its own) and
// however odd the key, and signs for the same region and service.
func TestLeanPutAddressesAsTheSDK(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_PROFILE", "")
	ctx := context.Background()
	keys := []string{"k", "alarms/t/000123", "sp ace+plus%/ü☃", "/lead", "a//b", "trail/", "q?h#a&b=c;d"}
	for _, c := range []struct {
		name, bucket, endpoint, wantHost string
	}{
		{"aws-virtual-hosted", "my-bucket", "", "my-bucket.s3.eu-west-1.amazonaws.com"},
		{"aws-dotted-bucket", "my.bucket", "", "s3.eu-west-1.amazonaws.com"},
		{"custom-endpoint", "my-bucket", "http://127.0.0.1:9000", "127.0.0.1:9000"},
		{"custom-endpoint-with-path", "my-bucket", "http://127.0.0.1:9000/store/", "127.0.0.1:9000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := []Option{WithRegion("eu-west-1"), WithCredentials("AKID", "SECRET")}
			if c.endpoint != "" {
				opts = append(opts, WithEndpoint(c.endpoint))
			}
			b, err := New(ctx, c.bucket, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if b.lean == nil {
				t.Fatal("no lean PUT path")
			}
			sdkCap, leanCap := &captureDoer{}, &captureDoer{}
			lean, err := newLeanPut(ctx, b.client, c.bucket, leanCap, nil, nil, time.Minute, 1)
			if err != nil || lean == nil {
				t.Fatalf("newLeanPut: %v, %v", lean, err)
			}
			for _, key := range keys {
				body := []byte("body")
				if _, err := b.client.PutObject(ctx, &awss3.PutObjectInput{
					Bucket: aws.String(c.bucket), Key: aws.String(key), Body: strings.NewReader("body"),
					ContentLength: aws.Int64(4), IfNoneMatch: aws.String("*"),
				}, func(o *awss3.Options) { o.HTTPClient = sdkCap }); err != nil {
					t.Fatalf("SDK PUT %q: %v", key, err)
				}
				if _, err := lean.put(ctx, key, body, bucket.Cond{IfNoneMatch: true}); err != nil {
					t.Fatalf("lean PUT %q: %v", key, err)
				}
				s, l := sdkCap.last(t), leanCap.last(t)
				if s.URL.Scheme != l.URL.Scheme || s.URL.Host != l.URL.Host || s.URL.EscapedPath() != l.URL.EscapedPath() {
					t.Errorf("key %q: lean PUT to %s://%s%s, the SDK's to %s://%s%s", key,
						l.URL.Scheme, l.URL.Host, l.URL.EscapedPath(), s.URL.Scheme, s.URL.Host, s.URL.EscapedPath())
				}
				if l.URL.Host != c.wantHost {
					t.Errorf("key %q: host %q, want %q", key, l.URL.Host, c.wantHost)
				}
				sScope, _ := credentialScope(s.Header.Get("Authorization"))
				lScope, lSigned := credentialScope(l.Header.Get("Authorization"))
				if sScope != lScope || lScope == "" {
					t.Errorf("key %q: lean signs for %q, the SDK for %q", key, lScope, sScope)
				}
				for _, h := range []string{"host", "if-none-match", "x-amz-content-sha256", "x-amz-date"} {
					if !strings.Contains(";"+lSigned+";", ";"+h+";") {
						t.Errorf("key %q: %s is not signed (SignedHeaders=%s)", key, h, lSigned)
					}
				}
			}
		})
	}
}

// The bucket's HTTP client follows 307 and 308 redirects only, as the
// SDK's does: S3 answers 301 (often without a Location) for a bucket in
// another region, which is the caller's error to see, not a request to
// repeat elsewhere.
func TestLimitedRedirect(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/301", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusMovedPermanently) })
	mux.HandleFunc("/302", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/307", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusTemporaryRedirect) })
	mux.HandleFunc("/308", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusPermanentRedirect) })
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, _ = w.Write(append([]byte(r.Method+" "), body...))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := &http.Client{CheckRedirect: limitedRedirect}
	for path, want := range map[string]string{"/301": "301 ", "/302": "302 ", "/307": "200 PUT x", "/308": "200 PUT x"} {
		req, err := http.NewRequest(http.MethodPut, srv.URL+path, strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got := strconv.Itoa(resp.StatusCode) + " "
		if resp.StatusCode == http.StatusOK {
			got += string(body)
		}
		if got != want {
			t.Errorf("PUT %s: %q, want %q", path, got, want)
		}
	}
}

// escapeKey escapes every byte as the SDK does.
func TestEscapeKeyAsTheSDK(t *testing.T) {
	var all []byte
	for c := range 256 {
		all = append(all, byte(c))
	}
	for _, k := range []string{"", "alarms/t/000123", "a b", string(all), "ü☃/%2F"} {
		if got, want := escapeKey(k), httpbinding.EscapePath(k, false); got != want {
			t.Errorf("escapeKey(%q) = %q, the SDK's %q", k, got, want)
		}
	}
}

// The lean client carries http and https requests, and leaves to net/http
// those a proxy should carry and any other scheme.
func TestH1ClientOnlyWithoutAProxy(t *testing.T) {
	proxyURL, _ := url.Parse("http://127.0.0.1:3128")
	for _, c := range []struct {
		endpoint string
		proxy    func(*http.Request) (*url.URL, error)
		want     bool
		addr     string
	}{
		{"http://127.0.0.1:7070", nil, true, "127.0.0.1:7070"},
		{"https://s3.eu-west-1.amazonaws.com", nil, true, "s3.eu-west-1.amazonaws.com:443"},
		{"http://store.example", nil, true, "store.example:80"},
		{"https://[::1]:8443/base", nil, true, "[::1]:8443"},
		{"https://s3.eu-west-1.amazonaws.com", http.ProxyURL(proxyURL), false, ""},
		{"http://127.0.0.1:7070", func(*http.Request) (*url.URL, error) { return nil, nil }, true, "127.0.0.1:7070"},
		{"unix:///run/s3.sock", nil, false, ""},
	} {
		u, err := url.Parse(c.endpoint)
		if err != nil {
			t.Fatal(err)
		}
		h := newH1Client(u, &http.Transport{Proxy: c.proxy}, time.Minute, 4)
		if (h != nil) != c.want {
			t.Errorf("%s (proxy %v): own client %v, want %v", c.endpoint, c.proxy != nil, h != nil, c.want)
			continue
		}
		if h != nil && h.addr != c.addr {
			t.Errorf("%s: dials %s, want %s", c.endpoint, h.addr, c.addr)
		}
		if h != nil && (h.tlsConfig != nil) != (u.Scheme == "https") {
			t.Errorf("%s: TLS %v", c.endpoint, h.tlsConfig != nil)
		}
	}
}
