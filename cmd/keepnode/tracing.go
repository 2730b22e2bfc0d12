package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"runtime/debug"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// tracingFlags are the settings of OpenTelemetry tracing
// (docs/operations.md#tracing): off unless an OTLP endpoint is set.
type tracingFlags struct {
	endpoint string
	ratio    float64
}

// otlpEnv are the standard variables that name an OTLP endpoint for
// traces; with one set and no -otlp-endpoint, the exporter reads them.
var otlpEnv = []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"}

func addTracingFlags(fs *flag.FlagSet) *tracingFlags {
	f := &tracingFlags{}
	fs.StringVar(&f.endpoint, "otlp-endpoint", "", "send traces by OTLP over HTTP to HOST:PORT (HTTPS), or to a URL (http://HOST:4318 for plain HTTP; the path defaults to /v1/traces); empty: $"+otlpEnv[1]+" or $"+otlpEnv[0]+" if set, else no tracing at all")
	fs.Float64Var(&f.ratio, "trace-sample-ratio", 1, "the share of traces begun on this node that are sampled, 0 to 1 (a request forwarded here follows the sampling of the node that forwarded it)")
	return f
}

// provider is the tracer provider the flags configure, exporting by OTLP
// over HTTP, or nil when no endpoint is configured: then no exporter is
// made and nothing is traced. getenv reads the environment.
func (f *tracingFlags) provider(ctx context.Context, getenv func(string) (string, bool), service, version string) (*sdktrace.TracerProvider, error) {
	if f.ratio < 0 || f.ratio > 1 {
		return nil, fmt.Errorf("-trace-sample-ratio %v: must be from 0 to 1", f.ratio)
	}
	var opts []otlptracehttp.Option
	switch {
	case strings.Contains(f.endpoint, "://"):
		u, err := url.Parse(f.endpoint)
		if err != nil {
			return nil, fmt.Errorf("-otlp-endpoint %q: %w", f.endpoint, err)
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces" // what the exporter sends to when given HOST:PORT
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	case f.endpoint != "":
		opts = append(opts, otlptracehttp.WithEndpoint(f.endpoint))
	default:
		set := false
		for _, name := range otlpEnv {
			if v, ok := getenv(name); ok && v != "" {
				set = true
			}
		}
		if !set {
			return nil, nil
		}
		// The exporter reads the endpoint, headers and TLS from the
		// standard OTEL_EXPORTER_OTLP_* variables.
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("-otlp-endpoint %q: %w", f.endpoint, err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", service), attribute.String("service.version", version)))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("tracing resource: %w", err), exp.Shutdown(ctx))
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(f.ratio))),
	), nil
}

// moduleVersion is the binary's module version, the service.version of its
// traces ("(devel)" for a build outside a released module).
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
