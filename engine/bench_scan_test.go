package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/wasmkeep/alarms/hostmod"
)

// BenchmarkReadAlarm is the start-up scan's read of one sleeping actor:
// its alarm from the database file and the commits of its WAL (wal=1
// commit, as after a first event), or from the file alone (wal=0, a
// checkpointed WAL). 256 actors take turns, all in the page cache.
//
//	go test ./engine -run '^$' -bench ReadAlarm
func BenchmarkReadAlarm(b *testing.B) {
	for _, commits := range []int{0, 1} {
		b.Run(fmt.Sprintf("wal=%d", commits), func(b *testing.B) {
			dir := b.TempDir()
			paths := make([]string, 256)
			for i := range paths {
				paths[i] = filepath.Join(dir, fmt.Sprintf("a%03d.db", i))
				st, err := OpenStore(paths[i])
				if err != nil {
					b.Fatal(err)
				}
				err = st.Begin()
				if err == nil {
					err = st.SetAlarm(int64(1000 + i))
				}
				if err == nil {
					err = st.SetMeta(hostmod.MetaInitDone, "1")
				}
				if err == nil {
					err = st.Commit()
				}
				if err == nil && commits == 0 {
					err = st.conn.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
				}
				if err != nil {
					b.Fatal(err)
				}
				st.Close()
			}
			if fi, err := os.Stat(paths[0] + "-wal"); err == nil {
				b.ReportMetric(float64(fi.Size()), "wal-bytes")
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				at, ok, done, err := readAlarmFile(paths[i%len(paths)])
				if err != nil || !done || !ok || at != int64(1000+i%len(paths)) {
					b.Fatalf("read %d, %v (done %v), %v", at, ok, done, err)
				}
			}
		})
	}
}
