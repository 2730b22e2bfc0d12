package hostmod

import (
	"sync"

	"github.com/ncruces/go-sqlite3/vfs"
)

// groupSync makes commits durable in groups (WithDurableCommits): a
// commit in the WAL is on stable storage once its WAL file is synced, and
// one sync covers every commit written to that file before it. A commit
// queues its WAL and waits; one goroutine, the committer, takes the whole
// queue as a round, syncs each file in it once and releases its waiters,
// while commits that come meanwhile queue for the next round. So under
// load many commits, of many actors, share a round, and alone a commit
// costs one sync, as with synchronous=FULL.
type groupSync struct {
	mu      sync.Mutex
	queue   []*syncWaiter
	wake    chan struct{} // the committer waits on it for a queue
	running bool
	closed  bool
	stopped chan struct{}
	rounds  uint64 // rounds run, for the tests
	syncs   uint64 // files synced, for the tests
}

type syncWaiter struct {
	f    vfs.File
	err  error
	done chan struct{}
}

// wait returns once f (a WAL) has been synced after the call began, with
// the sync's error.
func (g *groupSync) wait(f vfs.File) error {
	w := &syncWaiter{f: f, done: make(chan struct{})}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return f.Sync(vfs.SYNC_NORMAL)
	}
	if !g.running {
		g.running = true
		g.wake, g.stopped = make(chan struct{}, 1), make(chan struct{})
		go g.run()
	}
	g.queue = append(g.queue, w)
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default: // the committer is already told
	}
	<-w.done
	return w.err
}

// run is the committer: a round for each queue, until close.
func (g *groupSync) run() {
	defer close(g.stopped)
	for range g.wake {
		g.mu.Lock()
		round := g.queue
		g.queue = nil
		closed := g.closed
		g.mu.Unlock()
		if len(round) > 0 {
			n := syncRound(round)
			g.mu.Lock()
			g.rounds++
			g.syncs += uint64(n)
			g.mu.Unlock()
		}
		if closed {
			return
		}
	}
}

// close stops the committer once the commits queued are synced; a commit
// after it syncs by itself.
func (g *groupSync) close() {
	g.mu.Lock()
	g.closed = true
	running := g.running
	g.mu.Unlock()
	if running {
		g.wake <- struct{}{}
		<-g.stopped
	}
}

// useSyncfs: a round of several files is synced with one syncfs of their
// file system rather than a sync of each (a variable for the benchmark).
// Off: syncfs also flushes whatever else is dirty on the file system, and
// on the development machine, shared with other writers, it was the
// slower of the two (docs/benchmarks.md).
var useSyncfs = false

// syncRound syncs the file of every waiter of a round, each file once and
// all of them at the same time, and releases the waiters; it returns how
// many files it synced. Syncs of many files issued together cost the disk
// little more than one: the file system writes them in one journal commit
// and one flush of the disk's cache, where one after the other each pays
// both. A waiter's goroutine is blocked in wait meanwhile, so nothing else
// uses its file.
func syncRound(round []*syncWaiter) int {
	errs := make(map[vfs.File]error, len(round))
	var files []vfs.File
	for _, w := range round {
		if _, ok := errs[w.f]; !ok {
			errs[w.f] = nil
			files = append(files, w.f)
		}
	}
	switch ok, err := false, error(nil); {
	case len(files) == 1:
		errs[files[0]] = files[0].Sync(vfs.SYNC_NORMAL)
	case useSyncfs && func() bool { ok, err = syncAllOn(files); return ok }():
		for _, f := range files {
			errs[f] = err
		}
	default:
		res := make([]error, len(files))
		var wg sync.WaitGroup
		for i, f := range files {
			wg.Add(1)
			go func() { defer wg.Done(); res[i] = f.Sync(vfs.SYNC_NORMAL) }()
		}
		wg.Wait()
		for i, f := range files {
			errs[f] = res[i]
		}
	}
	for _, w := range round {
		w.err = errs[w.f]
		close(w.done)
	}
	return len(files)
}
