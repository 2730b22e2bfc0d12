package sweeper

import (
	"testing"

	"github.com/wasmkeep/alarms/abi"
)

// TestShardGolden pins Shard's hash to fixed values. Every node of a
// cluster must hash alike, whatever version it runs: a change here splits
// the overdue entries differently on upgraded and old nodes (some would be
// nobody's until three margins overdue). The other tests compute expected
// owners with Shard itself and cannot see such a change; these values
// were computed once and must never be edited.
func TestShardGolden(t *testing.T) {
	nodes := []string{"node-a", "node-b", "node-c", "node-d"}
	for _, g := range []struct {
		actor       abi.ActorID
		score       uint64 // score("node-a", actor)
		four, three string // Shard over nodes, and over the first three
	}{
		{actor: abi.ActorID{Tenant: "acme", Class: "counter", Name: "c1"}, score: 0xd0e9719edfd987fc, four: "node-a", three: "node-a"},
		{actor: abi.ActorID{Tenant: "acme", Class: "counter", Name: "c2"}, score: 0x1aa7d8d7c98301eb, four: "node-c", three: "node-c"},
		{actor: abi.ActorID{Tenant: "acme", Class: "counter", Name: "c3"}, score: 0x58403176774f3234, four: "node-c", three: "node-c"},
		{actor: abi.ActorID{Tenant: "acme", Class: "room", Name: "a/b c"}, score: 0x195d04f460645d08, four: "node-c", three: "node-c"},
		{actor: abi.ActorID{Tenant: "t", Class: "c", Name: "x"}, score: 0xfadf669f71fe41, four: "node-b", three: "node-b"},
		{actor: abi.ActorID{Tenant: "t", Class: "c", Name: "\x00\xff"}, score: 0xf9566af57770cecb, four: "node-a", three: "node-a"},
		// Length prefixes: moving a byte between fields changes the hash.
		{actor: abi.ActorID{Tenant: "tc", Class: "", Name: "x"}, score: 0xbcdf1b923abfcd8f, four: "node-a", three: "node-a"},
		{actor: abi.ActorID{Tenant: "t", Class: "cx", Name: ""}, score: 0xd62810df4790220d, four: "node-d", three: "node-a"},
	} {
		if got := score("node-a", g.actor); got != g.score {
			t.Errorf("score(node-a, %s) = %#x, want %#x", g.actor, got, g.score)
		}
		if got := Shard(g.actor, nodes); got != g.four {
			t.Errorf("Shard(%s, %v) = %s, want %s", g.actor, nodes, got, g.four)
		}
		if got := Shard(g.actor, nodes[:3]); got != g.three {
			t.Errorf("Shard(%s, %v) = %s, want %s", g.actor, nodes[:3], got, g.three)
		}
	}
}
