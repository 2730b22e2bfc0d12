// Command demo shows alarms surviving the death of their node: it starts an
// S3 endpoint (versitygw, or the one AWS_ENDPOINT_URL names), three keepnode
// processes and counter actors that re-arm their alarms; it SIGKILLs the node
// that holds them all, shows their alarms firing on the other two with a
// live progress line, and ends with a summary: alarms set, fired, how late
// the orphaned ones fired (p50, p99, max), duplicates, and lost (must be 0).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/guestbuild"
)

type options struct {
	wasm     string
	actors   int
	interval time.Duration
	before   time.Duration
	after    time.Duration
	leaseTTL time.Duration
	margin   time.Duration
	grace    time.Duration
	sweep    time.Duration
	keep     bool
}

func main() {
	var o options
	guest := flag.String("guest", "go", "the counter actor's language: go, rust or as (AssemblyScript); make demo GUEST=rust builds it")
	flag.StringVar(&o.wasm, "wasm", "", "the counter actor's module (default build/counter-actor.wasm, or -rust.wasm or -as.wasm after -guest)")
	flag.IntVar(&o.actors, "actors", 60, "how many counter actors")
	flag.DurationVar(&o.interval, "interval", 3*time.Second, "each actor's alarm interval")
	flag.DurationVar(&o.before, "before", 5*time.Second, "how long the cluster runs before the kill")
	flag.DurationVar(&o.after, "after", 15*time.Second, "how long it runs after the kill")
	flag.DurationVar(&o.leaseTTL, "lease-ttl", 2*time.Second, "node lease period (the design's default is 10s)")
	flag.DurationVar(&o.margin, "lease-margin", 400*time.Millisecond, "lease margin")
	flag.DurationVar(&o.grace, "lease-grace", time.Second, "lease grace")
	flag.DurationVar(&o.sweep, "sweep", time.Second, "alarm_sweep (the design's default is 10s)")
	flag.BoolVar(&o.keep, "keep", false, "keep the working directory (logs, data, bucket)")
	flag.Parse()
	if err := o.check(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
	if o.wasm == "" {
		var err error
		if o.wasm, err = guestbuild.Built("counter-actor", *guest); err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			os.Exit(2)
		}
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "\ndemo:", err)
		os.Exit(1)
	}
}

// check refuses flag values the demo cannot run with, before it starts
// anything.
func (o options) check() error {
	if o.actors < 1 {
		return fmt.Errorf("-actors %d: want at least 1", o.actors)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"interval", o.interval}, {"before", o.before}, {"after", o.after}, {"lease-ttl", o.leaseTTL}, {"sweep", o.sweep}} {
		if d.v <= 0 {
			return fmt.Errorf("-%s %v: want a positive duration", d.name, d.v)
		}
	}
	if o.grace < 0 {
		return fmt.Errorf("-lease-grace %v: want at least 0", o.grace)
	}
	if o.margin < 0 || o.margin >= o.leaseTTL {
		return fmt.Errorf("-lease-margin %v: want at least 0 and less than -lease-ttl (%v)", o.margin, o.leaseTTL)
	}
	return nil
}

// firing is one "alarm fired" line of a node's log.
type firing struct {
	node      string
	actor     string
	scheduled int64
	fired     int64
}

// recorder reads the nodes' JSON log lines ("<node>: <json>\n", one line
// per write) and keeps the firings.
type recorder struct {
	mu      sync.Mutex
	firings []firing
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range strings.Split(string(p), "\n") {
		r.line(l)
	}
	return len(p), nil
}

func (r *recorder) line(l string) {
	node, rest, ok := strings.Cut(l, " ")
	if !ok || !strings.Contains(rest, `"alarm fired"`) {
		return
	}
	var v struct {
		Actor     string `json:"actor"`
		Scheduled int64  `json:"scheduled_ms"`
		Fired     int64  `json:"fired_ms"`
	}
	if i := strings.IndexByte(rest, '{'); i >= 0 && json.Unmarshal([]byte(rest[i:]), &v) == nil {
		r.firings = append(r.firings, firing{node: strings.Trim(node, "[]:"), actor: v.Actor, scheduled: v.Scheduled, fired: v.Fired})
	}
}

