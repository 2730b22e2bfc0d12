package node_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/node"
)

// recorder is a tracer provider that keeps every span it ends in memory.
func recorder(t *testing.T) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return rec, tp
}

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value.String()
	}
	return m
}

// findSpan is the first ended span of rec named name, or nil.
func findSpan(rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	for _, s := range rec.Ended() {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

// s3Beneath are the S3 spans of rec under span (its children, or theirs).
func s3Beneath(rec *tracetest.SpanRecorder, span sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	ended := rec.Ended()
	parent := map[trace.SpanID]trace.SpanID{}
	for _, s := range ended {
		parent[s.SpanContext().SpanID()] = s.Parent().SpanID()
	}
	var out []sdktrace.ReadOnlySpan
	for _, s := range ended {
		if s.InstrumentationScope().Name != s3.TracerName || s.SpanContext().TraceID() != span.SpanContext().TraceID() {
			continue
		}
		for p := s.Parent().SpanID(); p.IsValid(); p = parent[p] {
			if p == span.SpanContext().SpanID() {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// wantAttrs fails the test unless span has each of want.
func wantAttrs(t *testing.T, what string, span sdktrace.ReadOnlySpan, want map[attribute.Key]string) {
	t.Helper()
	got := spanAttrs(span)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %q, want %q (all: %v)", what, k, got[k], v, got)
		}
	}
}

const execRoute = "POST /v1/actors/{tenant}/{class}/{name}"

// With a tracer provider, a request event is a server span named after its
// route, naming the tenant, class, actor and outcome, with the S3 requests
// of its replication beneath it; a request that fails records its problem;
// an alarm delivery is a span naming the actor, the outcome, the retry
// count and the attempt, with the S3 requests of its upload beneath it.
func TestARequestAndADeliveryAreSpansWithTheirS3RequestsBeneath(t *testing.T) {
	t.Parallel()
	rec, tp := recorder(t)
	srv := s3test.Start(t)
	b := srv.NewClient(t, s3.WithTracerProvider(tp))
	a := serveHost(t, b, "a", counter(t), hostConfig{start: true, tracer: tp})
	actor := a.URL + "/v1/actors/t/counter/x"

	if status, out := call(t, "POST", actor+"?kind=exec-durable", []byte("get")); status != 200 {
		t.Fatalf("request: %d %s", status, out)
	}
	req := findSpan(rec, execRoute)
	if req == nil {
		t.Fatalf("no span %q among %v", execRoute, spanNames(rec))
	}
	wantAttrs(t, "the request's span", req, map[attribute.Key]string{
		node.AttrTenant: "t", node.AttrClass: "counter", node.AttrActor: "x", node.AttrOutcome: "ok",
		"http.route": "/v1/actors/{tenant}/{class}/{name}", "http.response.status_code": "200",
	})
	if req.SpanKind() != trace.SpanKindServer || req.Status().Code == codes.Error {
		t.Errorf("the request's span: kind %v, status %v; want a server span without error", req.SpanKind(), req.Status())
	}
	if got := s3Beneath(rec, req); !hasS3(got, "s3 PUT", "cluster/state/") {
		t.Errorf("S3 spans under the request: %v, want the PUT of its snapshot (cluster/state/)", s3Names(got))
	}

	rec.Reset()
	if status, _ := call(t, "POST", actor+"?kind=bogus", []byte("get")); status != http.StatusBadRequest {
		t.Fatalf("a request of an unknown kind: %d, want 400", status)
	}
	bad := findSpan(rec, execRoute)
	if bad == nil {
		t.Fatalf("no span for the failed request among %v", spanNames(rec))
	}
	wantAttrs(t, "the failed request's span", bad, map[attribute.Key]string{node.AttrOutcome: node.CodeBadRequest, "http.response.status_code": "400"})
	if bad.Status().Code != codes.Error || !strings.Contains(bad.Status().Description, "bogus") || len(bad.Events()) == 0 {
		t.Errorf("the failed request's span: status %v, %d events; want its problem recorded as the error", bad.Status(), len(bad.Events()))
	}

	rec.Reset()
	if status, out := call(t, "PUT", actor+"/alarm", fmt.Appendf(nil, `{"at_ms": %d}`, time.Now().UnixMilli())); status != 200 {
		t.Fatalf("set alarm: %d %s", status, out)
	}
	var del sdktrace.ReadOnlySpan
	waitFor(t, "the alarm's delivery span", func() bool { del = findSpan(rec, "alarm delivery"); return del != nil })
	wantAttrs(t, "the delivery's span", del, map[attribute.Key]string{
		node.AttrTenant: "t", node.AttrClass: "counter", node.AttrActor: "x", node.AttrOutcome: alarms.FiringOK,
		node.AttrRetryCount: "0", node.AttrAttempt: "1", node.AttrDeadLettered: "false",
	})
	if got := s3Beneath(rec, del); !hasS3(got, "s3 PUT", "cluster/state/") {
		t.Errorf("S3 spans under the delivery: %v, want the PUT of its snapshot (cluster/state/)", s3Names(got))
	}
}

func hasS3(spans []sdktrace.ReadOnlySpan, name, folder string) bool {
	for _, s := range spans {
		if s.Name() == name && spanAttrs(s)[s3.AttrKeyFolder] == folder {
			return true
		}
	}
	return false
}

func s3Names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name()+" "+spanAttrs(s)[s3.AttrKeyFolder])
	}
	return out
}

func spanNames(rec *tracetest.SpanRecorder) []string {
	var out []string
	for _, s := range rec.Ended() {
		out = append(out, s.Name())
	}
	return out
}

// A request sent to a node that does not hold the actor is forwarded to
// the holder with its traceparent: the holder's span of the request is in
// the forwarding node's trace, a child of its forward span, so one trace
// shows the request on both nodes.
func TestAForwardedRequestIsOneTraceAcrossBothNodes(t *testing.T) {
	t.Parallel()
	mem := bucket.NewMem()
	classes := counter(t)
	recA, tpA := recorder(t)
	recB, tpB := recorder(t)
	a := serveHost(t, mem, "a", classes, hostConfig{tracer: tpA})
	bn := serveHost(t, mem, "b", classes, hostConfig{tracer: tpB})
	actor := "/v1/actors/t/counter/x?kind=exec-durable"
	if status, out := call(t, "POST", a.URL+actor, []byte("get")); status != 200 {
		t.Fatalf("request to a (which takes the actor): %d %s", status, out)
	}
	recA.Reset()
	if status, out := call(t, "POST", bn.URL+actor, []byte("get")); status != 200 {
		t.Fatalf("request to b: %d %s", status, out)
	}
	atB, fwd := findSpan(recB, execRoute), findSpan(recB, "forward POST")
	atA := findSpan(recA, execRoute)
	if atB == nil || fwd == nil || atA == nil {
		t.Fatalf("spans on b: %v, on a: %v; want b's request and forward spans and a's request span", spanNames(recB), spanNames(recA))
	}
	trB := atB.SpanContext().TraceID()
	if fwd.SpanContext().TraceID() != trB || fwd.Parent().SpanID() != atB.SpanContext().SpanID() {
		t.Errorf("b's forward span is not under b's request span")
	}
	if atA.SpanContext().TraceID() != trB {
		t.Fatalf("a's span of the forwarded request is in trace %s, b's in %s: want one trace", atA.SpanContext().TraceID(), trB)
	}
	if atA.Parent().SpanID() != fwd.SpanContext().SpanID() || !atA.Parent().IsRemote() {
		t.Errorf("a's span's parent is %s, want b's forward span %s (remote)", atA.Parent().SpanID(), fwd.SpanContext().SpanID())
	}
	wantAttrs(t, "a's span", atA, map[attribute.Key]string{node.AttrForwarded: "true", node.AttrActor: "x", node.AttrOutcome: "ok"})
	wantAttrs(t, "b's span", atB, map[attribute.Key]string{node.AttrForwarded: "false", node.AttrActor: "x", "http.response.status_code": "200"})
	wantAttrs(t, "b's forward span", fwd, map[attribute.Key]string{node.AttrHolder: a.addr})
}

const offerRoute = "POST /v1/actors/{tenant}/{class}/{name}/alarm:offer"

// A delivery that finds its actor held by another node forwards the
// overdue entry to that node (POST .../alarm:offer) with its traceparent:
// the walker's span of the delivery, its forward span beneath it and the
// holder's span of the offer beneath that are one trace. a holds the actor
// and runs no timer or sweep, so the only delivery of its alarm is b's,
// from b's first sweep.
func TestADeliveryForwardedToTheHolderIsOneTraceAcrossBothNodes(t *testing.T) {
	t.Parallel()
	mem := bucket.NewMem()
	classes := counter(t)
	recA, tpA := recorder(t)
	recB, tpB := recorder(t)
	a := serveHost(t, mem, "a", classes, hostConfig{tracer: tpA})
	actor := a.URL + "/v1/actors/t/counter/x"
	if status, out := call(t, "POST", actor+"?kind=exec-durable", []byte("get")); status != 200 {
		t.Fatalf("request to a (which takes the actor): %d %s", status, out)
	}
	// A minute overdue: more than sweeper.AnyoneAfterMargins sweep
	// margins (3 x (10 s lease + 2 s grace)), so b's sweep delivers it
	// whichever of the two nodes' shard it is.
	due := time.Now().Add(-time.Minute).UnixMilli()
	if status, out := call(t, "PUT", actor+"/alarm", fmt.Appendf(nil, `{"at_ms": %d}`, due)); status != 200 {
		t.Fatalf("set the alarm on a: %d %s", status, out)
	}
	serveHost(t, mem, "b", classes, hostConfig{start: true, tracer: tpB})

	var del, fwd, offered sdktrace.ReadOnlySpan
	waitFor(t, "b's delivery, its forward and a's span of the offer", func() bool {
		del, fwd, offered = findSpan(recB, "alarm delivery"), findSpan(recB, "forward POST"), findSpan(recA, offerRoute)
		return del != nil && fwd != nil && offered != nil
	})
	if d := findSpan(recA, "alarm delivery"); d != nil {
		t.Fatalf("a delivered the alarm itself (outcome %s): want b's delivery alone", spanAttrs(d)[node.AttrOutcome])
	}
	wantAttrs(t, "b's delivery span", del, map[attribute.Key]string{
		node.AttrTenant: "t", node.AttrClass: "counter", node.AttrActor: "x", node.AttrOutcome: alarms.FiringNotHere,
	})
	wantAttrs(t, "b's forward span", fwd, map[attribute.Key]string{node.AttrHolder: a.addr, "http.response.status_code": "200"})
	wantAttrs(t, "a's span of the offer", offered, map[attribute.Key]string{
		node.AttrForwarded: "true", node.AttrActor: "x", node.AttrOutcome: "ok", "http.response.status_code": "200",
	})
	tr := del.SpanContext().TraceID()
	if fwd.SpanContext().TraceID() != tr || fwd.Parent().SpanID() != del.SpanContext().SpanID() || fwd.SpanKind() != trace.SpanKindClient {
		t.Errorf("b's forward span: trace %s, parent %s, kind %v; want a client span under b's delivery span %s (trace %s)",
			fwd.SpanContext().TraceID(), fwd.Parent().SpanID(), fwd.SpanKind(), del.SpanContext().SpanID(), tr)
	}
	if offered.SpanContext().TraceID() != tr {
		t.Fatalf("a's span of the offer is in trace %s, b's delivery in %s: want one trace", offered.SpanContext().TraceID(), tr)
	}
	if offered.Parent().SpanID() != fwd.SpanContext().SpanID() || !offered.Parent().IsRemote() || offered.SpanKind() != trace.SpanKindServer {
		t.Errorf("a's span of the offer: parent %s (remote %v), kind %v; want a server span under b's forward span %s (remote)",
			offered.Parent().SpanID(), offered.Parent().IsRemote(), offered.SpanKind(), fwd.SpanContext().SpanID())
	}
}

// Without a TracerProvider a node traces nothing: not through otel's
// global provider either, for its requests, forwards or deliveries. (Not
// parallel: it sets the global provider.)
func TestANodeWithoutATracerProviderMakesNoSpans(t *testing.T) {
	rec, tp := recorder(t)
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	mem := bucket.NewMem()
	classes := counter(t)
	a := serveHost(t, mem, "a", classes, hostConfig{start: true})
	bn := serveHost(t, mem, "b", classes, hostConfig{start: true})
	actor := "/v1/actors/t/counter/x"
	if status, out := call(t, "POST", a.URL+actor+"?kind=exec-durable", []byte("get")); status != 200 {
		t.Fatalf("request to a: %d %s", status, out)
	}
	if status, out := call(t, "PUT", bn.URL+actor+"/alarm", fmt.Appendf(nil, `{"at_ms": %d}`, time.Now().UnixMilli())); status != 200 {
		t.Fatalf("set alarm through b: %d %s", status, out)
	}
	waitFor(t, "the alarm to fire", func() bool { return counterState(t, a.URL+actor).Fired == 1 })
	if got := spanNames(rec); len(got) != 0 {
		t.Fatalf("a node without a TracerProvider made spans %v", got)
	}
}
