// Package s3 is the bucket.Bucket of an S3-compatible store (AWS S3,
// versitygw, MinIO, ...), over aws-sdk-go-v2: create one with New, and
// configure it with the With options and the SDK's environment variables.
//
// It is a package of its own so that the AWS SDK is built only into the
// programs that talk to S3: package bucket (the interface, the in-memory
// bucket), the plugin, its host module and the alarm index do not import it.
package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmkeep/alarms/bucket"
)

// Defaults of the S3 client's options.
const (
	// DefaultMaxAttempts is how many HTTP requests one operation may send
	// (the first and its retries).
	DefaultMaxAttempts = 3
	// DefaultRetryMaxBackoff caps the pause between two attempts.
	DefaultRetryMaxBackoff = 2 * time.Second
	// DefaultRequestTimeout bounds each attempt, from dialling to reading
	// the whole response.
	DefaultRequestTimeout = 30 * time.Second
	// DefaultRegion is used when neither an option nor the environment
	// names a region.
	DefaultRegion = "us-east-1"
	// DefaultMaxIdleConns is how many idle connections to the store the
	// client keeps for reuse: a node's deliveries in flight (64 by default)
	// plus its uploads, prunes, lease renewals and sweeps.
	DefaultMaxIdleConns = 128
)

// writeBufferSize is each connection's write buffer. A request whose
// headers and body fit in it is copied into it and written with one
// system call; net/http's default of 4 KiB sends a snapshot in two writes
// and copies its remainder through a buffer allocated for each request.
// Snapshots of small actors are a few KiB to a few tens of KiB.
const writeBufferSize = 64 << 10

// Bucket is a bucket.Bucket on an S3-compatible store, through
// aws-sdk-go-v2. Create it with New. It is safe for concurrent use.
//
// PUTs, the requests a node sends for every replicated firing, bypass the
// SDK's middleware stack: they are built, signed (SigV4) and sent on
// connections of their own in lean.go and retried by the SDK's retryer,
// with the same outcomes, attempts and metrics as the SDK's PutObject
// (over HTTPS the payload is left out of the signature, as the SDK does;
// over plain HTTP its SHA-256 is signed). So do multi-object deletes
// (leandelete.go), which a node sends every few dozen firings, with the
// SDK's DeleteObjects' outcomes (their payload's SHA-256 always signed),
// and GETs of a whole object (leanget.go), two of which a takeover sends.
// Every other operation goes through the SDK.
type Bucket struct {
	client *awss3.Client
	lean   *leanPut // PUTs, GETs and multi-object deletes without the SDK's middleware stack; nil: through the SDK
	name   string
	pages  atomic.Int64
	tracer trace.Tracer // nil: no spans (WithTracerProvider)
}

// Option configures New.
type Option func(*options)

type options struct {
	endpoint       string
	region         string
	accessKey      string
	secretKey      string
	maxAttempts    int
	maxBackoff     time.Duration
	requestTimeout time.Duration
	maxIdleConns   int
	registerer     prometheus.Registerer
	tracerProvider trace.TracerProvider
}

// WithEndpoint sets the store's URL (such as http://127.0.0.1:7070),
// overriding AWS_ENDPOINT_URL. An endpoint outside amazonaws.com gets
// path-style addressing and checksums only where the API requires them.
func WithEndpoint(url string) Option { return func(o *options) { o.endpoint = url } }

// WithRegion sets the region, overriding AWS_REGION.
func WithRegion(region string) Option { return func(o *options) { o.region = region } }

// WithCredentials sets static credentials, overriding AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY.
func WithCredentials(accessKeyID, secretAccessKey string) Option {
	return func(o *options) { o.accessKey, o.secretKey = accessKeyID, secretAccessKey }
}

// WithMaxAttempts bounds the HTTP requests one operation sends, retries
// included (default DefaultMaxAttempts; 1 disables retries). The SDK's
// standard retryer decides what is retried: 5xx responses, throttling,
// connection errors and timeouts. It ignores AWS_MAX_ATTEMPTS.
func WithMaxAttempts(n int) Option { return func(o *options) { o.maxAttempts = n } }

// WithRetryMaxBackoff caps the jittered pause between attempts (default
// DefaultRetryMaxBackoff).
func WithRetryMaxBackoff(d time.Duration) Option {
	return func(o *options) { o.maxBackoff = d }
}

