package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/format"
	"github.com/wasmkeep/alarms/hostmod"
)

// HTTP API, served by every node:
//
//	POST   /v1/actors/{tenant}/{class}/{name}?kind=exec|exec-durable   run a request event; the body is the request
//	                                                                   (Idempotency-Key: run once per key; see Node.ExecOnce)
//	DELETE /v1/actors/{tenant}/{class}/{name}                          delete the actor
//	GET    /v1/actors/{tenant}/{class}/{name}/alarm                    the committed alarm state (JSON), read only
//	PUT    /v1/actors/{tenant}/{class}/{name}/alarm                    set the alarm: {"at_ms": N} or {"at": "RFC 3339"}
//	DELETE /v1/actors/{tenant}/{class}/{name}/alarm[?if_at_ms=N]       clear the alarm (only if it is at N)
//	POST   /v1/actors/{tenant}/{class}/{name}/alarm:fire               run on-alarm now
//	POST   /v1/actors/{tenant}/{class}/{name}/alarm:offer              an overdue index entry's time, for the holder to remove if stale: {"at_ms": N}
//	GET    /v1/tenants/{tenant}/alarms                                 the tenant's alarms, from the index (tenant_http.go)
//	GET    /v1/tenants/{tenant}/dead-letters                           the tenant's dead letters (deadletters.go)
//	POST   /v1/tenants/{tenant}/dead-letters:redrive                   set their alarms to now, retry count 0
//	POST   /v1/tenants/{tenant}/dead-letters:acknowledge               clear them without running anything
//	GET    /v1/healthz                                                 200 while the node (and its lease) is healthy
//	GET    /v1/readyz                                                  readiness (JSON): lease, bucket and sweep checks
//	GET    /v1/openapi.json                                            the OpenAPI 3.1 document of this API (openapi.json)
//
// Setting, clearing and firing the alarm are events of the host's own on
// the actor (Node.SetAlarm, ClearAlarm, FireAlarm): committed, indexed and
// replicated before the answer, which is the committed state in the shape
// of GET .../alarm (with "fired" for alarm:fire: whether on-alarm ran, and
// its error when it failed, its retry committed).
//
// {name} is path-escaped (a name may hold '/', as %2F). A node that does not
// hold the actor forwards the call to the node that does, once. Reading
// the alarm state creates nothing and takes no hold: the holder answers
// from its database; with no holder, the node reads the actor's latest
// state in the bucket ("from": "holder", "bucket", or "none" for an actor
// that does not exist).
//
// Status codes:
//
//   - 200 success (204 for a delete); 307 (or 301) to the cleaned path
//     when the path holds "..", "." or "//" (the check of a token is done
//     again on the cleaned path); 404 for an unknown path and 405 for a
//     method a path does not take;
//   - 400 a malformed tenant, class, name, kind or body, or a request to a
//     class without on-request: the message says what is wrong, and a
//     retry cannot help. A tenant or class is 1 to 63 bytes of a-z, 0-9,
//     '-' and '_', starting with a letter or a digit; a name 1 to 100
//     bytes, any bytes (abi.ActorID.Validate);
//   - 401 a token is needed (Config.Security sets any) and none was sent,
//     or one the node does not know; 403 a tenant's token used outside
//     /v1/actors/{that tenant}/... (the probes, GET /v1/healthz and
//     /v1/readyz, need no token);
//   - 404 a class this node does not serve, or (setting, clearing or
//     firing the alarm) an actor that does not exist: a request creates it;
//   - 409 a clear with if_at_ms when the committed alarm is elsewhere
//     (nothing cleared);
//   - 429 (throttled, with Retry-After) the tenant's requests are past a
//     limit of this node (Config.Admission: how many at once, how many a
//     second); nothing ran, and the request may be sent again after
//     Retry-After (alarm:offer, a node's own, has no limit);
//   - 422 the guest failed the event (its writes rolled back), its
//     memory past what the node's budget for all instances could ever
//     give included; or (idempotency_key_reused) the request's
//     Idempotency-Key is recorded for a different body (nothing ran);
//   - 500 the event panicked in the host (a bug: recovered, logged with the
//     actor, which is given up and taken afresh by its next event), or the
//     actor's newest snapshot in the bucket is not a database this host
//     wrote (engine.ErrBadSnapshot: the actor is not taken, nothing is
//     overwritten, and retrying cannot help until someone repairs it);
//   - 507 the node's data directory is full (the event committed nothing;
//     no Retry-After: it clears when someone frees space);
//   - 503, with Retry-After, for every other failure: the actor is held by
//     a node that cannot be reached, the bucket is unreachable, the node
//     lease lapsed, an upload failed (after an exec-durable event, whose
//     outcome is then unknown), the guest needed memory while the node's
//     budget for all instances was held by busy instances
//     (engine.ErrMemoryBudget), or a record of the actor in the bucket
//     (its ownership record, its holder's lease, its snapshot or schema)
//     is of a format newer than this build reads (newer_format: nothing
//     was done or read; format.ErrNewer). Before a 503 for an actor it cannot
//     reach, or while its own lease is being renewed, the node waits for
//     the failover inside the request (ClusterConfig.FailoverWait). The
//     Retry-After of a failover's 503 (lease_not_valid, held_elsewhere,
//     forward_failed) is what the failover is still expected to take
//     (failoverRetryAfter); newer_format's is the lease TTL; the others'
//     is 1 s.
//
// /v1/healthz answers 503 while the node lease is not valid; /v1/readyz
// answers 200 when ready and 503 (with Retry-After) when a check fails.

