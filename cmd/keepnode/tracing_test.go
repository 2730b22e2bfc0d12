package main

import (
	"context"
	"flag"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func noEnv(string) (string, bool) { return "", false }

// With no OTLP endpoint, by flag or by the standard variables, keepnode
// makes no tracer provider and so no exporter; with one, spans reach the
// endpoint by OTLP over HTTP.
func TestTracingIsOffUnlessAnOTLPEndpointIsConfigured(t *testing.T) {
	ctx := context.Background()
	fs, o := newFlags(flag.ContinueOnError)
	if err := configure(fs, nil, noEnv); err != nil {
		t.Fatal(err)
	}
	if tp, err := o.trace.provider(ctx, noEnv, "keepnode", "test"); tp != nil || err != nil {
		t.Fatalf("no endpoint configured: provider %v, error %v; want none", tp, err)
	}

	got := make(chan string, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Method + " " + r.URL.Path
	}))
	defer srv.Close()
	fs, o = newFlags(flag.ContinueOnError)
	if err := configure(fs, []string{"-otlp-endpoint", srv.URL}, noEnv); err != nil {
		t.Fatal(err)
	}
	tp, err := o.trace.provider(ctx, noEnv, "keepnode", "test")
	if err != nil || tp == nil {
		t.Fatalf("-otlp-endpoint %s: provider %v, error %v", srv.URL, tp, err)
	}
	_, span := tp.Tracer("test").Start(ctx, "a span")
	span.End()
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := tp.Shutdown(sctx); err != nil {
		t.Fatalf("sending the span: %v", err)
	}
	select {
	case req := <-got:
		if req != "POST /v1/traces" {
			t.Fatalf("the endpoint got %q, want POST /v1/traces", req)
		}
	default:
		t.Fatal("the endpoint got no request after the provider was shut down")
	}

	// The standard variable alone turns tracing on (the exporter reads it).
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	fs, o = newFlags(flag.ContinueOnError)
	if err := configure(fs, nil, noEnv); err != nil {
		t.Fatal(err)
	}
	env := func(k string) (string, bool) {
		if k == "OTEL_EXPORTER_OTLP_ENDPOINT" {
			return srv.URL, true
		}
		return "", false
	}
	if tp, err := o.trace.provider(ctx, env, "keepnode", "test"); tp == nil || err != nil {
		t.Fatalf("OTEL_EXPORTER_OTLP_ENDPOINT set: provider %v, error %v; want one", tp, err)
	} else {
		tp.Shutdown(ctx)
	}
}

func TestATraceSampleRatioOutsideZeroToOneIsRefused(t *testing.T) {
	fs, o := newFlags(flag.ContinueOnError)
	if err := configure(fs, []string{"-otlp-endpoint", "127.0.0.1:4318", "-trace-sample-ratio", "1.5"}, noEnv); err != nil {
		t.Fatal(err)
	}
	if _, err := o.trace.provider(context.Background(), noEnv, "keepnode", "test"); err == nil || !strings.Contains(err.Error(), "-trace-sample-ratio") {
		t.Fatalf("ratio 1.5: %v, want an error naming -trace-sample-ratio", err)
	}
}
