//go:build linux

package node_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/fakeclock"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

var (
	sleepActors   = flag.Int("sleep.actors", 100_000, "BenchmarkSleepingActors: how many actors of the .wat guest")
	sleepCounters = flag.Int("sleep.counters", 10_000, "BenchmarkSleepingCounters: how many Go counter actors")
	coldProfile   = flag.String("cold.cpuprofile", "", "BenchmarkFirings' cold firings: write a CPU profile of the firings alone (not the actors' creation) to this file, suffixed with the guest's name (and with the run's number after the first: -count)")
)

// procStatus reads a field of /proc/self/status in KiB (VmRSS, VmHWM).
func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return -1
}

func openFDs() int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(es)
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

// createActors runs one event on each of ids, 16 at a time.
func createActors(b *testing.B, n *node.Node, ids []abi.ActorID, req func(i int) []byte) time.Duration {
	b.Helper()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ids) || failed.Load() != nil {
					return
				}
				if _, err := n.Exec(context.Background(), ids[i], req(i), node.Exec); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkSleepingActors creates -sleep.actors actors of the .wat guest
// with an alarm an hour ahead on one node with the default residency
// budget, then restarts the node: the time to create them, RSS and open
// file descriptors with them all pending, and the start-up scan.
func BenchmarkSleepingActors(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	classes := oneshot(b)
	ids := make([]abi.ActorID, *sleepActors)
	for i := range ids {
		ids[i] = abi.ActorID{Tenant: "t", Class: "oneshot", Name: fmt.Sprintf("a%07d", i)}
	}
	later := time.Now().Add(time.Hour).UnixMilli()
	for i := 0; i < b.N; i++ {
		n := newNode(b, dir, classes, node.Config{})
		took := createActors(b, n, ids, func(int) []byte { return atReq(later) })
		st, _ := n.Residency()
		b.ReportMetric(float64(len(ids))/took.Seconds(), "created/s")
		b.ReportMetric(mib(procStatus("VmRSS")), "MiB-rss-created")
		b.ReportMetric(float64(openFDs()), "fds-created")
		b.ReportMetric(float64(st.PeakOpenDatabases), "peak-dbs")
		n.Close(ctx)

		start, cpu := time.Now(), cpuTime(b)
		n = newNode(b, dir, classes, node.Config{})
		scan := time.Since(start)
		b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/float64(len(ids)), "cpu-us/scanned")
		if got := n.Timer().Len(); got != len(ids) {
			b.Fatalf("the scan found %d alarms, want %d", got, len(ids))
		}
		b.ReportMetric(scan.Seconds(), "s-scan")
		b.ReportMetric(float64(len(ids))/scan.Seconds(), "scanned/s")
		b.ReportMetric(mib(procStatus("VmRSS")), "MiB-rss-scanned")
		b.ReportMetric(float64(openFDs()), "fds-scanned")
		n.Close(ctx)
	}
	b.ReportMetric(mib(procStatus("VmHWM")), "MiB-peak-rss")
}

// warmFirings runs the node's timer over actors whose alarms stay due (the
// .wat guest sets its alarm again at the time it ran for; the counter
// re-arms 1 ms ahead), all open, for d, and reports firings per second.
func warmFirings(b *testing.B, classes map[string][]byte, class string, actors int, req []byte, d time.Duration) {
	ctx := context.Background()
	var fired atomic.Int64
	var firedMu sync.Mutex
	firedActors := map[abi.ActorID]bool{}
	n := newNode(b, b.TempDir(), classes, node.Config{OnDelivery: func(ev node.DeliveryEvent) {
		if ev.Err == nil && ev.Event.Ran && ev.Event.Err == nil {
			fired.Add(1)
			firedMu.Lock()
			firedActors[ev.Actor] = true
			firedMu.Unlock()
		}
	}})
	defer n.Close(ctx)
	ids := make([]abi.ActorID, actors)
	for i := range ids {
		ids[i] = abi.ActorID{Tenant: "t", Class: class, Name: fmt.Sprintf("w%05d", i)}
	}
	createActors(b, n, ids, func(int) []byte { return req })
	before, _ := n.Residency()
	j0 := n.Journal()
	b.ResetTimer()
	n.Start(ctx)
	start, cpu := time.Now(), cpuTime(b)
	time.Sleep(d)
	got := fired.Load()
	took, used := time.Since(start), cpuTime(b)-cpu
	b.StopTimer()
	st, _ := n.Residency()
	b.ReportMetric(float64(got)/took.Seconds(), "firings/s")
	b.ReportMetric(float64(used.Microseconds())/float64(max(got, 1)), "cpu-us/firing")
	b.ReportMetric(float64(st.Slept-before.Slept), "slept")
	reportJournal(b, j0, n.Journal())
	// Every actor's alarm stays due: all of them should fire, not a few
	// again and again (the timer loop before issue 48 fired 65 of 500).
	firedMu.Lock()
	b.ReportMetric(float64(len(firedActors)), "actors-fired")
	firedMu.Unlock()
}

