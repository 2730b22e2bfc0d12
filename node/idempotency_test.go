package node_test

// Idempotency keys over the HTTP API: a request retried under its key runs
// once, on whichever node it reaches, across a takeover, and after an
// upload whose outcome its node could not know.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/node"
)

// keyedAnswer is one answer to a keyed request.
type keyedAnswer struct {
	status   int
	body     string
	code     string // a problem's code
	replayed bool   // Idempotent-Replayed: true
	retry    string // Retry-After
}

// keyed sends a request event under keys (none, one, or several headers)
// and returns the answer.
func keyed(t *testing.T, u string, body string, keys ...string) keyedAnswer {
	t.Helper()
	req, err := http.NewRequest("POST", u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		req.Header.Add("Idempotency-Key", k)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := keyedAnswer{status: resp.StatusCode, body: string(b), replayed: resp.Header.Get("Idempotent-Replayed") == "true", retry: resp.Header.Get("Retry-After")}
	if resp.StatusCode != http.StatusOK {
		var p node.Problem
		_ = json.Unmarshal(b, &p)
		a.code = p.Code
	}
	return a
}

// countIn is the counter's request count in its answer.
func countIn(t *testing.T, a keyedAnswer) int {
	t.Helper()
	var c counts
	if a.status != http.StatusOK || json.Unmarshal([]byte(a.body), &c) != nil {
		t.Fatalf("not the counter's answer: %d %s", a.status, a.body)
	}
	return c.Requests
}

// A request sent again under its key, to the holder or to another node
// (which forwards it, key and all), runs once: the same answer, marked
// replayed, and the guest's state counts one request. Keys are per actor
// (and so per tenant); the same key with another body is refused; a bad
// key is a 400.
func TestAKeyedRequestRunsOnceOnAnyNode(t *testing.T) {
	b := bucket.NewMem()
	classes := counter(t)
	a := serveHost(t, b, "a", classes, hostConfig{})
	bn := serveHost(t, b, "b", classes, hostConfig{})
	for _, kind := range []string{"exec", "exec-durable"} {
		actor := "/v1/actors/t/counter/" + kind + "?kind=" + kind
		first := keyed(t, a.URL+actor, "get", "k1")
		if countIn(t, first) != 1 || first.replayed {
			t.Fatalf("%s: first: %+v", kind, first)
		}
		for _, u := range []string{a.URL, bn.URL} {
			again := keyed(t, u+actor, "get", "k1")
			if again.status != 200 || again.body != first.body || !again.replayed {
				t.Fatalf("%s: k1 again through %s: %+v, want %q replayed", kind, u, again, first.body)
			}
		}
		if n := countIn(t, keyed(t, bn.URL+actor, "get")); n != 2 {
			t.Fatalf("%s: the counter after k1 three times and one request without a key: %d requests, want 2", kind, n)
		}
		if got := keyed(t, bn.URL+actor, "start 60000", "k1"); got.status != 422 || got.code != node.CodeIdempotencyKeyReused {
			t.Fatalf("%s: k1 with another body: %+v, want 422 %s", kind, got, node.CodeIdempotencyKeyReused)
		}
	}
	// Another actor, in another tenant or not, runs under the same key.
	for _, other := range []string{"/v1/actors/t/counter/other", "/v1/actors/u/counter/exec-durable"} {
		if got := keyed(t, a.URL+other+"?kind=exec-durable", "get", "k1"); got.replayed || countIn(t, got) != 1 {
			t.Fatalf("%s under another actor's key: %+v, want its own first request", other, got)
		}
	}
	actor := a.URL + "/v1/actors/t/counter/bad?kind=exec-durable"
	for _, keys := range [][]string{{""}, {strings.Repeat("k", 256)}, {"a b"}, {"caf\xe9"}, {"k1", "k2"}} {
		if got := keyed(t, actor, "get", keys...); got.status != 400 || got.code != node.CodeBadRequest || !strings.Contains(got.body, "Idempotency-Key") {
			t.Errorf("keys %q: %+v, want a 400 naming the header", keys, got)
		}
	}
}

// Across a takeover: the holder acknowledged an exec-durable request, so
// its key is in the bucket; killed, its actor is taken over by the node the
// retry reaches, which answers with the recorded reply and runs nothing.
func TestAKeyedRequestRunsOnceAcrossATakeover(t *testing.T) {
	b := bucket.NewMem()
	classes := counter(t)
	hc := hostConfig{ttl: time.Second, margin: 250 * time.Millisecond, grace: 500 * time.Millisecond}
	a := serveHost(t, b, "a", classes, hc)
	bn := serveHost(t, b, "b", classes, hc)
	actor := "/v1/actors/t/counter/x?kind=exec-durable"
	first := keyed(t, a.URL+actor, "get", "k1")
	if countIn(t, first) != 1 {
		t.Fatalf("first: %+v", first)
	}
	// exec, then exec-durable, under one key: the second waits for the
	// upload of the first's commit (if it has not left yet), so that it
	// too survives the holder.
	second := keyed(t, a.URL+"/v1/actors/t/counter/x?kind=exec", "get", "k2")
	if got := keyed(t, a.URL+actor, "get", "k2"); !got.replayed || got.body != second.body {
		t.Fatalf("k2 exec-durable after exec: %+v, want %q replayed", got, second.body)
	}
	a.Crash()
	a.srv.Close()
	for _, k := range []struct{ key, body string }{{"k1", first.body}, {"k2", second.body}} {
		got := keyed(t, bn.URL+actor, "get", k.key)
		if got.status != 200 || !got.replayed || got.body != k.body {
			t.Fatalf("%s through b after a died: %+v, want %q replayed", k.key, got, k.body)
		}
	}
	if n := countIn(t, keyed(t, bn.URL+actor, "get")); n != 3 {
		t.Fatalf("the counter on b: %d requests, want 3 (k1, k2 and this one)", n)
	}
}

// An exec-durable request whose upload failed has an unknown outcome (a
// 503 with Retry-After). Sent again under its key, it runs again if the
// upload did not land, and is answered from the record if it did (its
// reply was lost): either way the guest counts it once.
func TestAKeyedRequestAfterAFailedUploadRunsOnce(t *testing.T) {
	for _, c := range []struct {
		name   string
		landed bool
	}{{"the upload failed", false}, {"the upload landed, its reply lost", true}} {
		t.Run(c.name, func(t *testing.T) {
			b := bucket.NewMem()
			var fail atomic.Bool
			b.Faults = func(op bucket.Op) bucket.Fault {
				if op.Kind == bucket.OpPut && strings.Contains(op.Key, "/state/t/counter/") && fail.CompareAndSwap(true, false) {
					if c.landed {
						return bucket.Fault{Late: true}
					}
					return bucket.Fault{Err: errors.New("injected: connection reset")}
				}
				return bucket.Fault{}
			}
			classes := counter(t)
			a := serveHost(t, b, "a", classes, hostConfig{})
			bn := serveHost(t, b, "b", classes, hostConfig{})
			actor := "/v1/actors/t/counter/x?kind=exec-durable"
			if n := countIn(t, keyed(t, a.URL+actor, "get")); n != 1 {
				t.Fatalf("first request: %d", n)
			}
			fail.Store(true)
			got := keyed(t, a.URL+actor, "get", "k")
			if got.status != 503 || got.retry == "" {
				t.Fatalf("the request whose upload failed: %+v, want a 503 with Retry-After", got)
			}
			if c.landed && b.ApplyLate() != 1 {
				t.Fatal("no upload held to land late")
			}
			again := keyed(t, bn.URL+actor, "get", "k")
			if countIn(t, again) != 2 || again.replayed != c.landed {
				t.Fatalf("k again: %+v, want the counter's second request, replayed %v", again, c.landed)
			}
			if n := countIn(t, keyed(t, a.URL+actor, "get")); n != 3 {
				t.Fatalf("the counter: %d requests, want 3", n)
			}
		})
	}
}

// A key recorded in a commit the bucket does not have, on the node that
// holds the actor, is answered to an exec-durable request only once that
// commit is uploaded: here the actor's first upload failed, so the node's
// local database has the key and the bucket nothing; the retry's replay
// uploads it, and the node that takes the actor once the first is dead
// replays the key too.
func TestAnExecDurableReplayWaitsForTheUpload(t *testing.T) {
	b := bucket.NewMem()
	var fail atomic.Bool
	b.Faults = func(op bucket.Op) bucket.Fault {
		if op.Kind == bucket.OpPut && strings.Contains(op.Key, "/state/t/counter/") && fail.CompareAndSwap(true, false) {
			return bucket.Fault{Err: errors.New("injected: connection reset")}
		}
		return bucket.Fault{}
	}
	classes := counter(t)
	hc := hostConfig{ttl: time.Second, margin: 250 * time.Millisecond, grace: 500 * time.Millisecond}
	a := serveHost(t, b, "a", classes, hc)
	bn := serveHost(t, b, "b", classes, hc)
	actor := "/v1/actors/t/counter/new?kind=exec-durable"
	fail.Store(true)
	if got := keyed(t, a.URL+actor, "get", "k"); got.status != 503 {
		t.Fatalf("the first request, its upload failed: %+v", got)
	}
	replay := keyed(t, a.URL+actor, "get", "k")
	if !replay.replayed || countIn(t, replay) != 1 {
		t.Fatalf("k again on a: %+v, want the local record replayed", replay)
	}
	a.Crash()
	a.srv.Close()
	got := keyed(t, bn.URL+actor, "get", "k")
	if !got.replayed || got.body != replay.body {
		t.Fatalf("k through b after a died: %+v, want %q replayed from the bucket", got, replay.body)
	}
}

// A node killed between a commit and its upload leaves a local database
// ahead of the bucket whose sidecar still names the bucket's newest
// snapshot, so the same node, restarted on its data directory, keeps it
// when it takes the actor again: the key of the lost commit is there
// locally and not in the bucket. A retry under that key is answered only
// once this hold has uploaded it, so the node that takes the actor next
// replays it too.
func TestAKeyAheadOfTheBucketIsUploadedBeforeItsReplay(t *testing.T) {
	ctx := context.Background()
	b := bucket.NewMem()
	classes := counter(t)
	hc := hostConfig{ttl: time.Second, margin: 250 * time.Millisecond, grace: 500 * time.Millisecond}
	dir := t.TempDir()
	id := abi.ActorID{Tenant: "t", Class: "counter", Name: "x"}
	a := startHost(t, b, "a", dir, classes, hc)
	if _, _, err := a.ExecOnce(ctx, id, []byte("get"), node.ExecDurable, "k1"); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil { // released: the sidecar names the upload
		t.Fatal(err)
	}
	// The commit the killed node made and never uploaded.
	eng, err := engine.NewEngine(ctx)
	if err != nil {
		t.Fatal(err)
	}
	class, err := eng.Compile(ctx, "counter", classes["counter"])
	if err != nil {
		t.Fatal(err)
	}
	local, err := eng.Open(ctx, id, class, node.Path(dir, id))
	if err != nil {
		t.Fatal(err)
	}
	lost, _, err := local.RequestOnce(ctx, "k2", []byte("get"))
	if err != nil {
		t.Fatal(err)
	}
	local.Close(ctx)
	eng.Close(ctx)

	a2 := startHost(t, b, "a", dir, classes, hc)
	res, replayed, err := a2.ExecOnce(ctx, id, []byte("get"), node.ExecDurable, "k2")
	if err != nil || !replayed || string(res.Response) != string(lost.Response) {
		t.Fatalf("k2 on the restarted node: %q replayed %v (%v); want %q replayed from its local database", res.Response, replayed, err, lost.Response)
	}
	a2.Crash()
	bn := startHost(t, b, "b", t.TempDir(), classes, hc)
	waitFor(t, "b to take the actor over", func() bool {
		res, replayed, err = bn.ExecOnce(ctx, id, []byte("get"), node.ExecDurable, "k2")
		return err == nil
	})
	if !replayed || string(res.Response) != string(lost.Response) {
		t.Fatalf("k2 on b after a died: %q replayed %v; want %q replayed from the bucket", res.Response, replayed, lost.Response)
	}
}
