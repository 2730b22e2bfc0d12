package engine

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/wasmkeep/alarms/hostmod"
)

// BenchmarkSnapshot times a snapshot after each commit of a firing's size
// (the alarm moved, a meta row written) in a small database, as a
// replicating host takes one after each event: copied from the image the
// store keeps (what SnapshotTo does) against a backup through SQLite (what
// it did before, and still does when the image cannot be read). The
// commits are outside the timing.
//
//	go test ./engine -run '^$' -bench Snapshot -benchtime 5000x
func BenchmarkSnapshot(b *testing.B) {
	for _, how := range []string{"image", "backup"} {
		b.Run(how, func(b *testing.B) {
			st, err := OpenStore(filepath.Join(b.TempDir(), "a.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			commit := func(i int) {
				if err := st.Begin(); err != nil {
					b.Fatal(err)
				}
				err := st.SetAlarm(int64(i))
				if err == nil {
					err = st.SetMeta(hostmod.MetaAlarmIndexed, fmt.Sprintf("%d/tag", i))
				}
				if err != nil {
					b.Fatal(err)
				}
				if err := st.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			commit(0)
			var buf []byte
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				commit(i + 1)
				b.StartTimer()
				if how == "image" {
					buf, err = st.SnapshotTo(buf)
				} else {
					buf, err = serialize(st.conn, storeSchema, buf)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if how == "image" && st.imageMisses > 0 {
				b.Fatalf("%d snapshots were serialised", st.imageMisses)
			}
			b.ReportMetric(float64(len(buf)), "bytes")
		})
	}
}
