package node_test

// Tests on real keepnode processes (built from cmd/keepnode), killed with
// SIGKILL, sharing a versitygw bucket.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// procCluster builds keepnode and returns a configuration for nodes on a
// fresh versitygw bucket, serving the counter actor.
func procCluster(t *testing.T, ctx context.Context, flags ...string) clusterproc.Config {
	t.Helper()
	srv := s3test.Start(t)
	dir := t.TempDir()
	bin, err := clusterproc.Build(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	wasm := filepath.Join(dir, "counter.wasm")
	if err := os.WriteFile(wasm, counter(t)["counter"], 0o644); err != nil {
		t.Fatal(err)
	}
	return clusterproc.Config{
		Binary:  bin,
		S3:      clusterproc.S3{Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Bucket: srv.Name},
		Classes: map[string]string{"counter": wasm},
		Flags:   flags,
		Dir:     dir,
	}
}

// startProcNodes starts n keepnode processes, puts their logs in the test
// output if it fails, and kills them when it ends.
func startProcNodes(t *testing.T, ctx context.Context, cfg clusterproc.Config, n int) []*clusterproc.Node {
	t.Helper()
	nodes, err := clusterproc.StartNodes(ctx, cfg, n)
	if err != nil {
		t.Fatal(err)
	}
	showLogs(t, nodes)
	t.Cleanup(func() {
		for _, n := range nodes {
			_ = n.Kill()
		}
	})
	return nodes
}

// showLogs puts the end of each node's log in the test output if it failed.
func showLogs(t *testing.T, nodes []*clusterproc.Node) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, n := range nodes {
			b, _ := os.ReadFile(n.LogPath)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			t.Logf("%s (%s) log:\n%s", n.Name, n.NodeID, strings.Join(lines, "\n"))
		}
	})
}

// actorLoad is one client's record of its actor.
type actorLoad struct {
	id        abi.ActorID
	attempts  atomic.Int64 // requests sent, whatever came of them
	acked     atomic.Int64 // 200 replies
	afterKill atomic.Int64 // 200 replies to requests sent after the kill
	lastAck   atomic.Int64 // the count the latest 200 reply showed
	refused   atomic.Int64 // 503s and transport errors
	err       atomic.Value // a violation seen by the client
}