// WithRequestTimeout bounds each HTTP attempt, from dialling to reading the
// response body (default DefaultRequestTimeout). A timed-out attempt is
// retried within the attempt bound; the request may still land at the store.
func WithRequestTimeout(d time.Duration) Option {
	return func(o *options) { o.requestTimeout = d }
}

// WithMaxIdleConns sets how many idle connections to the store the client
// keeps open for reuse (default DefaultMaxIdleConns), in each of its two
// pools: the PUTs' and the other operations'. Size it for the requests a
// process has in flight at once: a request that finds no idle connection
// dials a new one, and one returned to a full pool is closed.
func WithMaxIdleConns(n int) Option { return func(o *options) { o.maxIdleConns = n } }

// New returns a client for the named bucket. Configuration comes from the
// environment as the SDK reads it (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_REGION, shared config files), then opts; the
// region defaults to us-east-1. It does not contact the store: see
// EnsureBucket and Check.
func New(ctx context.Context, bucketName string, opts ...Option) (*Bucket, error) {
	if bucketName == "" {
		return nil, errors.New("s3.New: empty bucket name")
	}
	o := options{
		maxAttempts:    DefaultMaxAttempts,
		maxBackoff:     DefaultRetryMaxBackoff,
		requestTimeout: DefaultRequestTimeout,
		maxIdleConns:   DefaultMaxIdleConns,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxAttempts < 1 {
		return nil, fmt.Errorf("bucket %q: max attempts %d: must be at least 1", bucketName, o.maxAttempts)
	}
	if o.maxIdleConns < 1 {
		return nil, fmt.Errorf("bucket %q: max idle connections %d: must be at least 1", bucketName, o.maxIdleConns)
	}
	if o.requestTimeout <= 0 || o.maxBackoff < 0 {
		return nil, fmt.Errorf("bucket %q: request timeout and retry backoff must be positive", bucketName)
	}

	retryer := func() aws.Retryer {
		return retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = o.maxAttempts
			so.MaxBackoff = o.maxBackoff
			// No process-wide retry quota: every operation gets its own
			// bounded attempts, whatever others did before it.
			so.RateLimiter = ratelimit.None
		})
	}
	loadOpts := []func(*config.LoadOptions) error{
		config.WithRetryer(retryer),
	}
	if o.region != "" {
		loadOpts = append(loadOpts, config.WithRegion(o.region))
	}
	if o.accessKey != "" || o.secretKey != "" {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(o.accessKey, o.secretKey, "")))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("bucket %q: loading the S3 configuration: %w", bucketName, err)
	}
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	if _, anon := cfg.Credentials.(aws.AnonymousCredentials); cfg.Credentials != nil && !anon {
		cfg.Credentials = namedCredentials{cfg.Credentials}
	}
	// The SDK's buildable client carries AWS_CA_BUNDLE if set; its
	// transport, with the dial timeout and pool size set here, is the one
	// net/http transport of the bucket, under one http.Client that bounds
	// each attempt and counts attempts, for the SDK's requests (and the
	// lean PUTs that go through net/http: behind a proxy, or redirected).
	// One client serves every request of the bucket, as the SDK advises;
	// the pool is sized so concurrent requests reuse their connections
	// rather than dial (Go's default keeps two idle per host). The lean
	// PUTs' own connections (h1Client) take the transport's TLS
	// configuration, idle timeout and the same pool size. The http.Client holds the
	// *http.Transport itself, not wrapped as the buildable client wraps
	// it, so that its timeout costs a context deadline per request rather
	// than a timer goroutine.
	hc, ok := cfg.HTTPClient.(*awshttp.BuildableClient)
	if !ok || hc == nil {
		hc = awshttp.NewBuildableClient()
	}
	hc = hc.WithDialerOptions(func(d *net.Dialer) { d.Timeout = min(o.requestTimeout, 10*time.Second) }).
		WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConns = max(tr.MaxIdleConns, o.maxIdleConns)
			tr.MaxIdleConnsPerHost = o.maxIdleConns
			tr.WriteBufferSize = writeBufferSize
		})
	tr := hc.GetTransport()
	doer := attemptCounter{&http.Client{
		Transport:     tr,
		Timeout:       o.requestTimeout,
		CheckRedirect: limitedRedirect,
	}}
	cfg.HTTPClient = doer
	var metrics *s3Metrics
	if o.registerer != nil {
		if metrics, err = newS3Metrics(o.registerer); err != nil {
			return nil, fmt.Errorf("bucket %q: registering the S3 metrics: %w", bucketName, err)
		}
	}
	client := awss3.NewFromConfig(cfg, func(so *awss3.Options) {
		if o.endpoint != "" {
			so.BaseEndpoint = aws.String(o.endpoint)
		}
		// The endpoint rules run once per distinct set of parameters, not
		// once per request.
		so.EndpointResolverV2 = newEndpointCache(awss3.NewDefaultEndpointResolverV2())
		so.Retryer = retryer()
		so.RetryMaxAttempts = 0 // keep AWS_MAX_ATTEMPTS from overriding the bound
		if so.BaseEndpoint != nil && !isAWSEndpoint(*so.BaseEndpoint) {
			so.UsePathStyle = true
			so.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		}
		if metrics != nil {
			so.APIOptions = append(so.APIOptions, metrics.addTo)
		}
	})
	lean, err := newLeanPut(ctx, client, bucketName, doer, metrics, tr, o.requestTimeout, o.maxIdleConns)
	if err != nil {
		return nil, fmt.Errorf("bucket %q: %w", bucketName, err)
	}
	b := &Bucket{client: client, lean: lean, name: bucketName}
	if o.tracerProvider != nil {
		b.tracer = o.tracerProvider.Tracer(TracerName)
	}
	return b, nil
}

