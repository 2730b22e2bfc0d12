package engine

import (
	"context"
	"io"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms/abi"
)

// InstantiateClass makes a fresh instance of a class, as an event does, for
// the benchmarks that time it alone.
func (e *Engine) InstantiateClass(ctx context.Context, id abi.ActorID, c *Class) (api.Module, error) {
	m, _, err := e.instantiate(ctx, id, c, io.Discard, io.Discard)
	return m, err
}

// StateReads is how many times the actor read its committed state from
// the database.
func (a *Actor) StateReads() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stateReads
}

// The store's WAL settings, for a bare SQLite connection run as the store
// runs its databases.
const (
	WALCheckpointPages = defaultWALCheckpointPages
	WALSizeLimit       = walSizeLimit
)
