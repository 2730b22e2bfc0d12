package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyauth "github.com/aws/smithy-go/auth"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/bucket"
)

// leanPut sends PutObject requests (and DeleteObjects ones: leandelete.go)
// without the SDK's middleware stack: a
// request built here, signed with SigV4 (putSigner, the SDK signer's
// output for the same request) with the client's credentials, sent on the
// bucket's own HTTP/1.1 connections (h1Client; through the client's
// net/http client when a proxy is configured, and to follow a redirect),
// and retried by the client's own retryer on the errors the SDK would
// build for the same failure, so that what is retried, how many times and
// after what pause, is the SDK's decision. A PUT is a conditional write
// of a body the caller holds in memory; through the SDK it runs some
// fifty middlewares (flexible checksums, endpoint rules, user agent,
// recursion detection, retry metrics, XML deserialisation of an empty
// answer), each with its allocations, for what is one signed HTTP request
// whose answer is a status and an ETag.
//
// What it leaves out, against the SDK path: the per-attempt invocation
// and attempt headers (amz-sdk-invocation-id, amz-sdk-request), the
// SDK's user agent, the correction of a skewed local clock, Expect:
// 100-continue for bodies over 2 MiB, and on AWS (where the SDK adds a
// CRC32 checksum to every PUT) the flexible checksum: the payload is
// covered by the signature's SHA-256 over plain HTTP and by TLS over
// HTTPS.
type leanPut struct {
	client        httpDoer
	h1            *h1Client // nil: every attempt goes through client (net/http)
	timeout       time.Duration
	signer        *putSigner
	creds         aws.CredentialsProvider
	retryer       aws.Retryer
	base          url.URL // the bucket's endpoint, as the SDK resolves it
	baseRawPath   string  // its escaped path
	host          string  // the Host header: the endpoint's, without a default port
	signingName   string
	signingRegion string
	// unsignedPayload: over HTTPS the payload is not hashed into the
	// signature (UNSIGNED-PAYLOAD, as the SDK does for S3 over TLS); over
	// plain HTTP its SHA-256 is, or anyone on the path could change it.
	unsignedPayload bool
	metrics         *leanMetrics
}

type httpDoer interface {
	Do(*http.Request) (*http.Response, error)
}

// leanMetrics are the S3 metrics' series for PutObject, looked up once.
type leanMetrics struct {
	*s3Metrics
	ok       prometheus.Counter
	duration prometheus.Observer
	attempts prometheus.Counter
}

const putObject = "PutObject"