func isAWSEndpoint(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	h := u.Hostname()
	return strings.HasSuffix(h, ".amazonaws.com") || strings.HasSuffix(h, ".amazonaws.com.cn")
}

// Name returns the bucket's name.
func (b *Bucket) Name() string { return b.name }

// Client returns the underlying SDK client, for what the Bucket interface
// does not cover (such as removing a test bucket).
func (b *Bucket) Client() *awss3.Client { return b.client }

// ListPagesSent returns how many LIST requests (pages) this client has sent
// since it was created, failed ones included and retries not counted.
func (b *Bucket) ListPagesSent() int64 { return b.pages.Load() }

// attemptsKey carries an *atomic.Int32 that counts the HTTP attempts of one
// operation.
type attemptsKey struct{}

// attemptCounter is the bucket's HTTP client, counting the attempts of the
// operation whose context carries attemptsKey.
type attemptCounter struct{ next *http.Client }

// limitedRedirect follows only 307 and 308 redirects (they keep the method
// and body), as the SDK's own HTTP client does, and drops a session token
// on the way to another host; any other 3xx is returned as the answer.
func limitedRedirect(r *http.Request, via []*http.Request) error {
	switch r.Response.StatusCode {
	case http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		if len(via) > 0 && via[len(via)-1].URL.Host != r.URL.Host {
			r.Header.Del("X-Amz-Security-Token")
		}
		return nil
	}
	return http.ErrUseLastResponse
}

func (a attemptCounter) Do(r *http.Request) (*http.Response, error) {
	if n, ok := r.Context().Value(attemptsKey{}).(*atomic.Int32); ok {
		n.Add(1)
	}
	return a.next.Do(r)
}

func withAttempts(ctx context.Context) (context.Context, *atomic.Int32) {
	n := new(atomic.Int32)
	return context.WithValue(ctx, attemptsKey{}, n), n
}

func (b *Bucket) fail(op bucket.OpKind, key string, attempts *atomic.Int32, cause error) error {
	return &bucket.OpError{Bucket: b.name, Op: op, Key: key, Attempts: int(attempts.Load()), Err: cause}
}

// classify maps an SDK error to bucket.ErrNotFound or
// bucket.ErrPrecondition where it is one, keeping the SDK error as the
// detail.
func classify(err error) error {
	code, status := "", 0
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		code = apiErr.ErrorCode()
	}
	var httpErr interface{ HTTPStatusCode() int }
	if errors.As(err, &httpErr) {
		status = httpErr.HTTPStatusCode()
	}
	switch {
	case code == "PreconditionFailed" || status == http.StatusPreconditionFailed:
		return fmt.Errorf("%w: %w", bucket.ErrPrecondition, err)
	case code == "ConditionalRequestConflict":
		return fmt.Errorf("%w: a concurrent conditional write won: %w", bucket.ErrPrecondition, err)
	case code == "NoSuchKey" || code == "NotFound" || (status == http.StatusNotFound && code == ""):
		return fmt.Errorf("%w: %w", bucket.ErrNotFound, err)
	}
	return err
}

