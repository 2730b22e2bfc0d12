package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// The multi-object delete on the lean path: the request the SDK's
// DeleteObjects sends (POST ?delete with the XML list of keys, quiet, and
// the CRC32 of the body in x-amz-checksum-crc32, which S3 requires of this
// operation in place of the older Content-MD5), signed by the lean PUT's
// signer, sent on the same HTTP/1.1 connections and retried by the same
// retryer. Through the SDK the request costs its middleware stack, an XML
// encoder over a list of key structs and an XML decoder over a quiet
// answer that is usually empty; a node sends one every few dozen firings.
//
// The payload's SHA-256 is always signed (over HTTPS too, where the PUTs
// leave it out): the body is a few KiB at most, and its hash then covers
// the keys wherever TLS ends.

const deleteObjects = "DeleteObjects"

// leanDeletable reports whether every key can go in the lean request's XML
// as it is written here: valid UTF-8 without control characters (which XML
// 1.0 cannot carry at all, or only as character references). Others go
// through the SDK.
func leanDeletable(keys []string) bool {
	for _, k := range keys {
		if !utf8.ValidString(k) {
			return false
		}
		for _, r := range k {
			if r < 0x20 || r == 0x7f || r == 0xfffe || r == 0xffff {
				return false
			}
		}
	}
	return true
}

// deleteBody is the quiet DeleteObjects request body for keys, as the
// SDK's serialiser writes it.
func deleteBody(buf []byte, keys []string) []byte {
	buf = append(buf, `<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`...)
	for _, k := range keys {
		buf = append(buf, "<Object><Key>"...)
		for i := 0; i < len(k); i++ {
			switch c := k[i]; c {
			case '&':
				buf = append(buf, "&amp;"...)
			case '<':
				buf = append(buf, "&lt;"...)
			case '>':
				buf = append(buf, "&gt;"...)
			default:
				buf = append(buf, c)
			}
		}
		buf = append(buf, "</Key></Object>"...)
	}
	return append(buf, "<Quiet>true</Quiet></Delete>"...)
}

// deleteResult is the part of a DeleteObjects answer the client reads: in
// quiet mode, the keys that were not deleted.
type deleteResult struct {
	Errors []struct {
		Key     string `xml:"Key"`
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	} `xml:"Error"`
}

// deleteBatch sends one quiet DeleteObjects request for keys (at most
// bucket.MaxDeleteBatch, each leanDeletable) with the SDK's retries and
// returns the answer's per-key errors; an error ends as the SDK's DeleteObjects
// would for the same answers.
func (l *leanPut) deleteBatch(ctx context.Context, keys []string) (deleteResult, error) {
	start := time.Now()
	body := deleteBody(make([]byte, 0, 80+40*len(keys)), keys)
	var crc [4]byte
	binary.BigEndian.PutUint32(crc[:], crc32.ChecksumIEEE(body))
	sum := sha256.Sum256(body)
	dh := deleteHeaders{
		checksum:    base64.StdEncoding.EncodeToString(crc[:]),
		payloadHash: hex.EncodeToString(sum[:]),
	}
	var res deleteResult
	err := l.retry(ctx, func() error {
		var err error
		res, err = l.sendDelete(ctx, body, dh)
		return err
	})
	return res, l.ended(ctx, deleteObjects, start, err)
}

// deleteHeaders are a lean DeleteObjects request's own signed headers.
type deleteHeaders struct {
	checksum      string // x-amz-checksum-crc32
	payloadHash   string
	securityToken string
}

// deletePath is the escaped path of the bucket's DeleteObjects request.
func (l *leanPut) deletePath() string {
	if l.baseRawPath == "" {
		return "/"
	}
	return l.baseRawPath
}

