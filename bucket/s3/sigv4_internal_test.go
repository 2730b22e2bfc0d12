package s3

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// The lean PUT's own SigV4 is the SDK signer's, byte for byte, on random
// requests: keys with any byte, hosts with and without (default) ports,
// each condition, values with spaces and tabs to canonicalise, bodies
// empty or not, session tokens or none, times across days (the signing
// key cache) and secrets, regions and services that change.
func TestPutSignatureIsTheSDKs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sdk := v4.NewSigner(func(so *v4.SignerOptions) { so.DisableURIPathEscaping = true })
	word := func(alphabet string, n int) string { return randomWord(rng, alphabet, n) }
	hosts := []struct{ scheme, host string }{
		{"http", "127.0.0.1:7070"}, {"http", "127.0.0.1:80"}, {"https", "s3.eu-west-1.amazonaws.com"},
		{"https", "my-bucket.s3.us-east-1.amazonaws.com:443"}, {"https", "[::1]:8443"}, {"http", "[::1]:80"},
	}
	signers := map[[2]string]*putSigner{}
	secrets := []string{"SECRET", word(alnum+"/+", 40)}
	base := time.Date(2026, 12, 1, 23, 59, 0, 0, time.UTC)
	for i := range 3000 {
		region := []string{"us-east-1", "eu-west-1", "auto"}[rng.IntN(3)]
		service := []string{"s3", "s3-outposts"}[rng.IntN(2)]
		s := signers[[2]string{region, service}]
		if s == nil {
			s = &putSigner{service: service, region: region}
			signers[[2]string{region, service}] = s
		}
		creds := randomCreds(rng, secrets)
		h := hosts[rng.IntN(len(hosts))]
		rawPath, path := randomKeyPath(rng)
		length := int64(0)
		if rng.IntN(2) == 0 {
			length = rng.Int64N(1 << 20)
		}
		ph := putHeaders{payloadHash: unsignedPayloadHash, securityToken: creds.SessionToken}
		if rng.IntN(2) == 0 {
			ph.payloadHash = word("0123456789abcdef", 64)
		}
		switch rng.IntN(3) {
		case 0:
			ph.ifNoneMatch = "*"
		case 1:
			ph.ifMatch = word(alnum+` "	`, 1+rng.IntN(40))
		}
		now := base.Add(time.Duration(rng.IntN(48*3600)) * time.Second)

		u := &url.URL{Scheme: h.scheme, Host: h.host, Path: path, RawPath: rawPath}
		hdr := http.Header{"X-Amz-Content-Sha256": {ph.payloadHash}}
		if ph.ifNoneMatch != "" {
			hdr["If-None-Match"] = []string{ph.ifNoneMatch}
		}
		if ph.ifMatch != "" {
			hdr["If-Match"] = []string{ph.ifMatch}
		}
		req := &http.Request{Method: http.MethodPut, URL: u, Host: h.host, Header: hdr, ContentLength: length}
		if err := sdk.SignHTTP(context.Background(), creds, req, ph.payloadHash, service, region, now); err != nil {
			t.Fatal(err)
		}
		host := signingHost(h.scheme, h.host)
		if host != req.Host {
			t.Fatalf("request %d: host %q, the SDK's %q", i, host, req.Host)
		}
		got := s.authorization(creds, newSigTime(now), host, u.EscapedPath(), length, ph)
		if want := req.Header.Get("Authorization"); got != want {
			t.Fatalf("request %d (%s %s, %d bytes, %+v):\n got  %s\n want %s", i, h.host, u.EscapedPath(), length, ph, got, want)
		}
		if d := req.Header.Get("X-Amz-Date"); d != newSigTime(now).amzDate {
			t.Fatalf("request %d: X-Amz-Date %q, the SDK's %q", i, newSigTime(now).amzDate, d)
		}
	}
}

func TestEmptyPayloadHash(t *testing.T) {
	sum := sha256.Sum256(nil)
	if got := hex.EncodeToString(sum[:]); got != emptyPayloadHash {
		t.Fatalf("SHA-256 of nothing is %s, the constant says %s", got, emptyPayloadHash)
	}
}

