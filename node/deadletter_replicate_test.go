package node_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/inspect"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// A dead letter stays listed until the event that sets the actor's alarm
// again counts: an event of the guest that set an alarm but whose upload
// failed is not the actor's state (the bucket's still holds the dead
// letter and no alarm), so its record is not deleted.
func TestADeadLetterStaysListedWhenTheEventThatSetAnAlarmDidNotReplicate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	classes := map[string][]byte{"scripted": testguest.Build(t, "testdata/guests/scripted")}
	mem := bucket.NewMem()
	var faults stateFaults
	mem.Faults = faults.hook
	a := serveHost(t, mem, "a", classes, hostConfig{start: true,
		engine: []engine.Option{engine.WithMaxAttempts(1), engine.WithBackoff(time.Second, time.Minute)}})
	p1 := abi.ActorID{Tenant: "t", Class: "scripted", Name: "p1"}
	scheduled := giveUp(t, a.URL, p1)

	// The guest sets an alarm an hour ahead; the upload of that event fails.
	faults.arm(bucket.Fault{Err: errors.New("injected: the store refused the upload")})
	later := time.Now().Add(time.Hour).UnixMilli()
	if _, err := a.Exec(ctx, p1, []byte("set "+strconv.FormatInt(later, 10)), node.ExecDurable); err == nil {
		t.Fatal("exec-durable whose upload failed succeeded")
	}

	// The bucket's state (restored by the next event) has no alarm and
	// the dead letter: it must still be listed.
	var st node.AlarmState
	if status, said := callJSON(t, "GET", a.URL+"/v1/actors/t/scripted/p1/alarm", "", "", &st); status != 200 {
		t.Fatalf("GET alarm: %d %s", status, said)
	}
	if st.AlarmMs != nil || st.From != "bucket" {
		t.Fatalf("p1's state: %+v; want the bucket's, with no alarm (the event that set one never replicated)", st)
	}
	info, err := inspect.New(mem, "cluster/").Actor(ctx, p1)
	if err != nil || info.DeadLetter == nil || info.DeadLetter.Scheduled != scheduled {
		t.Fatalf("p1's state in the bucket: %+v (%v); want its dead letter, scheduled at %d", info, err, scheduled)
	}
	if st.DeadLetter == nil || st.DeadLetter.ScheduledMs != scheduled {
		t.Fatalf("GET alarm of p1: no alarm and dead letter %+v; want its dead letter, scheduled at %d", st.DeadLetter, scheduled)
	}
	if got := deadLetters(t, a.URL, "", ""); len(got.DeadLetters) != 1 {
		t.Fatalf("dead letters listed: %q; want p1's, which its state still holds (the event that set an alarm was not replicated)", letterNames(got.DeadLetters))
	}
}
