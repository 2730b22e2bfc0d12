package node_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// startSingle starts keepnode alone (no bucket) on dataDir with extra
// flags and returns its URL and the process; the test kills it at the end.
func startSingle(t *testing.T, ctx context.Context, bin, wasm, dataDir string, extra ...string) (string, *exec.Cmd) {
	t.Helper()
	args := append([]string{"-data", dataDir, "-listen", "127.0.0.1:0", "-class", swClass + "=" + wasm}, extra...)
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	cmd.Stderr = &lockedBuilder{b: &logs}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "keepnode listening on "); ok {
				u, _, _ := strings.Cut(rest, " ")
				ready <- u
			}
		}
	}()
	select {
	case u := <-ready:
		return u, cmd
	case <-time.After(60 * time.Second):
		t.Fatalf("keepnode not serving after 60 s; its log:\n%s", logs.String())
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	return "", nil
}

type lockedBuilder struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// A keepnode running alone, with a budget of 4 open databases, arms 150
// actors twice each (every event puts another actor to sleep: its database
// closes without a checkpoint, its commits left in its WAL) and is killed
// with SIGKILL in the middle. The database is then the only copy: every
// alarm whose event was acknowledged is what the start-up scan reads from
// the files (engine.ReadAlarm, as the scan does) and what the restarted
// node answers, unless a later event that the kill cut short committed.
func TestASingleNodeKilledWhileEvictingKeepsEveryCommittedAlarm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin, err := clusterproc.Build(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	wasm := filepath.Join(dir, swClass+".wasm")
	if err := os.WriteFile(wasm, testguest.Fixture(t, "oneshot_alarm"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	budget := []string{"-max-open-dbs", "4", "-max-instances", "2"}
	url, cmd := startSingle(t, ctx, bin, wasm, data, budget...)

	const actors, workers, killAfter = 150, 6, 200
	later := time.Now().Add(24 * time.Hour).UnixMilli()
	var mu sync.Mutex
	acked := map[abi.ActorID]int64{} // the last acknowledged alarm
	sent := map[abi.ActorID]int64{}  // an alarm sent, not acknowledged (cut short)
	var n atomic.Int64
	killed := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each worker arms its own actors, twice over, so an actor is
			// never in two requests at once.
			for round := range 2 {
				for i := w; i < actors; i += workers {
					select {
					case <-killed:
						return
					default:
					}
					id := swOneshot(i)
					at := later + int64(round*actors+i)
					mu.Lock()
					sent[id] = at
					mu.Unlock()
					if _, err := clusterproc.ClientOf(url).Exec(ctx, id, binary.LittleEndian.AppendUint64(nil, uint64(at))); err != nil {
						return // the kill cut it short
					}
					mu.Lock()
					acked[id] = at
					delete(sent, id)
					mu.Unlock()
					if n.Add(1) == killAfter {
						once.Do(func() {
							if err := cmd.Process.Kill(); err != nil {
								t.Error(err)
							}
							_ = cmd.Wait()
							close(killed)
						})
					}
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-killed:
	default:
		t.Fatal("every actor was armed before the kill")
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d events acknowledged before the kill, %d actors armed", n.Load(), len(acked))
	ok := func(id abi.ActorID, got int64, set bool) bool {
		if p, cut := sent[id]; cut && set && got == p {
			return true // the event the kill cut short had committed
		}
		return set && got == acked[id]
	}
	// Actors asleep and actors open at the kill alike left their commits
	// in their WAL, which the scan reads with the file.
	withWAL := 0
	for id := range acked {
		if fi, err := os.Stat(node.Path(data, id) + "-wal"); err == nil && fi.Size() > 0 {
			withWAL++
		}
	}
	if withWAL == 0 {
		t.Fatal("no armed actor has commits in its WAL: the kill no longer tests reading them")
	}
	t.Logf("%d of %d armed actors have commits in their WAL", withWAL, len(acked))
	// What the start-up scan reads, from the files the kill left.
	bad := 0
	for id := range acked {
		at, set, err := engine.ReadAlarm(node.Path(data, id))
		if err != nil || !ok(id, at, set) {
			bad++
			if bad <= 5 {
				t.Errorf("%s: after the kill the scan reads alarm %d (set %v, %v); acknowledged %d", id, at, set, err, acked[id])
			}
		}
	}
	// What the restarted node answers.
	url, _ = startSingle(t, ctx, bin, wasm, data, budget...)
	for id := range acked {
		st, err := clusterproc.ClientOf(url).Alarm(ctx, id)
		if err != nil || st.AlarmMs == nil || !ok(id, *st.AlarmMs, true) {
			bad++
			if bad <= 10 {
				t.Errorf("%s: the restarted node answers %+v, %v; acknowledged %d", id, st, err, acked[id])
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d acknowledged alarms not found as committed", bad)
	}
}
