package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ncruces/go-sqlite3"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// disk keeps, for each file of the actors' databases, what a power cut
// would undo: every write and truncation since the file's last sync, with
// the bytes and the size they replaced (the "lose what is not synced"
// model of SQLite's crash tests and of LazyFS).
type disk struct {
	mu   sync.Mutex
	t    *testing.T
	undo map[string][]undoRec
	// dbSyncs counts the syncs of database files (not WALs, not the
	// journal's): each is a checkpoint's.
	dbSyncs int
	// cutAfter, while above 0, counts writes under cutSrc down (those
	// cutOnly, if set, keeps): the write that brings it to 0 is preceded
	// by a cut of cutSrc to cutDst (a cut in the middle of a replay, or of
	// a checkpoint), and then by onCut.
	cutAfter       int
	cutSrc, cutDst string
	cutOnly        func(name string) bool
	onCut          func()
}

type undoRec struct {
	off  int64
	old  []byte // the bytes overwritten at off
	size int64  // the file's size before
}

func newDisk(t *testing.T) *disk {
	d := &disk{t: t, undo: map[string][]undoRec{}}
	t.Cleanup(engine.SetIOHook(d.hook))
	return d
}

func (d *disk) hook(op, name string, off, n int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cutAfter > 0 && op != "sync" && strings.HasPrefix(name, d.cutSrc+string(filepath.Separator)) && (d.cutOnly == nil || d.cutOnly(name)) {
		if d.cutAfter--; d.cutAfter == 0 {
			d.cutLocked(d.cutSrc, d.cutDst)
			if d.onCut != nil {
				d.onCut()
			}
		}
	}
	switch op {
	case "syncfs":
		// Everything under the directory is synced (the test's files
		// are all on one file system).
		for f := range d.undo {
			if strings.HasPrefix(f, name+string(filepath.Separator)) {
				delete(d.undo, f)
			}
		}
		return
	case "sync":
		if strings.HasSuffix(name, ".db") {
			d.dbSyncs++
		}
		delete(d.undo, name)
		return
	case "truncate":
		n = 0 // only the size matters, and the bytes cut off
	}
	b, err := os.ReadFile(name)
	if err != nil && !os.IsNotExist(err) {
		d.t.Errorf("read %s before a write: %v", name, err)
		return
	}
	r := undoRec{off: off, size: int64(len(b))}
	if op == "truncate" && off < int64(len(b)) {
		r.old = append([]byte(nil), b[off:]...)
	} else if off < int64(len(b)) {
		r.old = append([]byte(nil), b[off:min(int64(len(b)), off+n)]...)
	}
	d.undo[name] = append(d.undo[name], r)
}

// cut copies the directory src to dst as a power cut at this instant
// would leave it: every write not yet synced undone. Writes wait
// meanwhile, so the copy is of one instant.
func (d *disk) cut(src, dst string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cutLocked(src, dst)
}

func (d *disk) cutLocked(src, dst string) {
	err := filepath.WalkDir(src, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		recs := d.undo[p]
		for i := len(recs) - 1; i >= 0; i-- {
			r := recs[i]
			if int64(len(b)) < r.off+int64(len(r.old)) {
				b = append(b, make([]byte, r.off+int64(len(r.old))-int64(len(b)))...)
			}
			copy(b[r.off:], r.old)
			if r.size < int64(len(b)) {
				b = b[:r.size]
			} else if r.size > int64(len(b)) {
				b = append(b, make([]byte, r.size-int64(len(b)))...)
			}
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		return os.WriteFile(out, b, 0o644)
	})
	if err != nil {
		d.t.Fatal(err)
	}
}

// A power cut while actors run events: with WithDurableCommits every
// acknowledged event, its writes and its alarm, is in the databases after
// it, and the start-up scan finds the alarm; no database is corrupt. Each
// of 16 actors runs events one after the other, each setting the alarm to
// the event's number; the cut comes at a random instant, many times.
func TestAPowerCutLosesNoAcknowledgedEvent(t *testing.T) {
	// journal: the node journal, its files retired with one syncfs (the
	// test's directory is on ext4, XFS or btrfs); journal-files: retired
	// with a sync of each WAL, as on other file systems.
	for _, mode := range []string{"journal", "journal-files", "durable", "off"} {
		durable := mode != "off"
		t.Run(mode, func(t *testing.T) {
			lost := powerCuts(t, mode, 8)
			if durable && lost > 0 {
				t.Fatalf("%d acknowledged events lost across the cuts", lost)
			}
			if !durable {
				// What the README says may be lost: the last commits.
				// The test's model must see that, or it cannot see a
				// durable commit's loss either.
				if lost == 0 {
					t.Fatal("without durable commits no cut lost an acknowledged event: the cut does not undo what is not synced")
				}
				t.Logf("without durable commits, %d acknowledged events were lost across the cuts (the database stayed consistent)", lost)
			}
		})
	}
}

