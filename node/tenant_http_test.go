package node_test

// GET /v1/tenants/{tenant}/alarms (tenant_http.go), through the Go client:
// the window, the class and the pages, on the alarm index of a cluster
// (the in-memory bucket and versitygw) and on the timer of a node running
// alone.

import (
	"cmp"
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// A tenant's alarms are listed in due order, only the tenant's:
// due_after_ms and due_before_ms keep those due in the window, both bounds
// inclusive; class keeps one class; and following next_cursor from the
// first page to the last gives every alarm the filters keep exactly once,
// each page at most limit long, whatever the limit and the filters.
func TestATenantsAlarmsAreListedByWindowAndClassPageByPage(t *testing.T) {
	t.Parallel()
	guest := testguest.Build(t, testguest.Scripted)
	classes := map[string][]byte{"s": guest, "o": guest}
	run := func(t *testing.T, base string) {
		ctx := context.Background()
		c, err := client.New(base)
		if err != nil {
			t.Fatal(err)
		}
		// An hour ahead: none fires during the test. The window is
		// [lo, hi]; an alarm sits on each bound and one a millisecond
		// outside each.
		lo := time.Now().Add(time.Hour).Truncate(time.Second).UnixMilli()
		hi := lo + 2000
		all := []client.AlarmEntry{
			{Class: "s", Name: "before", DueMs: lo - 1000},
			{Class: "s", Name: "just-before", DueMs: lo - 1},
			{Class: "s", Name: "on-lo", DueMs: lo},
			{Class: "o", Name: "on-lo", DueMs: lo},
			{Class: "s", Name: "inside", DueMs: lo + 1000},
			{Class: "o", Name: "inside", DueMs: lo + 1500},
			{Class: "o", Name: "on-hi", DueMs: hi},
			{Class: "s", Name: "on-hi", DueMs: hi},
			{Class: "s", Name: "just-after", DueMs: hi + 1},
			{Class: "o", Name: "after", DueMs: hi + 1000},
		}
		for _, e := range all {
			request(t, base, abi.ActorID{Tenant: "t", Class: e.Class, Name: e.Name}, "set "+strconv.FormatInt(e.DueMs, 10))
		}
		// Another tenant's, due inside the window, is never t's.
		request(t, base, abi.ActorID{Tenant: "u", Class: "s", Name: "inside"}, "set "+strconv.FormatInt(lo+1000, 10))

		// list pages through o, checking each page's size, and returns
		// every alarm listed.
		list := func(o client.ListOptions) []client.AlarmEntry {
			t.Helper()
			size := o.Limit
			if size == 0 {
				size = node.DefaultListLimit
			}
			var got []client.AlarmEntry
			for page := 1; ; page++ {
				if page > len(all)+2 {
					t.Fatalf("%+v: still a next cursor after %d pages: %s", o, page-1, alarmNames(got))
				}
				p, err := c.Alarms(ctx, "t", o)
				if err != nil {
					t.Fatalf("%+v, page %d: %v", o, page, err)
				}
				if len(p.Alarms) > size {
					t.Fatalf("%+v, page %d: %d alarms, over the limit", o, page, len(p.Alarms))
				}
				got = append(got, p.Alarms...)
				if p.NextCursor == "" {
					return got
				}
				o.Cursor = p.NextCursor
			}
		}
		want := func(o client.ListOptions) []client.AlarmEntry {
			var out []client.AlarmEntry
			for _, e := range all {
				if (o.Class == "" || e.Class == o.Class) && (o.DueAfterMs == 0 || e.DueMs >= o.DueAfterMs) && (o.DueBeforeMs == 0 || e.DueMs <= o.DueBeforeMs) {
					out = append(out, e)
				}
			}
			return byDue(out)
		}
		// Each alarm set is listed (polled, so that a slow upload is not
		// a failure).
		waitFor(t, "every alarm of t to be listed", func() bool { return len(list(client.ListOptions{})) == len(all) })

		for _, o := range []client.ListOptions{
			{},
			{DueAfterMs: lo, DueBeforeMs: hi},
			{DueAfterMs: lo},
			{DueBeforeMs: hi},
			{Class: "o"},
			{Class: "s", DueAfterMs: lo, DueBeforeMs: hi},
		} {
			exp := want(o)
			for _, limit := range []int{0, 1, 2, 3} {
				o.Limit = limit
				got := list(o)
				for i, e := range got {
					if due, err := time.Parse(time.RFC3339Nano, e.Due); e.Tenant != "t" || err != nil || due.UnixMilli() != e.DueMs {
						t.Errorf("%+v: alarm %d is %+v: want tenant t and its due time in RFC 3339", o, i, e)
					}
					if i > 0 && e.DueMs < got[i-1].DueMs {
						t.Errorf("%+v: %s listed after %s: want due order", o, alarmNames(got[i:i+1]), alarmNames(got[i-1:i]))
					}
				}
				// Alarms due at the same time may come in any order.
				if alarmNames(byDue(got)) != alarmNames(exp) {
					t.Errorf("%+v:\n got  %s\n want %s (each once)", o, alarmNames(got), alarmNames(exp))
				}
			}
		}

		// u's own list has its alarm; a cursor of t's list is refused there.
		if u, err := c.Alarms(ctx, "u", client.ListOptions{}); err != nil || len(u.Alarms) != 1 || u.Alarms[0].Tenant != "u" {
			t.Fatalf("u's alarms: %+v, %v; want its one", u, err)
		}
		p, err := c.Alarms(ctx, "t", client.ListOptions{Limit: 1})
		if err != nil || p.NextCursor == "" {
			t.Fatalf("t's first page of one: %+v, %v; want a next cursor", p, err)
		}
		if _, err := c.Alarms(ctx, "u", client.ListOptions{Cursor: p.NextCursor}); !client.IsCode(err, client.CodeBadRequest) {
			t.Errorf("u's list with a cursor of t's: %v; want bad_request", err)
		}
	}
	t.Run("alone", func(t *testing.T) {
		n := newNode(t, t.TempDir(), classes, node.Config{})
		t.Cleanup(func() { n.Close(context.Background()) })
		n.Start(context.Background())
		srv := httptest.NewServer(n.Handler())
		t.Cleanup(srv.Close)
		run(t, srv.URL)
	})
	ixBuckets(t, func(t *testing.T, b bucket.Bucket) {
		run(t, serveHost(t, b, "a", classes, hostConfig{start: true}).URL)
	})
}

// byDue is l sorted by due time, then class and name.
func byDue(l []client.AlarmEntry) []client.AlarmEntry {
	return slices.SortedFunc(slices.Values(l), func(a, b client.AlarmEntry) int {
		return cmp.Or(cmp.Compare(a.DueMs, b.DueMs), strings.Compare(a.Class, b.Class), strings.Compare(a.Name, b.Name))
	})
}

// alarmNames is "class/name@due" of each alarm, comma-separated.
func alarmNames(l []client.AlarmEntry) string {
	var s []string
	for _, e := range l {
		s = append(s, fmt.Sprintf("%s/%s@%d", e.Class, e.Name, e.DueMs))
	}
	return strings.Join(s, ",")
}
