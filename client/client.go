// Package client calls the HTTP API of a wasmkeep node (keepnode, or any
// host serving node.Handler): run requests on actors, delete them, and
// read, set, clear and fire an actor's alarm. Any node of a cluster will
// do: a node that does not hold the actor forwards the call to the one
// that does.
//
// Every answer other than a success is a *Problem (the node's
// application/problem+json), with the HTTP status, the stable code, the
// detail for people, and the Retry-After the node sent. Decide on the
// status and the code, never on the detail. The client retries one
// answer itself: a 429 (code throttled: the tenant is past a limit of the
// node, and nothing ran), after its Retry-After, up to
// DefaultThrottleRetries times (WithThrottleRetries), within the call's
// context. Nothing else is retried: a 503 (Problem.Temporary) may be sent
// again after Problem.RetryAfter, and a request event whose outcome is
// unknown (no answer, or a 503 after ExecDurable) under its idempotency
// key (WithIdempotencyKey), which makes sending it again safe.
//
// The API is described by node/openapi.json, which a node serves at
// GET /v1/openapi.json.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/alarms/abi"
)

// Client calls one node's HTTP API. It is safe for concurrent use.
type Client struct {
	base     string // scheme://host[:port][/path], no trailing slash
	token    string
	hc       *http.Client
	throttle int // retries of a 429
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends "Authorization: Bearer token" on every call: an
// operator's token, or a tenant's for that tenant's actors.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// DefaultThrottleRetries is how many times a client sends a call again
// after a 429 (throttled), each after the node's Retry-After.
const DefaultThrottleRetries = 3

// WithThrottleRetries sets how many times a call answered 429 (throttled:
// nothing ran) is sent again, each after the node's Retry-After, as long
// as the call's context allows the wait (default DefaultThrottleRetries;
// 0: never, the 429 is returned as a *Problem).
func WithThrottleRetries(n int) Option { return func(c *Client) { c.throttle = max(0, n) } }

// WithHTTPClient makes the calls with hc (its transport, timeout and
// redirects) instead of the default, a client with a 90 s timeout.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithTLS makes the calls over a transport with cfg (a CA to trust, a
// client certificate), replacing the transport of the HTTP client.
func WithTLS(cfg *tls.Config) Option {
	return func(c *Client) {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = cfg
		hc := *c.hc
		hc.Transport = tr
		c.hc = &hc
	}
}

// DefaultTimeout bounds each call of a client made without
// WithHTTPClient: longer than a node's wait for a failover inside a
// request (at the design's 10 s lease, 15.3 s) and a slow event.
const DefaultTimeout = 90 * time.Second

// New returns a client of the node at baseURL (http://HOST:PORT or
// https://HOST:PORT).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("client: node URL %q: want http://HOST:PORT or https://HOST:PORT", baseURL)
	}
	c := &Client{base: strings.TrimRight(baseURL, "/"), hc: &http.Client{Timeout: DefaultTimeout}, throttle: DefaultThrottleRetries}
	for _, o := range opts {
		o(c)
	}
	if strings.ContainsAny(c.token, " \t\r\n") {
		return nil, errors.New("client: the token holds a space or a line break")
	}
	return c, nil
}

// The codes of the node's errors (Problem.Code).
const (
	CodeBadRequest    = "bad_request"        // 400: a malformed actor ID, time, kind or body
	CodeUnauthorized  = "unauthorized"       // 401: no token, or an unknown one
	CodeForbidden     = "forbidden"          // 403: the token does not reach that tenant
	CodeNotFound      = "not_found"          // 404: no such route, class not served, actor never started
	CodeMethod        = "method_not_allowed" // 405
	CodeAlarmMoved    = "alarm_moved"        // 409: the alarm is not at the time the call named
	CodeGuestFailed   = "guest_failed"       // 422: the guest returned non-zero or trapped
	CodeInternal      = "internal"           // 500: a bug or a corrupt snapshot
	CodeUnavailable   = "unavailable"        // 503
	CodeLeaseNotValid = "lease_not_valid"    // 503: the node's lease is not valid now
	CodeHeldElsewhere = "held_elsewhere"     // 503: another node holds the actor now
	CodeForwardFailed = "forward_failed"     // 503: the holder could not be reached
	CodeBucketDown    = "bucket_unreachable" // 503
	CodeMemoryBusy    = "memory_busy"        // 503: the instances' memory is in use
	CodeDiskFull      = "disk_full"          // 507: the node's data directory is full
	CodeThrottled     = "throttled"          // 429: the tenant is past a limit of the node; nothing ran (retried, see WithThrottleRetries)

	// CodeIdempotencyKeyReused is a 422: the call's idempotency key is
	// recorded for a different request body; nothing ran.
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	// CodeNewerFormat is a 503: a record of the actor in the bucket is of
	// a format newer than the node's build reads (a rolling upgrade);
	// nothing ran. A node that reads it serves the actor: try again after
	// Retry-After, through any node.
	CodeNewerFormat = "newer_format"
)