// minorFaults is how many page faults the process took that read no
// file from disk (a fresh or copied page, or one already in memory).
func minorFaults(tb testing.TB) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return ru.Minflt
}

// sysTime is the part of cpuTime the kernel spent for the process (system
// calls, page faults).
func sysTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Stime.Nano())
}

// coldFirings creates actors whose one alarm is due a second after they
// are created (by a fake clock), restarts the node with a budget of 64
// databases and 64 instances, so every actor is closed, moves the clock
// past the alarms and times until every one has fired: each firing opens a
// sleeping actor's database, starts an instance, runs on-alarm, commits,
// and puts the least recently used actor to sleep. Besides firings/s and
// the CPU per firing: the kernel's part of that CPU (sys-us/firing), the
// collector's cycles during the firings (gcs), and the live heap and
// goroutines before them.
func coldFirings(b *testing.B, classes map[string][]byte, class string, actors int, req []byte) {
	coldFiringsWith(b, classes, class, actors, req, node.Config{MaxOpenDatabases: 64, MaxInstances: 64})
}

// coldFiringsWith is coldFirings with the firing node's budgets from cfg
// (zero: the node's defaults). It also reports the process's peak RSS.
func coldFiringsWith(b *testing.B, classes map[string][]byte, class string, actors int, req []byte, budgets node.Config) {
	ctx := context.Background()
	dir := b.TempDir()
	clock := fakeclock.New(time.UnixMilli(1_800_000_000_000))
	n := newNode(b, dir, classes, node.Config{Clock: clock})
	ids := make([]abi.ActorID, actors)
	for i := range ids {
		ids[i] = abi.ActorID{Tenant: "t", Class: class, Name: fmt.Sprintf("c%05d", i)}
	}
	createActors(b, n, ids, func(int) []byte { return req })
	n.Close(ctx)
	var fired atomic.Int64
	all := make(chan struct{})
	n = newNode(b, dir, classes, node.Config{Clock: clock, MaxOpenDatabases: budgets.MaxOpenDatabases, MaxInstances: budgets.MaxInstances,
		OnDelivery: func(ev node.DeliveryEvent) {
			if ev.Err == nil && ev.Event.Ran && ev.Event.Err == nil && fired.Add(1) == int64(actors) {
				close(all)
			}
		}})
	defer n.Close(ctx)
	clock.Advance(2 * time.Second)
	// What the process holds before the firings (its heap after a
	// collection, its goroutines), to compare runs of one process.
	runtime.GC()
	var live runtime.MemStats
	runtime.ReadMemStats(&live)
	goroutines := runtime.NumGoroutine()
	b.ResetTimer()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	if *coldProfile != "" {
		// One file per run: NAME.CLASS, then NAME.CLASS.2 and on (-count).
		name := *coldProfile + "." + class
		for i := 2; ; i++ {
			if _, err := os.Stat(name); err != nil {
				break
			}
			name = fmt.Sprintf("%s.%s.%d", *coldProfile, class, i)
		}
		f, err := os.Create(name)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
	}
	j0 := n.Journal()
	start, cpu, sys, faults := time.Now(), cpuTime(b), sysTime(b), minorFaults(b)
	n.Start(ctx)
	select {
	case <-all:
	case <-time.After(20 * time.Minute):
		b.Fatalf("%d of %d alarms fired", fired.Load(), actors)
	}
	took, used, kernel, faults := time.Since(start), cpuTime(b)-cpu, sysTime(b)-sys, minorFaults(b)-faults
	reportJournal(b, j0, n.Journal())
	if *coldProfile != "" {
		pprof.StopCPUProfile()
	}
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	st, _ := n.Residency()
	b.ReportMetric(float64(actors)/took.Seconds(), "firings/s")
	b.ReportMetric(float64(used.Microseconds())/float64(actors), "cpu-us/firing")
	b.ReportMetric(float64(kernel.Microseconds())/float64(actors), "sys-us/firing")
	b.ReportMetric(float64(faults)/float64(actors), "faults/firing")
	b.ReportMetric(float64(ms1.NumGC-ms0.NumGC), "gcs")
	b.ReportMetric(float64(live.HeapAlloc)/(1<<20), "MiB-live-before")
	b.ReportMetric(float64(goroutines), "goroutines-before")
	b.ReportMetric(float64(st.PeakOpenDatabases), "peak-dbs")
	b.ReportMetric(float64(st.Slept), "slept")
	b.ReportMetric(mib(procStatus("VmHWM")), "MiB-peak-rss")
}

