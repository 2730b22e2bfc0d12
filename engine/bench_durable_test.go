//go:build linux

package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// BenchmarkDurableCommits measures events per second, and their latency,
// with concurrently busy actors, each running request events that set its
// alarm one after the other: with commits acknowledged once written (off),
// durable with a sync of each WAL per commit (WithDurableCommits alone),
// and durable through the node journal (WithJournal, keepnode's default);
// and in the same run the disk's own limits: probe-fsync, one 4 KiB write
// and fdatasync after the other, and probe-log, the journal's work with
// no database (one log, records of the same size, one fdatasync per
// batch). The databases are on the test's temporary directory: run it on
// a real disk, not a tmpfs, for the figures to mean anything.
//
//	go test ./engine -run '^$' -bench DurableCommits -benchtime 2000x
func BenchmarkDurableCommits(b *testing.B) {
	modes := []struct {
		name string
		opts []engine.Option
	}{
		{"off", nil},
		{"durable", []engine.Option{engine.WithDurableCommits(true)}},
		{"journal", nil}, // WithJournal(the run's directory)
	}
	b.Run("probe-fsync", benchFsyncProbe)
	for _, actors := range []int{1, 8, 64, 1000} {
		for _, m := range modes {
			b.Run(fmt.Sprintf("actors=%d/%s", actors, m.name), func(b *testing.B) {
				benchDurable(b, actors, m.name == "journal", m.opts)
			})
		}
		b.Run(fmt.Sprintf("actors=%d/probe-log", actors), func(b *testing.B) { benchLogProbe(b, actors) })
	}
}

// probeRecord is the size of a commit's record in the journal of the
// benchmark's events (bytes/commit): a WAL frame and the record's header
// and path.
const probeRecord = 4116

// benchFsyncProbe is the disk's own latency for one durable write: a 4 KiB
// write and an fdatasync of a file written whole before, one after the
// other; and the CPU its caller's thread spends on one (cpu-µs/op, Linux:
// the kernel's part of a sync, which a journal's flusher pays once per
// batch).
func benchFsyncProbe(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "probe"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	const slots = 256
	if _, err := f.Write(make([]byte, slots*4096)); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	page := make([]byte, 4096)
	lat := make([]time.Duration, 0, b.N)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	cpu := threadCPU()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		if _, err := f.WriteAt(page, int64(i%slots)*4096); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t))
	}
	if cpu > 0 {
		b.ReportMetric(float64((threadCPU()-cpu).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// benchLogProbe is the disk's own limit for what the journal does, with no
// database and no guest: actors goroutines each append a record of
// probeRecord bytes to one log written whole before, and wait until a
// write and an fdatasync of the log cover it; the first to wait writes
// and syncs what every one appended meanwhile.
func benchLogProbe(b *testing.B, actors int) {
	const size = 64 << 20
	f, err := os.Create(filepath.Join(b.TempDir(), "log"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	z := make([]byte, 1<<20)
	for off := 0; off < size; off += len(z) {
		if _, err := f.Write(z); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	var (
		mu               sync.Mutex
		cond             = sync.NewCond(&mu)
		buf              []byte
		off              int64
		appended, synced int64
		flushing         bool
		syncs            int
	)
	rec := make([]byte, probeRecord)
	commit := func() error {
		mu.Lock()
		defer mu.Unlock()
		if off+int64(len(buf))+probeRecord > size {
			off = 0 // the log wraps: the probe keeps no records
		}
		buf = append(buf, rec...)
		appended++
		at := appended
		for synced < at {
			if flushing {
				cond.Wait()
				continue
			}
			flushing = true
			w, end, o := buf, appended, off
			buf, off = nil, off+int64(len(w))
			mu.Unlock()
			_, err := f.WriteAt(w, o)
			if err == nil {
				err = unix.Fdatasync(int(f.Fd()))
			}
			mu.Lock()
			flushing = false
			syncs++
			cond.Broadcast()
			if err != nil {
				return err
			}
			synced = end
		}
		return nil
	}
	n := runActors(b, actors, func(int, int) error { return commit() })
	if n > 0 && syncs > 0 {
		b.ReportMetric(float64(n)/float64(syncs), "commits/sync")
	}
}

func benchDurable(b *testing.B, actors int, journal bool, opts []engine.Option) {
	ctx := context.Background()
	dir := b.TempDir()
	if journal {
		opts = append(opts, engine.WithJournal(dir))
	}
	eng, err := engine.NewEngine(ctx, append(opts, engine.WithMaxOpenDatabases(actors+8), engine.WithMaxInstances(actors+8))...)
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close(ctx)
	cl, err := eng.Compile(ctx, "bench", testguest.Fixture(b, "bench_alarm"))
	if err != nil {
		b.Fatal(err)
	}
	as := make([]*engine.Actor, actors)
	for i := range as {
		as[i] = openBench(b, eng, cl, dir, fmt.Sprintf("a%04d", i))
		if _, err := as[i].Request(ctx, timeReq(1000)); err != nil {
			b.Fatal(err)
		}
	}
	j0 := eng.Journal()
	runActors(b, actors, func(i, j int) error {
		_, err := as[i].Request(ctx, timeReq(int64(2000+j)))
		return err
	})
	if st := eng.Journal(); st.Syncs > j0.Syncs {
		syncs, waits := st.Syncs-j0.Syncs, st.Waits-j0.Waits
		b.ReportMetric(float64(waits)/float64(syncs), "commits/sync")
		b.ReportMetric(float64(st.Bytes-j0.Bytes)/float64(waits), "bytes/commit")
		b.ReportMetric(float64(st.Retired-j0.Retired), "retired")
		b.ReportMetric(float64(st.Handoffs-j0.Handoffs)/float64(syncs), "handoffs/sync")
	}
}

// runActors runs b.N operations spread over actors goroutines, each
// running op(actor, its operation's number) one after the other, and
// reports their rate and latency; it returns how many ran.
func runActors(b *testing.B, actors int, op func(i, j int) error) int {
	lat := make([][]time.Duration, actors)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < actors; i++ {
		n := b.N / actors
		if i < b.N%actors {
			n++
		}
		wg.Add(1)
		go func(i, n int) {
			defer wg.Done()
			for j := 0; j < n; j++ {
				t := time.Now()
				if err := op(i, j); err != nil {
					b.Error(err)
					return
				}
				lat[i] = append(lat[i], time.Since(t))
			}
		}(i, n)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		return 0
	}
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	return len(all)
}