// Get returns the object's body and ETag.
func (b *Bucket) Get(ctx context.Context, key string) (_ []byte, _ string, err error) {
	ctx, end := b.span(ctx, bucket.OpGet, key)
	defer func() { end(err) }()
	ctx, n := withAttempts(ctx)
	if b.lean != nil {
		body, etag, err := b.lean.get(ctx, key)
		if err != nil {
			return nil, "", b.fail(bucket.OpGet, key, n, classify(err))
		}
		return body, etag, nil
	}
	out, err := b.client.GetObject(ctx, &awss3.GetObjectInput{Bucket: &b.name, Key: &key})
	if err != nil {
		return nil, "", b.fail(bucket.OpGet, key, n, classify(err))
	}
	defer out.Body.Close()
	body, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, "", b.fail(bucket.OpGet, key, n, fmt.Errorf("reading the body: %w", err))
	}
	return body, aws.ToString(out.ETag), nil
}

// Head reads key's ETag with a HEAD request, or returns an error wrapping
// bucket.ErrNotFound.
func (b *Bucket) Head(ctx context.Context, key string) (_ string, err error) {
	ctx, end := b.span(ctx, bucket.OpHead, key)
	defer func() { end(err) }()
	ctx, n := withAttempts(ctx)
	out, err := b.client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: &b.name, Key: &key})
	if err != nil {
		return "", b.fail(bucket.OpHead, key, n, classify(err))
	}
	return aws.ToString(out.ETag), nil
}

// Put stores body under key if cond holds (If-None-Match: * or If-Match).
func (b *Bucket) Put(ctx context.Context, key string, body []byte, cond bucket.Cond) (_ string, err error) {
	ctx, end := b.span(ctx, bucket.OpPut, key)
	defer func() { end(err) }()
	return toEnd(ctx, bucket.OpPut, key, b, func(ctx context.Context) (string, error) { return b.put(ctx, key, body, cond) })
}

// toEnd runs the write f to its end, even if ctx ends first: the caller
// then gets an error wrapping ctx's at once (the write may still land, as
// any write whose answer did not come), while f goes on without ctx's
// deadline or cancellation, each attempt bounded by the request timeout.
// A write cut off part way, its connection closed mid-request, is what
// an erasure-coded MinIO may apply to some drives and not the others,
// leaving a key whose reads and writes disagree for minutes
// (docs/operations.md#s3); a write left to end is applied whole or not.
func toEnd[T any](ctx context.Context, op bucket.OpKind, key string, b *Bucket, f func(context.Context) (T, error)) (T, error) {
	if ctx.Done() == nil || ctx.Err() != nil {
		return f(ctx) // nothing to give up on, or nothing to send
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f(context.WithoutCancel(ctx))
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, &bucket.OpError{Bucket: b.name, Op: op, Key: key, Attempts: 1,
			Err: fmt.Errorf("gave up waiting for the answer (the write goes on and may land): %w", ctx.Err())}
	}
}

func (b *Bucket) put(ctx context.Context, key string, body []byte, cond bucket.Cond) (string, error) {
	ctx, n := withAttempts(ctx)
	if err := cond.Validate(); err != nil {
		return "", b.fail(bucket.OpPut, key, n, err)
	}
	if b.lean != nil {
		etag, err := b.lean.put(ctx, key, body, cond)
		if err != nil {
			return "", b.fail(bucket.OpPut, key, n, putError(err, cond))
		}
		return etag, nil
	}
	in := &awss3.PutObjectInput{
		Bucket:        &b.name,
		Key:           &key,
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
	}
	if cond.IfNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	if cond.IfMatch != "" {
		in.IfMatch = aws.String(cond.IfMatch)
	}
	out, err := b.client.PutObject(ctx, in)
	if err != nil {
		return "", b.fail(bucket.OpPut, key, n, putError(err, cond))
	}
	return aws.ToString(out.ETag), nil
}

// putError classifies a failed PUT; a PUT If-Match on a missing key fails
// with bucket.ErrPrecondition as well as bucket.ErrNotFound.
func putError(err error, cond bucket.Cond) error {
	err = classify(err)
	if cond.IfMatch != "" && errors.Is(err, bucket.ErrNotFound) && !errors.Is(err, bucket.ErrPrecondition) {
		err = fmt.Errorf("%w: If-Match on a missing key: %w", bucket.ErrPrecondition, err)
	}
	return err
}

// Delete removes key; a missing key is not an error.
func (b *Bucket) Delete(ctx context.Context, key string) (err error) {
	ctx, end := b.span(ctx, bucket.OpDelete, key)
	defer func() { end(err) }()
	_, err = toEnd(ctx, bucket.OpDelete, key, b, func(ctx context.Context) (struct{}, error) { return struct{}{}, b.delete(ctx, key) })
	return err
}

