package node

import (
	"github.com/wasmkeep/alarms/engine"
)

// Memory returns the engine's counters of instance memory: what the live
// instances hold, the peak, the budget for all of them
// (engine.WithMaxTotalMemory in Config.EngineOptions, keepnode
// -max-memory), the idle instances closed to make room and the refusals.
func (n *Node) Memory() engine.MemoryStats { return n.engine.Memory() }