const forwardedHeader = "X-Wasmkeep-Forwarded"

// MaxRequestBody bounds a request event's body.
const MaxRequestBody = 4 << 20

// Handler returns the node's HTTP API.
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range n.routes() {
		mux.HandleFunc(rt.pattern, rt.handle)
	}
	api := n.instrument(mux, n.traced(mux, n.sec.guard(problemRoutes{mux})))
	if !n.cfg.Console {
		return api
	}
	ui := n.console()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == consoleRoot || strings.HasPrefix(r.URL.Path, consoleRoot+"/") {
			ui.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// route is one pattern of the HTTP API and its handler. openapi.json
// documents every route, and a test holds the two together.
type route struct {
	pattern string
	handle  http.HandlerFunc
}

// routes are the node's HTTP API.
func (n *Node) routes() []route {
	return []route{
		{"POST /v1/actors/{tenant}/{class}/{name}", n.admitted(n.handleExec)},
		{"DELETE /v1/actors/{tenant}/{class}/{name}", n.admitted(n.handleDelete)},
		{"GET /v1/actors/{tenant}/{class}/{name}/alarm", n.admitted(n.handleState)},
		{"PUT /v1/actors/{tenant}/{class}/{name}/alarm", n.admitted(n.handleSetAlarm)},
		{"DELETE /v1/actors/{tenant}/{class}/{name}/alarm", n.admitted(n.handleClearAlarm)},
		{"POST /v1/actors/{tenant}/{class}/{name}/alarm:fire", n.admitted(n.handleFireAlarm)},
		// Sent by another node for the holder (Forward): not a client's.
		{"POST /v1/actors/{tenant}/{class}/{name}/alarm:offer", n.handleOffer},
		{"GET /v1/tenants/{tenant}/alarms", n.admitted(n.handleListAlarms)},
		{"GET /v1/tenants/{tenant}/dead-letters", n.admitted(n.handleListDeadLetters)},
		{"POST /v1/tenants/{tenant}/dead-letters:redrive", n.admitted(n.handleRedrive)},
		{"POST /v1/tenants/{tenant}/dead-letters:acknowledge", n.admitted(n.handleAcknowledge)},
		{"GET /v1/readyz", n.handleReady},
		{"GET /v1/healthz", n.handleHealth},
		{"GET /v1/openapi.json", serveOpenAPI},
	}
}

func (n *Node) handleHealth(w http.ResponseWriter, r *http.Request) {
	if n.leases != nil && !n.leases.Valid() {
		writeProblem(w, http.StatusServiceUnavailable, CodeLeaseNotValid, "node lease not valid")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

func actorFrom(r *http.Request) (abi.ActorID, error) {
	id := abi.ActorID{Tenant: r.PathValue("tenant"), Class: r.PathValue("class"), Name: r.PathValue("name")}
	traceActor(r, id)
	return id, id.Validate()
}

func (n *Node) handleExec(w http.ResponseWriter, r *http.Request) {
	id, err := actorFrom(r)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	kind := Exec
	switch r.URL.Query().Get("kind") {
	case "", "exec":
	case "exec-durable":
		kind = ExecDurable
	default:
		writeProblem(w, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("unknown kind %q: use exec or exec-durable", r.URL.Query().Get("kind")))
		return
	}
	key, err := idempotencyKey(r)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("actor %s: %v", id, err))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBody+1))
	if err != nil || len(body) > MaxRequestBody {
		writeProblem(w, http.StatusBadRequest, CodeBadRequest, "request body unreadable or over 4 MiB")
		return
	}
	var res hostmod.Result
	var replayed bool
	if !n.serve(w, r, body, func(ctx context.Context) (err error) {
		res, replayed, err = n.ExecOnce(ctx, id, body, kind, key)
		return err
	}) {
		return
	}
	if replayed {
		w.Header().Set(replayedHeader, "true")
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(res.Response)
}

// idempotencyKeyHeader carries a request event's idempotency key, and
// replayedHeader marks the answer to a request whose key the actor had
// recorded: the recorded response, nothing run.
const (
	idempotencyKeyHeader = "Idempotency-Key"
	replayedHeader       = "Idempotent-Replayed"
)

// idempotencyKey is the request's Idempotency-Key ("" without one), or an
// error saying what is wrong with it.
func idempotencyKey(r *http.Request) (string, error) {
	vs := r.Header.Values(idempotencyKeyHeader)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", fmt.Errorf("%d %s headers: send one", len(vs), idempotencyKeyHeader)
	}
	if err := engine.ValidateIdempotencyKey(vs[0]); err != nil {
		return "", fmt.Errorf("%s: %w", idempotencyKeyHeader, err)
	}
	return vs[0], nil
}

