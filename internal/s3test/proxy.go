package s3test

import (
	"testing"

	"github.com/wasmkeep/alarms/internal/faultproxy"
)

// FailMode is how a Proxy fails a request (faultproxy.FailMode).
type FailMode = faultproxy.FailMode

// The ways a Proxy fails a request; faultproxy documents each.
const (
	Respond503       = faultproxy.Respond503
	Drop             = faultproxy.Drop
	DropAfterForward = faultproxy.DropAfterForward
	Reset            = faultproxy.Reset
	LandLate         = faultproxy.LandLate
)

// Proxy is a reverse proxy on 127.0.0.1 in front of an S3 server that can
// fail, delay and hold back requests (a faultproxy.Proxy). Point a client
// at URL with s3.WithEndpoint; the proxy keeps the Host header so
// SigV4 signatures stay valid.
type Proxy struct {
	*faultproxy.Proxy
}

// NewProxy starts a proxy to target (an http:// URL) and closes it when the
// test ends.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p, err := faultproxy.Start(target, 1)
	if err != nil {
		tb.Fatalf("s3test: proxy: %v", err)
	}
	tb.Cleanup(func() {
		if err := p.Close(); err != nil {
			tb.Logf("s3test: proxy shutdown: %v", err)
		}
	})
	return &Proxy{p}
}
