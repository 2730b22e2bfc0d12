package s3

import (
	"context"
	"errors"
	"net/http"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// Results of an S3 request, the result label of wasmkeep_s3_requests_total:
// a bounded set, whatever the store answers.
const (
	ResultOK                 = "ok"
	ResultNotFound           = "not_found"           // 404: a missing key (often expected)
	ResultPreconditionFailed = "precondition_failed" // 412, or a conditional write that lost a race (409)
	ResultThrottled          = "throttled"           // 429, 503 SlowDown
	ResultClientError        = "client_error"        // another 4xx
	ResultServerError        = "server_error"        // another 5xx
	ResultTimeout            = "timeout"             // the caller's deadline, or the request timeout
	ResultCanceled           = "canceled"            // the caller gave up
	ResultNetworkError       = "network_error"       // no answer from the store
)

// s3Metrics are the S3 client's request metrics, recorded by middleware in
// the SDK's own stack, and for PUTs by the lean path (see WithRegisterer).
type s3Metrics struct {
	requests *prometheus.CounterVec   // operation, result
	duration *prometheus.HistogramVec // operation
	attempts *prometheus.CounterVec   // operation
}

// S3 latency buckets: a request to a nearby store takes about a millisecond;
// one that retries can take the request timeout.
var s3DurationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

func newS3Metrics(reg prometheus.Registerer) (*s3Metrics, error) {
	m := &s3Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_s3_requests_total",
			Help: "S3 operations completed, by operation (the SDK's name: PutObject, GetObject, DeleteObjects, ListObjectsV2, ...) and result (ok, not_found, precondition_failed, throttled, client_error, server_error, timeout, canceled, network_error), after the SDK's retries.",
		}, []string{"operation", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "wasmkeep_s3_request_duration_seconds",
			Help:    "Time an S3 operation took, retries included, by operation.",
			Buckets: s3DurationBuckets,
		}, []string{"operation"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_s3_attempts_total",
			Help: "HTTP requests sent to S3, by operation: each operation's first attempt and its retries.",
		}, []string{"operation"}),
	}
	var err error
	if m.requests, err = registerShared(reg, m.requests); err != nil {
		return nil, err
	}
	if m.duration, err = registerShared(reg, m.duration); err != nil {
		return nil, err
	}
	if m.attempts, err = registerShared(reg, m.attempts); err != nil {
		return nil, err
	}
	return m, nil
}

// registerShared registers c, or returns the collector of the same
// description already registered (a second S3 client on one registry adds to
// the same series, as Prometheus advises).
func registerShared[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// addTo adds the metrics' middleware to an operation's stack: one in the
// Initialize step, outside the retry loop, that times the whole operation
// and records its result; one at the end of the Finalize step, inside the
// retry loop, that counts each HTTP attempt.
func (m *s3Metrics) addTo(stack *middleware.Stack) error {
	if err := stack.Initialize.Add(middleware.InitializeMiddlewareFunc("wasmkeepMetrics",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			start := time.Now()
			out, md, err := next.HandleInitialize(ctx, in)
			op := operationName(ctx)
			m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
			m.requests.WithLabelValues(op, requestResult(ctx, err)).Inc()
			return out, md, err
		}), middleware.Before); err != nil {
		return err
	}
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("wasmkeepAttempts",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			m.attempts.WithLabelValues(operationName(ctx)).Inc()
			return next.HandleFinalize(ctx, in)
		}), middleware.After)
}

func operationName(ctx context.Context) string {
	if op := awsmiddleware.GetOperationName(ctx); op != "" {
		return op
	}
	return "unknown"
}

// requestResult maps an operation's error to one of the Result values.
func requestResult(ctx context.Context, err error) string {
	if err == nil {
		return ResultOK
	}
	status := 0
	var httpErr interface{ HTTPStatusCode() int }
	if errors.As(err, &httpErr) {
		status = httpErr.HTTPStatusCode()
	}
	code := ""
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		code = apiErr.ErrorCode()
	}
	switch {
	case status == http.StatusNotFound || code == "NoSuchKey" || code == "NotFound" || code == "NoSuchBucket":
		return ResultNotFound
	case status == http.StatusPreconditionFailed || code == "PreconditionFailed" || code == "ConditionalRequestConflict":
		return ResultPreconditionFailed
	case status == http.StatusTooManyRequests || code == "SlowDown" || code == "Throttling" || code == "ThrottlingException":
		return ResultThrottled
	case status >= 500:
		return ResultServerError
	case status >= 400:
		return ResultClientError
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return ResultTimeout
	case errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled):
		return ResultCanceled
	}
	var timeout interface{ Timeout() bool }
	if errors.As(err, &timeout) && timeout.Timeout() {
		return ResultTimeout
	}
	return ResultNetworkError
}

// WithRegisterer records every S3 operation the client makes in reg,
// through middleware in the SDK's own request stack (so retries, signing
// and the store's answers are counted as the SDK sees them), and for PUTs
// and multi-object deletes, which bypass that stack, by the lean path in
// the same series with the same operation names and results:
//
//   - wasmkeep_s3_requests_total{operation,result}: operations completed;
//   - wasmkeep_s3_request_duration_seconds{operation}: their latency, retries
//     included;
//   - wasmkeep_s3_attempts_total{operation}: the HTTP requests they sent.
//
// operation is the SDK's operation name (PutObject, GetObject,
// DeleteObject, DeleteObjects, ListObjectsV2, HeadBucket, CreateBucket);
// result is one of the Result constants. Several clients on one registry
// add to the same series. Without this option (or with a nil reg) nothing
// is recorded.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(o *options) { o.registerer = reg }
}
