// Command demo-single runs the counter actor on one node: three actors arm alarms
// that fire and re-arm themselves, printed as they happen; halfway through,
// the node is closed and a new one opens the same data directory, and the
// alarms go on from their committed state.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/internal/guestbuild"
	"github.com/wasmkeep/alarms/node"
)

func main() {
	guest := flag.String("guest", "go", "the counter actor's language: go, rust or as (AssemblyScript); make demo-single GUEST=rust builds it")
	wasmPath := flag.String("wasm", "", "the counter actor's module (default build/counter-actor.wasm, or -rust.wasm or -as.wasm after -guest)")
	dataDir := flag.String("data", "", "data directory (default: a new temporary one)")
	duration := flag.Duration("duration", 6*time.Second, "how long each node runs")
	verbose := flag.Bool("v", false, "log the node's debug output")
	flag.Parse()
	if *wasmPath == "" {
		var err error
		if *wasmPath, err = guestbuild.Built("counter-actor", *guest); err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			os.Exit(2)
		}
	}
	if err := run(*wasmPath, *dataDir, *duration, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

type counts struct {
	Requests   int    `json:"requests"`
	Fired      int    `json:"fired"`
	AlarmMs    *int64 `json:"alarm_ms"`
	IntervalMs int64  `json:"interval_ms"`
}

func run(wasmPath, dataDir string, duration time.Duration, verbose bool) error {
	wasm, err := os.ReadFile(wasmPath)
	if err != nil {
		return fmt.Errorf("read the counter actor: %w (run `make demo-single`, or with GUEST=rust or GUEST=as, which builds it)", err)
	}
	if dataDir == "" {
		dataDir, err = os.MkdirTemp("", "wasmkeep-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dataDir)
	}
	level := hclog.Warn
	if verbose {
		level = hclog.Debug
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "node", Level: level})

	start := time.Now()
	var mu sync.Mutex
	var lateMs []float64
	fired := map[string]int{}
	onDelivery := func(ev node.DeliveryEvent) {
		d := ev.Event
		if !d.Ran {
			return
		}
		late := ev.At.Sub(time.UnixMilli(d.Scheduled))
		mu.Lock()
		lateMs = append(lateMs, float64(late.Microseconds())/1000)
		fired[ev.Actor.Name]++
		n := fired[ev.Actor.Name]
		mu.Unlock()
		next := "none"
		if d.Alarm != nil {
			next = fmt.Sprintf("+%dms", *d.Alarm-ev.At.UnixMilli())
		}
		status := "ok"
		if d.Err != nil {
			status = "failed: " + d.Err.Error()
		}
		fmt.Printf("%7.3fs  %-22s fired #%-3d late %6.1fms  re-armed %-8s %s\n",
			ev.At.Sub(start).Seconds(), ev.Actor.String(), n, float64(late.Microseconds())/1000, next, status)
	}

	ctx := context.Background()
	actors := []struct {
		name     string
		interval int
	}{{"counter-1", 500}, {"counter-2", 800}, {"counter-3", 1300}}

	for round := 1; round <= 2; round++ {
		n, err := node.New(ctx, node.Config{
			DataDir:    dataDir,
			Classes:    map[string][]byte{"counter": wasm},
			Logger:     logger,
			OnDelivery: onDelivery,
		})
		if err != nil {
			return err
		}
		fmt.Printf("== node %d up on %s: %d alarms found in the data directory\n", round, dataDir, n.Timer().Len())
		n.Start(ctx)
		if round == 1 {
			for _, a := range actors {
				id := abi.ActorID{Tenant: "demo", Class: "counter", Name: a.name}
				if _, err := n.Request(ctx, id, []byte(fmt.Sprintf("start %d", a.interval))); err != nil {
					n.Close(ctx)
					return err
				}
				fmt.Printf("%7.3fs  %-22s armed every %dms\n", time.Since(start).Seconds(), id.String(), a.interval)
			}
		}
		time.Sleep(duration)
		if round == 2 {
			fmt.Println("== final state, read through each actor")
			for _, a := range actors {
				id := abi.ActorID{Tenant: "demo", Class: "counter", Name: a.name}
				r, err := n.Request(ctx, id, []byte("get"))
				if err != nil {
					n.Close(ctx)
					return err
				}
				var c counts
				if err := json.Unmarshal(r.Response, &c); err != nil {
					n.Close(ctx)
					return &abi.ActorError{ID: id, Op: fmt.Sprintf("reply %q", r.Response), Err: err}
				}
				fmt.Printf("   %-22s requests %d, fired %d (committed in its database)\n", id.String(), c.Requests, c.Fired)
			}
		}
		if err := n.Close(ctx); err != nil {
			return err
		}
		if round == 1 {
			fmt.Println("== node 1 closed; a new node opens the same data directory")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	sort.Float64s(lateMs)
	total := len(lateMs)
	if total == 0 {
		return fmt.Errorf("no alarm fired")
	}
	fmt.Printf("== %d alarms fired; lateness p50 %.1fms, p99 %.1fms, max %.1fms\n",
		total, pct(lateMs, 50), pct(lateMs, 99), lateMs[total-1])
	return nil
}

func pct(sorted []float64, p float64) float64 {
	i := int(float64(len(sorted)-1) * p / 100)
	return sorted[i]
}