// Problem is a node's answer other than a success (RFC 9457).
type Problem struct {
	// Status is the HTTP status; Code the node's stable code ("" when the
	// answer was not application/problem+json: a proxy's, say).
	Status int
	Code   string
	// Title is the status's text; Detail says, for people, what went
	// wrong (the node names the actor and the cause), or is the body of
	// an answer that was not a problem.
	Title, Detail string
	// RetryAfter is the node's Retry-After (0 without one): during a
	// failover, how long it is still expected to take.
	RetryAfter time.Duration
	// Method and URL are the call's.
	Method, URL string
}

func (p *Problem) Error() string {
	code := ""
	if p.Code != "" {
		code = " (" + p.Code + ")"
	}
	return fmt.Sprintf("%s %s: the node answered %d%s: %s", p.Method, p.URL, p.Status, code, p.Detail)
}

// Temporary reports whether the call may succeed if sent again, after
// RetryAfter: a 503, or a 429 the client's own retries did not get past.
// (After an exec-durable request, a 503 may also mean the event committed
// but its upload failed: its outcome is unknown. After a 429 nothing ran.)
func (p *Problem) Temporary() bool {
	return p.Status == http.StatusServiceUnavailable || p.Status == http.StatusTooManyRequests
}

// IsCode reports whether err is a *Problem with the code.
func IsCode(err error, code string) bool {
	var p *Problem
	return errors.As(err, &p) && p.Code == code
}

// AlarmState is an actor's committed alarm state (GET .../alarm), and
// after alarm:fire what it ran.
type AlarmState struct {
	// AlarmMs is the alarm's time in Unix milliseconds; nil with no alarm.
	AlarmMs *int64 `json:"alarm_ms"`
	// Alarm is AlarmMs in RFC 3339 (UTC, milliseconds); "" with no alarm.
	Alarm string `json:"alarm,omitempty"`
	// RetryCount is how many attempts at the alarm failed since it was
	// set: the retry count its next on-alarm is called with.
	RetryCount int `json:"retry_count"`
	// Node is the ID of the node that answered (in a cluster); From
	// where it read: "holder", "bucket" (nobody holds the actor) or
	// "none" (no such actor).
	Node string `json:"node,omitempty"`
	From string `json:"from"`
	// Fired is what FireAlarm ran (nil elsewhere).
	Fired *Fired `json:"fired,omitempty"`
	// DeadLetter, read by Alarm, is the actor's dead letter while it
	// waits on one (nil otherwise).
	DeadLetter *DeadLetter `json:"dead_letter,omitempty"`
}

// At is the alarm's time, and false with no alarm.
func (s AlarmState) At() (time.Time, bool) {
	if s.AlarmMs == nil {
		return time.Time{}, false
	}
	return time.UnixMilli(*s.AlarmMs), true
}

// Fired is what an alarm:fire ran.
type Fired struct {
	// Ran is true when on-alarm was called, with ScheduledMs (Scheduled
	// in RFC 3339) and RetryCount.
	Ran         bool   `json:"ran"`
	ScheduledMs int64  `json:"scheduled_ms,omitempty"`
	Scheduled   string `json:"scheduled,omitempty"`
	RetryCount  int    `json:"retry_count"`
	// Error is why on-alarm failed ("" when it succeeded): its retry is
	// committed, or with GaveUp its class's last attempt was reached.
	Error  string `json:"error,omitempty"`
	GaveUp bool   `json:"gave_up,omitempty"`
}

// Readiness is a node's GET /v1/readyz.
type Readiness struct {
	Ready  bool   `json:"ready"`
	Lease  *Check `json:"lease,omitempty"`
	Bucket *Check `json:"bucket,omitempty"`
	Sweep  *Check `json:"sweep,omitempty"`
}