func (b *Bucket) delete(ctx context.Context, key string) error {
	ctx, n := withAttempts(ctx)
	_, err := b.client.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: &b.name, Key: &key})
	if err != nil {
		err = classify(err)
		if errors.Is(err, bucket.ErrNotFound) {
			return nil
		}
		return b.fail(bucket.OpDelete, key, n, err)
	}
	return nil
}

// DeleteBatch removes keys with DeleteObjects requests (quiet mode: the
// store answers only with the keys it could not delete),
// bucket.MaxDeleteBatch keys each: on the lean path (leandelete.go) as the PUTs, or through the
// SDK for keys the lean request does not carry.
func (b *Bucket) DeleteBatch(ctx context.Context, keys []string) (_ []string, err error) {
	if len(keys) == 0 {
		return nil, nil
	}
	ctx, end := b.span(ctx, bucket.OpDeleteBatch, keys[0], AttrKeys.Int(len(keys)))
	defer func() { end(err) }()
	return toEnd(ctx, bucket.OpDeleteBatch, keys[0], b, func(ctx context.Context) ([]string, error) { return b.deleteBatch(ctx, keys) })
}

func (b *Bucket) deleteBatch(ctx context.Context, keys []string) ([]string, error) {
	var deleted []string
	for len(keys) > 0 {
		n := min(len(keys), bucket.MaxDeleteBatch)
		chunk := keys[:n]
		keys = keys[n:]
		actx, attempts := withAttempts(ctx)
		var errs []batchKeyError
		if b.lean != nil && leanDeletable(chunk) {
			res, err := b.lean.deleteBatch(actx, chunk)
			if err != nil {
				return deleted, b.fail(bucket.OpDeleteBatch, chunk[0], attempts, classify(err))
			}
			for _, e := range res.Errors {
				errs = append(errs, batchKeyError{e.Key, e.Code, e.Message})
			}
		} else {
			ids := make([]types.ObjectIdentifier, n)
			for i := range chunk {
				ids[i] = types.ObjectIdentifier{Key: &chunk[i]}
			}
			out, err := b.client.DeleteObjects(actx, &awss3.DeleteObjectsInput{
				Bucket: &b.name,
				Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
			})
			if err != nil {
				return deleted, b.fail(bucket.OpDeleteBatch, chunk[0], attempts, classify(err))
			}
			for _, e := range out.Errors {
				errs = append(errs, batchKeyError{aws.ToString(e.Key), aws.ToString(e.Code), aws.ToString(e.Message)})
			}
		}
		var failed map[string]error
		for _, e := range errs {
			if e.code == "NoSuchKey" {
				continue // a missing key is deleted
			}
			if failed == nil {
				failed = map[string]error{}
			}
			failed[e.key] = fmt.Errorf("%s: %s", e.code, e.message)
		}
		for _, k := range chunk {
			if _, bad := failed[k]; !bad {
				deleted = append(deleted, k)
			}
		}
		if failed != nil {
			return deleted, &bucket.BatchError{Bucket: b.name, Failed: failed}
		}
	}
	return deleted, nil
}

// batchKeyError is a key a DeleteObjects answer says was not deleted.
type batchKeyError struct{ key, code, message string }

// List returns up to limit keys under prefix after startAfter, in key order,
// reading pages of at most bucket.MaxPage keys with ListObjectsV2 (each page
// starts after the last key of the one before).
func (b *Bucket) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	keys, _, err := b.ListPaged(ctx, prefix, startAfter, limit)
	return keys, err
}

// ListPaged is List that also returns how many LIST requests it sent (see
// bucket.PagedLister).
func (b *Bucket) ListPaged(ctx context.Context, prefix, startAfter string, limit int) ([]string, int, error) {
	infos, pages, err := b.listInfoPaged(ctx, prefix, startAfter, limit)
	if err != nil {
		return nil, pages, err
	}
	keys := make([]string, len(infos))
	for i, in := range infos {
		keys[i] = in.Key
	}
	return keys, pages, nil
}

// ListInfo is List with each object's ETag, size and last-modified time,
// as ListObjectsV2 reports them (see bucket.InfoLister).
func (b *Bucket) ListInfo(ctx context.Context, prefix, startAfter string, limit int) ([]bucket.ObjectInfo, error) {
	infos, _, err := b.listInfoPaged(ctx, prefix, startAfter, limit)
	return infos, err
}

