package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/wasmkeep/alarms/node"
)

// Environment variables a token may come from instead of a file.
const (
	envToken     = "KEEPNODE_TOKEN"
	envPeerToken = "KEEPNODE_PEER_TOKEN"
)

// securityFlags are the flags for tokens and TLS.
type securityFlags struct {
	tokenFile, tenantTokens, peerTokenFile string
	tlsCert, tlsKey, tlsCA                 string
}

func addSecurityFlags(fs *flag.FlagSet) *securityFlags {
	s := &securityFlags{}
	fs.StringVar(&s.tokenFile, "token-file", "", "file holding the API token that reaches every tenant (or $"+envToken+"); with no token of any kind the API is open")
	fs.StringVar(&s.tenantTokens, "tenant-tokens", "", "file of per-tenant API tokens, one \"TENANT TOKEN\" a line ('#' starts a comment); each reaches only its tenant's actors")
	fs.StringVar(&s.peerTokenFile, "peer-token-file", "", "file holding the token nodes send when they forward a call to each other (or $"+envPeerToken+"); the same on every node")
	fs.StringVar(&s.tlsCert, "tls-cert", "", "serve HTTPS with this certificate (PEM); forwarding to peers then uses HTTPS too")
	fs.StringVar(&s.tlsKey, "tls-key", "", "the key of -tls-cert (PEM)")
	fs.StringVar(&s.tlsCA, "tls-ca", "", "CA certificate (PEM) that signed the peers' certificates (default: the system's roots)")
	return s
}

// load reads the tokens and certificates. server is nil without -tls-cert.
func (s *securityFlags) load() (sec node.Security, server *tls.Config, err error) {
	if sec.Token, err = secret(s.tokenFile, envToken, "-token-file"); err != nil {
		return sec, nil, err
	}
	if sec.PeerToken, err = secret(s.peerTokenFile, envPeerToken, "-peer-token-file"); err != nil {
		return sec, nil, err
	}
	if s.tenantTokens != "" {
		if sec.TenantTokens, err = readTenantTokens(s.tenantTokens); err != nil {
			return sec, nil, err
		}
	}
	if s.tlsCert != "" || s.tlsKey != "" {
		if server, sec.PeerTLS, err = node.LoadTLS(s.tlsCert, s.tlsKey, s.tlsCA); err != nil {
			return sec, nil, fmt.Errorf("-tls-cert, -tls-key, -tls-ca: %w", err)
		}
	} else if s.tlsCA != "" {
		return sec, nil, errors.New("-tls-ca needs -tls-cert and -tls-key: peers are reached over HTTPS only when this node serves it")
	}
	return sec, server, nil
}

// secret reads a token from file (its one line), or else from the
// environment variable env.
func secret(file, env, flagName string) (string, error) {
	if file == "" {
		return os.Getenv(env), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flagName, err)
	}
	tok := string(bytes.TrimSpace(b))
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("%s: %s must hold one token (no spaces), and holds %d bytes of something else", flagName, file, len(b))
	}
	return tok, nil
}

// readTenantTokens reads "TENANT TOKEN" lines.
func readTenantTokens(file string) (map[string]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("-tenant-tokens: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 {
			return nil, fmt.Errorf("-tenant-tokens: %s line %d: want \"TENANT TOKEN\", got %d fields", file, line, len(fields))
		}
		if _, dup := out[fields[0]]; dup {
			return nil, fmt.Errorf("-tenant-tokens: %s line %d: tenant %q has a token already", file, line, fields[0])
		}
		out[fields[0]] = fields[1]
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("-tenant-tokens: %s: %w", file, err)
	}
	return out, nil
}
