package node

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// LoadTLS reads a listener's certificate and key (PEM) and, if caFile is
// not empty, the CA that signed the peers' certificates. It returns the
// server configuration for the listener and the client configuration for
// forwarding to peers (Security.PeerTLS): that trusts caFile's
// certificates, or the system's roots without it.
func LoadTLS(certFile, keyFile, caFile string) (server, peer *tls.Config, err error) {
	if certFile == "" || keyFile == "" {
		return nil, nil, errors.New("tls: both a certificate and a key are needed")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: %w", err)
	}
	server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	peer = &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, nil, fmt.Errorf("tls: peer CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("tls: peer CA: no PEM certificate in %s", caFile)
		}
		peer.RootCAs = pool
	}
	return server, peer, nil
}
