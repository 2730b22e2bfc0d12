package node_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/bucket"
)

// TestARequestRidesThroughItsHoldersDeath: a client's exec-durable request,
// sent to a live node just after the node holding the actor was killed,
// waits inside that node for the takeover (the holder's lease seen
// unchanged for TTL + grace) and is answered 200 by it, rather than with a
// 503 at once; the actor's committed state went on from where the dead
// holder left it. With the wait turned off (FailoverWait < 0), the same
// request is the 503 with Retry-After it used to be.
func TestARequestRidesThroughItsHoldersDeath(t *testing.T) {
	for _, c := range []struct {
		name string
		wait time.Duration
		want int
	}{
		{"waits", 0, http.StatusOK},
		{"no wait", -1, http.StatusServiceUnavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := bucket.NewMem()
			classes := counter(t)
			hc := hostConfig{ttl: time.Second, margin: 250 * time.Millisecond, grace: 500 * time.Millisecond, failoverWait: c.wait}
			a := serveHost(t, b, "a", classes, hc)
			bn := serveHost(t, b, "b", classes, hc)
			actor := "/v1/actors/t/counter/x?kind=exec-durable"
			if status, out := call(t, "POST", a.URL+actor, []byte("get")); status != 200 {
				t.Fatalf("first request: %d %s", status, out)
			}
			a.Crash()
			a.srv.Close() // the holder answers no more: a connection to it is refused
			req, _ := http.NewRequest("POST", bn.URL+actor, strings.NewReader("get"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got counts
			err = json.NewDecoder(resp.Body).Decode(&got)
			if resp.StatusCode != c.want {
				t.Fatalf("request to b after the holder died: %d, want %d", resp.StatusCode, c.want)
			}
			if c.want == http.StatusOK && (err != nil || got.Requests != 2) {
				t.Fatalf("b's answer: %+v, %v; want the counter's second request, from the state a committed", got, err)
			}
			if c.want != http.StatusOK && resp.Header.Get("Retry-After") == "" {
				t.Fatal("a 503 without Retry-After")
			}
		})
	}
}