func (n *Node) handleDelete(w http.ResponseWriter, r *http.Request) {
	id, err := actorFrom(r)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	if !n.serve(w, r, nil, func(ctx context.Context) error { return n.Delete(ctx, id) }) {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// AlarmState is the JSON of GET .../alarm.
type AlarmState struct {
	AlarmMs *int64 `json:"alarm_ms"`
	// Alarm is AlarmMs in RFC 3339 (UTC, milliseconds), for people and
	// tools that read times; absent with no alarm.
	Alarm string `json:"alarm,omitempty"`
	// RetryCount is how many attempts at the alarm failed since it was
	// set: the retry_count its next on-alarm is called with.
	RetryCount int `json:"retry_count"`
	// Node is the node that answered; From where it read (see Peek).
	Node string `json:"node,omitempty"`
	From string `json:"from"`
	// Fired is what POST .../alarm:fire ran (absent elsewhere).
	Fired *FiredState `json:"fired,omitempty"`
	// DeadLetter, on GET .../alarm, is the actor's dead letter when its
	// last alarm's retries were given up and it has not been redriven,
	// acknowledged or set again since (absent otherwise).
	DeadLetter *DeadLetter `json:"dead_letter,omitempty"`
}

func (n *Node) handleState(w http.ResponseWriter, r *http.Request) {
	id, err := actorFrom(r)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	start := time.Now()
	p, err := n.Peek(r.Context(), id)
	if err != nil {
		n.fail(w, r, start, nil, err)
		return
	}
	st := p.State
	out := AlarmState{RetryCount: st.Failures, From: p.From}
	if st.Alarm == nil && p.From != FromNone {
		// Only an actor with no alarm can be waiting on a dead letter.
		dl, ok, err := n.readLetter(r.Context(), id)
		if err != nil {
			n.listFailed(w, err)
			return
		}
		if ok {
			out.DeadLetter = &dl
		}
	}
	n.writeAlarmState(w, out, st.Alarm)
}

// notAppliedHeader marks a 503 answered for a forwarded request that did
// nothing for the actor (this node's lease was not valid, or another node
// holds it now): the forwarding node may send the request again.
const notAppliedHeader = "Wasmkeep-Not-Applied"

// failoverPoll is how soon a request waiting for a failover is first tried
// again; each later try waits twice as long, up to a third of the lease
// TTL (a renewal's period): a takeover cannot come before the holder's
// lease has stood unchanged for TTL + grace, and every try costs requests
// to the bucket (the hold record, the holder's lease).
const failoverPoll = 100 * time.Millisecond

// failoverPollMax is the longest wait between two tries of a request
// waiting for a failover.
func (n *Node) failoverPollMax() time.Duration {
	ttl := cluster.DefaultTTL
	if c := n.cfg.Cluster; c != nil && c.LeaseTTL > 0 {
		ttl = c.LeaseTTL
	}
	return max(failoverPoll, ttl/3)
}

// failoverWait is ClusterConfig.FailoverWait with its default (0 on a node
// running alone).
func (n *Node) failoverWait() time.Duration {
	c := n.cfg.Cluster
	if c == nil || c.FailoverWait < 0 {
		return 0
	}
	if c.FailoverWait > 0 {
		return c.FailoverWait
	}
	return n.failoverTime()
}

// failoverTime is how long a failover is expected to take: a takeover
// once the holder's lease has stood unchanged for TTL + grace, and a
// reading period of the leases (cluster.Leases.ReadPeriod: TTL/3 in a
// small cluster unless LeaseReadPeriod) for its last version to be seen.
func (n *Node) failoverTime() time.Duration {
	var ttl, grace, read time.Duration
	if c := n.cfg.Cluster; c != nil {
		ttl, grace, read = c.LeaseTTL, c.LeaseGrace, c.LeaseReadPeriod
	}
	if n.leases != nil {
		read = n.leases.ReadPeriod()
	}
	if ttl <= 0 {
		ttl = cluster.DefaultTTL
	}
	if grace <= 0 {
		grace = cluster.DefaultGrace
	}
	if read <= 0 {
		read = ttl / 3
	}
	return ttl + grace + read
}

// failoverRetryAfter is the Retry-After of a 503 answered while an actor
// (or this node's lease) fails over, for a request that began at start:
// the failover time less what the request has waited, and once that is
// over a renewal's period (failoverPollMax), the soonest the lease can be
// seen to change; in whole seconds, rounded up.
func (n *Node) failoverRetryAfter(start time.Time) string {
	left := max(n.failoverTime()-time.Since(start), n.failoverPollMax())
	return strconv.FormatInt(int64((left+time.Second-1)/time.Second), 10)
}

// retryAfter is the Retry-After of a 503 with the given code: the
// remaining failover for the codes of a failover, 1 s for the others
// (the bucket, the memory of busy instances: no sooner to be known).
func (n *Node) retryAfter(code string, start time.Time) string {
	switch code {
	case CodeLeaseNotValid, CodeHeldElsewhere, CodeForwardFailed:
		return n.failoverRetryAfter(start)
	case CodeNewerFormat:
		return n.newerRetryAfter()
	}
	return "1"
}

// newerRetryAfter is the Retry-After of a newer_format answer: the lease
// TTL. It lasts until a node that reads the format serves the actor, and
// nodes come and go, in an upgrade, about a lease period apart.
func (n *Node) newerRetryAfter() string {
	return strconv.Itoa(int(math.Ceil(n.leaseTTL().Seconds())))
}

// serve runs op for the request and rides through a failover: when the
// actor's holder cannot be reached (no connection to it could be made, so
// nothing was sent), or answers that it did nothing (notAppliedHeader), or
// this node's lease is not valid for now, op is tried again every
// failoverPoll, then twice as long each time up to a renewal's period,
// until failoverWait has passed, and only then answered with
// a 503 and Retry-After. Any other error is answered by fail. serve
// returns true when op succeeded and the caller answers; false when the
// answer was written (an error, or the holder's answer to a forward).
func (n *Node) serve(w http.ResponseWriter, r *http.Request, body []byte, op func(ctx context.Context) error) bool {
	start := time.Now()
	deadline := start.Add(n.failoverWait())
	poll := failoverPoll
	ctx := r.Context()
	if r.Header.Get(forwardedHeader) == "" {
		// A client's request may go on to a holder a take found within a
		// lease TTL without reading its record again (a forward that
		// fails forgets it); a forwarded one reads it.
		ctx = context.WithValue(ctx, rememberRefusals{}, true)
	}
	for {
		err := op(ctx)
		if err == nil {
			return true
		}
		var held *cluster.HeldElsewhereError
		var cause error
		var code string
		switch {
		case errors.As(err, &held) && r.Header.Get(forwardedHeader) == "" && held.Addr != "":
			written, ferr := n.forwardOnce(w, r, start, held.Addr, body)
			if ferr != nil {
				n.holds.Doubt(held.Actor) // the next try reads the record: the holder may be gone
			}
			if written {
				return false
			}
			cause, code = fmt.Errorf("forward to the holder %s at %s: %w", held.NodeID, held.Addr, ferr), CodeForwardFailed
		case errors.Is(err, cluster.ErrLeaseNotValid):
			cause, code = err, CodeLeaseNotValid
		default:
			n.fail(w, r, start, body, err)
			return false
		}
		left := time.Until(deadline)
		if left <= 0 {
			if errors.Is(cause, cluster.ErrLeaseNotValid) && r.Header.Get(forwardedHeader) != "" {
				w.Header().Set(notAppliedHeader, "1")
			}
			w.Header().Set("Retry-After", n.retryAfter(code, start))
			writeProblem(w, http.StatusServiceUnavailable, code, cause.Error())
			return false
		}
		select {
		case <-r.Context().Done():
			w.Header().Set("Retry-After", n.retryAfter(code, start))
			writeProblem(w, http.StatusServiceUnavailable, code, cause.Error())
			return false
		case <-time.After(min(poll, left)):
		}
		poll = min(2*poll, n.failoverPollMax())
	}
}

// forwardOnce forwards the request to the holder at addr. written is false,
// and err says why, when nothing reached the holder (no connection could
// be made) or the holder answered that it did nothing for the actor
// (notAppliedHeader): the request may be sent again. Otherwise the
// holder's answer, or a 503 if its answer was lost after the request was
// sent (err then says why), is written.
func (n *Node) forwardOnce(w http.ResponseWriter, r *http.Request, start time.Time, addr string, body []byte) (written bool, err error) {
	u := url.URL{Scheme: n.sec.scheme, Host: addr, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, CodeInternal, err.Error())
		return true, nil
	}
	req.Header.Set(forwardedHeader, "1")
	if k := r.Header.Get(idempotencyKeyHeader); k != "" {
		req.Header.Set(idempotencyKeyHeader, k)
	}
	n.sec.forwardAuth(req, r)
	endSpan := n.startForward(req, addr)
	resp, err := n.sec.client.Do(req)
	if err != nil {
		endSpan(0, err)
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return false, err
		}
		// The holder may have died while it answered: its actor fails over.
		w.Header().Set("Retry-After", n.retryAfter(CodeForwardFailed, start))
		writeProblem(w, http.StatusServiceUnavailable, CodeForwardFailed, fmt.Sprintf("forward to the holder at %s: %v", addr, err))
		return true, err
	}
	defer resp.Body.Close()
	endSpan(resp.StatusCode, nil)
	if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(notAppliedHeader) != "" {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return false, fmt.Errorf("the holder did nothing: %s", bytes.TrimSpace(msg))
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
	return true, nil
}

// fail answers an error of a request that began at start, forwarding to
// the holder when another node holds the actor.
func (n *Node) fail(w http.ResponseWriter, r *http.Request, start time.Time, body []byte, err error) {
	var held *cluster.HeldElsewhereError
	var ge *hostmod.GuestError
	var mb *engine.MemoryBudgetError
	switch {
	case errors.As(err, &mb) && mb.Want <= mb.Budget:
		// Busy instances hold the memory: it frees when their events end.
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, CodeMemoryBusy, err.Error())
	case errors.Is(err, format.ErrNewer):
		// A record of a later build (a rolling upgrade, or a rollback):
		// refused, not misread, and not this node's fault; a node that
		// reads it answers.
		w.Header().Set("Retry-After", n.retryAfter(CodeNewerFormat, start))
		writeProblem(w, http.StatusServiceUnavailable, CodeNewerFormat, err.Error())
	case errors.As(err, &held):
		if r.Header.Get(forwardedHeader) == "" && held.Addr != "" {
			n.forward(w, r, start, held.Addr, body)
			return
		}
		// Forwarded here, but another node holds the actor now: nothing
		// was done, and the forwarding node may look again.
		w.Header().Set(notAppliedHeader, "1")
		w.Header().Set("Retry-After", n.retryAfter(CodeHeldElsewhere, start))
		writeProblem(w, http.StatusServiceUnavailable, CodeHeldElsewhere, err.Error())
	case errors.Is(err, syscall.ENOSPC):
		// The node's data directory is full: the event committed nothing,
		// and it can succeed once an operator frees space, not after a
		// second or two, so no Retry-After.
		writeProblem(w, http.StatusInsufficientStorage, CodeDiskFull, err.Error())
	case errors.As(err, &ge):
		writeProblem(w, http.StatusUnprocessableEntity, CodeGuestFailed, err.Error())
	case errors.Is(err, engine.ErrIdempotencyKeyReused):
		writeProblem(w, http.StatusUnprocessableEntity, CodeIdempotencyKeyReused, err.Error())
	case errors.Is(err, ErrClassNotServed), errors.Is(err, engine.ErrNotInitialised):
		writeProblem(w, http.StatusNotFound, CodeNotFound, err.Error())
	case errors.Is(err, ErrAlarmMoved):
		writeProblem(w, http.StatusConflict, CodeAlarmMoved, err.Error())
	case errors.Is(err, abi.ErrInvalidActorID), errors.Is(err, engine.ErrNoExport), errors.Is(err, engine.ErrAlarmOutOfRange),
		errors.Is(err, engine.ErrBadIdempotencyKey):
		writeProblem(w, http.StatusBadRequest, CodeBadRequest, err.Error())
	case errors.Is(err, ErrInternal), errors.Is(err, engine.ErrBadSnapshot):
		writeProblem(w, http.StatusInternalServerError, CodeInternal, err.Error())
	default:
		code := codeOf(err)
		w.Header().Set("Retry-After", n.retryAfter(code, start))
		writeProblem(w, http.StatusServiceUnavailable, code, err.Error())
	}
}