// Check is one check of Readiness.
type Check struct {
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// actorURL is the URL of the actor's resource, with suffix.
func (c *Client) actorURL(id abi.ActorID, suffix string) (string, error) {
	if err := id.Validate(); err != nil {
		return "", err
	}
	return c.base + "/v1/actors/" + url.PathEscape(id.Tenant) + "/" + url.PathEscape(id.Class) + "/" + url.PathEscape(id.Name) + suffix, nil
}

// do sends one call and returns the body of an answer with status want,
// or a *Problem.
func (c *Client) do(ctx context.Context, method, u, contentType string, body []byte, want int) ([]byte, http.Header, error) {
	return c.doHeader(ctx, method, u, contentType, nil, body, want)
}

// doHeader is do with headers of the call's own. A 429 is sent again
// after its Retry-After, up to c.throttle times, while ctx allows the
// wait: nothing ran.
func (c *Client) doHeader(ctx context.Context, method, u, contentType string, header http.Header, body []byte, want int) ([]byte, http.Header, error) {
	for tries := 0; ; tries++ {
		out, h, err := c.once(ctx, method, u, contentType, header, body, want)
		var p *Problem
		if tries >= c.throttle || !errors.As(err, &p) || p.Status != http.StatusTooManyRequests {
			return out, h, err
		}
		wait := max(p.RetryAfter, time.Second)
		if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
			return out, h, err // the wait would outlast the call
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return out, h, err
		case <-t.C:
		}
	}
}

// once sends one call.
func (c *Client) once(ctx context.Context, method, u, contentType string, header http.Header, body []byte, want int) ([]byte, http.Header, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: reading the answer: %w", method, u, err)
	}
	if resp.StatusCode == want {
		return out, resp.Header, nil
	}
	return out, resp.Header, problemOf(method, u, resp, out)
}

func problemOf(method, u string, resp *http.Response, body []byte) *Problem {
	p := &Problem{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode), Method: method, URL: u}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		p.RetryAfter = time.Duration(s) * time.Second
	}
	var doc struct{ Title, Detail, Code string }
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "application/problem+json" && json.Unmarshal(body, &doc) == nil {
		p.Code, p.Detail = doc.Code, doc.Detail
		if doc.Title != "" {
			p.Title = doc.Title
		}
		return p
	}
	const most = 1 << 10
	p.Detail = strings.TrimSpace(string(body[:min(len(body), most)]))
	return p
}

// Exec runs a request event on the actor (creating it if need be) and
// returns the guest's response. The event's writes are replicated to the
// bucket after the answer.
func (c *Client) Exec(ctx context.Context, id abi.ActorID, request []byte, opts ...ExecOption) ([]byte, error) {
	return c.exec(ctx, id, "exec", request, opts)
}

// ExecDurable is Exec with the event's writes in the bucket before the
// answer. A 503 after it may mean the event committed and its upload
// failed: its outcome is then unknown. Sent under an idempotency key
// (WithIdempotencyKey), it may be sent again, to any node, until it is
// answered: it runs at most once.
func (c *Client) ExecDurable(ctx context.Context, id abi.ActorID, request []byte, opts ...ExecOption) ([]byte, error) {
	return c.exec(ctx, id, "exec-durable", request, opts)
}

// ExecOption adds to one Exec or ExecDurable call.
type ExecOption func(*execCall)

type execCall struct {
	key      string
	keyed    bool
	replayed *bool
}

// MaxIdempotencyKeyLen is the longest idempotency key, in bytes.
const MaxIdempotencyKeyLen = 255

// ErrBadIdempotencyKey is the error of a call whose idempotency key the
// node would refuse (empty, over MaxIdempotencyKeyLen bytes, or a byte
// outside visible ASCII): it is not sent.
var ErrBadIdempotencyKey = errors.New("client: bad idempotency key: want 1 to 255 bytes of visible ASCII (0x21 to 0x7e)")

