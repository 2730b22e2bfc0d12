package sweeper

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/alarmindex"

	"github.com/wasmkeep/alarms/abi"
)

// tagged formats a tagged index key the way the index writes it.
func tagged(tenant string, dueMs int64, class, name string, gen uint64, nonce string) string {
	return fmt.Sprintf("alarms/%s/%015d/%s.t/%x/%020d-%s", tenant, dueMs, class, name, gen, nonce)
}

// legacy formats an untagged (legacy) index key.
func legacy(tenant string, dueMs int64, class, name string) string {
	return fmt.Sprintf("alarms/%s/%015d/%s/%x", tenant, dueMs, class, name)
}

// pageLister lists from a sorted key slice, recording each page asked for.
type pageLister struct {
	keys  []string // sorted
	pages []Page
}

func (p *pageLister) list(pg Page) []string {
	p.pages = append(p.pages, pg)
	i, _ := slices.BinarySearch(p.keys, pg.StartAfter)
	for i < len(p.keys) && p.keys[i] <= pg.StartAfter {
		i++
	}
	var out []string
	for ; i < len(p.keys) && len(out) < pg.Limit; i++ {
		if strings.HasPrefix(p.keys[i], pg.Prefix) {
			out = append(out, p.keys[i])
		} else if p.keys[i] > pg.Prefix {
			break
		}
	}
	return out
}

// runWalk drives a walk to its end over p.
func runWalk(t *testing.T, p *pageLister, tenant, cursor string, cutoff int64, lim WalkLimits) WalkResult {
	t.Helper()
	w := NewWalk(tenant, cursor, cutoff, lim)
	for i := 0; ; i++ {
		pg, ok := w.Next()
		if !ok {
			break
		}
		if i > 100 {
			t.Fatalf("walk does not end")
		}
		w.Feed(p.list(pg))
	}
	return w.Result()
}

func sortedKeys(keys ...string) []string {
	slices.Sort(keys)
	return keys
}

func TestWalk(t *testing.T) {
	const cutoff = 10_000
	k := func(due int64, name string) string { return tagged("t1", due, "c", name, 1, "0a") }
	other := tagged("t2", 5, "c", "x", 1, "0a") // another tenant, sorts after t1
	tests := []struct {
		name       string
		keys       []string
		cursor     string
		lim        WalkLimits
		wantNames  []string // entry objects
		wantMal    []string
		wantCursor string
		wantEnd    bool
		wantPages  []Page
	}{
		{
			name:      "stops at the first entry not overdue",
			keys:      sortedKeys(k(1, "a"), k(cutoff, "b"), k(cutoff+1, "c"), k(cutoff+2, "d"), other),
			wantNames: []string{k(1, "a"), k(cutoff, "b")},
			wantEnd:   true,
			wantPages: []Page{{"alarms/t1/", "", 1000}},
		},
		{
			name:      "end of listing resets the cursor",
			keys:      sortedKeys(k(1, "a"), k(2, "b"), other),
			cursor:    "",
			wantNames: []string{k(1, "a"), k(2, "b")},
			wantEnd:   true,
			wantPages: []Page{{"alarms/t1/", "", 1000}},
		},
		{
			name:      "resumes after the cursor",
			keys:      sortedKeys(k(1, "a"), k(2, "b"), k(3, "c")),
			cursor:    k(2, "b"),
			wantNames: []string{k(3, "c")},
			wantEnd:   true,
			wantPages: []Page{{"alarms/t1/", k(2, "b"), 1000}},
		},
		{
			name:      "a cursor outside the tenant's prefix starts from the beginning",
			keys:      sortedKeys(k(1, "a"), k(2, "b")),
			cursor:    other,
			wantNames: []string{k(1, "a"), k(2, "b")},
			wantEnd:   true,
			wantPages: []Page{{"alarms/t1/", "", 1000}},
		},
		{
			name:       "the limit leaves a cursor at the last key read",
			keys:       sortedKeys(k(1, "a"), k(2, "b"), k(3, "c"), k(4, "d"), k(5, "e")),
			lim:        WalkLimits{MaxEntries: 3, PageSize: 2},
			wantNames:  []string{k(1, "a"), k(2, "b"), k(3, "c")},
			wantCursor: k(3, "c"),
			wantPages:  []Page{{"alarms/t1/", "", 2}, {"alarms/t1/", k(2, "b"), 1}},
		},
		{
			name: "malformed keys are skipped, counted and read past",
			keys: sortedKeys(k(1, "a"), "alarms/t1/000000000000002/c/zz", "alarms/t1/000000000000002/c.t/61",
				"alarms/t1/00000000000000x/c/61", k(3, "c"), "alarms/t1/junk"),
			wantNames: []string{k(1, "a"), k(3, "c")},
			wantMal: []string{"alarms/t1/000000000000002/c.t/61", "alarms/t1/000000000000002/c/zz",
				"alarms/t1/00000000000000x/c/61", "alarms/t1/junk"},
			wantEnd:   true,
			wantPages: []Page{{"alarms/t1/", "", 1000}},
		},
		{
			name:      "legacy and tagged keys both read",
			keys:      sortedKeys(legacy("t1", 7, "c", "a"), tagged("t1", 7, "c", "a", 3, "ff"), k(cutoff+1, "z")),
			wantNames: sortedKeys(legacy("t1", 7, "c", "a"), tagged("t1", 7, "c", "a", 3, "ff")),
			wantEnd:   true,
			wantPages: []Page{{"alarms/t1/", "", 1000}},
		},
		{
			name:       "a full last page at the limit does not reset",
			keys:       sortedKeys(k(1, "a"), k(2, "b"), k(cutoff+1, "z")),
			lim:        WalkLimits{MaxEntries: 2, PageSize: 2},
			wantNames:  []string{k(1, "a"), k(2, "b")},
			wantCursor: k(2, "b"),
			wantPages:  []Page{{"alarms/t1/", "", 2}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &pageLister{keys: tc.keys}
			res := runWalk(t, p, "t1", tc.cursor, cutoff, tc.lim)
			var got []string
			for _, e := range res.Entries {
				got = append(got, e.Object)
			}
			if !slices.Equal(got, tc.wantNames) {
				t.Errorf("entries %q, want %q", got, tc.wantNames)
			}
			if !slices.Equal(res.Malformed, tc.wantMal) {
				t.Errorf("malformed %q, want %q", res.Malformed, tc.wantMal)
			}
			if res.Read != len(tc.wantNames)+len(tc.wantMal) {
				t.Errorf("read %d, want %d", res.Read, len(tc.wantNames)+len(tc.wantMal))
			}
			if res.Cursor != tc.wantCursor || res.ReachedEnd != tc.wantEnd {
				t.Errorf("cursor %q end %v, want %q %v", res.Cursor, res.ReachedEnd, tc.wantCursor, tc.wantEnd)
			}
			if !slices.Equal(p.pages, tc.wantPages) {
				t.Errorf("pages %v, want %v", p.pages, tc.wantPages)
			}
		})
	}
}

