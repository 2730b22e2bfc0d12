package clusterproc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/wasmkeep/alarms/abi"
)

// Event kinds of the HTTP API's ?kind= parameter.
const (
	// KindExec commits the event, replies, then replicates it.
	KindExec = "exec"
	// KindExecDurable replicates the event before it replies.
	KindExecDurable = "exec-durable"
)

// Client is the HTTP client the helpers use. Requests are bounded by their
// context; the timeout is a backstop.
var Client = &http.Client{Timeout: 2 * time.Minute}

// StatusError is a reply other than success from a node.
type StatusError struct {
	Method, URL string
	// StatusCode is the HTTP status: 400 malformed, 404 class not served,
	// 422 the guest failed the event, 503 retry (holder unreachable, bucket
	// down, lease lapsed).
	StatusCode int
	// Body is the node's error message: the detail of its
	// application/problem+json reply (node.Problem), or the reply's text.
	Body string
	// Code is the reply's stable code (node.Code...), "" if it has none.
	Code string
	// RetryAfter is the reply's Retry-After header ("" if none).
	RetryAfter string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.URL, e.StatusCode, http.StatusText(e.StatusCode), strings.TrimSpace(e.Body))
}

// ActorURL is the API path of an actor on the node at nodeURL, each part
// path-escaped (a '/' in a name becomes %2F).
func ActorURL(nodeURL string, id abi.ActorID) string {
	return strings.TrimRight(nodeURL, "/") + "/v1/actors/" + url.PathEscape(id.Tenant) + "/" +
		url.PathEscape(id.Class) + "/" + url.PathEscape(id.Name)
}

// Exec sends a request event with body to the actor through the node at
// nodeURL (any node: it forwards to the holder) and returns the actor's
// response. kind is KindExec or KindExecDurable ("" is the node's default, exec).
// A reply other than 200 is a *StatusError; a transport error (a node
// killed mid-request, say) is returned as it is: the event may or may not
// have run.
func Exec(ctx context.Context, nodeURL string, actor abi.ActorID, kind string, body []byte) ([]byte, error) {
	u := ActorURL(nodeURL, actor)
	if kind != "" {
		u += "?kind=" + url.QueryEscape(kind)
	}
	return do(ctx, http.MethodPost, u, body, http.StatusOK)
}

// Delete deletes the actor through the node at nodeURL.
func Delete(ctx context.Context, nodeURL string, actor abi.ActorID) error {
	_, err := do(ctx, http.MethodDelete, ActorURL(nodeURL, actor), nil, http.StatusNoContent)
	return err
}

// AlarmState is the reply of GET .../alarm: the committed alarm, the
// retry count, and the ID of the node that answered (the holder).
type AlarmState struct {
	AlarmMs    *int64 `json:"alarm_ms"`
	RetryCount int    `json:"retry_count"`
	Node       string `json:"node,omitempty"`
	// From is where the answer was read: "holder", "bucket" or "none".
	From string `json:"from"`
}

// Alarm reads the actor's committed alarm state through the node at nodeURL.
func Alarm(ctx context.Context, nodeURL string, actor abi.ActorID) (AlarmState, error) {
	var st AlarmState
	b, err := do(ctx, http.MethodGet, ActorURL(nodeURL, actor)+"/alarm", nil, http.StatusOK)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("alarm state of actor %s: %w (reply %q)", actor, err, b)
	}
	return st, nil
}

func do(ctx context.Context, method, u string, body []byte, want int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the reply: %w", method, u, err)
	}
	if resp.StatusCode != want {
		se := &StatusError{Method: method, URL: u, StatusCode: resp.StatusCode, Body: string(out), RetryAfter: resp.Header.Get("Retry-After")}
		var p struct{ Detail, Code string }
		if resp.Header.Get("Content-Type") == "application/problem+json" && json.Unmarshal(out, &p) == nil {
			se.Body, se.Code = p.Detail, p.Code
		}
		return nil, se
	}
	return out, nil
}