func (n *Node) forward(w http.ResponseWriter, r *http.Request, start time.Time, addr string, body []byte) {
	if written, err := n.forwardOnce(w, r, start, addr, body); !written {
		w.Header().Set("Retry-After", n.retryAfter(CodeForwardFailed, start))
		writeProblem(w, http.StatusServiceUnavailable, CodeForwardFailed, fmt.Sprintf("forward to the holder at %s: %v", addr, err))
	}
}

// SetAlarmBody is the body of PUT .../alarm: the time, as Unix
// milliseconds (AtMs) or RFC 3339 (At), exactly one of them.
type SetAlarmBody struct {
	AtMs *int64  `json:"at_ms,omitempty"`
	At   *string `json:"at,omitempty"`
}

// MaxAlarmBody bounds the body of PUT .../alarm and POST .../alarm:offer.
const MaxAlarmBody = 4 << 10

// parseSetAlarm reads the body of PUT .../alarm: the time, or an error
// naming what is wrong with it.
func parseSetAlarm(body []byte) (int64, error) {
	if len(body) > MaxAlarmBody {
		return 0, fmt.Errorf("the body is over %d bytes", MaxAlarmBody)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var b SetAlarmBody
	if err := dec.Decode(&b); err != nil {
		return 0, fmt.Errorf(`the body is not {"at_ms": N} or {"at": "RFC 3339"}: %v`, err)
	}
	if dec.More() {
		return 0, errors.New("the body holds more than one JSON value")
	}
	var at int64
	switch {
	case b.AtMs != nil && b.At != nil:
		return 0, errors.New(`the body gives both "at_ms" and "at": give one`)
	case b.AtMs != nil:
		at = *b.AtMs
	case b.At != nil:
		t, err := time.Parse(time.RFC3339Nano, *b.At)
		if err != nil {
			return 0, fmt.Errorf(`"at" %q is not an RFC 3339 time (2026-11-30T12:00:00Z)`, *b.At)
		}
		at = t.UnixMilli()
	default:
		return 0, errors.New(`the body gives no time: {"at_ms": N} or {"at": "RFC 3339"}`)
	}
	if at < 0 || at > alarmindex.MaxDueMs {
		return 0, fmt.Errorf("alarm time %d is outside 0..%d (Unix ms), the times set-alarm accepts", at, int64(alarmindex.MaxDueMs))
	}
	return at, nil
}

func (n *Node) handleSetAlarm(w http.ResponseWriter, r *http.Request) {
	id, err := actorFrom(r)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxAlarmBody+1))
	if err != nil {
		writeProblem(w, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("actor %s: set alarm: the body is unreadable: %v", id, err))
		return
	}
	at, err := parseSetAlarm(body)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("actor %s: set alarm: %v", id, err))
		return
	}
	var res hostmod.Result
	if !n.serve(w, r, body, func(ctx context.Context) (err error) {
		res, err = n.SetAlarm(ctx, id, at)
		return err
	}) {
		return
	}
	n.answerAlarm(w, res, nil)
}

