// Command demo-reminders runs the reminders actor (named timers, an
// interval and a cron digest over the one alarm; guest-sdk/examples/reminders
// and its Rust and AssemblyScript twins) on one node: it sets two reminders
// and an interval, lets them fire, closes the node while a reminder falls
// due, and opens a new node on the same data directory, where the late
// reminder is sent once and the interval ticks once for what it missed.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/internal/guestbuild"
	"github.com/wasmkeep/alarms/node"
)

func main() {
	guest := flag.String("guest", "go", "the reminders actor's language: go, rust or as (AssemblyScript); make demo-reminders GUEST=rust builds it")
	wasmPath := flag.String("wasm", "", "the reminders actor's module (default build/reminders.wasm, or -rust.wasm or -as.wasm after -guest)")
	flag.Parse()
	if *wasmPath == "" {
		var err error
		if *wasmPath, err = guestbuild.Built("reminders", *guest); err != nil {
			fmt.Fprintln(os.Stderr, "demo-reminders:", err)
			os.Exit(2)
		}
	}
	wasm, err := os.ReadFile(*wasmPath)
	if err == nil {
		err = run(os.Stdout, wasm)
	} else {
		err = fmt.Errorf("read the reminders actor: %w (run `make demo-reminders`, which builds it)", err)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo-reminders:", err)
		os.Exit(1)
	}
}

// run is the demo; it fails unless each reminder was sent once and the
// interval ticked, on time and after the outage.
func run(out io.Writer, wasm []byte) error {
	dir, err := os.MkdirTemp("", "wasmkeep-reminders-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	id := abi.ActorID{Tenant: "demo", Class: "reminders", Name: "ann"}
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "%6.2fs  "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
	}
	up := func(round int) (*node.Node, error) {
		n, err := node.New(ctx, node.Config{
			DataDir: dir, Classes: map[string][]byte{"reminders": wasm},
			Logger: hclog.New(&hclog.LoggerOptions{Name: "node", Level: hclog.Warn}),
			OnDelivery: func(ev node.DeliveryEvent) {
				if d := ev.Event; d.Ran {
					say("on-alarm ran for the timers due at %s (%s late)", time.UnixMilli(d.Scheduled).UTC().Format("15:04:05.000"),
						ev.At.Sub(time.UnixMilli(d.Scheduled)).Round(time.Millisecond))
				}
			},
		})
		if err != nil {
			return nil, err
		}
		say("== node %d up", round)
		n.Start(ctx)
		return n, nil
	}
	ask := func(n *node.Node, req string) (string, error) {
		r, err := n.Request(ctx, id, []byte(req))
		if err != nil {
			return "", err
		}
		say("%-36q -> %q", req, r.Response)
		return string(r.Response), nil
	}

	n, err := up(1)
	if err != nil {
		return err
	}
	for _, req := range []string{"whoami", "remind tea 2 put the kettle on", "remind call 4 call Ann", "every beat 1", "list"} {
		if _, err := ask(n, req); err != nil {
			n.Close(ctx)
			return err
		}
	}
	time.Sleep(2500 * time.Millisecond)
	if err := n.Close(ctx); err != nil {
		return err
	}
	say("== node 1 closed: down for 3 s, while the call reminder falls due")
	time.Sleep(3 * time.Second)
	if n, err = up(2); err != nil {
		return err
	}
	defer n.Close(ctx)
	time.Sleep(1500 * time.Millisecond)
	sent, err := ask(n, "sent")
	if err != nil {
		return err
	}
	ticks, err := ask(n, "ticks beat")
	if err != nil {
		return err
	}
	if _, err := ask(n, "list"); err != nil {
		return err
	}
	if strings.Count(sent, "tea: put the kettle on\n") != 1 || strings.Count(sent, "call: call Ann\n") != 1 {
		return fmt.Errorf("the reminders sent were %q: want each of tea and call once", sent)
	}
	if ticks == "" || ticks == "0" {
		return fmt.Errorf("the interval ticked %q times", ticks)
	}
	say("== each reminder was sent once (call late, after the restart); the interval ticked %s times", ticks)
	return nil
}
