package node_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/internal/clusterproc"
)

// Stable node names: keepnode processes started with -node-id. A second
// process under a live node's name is refused and the live node is left
// alone. The node is killed with SIGKILL and started again at once under
// its name and on its data directory: it takes the name back only once its
// old lease has expired (lease + grace after the kill at the earliest),
// its holds from before are void (taken anew, at a higher generation), and
// every alarm it held fires, within lease + grace + two sweeps, none lost.
func TestARestartedNodeTakesItsNameBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rec := &swFirings{}
	cfg, srv := swProcCluster(t, ctx, rec, swScaled)
	n0, err := clusterproc.StartNode(ctx, cfg, "node0", "-node-id", "stable-0")
	if err != nil {
		t.Fatal(err)
	}
	n1, err := clusterproc.StartNode(ctx, cfg, "node1", "-node-id", "stable-1")
	if err != nil {
		t.Fatal(err)
	}
	nodes := []*clusterproc.Node{n0, n1}
	showLogs(t, nodes)
	defer func() {
		for _, n := range nodes {
			_ = n.Kill()
		}
	}()
	if n0.NodeID != "stable-0" {
		t.Fatalf("node0 runs as %q, want stable-0", n0.NodeID)
	}

	// Twenty actors held by node0, due from six seconds after the kill.
	due := map[abi.ActorID]int64{}
	base := swArmBy(t, ctx, n0.URL, 20).Add(6 * time.Second)
	for i := range 20 {
		due[swOneshot(i)] = base.UnixMilli() + int64(i)*100
	}
	swArm(t, ctx, n0.URL, due)

	// A second process under the live node's name gives up.
	dupStart := time.Now()
	if dup, err := clusterproc.StartNode(ctx, cfg, "dup", "-node-id", "stable-0"); err == nil {
		nodes = append(nodes, dup)
		t.Fatal("a second process under the live node's name started")
	} else if !strings.Contains(err.Error(), "in use by a live process") {
		t.Fatalf("the second process under a live name: %v, want an error saying the name is in use by a live process", err)
	}
	t.Logf("the second process under a live name gave up after %v", time.Since(dupStart).Round(time.Millisecond))
	if _, err := n0.Client().ExecDurable(ctx, abi.ActorID{Tenant: "warmup", Class: swClass, Name: "still-here"}, leU64(time.Now().Add(time.Hour).UnixMilli())); err != nil {
		t.Fatalf("the live node after the refused start: %v", err)
	}

	if err := n0.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if time.Until(base) < 4*time.Second {
		t.Fatalf("the first alarm is due %v after the kill: the machine is too slow for this test's margins", time.Until(base))
	}
	again, err := clusterproc.StartNode(ctx, cfg, "node0", "-node-id", "stable-0")
	if err != nil {
		t.Fatal(err)
	}
	nodes = append(nodes, again)
	took := time.Since(killed)
	t.Logf("node0 restarted under its name %v after the kill", took.Round(time.Millisecond))
	if again.NodeID != "stable-0" {
		t.Fatalf("the restarted node runs as %q, want stable-0", again.NodeID)
	}
	if took < swScaled.ttl+swScaled.grace {
		t.Fatalf("the restarted node served %v after the kill, before lease + grace (%v): its old lease could still have been valid",
			took, swScaled.ttl+swScaled.grace)
	}

	out := swCollect(rec, "none", due, base.Add(2*time.Second+swScaled.bound()+20*time.Second))
	t.Logf("%v", out)
	out.check(t, swScaled.bound(), "lease + grace + two sweeps")
	if left := swIndexSettled(t, srv.Bucket, 0); len(left) > 0 {
		t.Errorf("%d index entries left after every alarm fired, such as %v", len(left), left[:min(3, len(left))])
	}
	// Each actor's hold was taken anew: the generation it had on the
	// killed process (1) was succeeded.
	for id := range due {
		key := "cluster/holds/" + id.Tenant + "/" + id.Class + "/" + hex.EncodeToString([]byte(id.Name))
		body, _, err := srv.Bucket.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			Generation uint64 `json:"generation"`
		}
		if err := json.Unmarshal(body, &rec); err != nil || rec.Generation < 2 {
			t.Errorf("hold of %s after the restart: %s (%v); want generation 2 or more", id, body, err)
		}
	}
	// The restarted node serves requests for its old actors.
	if _, err := again.Client().ExecDurable(ctx, swOneshot(0), leU64(time.Now().Add(time.Hour).UnixMilli())); err != nil {
		t.Errorf("a request to an old actor through the restarted node: %v", err)
	}
	if b, err := os.ReadFile(again.LogPath); err == nil && !strings.Contains(string(b), "took the node ID back") {
		t.Errorf("the restarted node's log does not say it took its name back")
	}
}

func leU64(v int64) []byte {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(uint64(v) >> (8 * i))
	}
	return b
}