// newLeanPut prepares the lean path for client's PUTs into bucketName, or
// returns nil (the SDK path then serves every PUT) when the client is
// configured in a way it does not cover: an endpoint whose auth scheme is
// not SigV4 (SigV4a multi-region access points, S3 Express), no
// credentials, or anonymous ones. With tr (the transport under hc), the
// PUTs go on the bucket's own HTTP/1.1 connections (h1Client) with tr's
// TLS configuration and idle timeout, each attempt bounded by timeout,
// unless tr sends requests to the endpoint through a proxy; without it,
// or then, through hc.
func newLeanPut(ctx context.Context, client *awss3.Client, bucketName string, hc httpDoer, m *s3Metrics,
	tr *http.Transport, timeout time.Duration, maxIdle int) (*leanPut, error) {
	o := client.Options()
	if o.Credentials == nil {
		return nil, nil
	}
	if _, anon := o.Credentials.(aws.AnonymousCredentials); anon {
		return nil, nil
	}
	if o.EndpointResolverV2 == nil {
		return nil, nil
	}
	// The parameters the SDK binds for PutObject (bindEndpointParams); the
	// key is not among those the rules read (see endpointCache).
	p := awss3.EndpointParameters{
		Bucket:                         aws.String(bucketName),
		Region:                         aws.String(o.Region),
		UseFIPS:                        aws.Bool(o.EndpointOptions.UseFIPSEndpoint == aws.FIPSEndpointStateEnabled),
		UseDualStack:                   aws.Bool(o.EndpointOptions.UseDualStackEndpoint == aws.DualStackEndpointStateEnabled),
		Endpoint:                       o.BaseEndpoint,
		ForcePathStyle:                 aws.Bool(o.UsePathStyle),
		Accelerate:                     aws.Bool(o.UseAccelerate),
		DisableMultiRegionAccessPoints: aws.Bool(o.DisableMultiRegionAccessPoints),
		UseArnRegion:                   aws.Bool(o.UseARNRegion),
		DisableS3ExpressSessionAuth:    o.DisableS3ExpressSessionAuth,
	}
	e, err := o.EndpointResolverV2.ResolveEndpoint(ctx, p.WithDefaults())
	if err != nil {
		return nil, fmt.Errorf("resolving the endpoint: %w", err)
	}
	opts, _ := smithyauth.GetAuthOptions(&e.Properties)
	// The endpoint rules name the scheme "sigv4" ("sigv4a" and
	// "sigv4-s3express" are the others).
	if len(opts) == 0 || (opts[0].SchemeID != "sigv4" && opts[0].SchemeID != smithyauth.SchemeIDSigV4) {
		return nil, nil
	}
	name, ok := smithyhttp.GetSigV4SigningName(&opts[0].SignerProperties)
	if !ok {
		name = "s3"
	}
	region, ok := smithyhttp.GetSigV4SigningRegion(&opts[0].SignerProperties)
	if !ok {
		region = o.Region
	}
	if len(e.Headers) > 0 || e.URI.RawQuery != "" {
		return nil, nil // an endpoint that wants more than a URL
	}
	l := &leanPut{
		client:          hc,
		timeout:         timeout,
		signer:          &putSigner{service: name, region: region},
		creds:           o.Credentials,
		retryer:         o.Retryer,
		base:            e.URI,
		baseRawPath:     e.URI.EscapedPath(),
		host:            signingHost(e.URI.Scheme, e.URI.Host),
		signingName:     name,
		signingRegion:   region,
		unsignedPayload: e.URI.Scheme == "https",
	}
	if tr != nil {
		l.h1 = newH1Client(&e.URI, tr, timeout, maxIdle)
	}
	if m != nil {
		l.metrics = &leanMetrics{
			s3Metrics: m,
			ok:        m.requests.WithLabelValues(putObject, ResultOK),
			duration:  m.duration.WithLabelValues(putObject),
			attempts:  m.attempts.WithLabelValues(putObject),
		}
	}
	return l, nil
}

// escapeKey escapes key as httpbinding.EscapePath(key, false) does, without
// its formatted write per escaped byte; a key that needs no escaping (as
// the index's and the snapshots' keys) is returned as it is.
func escapeKey(key string) string {
	n := 0
	for i := 0; i < len(key); i++ {
		if !keepInPath(key[i]) {
			n++
		}
	}
	if n == 0 {
		return key
	}
	const hexUpper = "0123456789ABCDEF"
	b := make([]byte, 0, len(key)+2*n)
	for i := 0; i < len(key); i++ {
		c := key[i]
		if keepInPath(c) {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hexUpper[c>>4], hexUpper[c&15])
	}
	return string(b)
}

// keepInPath reports whether S3 takes c unescaped in a key's path: ASCII
// letters and digits, "-._~" and the separator "/".
func keepInPath(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~' || c == '/'
}

// put stores body under key if cond holds and returns the ETag, with the
// SDK's retries: it ends in the errors the SDK's PutObject returns for the
// same answers, so classify and the metrics read them alike.
func (l *leanPut) put(ctx context.Context, key string, body []byte, cond bucket.Cond) (string, error) {
	start := time.Now()
	etag, err := l.attempts(ctx, key, body, cond)
	if err != nil {
		err = &smithy.OperationError{ServiceID: "S3", OperationName: putObject, Err: err}
	}
	if m := l.metrics; m != nil {
		m.duration.Observe(time.Since(start).Seconds())
		if err == nil {
			m.ok.Inc()
		} else {
			m.requests.WithLabelValues(putObject, requestResult(ctx, err)).Inc()
		}
	}
	return etag, err
}

// unsignedPayloadHash is what X-Amz-Content-Sha256 carries for a payload
// left out of the signature.
const unsignedPayloadHash = "UNSIGNED-PAYLOAD"

