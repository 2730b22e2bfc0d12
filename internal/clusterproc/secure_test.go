package clusterproc_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/testca"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// TestKeepnodeWithTokensAndTLS starts two keepnode processes serving HTTPS
// with a test CA's certificate, an operator token from a file, tenant
// tokens from a file and the peer token from the environment: a tenant's
// call through the node that does not hold the actor is forwarded over TLS
// and answered; no token is a 401, another tenant a 403.
func TestKeepnodeWithTokensAndTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin, err := clusterproc.Build(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := clusterproc.StartVersitygw(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Stop()
	wasm := filepath.Join(dir, "counter.wasm")
	if err := os.WriteFile(wasm, testguest.Build(t, testguest.CounterActor), 0o644); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, caFile := testca.Write(t, dir)
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokenFile := write("token", "operator-token\n")
	tenantFile := write("tenants", "# tenant token\nt tenant-t-token\nu tenant-u-token\n")
	t.Setenv("KEEPNODE_PEER_TOKEN", "peer-token")
	var log syncBuffer
	cfg := clusterproc.Config{
		Binary: bin, S3: gw.S3("clusterproc-secure"), Dir: dir, Log: &log,
		Classes: map[string]string{"counter": wasm},
		Flags: []string{"-create-bucket", "-token-file", tokenFile, "-tenant-tokens", tenantFile,
			"-tls-cert", certFile, "-tls-key", keyFile, "-tls-ca", caFile},
	}
	nodes, err := clusterproc.StartNodes(ctx, cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, n := range nodes {
			_ = n.Kill()
		}
	}()
	if !strings.HasPrefix(nodes[0].URL, "https://127.0.0.1:") {
		t.Fatalf("node 0 serves at %q, want https on 127.0.0.1", nodes[0].URL)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	trust := client.WithTLS(&tls.Config{RootCAs: pool})
	tenantT := func(n *clusterproc.Node) *client.Client {
		return n.Client(trust, client.WithToken("tenant-t-token"))
	}
	id := abi.ActorID{Tenant: "t", Class: "counter", Name: "x"}
	if out, err := tenantT(nodes[0]).ExecDurable(ctx, id, []byte("get")); err != nil || requests(t, out) != 1 {
		t.Fatalf("on node 0: %q (%v)", out, err)
	}
	if out, err := tenantT(nodes[1]).Exec(ctx, id, []byte("get")); err != nil || requests(t, out) != 2 {
		t.Fatalf("through node 1: %q (%v), want the holder's answer (2 requests)", out, err)
	}
	if out, err := nodes[1].Client(trust, client.WithToken("operator-token")).Exec(ctx, id, []byte("get")); err != nil || requests(t, out) != 3 {
		t.Fatalf("through node 1 with the operator's token: %q (%v), want 3 requests", out, err)
	}
	if _, err := nodes[1].Client(trust).Exec(ctx, id, []byte("get")); !client.IsCode(err, client.CodeUnauthorized) {
		t.Fatalf("no token: %v, want 401", err)
	}
	if _, err := tenantT(nodes[1]).Exec(ctx, abi.ActorID{Tenant: "u", Class: "counter", Name: "x"}, []byte("get")); !client.IsCode(err, client.CodeForbidden) {
		t.Fatalf("t's token on tenant u: %v, want 403", err)
	}
	if strings.Contains(log.String(), "the HTTP API has no tokens") {
		t.Fatalf("a node with tokens logged that its API is open:\n%s", log.String())
	}
}
