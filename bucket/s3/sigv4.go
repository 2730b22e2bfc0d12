package s3

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// putSigner computes the AWS Signature Version 4 of a lean PUT directly:
// the request has a fixed set of headers (host, content-length when the
// body is not empty, the condition, x-amz-content-sha256, x-amz-date and
// the session token when there is one) and no query, so the canonical
// request is written straight into the hash, in the order the
// specification sorts those names, with none of the header maps, sorting
// and string joins of the SDK's general signer. Its output is the SDK
// signer's, byte for byte, for the same request (the tests check it on
// random requests). The signing key, which depends on the secret, the
// day, the region and the service only, is derived once per day.
type putSigner struct {
	service, region string

	mu  sync.Mutex
	key *signingKey // the last key derived
}

type signingKey struct {
	secret string
	day    string    // yyyymmdd
	macs   sync.Pool // of HMAC-SHA256 keyed with the key, reset before use
}

// sigTime is the signing time in SigV4's two forms.
type sigTime struct {
	amzDate string // 20060102T150405Z
	day     string // 20060102
}

func newSigTime(t time.Time) sigTime {
	var b [16]byte
	d := t.UTC().AppendFormat(b[:0], "20060102T150405Z")
	s := string(d)
	return sigTime{amzDate: s, day: s[:8]}
}

// putHeaders are the signed headers of a lean PUT besides host and
// content-length.
type putHeaders struct {
	ifMatch, ifNoneMatch string // empty: not sent
	payloadHash          string // x-amz-content-sha256
	securityToken        string // empty: not sent
}

// signingKeyFor returns the key for creds' secret on day, deriving it only
// when one of them changed since the last call.
func (s *putSigner) signingKeyFor(secret, day string) *signingKey {
	s.mu.Lock()
	k := s.key
	s.mu.Unlock()
	if k != nil && k.day == day && k.secret == secret {
		return k
	}
	mac := func(key []byte, data string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(data))
		return h.Sum(nil)
	}
	key := mac(mac(mac(mac([]byte("AWS4"+secret), day), s.region), s.service), "aws4_request")
	k = &signingKey{secret: secret, day: day}
	k.macs.New = func() any { return hmac.New(sha256.New, key) }
	s.mu.Lock()
	s.key = k
	s.mu.Unlock()
	return k
}

// sigState is the per-request scratch of a signature, pooled.
type sigState struct {
	h   hash.Hash // SHA-256 of the canonical request
	buf []byte    // the signed headers and the canonical request
	sts []byte    // the string to sign
}

var sigStates = sync.Pool{New: func() any {
	return &sigState{h: sha256.New(), buf: make([]byte, 0, 512), sts: make([]byte, 0, 192)}
}}

// authorization returns the Authorization header's value for a PUT of
// length bytes to path (the escaped path of the request line) on host (as
// the Host header carries it), signed at t.
func (s *putSigner) authorization(creds aws.Credentials, t sigTime, host, path string, length int64, h putHeaders) string {
	st := sigStates.Get().(*sigState)
	defer sigStates.Put(st)

	// The signed headers, in the order SigV4 sorts their names.
	signed := st.buf[:0]
	if length > 0 {
		signed = append(signed, "content-length;"...)
	}
	signed = append(signed, "host;"...)
	if h.ifMatch != "" {
		signed = append(signed, "if-match;"...)
	}
	if h.ifNoneMatch != "" {
		signed = append(signed, "if-none-match;"...)
	}
	signed = append(signed, "x-amz-content-sha256;x-amz-date;"...)
	if h.securityToken != "" {
		signed = append(signed, "x-amz-security-token;"...)
	}
	nSigned := len(signed)

	// The canonical request.
	c := signed
	c = append(c, "PUT\n"...)
	if path == "" {
		path = "/"
	}
	c = append(c, path...)
	c = append(c, "\n\n"...) // no query
	if length > 0 {
		c = append(c, "content-length:"...)
		c = strconv.AppendInt(c, length, 10)
		c = append(c, '\n')
	}
	c = appendCanonicalHeader(c, "host:", host)
	if h.ifMatch != "" {
		c = appendCanonicalHeader(c, "if-match:", h.ifMatch)
	}
	if h.ifNoneMatch != "" {
		c = appendCanonicalHeader(c, "if-none-match:", h.ifNoneMatch)
	}
	c = appendCanonicalHeader(c, "x-amz-content-sha256:", h.payloadHash)
	// Without the separator that ended the list of signed headers.
	c = appendCanonicalTail(c, t.amzDate, h.securityToken, signed[:nSigned-1], h.payloadHash)
	a := s.sign(st, creds, t, c[nSigned:], signed[:nSigned-1])
	st.buf = c[:0]
	return a
}