// WithIdempotencyKey sends the request under key (the Idempotency-Key
// header): 1 to MaxIdempotencyKeyLen bytes of visible ASCII, unique to
// the request (NewIdempotencyKey makes one). The node records the key and
// the response in the actor's database, in the event's own commit; a
// request under a key the actor has recorded runs nothing and is answered
// with the recorded response (Replayed tells). Send the same request, body
// and all, under the same key again when its outcome is unknown (no
// answer, or a 503): it runs at most once, and an ExecDurable that is
// answered has its event in the bucket, whichever node answered. The same
// key with another body is refused (a 422 Problem with
// CodeIdempotencyKeyReused). An actor keeps its latest keys only
// (keepnode -idempotency-keys, 128 by default): retry within those.
func WithIdempotencyKey(key string) ExecOption {
	return func(c *execCall) { c.key, c.keyed = key, true }
}

// Replayed sets *replayed, when the call succeeds, to whether the node
// answered from the record of the call's idempotency key (the
// Idempotent-Replayed header): the event had already run, and nothing ran
// now.
func Replayed(replayed *bool) ExecOption { return func(c *execCall) { c.replayed = replayed } }

// NewIdempotencyKey returns a new random idempotency key (32 hex digits).
func NewIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func validIdempotencyKey(key string) bool {
	if key == "" || len(key) > MaxIdempotencyKeyLen {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return false
		}
	}
	return true
}

func (c *Client) exec(ctx context.Context, id abi.ActorID, kind string, request []byte, opts []ExecOption) ([]byte, error) {
	var call execCall
	for _, o := range opts {
		o(&call)
	}
	u, err := c.actorURL(id, "?kind="+kind)
	if err != nil {
		return nil, err
	}
	var header http.Header
	if call.keyed {
		if !validIdempotencyKey(call.key) {
			return nil, fmt.Errorf("%w: %q", ErrBadIdempotencyKey, call.key)
		}
		header = http.Header{"Idempotency-Key": {call.key}}
	}
	if request == nil {
		request = []byte{}
	}
	out, h, err := c.doHeader(ctx, http.MethodPost, u, "application/octet-stream", header, request, http.StatusOK)
	if err != nil {
		return nil, err
	}
	if call.replayed != nil {
		*call.replayed = h.Get("Idempotent-Replayed") == "true"
	}
	return out, nil
}

// Delete deletes the actor: its state and its alarm.
func (c *Client) Delete(ctx context.Context, id abi.ActorID) error {
	u, err := c.actorURL(id, "")
	if err != nil {
		return err
	}
	_, _, err = c.do(ctx, http.MethodDelete, u, "", nil, http.StatusNoContent)
	return err
}

// Alarm reads the actor's committed alarm state. It creates nothing and
// takes no hold: an actor that does not exist is From "none".
func (c *Client) Alarm(ctx context.Context, id abi.ActorID) (AlarmState, error) {
	return c.alarm(ctx, http.MethodGet, id, "/alarm", nil)
}

// SetAlarm sets the actor's alarm at at (to the millisecond), as an
// event of its holder: committed, indexed and replicated before it
// returns. The retry count goes back to 0; the guest is not called. An
// actor that does not exist is a 404 (a request creates it).
func (c *Client) SetAlarm(ctx context.Context, id abi.ActorID, at time.Time) (AlarmState, error) {
	return c.alarm(ctx, http.MethodPut, id, "/alarm", fmt.Appendf(nil, `{"at_ms": %d}`, at.UnixMilli()))
}

// ClearAlarm clears the actor's alarm.
func (c *Client) ClearAlarm(ctx context.Context, id abi.ActorID) (AlarmState, error) {
	return c.alarm(ctx, http.MethodDelete, id, "/alarm", nil)
}

// ClearAlarmAt clears the actor's alarm only if it is at atMs (Unix
// milliseconds); otherwise nothing is cleared and the error is a 409
// Problem with CodeAlarmMoved.
func (c *Client) ClearAlarmAt(ctx context.Context, id abi.ActorID, atMs int64) (AlarmState, error) {
	return c.alarm(ctx, http.MethodDelete, id, "/alarm?if_at_ms="+strconv.FormatInt(atMs, 10), nil)
}

// FireAlarm runs the actor's on-alarm now. A failure of on-alarm is not
// an error: it is in the state's Fired.Error, its retry committed.
func (c *Client) FireAlarm(ctx context.Context, id abi.ActorID) (AlarmState, error) {
	return c.alarm(ctx, http.MethodPost, id, "/alarm:fire", nil)
}

