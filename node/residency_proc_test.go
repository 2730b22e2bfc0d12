package node_test

import (
	"context"
	"encoding/binary"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/internal/clusterproc"
)

// Three keepnode processes with a budget of 4 open databases and 2
// instances each. Actors are armed on node0 eight at a time, each event
// putting another actor to sleep, and node0 is killed with SIGKILL in the
// middle of it. Every alarm whose arming was acknowledged fires on a
// survivor and its entry leaves the index.
func TestAKillWhileEvictingLosesNoAlarm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rec := &swFirings{}
	cfg, srv := swProcCluster(t, ctx, rec, swScaled)
	cfg.Flags = append(cfg.Flags, "-max-open-dbs", "4", "-max-instances", "2")
	nodes := startProcNodes(t, ctx, cfg, 3)
	victim := nodes[0]

	const actors, killAfter = 200, 80
	due := time.Now().Add(20 * time.Second).UnixMilli()
	var mu sync.Mutex
	acked := map[abi.ActorID]int64{}
	var n atomic.Int64
	killed := make(chan struct{})
	var once sync.Once
	work := make(chan abi.ActorID)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				body := binary.LittleEndian.AppendUint64(nil, uint64(due))
				if _, err := clusterproc.Exec(ctx, victim.URL, id, clusterproc.KindExecDurable, body); err != nil {
					continue // after the kill, or cut short by it
				}
				mu.Lock()
				acked[id] = due
				mu.Unlock()
				if n.Add(1) == killAfter {
					once.Do(func() {
						if err := victim.Kill(); err != nil {
							t.Error(err)
						}
						close(killed)
					})
				}
			}
		}()
	}
	for i := range actors {
		select {
		case work <- swOneshot(i):
		case <-killed:
		}
	}
	close(work)
	wg.Wait()
	select {
	case <-killed:
	default:
		t.Fatal("every actor was armed before the kill")
	}
	if time.Now().UnixMilli() >= due {
		t.Fatalf("arming took until the alarms were due (is the machine overloaded?)")
	}
	t.Logf("%d actors armed on %s before the kill (budget 4 databases)", len(acked), victim.Name)

	// The bound is generous: this test checks that nothing is lost, not how
	// late it fires (the failover benchmark measures that).
	out := swCollect(rec, "", acked, time.UnixMilli(due).Add(swScaled.bound()+4*time.Minute))
	t.Logf("%v", out)
	if len(out.lost) > 0 {
		t.Errorf("%d acknowledged alarms lost, such as %v", len(out.lost), out.lost[:min(5, len(out.lost))])
	}
	// Entries may stay only for actors whose arming the kill cut short:
	// node0's database may hold their alarm, which the bucket does not
	// have yet (spec 0009, R4: such an entry is kept for the node's return).
	waitFor(t, "the fired entries to leave the index", func() bool {
		for _, k := range swIndexLeft(t, srv.Bucket) {
			key, err := alarmindex.ParseKey(strings.TrimPrefix(k, ixPrefix))
			if err != nil {
				t.Fatalf("index key %q: %v", k, err)
			}
			id := abi.ActorID{Tenant: key.Actor.Tenant, Class: key.Actor.Class, Name: key.Actor.Name}
			mu.Lock()
			_, ok := acked[id]
			mu.Unlock()
			if ok {
				return false
			}
		}
		return true
	})
	if left := swIndexLeft(t, srv.Bucket); len(left) > 0 {
		t.Logf("%d entries left of actors whose arming the kill cut short", len(left))
	}
}
