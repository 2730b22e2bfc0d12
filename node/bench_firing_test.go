//go:build unix

package node_test

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/metricstest"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/node"
)

// reqCounter counts a node's bucket requests by kind: what they are for
// (actor state under cluster/state/, the alarm index under cluster/alarms/, or
// other: node leases and holds) and the operation.
type reqCounter struct {
	bucket.Bucket
	mu sync.Mutex
	n  map[string]int64 // "state-put", "index-delete-keys", "other-get", ...
}

func newReqCounter(b bucket.Bucket) *reqCounter {
	return &reqCounter{Bucket: b, n: map[string]int64{}}
}

func reqArea(key string) string {
	switch {
	case strings.HasPrefix(key, "cluster/state/"):
		return "state"
	case strings.HasPrefix(key, "cluster/"+alarmindex.Root), strings.HasPrefix(key, alarmindex.Root):
		return "index"
	}
	return "other"
}

func (c *reqCounter) add(what string, n int64) {
	c.mu.Lock()
	c.n[what] += n
	c.mu.Unlock()
}

func (c *reqCounter) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

func (c *reqCounter) Put(ctx context.Context, key string, body []byte, cond bucket.Cond) (string, error) {
	c.add(reqArea(key)+"-put", 1)
	return c.Bucket.Put(ctx, key, body, cond)
}

func (c *reqCounter) Get(ctx context.Context, key string) ([]byte, string, error) {
	c.add(reqArea(key)+"-get", 1)
	return c.Bucket.Get(ctx, key)
}

func (c *reqCounter) Delete(ctx context.Context, key string) error {
	c.add(reqArea(key)+"-delete", 1)
	c.add(reqArea(key)+"-delete-keys", 1)
	return c.Bucket.Delete(ctx, key)
}

func (c *reqCounter) DeleteBatch(ctx context.Context, keys []string) ([]string, error) {
	c.add("batch", int64((len(keys)+bucket.MaxDeleteBatch-1)/bucket.MaxDeleteBatch))
	for _, k := range keys {
		c.add(reqArea(k)+"-delete-keys", 1)
	}
	return c.Bucket.DeleteBatch(ctx, keys)
}

func (c *reqCounter) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	c.add(reqArea(prefix)+"-list", 1)
	return c.Bucket.List(ctx, prefix, startAfter, limit)
}

// firingsProfile is where BenchmarkReplicatedFirings writes a CPU profile
// of its measured window only, leaving out the start-up (-cpuprofile
// covers the whole process: starting the node, creating the actors,
// compiling the guest):
//
//	go test ./node -run '^$' -bench 'ReplicatedFirings/actors-200$' -benchtime 3000x -args -firings.cpuprofile=cpu.out
var firingsProfile = flag.String("firings.cpuprofile", "", "write a CPU profile of BenchmarkReplicatedFirings' measured window to this file")

// cpuTime is the CPU time this process has used (user and system), from
// the kernel's accounting: the node's own work, not the S3 server's (a
// child process) and not wall time.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReplicatedFirings measures the hot path of cluster mode: alarms
// that fire and re-arm. One node on versitygw runs 1, 8, 64 or 200 counter
// actors started with a 1 ms interval, so each is due again as soon as its
// firing is replicated; b.N is the number of firings measured (after a
// warm-up of two per actor). Each firing runs on-alarm, commits, lists the
// new alarm in the index, uploads the snapshot and removes the replaced
// entry and snapshot.
//
// Metrics: firings/s (wall time; noisy on a shared machine), cpu-us/firing
// (the process's own CPU time, user and system, per firing: robust),
// reqs/firing (the node's requests for actor state and the index, lease
// and hold requests left out: other/firing; a multi-object delete counts
// once), and per firing by kind:
// state-puts, index-puts, deletes (single-key DELETE requests),
// batch-deletes (multi-object delete requests), keys-deleted, gets, lists.
//
//	go test ./node -run '^$' -bench ReplicatedFirings -benchtime 3000x
func BenchmarkReplicatedFirings(b *testing.B) {
	benchFiringsOn(b, s3test.Start(b))
}

