package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// keepctl's verbs that change alarms, against a real node (with an
// operator token) on versitygw: alarm set fires at its time, alarm clear
// and alarm fire do what they say, alarms delete -dry-run changes no key
// of the bucket, and alarms delete clears only what its filter keeps,
// after which verify passes.
func TestKeepctlChangesAlarmsThroughANode(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(ctx, node.Config{
		DataDir: t.TempDir(), Classes: map[string][]byte{"counter": testguest.Build(t, "examples/counter-actor")},
		Logger:   hclog.NewNullLogger(),
		Security: node.Security{Token: "operator-secret"},
		Cluster: &node.ClusterConfig{Bucket: srv.Bucket, NodeID: "n1", Addr: ln.Addr().String(),
			LeaseTTL: 3 * time.Second, LeaseMargin: time.Second, LeaseGrace: time.Second, IdleTimeout: time.Hour, SweepPeriod: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.Start(ctx)
	t.Cleanup(func() { n.Close(ctx) })
	hs := &http.Server{Handler: n.Handler()}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	nodeURL := "http://" + ln.Addr().String()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("operator-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	id := func(name string) abi.ActorID { return abi.ActorID{Tenant: "t", Class: "counter", Name: name} }
	fired := func(name string) int {
		t.Helper()
		r, err := n.Request(ctx, id(name), []byte("get"))
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			Fired   int    `json:"fired"`
			AlarmMs *int64 `json:"alarm_ms"`
		}
		if err := json.Unmarshal(r.Response, &c); err != nil {
			t.Fatal(err)
		}
		return c.Fired
	}
	for _, name := range []string{"a", "b", "c"} {
		fired(name) // creates the actor
	}
	open := func(context.Context, string) (bucket.Bucket, error) { return srv.NewClient(t), nil }
	keepctl := func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		all := append([]string{"-bucket", srv.Name, "-node", nodeURL, "-token-file", tokenFile}, args...)
		if got := run(ctx, all, &out, &errOut, open); got != want {
			t.Fatalf("keepctl %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, got, want, out.String(), errOut.String())
		}
		return out.String() + errOut.String()
	}
	bucketKeys := func() []string {
		t.Helper()
		n.FlushDeletes(ctx)
		keys, err := srv.Bucket.List(ctx, "", "", 10000)
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	indexKeys := func() []string {
		var out []string
		for _, k := range bucketKeys() {
			if strings.HasPrefix(k, "cluster/alarms/") {
				out = append(out, k)
			}
		}
		return out
	}

	// alarm set: it fires at its time.
	if out := keepctl(0, "alarm", "set", "t/counter/a", "+1s"); !strings.Contains(out, "t/counter/a: alarm at ") || !strings.Contains(out, "on node n1") {
		t.Fatalf("alarm set:\n%s", out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for fired("a") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the alarm keepctl set did not fire")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// alarm set with -json, then alarm clear.
	var st client.AlarmState
	if err := json.Unmarshal([]byte(keepctl(0, "alarm", "set", "-json", "t/counter/b", "2030-01-01T00:00:00Z")), &st); err != nil || st.AlarmMs == nil || *st.AlarmMs != time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() {
		t.Fatalf("alarm set -json: %+v, %v", st, err)
	}
	// alarm get, with the node from $KEEPCTL_NODE and no bucket.
	t.Setenv("KEEPCTL_NODE", nodeURL)
	var getOut, getErr bytes.Buffer
	if got := run(ctx, []string{"-token-file", tokenFile, "alarm", "get", "t/counter/b"}, &getOut, &getErr, open); got != 0 || !strings.Contains(getOut.String(), "t/counter/b: alarm at 2030-01-01T00:00:00") {
		t.Fatalf("alarm get through $KEEPCTL_NODE: exit %d\nstdout:\n%s\nstderr:\n%s", got, getOut.String(), getErr.String())
	}
	t.Setenv("KEEPCTL_NODE", "")
	if out := keepctl(0, "alarm", "clear", "t/counter/b"); !strings.Contains(out, "t/counter/b: no alarm") {
		t.Fatalf("alarm clear:\n%s", out)
	}
	if keys := indexKeys(); len(keys) != 0 {
		t.Fatalf("index after the clear: %v, want empty", keys)
	}
	// alarm fire runs on-alarm now.
	if out := keepctl(0, "alarm", "fire", "t/counter/c"); !strings.Contains(out, "t/counter/c: on-alarm ran") {
		t.Fatalf("alarm fire:\n%s", out)
	}
	if got := fired("c"); got != 1 {
		t.Fatalf("after alarm fire, counter c fired %d times, want 1", got)
	}

	// alarms delete over a filter.
	base := time.Now().Add(24 * time.Hour).UnixMilli()
	for i, name := range []string{"a", "b", "c"} {
		keepctl(0, "alarm", "set", "t/counter/"+name, fmt.Sprint(base+int64(i)*3_600_000))
	}
	// A stale entry of c inside the filter, written by hand: c's committed
	// alarm is outside it, so c is skipped, not cleared.
	stale := "cluster/" + alarmindex.Key{Actor: id("c"), DueMs: base, Tag: alarmindex.Tag{Generation: 1, Nonce: "ab"}}.String()
	if _, err := srv.Bucket.Put(ctx, stale, nil, bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	before := bucketKeys()
	dueBefore := fmt.Sprint(base + 3_600_000)
	out := keepctl(0, "alarms", "delete", "-due-before", dueBefore, "-dry-run")
	t.Logf("keepctl alarms delete -dry-run:\n%s", out)
	if !strings.Contains(out, "would clear t/counter/a") || !strings.Contains(out, "would clear t/counter/b") || strings.Contains(out, "would clear t/counter/c") ||
		!strings.Contains(out, "skip t/counter/c: its committed alarm") || !strings.Contains(out, "2 alarms would be cleared") {
		t.Fatalf("alarms delete -dry-run:\n%s", out)
	}
	if after := bucketKeys(); !slices.Equal(before, after) {
		t.Fatalf("the dry run changed the bucket:\nbefore %v\nafter  %v", before, after)
	}
	out = keepctl(0, "alarms", "delete", "-tenant", "t", "-due-before", dueBefore)
	t.Logf("keepctl alarms delete:\n%s", out)
	if !strings.Contains(out, "cleared t/counter/a") || !strings.Contains(out, "cleared t/counter/b") || !strings.Contains(out, "2 alarms cleared") {
		t.Fatalf("alarms delete:\n%s", out)
	}
	if _, _, err := srv.Bucket.Get(ctx, stale); err != nil {
		t.Fatalf("the stale entry: %v, want it left to the sweep", err)
	}
	if err := srv.Bucket.Delete(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if got := fired("c"); got != 1 {
		t.Fatalf("counter c fired %d times, want 1", got)
	}
	keys := indexKeys()
	if len(keys) != 1 || !strings.Contains(keys[0], fmt.Sprintf("/%015d/", base+2*3_600_000)) {
		t.Fatalf("index after alarms delete: %v, want only c's entry", keys)
	}
	if out := keepctl(0, "verify"); !strings.Contains(out, "missing 0") || !strings.Contains(out, "extra 0") {
		t.Fatalf("verify after alarms delete:\n%s", out)
	}

	// Refusals name the actor and the cause.
	if out := keepctl(2, "alarm", "set", "t/counter/nobody", "+1s"); !strings.Contains(out, "actor t/counter/nobody") || !strings.Contains(out, "404") {
		t.Fatalf("alarm set on an actor that does not exist:\n%s", out)
	}
	if out := keepctl(2, "alarm", "set", "t/counter/a", "soon"); !strings.Contains(out, `time "soon"`) {
		t.Fatalf("alarm set with a bad time:\n%s", out)
	}
	var outb, errb bytes.Buffer
	if got := run(ctx, []string{"-node", nodeURL, "alarm", "clear", "t/counter/c"}, &outb, &errb, open); got != 2 || !strings.Contains(errb.String(), "401") {
		t.Fatalf("without the token: exit %d, %s%s, want 2 and the node's 401", got, outb.String(), errb.String())
	}
	t.Setenv(envToken, "operator-secret")
	outb.Reset()
	errb.Reset()
	if got := run(ctx, []string{"-node", nodeURL, "alarm", "clear", "t/counter/c"}, &outb, &errb, open); got != 0 {
		t.Fatalf("with $%s: exit %d, %s%s", envToken, got, outb.String(), errb.String())
	}
	if got := run(ctx, []string{"alarm", "clear", "t/counter/c"}, &outb, &errb, open); got != 2 || !strings.Contains(errb.String(), "needs -node") {
		t.Fatalf("without -node: exit %d, %s", got, errb.String())
	}
}
