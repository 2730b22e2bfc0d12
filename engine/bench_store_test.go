package engine_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
)

// BenchmarkStoreWakeSleep is what a cold firing does to an actor's
// database, the guest left out: open it, read the alarm and its failure
// count, commit the next alarm, close it. 64 databases take turns, as
// sleeping actors do. cpu-us/op is the CPU time of the benchmark's thread
// (Linux only), steadier than the wall clock on a shared machine.
//
//	go test ./engine -run '^$' -bench StoreWakeSleep -benchtime 3000x
func BenchmarkStoreWakeSleep(b *testing.B) {
	dir := b.TempDir()
	paths := make([]string, 64)
	for i := range paths {
		paths[i] = filepath.Join(dir, fmt.Sprintf("a%02d.db", i))
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	cpu := threadCPU()
	for i := 0; i < b.N; i++ {
		st, err := engine.OpenStore(paths[i%len(paths)])
		if err != nil {
			b.Fatal(err)
		}
		if err := st.Begin(); err != nil {
			b.Fatal(err)
		}
		if _, _, err := st.Alarm(); err != nil {
			b.Fatal(err)
		}
		if _, err := st.Failures(); err != nil {
			b.Fatal(err)
		}
		if err := st.SetAlarm(int64(i)); err != nil {
			b.Fatal(err)
		}
		if err := st.SetFailures(0); err != nil {
			b.Fatal(err)
		}
		if err := st.Commit(); err != nil {
			b.Fatal(err)
		}
		if err := st.Close(); err != nil {
			b.Fatal(err)
		}
	}
	if cpu > 0 {
		b.ReportMetric(float64((threadCPU()-cpu).Microseconds())/float64(b.N), "cpu-us/op")
	}
}

// BenchmarkCommittedState is the read of an actor's committed state just
// after its database opens (what every cold firing reads): Store.State's
// one statement against the four reads (Alarm, Failures, two Meta rows) in
// a read transaction that it replaced. cpu-us/op is the benchmark thread's
// CPU time in the read alone (preparing its statements on the new attach
// and stepping them), not in the open and close around it.
//
//	go test ./engine -run '^$' -bench CommittedState -benchtime 4000x -count 4
func BenchmarkCommittedState(b *testing.B) {
	path := filepath.Join(b.TempDir(), "a.db")
	st, err := engine.OpenStore(path)
	if err != nil {
		b.Fatal(err)
	}
	for _, err := range []error{st.SetAlarm(1_800_000_000_000), st.SetFailures(2),
		st.SetMeta(hostmod.MetaAlarmIndexed, "1800000000000/2-ab"), st.SetMeta(hostmod.MetaInitDone, "1"), st.Close()} {
		if err != nil {
			b.Fatal(err)
		}
	}
	reads := map[string]func(*engine.Store) error{
		"one-statement": func(st *engine.Store) error {
			cs, err := st.State()
			if err == nil && (cs.Alarm == nil || cs.Failures != 2 || !cs.InitDone) {
				err = fmt.Errorf("read %+v", cs)
			}
			return err
		},
		"four-reads": func(st *engine.Store) error {
			if err := st.Begin(); err != nil {
				return err
			}
			defer st.Rollback()
			_, ok, err := st.Alarm()
			n, ferr := st.Failures()
			_, _, merr := st.Meta(hostmod.MetaAlarmIndexed)
			_, init, ierr := st.Meta(hostmod.MetaInitDone)
			for _, e := range []error{err, ferr, merr, ierr} {
				if e != nil {
					return e
				}
			}
			if !ok || n != 2 || !init {
				return fmt.Errorf("read %v %d %v", ok, n, init)
			}
			return st.Commit()
		},
	}
	for _, name := range []string{"one-statement", "four-reads"} {
		read := reads[name]
		b.Run(name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var cpu time.Duration
			for i := 0; i < b.N; i++ {
				st, err := engine.OpenStore(path)
				if err != nil {
					b.Fatal(err)
				}
				c := threadCPU()
				if err := read(st); err != nil {
					b.Fatal(err)
				}
				cpu += threadCPU() - c
				if err := st.Close(); err != nil {
					b.Fatal(err)
				}
			}
			if cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "cpu-us/op")
			}
		})
	}
}
