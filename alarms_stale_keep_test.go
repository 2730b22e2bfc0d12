package alarms_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
)

// A removal of stale entries for an actor whose bucket had nothing when
// this hold took it, and that this hold has not uploaded (the hold was
// taken again after the actor was deleted elsewhere, say), follows the
// rule for an empty bucket (docs/design.md#bucket-empty): it removes
// nothing and uploads nothing, since an earlier owner's first snapshot may
// still land naming the entry, and it lets the hold go at once, since a
// hold kept until the idle timeout routes client requests to this node,
// whose first would create the actor empty.
func TestARemovalWhileTheBucketNeverHadTheActorKeepsTheEntryAndReleases(t *testing.T) {
	swBuckets(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		n := newStaleNode(t, b)
		a := &fakeActor{p: n.p, j: n.j, id: xid, gen: 3, holdValid: true, uploaded: true, bucketHad: true,
			meta: map[string]string{}, initRecorded: true}
		tA := swStart.Add(time.Second).UnixMilli()
		tB := tA + time.Minute.Milliseconds()
		n.event(t, a, tB)
		// An entry at tA a joining node listed before a first snapshot that
		// has not landed (R4).
		joined := alarmindex.Key{Actor: xid, DueMs: tA, Tag: alarmindex.Tag{Generation: 2, Nonce: "5"}}
		if _, err := b.Put(ctx, joined.String(), nil, bucket.Cond{}); err != nil {
			t.Fatal(err)
		}
		// This node holds the actor again; the bucket had nothing for it.
		a.uploaded, a.bucketHad = false, false
		n.host.advance(time.Second + swMargin + time.Second)
		tk := &taker{a: a}
		n.runTimer(t, tk)
		n.j.take()
		dones := func() int {
			tk.mu.Lock()
			defer tk.mu.Unlock()
			return len(tk.dones)
		}
		n.sweepUntil(t, "the actor taken for the entry at tA", func() bool { return dones() == 1 })

		log := n.j.take()
		if !slices.Contains(log, "RELEASE") {
			t.Errorf("requests and calls %q: want the hold released", log)
		}
		for _, l := range log {
			if strings.HasPrefix(l, "DELETE") || l == "UPLOAD" || l == "RUN-ALARM" || strings.HasPrefix(l, "META") {
				t.Errorf("%s: want nothing removed, written, uploaded or run", l)
			}
		}
		if !exists(t, b, joined) {
			t.Error("the entry was removed while the bucket never had the actor")
		}
		tk.mu.Lock()
		defer tk.mu.Unlock()
		if tk.dones[0] != nil {
			t.Errorf("Done(%v), want no error", tk.dones[0])
		}
	})
}