// sendDelete makes one attempt of a DeleteObjects request.
func (l *leanPut) sendDelete(ctx context.Context, body []byte, dh deleteHeaders) (deleteResult, error) {
	if l.metrics != nil {
		l.metrics.s3Metrics.attempts.WithLabelValues(deleteObjects).Inc()
	}
	creds, err := l.attempt(ctx)
	if err != nil {
		return deleteResult{}, err
	}
	dh.securityToken = creds.SessionToken
	t := newSigTime(time.Now())
	path := l.deletePath()
	auth := l.signer.deleteAuthorization(creds, t, l.host, path, int64(len(body)), dh)
	if l.h1 == nil {
		return l.sendDeleteStd(ctx, l.deleteURL(), body, t, dh, auth)
	}
	h := make([]byte, 0, 512)
	h = append(h, "POST "...)
	h = append(h, path...)
	h = append(h, "?delete= HTTP/1.1\r\nHost: "...)
	h = append(h, l.host...)
	h = append(h, "\r\nUser-Agent: wasmkeep-alarms\r\nContent-Length: "...)
	h = strconv.AppendInt(h, int64(len(body)), 10)
	h = append(h, "\r\nContent-Type: application/xml\r\nX-Amz-Checksum-Crc32: "...)
	h = append(h, dh.checksum...)
	h = append(h, "\r\nX-Amz-Content-Sha256: "...)
	h = append(h, dh.payloadHash...)
	h = appendAuthHeaders(h, t.amzDate, dh.securityToken, auth)

	deadline := l.deadline(ctx)
	var res deleteResult
	var failed error
	err = l.h1.roundTrip(ctx, deadline, h, body, true, func(_ *okAnswer, resp *http.Response) bool {
		switch {
		case resp.StatusCode >= 200 && resp.StatusCode < 300:
			res, failed = readDeleteResult(resp)
			return failed == nil && drain(resp.Body)
		case (resp.StatusCode == http.StatusTemporaryRedirect || resp.StatusCode == http.StatusPermanentRedirect) &&
			resp.Header.Get("Location") != "":
			failed = &redirected{location: resp.Header.Get("Location")}
			return drain(resp.Body)
		}
		failed = responseError(resp)
		return drain(resp.Body)
	})
	if err != nil {
		return deleteResult{}, sendError(ctx, err)
	}
	if re, ok := failed.(*redirected); ok {
		to, perr := l.deleteURL().Parse(re.location)
		if perr != nil {
			return deleteResult{}, &smithyhttp.RequestSendError{Err: fmt.Errorf("redirect to %q: %w", re.location, perr)}
		}
		// The attempt is counted already: net/http's is not another.
		return l.sendDeleteStd(context.WithValue(ctx, attemptsKey{}, nil), to, body, t, dh, auth)
	}
	return res, failed
}

// deleteURL is the URL of the bucket's DeleteObjects request.
func (l *leanPut) deleteURL() *url.URL {
	u := l.base
	u.User = nil
	u.RawQuery = "delete="
	return &u
}

// sendDeleteStd sends the signed DeleteObjects request to u through
// net/http (no lean client, or a redirect).
func (l *leanPut) sendDeleteStd(ctx context.Context, u *url.URL, body []byte, t sigTime, dh deleteHeaders, auth string) (deleteResult, error) {
	h := make(http.Header, 7)
	h["Content-Type"] = []string{"application/xml"}
	h["X-Amz-Checksum-Crc32"] = []string{dh.checksum}
	h["X-Amz-Content-Sha256"] = []string{dh.payloadHash}
	h["X-Amz-Date"] = []string{t.amzDate}
	h["Authorization"] = []string{auth}
	if dh.securityToken != "" {
		h["X-Amz-Security-Token"] = []string{dh.securityToken}
	}
	resp, err := l.doStd(ctx, http.MethodPost, u, h, body)
	if err != nil {
		return deleteResult{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		res, err := readDeleteResult(resp)
		_, _ = io.Copy(io.Discard, resp.Body)
		return res, err
	}
	return deleteResult{}, responseError(resp)
}

// readDeleteResult reads a 2xx DeleteObjects answer (up to 16 MiB: a
// thousand errors with long keys and messages).
func readDeleteResult(resp *http.Response) (deleteResult, error) {
	var res deleteResult
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return res, &smithy.DeserializationError{Err: fmt.Errorf("failed to read the response body, %w", err)}
	}
	if !bytes.Contains(body, []byte("Error")) {
		// No element named Error, whatever its prefix: nothing failed.
		// (A store may list every deleted key even in quiet mode, which
		// costs a decoder a dozen allocations per key.)
		return res, nil
	}
	if err := xml.Unmarshal(body, &res); err != nil {
		return res, &smithy.DeserializationError{Err: fmt.Errorf("failed to decode the response body, %w", err), Snapshot: body}
	}
	return res, nil
}

// deleteAuthorization returns the Authorization header's value for a
// DeleteObjects request of length bytes to path (the bucket's escaped
// path) on host, signed at t: the SDK signer's for the same request.
func (s *putSigner) deleteAuthorization(creds aws.Credentials, t sigTime, host, path string, length int64, dh deleteHeaders) string {
	signed := "content-length;content-type;host;x-amz-checksum-crc32;x-amz-content-sha256;x-amz-date"
	if dh.securityToken != "" {
		signed += ";x-amz-security-token"
	}
	c := make([]byte, 0, 512)
	c = append(c, "POST\n"...)
	c = append(c, path...)
	c = append(c, "\ndelete=\ncontent-length:"...)
	c = strconv.AppendInt(c, length, 10)
	c = append(c, "\ncontent-type:application/xml\n"...)
	c = appendCanonicalHeader(c, "host:", host)
	c = appendCanonicalHeader(c, "x-amz-checksum-crc32:", dh.checksum)
	c = appendCanonicalHeader(c, "x-amz-content-sha256:", dh.payloadHash)
	c = appendCanonicalTail(c, t.amzDate, dh.securityToken, signed, dh.payloadHash)
	st := sigStates.Get().(*sigState)
	defer sigStates.Put(st)
	return s.sign(st, creds, t, c, []byte(signed))
}
