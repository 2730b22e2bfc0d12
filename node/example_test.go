package node_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/node"
)

// A node runs the actors of its classes on a data directory and delivers
// their alarms; a request event sets one, and the node's timer fires it.
// With Config.Cluster it joins a cluster that shares a bucket instead.
func Example() {
	ctx := context.Background()
	wasm, err := os.ReadFile("../testdata/wasm/oneshot_alarm.wasm") // on-request sets the alarm to its body's i64
	if err != nil {
		panic(err)
	}
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	fired := make(chan node.DeliveryEvent, 1)
	n, err := node.New(ctx, node.Config{
		DataDir:    dir,
		Classes:    map[string][]byte{"oneshot": wasm},
		OnDelivery: func(ev node.DeliveryEvent) { fired <- ev },
	})
	if err != nil {
		panic(err)
	}
	defer n.Close(ctx)
	n.Start(ctx)

	id := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "a"}
	due := time.Now().Add(50 * time.Millisecond).UnixMilli()
	var req [8]byte
	binary.LittleEndian.PutUint64(req[:], uint64(due))
	res, err := n.Request(ctx, id, req[:])
	if err != nil {
		panic(err)
	}
	fmt.Println("alarm set for the requested time:", res.Alarm != nil && *res.Alarm == due)
	ev := <-fired
	fmt.Println("fired for", ev.Actor, "on time:", ev.Event.Ran && ev.Event.Scheduled == due)
	// Output:
	// alarm set for the requested time: true
	// fired for t/oneshot/a on time: true
}