// emptyPayloadHash is the SHA-256 of an empty payload (an index entry's).
const emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// attempts is one PUT with the SDK's retries.
func (l *leanPut) attempts(ctx context.Context, key string, body []byte, cond bucket.Cond) (string, error) {
	if err := validHeaderValue(cond.IfMatch); err != nil {
		return "", fmt.Errorf("If-Match %q: %w", cond.IfMatch, err)
	}
	rawPath := smithyhttp.JoinPath(l.baseRawPath, "/"+escapeKey(key))
	hash := unsignedPayloadHash
	switch {
	case l.unsignedPayload:
	case len(body) == 0:
		hash = emptyPayloadHash
	default:
		sum := sha256.Sum256(body)
		hash = hex.EncodeToString(sum[:])
	}
	var etag string
	err := l.retry(ctx, func() error {
		var err error
		etag, err = l.send(ctx, key, rawPath, body, cond, hash)
		return err
	})
	return etag, err
}

// retry is the SDK's retry loop (retry.Attempt) around send, one attempt
// of an operation.
func (l *leanPut) retry(ctx context.Context, send func() error) error {
	maxAttempts := l.retryer.MaxAttempts()
	releaseRetry := func(error) error { return nil }
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		release, err := l.attemptToken(ctx)
		if err != nil {
			return fmt.Errorf("failed to get retry Send token, %w", err)
		}
		err = send()
		_ = releaseRetry(err)
		_ = release(err)
		if err == nil {
			return nil
		}
		if !l.retryer.IsErrorRetryable(err) {
			return err
		}
		if maxAttempts > 0 && attempt >= maxAttempts {
			return &retry.MaxAttemptsError{Attempt: attempt, Err: err}
		}
		var tokenErr error
		if releaseRetry, tokenErr = l.retryer.GetRetryToken(ctx, err); tokenErr != nil {
			return errors.Join(err, tokenErr)
		}
		delay, derr := l.retryer.RetryDelay(attempt, err)
		if derr != nil {
			return derr
		}
		if serr := bucket.Sleep(ctx, retryAfter(delay, err)); serr != nil {
			return &aws.RequestCanceledError{Err: serr}
		}
	}
}

// validHeaderValue refuses what would end a header line early or break
// it: control characters other than a tab.
func validHeaderValue(v string) error {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return fmt.Errorf("control character %#02x in a header value", c)
		}
	}
	return nil
}

func (l *leanPut) attemptToken(ctx context.Context) (func(error) error, error) {
	if r, ok := l.retryer.(aws.RetryerV2); ok {
		return r.GetAttemptToken(ctx)
	}
	return l.retryer.GetInitialToken(), nil
}

// retryAfter honours the store's X-Amz-Retry-After (milliseconds) within
// [backoff, backoff+5s], as the SDK's retry loop does.
func retryAfter(backoff time.Duration, err error) time.Duration {
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.Response == nil || re.Response.Response == nil {
		return backoff
	}
	v := re.Response.Header.Get("X-Amz-Retry-After")
	if v == "" {
		return backoff
	}
	ms, perr := strconv.ParseInt(v, 10, 64)
	if perr != nil || ms < 0 {
		return backoff
	}
	return min(max(time.Duration(ms)*time.Millisecond, backoff), backoff+5*time.Second)
}

// send makes one attempt, on the lean HTTP/1.1 client when there is one.
// The body is read from the caller's slice, never copied (but into one
// TLS record with the head when it is small); each attempt gets a fresh
// signature.
func (l *leanPut) send(ctx context.Context, key, rawPath string, body []byte, cond bucket.Cond, hash string) (string, error) {
	if l.metrics != nil {
		l.metrics.attempts.Inc()
	}
	creds, err := l.attempt(ctx)
	if err != nil {
		return "", err
	}
	t := newSigTime(time.Now())
	ph := putHeaders{payloadHash: hash, ifMatch: cond.IfMatch, securityToken: creds.SessionToken}
	if cond.IfNoneMatch {
		ph.ifNoneMatch = "*"
	}
	auth := l.signer.authorization(creds, t, l.host, rawPath, int64(len(body)), ph)
	if l.h1 != nil {
		etag, err := l.sendH1(ctx, rawPath, body, t, ph, auth)
		re, ok := err.(*redirected)
		if !ok {
			return etag, err
		}
		to, perr := l.keyURL(key, rawPath).Parse(re.location)
		if perr != nil {
			return "", &smithyhttp.RequestSendError{Err: fmt.Errorf("redirect to %q: %w", re.location, perr)}
		}
		// The attempt is counted already: net/http's is not another.
		return l.sendStd(context.WithValue(ctx, attemptsKey{}, nil), to, body, t, ph, auth)
	}
	return l.sendStd(ctx, l.keyURL(key, rawPath), body, t, ph, auth)
}