func TestWalkParsesEntries(t *testing.T) {
	keys := sortedKeys(tagged("t1", 42, "room", "lobby/1", 7, "beef"), legacy("t1", 43, "room", "b"))
	res := runWalk(t, &pageLister{keys: keys}, "t1", "", 100, WalkLimits{})
	want := []alarmindex.Key{
		{Actor: abi.ActorID{Tenant: "t1", Class: "room", Name: "lobby/1"}, DueMs: 42,
			Tag: alarmindex.Tag{Generation: 7, Nonce: "beef"}},
		{Actor: abi.ActorID{Tenant: "t1", Class: "room", Name: "b"}, DueMs: 43, Legacy: true},
	}
	if len(res.Entries) != len(want) {
		t.Fatalf("entries %v", res.Entries)
	}
	for i, e := range res.Entries {
		if e.Key != want[i] {
			t.Errorf("entry %d: %+v, want %+v", i, e.Key, want[i])
		}
	}
}

// The walk reads at most 2,048 entries by default, in pages of at most
// 1,000, and the next walk picks up after the last one.
func TestWalkDefaultCaps(t *testing.T) {
	var keys []string
	for i := range 5000 {
		keys = append(keys, tagged("t", int64(i), "c", fmt.Sprint(i), 1, "01"))
	}
	slices.Sort(keys)
	p := &pageLister{keys: keys}
	res := runWalk(t, p, "t", "", 1<<40, WalkLimits{})
	if len(res.Entries) != 2048 || res.Cursor != keys[2047] || res.ReachedEnd {
		t.Fatalf("first walk: %d entries, cursor %q, end %v", len(res.Entries), res.Cursor, res.ReachedEnd)
	}
	if got := []int{p.pages[0].Limit, p.pages[1].Limit, p.pages[2].Limit}; len(p.pages) != 3 || !slices.Equal(got, []int{1000, 1000, 48}) {
		t.Fatalf("pages %v", p.pages)
	}
	seen := len(res.Entries)
	for walks := 1; !res.ReachedEnd; walks++ {
		if walks > 3 {
			t.Fatal("walks do not reach the end")
		}
		res = runWalk(t, p, "t", res.Cursor, 1<<40, WalkLimits{})
		if len(res.Entries) > 0 && res.Entries[0].Object != keys[seen] {
			t.Fatalf("walk %d starts at %q, want %q", walks, res.Entries[0].Object, keys[seen])
		}
		seen += len(res.Entries)
	}
	if seen != len(keys) || res.Cursor != "" {
		t.Fatalf("walks saw %d of %d, cursor %q", seen, len(keys), res.Cursor)
	}
}

// A lister that returns keys at or before StartAfter cannot keep the walk
// going forever.
func TestWalkStopsOnListerGoingBackwards(t *testing.T) {
	k := tagged("t", 1, "c", "a", 1, "01")
	w := NewWalk("t", "", 100, WalkLimits{MaxEntries: 10, PageSize: 1})
	for range 5 {
		pg, ok := w.Next()
		if !ok {
			break
		}
		_ = pg
		w.Feed([]string{k})
	}
	if !w.Done() || len(w.Result().Entries) != 1 {
		t.Fatalf("done %v, entries %d", w.Done(), len(w.Result().Entries))
	}
}

func TestWalkAbort(t *testing.T) {
	k := func(i int) string { return tagged("t", int64(i), "c", fmt.Sprint(i), 1, "01") }
	// Aborted before anything was read: the old cursor stands.
	w := NewWalk("t", k(5), 100, WalkLimits{})
	if _, ok := w.Next(); !ok {
		t.Fatal("no first page")
	}
	w.Abort()
	if r := w.Result(); r.Cursor != k(5) || r.ReachedEnd {
		t.Fatalf("abort before reading: cursor %q end %v", r.Cursor, r.ReachedEnd)
	}
	// Aborted after a page: resume after what was read.
	w = NewWalk("t", "", 100, WalkLimits{PageSize: 2})
	w.Next()
	w.Feed([]string{k(1), k(2)})
	w.Abort()
	if r := w.Result(); r.Cursor != k(2) || len(r.Entries) != 2 {
		t.Fatalf("abort after a page: cursor %q entries %d", r.Cursor, len(r.Entries))
	}
	if _, ok := w.Next(); ok {
		t.Fatal("aborted walk asks for another page")
	}
}
