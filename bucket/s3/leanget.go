package s3

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// The lean GET: a GetObject of a whole object sent as the lean PUT is
// (lean.go), signed with the same SigV4 (getAuthorization), on the
// bucket's own HTTP/1.1 connections, its answer's body read into one
// slice of the length the answer gives, and retried by the client's own
// retryer on the errors the SDK builds for the same failure. A takeover
// reads the ownership record and the dead holder's snapshot with it.
//
// It asks for the body as the store holds it (Accept-Encoding: identity,
// as the SDK does). What it leaves out, against the SDK path: what the
// lean PUT leaves out, and the check of a checksum the store kept with
// the object (the SDK asks for it, x-amz-checksum-mode, and checks it when
// the answer carries one; the lean PUT stores none): a snapshot is
// checked whole by SQLite before it is restored (engine.CheckSnapshot),
// and a record is parsed. A body cut short fails its attempt, which the
// retryer retries.

const getObject = "GetObject"

// get reads key's body and ETag, with the SDK's retries.
func (l *leanPut) get(ctx context.Context, key string) ([]byte, string, error) {
	start := time.Now()
	rawPath := smithyhttp.JoinPath(l.baseRawPath, "/"+escapeKey(key))
	var body []byte
	var etag string
	err := l.retry(ctx, func() error {
		var err error
		body, etag, err = l.sendGet(ctx, key, rawPath)
		return err
	})
	return body, etag, l.ended(ctx, getObject, start, err)
}

// ended ends operation op of the lean path that started at start: its
// error as the SDK's (a *smithy.OperationError) and its metrics.
func (l *leanPut) ended(ctx context.Context, op string, start time.Time, err error) error {
	if err != nil {
		err = &smithy.OperationError{ServiceID: "S3", OperationName: op, Err: err}
	}
	if m := l.metrics; m != nil {
		m.s3Metrics.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
		m.requests.WithLabelValues(op, requestResult(ctx, err)).Inc()
	}
	return err
}

// sendGet makes one attempt of a GET of key, whose escaped path is
// rawPath.
func (l *leanPut) sendGet(ctx context.Context, key, rawPath string) ([]byte, string, error) {
	if l.metrics != nil {
		l.metrics.s3Metrics.attempts.WithLabelValues(getObject).Inc()
	}
	creds, err := l.attempt(ctx)
	if err != nil {
		return nil, "", err
	}
	t := newSigTime(time.Now())
	auth := l.signer.getAuthorization(creds, t, l.host, rawPath)
	if l.h1 == nil {
		return l.sendGetStd(ctx, l.keyURL(key, rawPath), t, creds.SessionToken, auth)
	}
	bp := heads.Get().(*[]byte)
	defer heads.Put(bp)
	h := append((*bp)[:0], "GET "...)
	h = append(h, rawPath...)
	h = append(h, " HTTP/1.1\r\nHost: "...)
	h = append(h, l.host...)
	h = append(h, "\r\nUser-Agent: wasmkeep-alarms\r\nAccept-Encoding: identity\r\nX-Amz-Content-Sha256: "...)
	h = append(h, emptyPayloadHash...)
	h = appendAuthHeaders(h, t.amzDate, creds.SessionToken, auth)
	*bp = h

	var body []byte
	var etag string
	var failed error
	err = l.h1.roundTrip(ctx, l.deadline(ctx), h, nil, true, func(_ *okAnswer, resp *http.Response) bool {
		switch {
		case resp.StatusCode == http.StatusOK:
			etag = resp.Header.Get("ETag")
			body, failed = readBody(resp)
			return failed == nil
		case (resp.StatusCode == http.StatusTemporaryRedirect || resp.StatusCode == http.StatusPermanentRedirect) &&
			resp.Header.Get("Location") != "":
			failed = &redirected{location: resp.Header.Get("Location")}
			return drain(resp.Body)
		case resp.StatusCode >= 200 && resp.StatusCode < 300:
			failed = notWhole(resp)
			return drain(resp.Body)
		}
		failed = responseError(resp)
		return drain(resp.Body)
	})
	if err != nil {
		return nil, "", sendError(ctx, err)
	}
	if re, ok := failed.(*redirected); ok {
		to, perr := l.keyURL(key, rawPath).Parse(re.location)
		if perr != nil {
			return nil, "", &smithyhttp.RequestSendError{Err: fmt.Errorf("redirect to %q: %w", re.location, perr)}
		}
		// The attempt is counted already: net/http's is not another.
		return l.sendGetStd(context.WithValue(ctx, attemptsKey{}, nil), to, t, creds.SessionToken, auth)
	}
	return body, etag, failed
}

