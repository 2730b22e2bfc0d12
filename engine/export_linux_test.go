package engine

import (
	"sync/atomic"
	"time"

	"github.com/wasmkeep/alarms/internal/iohook"
)

// SetIOHook sets the hook told of each write, truncation and sync of an
// actor's file (Linux), for the power-loss test.
func SetIOHook(h func(op, name string, off, n int64)) (restore func()) {
	return iohook.Set(h)
}

// SetJournalFileSize sets the size of each node journal file opened from
// now on (the tests make them small, so that they take turns often).
func SetJournalFileSize(n int64) (restore func()) {
	prev := journalFileSize
	journalFileSize = n
	return func() { journalFileSize = prev }
}

// SetWALCheckpointPages sets the WAL size at which a commit checkpoints,
// for connections made from now on (the idle ones are closed).
func SetWALCheckpointPages(n int) (restore func()) {
	set := func(n int) {
		walCheckpointPages = n
		connPool.mu.Lock()
		idle := connPool.idle
		connPool.idle = nil
		connPool.mu.Unlock()
		for _, pc := range idle {
			pc.close()
		}
	}
	prev := walCheckpointPages
	set(n)
	return func() { set(prev) }
}

// SetJournalSyncfs sets whether journals opened from now on retire a file
// with one syncfs (where the file system is known to honour it) rather
// than a sync of each WAL.
func SetJournalSyncfs(on bool) (restore func()) {
	prev := journalSyncfs
	journalSyncfs = on
	return func() { journalSyncfs = prev }
}

// SetJournalRebootEachStart makes every journal opened from now on start
// as in a new boot of the system, as after a power cut: it replays the
// records of the files not retired rather than trust the files to hold
// them (the power-cut tests take writes away within one boot).
func SetJournalRebootEachStart() (restore func()) {
	prev := journalBoot
	var boots atomic.Uint64
	journalBoot = func() uint64 { return boots.Add(1) }
	return func() { journalBoot = prev }
}

// SetReplicatedDelay sets how long a journal batch that only replicated
// deliveries asked for waits for more (replicatedDelay).
func SetReplicatedDelay(d time.Duration) (restore func()) {
	prev := replicatedDelay
	replicatedDelay = d
	return func() { replicatedDelay = prev }
}

// SetJournalHandoff sets when the journals' syncs hand their processor
// off: "always", "never" or "auto" (the default: while more guest calls
// wait for a slot than commits for the sync).
func SetJournalHandoff(mode string) (restore func()) {
	prev := journalHandoff
	switch mode {
	case "always":
		journalHandoff = handoffAlways
	case "never":
		journalHandoff = handoffNever
	default:
		journalHandoff = handoffAuto
	}
	return func() { journalHandoff = prev }
}
