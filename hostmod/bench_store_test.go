package hostmod_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/wasmkeep/alarms/hostmod"
)

// BenchmarkStoreWakeSleep is what a cold firing does to an actor's
// database, the guest left out: open it, read the alarm and its failure
// count, commit the next alarm, close it. 64 databases take turns, as
// sleeping actors do. cpu-us/op is the CPU time of the benchmark's thread
// (Linux only), steadier than the wall clock on a shared machine.
//
//	go test ./hostmod -run '^$' -bench StoreWakeSleep -benchtime 3000x
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
		st, err := hostmod.OpenStore(paths[i%len(paths)])
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
