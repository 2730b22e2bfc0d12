package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http/httptest"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/node"
)

func Example() {
	base, stop := startNode() // a node serving the class "oneshot", with the token "operator-token"
	defer stop()
	ctx := context.Background()

	c, err := client.New(base, client.WithToken("operator-token"))
	if err != nil {
		log.Fatal(err)
	}
	id := abi.ActorID{Tenant: "demo", Class: "oneshot", Name: "c1"}
	// A request creates the actor (this guest sets its alarm to the time
	// in the request's 8 bytes).
	if _, err := c.Exec(ctx, id, make([]byte, 8)); err != nil {
		log.Fatal(err)
	}
	st, err := c.SetAlarm(ctx, id, time.Date(2030, 1, 15, 8, 0, 0, 0, time.UTC))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("alarm at", st.Alarm, "retry count", st.RetryCount)

	// Clear it only if it is still at noon on 1 January 2030: it is not.
	_, err = c.ClearAlarmAt(ctx, id, time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC).UnixMilli())
	var p *client.Problem
	if errors.As(err, &p) {
		fmt.Println(p.Status, p.Code, p.Temporary())
	}
	// Output:
	// alarm at 2030-01-15T08:00:00.000Z retry count 0
	// 409 alarm_moved false
}

// startNode starts a node running alone and serves its HTTP API.
func startNode() (baseURL string, stop func()) {
	wasm, err := os.ReadFile("../testdata/wasm/oneshot_alarm.wasm")
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "client-example")
	if err != nil {
		log.Fatal(err)
	}
	n, err := node.New(context.Background(), node.Config{
		DataDir: dir, Classes: map[string][]byte{"oneshot": wasm},
		Security: node.Security{Token: "operator-token"}, Logger: hclog.NewNullLogger(),
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(n.Handler())
	return srv.URL, func() {
		srv.Close()
		n.Close(context.Background())
		os.RemoveAll(dir)
	}
}