// powerCuts runs cuts power cuts and returns how many acknowledged events
// they lost in all.
func powerCuts(t *testing.T, mode string, cuts int) (lost int) {
	var retired int64
	replayCuts, checkpointCuts := 0, 0
	const actors = 16
	ctx := context.Background()
	d := newDisk(t)
	durable := mode != "off"
	journal := strings.HasPrefix(mode, "journal")
	if mode == "journal-files" {
		t.Cleanup(engine.SetJournalSyncfs(false))
	}
	if journal {
		// Small journal files, so that they take turns (and are retired)
		// many times in a run: a commit's record is about 100 bytes
		// packed, a few hundred to a file.
		t.Cleanup(engine.SetJournalFileSize(48 << 10))
		// Checkpoints every 16 events of an actor rather than 128, so
		// that cuts come during and after many, and after WALs start anew.
		t.Cleanup(engine.SetWALCheckpointPages(16))
		// A cut takes away writes the files held: each start is as
		// after a reboot, and replays.
		t.Cleanup(engine.SetJournalRebootEachStart())
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for c := 0; c < cuts; c++ {
		dir := t.TempDir()
		opts := []engine.Option{engine.WithDurableCommits(durable)}
		if journal {
			opts = append(opts, engine.WithJournal(dir))
		}
		eng, err := engine.NewEngine(ctx, opts...)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := eng.Compile(ctx, "bench", testguest.Fixture(t, "bench_alarm"))
		if err != nil {
			t.Fatal(err)
		}
		acked := make([]int64, actors)
		var mu sync.Mutex
		stop := make(chan struct{})
		var wg sync.WaitGroup
		// A t.Fatal below ends the test with the load still running: it
		// must stop before the disk's hook goes (the cleanups run last
		// registered first), or its writes reach a finished test's hook.
		stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
		var opened []*engine.Actor
		// The engine's Close leaves its actors' databases open: each is
		// closed first (the files of every cut stayed open before).
		closeEngine := sync.OnceFunc(func() {
			for _, a := range opened {
				a.Close(ctx)
			}
			eng.Close(ctx)
		})
		t.Cleanup(func() { stopLoad(); closeEngine() })
		for i := 0; i < actors; i++ {
			a, err := eng.Open(ctx, abi.ActorID{Tenant: "p", Class: "bench", Name: fmt.Sprint(i)}, cl, filepath.Join(dir, fmt.Sprintf("%d.db", i)))
			if err != nil {
				t.Fatal(err)
			}
			opened = append(opened, a)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := int64(1); ; j++ {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := a.Request(ctx, timeReq(j)); err != nil {
						if !strings.Contains(err.Error(), "closed") {
							t.Error(err)
						}
						return
					}
					mu.Lock()
					acked[i] = j
					mu.Unlock()
				}
			}()
		}
		after := t.TempDir()
		var before []int64 // acknowledged before the cut
		snapshot := func() {
			mu.Lock()
			before = append([]int64(nil), acked...)
			mu.Unlock()
		}
		if journal && c%2 == 1 {
			// In the middle of a checkpoint: at one of its writes into a
			// database file (only a checkpoint writes there).
			cut := make(chan struct{})
			d.mu.Lock()
			d.cutAfter, d.cutSrc, d.cutDst = 1+rng.IntN(16), dir, after
			d.cutOnly = func(name string) bool { return strings.HasSuffix(name, ".db") }
			d.onCut = func() { snapshot(); close(cut) }
			d.mu.Unlock()
			select {
			case <-cut:
				checkpointCuts++
			case <-time.After(10 * time.Second):
				t.Fatalf("cut %d: no checkpoint wrote into a database in 10 s", c)
			}
			d.mu.Lock()
			d.cutAfter, d.cutOnly, d.onCut = 0, nil, nil
			d.mu.Unlock()
		} else {
			wait := time.Duration(20+rng.IntN(200)) * time.Millisecond
			if journal {
				wait = time.Duration(100+rng.IntN(500)) * time.Millisecond
			}
			time.Sleep(wait)
			snapshot()
			d.cut(dir, after)
		}
		stopLoad()
		retired += eng.Journal().Retired
		closeEngine()
		dirs := []string{after}
		if journal {
			// The next start replays the journal into the WALs; a second
			// cut comes in the middle of that replay (at one of its first
			// writes, or as it marks the journal's files retired), and the
			// start after it replays again.
			again := t.TempDir()
			d.mu.Lock()
			d.cutAfter, d.cutSrc, d.cutDst = 1+rng.IntN(24), after, again
			if c%2 == 0 {
				// Once the WALs are written again, as the journal's files
				// are marked retired: before the first, the second, or the
				// new generation's header.
				d.cutAfter = 1 + (c/2)%3
				d.cutOnly = func(name string) bool { return strings.Contains(name, ".wasmkeep-journal") }
			}
			d.mu.Unlock()
			replay(t, c, after)
			d.mu.Lock()
			midReplay := d.cutAfter == 0
			d.cutAfter, d.cutOnly = 0, nil
			d.mu.Unlock()
			if midReplay {
				replay(t, c, again)
				dirs = append(dirs, again)
				replayCuts++
			}
		}

		for _, dir := range dirs {
			lost += lostInCut(t, fmt.Sprintf("cut %d (%s)", c, filepath.Base(dir)), dir, before, durable)
		}
	}
	if journal {
		d.mu.Lock()
		checkpoints := d.dbSyncs
		d.mu.Unlock()
		t.Logf("%d cuts (%d of them in the middle of a checkpoint), %d also in the middle of the replay after it; %d journal files retired, %d checkpoints", cuts, checkpointCuts, replayCuts, retired, checkpoints)
		switch {
		case retired == 0:
			t.Fatal("no journal file was retired in any run: the cuts never came after one")
		case replayCuts == 0:
			t.Fatal("no cut came in the middle of a replay")
		case checkpoints < cuts*actors/2:
			t.Fatalf("%d checkpoints in %d runs of %d actors: the cuts barely come after one", checkpoints, cuts, actors)
		}
	}
	return lost
}