// The lean DeleteObjects request's signature is the SDK signer's, byte for
// byte, for the same request: bucket paths, hosts with and without
// (default) ports, body lengths, session tokens or none, times across
// days and secrets, regions and services that change.
func TestDeleteSignatureIsTheSDKs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	sdk := v4.NewSigner(func(so *v4.SignerOptions) { so.DisableURIPathEscaping = true })
	word := func(alphabet string, n int) string { return randomWord(rng, alphabet, n) }
	hosts := []struct{ scheme, host string }{
		{"http", "127.0.0.1:7070"}, {"http", "127.0.0.1:80"}, {"https", "s3.eu-west-1.amazonaws.com"},
		{"https", "my-bucket.s3.us-east-1.amazonaws.com:443"}, {"https", "[::1]:8443"},
	}
	base := time.Date(2026, 12, 1, 23, 59, 0, 0, time.UTC)
	secrets := []string{"SECRET", word(alnum+"/+", 40)}
	for i := range 2000 {
		region := []string{"us-east-1", "eu-west-1", "auto"}[rng.IntN(3)]
		service := []string{"s3", "s3-outposts"}[rng.IntN(2)]
		s := &putSigner{service: service, region: region}
		creds := randomCreds(rng, secrets)
		h := hosts[rng.IntN(len(hosts))]
		l := &leanPut{baseRawPath: []string{"", "/bucket", "/store/my-bucket"}[rng.IntN(3)]}
		path := l.deletePath()
		length := 1 + rng.Int64N(100<<10)
		dh := deleteHeaders{
			checksum:      word(alnum+"+/", 6) + "==",
			payloadHash:   word("0123456789abcdef", 64),
			securityToken: creds.SessionToken,
		}
		now := base.Add(time.Duration(rng.IntN(48*3600)) * time.Second)

		u := &url.URL{Scheme: h.scheme, Host: h.host, Path: path, RawQuery: "delete="}
		hdr := http.Header{
			"Content-Type":         {"application/xml"},
			"X-Amz-Checksum-Crc32": {dh.checksum},
			"X-Amz-Content-Sha256": {dh.payloadHash},
		}
		req := &http.Request{Method: http.MethodPost, URL: u, Host: h.host, Header: hdr, ContentLength: length}
		if err := sdk.SignHTTP(context.Background(), creds, req, dh.payloadHash, service, region, now); err != nil {
			t.Fatal(err)
		}
		host := signingHost(h.scheme, h.host)
		got := s.deleteAuthorization(creds, newSigTime(now), host, path, length, dh)
		if want := req.Header.Get("Authorization"); got != want {
			t.Fatalf("request %d (%s %s, %d bytes, %+v):\n got  %s\n want %s", i, h.host, path, length, dh, got, want)
		}
	}
}

const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// sigHosts are endpoints' hosts as a signature names them: with and
// without (default) ports, names and addresses.
var sigHosts = []struct{ scheme, host string }{
	{"http", "127.0.0.1:7070"}, {"http", "127.0.0.1:80"}, {"https", "s3.eu-west-1.amazonaws.com"},
	{"https", "my-bucket.s3.us-east-1.amazonaws.com:443"}, {"https", "[::1]:8443"}, {"http", "[::1]:80"},
}

// sigBase is the time the signing times are drawn after, up to two days:
// across a change of day (the signing key's cache).
var sigBase = time.Date(2026, 12, 1, 23, 59, 0, 0, time.UTC)

// randomSigner draws a region and a service, and a signer for them.
func randomSigner(rng *rand.Rand) (s *putSigner, service, region string) {
	region = []string{"us-east-1", "eu-west-1", "auto"}[rng.IntN(3)]
	service = []string{"s3", "s3-outposts"}[rng.IntN(2)]
	return &putSigner{service: service, region: region}, service, region
}

// randomCreds draws credentials: an access key, one of secrets, and a
// session token (with spaces to canonicalise) a third of the time.
func randomCreds(rng *rand.Rand, secrets []string) aws.Credentials {
	creds := aws.Credentials{AccessKeyID: "AKID" + randomWord(rng, alnum, 8), SecretAccessKey: secrets[rng.IntN(len(secrets))]}
	if rng.IntN(3) == 0 {
		creds.SessionToken = randomWord(rng, alnum+"/+= ", 1+rng.IntN(60))
	}
	return creds
}

// randomKeyPath draws a key of any bytes under a bucket's path: the
// escaped path of its request line and its path.
func randomKeyPath(rng *rand.Rand) (rawPath, path string) {
	var keyBytes []byte
	for range rng.IntN(40) {
		keyBytes = append(keyBytes, byte(rng.IntN(256)))
	}
	basePath := []string{"", "/bucket", "/store/bucket"}[rng.IntN(3)]
	return smithyhttp.JoinPath(basePath, "/"+escapeKey(string(keyBytes))), smithyhttp.JoinPath(basePath, "/"+string(keyBytes))
}

// randomWord is n bytes drawn from alphabet.
func randomWord(rng *rand.Rand, alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}

// The lean GET's signature is the SDK signer's, byte for byte, for the
// same request: keys with any byte, bucket paths, hosts with and without
// (default) ports, session tokens or none, times across days and secrets,
// regions and services that change.
func TestGetSignatureIsTheSDKs(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	sdk := v4.NewSigner(func(so *v4.SignerOptions) { so.DisableURIPathEscaping = true })
	secrets := []string{"SECRET", randomWord(rng, alnum+"/+", 40)}
	for i := range 2000 {
		s, service, region := randomSigner(rng)
		creds := randomCreds(rng, secrets)
		h := sigHosts[rng.IntN(len(sigHosts))]
		rawPath, path := randomKeyPath(rng)
		now := sigBase.Add(time.Duration(rng.IntN(48*3600)) * time.Second)

		u := &url.URL{Scheme: h.scheme, Host: h.host, Path: path, RawPath: rawPath}
		req := &http.Request{Method: http.MethodGet, URL: u, Host: h.host, Header: http.Header{"X-Amz-Content-Sha256": {emptyPayloadHash}}}
		if err := sdk.SignHTTP(context.Background(), creds, req, emptyPayloadHash, service, region, now); err != nil {
			t.Fatal(err)
		}
		got := s.getAuthorization(creds, newSigTime(now), signingHost(h.scheme, h.host), u.EscapedPath())
		if want := req.Header.Get("Authorization"); got != want {
			t.Fatalf("request %d (%s %s, token %q):\n got  %s\n want %s", i, h.host, u.EscapedPath(), creds.SessionToken, got, want)
		}
	}
}