func (n *Node) handleClearAlarm(w http.ResponseWriter, r *http.Request) {
	id, err := actorFrom(r)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	var res hostmod.Result
	clear := func(ctx context.Context) (err error) {
		res, err = n.ClearAlarm(ctx, id)
		return err
	}
	if v := r.URL.Query().Get("if_at_ms"); v != "" {
		at, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil {
			writeProblem(w, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("actor %s: clear alarm: if_at_ms %q is not Unix milliseconds", id, v))
			return
		}
		clear = func(ctx context.Context) (err error) {
			res, err = n.ClearAlarmAt(ctx, id, at)
			return err
		}
	}
	if !n.serve(w, r, nil, clear) {
		return
	}
	n.answerAlarm(w, res, nil)
}

// FiredState is what alarm:fire adds to the alarm state.
type FiredState struct {
	// Ran is true when on-alarm was called.
	Ran bool `json:"ran"`
	// ScheduledMs and RetryCount are what it was called with.
	ScheduledMs int64 `json:"scheduled_ms,omitempty"`
	// Scheduled is ScheduledMs in RFC 3339 (UTC, milliseconds).
	Scheduled  string `json:"scheduled,omitempty"`
	RetryCount int    `json:"retry_count"`
	// Error is why on-alarm failed ("" when it succeeded): its retry is
	// committed (the alarm state's alarm_ms and retry_count), or, with
	// GaveUp, its class's last attempt was reached.
	Error  string `json:"error,omitempty"`
	GaveUp bool   `json:"gave_up,omitempty"`
}