// lostInCut checks the databases of the actors (0.db, 1.db, ...) in dir,
// what a cut left: each must be whole, and holds the alarm of the last
// event acknowledged before the cut (before[i]) or a later one, or counts
// as lost (an error with durable commits). A database the cut left no name
// of holds nothing.
func lostInCut(t *testing.T, cut, dir string, before []int64, durable bool) (lost int) {
	t.Helper()
	for i := range before {
		p := filepath.Join(dir, fmt.Sprintf("%d.db", i))
		var at int64
		var ok bool
		if _, err := os.Stat(p); err == nil {
			checkIntact(t, p)
			if at, ok, err = engine.ReadAlarm(p); err != nil {
				t.Fatalf("%s, actor %d: the scan's read: %v", cut, i, err)
			}
		} else if !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if before[i] > 0 && (!ok || at < before[i]) {
			lost++
			if durable {
				t.Errorf("%s, actor %d: event %d was acknowledged before the cut, the database after it has alarm %d (%v)", cut, i, before[i], at, ok)
			}
		}
	}
	return lost
}

// replay starts an engine with the journal of dir, which writes the
// journal's records again into the WALs, and closes it.
func replay(t *testing.T, cut int, dir string) {
	t.Helper()
	re, err := engine.NewEngine(context.Background(), engine.WithJournal(dir))
	if err != nil {
		t.Fatalf("cut %d: start after the cut: %v", cut, err)
	}
	if err := re.Close(context.Background()); err != nil {
		t.Fatalf("cut %d: close after the replay: %v", cut, err)
	}
}

// checkIntact opens the database at path as SQLite would after the cut
// (recovering its WAL) and fails unless quick_check finds it whole.
func checkIntact(t *testing.T, path string) {
	t.Helper()
	conn, err := sqlite3.Open(path)
	if err != nil {
		t.Fatalf("%s after the cut: %v", path, err)
	}
	defer conn.Close()
	st, _, err := conn.Prepare(`PRAGMA quick_check`)
	if err != nil {
		t.Fatalf("%s after the cut: %v", path, err)
	}
	defer st.Close()
	if !st.Step() || st.ColumnText(0) != "ok" {
		t.Fatalf("%s after the cut: quick_check says %q (%v)", path, st.ColumnText(0), st.Err())
	}
}
