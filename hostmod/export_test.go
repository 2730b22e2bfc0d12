package hostmod

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
	WALCheckpointPages = walCheckpointPages
	WALSizeLimit       = walSizeLimit
)

// WithSynchronousFull opens each actor's database with synchronous=FULL
// (a sync of the WAL at every commit), the baseline the benchmark of
// durable commits compares with.
func WithSynchronousFull() Option { return func(o *config) { o.syncFull = true } }

// CommitRounds returns the group committer's rounds and files synced.
func (e *Engine) CommitRounds() (rounds, syncs uint64) {
	e.commits.mu.Lock()
	defer e.commits.mu.Unlock()
	return e.commits.rounds, e.commits.syncs
}

// SetSyncfs chooses how a round of group commit syncs several WALs: one
// syncfs (true, the default) or a sync of each at the same time.
func SetSyncfs(on bool) (restore func()) {
	prev := useSyncfs
	useSyncfs = on
	return func() { useSyncfs = prev }
}

// SetIOHook sets the hook told of each write, truncation and sync of an
// actor's file (Linux), for the power-loss test.
func SetIOHook(h func(op, name string, off, n int64)) (restore func()) {
	prev := ioHook
	ioHook = h
	return func() { ioHook = prev }
}
