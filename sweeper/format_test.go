package sweeper

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// newerKey is an index entry of format version v (its class folder
// <class>.v<v>), with whatever a later format puts after it.
func newerKey(tenant string, dueMs int64, class string, v int) string {
	return fmt.Sprintf("alarms/%s/%015d/%s.v%d/later-format-%d", tenant, dueMs, class, v, dueMs)
}

// An overdue entry of a newer format is skipped, never offered (nothing
// of it past its due time is read), and counted and logged with its
// version; the sweep delivers the other entries as before. One not yet
// due ends the walk by its due time, as any entry does.
func TestSweepSkipsEntriesOfANewerFormat(t *testing.T) {
	h := newHarness(t, nil)
	good := keysFrom("t", "x", ago(time.Hour), 2)
	newer := []string{newerKey("t", ago(2*time.Hour), "c", 2), newerKey("t", ago(time.Hour)+5, "c", 3)}
	h.bucket.put(good...)
	h.bucket.put(newer...)
	if err := h.loop.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := h.sink.take()
	if st := h.loop.Stats(); st.NewerFormat != 2 || st.Malformed != 0 || st.Entries != 2 || st.Delivered != 2 || len(got) != 2 {
		t.Fatalf("stats %+v, offered %+v; want the 2 entries of format 1 offered and the 2 newer skipped", st, got)
	}
	for _, d := range got {
		if !strings.HasPrefix(d.Actor.Name, "x") || d.Actor.Class != "c" {
			t.Fatalf("offered %+v, not one of the entries of format 1", d)
		}
	}
	if logs := h.logs.String(); !strings.Contains(logs, "format newer than this build reads") || !strings.Contains(logs, "format=2") || !strings.Contains(logs, newer[0]) {
		t.Fatalf("the skipped entries are not logged with their version and key: %s", logs)
	}
}

func TestWalkStopsAtANewerEntryNotYetDue(t *testing.T) {
	const cutoff = 10_000
	p := &pageLister{keys: sortedKeys(
		newerKey("t1", 50, "c", 2),
		tagged("t1", 60, "c", "a", 1, "0a"),
		newerKey("t1", 20_000, "c", 2),
		tagged("t1", 30_000, "c", "b", 1, "0a"),
	)}
	res := runWalk(t, p, "t1", "", cutoff, WalkLimits{})
	if len(res.Newer) != 1 || res.Newer[0].Version != 2 || res.Newer[0].Object != newerKey("t1", 50, "c", 2) ||
		len(res.Entries) != 1 || res.Entries[0].Key.Actor.Name != "a" || len(res.Malformed) != 0 {
		t.Fatalf("walk: %+v, want one newer entry skipped and one entry", res)
	}
	if !res.ReachedEnd || res.NextDueMs != 20_000 || res.Read != 2 {
		t.Fatalf("walk: %+v, want it ended by the newer entry due at 20000", res)
	}
}
