package hostmod_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncruces/go-sqlite3"

	"github.com/wasmkeep/alarms/hostmod"
)

// A snapshot is the committed database, whole: restored elsewhere it reads
// back every committed row, whether it was serialised (a small database,
// its last commits still in the WAL) or read from the checkpointed file (a
// large one), and for a large one while another connection keeps the
// checkpoint from completing (serialised after all).
func TestSnapshotRestoresTheCommittedDatabase(t *testing.T) {
	for _, c := range []struct {
		reader bool
		large  int // bytes of rows written first
	}{{false, 0}, {false, 768 << 10}, {true, 768 << 10}} {
		reader := c.reader
		t.Run(fmt.Sprintf("another-reader=%v/large=%d", reader, c.large), func(t *testing.T) {
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
			for i := range c.large / 4096 {
				set(fmt.Sprintf("big%04d", i), strings.Repeat("x", 4000))
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
			if c.large > 0 {
				want["big0000"] = strings.Repeat("x", 4000)
			}
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

// Snapshots of a small database leave its WAL to SQLite's automatic
// checkpoint: an actor that runs and uploads thousands of events keeps a
// WAL of about 512 KiB on disk (128 pages and the last commit), not the
// 4 MiB of SQLite's default bound.
func TestTheWALStaysSmallUnderSnapshots(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.db")
	st, err := hostmod.OpenStore(p)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var most int64
	for i := range 2000 {
		if err := st.Begin(); err != nil {
			t.Fatal(err)
		}
		if err := st.SetAlarm(int64(i)); err != nil {
			t.Fatal(err)
		}
		if err := st.SetMeta(fmt.Sprintf("k%04d", i%50), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
		if err := st.Commit(); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Snapshot(); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(p + "-wal"); err == nil {
			most = max(most, fi.Size())
		}
	}
	if most == 0 || most > 640<<10 {
		t.Fatalf("the WAL reached %d bytes, want some and at most 640 KiB", most)
	}
}
