package node

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
)

// TracerName is the instrumentation scope of the node's spans.
const TracerName = "github.com/wasmkeep/alarms/node"

// Span attributes of the node's spans (docs/operations.md#tracing).
const (
	AttrTenant = attribute.Key("wasmkeep.tenant")
	AttrClass  = attribute.Key("wasmkeep.class")
	AttrActor  = attribute.Key("wasmkeep.actor") // the actor's name
	// AttrOutcome is, on a request's span, "ok" for an answer below 400
	// and otherwise its problem code (CodeGuestFailed, CodeHeldElsewhere,
	// ...); on a delivery's, the outcome label of
	// wasmkeep_alarm_firings_total (alarms.FiringOK, FiringFailed,
	// FiringStale, FiringNotHere, FiringGaveUp).
	AttrOutcome = attribute.Key("wasmkeep.outcome")
	// AttrForwarded marks a request another node forwarded here.
	AttrForwarded = attribute.Key("wasmkeep.forwarded")
	// AttrRetryCount is the retry count on-alarm ran with, AttrAttempt
	// the attempt it was (retry count + 1); both only when it ran.
	AttrRetryCount = attribute.Key("wasmkeep.alarm.retry_count")
	AttrAttempt    = attribute.Key("wasmkeep.alarm.attempt")
	// AttrDeadLettered marks a delivery whose failure was the class's last
	// attempt: a dead letter was kept.
	AttrDeadLettered = attribute.Key("wasmkeep.alarm.dead_lettered")
	// AttrHolder is the address a request was forwarded to.
	AttrHolder = attribute.Key("wasmkeep.holder")

	attrMethod = attribute.Key("http.request.method")
	attrRoute  = attribute.Key("http.route")
	attrStatus = attribute.Key("http.response.status_code")
)

// traceContext is the W3C Trace Context propagator (traceparent,
// tracestate): a forwarding node injects it into the forwarded request,
// the holder extracts it, so both nodes' spans of one request share a
// trace.
var traceContext propagation.TraceContext

// tracer is the node's tracer, nil when Config.TracerProvider is nil: then
// nothing is traced and nothing is spent on it.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(TracerName)
}

// traced starts a server span for each request h serves, named after the
// pattern of mux that matches it, under the trace a forwarding node's
// traceparent names; the handlers add the actor (actorFrom) and the
// problem code (writeProblem). Without a tracer it returns h.
func (n *Node) traced(mux *http.ServeMux, h http.Handler) http.Handler {
	if n.tracer == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := httpUnmatched
		if _, p := mux.Handler(r); p != "" {
			route = p
		}
		ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		_, path, _ := strings.Cut(route, " ")
		ctx, span := n.tracer.Start(ctx, route, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attrMethod.String(r.Method), attrRoute.String(path), AttrForwarded.Bool(r.Header.Get(forwardedHeader) != "")))
		defer span.End()
		tw := &traceWriter{statusWriter: statusWriter{ResponseWriter: w}}
		h.ServeHTTP(tw, r.WithContext(ctx))
		code := tw.status
		if code == 0 {
			code = http.StatusOK
		}
		outcome := "ok"
		if code >= 400 {
			outcome = tw.problem
			if outcome == "" {
				outcome = "http_" + strconv.Itoa(code)
			}
			span.SetStatus(codes.Error, tw.detail)
			if tw.detail != "" {
				span.RecordError(errors.New(tw.detail))
			}
		}
		span.SetAttributes(attrStatus.Int(code), AttrOutcome.String(outcome))
	})
}

// traceWriter records the status and the problem (writeProblem) of a
// traced request's answer.
type traceWriter struct {
	statusWriter
	problem, detail string
}

func (w *traceWriter) setProblem(code, detail string) {
	if w.problem == "" {
		w.problem, w.detail = code, detail
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *traceWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// problemRecorder is a traced request's writer (traceWriter).
type problemRecorder interface{ setProblem(code, detail string) }

// traceActor names the actor on the span of the request r, if traced.
func traceActor(r *http.Request, id abi.ActorID) {
	if s := trace.SpanFromContext(r.Context()); s.IsRecording() {
		s.SetAttributes(AttrTenant.String(id.Tenant), AttrClass.String(id.Class), AttrActor.String(id.Name))
	}
}

// traceTenant names the tenant on the span of the request r, if traced.
func traceTenant(r *http.Request, tenant string) {
	if s := trace.SpanFromContext(r.Context()); s.IsRecording() {
		s.SetAttributes(AttrTenant.String(tenant))
	}
}

// startForward starts the client span of a forward to the holder at addr
// and injects its traceparent into req; the returned function ends it with
// the holder's status (0: no answer) and the forward's error.
func (n *Node) startForward(req *http.Request, addr string) func(status int, err error) {
	if n.tracer == nil {
		return func(int, error) {}
	}
	ctx, span := n.tracer.Start(req.Context(), "forward "+req.Method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(AttrHolder.String(addr)))
	traceContext.Inject(ctx, propagation.HeaderCarrier(req.Header))
	return func(status int, err error) {
		if status != 0 {
			span.SetAttributes(attrStatus.Int(status))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// startDelivery is the plugin's Config.StartDelivery when the node traces:
// a span for each alarm delivery of the timer loop, the bucket's requests
// beneath it, ended with what the delivery came to.
func (n *Node) startDelivery(ctx context.Context, id abi.ActorID) (context.Context, func(alarms.Delivery)) {
	ctx, span := n.tracer.Start(ctx, "alarm delivery", trace.WithAttributes(
		AttrTenant.String(id.Tenant), AttrClass.String(id.Class), AttrActor.String(id.Name)))
	return ctx, func(d alarms.Delivery) {
		ev := d.Event
		var outcome string
		switch {
		case errors.Is(d.Err, alarms.ErrNotHere):
			outcome = alarms.FiringNotHere
		case d.Err != nil:
			outcome = alarms.FiringGaveUp
		case ev.Ran && ev.Err != nil:
			outcome = alarms.FiringFailed
		case ev.Ran:
			outcome = alarms.FiringOK
		default:
			outcome = alarms.FiringStale
		}
		span.SetAttributes(AttrOutcome.String(outcome))
		if ev.Ran {
			span.SetAttributes(AttrRetryCount.Int(ev.RetryCount), AttrAttempt.Int(ev.RetryCount+1), AttrDeadLettered.Bool(ev.GaveUp))
		}
		switch {
		case d.Err != nil && outcome != alarms.FiringNotHere:
			span.RecordError(d.Err)
			span.SetStatus(codes.Error, d.Err.Error())
		case ev.Err != nil:
			span.RecordError(ev.Err)
			span.SetStatus(codes.Error, ev.Err.Error())
		}
		span.End()
	}
}

// deliveryTracing is the plugin's Config.StartDelivery: nil when the node
// does not trace.
func (n *Node) deliveryTracing() func(context.Context, abi.ActorID) (context.Context, func(alarms.Delivery)) {
	if n.tracer == nil {
		return nil
	}
	return n.startDelivery
}