func (c *Client) alarm(ctx context.Context, method string, id abi.ActorID, suffix string, body []byte) (AlarmState, error) {
	var st AlarmState
	u, err := c.actorURL(id, suffix)
	if err != nil {
		return st, err
	}
	ct := ""
	if body != nil {
		ct = "application/json"
	}
	out, _, err := c.do(ctx, method, u, ct, body, http.StatusOK)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("%s %s: the answer %q is not an alarm state: %v", method, u, out, err)
	}
	return st, nil
}

// Health returns nil while the node is live (GET /v1/healthz), else a
// *Problem (503 while its lease is not valid).
func (c *Client) Health(ctx context.Context) error {
	_, _, err := c.do(ctx, http.MethodGet, c.base+"/v1/healthz", "", nil, http.StatusOK)
	return err
}

// Ready returns the node's readiness (GET /v1/readyz): Ready false, with
// the checks that failed, when the node answered 503.
func (c *Client) Ready(ctx context.Context) (Readiness, error) {
	var r Readiness
	out, _, err := c.do(ctx, http.MethodGet, c.base+"/v1/readyz", "", nil, http.StatusOK)
	var p *Problem
	if errors.As(err, &p) && p.Status == http.StatusServiceUnavailable && json.Unmarshal(out, &r) == nil {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return r, fmt.Errorf("GET /v1/readyz: the answer %q is not a readiness: %v", out, err)
	}
	return r, nil
}

// DeadLetter is one dead letter (GET /v1/tenants/{tenant}/dead-letters,
// and AlarmState.DeadLetter): an actor whose alarm's retries were given
// up after its class's last attempt.
type DeadLetter struct {
	Tenant string `json:"tenant"`
	Class  string `json:"class"`
	// Name is the actor's name; NameHex its bytes in hex when the name
	// is not UTF-8.
	Name    string `json:"name"`
	NameHex string `json:"name_hex,omitempty"`
	// ScheduledMs is the time the last attempt ran for; FailedMs when
	// it failed and the retries were given up (Unix ms; Scheduled and
	// Failed in RFC 3339).
	ScheduledMs int64  `json:"scheduled_ms"`
	Scheduled   string `json:"scheduled"`
	Attempts    int    `json:"attempts"`
	Error       string `json:"error"`
	FailedMs    int64  `json:"failed_ms"`
	Failed      string `json:"failed"`
}

// Actor is the dead letter's actor.
func (d DeadLetter) Actor() abi.ActorID {
	return abi.ActorID{Tenant: d.Tenant, Class: d.Class, Name: d.Name}
}

// AlarmEntry is one alarm of GET /v1/tenants/{tenant}/alarms: an entry of
// the alarm index (it can be stale: Alarm reads the committed alarm).
type AlarmEntry struct {
	Tenant  string `json:"tenant"`
	Class   string `json:"class"`
	Name    string `json:"name"`
	NameHex string `json:"name_hex,omitempty"`
	DueMs   int64  `json:"due_ms"`
	Due     string `json:"due"`
}

// ListOptions filters and pages a tenant's list. The zero value is the
// first page of the node's default size, every class.
type ListOptions struct {
	// Class keeps one class ("" every one).
	Class string
	// DueAfterMs and DueBeforeMs bound the alarms' times (Alarms only; 0:
	// no bound).
	DueAfterMs, DueBeforeMs int64
	// Limit is the page's size (0: the node's default, 100; at most 1000).
	Limit int
	// Cursor is the NextCursor of the page before ("" the first page).
	Cursor string
}

func (o ListOptions) query(dues bool) string {
	q := url.Values{}
	if o.Class != "" {
		q.Set("class", o.Class)
	}
	if dues && o.DueAfterMs != 0 {
		q.Set("due_after_ms", strconv.FormatInt(o.DueAfterMs, 10))
	}
	if dues && o.DueBeforeMs != 0 {
		q.Set("due_before_ms", strconv.FormatInt(o.DueBeforeMs, 10))
	}
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// DeadLetterPage is one page of a tenant's dead letters; NextCursor is ""
// on the last.
type DeadLetterPage struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	NextCursor  string       `json:"next_cursor,omitempty"`
}

// AlarmPage is one page of a tenant's alarms; NextCursor is "" on the
// last.
type AlarmPage struct {
	Alarms     []AlarmEntry `json:"alarms"`
	NextCursor string       `json:"next_cursor,omitempty"`
}

