package clusterproc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/testguest"
)

type counts struct {
	Requests int `json:"requests"`
}

func requests(t *testing.T, b []byte) int {
	t.Helper()
	var c counts
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("counter reply %q: %v", b, err)
	}
	return c.Requests
}

// syncBuffer collects the nodes' prefixed output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// TestNodesServeForwardStopAndKill runs the whole library on real processes:
// it builds keepnode, starts versitygw and two nodes, sends events through
// both (the second forwards to the holder), then stops one cleanly and kills
// the other.
func TestNodesServeForwardStopAndKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin, err := clusterproc.Build(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := clusterproc.StartVersitygw(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Stop()
	wasm := filepath.Join(dir, "counter.wasm")
	if err := os.WriteFile(wasm, testguest.Build(t, testguest.CounterActor), 0o644); err != nil {
		t.Fatal(err)
	}
	var log syncBuffer
	cfg := clusterproc.Config{
		Binary: bin, S3: gw.S3("clusterproc-test"), Dir: dir, Log: &log,
		Classes: map[string]string{"counter": wasm},
		Flags:   []string{"-create-bucket", "-lease-ttl", "1s", "-lease-margin", "200ms", "-lease-grace", "500ms", "-log-level", "debug"},
	}
	nodes, err := clusterproc.StartNodes(ctx, cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, n := range nodes {
			_ = n.Kill()
		}
	}()
	if nodes[0].NodeID == "" || nodes[0].NodeID == nodes[1].NodeID || nodes[0].URL == nodes[1].URL {
		t.Fatalf("nodes %+v and %+v: want distinct IDs and URLs", nodes[0], nodes[1])
	}
	if !strings.HasPrefix(nodes[0].Addr, "127.0.0.1:") || nodes[0].URL != "http://"+nodes[0].Addr {
		t.Fatalf("node 0 at %q (%q): want 127.0.0.1 only", nodes[0].URL, nodes[0].Addr)
	}

	id := abi.ActorID{Tenant: "t", Class: "counter", Name: "a/b"}
	out, err := nodes[0].Client().ExecDurable(ctx, id, []byte("get"))
	if err != nil {
		t.Fatal(err)
	}
	if got := requests(t, out); got != 1 {
		t.Fatalf("first request counted %d, want 1", got)
	}
	out, err = nodes[1].Client().Exec(ctx, id, []byte("get"))
	if err != nil {
		t.Fatal(err)
	}
	if got := requests(t, out); got != 2 {
		t.Fatalf("request through node 1 counted %d, want 2 (forwarded to the holder)", got)
	}
	st, err := nodes[1].Client().Alarm(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Node != nodes[0].NodeID || st.AlarmMs != nil {
		t.Fatalf("alarm state through node 1: %+v, want answered by the holder %s with no alarm", st, nodes[0].NodeID)
	}

	_, err = nodes[1].Client().Exec(ctx, abi.ActorID{Tenant: "t", Class: "nope", Name: "x"}, nil)
	var se *client.Problem
	if !errors.As(err, &se) || se.Status != 404 || se.Code != client.CodeNotFound || !strings.Contains(se.Detail, "nope") {
		t.Fatalf("a class no node serves: %v, want a 404 Problem naming it", err)
	}

	// A clean stop exits 0 and hands the actor over at once (the lease
	// object is deleted, so no waiting for it to expire).
	if err := nodes[0].Stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "node0: ") || !strings.Contains(log.String(), "node1: ") {
		t.Fatalf("the shared log lacks lines prefixed with the node names:\n%s", log.String())
	}
	out, err = nodes[1].Client().ExecDurable(ctx, id, []byte("get"))
	if err != nil {
		t.Fatal(err)
	}
	if got := requests(t, out); got != 3 {
		t.Fatalf("after node 0 stopped, node 1 counted %d, want 3", got)
	}

	// Kill waits for the process to be gone.
	if err := nodes[1].Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-nodes[1].Exited():
	default:
		t.Fatal("Kill returned before the process exited")
	}
	if _, err := nodes[1].Client().Exec(ctx, id, nil); err == nil {
		t.Fatal("a killed node still answers")
	}

	// Restarted under the same name, a node finds its data directory again.
	again, err := clusterproc.StartNode(ctx, cfg, "node1")
	if err != nil {
		t.Fatal(err)
	}
	defer again.Kill()
	if again.DataDir != nodes[1].DataDir || again.NodeID == nodes[1].NodeID {
		t.Fatalf("restart: data %q (was %q), id %q (was %q): want the same data, a new node ID", again.DataDir, nodes[1].DataDir, again.NodeID, nodes[1].NodeID)
	}
}

func TestStartNodeReportsAnEarlyExitWithTheLog(t *testing.T) {
	dir := t.TempDir()
	bin, err := clusterproc.Build(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := clusterproc.Config{
		Binary: bin, Dir: dir, S3: clusterproc.S3{Bucket: "b", Endpoint: "http://127.0.0.1:1"},
		Classes: map[string]string{"counter": filepath.Join(dir, "missing.wasm")},
	}
	_, err = clusterproc.StartNode(context.Background(), cfg, "bad")
	if err == nil || !strings.Contains(err.Error(), "exited before serving") || !strings.Contains(err.Error(), "missing.wasm") {
		t.Fatalf("a node that cannot read its class: %v, want an early exit whose log names the file", err)
	}
}

func TestS3EnvLeavesUnsetFieldsToTheEnvironment(t *testing.T) {
	full := clusterproc.S3{Endpoint: "http://127.0.0.1:9", AccessKey: "a", SecretKey: "s", Bucket: "b"}
	want := []string{"AWS_ENDPOINT_URL=http://127.0.0.1:9", "AWS_ACCESS_KEY_ID=a", "AWS_SECRET_ACCESS_KEY=s", "AWS_REGION=us-east-1"}
	if got := full.Env(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("Env() = %q, want %q", got, want)
	}
	if got := (clusterproc.S3{Bucket: "b"}).Env(); len(got) != 0 {
		t.Fatalf("Env() of a bucket alone = %q, want nothing (the environment decides)", got)
	}
}

func TestActorURLEscapesEachPart(t *testing.T) {
	got := clusterproc.ActorURL("http://h:1/", abi.ActorID{Tenant: "t", Class: "c", Name: "a/b c?"})
	if want := "http://h:1/v1/actors/t/c/a%2Fb%20c%3F"; got != want {
		t.Fatalf("ActorURL = %q, want %q", got, want)
	}
}
