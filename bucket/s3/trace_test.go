package s3_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// With a tracer provider, each operation of the S3 client is a client
// span under the caller's span, naming the operation and the key's first
// two folders, never the rest of the key (an actor's tenant, class and
// name); a failed operation records its error.
func TestS3OperationsAreSpansUnderTheCallersSpan(t *testing.T) {
	srv := s3test.Start(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	b := srv.NewClient(t, s3.WithTracerProvider(tp))

	ctx, parent := tp.Tracer("test").Start(ctx(t), "event")
	const key = "cluster/state/tenant-secret/class/6e616d65/0001"
	if _, err := b.Put(ctx, key, []byte("v"), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Get(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Get(ctx, "cluster/holds/missing"); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("GET of a missing key: %v", err)
	}
	if _, err := b.List(ctx, "cluster/state/", "", 10); err != nil {
		t.Fatal(err)
	}
	parent.End()

	type want struct{ name, folder string }
	wants := []want{{"s3 PUT", "cluster/state/"}, {"s3 GET", "cluster/state/"}, {"s3 GET", "cluster/holds/"}, {"s3 LIST", "cluster/state/"}}
	var got []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.InstrumentationScope().Name == s3.TracerName {
			got = append(got, s)
		}
	}
	if len(got) != len(wants) {
		t.Fatalf("%d S3 spans, want %d (%v)", len(got), len(wants), names(got))
	}
	for i, s := range got {
		w := wants[i]
		attrs := attrMap(s.Attributes())
		if s.Name() != w.name || attrs[s3.AttrKeyFolder] != w.folder || attrs[s3.AttrBucket] != srv.Name {
			t.Errorf("span %d: %s %v, want %s with key folder %q and bucket %q", i, s.Name(), attrs, w.name, w.folder, srv.Name)
		}
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("span %d (%s) is not a child of the caller's span", i, s.Name())
		}
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.String(), "tenant-secret") {
				t.Errorf("span %d (%s) carries the key below its folder: %s=%s", i, s.Name(), kv.Key, kv.Value.String())
			}
		}
	}
	if st := got[2].Status(); st.Code != codes.Error || len(got[2].Events()) == 0 || !strings.Contains(st.Description, "not found") {
		t.Errorf("the GET of a missing key: status %v, %d events; want its error recorded", st, len(got[2].Events()))
	}
	if st := got[1].Status(); st.Code == codes.Error {
		t.Errorf("a GET that succeeded has status %v", st)
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

func attrMap(kvs []attribute.KeyValue) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.String()
	}
	return m
}