func (r *recorder) snapshot() []firing {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]firing(nil), r.firings...)
}

func run(o options) error {
	ctx := context.Background()
	wasm, err := filepath.Abs(o.wasm)
	if err == nil {
		_, err = os.Stat(wasm)
	}
	if err != nil {
		return fmt.Errorf("the counter actor: %w (run `make demo`, or `make demo GUEST=rust` or `GUEST=as`, which build it)", err)
	}
	dir, err := os.MkdirTemp("", "wasmkeep-demo-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Println("working directory:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	start := time.Now()
	tty := isTerminal(os.Stdout)
	var lastLine time.Time
	say := func(format string, args ...any) {
		if tty {
			fmt.Print("\r\033[K")
		}
		fmt.Printf("%6.1fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}

	say("building keepnode (the first build takes a few minutes; later ones are cached)")
	bin, err := clusterproc.Build(ctx, dir)
	if err != nil {
		return err
	}
	var suffix [4]byte
	rand.Read(suffix[:])
	bucketName := "wasmkeep-demo-" + hex.EncodeToString(suffix[:])
	var s3 clusterproc.S3
	if ep := os.Getenv("AWS_ENDPOINT_URL"); ep != "" {
		s3 = clusterproc.S3{Bucket: bucketName}
		say("using the S3 endpoint at %s, bucket %s", ep, bucketName)
	} else {
		gw, err := clusterproc.StartVersitygw(ctx, dir)
		if err != nil {
			return fmt.Errorf("start the S3 endpoint: %w (run `make tools`, or set AWS_ENDPOINT_URL)", err)
		}
		defer gw.Stop()
		s3 = gw.S3(bucketName)
		say("S3 endpoint (versitygw) at %s, bucket %s", gw.Endpoint, bucketName)
	}

	rec := &recorder{}
	cfg := clusterproc.Config{
		Binary:  bin,
		S3:      s3,
		Classes: map[string]string{"counter": wasm},
		Dir:     dir,
		Log:     rec,
		Flags: []string{
			"-lease-ttl", o.leaseTTL.String(), "-lease-margin", o.margin.String(), "-lease-grace", o.grace.String(),
			"-sweep", o.sweep.String(), "-tenants", "demo", "-idle", "10m", "-log-json", "-log-level", "debug", // each firing is a debug line
			"-create-bucket", // the demo's bucket is a new one of its own
		},
	}
	nodes, err := clusterproc.StartNodes(ctx, cfg, 3)
	if err != nil {
		return err
	}
	defer func() {
		for _, n := range nodes {
			n.Kill()
		}
	}()
	for _, n := range nodes {
		say("node %s up at %s (pid %d)", n.NodeID, n.URL, n.Pid())
	}

	ids := make([]abi.ActorID, o.actors)
	for i := range ids {
		ids[i] = abi.ActorID{Tenant: "demo", Class: "counter", Name: fmt.Sprintf("counter-%03d", i)}
		if _, err := nodes[0].Client().ExecDurable(ctx, ids[i], []byte(fmt.Sprintf("start %d", o.interval.Milliseconds()))); err != nil {
			return fmt.Errorf("arm %s: %w", ids[i], err)
		}
	}
	say("%d counter actors on %s, each re-arming its alarm every %v", o.actors, nodes[0].NodeID, o.interval)

	nodeName := map[string]string{}
	for _, n := range nodes {
		nodeName[n.Name] = n.NodeID
	}
	progress := func(until time.Time, killedAt int64) {
		for time.Now().Before(until) {
			time.Sleep(250 * time.Millisecond)
			per := map[string]int{}
			recovered := map[string]bool{}
			for _, f := range rec.snapshot() {
				per[f.node]++
				if killedAt > 0 && f.node != nodes[0].Name && f.fired > killedAt {
					recovered[f.actor] = true
				}
			}
			line := fmt.Sprintf("fired: %s %d, %s %d, %s %d", nodes[0].NodeID, per[nodes[0].Name], nodes[1].NodeID, per[nodes[1].Name], nodes[2].NodeID, per[nodes[2].Name])
			if killedAt > 0 {
				line += fmt.Sprintf("  |  orphaned actors firing on the survivors: %d/%d", len(recovered), o.actors)
			}
			if tty {
				fmt.Printf("\r\033[K%6.1fs  %s", time.Since(start).Seconds(), line)
			} else if time.Since(lastLine) >= 2*time.Second {
				fmt.Printf("%6.1fs  %s\n", time.Since(start).Seconds(), line)
				lastLine = time.Now()
			}
		}
	}
	progress(time.Now().Add(o.before), 0)
	if tty {
		fmt.Println()
	}

	if err := nodes[0].Kill(); err != nil {
		return err
	}
	killedAt := time.Now().UnixMilli()
	say("SIGKILLed %s, which held all %d actors; their alarms are now orphaned", nodes[0].NodeID, o.actors)
	progress(time.Now().Add(o.after), killedAt)
	if tty {
		fmt.Println()
	}

	// Read every actor's committed state through a survivor.
	end := time.Now().UnixMilli()
	margin := (o.leaseTTL + o.grace + 2*o.sweep).Milliseconds()
	lost := 0
	for _, id := range ids {
		out, err := nodes[1].Client().ExecDurable(ctx, id, []byte("get"))
		if err != nil {
			return fmt.Errorf("read %s: %w", id, err)
		}
		var c struct {
			Fired   int    `json:"fired"`
			AlarmMs *int64 `json:"alarm_ms"`
		}
		if err := json.Unmarshal(out, &c); err != nil {
			return fmt.Errorf("read %s: reply %q: %w", id, out, err)
		}
		if c.AlarmMs == nil || *c.AlarmMs < end-margin {
			lost++
			say("LOST: %s has alarm %v, overdue", id, c.AlarmMs)
		}
	}

	firings := rec.snapshot()
	seen := map[string]int{}
	// Each actor's first firing on a survivor is its orphaned alarm.
	first := map[string]firing{}
	for _, f := range firings {
		seen[fmt.Sprintf("%s@%d", f.actor, f.scheduled)]++
		if f.node == nodes[0].Name {
			continue
		}
		if g, ok := first[f.actor]; !ok || f.fired < g.fired {
			first[f.actor] = f
		}
	}
	dups := 0
	for _, n := range seen {
		if n > 1 {
			dups += n - 1
		}
	}
	var lates []float64
	for _, f := range first {
		lates = append(lates, float64(f.fired-f.scheduled)/1000)
	}
	sort.Float64s(lates)
	fmt.Println()
	fmt.Println("== summary")
	fmt.Printf("  alarms set:            %d actors, re-arming every %v\n", o.actors, o.interval)
	fmt.Printf("  fired:                 %d (%d before the kill)\n", len(firings), countBefore(firings, killedAt))
	if len(lates) > 0 {
		// The survivors walk the dead node's alarms once a reading of the
		// leases judges its lease expired: lease + grace after they first
		// saw its last renewal, up to two readings (a third of the lease
		// each) after it landed.
		fmt.Printf("  orphaned alarms:       %d fired on the survivors, late by p50 %.1fs, p99 %.1fs, max %.1fs\n"+
			"                         (expected at most about lease %v + grace %v + two readings of the leases %v; the design's defaults, 10s+2s+6.7s, give about 19s)\n",
			len(lates),
			pct(lates, 50), pct(lates, 99), lates[len(lates)-1], o.leaseTTL, o.grace, (2 * o.leaseTTL / 3).Round(100*time.Millisecond))
	}
	fmt.Printf("  duplicates:            %d\n", dups)
	fmt.Printf("  lost:                  %d\n", lost)
	if lost > 0 {
		return fmt.Errorf("%d alarms lost", lost)
	}
	if len(first) < o.actors {
		return fmt.Errorf("%d of %d orphaned alarms did not fire on a survivor within %v of the kill", o.actors-len(first), o.actors, o.after)
	}
	return nil
}

func countBefore(fs []firing, t int64) int {
	n := 0
	for _, f := range fs {
		if f.fired <= t {
			n++
		}
	}
	return n
}

func pct(sorted []float64, p float64) float64 {
	return sorted[int(float64(len(sorted)-1)*p/100)]
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