func (b *Bucket) listInfoPaged(ctx context.Context, prefix, startAfter string, limit int) (_ []bucket.ObjectInfo, _ int, err error) {
	ctx, end := b.span(ctx, bucket.OpList, prefix)
	defer func() { end(err) }()
	ctx, n := withAttempts(ctx)
	if err := bucket.CheckLimit(limit); err != nil {
		return nil, 0, b.fail(bucket.OpList, prefix, n, err)
	}
	var keys []bucket.ObjectInfo
	pages := 0
	after := startAfter
	for len(keys) < limit {
		in := &awss3.ListObjectsV2Input{
			Bucket:  &b.name,
			Prefix:  &prefix,
			MaxKeys: aws.Int32(int32(min(bucket.MaxPage, limit-len(keys)))),
		}
		if after != "" {
			in.StartAfter = aws.String(after)
		}
		pages++
		b.pages.Add(1)
		out, err := b.client.ListObjectsV2(ctx, in)
		if err != nil {
			return nil, pages, b.fail(bucket.OpList, prefix, n, classify(err))
		}
		for _, obj := range out.Contents {
			k := aws.ToString(obj.Key)
			if k <= after || !strings.HasPrefix(k, prefix) {
				return nil, pages, b.fail(bucket.OpList, prefix, n,
					fmt.Errorf("the store listed %q after %q: keys out of order or outside the prefix", k, after))
			}
			keys = append(keys, bucket.ObjectInfo{Key: k, ETag: aws.ToString(obj.ETag), Size: aws.ToInt64(obj.Size), LastModified: aws.ToTime(obj.LastModified)})
			after = k
		}
		if !aws.ToBool(out.IsTruncated) || len(out.Contents) == 0 {
			break
		}
	}
	if len(keys) > limit {
		keys = keys[:limit]
	}
	return keys, pages, nil
}

// Exists reports whether the bucket exists (a HEAD of the bucket): false
// with a nil error when the store answers that there is no such bucket,
// an error when it cannot be asked or refuses to say (a bucket of another
// account answers 403).
func (b *Bucket) Exists(ctx context.Context) (bool, error) {
	ctx, n := withAttempts(ctx)
	_, err := b.client.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: &b.name})
	if err == nil {
		return true, nil
	}
	if err = classify(err); errors.Is(err, bucket.ErrNotFound) {
		return false, nil
	}
	return false, b.fail("HEAD BUCKET", "", n, err)
}

// Endpoint names where the client sends its requests, for messages: the
// endpoint URL when one is set (WithEndpoint or AWS_ENDPOINT_URL), or AWS
// S3 in the client's region.
func (b *Bucket) Endpoint() string {
	o := b.client.Options()
	if e := aws.ToString(o.BaseEndpoint); e != "" {
		return e
	}
	return "AWS S3 in region " + o.Region
}

// EnsureBucket creates the bucket if it does not exist.
func (b *Bucket) EnsureBucket(ctx context.Context) error {
	ctx, n := withAttempts(ctx)
	_, err := b.client.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: &b.name})
	if err == nil {
		return nil
	}
	if err = classify(err); !errors.Is(err, bucket.ErrNotFound) {
		return b.fail("HEAD BUCKET", "", n, err)
	}
	in := &awss3.CreateBucketInput{Bucket: &b.name}
	if region := b.client.Options().Region; region != DefaultRegion {
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{
			LocationConstraint: types.BucketLocationConstraint(region),
		}
	}
	_, err = b.client.CreateBucket(ctx, in)
	var owned *types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return b.fail("CREATE BUCKET", "", n, err)
	}
	return nil
}

// Check verifies that the store honours conditional writes, which the
// cluster's correctness depends on; see bucket.CheckConditional.
func (b *Bucket) Check(ctx context.Context) error { return bucket.CheckConditional(ctx, b) }

// namedCredentials names the variables to set when no credentials are
// found: the SDK's chain ends at EC2's instance metadata, so its error
// speaks of IMDS to an operator who forgot AWS_ACCESS_KEY_ID.
type namedCredentials struct{ aws.CredentialsProvider }

func (c namedCredentials) Retrieve(ctx context.Context) (aws.Credentials, error) {
	creds, err := c.CredentialsProvider.Retrieve(ctx)
	if err != nil {
		return creds, fmt.Errorf("no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE with a shared credentials file, or run with an instance role): %w", err)
	}
	return creds, nil
}
