package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// runWithoutJournal opens the actors 0.db .. n-1.db under root on an
// engine without the journal, as a build from before it would, runs
// events more events in each (their alarms set to from+1 .. from+events),
// with checkpoints every 16 pages so that the WALs restart, and closes
// everything.
func runWithoutJournal(t *testing.T, root string, n, from, events int) {
	t.Helper()
	ctx := context.Background()
	eng, err := engine.NewEngine(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	cl, err := eng.Compile(ctx, "bench", testguest.Fixture(t, "bench_alarm"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		a, err := eng.Open(ctx, abi.ActorID{Tenant: "j", Class: "bench", Name: fmt.Sprint(i)}, cl, filepath.Join(root, fmt.Sprintf("%d.db", i)))
		if err != nil {
			t.Fatal(err)
		}
		for j := from + 1; j <= from+events; j++ {
			if _, err := a.Request(ctx, timeReq(int64(j))); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A crash leaves the journal holding records; a build without the journal
// (a rollback) then runs on the directory and writes the WALs on; a start
// of a journal build after it must not lay the journal's older frames over
// what that build wrote.
func TestAJournalDoesNotReplayOverWhatAnotherBuildWroteSince(t *testing.T) {
	const actors = 4
	root := t.TempDir()
	eng, _ := journalActors(t, root, actors, 40)
	after := t.TempDir()
	copyTree(t, root, after) // the crash: the journal's records are live
	eng.Close(context.Background())

	runWithoutJournal(t, after, actors, 40, 200)

	startAndCheck(t, after, actors, 240) // what the other build committed
}

// A start in the same boot as the crash replays nothing (the files hold
// every write), but makes each WAL the journal named durable before it
// retires the journal's files: a power cut after that start must not
// lose what only the journal held.
func TestAStartInTheSameBootSyncsTheWALsBeforeRetiringTheJournal(t *testing.T) {
	t.Run("syncfs", func(t *testing.T) { sameBootStart(t) })
	t.Run("files", func(t *testing.T) {
		t.Cleanup(engine.SetJournalSyncfs(false))
		sameBootStart(t)
	})
}

func sameBootStart(t *testing.T) {
	const actors = 4
	root := t.TempDir()
	eng, _ := journalActors(t, root, actors, 30)
	after := t.TempDir()
	copyTree(t, root, after)
	eng.Close(context.Background())

	var mu sync.Mutex
	var walWrites []string
	synced := map[string]bool{}
	syncfs := false
	var late []string // WALs synced only after a journal file's header was written
	headers := 0
	restore := engine.SetIOHook(func(op, name string, off, n int64) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case op == "syncfs":
			syncfs = syncfs || headers == 0
		case strings.HasSuffix(name, "-wal") && op == "write":
			walWrites = append(walWrites, filepath.Base(name))
		case strings.HasSuffix(name, "-wal") && op == "sync":
			synced[filepath.Base(name)] = true
			if headers > 0 {
				late = append(late, filepath.Base(name))
			}
		case strings.Contains(name, "journal-") && op == "write" && off == 0:
			headers++
		}
	})
	re, err := engine.NewEngine(context.Background(), engine.WithJournal(after))
	restore()
	if err != nil {
		t.Fatal(err)
	}
	if err := re.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(walWrites) > 0 {
		t.Errorf("the start wrote into WALs (%v): a replay in the boot the records were written in", walWrites)
	}
	for i := 0; i < actors; i++ {
		w := fmt.Sprintf("%d.db-wal", i)
		if !syncfs && !synced[w] {
			t.Errorf("%s was not made durable before the journal was retired", w)
		}
		at, ok, err := engine.ReadAlarm(filepath.Join(after, fmt.Sprintf("%d.db", i)))
		if err != nil || !ok || at != 30 {
			t.Errorf("actor %d: alarm %d (%v, %v), want 30", i, at, ok, err)
		}
	}
	if len(late) > 0 {
		t.Errorf("WALs synced after a journal file's header was written: %v", late)
	}
}
