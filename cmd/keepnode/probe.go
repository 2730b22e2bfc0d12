package main

// keepnode -probe URL: a health check for images with no shell and no
// curl (the distroless image's HEALTHCHECK). It GETs URL once and exits 0
// if the answer is 2xx, else 1 with one line on standard error saying why.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// probeFlag names the probe's flag. It is read from the command line
// only: a KEEPNODE_PROBE variable or a probe key in the file would turn
// every node started with them into a probe.
const probeFlag = "probe"

// probeTimeout bounds the whole probe: the connection, the request and
// the answer. /v1/readyz itself gives the bucket 2 s.
const probeTimeout = 5 * time.Second

// probeRequested reports whether args ask for -probe (up to the first
// argument that is not a flag), read before the flags are parsed so that
// a probe's own usage errors exit 1, as a failed probe does, rather than 2.
func probeRequested(args []string) bool {
	for _, a := range args {
		if a == "--" || !strings.HasPrefix(a, "-") {
			return false
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == probeFlag {
			return true
		}
	}
	return false
}

// probe GETs target and returns nil for a 2xx answer, else why not. An
// https URL is verified against -tls-ca when the node has one (the CA its
// peers' certificates are checked against), else the system's roots. No
// token is sent: the node's probes, /v1/healthz and /v1/readyz, need none.
func probe(ctx context.Context, target string, sec *securityFlags) error {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%q: want an http:// or https:// URL, such as http://127.0.0.1:7600/v1/readyz", target)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}, DisableKeepAlives: true}
	if u.Scheme == "https" && sec.tlsCA != "" {
		pem, err := os.ReadFile(sec.tlsCA)
		if err != nil {
			return fmt.Errorf("-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("-tls-ca: no PEM certificate in %s", sec.tlsCA)
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	c := &http.Client{
		Transport: tr,
		// A redirect is not an answer of the node's probes: report it.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("no answer within %v: %w", probeTimeout, err)
		}
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	msg := resp.Status
	if b := strings.Join(strings.Fields(string(body)), " "); b != "" {
		msg += ": " + b
	}
	return errors.New(msg)
}

// oneLine joins the lines of an error's text, so that a probe says why it
// failed in the one line a health check's log keeps.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}
