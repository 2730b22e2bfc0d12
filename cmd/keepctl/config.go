package main

import (
	"fmt"
	"net"
	"os"

	"github.com/BurntSushi/toml"
)

// envConfig names keepnode's configuration file for keepctl (-config).
const envConfig = "KEEPCTL_CONFIG"

// nodeFileSettings are what keepctl takes from a keepnode configuration
// file: the bucket, the prefix, a node's API and the CA that signed its
// certificate. Each is "" when the file does not say.
type nodeFileSettings struct {
	bucket, prefix, node, ca string
}

// readNodeFile reads keepnode's configuration file (docs/deploy.md) for
// keepctl: "bucket" and "prefix" as they are; the node's API from
// "advertise", else "listen" (a wildcard host, such as 0.0.0.0, read as
// 127.0.0.1: keepctl then runs beside that node), https when the file
// names "tls-cert", with "tls-ca" as the CA. Other keys are the node's and
// are left alone.
func readNodeFile(path string) (nodeFileSettings, error) {
	var keys map[string]any
	b, err := os.ReadFile(path)
	if err != nil {
		return nodeFileSettings{}, err
	}
	if _, err := toml.Decode(string(b), &keys); err != nil {
		return nodeFileSettings{}, err
	}
	str := func(key string) (string, error) {
		v, ok := keys[key]
		if !ok {
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("%s = %v: want a string, in quotes", key, v)
		}
		return s, nil
	}
	var st nodeFileSettings
	var addr, listen, cert string
	for _, kv := range []struct {
		key string
		to  *string
	}{{"bucket", &st.bucket}, {"prefix", &st.prefix}, {"advertise", &addr}, {"listen", &listen}, {"tls-cert", &cert}, {"tls-ca", &st.ca}} {
		if *kv.to, err = str(kv.key); err != nil {
			return nodeFileSettings{}, err
		}
	}
	if addr == "" && listen != "" {
		host, port, err := net.SplitHostPort(listen)
		if err != nil {
			return nodeFileSettings{}, fmt.Errorf("listen = %q: %w", listen, err)
		}
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			host = "127.0.0.1"
		}
		addr = net.JoinHostPort(host, port)
	}
	if addr != "" {
		scheme := "http"
		if cert != "" {
			scheme = "https"
		}
		st.node = scheme + "://" + addr
	}
	return st, nil
}
