package hostmod_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/ncruces/go-sqlite3"

	"github.com/wasmkeep/alarms/hostmod"
)

// A snapshot is the committed database, whole: restored elsewhere it reads
// back every committed row, whether it was read from the checkpointed file
// or (while another connection keeps the checkpoint from completing)
// serialised.
func TestSnapshotRestoresTheCommittedDatabase(t *testing.T) {
	for _, reader := range []bool{false, true} {
		t.Run(fmt.Sprintf("another-reader=%v", reader), func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "a.db")
			st, err := hostmod.OpenStore(p)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			set := func(k, v string) {
				t.Helper()
				if err := st.Begin(); err != nil {
					t.Fatal(err)
				}
				if err := st.SetMeta(k, v); err != nil {
					t.Fatal(err)
				}
				if err := st.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 300 {
				set(fmt.Sprintf("k%03d", i), fmt.Sprintf("value %d", i))
			}
			if reader {
				// A read transaction on a second connection pins the WAL.
				c, err := sqlite3.Open(p)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if err := c.Exec(`BEGIN; SELECT count(*) FROM _wasmkeep_meta;`); err != nil {
					t.Fatal(err)
				}
				set("k000", "changed after the reader began")
			}
			snap, err := st.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			q := filepath.Join(dir, "restored.db")
			if err := hostmod.WriteSnapshot(q, snap); err != nil {
				t.Fatal(err)
			}
			r, err := hostmod.OpenStore(q)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			want := map[string]string{"k000": "value 0", "k299": "value 299"}
			if reader {
				want["k000"] = "changed after the reader began"
			}
			for k, v := range want {
				if got, ok, err := r.Meta(k); err != nil || !ok || got != v {
					t.Fatalf("restored %s = %q, %v, %v; want %q", k, got, ok, err, v)
				}
			}
		})
	}
}