// Three nodes; one holds every actor; clients keep sending exec-durable
// requests through the live nodes while that node is killed with SIGKILL,
// right after it acknowledged a write.
// Another node takes the actors once the lease lapses, and every write
// acknowledged to a client is there: each reply's count is above the one
// before, and the final count lies between the acknowledged requests and
// the attempts.
func TestAKilledHolderLosesNoAcknowledgedWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := procCluster(t, ctx, "-lease-ttl", "1s", "-lease-margin", "200ms", "-lease-grace", "500ms",
		"-idle", "1h", "-log-level", "warn")
	nodes := startProcNodes(t, ctx, cfg, 3)
	victim := nodes[0]

	loads := make([]*actorLoad, 4)
	for i := range loads {
		loads[i] = &actorLoad{id: abi.ActorID{Tenant: "t", Class: "counter", Name: fmt.Sprintf("c/%d", i)}}
		loads[i].attempts.Add(1)
		out, err := victim.Client().ExecDurable(ctx, loads[i].id, []byte("get"))
		if err != nil {
			t.Fatal(err)
		}
		loads[i].acked.Add(1)
		loads[i].lastAck.Store(int64(requestsIn(t, out)))
		if st, err := nodes[2].Client().Alarm(ctx, loads[i].id); err != nil || st.Node != victim.NodeID {
			t.Fatalf("actor %s: holder %q (%v), want %s", loads[i].id, st.Node, err, victim.NodeID)
		}
	}

	var live atomic.Pointer[[]*clusterproc.Node]
	live.Store(&nodes)
	// Once armed, the first client to get an acknowledgement kills the
	// victim at once: the moment an acknowledged write not yet in the
	// bucket would be lost. Clients then stop sending to it; requests on
	// their way to it, or forwarded to it, are cut off.
	var armed, killed atomic.Bool
	var killOnce sync.Once
	killedNow := make(chan error, 1)
	kill := func() {
		killOnce.Do(func() {
			rest := nodes[1:]
			live.Store(&rest)
			killed.Store(true)
			killedNow <- victim.Kill()
		})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, l := range loads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := i; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				via := *live.Load()
				n := via[k%len(via)]
				sentAfterKill := killed.Load()
				l.attempts.Add(1)
				rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
				out, err := n.Client().ExecDurable(rctx, l.id, []byte("get"))
				rcancel()
				if err != nil {
					var se *client.Problem
					if errors.As(err, &se) && se.Status != 503 {
						l.err.Store(fmt.Errorf("through %s: %w", n.Name, err))
						return
					}
					l.refused.Add(1)
					time.Sleep(20 * time.Millisecond)
					continue
				}
				var c counts
				if err := json.Unmarshal(out, &c); err != nil {
					l.err.Store(fmt.Errorf("reply %q: %w", out, err))
					return
				}
				if prev := l.lastAck.Load(); int64(c.Requests) <= prev {
					l.err.Store(fmt.Errorf("through %s: count %d after an acknowledged %d: an acknowledged write was lost", n.Name, c.Requests, prev))
					return
				}
				l.lastAck.Store(int64(c.Requests))
				l.acked.Add(1)
				if sentAfterKill {
					l.afterKill.Add(1)
				}
				if armed.Load() {
					kill()
				}
			}
		}()
	}
	stopClients := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	defer stopClients()

	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			for _, l := range loads {
				if err, _ := l.err.Load().(error); err != nil {
					t.Fatalf("actor %s: %v", l.id, err)
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	each := func(min int64, count func(*actorLoad) int64) func() bool {
		return func() bool {
			for _, l := range loads {
				if count(l) < min {
					return false
				}
			}
			return true
		}
	}
	waitUntil("traffic before the kill", each(10, func(l *actorLoad) int64 { return l.acked.Load() }))

	armed.Store(true)
	if err := <-killedNow; err != nil {
		t.Fatal(err)
	}
	waitUntil("traffic after the takeover", each(10, func(l *actorLoad) int64 { return l.afterKill.Load() }))
	stopClients()

	for _, l := range loads {
		if err, _ := l.err.Load().(error); err != nil {
			t.Fatalf("actor %s: %v", l.id, err)
		}
		l.attempts.Add(1)
		out, err := nodes[1].Client().ExecDurable(ctx, l.id, []byte("get"))
		if err != nil {
			t.Fatal(err)
		}
		l.acked.Add(1)
		final := int64(requestsIn(t, out))
		acked, attempts := l.acked.Load(), l.attempts.Load()
		t.Logf("actor %s: %d attempts, %d acknowledged (%d after the kill), %d refused or cut off, final count %d",
			l.id, attempts, acked, l.afterKill.Load(), l.refused.Load(), final)
		if final < acked || final > attempts {
			t.Errorf("actor %s: final count %d, want between %d acknowledged and %d attempts", l.id, final, acked, attempts)
		}
		st, err := nodes[2].Client().Alarm(ctx, l.id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Node != nodes[1].NodeID && st.Node != nodes[2].NodeID {
			t.Errorf("actor %s is held by %q, want a live node", l.id, st.Node)
		}
	}
}

func requestsIn(t *testing.T, reply []byte) int {
	t.Helper()
	var c counts
	if err := json.Unmarshal(reply, &c); err != nil {
		t.Fatalf("counter reply %q: %v", reply, err)
	}
	return c.Requests
}

// keepnode -help lists every flag with its default; a missing required
// flag is an error exit naming it; SIGTERM is a clean exit.
func TestKeepnodeFlags(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bin, err := clusterproc.Build(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, bin, "-help").CombinedOutput()
	if err != nil {
		t.Fatalf("keepnode -help: %v\n%s", err, out)
	}
	help := string(out)
	for _, want := range []string{
		"Usage: keepnode -data DIR -class NAME=FILE.wasm",
		"AWS_ENDPOINT_URL",
		"-data string", "-class value", "-advertise string", "-bucket string", "-node-id string",
		"-listen string\n    \tHTTP listen address (default \"127.0.0.1:7600\")",
		`(default "cluster/")`,
		"-lease-ttl duration\n    \tnode lease period (default 10s)",
		"-lease-margin duration", "(default 1s)",
		"-lease-grace duration", "(default 2s)",
		"-idle duration", "(default 1m0s)",
		"-alarm-deadline value", "(default 5s)", "-event-deadline value", "(default 30s)",
		"-retry-base duration", "-retry-max duration", "(default 5m0s)",
		"-sweep duration", "(default 10s)", "-tenants string",
		"-log-level string", `(default "info")`,
		"-metrics-addr string", "-pprof\n",
		"-create-bucket\n", "-cache-dir string", "DATA/.compilation-cache",
		"-max-attempts value", "keepctl alarms failed", "-failover-wait duration",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("keepnode -help lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("keepnode -help:\n%s", help)
	}

	for _, tc := range []struct {
		args []string
		says string
	}{
		{nil, "-data is required"},
		{[]string{"-data", t.TempDir()}, "at least one -class"},
		{[]string{"-data", t.TempDir(), "-class", "counter"}, "want name=path.wasm"},
		{[]string{"-data", t.TempDir(), "-class", "c=" + filepath.Join(t.TempDir(), "missing.wasm")}, "missing.wasm"},
		{[]string{"-data", t.TempDir(), "-class", "c=x.wasm", "-pprof"}, "-pprof needs -metrics-addr"},
	} {
		out, err := exec.CommandContext(ctx, bin, tc.args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 || !strings.Contains(string(out), tc.says) {
			t.Errorf("keepnode %q: %v\n%s\nwant a failed exit saying %q", tc.args, err, out, tc.says)
		}
	}

	// Alone (no -bucket) a node serves, and SIGTERM stops it cleanly.
	cfg := clusterproc.Config{Binary: bin, Dir: t.TempDir(), S3: clusterproc.S3{Bucket: "unused"},
		Classes: map[string]string{"counter": filepath.Join(t.TempDir(), "counter.wasm")}}
	if err := os.WriteFile(cfg.Classes["counter"], counter(t)["counter"], 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := clusterproc.StartNode(ctx, cfg, "alone", "-bucket", "")
	if err != nil {
		t.Fatal(err)
	}
	defer n.Kill()
	if n.NodeID != "" {
		t.Errorf("a node running alone reports node ID %q, want none", n.NodeID)
	}
	id := abi.ActorID{Tenant: "t", Class: "counter", Name: "solo"}
	for want := 1; want <= 2; want++ {
		out, err := n.Client().Exec(ctx, id, []byte("get"))
		if err != nil {
			t.Fatal(err)
		}
		if got := requestsIn(t, out); got != want {
			t.Fatalf("request %d alone: count %d", want, got)
		}
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
}
