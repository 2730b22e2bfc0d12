package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSecurityFlagsLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Setenv(envToken, "from-env")
	t.Setenv(envPeerToken, "peer-from-env")

	sec, server, err := (&securityFlags{}).load()
	if err != nil || sec.Token != "from-env" || sec.PeerToken != "peer-from-env" || server != nil || sec.PeerTLS != nil {
		t.Fatalf("from the environment: %+v %v %v", sec, server, err)
	}
	sec, _, err = (&securityFlags{
		tokenFile:    write("tok", "  from-file\n"),
		tenantTokens: write("tenants", "# comment\n\nt  tok-t\nu tok-u\n"),
	}).load()
	if err != nil || sec.Token != "from-file" || sec.PeerToken != "peer-from-env" || len(sec.TenantTokens) != 2 || sec.TenantTokens["u"] != "tok-u" {
		t.Fatalf("from files: %+v %v, want the file's token over the environment's", sec, err)
	}
	for _, tc := range []struct {
		name string
		f    securityFlags
		says string
	}{
		{"a missing token file", securityFlags{tokenFile: filepath.Join(dir, "none")}, "-token-file"},
		{"an empty token file", securityFlags{tokenFile: write("empty", "\n")}, "must hold one token"},
		{"two tokens in one file", securityFlags{peerTokenFile: write("two", "a b\n")}, "-peer-token-file"},
		{"a tenant line of three fields", securityFlags{tenantTokens: write("three", "t a b\n")}, "line 1: want \"TENANT TOKEN\""},
		{"a tenant twice", securityFlags{tenantTokens: write("twice", "t a\nt b\n")}, `line 2: tenant "t" has a token already`},
		{"a CA without a certificate", securityFlags{tlsCA: write("ca", "x")}, "-tls-ca needs -tls-cert"},
		{"a certificate without a key", securityFlags{tlsCert: write("cert", "x")}, "both a certificate and a key"},
		{"a certificate that is not PEM", securityFlags{tlsCert: write("c2", "x"), tlsKey: write("k2", "x")}, "-tls-cert, -tls-key"},
	} {
		if _, _, err := tc.f.load(); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.says)
		}
	}
}
