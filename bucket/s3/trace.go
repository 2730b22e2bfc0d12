package s3

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmkeep/alarms/bucket"
)

// TracerName is the instrumentation scope of the client's spans.
const TracerName = "github.com/wasmkeep/alarms/bucket/s3"

// Span attributes of an S3 operation.
const (
	// AttrOperation is the operation (GET, HEAD, PUT, DELETE,
	// DELETE-BATCH, LIST: bucket.OpKind).
	AttrOperation = attribute.Key("wasmkeep.s3.operation")
	// AttrBucket is the bucket's name.
	AttrBucket = attribute.Key("wasmkeep.s3.bucket")
	// AttrKeyFolder is the first two folders of the key (or of a LIST's
	// prefix), such as "cluster/state/": the kind of object, never the
	// tenant, class or actor a key names below it (the span of the event
	// that made the request names the actor).
	AttrKeyFolder = attribute.Key("wasmkeep.s3.key_folder")
	// AttrKeys is how many keys a DELETE-BATCH carried.
	AttrKeys = attribute.Key("wasmkeep.s3.keys")
)

// WithTracerProvider traces each operation of the client (Get, Head, Put,
// Delete, DeleteBatch, the lists; its retries included) as a client span
// of tp's tracer TracerName, named "s3 " and the operation, a child of
// the span in the caller's context; a failed operation records its error
// and sets the span's status to Error (a missing key on Get or Head, an
// answer the caller expects, is recorded as an error too). Without this
// option (or with a nil tp) nothing is traced and nothing is spent on it.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracerProvider = tp }
}

// noEnd is the end of an operation that is not traced.
func noEnd(error) {}

// span starts the span of one operation on key (a LIST's prefix) and
// returns the context its requests go with and the function that ends it
// with the operation's error.
func (b *Bucket) span(ctx context.Context, op bucket.OpKind, key string, attrs ...attribute.KeyValue) (context.Context, func(error)) {
	if b.tracer == nil {
		return ctx, noEnd
	}
	ctx, s := b.tracer.Start(ctx, "s3 "+string(op), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(attrs, AttrOperation.String(string(op)), AttrBucket.String(b.name), AttrKeyFolder.String(keyFolder(key)))...))
	return ctx, func(err error) {
		if err != nil {
			s.RecordError(err)
			s.SetStatus(codes.Error, err.Error())
		}
		s.End()
	}
}

// keyFolder is the key up to and including its second '/' (the whole key
// when it has fewer: a key at the top, such as a bucket check's).
func keyFolder(key string) string {
	i := strings.IndexByte(key, '/')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(key[i+1:], '/')
	if j < 0 {
		return key[:i+1]
	}
	return key[:i+1+j+1]
}
