package engine_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/lazyfs"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// TestAPowerCutOnFUSELosesNoAcknowledgedEvent is the power-loss test again
// with the disk modelled below the project's code, by a FUSE file system
// (internal/lazyfs, after Jepsen's LazyFS) rather than by the VFS's own
// hook: a cut keeps of each file only what reached it before its last
// fsync or fdatasync, and of each directory's names only those before its
// last sync, whatever the VFS believes it synced. With WithDurableCommits
// every event acknowledged before a cut is in the databases the cut
// leaves, and every database is whole; without, some are lost (the cut
// must drop unsynced data, or it proves nothing). The 16 actors run events
// one after the other, each setting the alarm to the event's number, on
// one engine for the whole run: the cuts come at random instants while the
// WALs fill, are checkpointed and start again, several times over.
//
// Four modes: "journal" (WithJournal, keepnode's default: the WALs'
// writes go to the node journal too, and a start after the cut writes
// them again into the WALs), its sync keeping its processor;
// "journal-handoff", the same with every sync of the journal handing its
// processor off (as it does while guest calls wait for a slot);
// "durable" (WithDurableCommits alone: each commit syncs its WAL) and
// "off".
func TestAPowerCutOnFUSELosesNoAcknowledgedEvent(t *testing.T) {
	for _, mode := range []string{"journal", "journal-handoff", "durable", "off"} {
		durable := mode != "off"
		t.Run(mode, func(t *testing.T) {
			r := fusePowerCuts(t, mode, 24)
			t.Logf("%d cuts over %v, %d events acknowledged; a cut undid on average %.0f writes and %.1f name changes; %d acknowledged events lost (%d of the cuts lost some)",
				r.cuts, r.took.Round(time.Millisecond), r.events, float64(r.undoneWrites)/float64(r.cuts), float64(r.undoneNames)/float64(r.cuts), r.lost, r.lossyCuts)
			if durable && r.lost > 0 {
				t.Fatalf("%d acknowledged events lost across the cuts", r.lost)
			}
			if !durable && r.lost == 0 {
				t.Fatal("without durable commits no cut lost an acknowledged event: the cut does not undo what is not synced")
			}
		})
	}
}

type fuseCutsResult struct {
	cuts, events, lost, lossyCuts int
	undoneWrites, undoneNames     int
	took                          time.Duration
}

// fusePowerCuts runs the actors on a lazyfs mount and cuts the power cuts
// times, checking each cut's databases.
func fusePowerCuts(t *testing.T, mode string, cuts int) (r fuseCutsResult) {
	const actors = 16
	ctx := context.Background()
	durable := mode != "off"
	mnt, lfs := lazyfs.Mount(t, t.TempDir())
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))

	opts := []engine.Option{engine.WithDurableCommits(durable)}
	journaled := strings.HasPrefix(mode, "journal")
	if journaled {
		handoff := "never"
		if mode == "journal-handoff" {
			handoff = "always"
		}
		t.Cleanup(engine.SetJournalHandoff(handoff))
		// Files small enough to take turns, and be retired, many times
		// (a commit's record is about 100 bytes packed).
		t.Cleanup(engine.SetJournalFileSize(64 << 10))
		// Each start after a cut is as after a reboot, and replays.
		t.Cleanup(engine.SetJournalRebootEachStart())
		opts = append(opts, engine.WithJournal(mnt))
	}
	eng, err := engine.NewEngine(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	cl, err := eng.Compile(ctx, "bench", testguest.Fixture(t, "bench_alarm"))
	if err != nil {
		t.Fatal(err)
	}
	acked := make([]int64, actors)
	var mu sync.Mutex
	// The workers pause while a cut is checked (the cut itself is taken
	// while they run), so that the check does not slow the run down.
	var gate sync.RWMutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var opened []*engine.Actor
	stopWorkers := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	defer func() {
		// Every file on the mount closed before it is unmounted.
		stopWorkers()
		for _, a := range opened {
			if err := a.Close(ctx); err != nil {
				t.Error(err)
			}
		}
	}()
	for i := 0; i < actors; i++ {
		a, err := eng.Open(ctx, abi.ActorID{Tenant: "p", Class: "bench", Name: fmt.Sprint(i)}, cl, filepath.Join(mnt, fmt.Sprintf("%d.db", i)))
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
				gate.RLock()
				_, err := a.Request(ctx, timeReq(j))
				gate.RUnlock()
				if err != nil {
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

	start := time.Now()
	for c := 0; c < cuts; c++ {
		time.Sleep(time.Duration(20+rng.IntN(300)) * time.Millisecond)
		mu.Lock()
		before := append([]int64(nil), acked...) // acknowledged before the cut
		mu.Unlock()
		dst := t.TempDir()
		cs := lfs.Cut(dst)
		r.undoneWrites += cs.UndoneWrites
		r.undoneNames += cs.UndoneNames
		lost := func() (lost int) {
			gate.Lock()
			defer gate.Unlock()
			if journaled {
				replay(t, c, dst) // the next start writes the journal's records again
			}
			return lostInCut(t, fmt.Sprintf("cut %d", c), dst, before, durable)
		}()
		if err := os.RemoveAll(dst); err != nil {
			t.Fatal(err)
		}
		if lost > 0 {
			r.lossyCuts++
		}
		r.lost += lost
		r.cuts++
	}
	r.took = time.Since(start)
	stopWorkers()
	mu.Lock()
	for _, n := range acked {
		r.events += int(n)
	}
	mu.Unlock()

	// The cuts must have come while the WALs were checkpointed and
	// started again, several times: the checkpoint sequence number in a
	// WAL's header counts its restarts.
	minCkpt := uint32(1<<32 - 1)
	for i := 0; i < actors; i++ {
		f, err := os.Open(filepath.Join(mnt, fmt.Sprintf("%d.db-wal", i)))
		if err != nil {
			t.Fatal(err)
		}
		hdr := make([]byte, 16)
		_, err = f.ReadAt(hdr, 0)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		n := binary.BigEndian.Uint32(hdr[12:])
		minCkpt = min(minCkpt, n)
		if n < 3 {
			t.Errorf("actor %d: its WAL started again %d times: the cuts crossed fewer than 3 checkpoints (of %d pages)", i, n, engine.WALCheckpointPages)
		}
	}
	st := lfs.Stats()
	t.Logf("each WAL started again at least %d times; through the mount: %d writes, %d truncations, %d file syncs, %d directory syncs, %d name changes",
		minCkpt, st.Writes, st.Truncates, st.Syncs, st.DirSyncs, st.NameChanges)
	return r
}
