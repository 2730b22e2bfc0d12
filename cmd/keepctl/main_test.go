package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/inspect"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

func TestMain(m *testing.M) { os.Exit(s3test.Run(m)) }

// keepctl against versitygw: a cluster whose node set three alarms; the
// index lists them; actor inspect shows one; verify passes; an entry
// removed by hand makes verify fail (exit 1, naming the actor); backfill
// mends it; verify passes again.
func TestKeepctlVerifyBackfillOnVersitygw(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	n, err := node.New(ctx, node.Config{
		DataDir: t.TempDir(), Classes: map[string][]byte{"oneshot": testguest.Fixture(t, "oneshot_alarm")},
		Logger: hclog.NewNullLogger(),
		Cluster: &node.ClusterConfig{Bucket: srv.Bucket, NodeID: "n1", Addr: "n1.invalid:1",
			LeaseTTL: 3 * time.Second, LeaseMargin: time.Second, LeaseGrace: time.Second, IdleTimeout: time.Hour, SweepPeriod: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Crash) // the timer never ran: the alarms stay pending
	base := time.Now().Add(time.Hour).UnixMilli()
	for i, name := range []string{"a", "b", "c"} {
		id := abi.ActorID{Tenant: "t", Class: "oneshot", Name: name}
		if _, err := n.Exec(ctx, id, binary.LittleEndian.AppendUint64(nil, uint64(base+int64(i))), node.ExecDurable); err != nil {
			t.Fatal(err)
		}
	}
	open := func(_ context.Context, name string) (bucket.Bucket, error) {
		if name != srv.Name {
			t.Fatalf("keepctl opened bucket %q, want %q", name, srv.Name)
		}
		return srv.NewClient(t), nil
	}
	keepctl := func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if got := run(ctx, append([]string{"-bucket", srv.Name}, args...), &out, &errOut, open); got != want {
			t.Fatalf("keepctl %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, got, want, out.String(), errOut.String())
		}
		return out.String()
	}

	var entries []inspect.Entry
	if err := json.Unmarshal([]byte(keepctl(0, "alarms", "list", "-tenant", "t", "-json")), &entries); err != nil || len(entries) != 3 {
		t.Fatalf("alarms list -json: %v, %v", entries, err)
	}
	if out := keepctl(0, "alarms", "list", "-due-after", time.UnixMilli(base+1).UTC().Format(time.RFC3339Nano)); !strings.Contains(out, "t/oneshot/b") || strings.Contains(out, "t/oneshot/a ") || !strings.Contains(out, "2 entries") {
		t.Fatalf("alarms list -due-after:\n%s", out)
	}
	out := keepctl(0, "actor", "inspect", "t/oneshot/b")
	t.Logf("keepctl actor inspect t/oneshot/b:\n%s", out)
	for _, want := range []string{"n1, generation 1", "retry count", "(exists)", "alarm_indexed"} {
		if !strings.Contains(out, want) {
			t.Errorf("actor inspect lacks %q:\n%s", want, out)
		}
	}
	var info inspect.ActorInfo
	if err := json.Unmarshal([]byte(keepctl(0, "actor", "inspect", "-json", "t/oneshot/b")), &info); err != nil || info.AlarmMs == nil || *info.AlarmMs != base+1 {
		t.Fatalf("actor inspect -json: %+v, %v", info, err)
	}
	if out := keepctl(0, "verify"); !strings.Contains(out, "missing 0") {
		t.Fatalf("verify on a healthy cluster:\n%s", out)
	}

	if err := srv.Bucket.Delete(ctx, info.Named); err != nil { // by hand
		t.Fatal(err)
	}
	out = keepctl(1, "verify")
	t.Logf("keepctl verify, an entry removed by hand:\n%s", out)
	if !strings.Contains(out, "MISSING t/oneshot/b") {
		t.Fatalf("verify after removing an entry by hand:\n%s", out)
	}
	if out := keepctl(0, "backfill"); !strings.Contains(out, "listed "+info.Named) || !strings.Contains(out, "entries listed 1") {
		t.Fatalf("backfill:\n%s", out)
	}
	if out := keepctl(0, "verify"); !strings.Contains(out, "missing 0") {
		t.Fatalf("verify after backfill:\n%s", out)
	}
	keepctl(2, "frobnicate")
	keepctl(2, "actor", "inspect", "no-slashes")
}

// keepctl alarms failed against versitygw: a node whose class allows one
// attempt gives a poison alarm up; its dead letter, read from the actor's
// replicated state, is listed (as a table and as JSON, filtered by tenant)
// and an actor whose alarm succeeded is not.
func TestKeepctlAlarmsFailedOnVersitygw(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	var mu sync.Mutex
	ran := 0
	n, err := node.New(ctx, node.Config{
		DataDir: t.TempDir(), Classes: map[string][]byte{"scripted": testguest.Build(t, "testdata/guests/scripted")},
		Logger:        hclog.NewNullLogger(),
		EngineOptions: []engine.Option{engine.WithMaxAttempts(1)},
		OnDelivery: func(ev node.DeliveryEvent) {
			if ev.Event.Ran {
				mu.Lock()
				ran++
				mu.Unlock()
			}
		},
		Cluster: &node.ClusterConfig{Bucket: srv.Bucket, NodeID: "n1", Addr: "n1.invalid:1",
			LeaseTTL: 3 * time.Second, LeaseMargin: time.Second, LeaseGrace: time.Second, IdleTimeout: time.Hour, SweepPeriod: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.Start(ctx)
	t.Cleanup(func() { n.Close(ctx) })
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	for name, mode := range map[string]string{"poison": "mode fail", "fine": "mode ok"} {
		id := abi.ActorID{Tenant: "t", Class: "scripted", Name: name}
		for _, req := range []string{mode, "set " + now} {
			if _, err := n.Request(ctx, id, []byte(req)); err != nil {
				t.Fatal(err)
			}
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		done := ran >= 2
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the two alarms did not run")
		}
		time.Sleep(20 * time.Millisecond)
	}
	open := func(context.Context, string) (bucket.Bucket, error) { return srv.NewClient(t), nil }
	keepctl := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if got := run(ctx, append([]string{"-bucket", srv.Name}, args...), &out, &errOut, open); got != 0 {
			t.Fatalf("keepctl %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, got, out.String(), errOut.String())
		}
		return out.String()
	}
	out := keepctl("alarms", "failed")
	t.Logf("keepctl alarms failed:\n%s", out)
	if !strings.Contains(out, "t/scripted/poison") || strings.Contains(out, "t/scripted/fine") || !strings.Contains(out, "1 alarms given up") || !strings.Contains(out, "failing on alarm") {
		t.Fatalf("alarms failed:\n%s", out)
	}
	var failed []inspect.FailedAlarm
	if err := json.Unmarshal([]byte(keepctl("alarms", "failed", "-tenant", "t", "-json")), &failed); err != nil || len(failed) != 1 || failed[0].Attempts != 1 || failed[0].Name != "t/scripted/poison" {
		t.Fatalf("alarms failed -json: %+v, %v", failed, err)
	}
	if out := keepctl("actor", "inspect", "t/scripted/poison"); !strings.Contains(out, "after 1 attempts") {
		t.Fatalf("actor inspect of an actor with a dead letter:\n%s", out)
	}
	if out := keepctl("alarms", "failed", "-tenant", "other", "-json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("alarms failed for a tenant with none: %q", out)
	}
}

// keepctl verify reports a key that is both an object and the folder of
// other keys (here an object at a tenant's folder of the index, which on
// MinIO hides every entry of the tenant from the sweeps) and exits 1; in
// the memory bucket and on the S3 server the tests run against. versitygw
// refuses such an object (409): verify then passes.
func TestKeepctlVerifyReportsAKeyThatIsAlsoAFolder(t *testing.T) {
	for _, store := range []string{"mem", "s3"} {
		t.Run(store, func(t *testing.T) {
			ctx := context.Background()
			var b bucket.Bucket
			open := func(context.Context, string) (bucket.Bucket, error) { return b, nil }
			if store == "mem" {
				b = bucket.NewMem()
			} else {
				srv := s3test.Start(t)
				b = srv.Bucket
				open = func(context.Context, string) (bucket.Bucket, error) { return srv.NewClient(t), nil }
			}
			n, err := node.New(ctx, node.Config{
				DataDir: t.TempDir(), Classes: map[string][]byte{"oneshot": testguest.Fixture(t, "oneshot_alarm")},
				Logger: hclog.NewNullLogger(),
				Cluster: &node.ClusterConfig{Bucket: b, NodeID: "n1", Addr: "n1.invalid:1",
					LeaseTTL: 3 * time.Second, LeaseMargin: time.Second, LeaseGrace: time.Second, IdleTimeout: time.Hour, SweepPeriod: time.Hour},
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(n.Crash) // the timer never ran: the alarm stays pending
			id := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "a"}
			if _, err := n.Exec(ctx, id, binary.LittleEndian.AppendUint64(nil, uint64(time.Now().Add(time.Hour).UnixMilli())), node.ExecDurable); err != nil {
				t.Fatal(err)
			}
			keepctl := func(want int, args ...string) string {
				t.Helper()
				var out, errOut bytes.Buffer
				if got := run(ctx, append([]string{"-bucket", "b"}, args...), &out, &errOut, open); got != want {
					t.Fatalf("keepctl %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, got, want, out.String(), errOut.String())
				}
				return out.String()
			}
			if out := keepctl(0, "verify"); !strings.Contains(out, "keys both an object and a folder 0") {
				t.Fatalf("verify on a healthy cluster:\n%s", out)
			}

			const object = "cluster/alarms/t"
			if _, err := b.Put(ctx, object, []byte("stray"), bucket.Cond{}); err != nil {
				t.Logf("the store refuses an object at %s, a folder of the index: %v", object, err)
				keepctl(0, "verify")
				return
			}
			out := keepctl(1, "verify")
			t.Logf("keepctl verify, an object at %s:\n%s", object, out)
			if !strings.Contains(out, "NESTED "+object+": an object, and the folder of cluster/alarms/t/") {
				t.Fatalf("verify does not report the object at %s:\n%s", object, out)
			}
			var rep inspect.Report
			if err := json.Unmarshal([]byte(keepctl(1, "verify", "-json")), &rep); err != nil || len(rep.Nested) != 1 || rep.Nested[0].Object != object {
				t.Fatalf("verify -json: nested %+v, %v", rep.Nested, err)
			}
		})
	}
}