// sendGetStd sends the signed GET to u through net/http (see sendStd).
func (l *leanPut) sendGetStd(ctx context.Context, u *url.URL, t sigTime, securityToken, auth string) ([]byte, string, error) {
	h := make(http.Header, 5)
	// The body as the store holds it: net/http would otherwise ask for it
	// gzipped and undo that itself (the SDK asks for identity too).
	h["Accept-Encoding"] = []string{"identity"}
	h["X-Amz-Content-Sha256"] = []string{emptyPayloadHash}
	h["X-Amz-Date"] = []string{t.amzDate}
	h["Authorization"] = []string{auth}
	if securityToken != "" {
		h["X-Amz-Security-Token"] = []string{securityToken}
	}
	resp, err := l.doStd(ctx, http.MethodGet, u, h, nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
		body, err := readBody(resp)
		if err != nil {
			return nil, "", err
		}
		return body, resp.Header.Get("ETag"), nil
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, "", notWhole(resp)
	}
	return nil, "", responseError(resp)
}

// notWhole is the error of a GET answered with a success that is not the
// whole object: a part of it (206), or none of it.
func notWhole(resp *http.Response) error {
	return &smithy.DeserializationError{Err: fmt.Errorf("a GET of the whole object answered %s", resp.Status)}
}

// readBody reads a GET's body whole: into one slice of the length the
// answer gives, or, without one, as it comes. A body cut short is an
// error the retryer retries (the SDK's, for a body it could not read, is
// not: it reads the body after the retry loop; here the attempt is whole
// only with its body).
func readBody(resp *http.Response) ([]byte, error) {
	n := resp.ContentLength
	if n < 0 || n > maxPreallocatedBody {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, &smithyhttp.RequestSendError{Err: fmt.Errorf("reading the body: %w", err)}
		}
		return b, nil
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(resp.Body, b); err != nil {
		return nil, &smithyhttp.RequestSendError{Err: fmt.Errorf("reading the body (%d bytes): %w", n, err)}
	}
	return b, nil
}

// maxPreallocatedBody is the largest body readBody makes room for at once
// from the length an answer gives; a larger one grows as it comes, so
// that a wrong length cannot make the node allocate it.
const maxPreallocatedBody = 64 << 20

// getAuthorization returns the Authorization header's value for a GET of
// path (the escaped path of the request line) on host, signed at t: the
// SDK signer's for the same request.
func (s *putSigner) getAuthorization(creds aws.Credentials, t sigTime, host, path string) string {
	signed := "host;x-amz-content-sha256;x-amz-date"
	if creds.SessionToken != "" {
		signed += ";x-amz-security-token"
	}
	st := sigStates.Get().(*sigState)
	defer sigStates.Put(st)
	c := append(st.buf[:0], "GET\n"...)
	if path == "" {
		path = "/"
	}
	c = append(c, path...)
	c = append(c, "\n\n"...) // no query
	c = appendCanonicalHeader(c, "host:", host)
	c = appendCanonicalHeader(c, "x-amz-content-sha256:", emptyPayloadHash)
	c = appendCanonicalTail(c, t.amzDate, creds.SessionToken, signed, emptyPayloadHash)
	a := s.sign(st, creds, t, c, []byte(signed))
	st.buf = c[:0]
	return a
}
