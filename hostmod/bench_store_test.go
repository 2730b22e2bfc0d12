package hostmod_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/wasmkeep/alarms/hostmod"
)

// BenchmarkStoreWakeSleep is what a cold firing does to an actor's
// database, the guest left out: open it, read the alarm and its failure
// count, commit the next alarm, close it. 64 databases take turns, as
// sleeping actors do.
//
//	go test ./hostmod -run '^$' -bench StoreWakeSleep -benchtime 3000x
func BenchmarkStoreWakeSleep(b *testing.B) {
	dir := b.TempDir()
	paths := make([]string, 64)
	for i := range paths {
		paths[i] = filepath.Join(dir, fmt.Sprintf("a%02d.db", i))
	}
	b.ResetTimer()
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
}
