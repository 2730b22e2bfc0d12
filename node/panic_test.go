package node_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/node"
)

// A panic in the host during a request (where SQLite's VFS once panicked:
// opening the actor, with its lock held), in a request event, in the
// background upload after an exec, or in a delivery is recovered at the
// event's boundary: it is answered as a 500 naming the actor, logged with
// the actor, and leaves no lock held, so the same actor serves its next
// request, the others are not affected, and the node shuts down.
func TestAPanicInAnEventLeavesTheNodeWorking(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		tenant := "panic"
		id := func(name string) abi.ActorID { return abi.ActorID{Tenant: tenant, Class: oneshotClass, Name: name} }
		// panicking[op + " " + name] makes the hook panic for that actor.
		var panicking sync.Map
		restore := node.SetTestHook(func(op string, a abi.ActorID) {
			if a.Tenant != tenant {
				return // another test's actor
			}
			if _, ok := panicking.Load(op + " " + a.Name); ok {
				panic("provoked in " + op)
			}
		})
		defer restore()

		var callbackPanics atomic.Bool
		logs := &syncBuffer{}
		log := &ixDeliveries{}
		cfg := node.Config{
			DataDir: t.TempDir(), Classes: ixClasses(t, oneshotClass),
			Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.MultiWriter(logs, testWriter{t})}),
			OnDelivery: func(ev node.DeliveryEvent) {
				log.add(ev)
				if ev.Actor == id("in-callback") && ev.Event.Ran && callbackPanics.CompareAndSwap(true, false) {
					panic("provoked in the delivery callback")
				}
			},
			RetryAfterError: 100 * time.Millisecond,
		}
		if b != nil {
			cfg.Cluster = &node.ClusterConfig{
				Bucket: b, NodeID: "n", Addr: "n.invalid:1",
				LeaseTTL: 600 * time.Millisecond, LeaseMargin: 150 * time.Millisecond, LeaseGrace: 300 * time.Millisecond,
				SweepPeriod: 200 * time.Millisecond, IdleTimeout: time.Hour, Tenants: []string{tenant},
			}
		}
		n, err := node.New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		n.Start(ctx)
		srv := httptest.NewServer(n.Handler())
		defer srv.Close()
		post := func(name, kind string, body []byte) (int, string) {
			t.Helper()
			resp, err := http.Post(srv.URL+"/v1/actors/"+tenant+"/"+oneshotClass+"/"+name+"?kind="+kind, "", bytes.NewReader(body))
			if err != nil {
				t.Fatalf("POST to %s: %v", name, err)
			}
			defer resp.Body.Close()
			out, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(out)
		}
		later := time.Now().Add(time.Hour).UnixMilli()

		for _, tc := range []struct{ op, name, kind string }{
			{"open", "in-open", "exec-durable"},
			{"request", "in-request", "exec-durable"},
			{"request", "in-exec", "exec"},
		} {
			key := tc.op + " " + tc.name
			panicking.Store(key, true)
			for range 2 { // the second finds the actor's lock free
				status, body := post(tc.name, tc.kind, setBody(later))
				if status != http.StatusInternalServerError || !strings.Contains(body, "actor "+id(tc.name).String()+": ") || !strings.Contains(body, "internal error") {
					t.Fatalf("%s: %d %q; want a 500 naming the actor and an internal error", key, status, body)
				}
			}
			if b != nil && tc.op != "open" {
				// Given up: its instance closed, its hold released.
				if holder, _ := ixHolder(t, b, id(tc.name)); holder != "" {
					t.Fatalf("%s: the hold is still %s's after the panic; want it released", key, holder)
				}
			}
			if !strings.Contains(logs.String(), "actor="+id(tc.name).String()) || !strings.Contains(logs.String(), "provoked in "+tc.op) {
				t.Fatalf("%s: the log does not name the actor and the panic:\n%s", key, logs)
			}
			panicking.Delete(key)
			if status, body := post(tc.name, tc.kind, setBody(later)); status != http.StatusOK {
				t.Fatalf("%s: after the panic: %d %q; want the actor serving again", key, status, body)
			}
		}

		// The upload after an exec runs in the background, on its own.
		panicking.Store("replicate in-upload", true)
		if status, body := post("in-upload", "exec", setBody(later)); status != http.StatusOK {
			t.Fatalf("exec before a background upload: %d %q", status, body)
		}
		if b != nil {
			waitFor(t, "the background upload's panic logged", func() bool {
				return strings.Contains(logs.String(), "actor="+id("in-upload").String()) && strings.Contains(logs.String(), "provoked in replicate")
			})
		}
		panicking.Delete("replicate in-upload")
		if status, body := post("in-upload", "exec-durable", setBody(later)); status != http.StatusOK {
			t.Fatalf("after the background upload's panic: %d %q", status, body)
		}

		// A delivery: recovered, retried as a host-side failure, and
		// delivered once the panic is gone.
		panicking.Store("deliver in-delivery", true)
		due := time.Now().Add(200 * time.Millisecond).UnixMilli()
		if status, body := post("in-delivery", "exec-durable", setBody(due)); status != http.StatusOK {
			t.Fatalf("set the alarm: %d %q", status, body)
		}
		log.wait(t, id("in-delivery"), "a delivery failing with the panic", func(ev node.DeliveryEvent) bool {
			return errors.Is(ev.Err, node.ErrInternal)
		})
		panicking.Delete("deliver in-delivery")
		log.wait(t, id("in-delivery"), "the alarm firing after the panic", ran(due))

		// Outside the event: a panic of the node's delivery callback.
		callbackPanics.Store(true)
		due = time.Now().Add(100 * time.Millisecond).UnixMilli()
		if status, body := post("in-callback", "exec-durable", setBody(due)); status != http.StatusOK {
			t.Fatalf("set the alarm: %d %q", status, body)
		}
		log.wait(t, id("in-callback"), "the alarm firing", ran(due))
		waitFor(t, "the callback's panic logged", func() bool { return strings.Contains(logs.String(), "provoked in the delivery callback") })
		due = time.Now().Add(100 * time.Millisecond).UnixMilli()
		if status, body := post("in-callback", "exec-durable", setBody(due)); status != http.StatusOK {
			t.Fatalf("set the alarm again: %d %q", status, body)
		}
		log.wait(t, id("in-callback"), "the next alarm firing", ran(due))

		// Another actor was never affected.
		if status, body := post("bystander", "exec-durable", setBody(later)); status != http.StatusOK {
			t.Fatalf("another actor: %d %q", status, body)
		}

		// The node shuts down: no lock is left held. The bound only
		// catches a hang.
		closed := make(chan error, 1)
		go func() { closed <- n.Close(ctx) }()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatalf("Close: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("Close did not return: a lock is still held")
		}
	}
	t.Run("alone", func(t *testing.T) { run(t, nil) })
	t.Run("mem", func(t *testing.T) { run(t, bucket.NewMem()) })
	t.Run("s3", func(t *testing.T) { run(t, s3test.Start(t).Bucket) })
}