// BenchmarkFirings: cold firings/s (3,000 .wat actors, 500 counters, closed,
// alarms due at once) and warm (500 and 50 .wat actors, 200 counters, all
// open), for the .wat guest and the Go counter actor.
func BenchmarkFirings(b *testing.B) {
	cnt := counter(b)
	b.Run("wat/cold", func(b *testing.B) {
		coldFirings(b, oneshot(b), "oneshot", 3000, atReq(1_800_000_001_000))
	})
	b.Run("wat/warm", func(b *testing.B) {
		warmFirings(b, map[string][]byte{"bench": testguest.Fixture(b, "bench_alarm")}, "bench", 500,
			atReq(time.Now().Add(-time.Second).UnixMilli()), 3*time.Second)
	})
	// Fewer actors than delivery workers: each can be on a worker.
	b.Run("wat/warm-50", func(b *testing.B) {
		warmFirings(b, map[string][]byte{"bench": testguest.Fixture(b, "bench_alarm")}, "bench", 50,
			atReq(time.Now().Add(-time.Second).UnixMilli()), 3*time.Second)
	})
	b.Run("counter/cold", func(b *testing.B) { coldFirings(b, cnt, "counter", 500, []byte("start 1000")) })
	// A Go guest as a new user runs it: 3,000 actors, the node's default
	// budgets and images (-preinit off: each instance runs its runtime's
	// start, as before Go classes got images by default). Its peak RSS is
	// the process's: run it alone.
	b.Run("go/cold-3000", func(b *testing.B) {
		coldFiringsWith(b, map[string][]byte{"scripted": testguest.Build(b, testguest.Scripted)}, "scripted", 3000,
			[]byte("set 1800000001000"), node.Config{})
	})
	b.Run("counter/warm", func(b *testing.B) { warmFirings(b, cnt, "counter", 200, []byte("start 1"), 3*time.Second) })
}

// BenchmarkSleepingCounters creates -sleep.counters Go counter actors with
// an alarm a minute ahead on one node with the default budget, then moves
// the node's clock past the alarms and waits until every one has fired
// (each firing wakes its actor, runs on-alarm and commits). It reports the
// process's peak RSS over both: a multiple of the instance budget, not of
// the actors.
func BenchmarkSleepingCounters(b *testing.B) {
	ctx := context.Background()
	classes := counter(b)
	ids := make([]abi.ActorID, *sleepCounters)
	for i := range ids {
		ids[i] = abi.ActorID{Tenant: "t", Class: "counter", Name: fmt.Sprintf("c%05d", i)}
	}
	for i := 0; i < b.N; i++ {
		clock := fakeclock.New(time.UnixMilli(1_800_000_000_000))
		var fired atomic.Int64
		all := make(chan struct{})
		n := newNode(b, b.TempDir(), classes, node.Config{Clock: clock,
			OnDelivery: func(ev node.DeliveryEvent) {
				if ev.Err == nil && ev.Event.Ran && ev.Event.Err == nil && fired.Add(1) == int64(len(ids)) {
					close(all)
				}
			}})
		n.Start(ctx)
		took := createActors(b, n, ids, func(int) []byte { return []byte("start 60000") })
		if got := n.Timer().Len(); got != len(ids) {
			b.Fatalf("%d alarms armed, want %d", got, len(ids))
		}
		b.ReportMetric(mib(procStatus("VmHWM")), "MiB-peak-rss-armed")
		start := time.Now()
		clock.Advance(61 * time.Second)
		select {
		case <-all:
		case <-time.After(20 * time.Minute):
			b.Fatalf("%d of %d alarms fired", fired.Load(), len(ids))
		}
		b.ReportMetric(float64(len(ids))/time.Since(start).Seconds(), "fired/s")
		st, _ := n.Residency()
		b.ReportMetric(float64(len(ids))/took.Seconds(), "created/s")
		b.ReportMetric(float64(st.PeakLiveInstances), "peak-instances")
		b.ReportMetric(mib(procStatus("VmRSS")), "MiB-rss")
		// RSS counts a page shared by several mappings once per mapping:
		// an image's pages (shmem) once per instance that maps them.
		b.ReportMetric(mib(procStatus("RssAnon")), "MiB-rss-anon")
		b.ReportMetric(mib(procStatus("RssShmem")), "MiB-rss-shmem")
		// Where the memory is: the Go runtime's (its heap, the actors'
		// databases among it), and the instances' linear memory outside
		// it (their pages of their own, and the images they share).
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "MiB-heap-inuse")
		b.ReportMetric(float64(ms.Sys)/(1<<20), "MiB-go-sys")
		mem := n.Memory()
		b.ReportMetric(float64(mem.InUse)/(1<<20), "MiB-instances-linear")
		b.ReportMetric(float64(mem.Pooled)/(1<<20), "MiB-pooled")
		b.ReportMetric(float64(mem.Images)/(1<<20), "MiB-images")
		n.Close(ctx)
	}
	b.ReportMetric(mib(procStatus("VmHWM")), "MiB-peak-rss")
}

