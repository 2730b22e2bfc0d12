package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// keepctl -node lists a tenant's alarms (-class, -due-after and
// -due-before passed to the node) and dead letters, and redrives and
// acknowledges dead letters, with no bucket: a dry run changes nothing, an
// acknowledgement empties the list.
func TestKeepctlActsOnDeadLettersThroughANode(t *testing.T) {
	ctx := context.Background()
	n, err := node.New(ctx, node.Config{DataDir: t.TempDir(), Classes: map[string][]byte{"f": testguest.Fixture(t, "fail_on_alarm")},
		Logger: hclog.NewNullLogger(), EngineOptions: []engine.Option{engine.WithMaxAttempts(1)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(ctx) })
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	id := abi.ActorID{Tenant: "t", Class: "f", Name: "poison"}
	if _, err := n.Request(ctx, id, nil); err != nil { // its alarm at 1000 ms
		t.Fatal(err)
	}
	noBucket := func(context.Context, string) (bucket.Bucket, error) {
		t.Fatal("keepctl opened a bucket")
		return nil, nil
	}
	keepctl := func(want int, args ...string) string {
		t.Helper()
		var out, errs bytes.Buffer
		if got := run(ctx, append([]string{"-node", srv.URL}, args...), &out, &errs, noBucket); got != want {
			t.Fatalf("keepctl %v: exit %d, want %d\n%s%s", args, got, want, out.String(), errs.String())
		}
		return out.String()
	}
	var alarms []client.AlarmEntry
	if err := json.Unmarshal([]byte(keepctl(0, "alarms", "list", "-tenant", "t", "-o", "json")), &alarms); err != nil || len(alarms) != 1 || alarms[0].DueMs != 1000 {
		t.Fatalf("alarms list: %+v, %v; want poison's at 1000", alarms, err)
	}
	// The filters reach the node: both bounds inclusive, and the class.
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"-due-after", "1000", "-due-before", "1970-01-01T00:00:01Z", "-class", "f"}, 1},
		{[]string{"-due-after", "1001"}, 0},
		{[]string{"-due-before", "999"}, 0},
		{[]string{"-class", "g"}, 0},
	} {
		out := keepctl(0, append([]string{"alarms", "list", "-tenant", "t", "-o", "json"}, c.args...)...)
		if err := json.Unmarshal([]byte(out), &alarms); err != nil || len(alarms) != c.want {
			t.Fatalf("alarms list %v: %s (%v); want %d entries", c.args, out, err, c.want)
		}
	}
	if _, err := n.FireAlarm(ctx, id); err != nil {
		t.Fatal(err)
	}
	if out := keepctl(0, "dead-letters", "list", "-tenant", "t"); !strings.Contains(out, "t/f/poison") || !strings.Contains(out, "1 dead letters") {
		t.Fatalf("dead-letters list:\n%s", out)
	}
	if out := keepctl(0, "dead-letters", "redrive", "-tenant", "t", "-all", "-dry-run"); !strings.Contains(out, "would_redrive t/f/poison") {
		t.Fatalf("dead-letters redrive -dry-run:\n%s", out)
	}
	if out := keepctl(0, "dead-letters", "list", "-tenant", "t"); !strings.Contains(out, "1 dead letters") {
		t.Fatalf("after a dry run:\n%s", out)
	}
	if out := keepctl(0, "dead-letters", "ack", "-actor", "t/f/poison"); !strings.Contains(out, "acknowledged t/f/poison") {
		t.Fatalf("dead-letters ack:\n%s", out)
	}
	var letters []client.DeadLetter
	if err := json.Unmarshal([]byte(keepctl(0, "dead-letters", "list", "-tenant", "t", "-o", "json")), &letters); err != nil || len(letters) != 0 {
		t.Fatalf("after the acknowledgement: %+v, %v; want none", letters, err)
	}
	keepctl(2, "dead-letters", "redrive", "-tenant", "t")                // which ones?
	keepctl(2, "dead-letters", "redrive", "-actor", "t/f/poison")        // none left: 404
	keepctl(2, "dead-letters", "list", "-tenant", "t", "-class", "Bad!") // the node refuses it
}
