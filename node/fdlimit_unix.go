//go:build unix

package node

import (
	"fmt"
	"syscall"
)

// fdsPerDatabase is what one open actor database holds: the database and
// its WAL (its WAL index is in memory: engine.OpenStore).
const fdsPerDatabase = 2

// fdReserve is kept for everything else: listeners, connections to the
// bucket and to clients, the data directory walk.
const fdReserve = 256

// checkFDs refuses a database budget the process's file descriptor limit
// cannot hold, so the limit shows at start-up, not as a failed open deep in
// SQLite under load.
func checkFDs(maxDBs int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return nil // unknown: nothing to check against
	}
	need := uint64(maxDBs)*fdsPerDatabase + fdReserve
	if need > lim.Cur { // an unlimited limit reads as the largest value
		return fmt.Errorf("a budget of %d open databases needs about %d file descriptors (%d each, %d besides); the limit is %d (ulimit -n): raise it or lower the budget to %d",
			maxDBs, need, fdsPerDatabase, fdReserve, lim.Cur, max(0, (int(lim.Cur)-fdReserve)/fdsPerDatabase))
	}
	return nil
}
