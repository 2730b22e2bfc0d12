package node

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/format"
)

// The stable codes of the HTTP API's errors: the "code" member of every
// application/problem+json answer (RFC 9457). A client decides on the code
// and the status, never on the detail, which is for people.
const (
	CodeBadRequest    = "bad_request"  // 400: a malformed actor ID, time, kind or body
	CodeUnauthorized  = "unauthorized" // 401: no token, or an unknown one
	CodeForbidden     = "forbidden"    // 403: the token does not reach that tenant or route
	CodeNotFound      = "not_found"    // 404: no such route, class not served, actor never started
	CodeMethod        = "method_not_allowed"
	CodeAlarmMoved    = "alarm_moved"     // 409: the alarm is not the time the request named
	CodeGuestFailed   = "guest_failed"    // 422: the guest returned non-zero or trapped
	CodeInternal      = "internal"        // 500: a bug or a corrupt snapshot
	CodeUnavailable   = "unavailable"     // 503: try again (Retry-After)
	CodeLeaseNotValid = "lease_not_valid" // 503: the node's lease is not valid now
	CodeHeldElsewhere = "held_elsewhere"  // 503: another node holds the actor now
	CodeForwardFailed = "forward_failed"  // 503: the holder could not be reached
	CodeBucketDown    = "bucket_unreachable"
	CodeMemoryBusy    = "memory_busy" // 503: the instances' memory is in use
	CodeDiskFull      = "disk_full"   // 507: the node's data directory is full
	CodeThrottled     = "throttled"   // 429: the tenant's requests are past a limit of this node (Retry-After); nothing ran

	// CodeIdempotencyKeyReused is a 422: the request's Idempotency-Key is
	// recorded for a different request body; nothing ran.
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	// CodeNewerFormat is a 503: the actor's record in the bucket (its
	// ownership record, its holder's lease, its snapshot or its schema,
	// its dead letter's record)
	// is of a format newer than this node's build reads: the event did
	// not run, and the record is left as it is. A node that reads it (this
	// one, upgraded) serves the actor.
	CodeNewerFormat = "newer_format"
)

// Problem is the body of every error answer of the HTTP API
// (application/problem+json, RFC 9457): Type is "about:blank", Title the
// status's text, Code one of the Code constants.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
}

// writeProblem writes an error answer.
func writeProblem(w http.ResponseWriter, status int, code, detail string) {
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	if pr, ok := w.(problemRecorder); ok {
		pr.setProblem(code, detail) // the outcome of the request's span
	}
	w.WriteHeader(status)
	b, _ := json.Marshal(Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Code: code})
	w.Write(append(b, '\n'))
}

// codeOf is the code of a 503 answer for err.
func codeOf(err error) string {
	switch {
	case errors.Is(err, cluster.ErrLeaseNotValid):
		return CodeLeaseNotValid
	case errors.Is(err, ErrBucketUnreachable):
		return CodeBucketDown
	case errors.Is(err, format.ErrNewer):
		return CodeNewerFormat
	}
	return CodeUnavailable
}

// problemRoutes answers a request no route matches as the mux would (404,
// or 405 with Allow), but with a problem body.
type problemRoutes struct{ mux *http.ServeMux }

func (p problemRoutes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := p.mux.Handler(r); pattern != "" {
		p.mux.ServeHTTP(w, r)
		return
	}
	rec := &statusOnly{header: http.Header{}}
	p.mux.ServeHTTP(rec, r)
	if allow := rec.header.Get("Allow"); allow != "" {
		w.Header().Set("Allow", allow)
	}
	switch {
	case rec.status >= 300 && rec.status < 400:
		p.mux.ServeHTTP(w, r) // the mux's redirect to the clean path
	case rec.status == http.StatusMethodNotAllowed:
		writeProblem(w, rec.status, CodeMethod, r.Method+" is not allowed on "+r.URL.Path)
	default:
		writeProblem(w, http.StatusNotFound, CodeNotFound, "no route for "+r.Method+" "+r.URL.Path)
	}
}

// statusOnly records the status and headers a handler writes, and drops
// its body.
type statusOnly struct {
	header http.Header
	status int
}

func (s *statusOnly) Header() http.Header { return s.header }
func (s *statusOnly) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return len(b), nil
}
func (s *statusOnly) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
}
