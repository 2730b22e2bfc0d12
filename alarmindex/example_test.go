package alarmindex_test

import (
	"bytes"
	"fmt"

	"github.com/wasmkeep/alarms/alarmindex"

	"github.com/wasmkeep/alarms/abi"
)

// An owner sets an alarm, then moves it. Each event yields a plan the caller
// executes: PUT the new entry, record it, replicate, delete the replaced one.
func Example() {
	// Production seeds the nonce prefix from crypto/rand; a fixed prefix
	// keeps this example's output stable.
	nonces, err := alarmindex.NewNonceSource(bytes.NewReader(make([]byte, alarmindex.NoncePrefixBytes)))
	if err != nil {
		panic(err)
	}
	rules := alarmindex.Rules{Nonces: nonces}
	actor := abi.ActorID{Tenant: "acme", Class: "counter", Name: "a/1"}

	at := int64(1_700_000_000_000)
	var recorded *alarmindex.Key // the alarm_indexed meta, parsed
	for _, alarm := range []*int64{&at, &at, nil} {
		plan, err := rules.AfterEvent(alarmindex.EventFacts{
			Actor: actor, Alarm: alarm, Recorded: recorded,
			Generation: 7, HoldValid: true,
		})
		if err != nil {
			fmt.Println("give up:", err)
			return
		}
		if plan.Empty() {
			fmt.Println("unchanged: no request")
			continue
		}
		if plan.Put != nil {
			fmt.Println("PUT if-none-match", plan.Put)
		}
		if plan.Record {
			fmt.Printf("record alarm_indexed=%q\n", alarmindex.FormatRecorded(plan.Recorded))
			recorded = plan.Recorded
		}
		fmt.Println("replicate")
		if plan.DeleteAfterReplicate != nil {
			fmt.Println("DELETE", plan.DeleteAfterReplicate)
		}
	}
	// Output:
	// PUT if-none-match alarms/acme/001700000000000/counter.t/612f31/00000000000000000007-00000000000000000000000000000001
	// record alarm_indexed="001700000000000/00000000000000000007-00000000000000000000000000000001"
	// replicate
	// unchanged: no request
	// record alarm_indexed=""
	// replicate
	// DELETE alarms/acme/001700000000000/counter.t/612f31/00000000000000000007-00000000000000000000000000000001
}