var sleepMillion = flag.Int("sleep.million", 1_000_000, "BenchmarkMillionPending: how many pending alarms")

// BenchmarkMillionPending puts -sleep.million actors with a pending alarm
// in a data directory and measures the node's start-up scan and its RSS
// with them all in the timer. To spare the disk, the actors' files are hard
// links to one database that an event on the node created (a closed actor's
// file and its WAL, which holds the event's commit, as a sleeping actor's
// does; one copy of each per 50,000 links); the scan reads each path as it
// would distinct files, mostly from the page cache, as it would files
// written recently.
func BenchmarkMillionPending(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	classes := oneshot(b)
	src := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "source"}
	n := newNode(b, dir, classes, node.Config{})
	if _, err := n.Exec(ctx, src, atReq(time.Now().Add(time.Hour).UnixMilli()), node.Exec); err != nil {
		b.Fatal(err)
	}
	n.Close(ctx)
	srcPath := node.Path(dir, src)
	sides := []string{""} // the file, and its WAL if it has one
	if fi, err := os.Stat(srcPath + "-wal"); err == nil && fi.Size() > 0 {
		sides = append(sides, "-wal")
	}
	imgs := map[string][]byte{}
	for _, side := range sides {
		img, err := os.ReadFile(srcPath + side)
		if err != nil {
			b.Fatal(err)
		}
		imgs[side] = img
	}
	start := time.Now()
	for i := 1; i < *sleepMillion; i++ {
		id := abi.ActorID{Tenant: "t", Class: "oneshot", Name: fmt.Sprintf("m%07d", i)}
		p := node.Path(dir, id)
		if i%50_000 == 0 { // a file system allows some 65,000 links to a file
			srcPath = p
			for _, side := range sides {
				if err := os.WriteFile(p+side, imgs[side], 0o644); err != nil {
					b.Fatal(err)
				}
			}
			continue
		}
		for _, side := range sides {
			if err := os.Link(srcPath+side, p+side); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Logf("linked %d actor files in %v", *sleepMillion, time.Since(start))
	for i := 0; i < b.N; i++ {
		start, cpu := time.Now(), cpuTime(b)
		n := newNode(b, dir, classes, node.Config{})
		scan := time.Since(start)
		b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/float64(*sleepMillion), "cpu-us/scanned")
		if got := n.Timer().Len(); got != *sleepMillion {
			b.Fatalf("the scan found %d alarms, want %d", got, *sleepMillion)
		}
		b.ReportMetric(scan.Seconds(), "s-scan")
		b.ReportMetric(float64(*sleepMillion)/scan.Seconds(), "scanned/s")
		b.ReportMetric(mib(procStatus("VmRSS")), "MiB-rss-scanned")
		n.Close(ctx)
	}
	b.ReportMetric(mib(procStatus("VmHWM")), "MiB-peak-rss")
}

// reportJournal reports the node journal's commits per sync between two
// readings (-durable).
func reportJournal(b *testing.B, before, after engine.JournalStats) {
	if syncs := after.Syncs - before.Syncs; syncs > 0 {
		b.ReportMetric(float64(after.Waits-before.Waits+after.Deferred-before.Deferred)/float64(syncs), "commits/sync")
	}
}