// keyURL is the URL of key in the bucket, whose escaped path is rawPath.
func (l *leanPut) keyURL(key, rawPath string) *url.URL {
	u := l.base
	u.User = nil
	u.Path = smithyhttp.JoinPath(l.base.Path, "/"+key)
	u.RawPath = rawPath
	return &u
}

// heads are the buffers the lean client writes request heads into.
var heads = sync.Pool{New: func() any { b := make([]byte, 0, 1<<10); return &b }}

// sendH1 sends the signed PUT on the lean HTTP/1.1 client.
func (l *leanPut) sendH1(ctx context.Context, rawPath string, body []byte, t sigTime, ph putHeaders, auth string) (string, error) {
	bp := heads.Get().(*[]byte)
	defer heads.Put(bp)
	h := append((*bp)[:0], "PUT "...)
	h = append(h, rawPath...)
	h = append(h, " HTTP/1.1\r\nHost: "...)
	h = append(h, l.host...)
	h = append(h, "\r\nUser-Agent: wasmkeep-alarms\r\nContent-Length: "...)
	h = strconv.AppendInt(h, int64(len(body)), 10)
	if ph.ifNoneMatch != "" {
		h = append(h, "\r\nIf-None-Match: "...)
		h = append(h, ph.ifNoneMatch...)
	}
	if ph.ifMatch != "" {
		h = append(h, "\r\nIf-Match: "...)
		h = append(h, ph.ifMatch...)
	}
	h = append(h, "\r\nX-Amz-Content-Sha256: "...)
	h = append(h, ph.payloadHash...)
	h = appendAuthHeaders(h, t.amzDate, ph.securityToken, auth)
	*bp = h

	deadline := l.deadline(ctx)
	var etag string
	var failed error
	err := l.h1.roundTrip(ctx, deadline, h, body, false, func(a *okAnswer, resp *http.Response) bool {
		if a != nil {
			etag = a.etag
			return true
		}
		switch {
		case resp.StatusCode >= 200 && resp.StatusCode < 300:
			etag = resp.Header.Get("ETag")
			return drain(resp.Body)
		case (resp.StatusCode == http.StatusTemporaryRedirect || resp.StatusCode == http.StatusPermanentRedirect) &&
			resp.Header.Get("Location") != "":
			failed = &redirected{location: resp.Header.Get("Location")}
			return drain(resp.Body)
		}
		failed = responseError(resp)
		return drain(resp.Body) // at its end unless reading it failed
	})
	if err != nil {
		return "", sendError(ctx, err)
	}
	return etag, failed
}

// sendStd sends the signed PUT to u through net/http: the lean path
// without its own client (a proxy, an unusual scheme), and a PUT the store
// redirected (net/http follows any further 307 and 308, see
// limitedRedirect). The Host header is the endpoint's on the endpoint's
// host, as net/http keeps it when it follows a redirect.
func (l *leanPut) sendStd(ctx context.Context, u *url.URL, body []byte, t sigTime, ph putHeaders, auth string) (string, error) {
	h := make(http.Header, 7)
	h["X-Amz-Content-Sha256"] = []string{ph.payloadHash}
	h["X-Amz-Date"] = []string{t.amzDate}
	h["Authorization"] = []string{auth}
	if ph.securityToken != "" {
		h["X-Amz-Security-Token"] = []string{ph.securityToken}
	}
	if ph.ifNoneMatch != "" {
		h["If-None-Match"] = []string{ph.ifNoneMatch}
	}
	if ph.ifMatch != "" {
		h["If-Match"] = []string{ph.ifMatch}
	}
	resp, err := l.doStd(ctx, http.MethodPut, u, h, body)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, resp.Body) // keep the connection for reuse
		return resp.Header.Get("ETag"), nil
	}
	return "", responseError(resp)
}

