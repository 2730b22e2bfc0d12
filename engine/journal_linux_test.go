package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// journalActors opens n actors under root on an engine with the node
// journal there, runs events events in each (all actors at once, each
// setting its alarm to the event's number) and returns the engine, open.
func journalActors(t *testing.T, root string, n, events int) (*engine.Engine, []*engine.Actor) {
	t.Helper()
	ctx := context.Background()
	eng, err := engine.NewEngine(ctx, engine.WithJournal(root), engine.WithMaxOpenDatabases(n+8), engine.WithMaxInstances(n+8))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := eng.Compile(ctx, "bench", testguest.Fixture(t, "bench_alarm"))
	if err != nil {
		t.Fatal(err)
	}
	as := make([]*engine.Actor, n)
	for i := range as {
		if as[i], err = eng.Open(ctx, abi.ActorID{Tenant: "j", Class: "bench", Name: fmt.Sprint(i)}, cl, filepath.Join(root, fmt.Sprintf("%d.db", i))); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, a := range as {
		wg.Go(func() {
			for j := 1; j <= events; j++ {
				if _, err := a.Request(ctx, timeReq(int64(j))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return eng, as
}

// copyTree copies the files under src to dst, as a crash of the process
// leaves them (every write made is there, synced or not).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		return os.WriteFile(out, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Durable commits of many actors at once share the journal's syncs: 32
// actors each running 40 events, every commit waits for the journal (one
// wait per event at least) and the journal syncs fewer times than there
// are commits.
func TestDurableCommitsShareTheJournalsSyncs(t *testing.T) {
	const actors, events = 32, 40
	eng, _ := journalActors(t, t.TempDir(), actors, events)
	defer eng.Close(context.Background())
	st := eng.Journal()
	if st.Waits < actors*events {
		t.Fatalf("%d commits waited for the journal, want at least one per event (%d)", st.Waits, actors*events)
	}
	if st.Syncs == 0 || st.Syncs*2 > st.Waits {
		t.Fatalf("%d syncs of the journal for %d commits: want at least 2 commits per sync with %d actors committing at once", st.Syncs, st.Waits, actors)
	}
	t.Logf("%d commits, %d syncs of the journal: %.1f commits per sync", st.Waits, st.Syncs, float64(st.Waits)/float64(st.Syncs))
}

// After a crash that kept the journal but none of the WALs' bytes (a
// power cut losing every write not synced: the WALs are never synced
// before the journal file holding their records is retired, which this
// run does not reach), the next start writes the WALs again from the
// journal: every actor has the alarm of its last event.
func TestAStartWritesTheWALsAgainFromTheJournal(t *testing.T) {
	const actors, events = 8, 60
	t.Cleanup(engine.SetJournalRebootEachStart()) // the WALs' bytes are taken away below, as by a power cut
	root := t.TempDir()
	eng, _ := journalActors(t, root, actors, events)
	if r := eng.Journal().Retired; r != 0 {
		t.Fatalf("a journal file was retired (%d): the WALs were synced, the test cannot take them away", r)
	}
	after := t.TempDir()
	copyTree(t, root, after)
	eng.Close(context.Background())
	// What the WALs hold was never synced in them: without the journal,
	// it would be gone.
	wals, _ := filepath.Glob(filepath.Join(after, "*-wal"))
	for _, w := range wals {
		if err := os.Remove(w); err != nil {
			t.Fatal(err)
		}
	}
	if len(wals) == 0 {
		t.Fatal("no WAL to take away")
	}
	startAndCheck(t, after, actors, events)
}

// startAndCheck starts and closes an engine with the journal of root, as
// a node's start does, then checks that each of the actors 0.db ..
// actors-1.db under root is intact with its alarm at want.
func startAndCheck(t *testing.T, root string, actors int, want int64) {
	t.Helper()
	re, err := engine.NewEngine(context.Background(), engine.WithJournal(root))
	if err != nil {
		t.Fatal(err)
	}
	if err := re.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < actors; i++ {
		p := filepath.Join(root, fmt.Sprintf("%d.db", i))
		checkIntact(t, p)
		at, ok, err := engine.ReadAlarm(p)
		if err != nil || !ok || at != want {
			t.Errorf("actor %d after the journal's start: alarm %d (%v, %v), want %d", i, at, ok, err, want)
		}
	}
}

// A database replaced by a snapshot (or removed, or moved) forgets its
// WAL's records first: a start after a crash does not write the old
// actor's frames into the WAL beside the snapshot, which would lay them
// over it.
func TestAReplayDoesNotBringBackTheWALOfAReplacedDatabase(t *testing.T) {
	ctx := context.Background()
	t.Cleanup(engine.SetJournalRebootEachStart()) // the start below replays, as after a power cut
	root := t.TempDir()
	eng, as := journalActors(t, root, 1, 20)
	// The snapshot: another actor's database, whose alarm is 7.
	other := t.TempDir()
	oe, oas := journalActors(t, other, 1, 7)
	snap, err := oas[0].Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oas[0].Close(ctx)
	oe.Close(ctx)

	if err := as[0].Close(ctx); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "0.db")
	if err := engine.WriteSnapshot(p, snap); err != nil {
		t.Fatal(err)
	}
	after := t.TempDir()
	copyTree(t, root, after) // a crash now: the journal still holds the old WAL's records
	eng.Close(ctx)
	re, err := engine.NewEngine(ctx, engine.WithJournal(after))
	if err != nil {
		t.Fatal(err)
	}
	re.Close(ctx)
	q := filepath.Join(after, "0.db")
	checkIntact(t, q)
	at, ok, err := engine.ReadAlarm(q)
	if err != nil || !ok || at != 7 {
		t.Fatalf("after the replay the replaced database has alarm %d (%v, %v), want the snapshot's 7", at, ok, err)
	}
}

// One journal per root: a second engine for the same root, or one that
// covers it, is refused with an error naming it.
func TestASecondJournalForARootIsRefused(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	eng, err := engine.NewEngine(ctx, engine.WithJournal(root))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	for _, r := range []string{root, filepath.Join(root, "sub"), filepath.Dir(root)} {
		if _, err := engine.NewEngine(ctx, engine.WithJournal(r)); err == nil || !strings.Contains(err.Error(), "already covered") {
			t.Errorf("a second journal for %s: %v, want it refused", r, err)
		}
	}
}

// A journal another process holds is refused, with an error that says so,
// before anything of it is read or written: two nodes on one data
// directory would each write over the other's records.
func TestAJournalInUseByAnotherProcessIsRefused(t *testing.T) {
	root := t.TempDir()
	eng, err := engine.NewEngine(context.Background(), engine.WithJournal(root))
	if err != nil {
		t.Fatal(err)
	}
	eng.Close(context.Background())
	// Another process's lock: an open file description of its own.
	p := filepath.Join(root, ".wasmkeep-journal", "journal-0")
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.NewEngine(context.Background(), engine.WithJournal(root)); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("a second journal on %s while another holds it: %v, want it refused", root, err)
	}
	if after, _ := os.ReadFile(p); !bytes.Equal(before, after) {
		t.Fatal("the refused start wrote the journal")
	}
	unix.Flock(fd, unix.LOCK_UN)
	eng, err = engine.NewEngine(context.Background(), engine.WithJournal(root))
	if err != nil {
		t.Fatalf("once the other lets go: %v", err)
	}
	eng.Close(context.Background())
}