// memServerDir is where BenchmarkReplicatedFiringsMemoryServer's versitygw
// keeps its files: a tmpfs, so that the server answers at memory speed.
var memServerDir = flag.String("firings.memdir", "/dev/shm", "a tmpfs directory for BenchmarkReplicatedFiringsMemoryServer's versitygw")

// BenchmarkReplicatedFiringsMemoryServer is BenchmarkReplicatedFirings on a
// versitygw of its own whose files are on a tmpfs (-firings.memdir,
// /dev/shm by default) rather than on disk: still a real S3 server on the
// same machine, but one whose replies do not wait for a disk. The node's
// work per firing is the same; what differs is how long the node sits idle
// between a request and its reply, and on a virtual machine work that
// follows an idle spell costs more CPU time (BenchmarkWorkAfterIdle
// measures by how much on the machine at hand). S3 elsewhere answers
// slower still, but a node that serves many actors is then busy, not idle.
//
//	go test ./node -run '^$' -bench ReplicatedFiringsMemoryServer -benchtime 2000x
func BenchmarkReplicatedFiringsMemoryServer(b *testing.B) {
	if st, err := os.Stat(*memServerDir); err != nil || !st.IsDir() {
		b.Skipf("no directory %s for an in-memory server (-firings.memdir): %v", *memServerDir, err)
	}
	benchFiringsOn(b, s3test.StartLocal(b, *memServerDir))
}

func benchFiringsOn(b *testing.B, srv *s3test.Server) {
	classes := counter(b)
	for _, actors := range []int{1, 8, 64, 200} {
		b.Run(fmt.Sprintf("actors-%d", actors), func(b *testing.B) {
			benchFirings(b, srv, classes, actors)
		})
	}
}