func (n *Node) handleFireAlarm(w http.ResponseWriter, r *http.Request) {
	id, err := actorFrom(r)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	var f Fired
	if !n.serve(w, r, nil, func(ctx context.Context) (err error) {
		f, err = n.FireAlarm(ctx, id)
		return err
	}) {
		return
	}
	fs := &FiredState{Ran: f.Ran, ScheduledMs: f.Scheduled, RetryCount: f.RetryCount, GaveUp: f.GaveUp}
	if f.Ran {
		fs.Scheduled = rfc3339ms(f.Scheduled)
	}
	if f.Err != nil {
		fs.Error = f.Err.Error()
	}
	n.answerAlarm(w, f.Result, fs)
}

// answerAlarm answers the committed state after an event of the holder's.
func (n *Node) answerAlarm(w http.ResponseWriter, res hostmod.Result, fired *FiredState) {
	n.writeAlarmState(w, AlarmState{RetryCount: res.Failures, From: FromHolder, Fired: fired}, res.Alarm)
}

// writeAlarmState answers out, with the alarm if hasAlarm and this node's
// ID.
func (n *Node) writeAlarmState(w http.ResponseWriter, out AlarmState, alarm *int64) {
	if alarm != nil {
		out.AlarmMs, out.Alarm = alarm, rfc3339ms(*alarm)
	}
	if n.leases != nil {
		out.Node = n.leases.NodeID()
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// rfc3339ms writes Unix milliseconds as an RFC 3339 time in UTC with
// milliseconds, the form the API gives beside every _ms field.
func rfc3339ms(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}
