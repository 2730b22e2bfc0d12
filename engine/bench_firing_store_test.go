package engine_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
)

// BenchmarkReplicatedFiringStore times a replicated firing's work on the
// actor's database, without the guest and the bucket: the event's commit
// (the alarm moved and the counter's row written), the new index entry
// recorded, and the snapshot for the upload, in the CPU time of the thread
// that runs them (system calls included). The entry is recorded in the
// event's own transaction, as a node does (engine.RunAlarm),
// or in a transaction of its own after it, as a host that calls
// alarms.Plugin.Replicate after the event does.
//
//	go test ./engine -run '^$' -bench ReplicatedFiringStore -benchtime 20000x
func BenchmarkReplicatedFiringStore(b *testing.B) {
	for _, inEvent := range []bool{false, true} {
		name := "record-own-transaction"
		if inEvent {
			name = "record-in-event"
		}
		b.Run(name, func(b *testing.B) { benchFiringStore(b, inEvent) })
	}
}

func benchFiringStore(b *testing.B, inEvent bool) {
	st, err := engine.OpenStore(filepath.Join(b.TempDir(), "a.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	var buf []byte
	firing := func(i int) {
		if err := st.Begin(); err != nil {
			b.Fatal(err)
		}
		err := st.SetAlarm(int64(i))
		if err == nil {
			err = st.KVPut([]byte("count"), fmt.Appendf(nil, "%d", i))
		}
		if err == nil && inEvent {
			err = st.SetMeta(hostmod.MetaAlarmIndexed, fmt.Sprintf("%d/tag-%012d", i, i))
		}
		if err == nil {
			err = st.Commit()
		}
		if err == nil && !inEvent {
			err = st.SetMeta(hostmod.MetaAlarmIndexed, fmt.Sprintf("%d/tag-%012d", i, i))
		}
		if err == nil {
			buf, err = st.SnapshotTo(buf)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	for i := range 300 { // past the WAL's first restart, as in a node that has run a while
		firing(i)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	c := threadCPU()
	for i := range b.N {
		firing(300 + i)
	}
	if cpu := threadCPU() - c; cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}
