package sim

import (
	"slices"
	"testing"

	"github.com/wasmkeep/alarms/alarmindex"

	"github.com/wasmkeep/alarms/abi"
)

// Snapshot keys sort as (generation, sequence): the latest state is the
// greatest key, which is what makes a late upload the state only when
// nothing newer exists.
func TestSnapshotKeysSortByGenerationThenSequence(t *testing.T) {
	a := abi.ActorID{Tenant: tenant, Class: class, Name: "x/\xff"}
	order := [][2]uint64{{1, 1}, {1, 2}, {1, 10}, {2, 1}, {9, 99}, {10, 1}, {10, 2}}
	var keys []string
	for _, gs := range order {
		keys = append(keys, stateKey(a, gs[0], gs[1]))
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	if !slices.Equal(keys, sorted) {
		t.Errorf("snapshot keys do not sort by (generation, sequence):\n%v", sorted)
	}
	for i, k := range keys {
		ak, gen, seq, ok := parseStateKey(k)
		if !ok || ak != a.String() || gen != order[i][0] || seq != order[i][1] {
			t.Errorf("parseStateKey(%q) = %q, %d, %d, %t", k, ak, gen, seq, ok)
		}
	}
	if _, _, _, ok := parseStateKey("alarms/acme/001/counter.t/78/1-a"); ok {
		t.Error("an index key parsed as a snapshot key")
	}
}

func TestDatabaseRoundTrip(t *testing.T) {
	a := abi.ActorID{Tenant: tenant, Class: class, Name: "a"}
	at := int64(epochMs + 5000)
	for _, d := range []db{
		{},
		{init: true, writes: 3},
		{init: true, alarm: &at, rec: &alarmindex.Key{Actor: a, DueMs: at, Legacy: true}, failures: 2},
		{init: true, alarm: &at, rec: &alarmindex.Key{Actor: a, DueMs: at, Tag: alarmindex.Tag{Generation: 7, Nonce: "00ff"}}, fence: 7},
	} {
		got, err := decode(a, encode(d))
		if err != nil {
			t.Fatalf("decode(encode(%v)): %v", d, err)
		}
		if string(encode(got)) != string(encode(d)) {
			t.Errorf("round trip: got %q, want %q", encode(got), encode(d))
		}
	}
	if _, err := decode(a, []byte("alarm_indexed=not a key\n")); err == nil {
		t.Error("an unreadable alarm_indexed decoded")
	}
}