// responseError is the error the SDK's S3 deserialiser makes of a failed
// answer: the code and message of the XML body, or derived from the
// status when the body has neither, wrapped with the response (status,
// request ID) as awshttp.ResponseError.
func responseError(resp *http.Response) error {
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_, _ = io.Copy(io.Discard, resp.Body)
	var apiErr error
	var c struct {
		Code      string `xml:"Code"`
		Message   string `xml:"Message"`
		RequestID string `xml:"RequestId"`
	}
	switch {
	case rerr != nil:
		apiErr = &smithy.DeserializationError{Err: fmt.Errorf("failed to copy error response body, %w", rerr)}
	default:
		if err := xml.NewDecoder(bytes.NewReader(body)).Decode(&c); err != nil && err != io.EOF {
			apiErr = fmt.Errorf("error while deserializing xml error response : %w", err)
			break
		}
		if c.Code == "" && c.Message == "" {
			text := http.StatusText(resp.StatusCode)
			c.Code, c.Message = strings.ReplaceAll(text, " ", ""), text
		}
		if c.Code == "" {
			c.Code = "UnknownError"
		}
		if c.Message == "" {
			c.Message = c.Code
		}
		apiErr = &smithy.GenericAPIError{Code: c.Code, Message: c.Message}
	}
	reqID := c.RequestID
	if reqID == "" {
		reqID = resp.Header.Get("X-Amz-Request-Id")
	}
	return &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: resp}, Err: apiErr},
		RequestID:     reqID,
	}
}

// appendAuthHeaders ends the head of a lean request: its date, its session
// token if any, its signature and the blank line.
func appendAuthHeaders(h []byte, amzDate, securityToken, auth string) []byte {
	h = append(h, "\r\nX-Amz-Date: "...)
	h = append(h, amzDate...)
	if securityToken != "" {
		h = append(h, "\r\nX-Amz-Security-Token: "...)
		h = append(h, securityToken...)
	}
	h = append(h, "\r\nAuthorization: "...)
	h = append(h, auth...)
	return append(h, "\r\n\r\n"...)
}

// deadline is when an attempt on the lean path gives up: its timeout, or
// the context's deadline if that comes first.
func (l *leanPut) deadline(ctx context.Context) time.Time {
	deadline := time.Now().Add(l.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		return d
	}
	return deadline
}

// attempt begins one attempt of a lean request: it counts the attempt for
// a caller that counts them (attemptCounter counts those through net/http
// itself) and returns the credentials to sign it with.
func (l *leanPut) attempt(ctx context.Context) (aws.Credentials, error) {
	if n, ok := ctx.Value(attemptsKey{}).(*atomic.Int32); ok && l.h1 != nil {
		n.Add(1)
	}
	creds, err := l.creds.Retrieve(ctx)
	if err != nil {
		return creds, fmt.Errorf("failed to retrieve credentials: %w", err)
	}
	if err := validHeaderValue(creds.SessionToken); err != nil {
		return creds, fmt.Errorf("the session token: %w", err)
	}
	return creds, nil
}

// doStd sends a signed lean request through net/http. The Host header is
// the endpoint's on the endpoint's host, as net/http keeps it when it
// follows a redirect. The body is sent from the caller's slice and can be
// sent again on a redirect.
func (l *leanPut) doStd(ctx context.Context, method string, u *url.URL, h http.Header, body []byte) (*http.Response, error) {
	host := l.host
	if u.Host != l.base.Host {
		host = u.Host
	}
	req := &http.Request{
		Method:        method,
		URL:           u,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Host:          host,
		ContentLength: int64(len(body)),
	}
	if len(body) > 0 {
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	resp, err := l.client.Do(req.WithContext(ctx))
	if err != nil {
		return nil, sendError(ctx, err)
	}
	return resp, nil
}

// sendError is what a failure to send a request is, as the SDK's HTTP
// handler makes it: a connection error (retried), unless the caller's
// context ended.
func sendError(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return &smithy.CanceledError{Err: cerr}
	}
	return &smithyhttp.RequestSendError{Err: err}
}
