//go:build !linux

package engine

// journal: other platforms have no node journal; WithJournal syncs each
// WAL (WithDurableCommits).
type journal struct{}

func openJournal(string) (*journal, error) { return nil, nil }
func journalFor(string) *journal           { return nil }
func (*journal) forget(string) error       { return nil }
func (*journal) close() error              { return nil }

// JournalStats counts the node journal's work (none on this platform).
type JournalStats struct{ Syncs, Waits, Deferred, Retired, Bytes, Handoffs int64 }

func (*journal) stats() JournalStats { return JournalStats{} }
func (*journal) syncing() int        { return 0 }