func (c *Client) tenantURL(tenant, suffix string) (string, error) {
	if err := abi.ValidateTenant(tenant); err != nil {
		return "", err
	}
	return c.base + "/v1/tenants/" + url.PathEscape(tenant) + suffix, nil
}

func (c *Client) getJSON(ctx context.Context, u string, out any) error {
	b, _, err := c.do(ctx, http.MethodGet, u, "", nil, http.StatusOK)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("GET %s: the answer %q is not the list: %v", u, b, err)
	}
	return nil
}

// DeadLetters reads one page of the tenant's dead letters: the actors
// whose alarm's retries were given up and that were not redriven,
// acknowledged or had their alarm set again since.
func (c *Client) DeadLetters(ctx context.Context, tenant string, o ListOptions) (DeadLetterPage, error) {
	var p DeadLetterPage
	u, err := c.tenantURL(tenant, "/dead-letters"+o.query(false))
	if err != nil {
		return p, err
	}
	return p, c.getJSON(ctx, u, &p)
}

// Alarms reads one page of the tenant's alarms, from the alarm index, in
// due order.
func (c *Client) Alarms(ctx context.Context, tenant string, o ListOptions) (AlarmPage, error) {
	var p AlarmPage
	u, err := c.tenantURL(tenant, "/alarms"+o.query(true))
	if err != nil {
		return p, err
	}
	return p, c.getJSON(ctx, u, &p)
}

// DeadLetterSelect says which dead letters a redrive or an
// acknowledgement acts on: one actor (Class and Name), a class (Class),
// or all of the tenant's (All); DryRun only reports.
type DeadLetterSelect struct {
	Class  string `json:"class,omitempty"`
	Name   string `json:"name,omitempty"`
	All    bool   `json:"all,omitempty"`
	DryRun bool   `json:"dry_run,omitempty"`
	// Limit is the most one call acts on (0: the node's, 1000).
	Limit int `json:"limit,omitempty"`
}

// DeadLetterOutcome is what a redrive or an acknowledgement did: Done
// counts what was (in a dry run: would be) redriven or acknowledged,
// Failed what could not be; More says the selection had more than the
// call's limit (call again).
type DeadLetterOutcome struct {
	DryRun  bool           `json:"dry_run"`
	Matched int            `json:"matched"`
	Done    int            `json:"done"`
	Failed  int            `json:"failed"`
	More    bool           `json:"more"`
	Actors  []LetterResult `json:"actors"`
}

// LetterResult is what was done to one dead letter: Result is redriven,
// acknowledged, would_redrive, would_acknowledge or failed (Detail says
// why, naming the actor); AlarmMs the alarm a redrive set.
type LetterResult struct {
	Tenant  string `json:"tenant"`
	Class   string `json:"class"`
	Name    string `json:"name"`
	NameHex string `json:"name_hex,omitempty"`
	Result  string `json:"result"`
	AlarmMs *int64 `json:"alarm_ms,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// RedriveDeadLetters sets the alarm of each selected actor to now, its
// retry count back to 0, by its holder, and clears its dead letter:
// on-alarm then runs with the class's whole attempt budget. One actor
// without a dead letter is a 404 Problem.
func (c *Client) RedriveDeadLetters(ctx context.Context, tenant string, s DeadLetterSelect) (DeadLetterOutcome, error) {
	return c.letters(ctx, tenant, "redrive", s)
}

// AcknowledgeDeadLetters clears the selected dead letters; nothing runs.
func (c *Client) AcknowledgeDeadLetters(ctx context.Context, tenant string, s DeadLetterSelect) (DeadLetterOutcome, error) {
	return c.letters(ctx, tenant, "acknowledge", s)
}

func (c *Client) letters(ctx context.Context, tenant, verb string, s DeadLetterSelect) (DeadLetterOutcome, error) {
	var out DeadLetterOutcome
	u, err := c.tenantURL(tenant, "/dead-letters:"+verb)
	if err != nil {
		return out, err
	}
	body, _ := json.Marshal(s)
	b, _, err := c.do(ctx, http.MethodPost, u, "application/json", body, http.StatusOK)
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("POST %s: the answer %q is not an outcome: %v", u, b, err)
	}
	return out, nil
}