// BenchmarkWorkAfterIdle measures the machine, not the node: one fixed unit
// of work (the SHA-256 of 32 KiB, a 1 KiB round trip over loopback TCP and
// a 4 KiB pwrite, four times: roughly what a firing's requests cost) done
// back to back, then with the process asleep for 1 ms and 10 ms between
// units. cpu-us/unit is the process's CPU time per unit. On a quiet bare
// machine the three are close; on a virtual machine the unit that follows
// an idle spell costs more (cold caches, the vCPU's wake-up), which is why
// BenchmarkReplicatedFirings' CPU per firing rises when the S3 server
// answers slowly.
//
//	go test ./node -run '^$' -bench WorkAfterIdle -benchtime 400x
func BenchmarkWorkAfterIdle(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c) // echo
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	f, err := os.Create(filepath.Join(b.TempDir(), "work"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	data, reply := make([]byte, 32<<10), make([]byte, 1<<10)
	unit := func(tb testing.TB) {
		for i := range 4 {
			sum := sha256.Sum256(data)
			data[0] = sum[0]
			if _, err := c.Write(data[:len(reply)]); err != nil {
				tb.Fatal(err)
			}
			if _, err := io.ReadFull(c, reply); err != nil {
				tb.Fatal(err)
			}
			if _, err := f.WriteAt(data[:4096], int64(i)*4096); err != nil {
				tb.Fatal(err)
			}
		}
	}
	for range 50 { // warm-up
		unit(b)
	}
	for _, gap := range []time.Duration{0, time.Millisecond, 10 * time.Millisecond} {
		b.Run(fmt.Sprintf("idle-%s", gap), func(b *testing.B) {
			cpu0 := cpuTime(b)
			for range b.N {
				unit(b)
				if gap > 0 {
					time.Sleep(gap)
				}
			}
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/unit")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func benchFirings(b *testing.B, srv *s3test.Server, classes map[string][]byte, actors int) {
	ctx := context.Background()
	rc := newReqCounter(srv.Bucket)
	var fired atomic.Int64
	var failed atomic.Int64
	// The firing that reaches want wakes the waiting benchmark, which
	// otherwise sleeps: a benchmark that polled would add its own wake-ups
	// to the process's CPU time, which is the node's figure.
	var want atomic.Int64
	reached := make(chan struct{}, 1)
	dir := b.TempDir()
	reg := prometheus.NewRegistry()
	n, err := node.New(ctx, node.Config{
		DataDir: dir, Classes: classes, EngineOptions: durableOptions(dir), Registerer: reg,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "bench", Level: hclog.Error, Output: testWriter{b}}),
		OnDelivery: func(ev node.DeliveryEvent) {
			switch {
			case ev.Err != nil || ev.Event.Err != nil:
				failed.Add(1)
			case ev.Event.Ran:
				if f, w := fired.Add(1), want.Load(); w > 0 && f >= w {
					select {
					case reached <- struct{}{}:
					default:
					}
				}
			}
		},
		Cluster: &node.ClusterConfig{
			Bucket: rc, NodeID: "bench", Addr: "bench.invalid:1",
			IdleTimeout: time.Hour, SweepPeriod: time.Hour,
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close(ctx)
	n.Start(ctx)
	for i := range actors {
		id := abi.ActorID{Tenant: "b", Class: "counter", Name: fmt.Sprintf("f%d-%d", actors, i)}
		if _, err := n.Exec(ctx, id, []byte("start 1"), node.ExecDurable); err != nil {
			b.Fatal(err)
		}
	}
	wait := func(target int64) {
		want.Store(target)
		defer want.Store(0)
		limit := time.NewTimer(10 * time.Minute)
		defer limit.Stop()
		for fired.Load() < target {
			select {
			case <-reached:
			case <-limit.C:
				b.Fatalf("%d firings after 10 min, want %d (%d failed)", fired.Load(), target, failed.Load())
			}
		}
	}
	wait(int64(2 * actors)) // warm-up: every actor open and fired
	b.ResetTimer()
	profiling := false
	if *firingsProfile != "" && b.N > 1 { // not the benchmark's probe run of one
		f, err := os.Create(*firingsProfile)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		profiling = true
	}
	base, cpu0, t0 := fired.Load(), cpuTime(b), time.Now()
	req0 := rc.snapshot()
	j0 := metricstest.Gather(reg)
	wait(base + int64(b.N))
	if profiling {
		pprof.StopCPUProfile()
	}
	got := fired.Load() - base
	elapsed, cpu := time.Since(t0), cpuTime(b)-cpu0
	req := rc.snapshot()
	j1 := metricstest.Gather(reg)
	b.StopTimer()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d deliveries failed", f)
	}

	per := func(kinds ...string) float64 {
		var sum int64
		for _, k := range kinds {
			sum += req[k] - req0[k]
		}
		return float64(sum) / float64(got)
	}
	var areas = []string{"state", "index"}
	kinds := func(op string) []string {
		var out []string
		for _, a := range areas {
			out = append(out, a+"-"+op)
		}
		return out
	}
	b.ReportMetric(float64(got)/elapsed.Seconds(), "firings/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(got), "cpu-us/firing")
	b.ReportMetric(per(kinds("put")...)+per(kinds("get")...)+per(kinds("list")...)+
		per(kinds("delete")...)+per("batch"), "reqs/firing")
	b.ReportMetric(per("state-put"), "state-puts/firing")
	b.ReportMetric(per("index-put"), "index-puts/firing")
	b.ReportMetric(per(kinds("delete")...), "deletes/firing")
	b.ReportMetric(per("batch"), "batch-deletes/firing")
	b.ReportMetric(per(kinds("delete-keys")...), "keys-deleted/firing")
	b.ReportMetric(per(kinds("get")...), "gets/firing")
	b.ReportMetric(per(kinds("list")...), "lists/firing")
	b.ReportMetric(per("other-put", "other-get", "other-delete", "other-list"), "other/firing")
	if syncs := j1.Value("wasmkeep_journal_syncs_total") - j0.Value("wasmkeep_journal_syncs_total"); syncs > 0 {
		// With -durable: the commits each sync of the node journal made
		// durable at once.
		b.ReportMetric((j1.Value("wasmkeep_journal_commits_total")-j0.Value("wasmkeep_journal_commits_total"))/syncs, "commits/sync")
	}
	b.ReportMetric(0, "ns/op")
}