// sign returns the Authorization header's value for the canonical request
// c, whose signed headers are signed (names separated by ';'), signed at
// t; st's hash and buffer are its scratch.
func (s *putSigner) sign(st *sigState, creds aws.Credentials, t sigTime, c, signed []byte) string {
	st.h.Reset()
	st.h.Write(c)
	var sum [sha256.Size]byte

	// The string to sign, then the signature.
	scope := t.day + "/" + s.region + "/" + s.service + "/aws4_request"
	sts := st.sts[:0]
	sts = append(sts, "AWS4-HMAC-SHA256\n"...)
	sts = append(sts, t.amzDate...)
	sts = append(sts, '\n')
	sts = append(sts, scope...)
	sts = append(sts, '\n')
	sts = hex.AppendEncode(sts, st.h.Sum(sum[:0]))
	st.sts = sts[:0]
	key := s.signingKeyFor(creds.SecretAccessKey, t.day)
	mac := key.macs.Get().(hash.Hash)
	mac.Reset()
	mac.Write(sts)
	sig := mac.Sum(sum[:0])
	key.macs.Put(mac)

	var a strings.Builder
	a.Grow(len("AWS4-HMAC-SHA256 Credential=/, SignedHeaders=, Signature=") + len(creds.AccessKeyID) + len(scope) + len(signed) + 2*sha256.Size)
	a.WriteString("AWS4-HMAC-SHA256 Credential=")
	a.WriteString(creds.AccessKeyID)
	a.WriteByte('/')
	a.WriteString(scope)
	a.WriteString(", SignedHeaders=")
	a.Write(signed)
	a.WriteString(", Signature=")
	var hx [2 * sha256.Size]byte
	hex.Encode(hx[:], sig)
	a.Write(hx[:])
	return a.String()
}

// appendCanonicalTail ends a canonical request after its headers up to
// x-amz-content-sha256: x-amz-date, x-amz-security-token when there is a
// session token, the list of signed headers and the payload's hash.
func appendCanonicalTail[S string | []byte](c []byte, amzDate, token string, signed S, payloadHash string) []byte {
	c = appendCanonicalHeader(c, "x-amz-date:", amzDate)
	if token != "" {
		c = appendCanonicalHeader(c, "x-amz-security-token:", token)
	}
	c = append(c, '\n')
	c = append(c, signed...)
	c = append(c, '\n')
	return append(c, payloadHash...)
}

// appendCanonicalHeader appends name (with its colon) and value as SigV4
// canonicalises a header: leading and trailing spaces trimmed, inner runs
// of spaces made one.
func appendCanonicalHeader(c []byte, name, value string) []byte {
	c = append(c, name...)
	value = strings.TrimSpace(value)
	for i := 0; i < len(value); i++ {
		if value[i] == ' ' && i > 0 && value[i-1] == ' ' {
			continue
		}
		c = append(c, value[i])
	}
	return append(c, '\n')
}

// signingHost is the Host header of a request to host (host[:port]) over
// scheme, as the SDK's signer sets it: without the scheme's default port.
func signingHost(scheme, host string) string {
	colon := strings.IndexByte(host, ':')
	if colon < 0 {
		return host
	}
	port := host[colon+1:]
	if i := strings.Index(host, "]:"); i >= 0 {
		port = host[i+2:]
	} else if strings.Contains(host, "]") {
		return host
	}
	scheme = strings.ToLower(scheme)
	if port == "" || scheme == "http" && port == "80" || scheme == "https" && port == "443" {
		if i := strings.IndexByte(host, ']'); i >= 0 {
			return strings.TrimPrefix(host[:i], "[")
		}
		return host[:colon]
	}
	return host
}
