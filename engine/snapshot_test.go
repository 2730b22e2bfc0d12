package engine_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/wasmkeep/alarms/engine"
)

// A snapshot is the committed database, whole: restored elsewhere it reads
// back every committed row, whether it was serialised (a small database,
// its last commits still in the WAL) or read from the checkpointed file (a
// large one). (No other connection can keep the checkpoint from completing:
// an open store holds its file exclusively.)
func TestSnapshotRestoresTheCommittedDatabase(t *testing.T) {
	for _, large := range []int{0, 768 << 10} { // bytes of rows written first
		t.Run(fmt.Sprintf("large=%d", large), func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "a.db")
			st, err := engine.OpenStore(p)
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
			for i := range large / 4096 {
				set(fmt.Sprintf("big%04d", i), strings.Repeat("x", 4000))
			}
			for i := range 300 {
				set(fmt.Sprintf("k%03d", i), fmt.Sprintf("value %d", i))
			}
			snap, err := st.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			q := filepath.Join(dir, "restored.db")
			if err := engine.WriteSnapshot(q, snap); err != nil {
				t.Fatal(err)
			}
			r, err := engine.OpenStore(q)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			want := map[string]string{"k000": "value 0", "k299": "value 299"}
			if large > 0 {
				want["big0000"] = strings.Repeat("x", 4000)
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
	st, err := engine.OpenStore(p)
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

// A host reuses its snapshot buffers from one upload to the next: a
// snapshot into a buffer that held a larger one (here garbage) is the
// committed database and nothing else, in that buffer's storage; and
// snapshots of several databases taken at once, each into its own reused
// buffer, each restore their own database.
func TestSnapshotToReusesTheBuffer(t *testing.T) {
	dir := t.TempDir()
	const stores = 6
	sts := make([]*engine.Store, stores)
	for i := range sts {
		st, err := engine.OpenStore(filepath.Join(dir, fmt.Sprintf("s%d.db", i)))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		for j := range 20 + 40*i { // databases of different sizes
			if err := st.Begin(); err != nil {
				t.Fatal(err)
			}
			if err := st.SetMeta(fmt.Sprintf("k%03d", j), strings.Repeat(fmt.Sprint(i), 100)); err != nil {
				t.Fatal(err)
			}
			if err := st.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		sts[i] = st
	}
	// restores checks that snap is store i's database (on any goroutine).
	restores := func(i, n int, snap []byte) error {
		q := filepath.Join(dir, fmt.Sprintf("restored-%d-%d.db", i, n))
		if err := engine.CheckSnapshot(snap); err != nil {
			return fmt.Errorf("store %d: %w", i, err)
		}
		if err := engine.WriteSnapshot(q, snap); err != nil {
			return err
		}
		r, err := engine.OpenStore(q)
		if err != nil {
			return err
		}
		defer r.Close()
		last := fmt.Sprintf("k%03d", 20+40*i-1)
		if got, ok, err := r.Meta(last); err != nil || !ok || got != strings.Repeat(fmt.Sprint(i), 100) {
			return fmt.Errorf("store %d restored %s = %q, %v, %v", i, last, got, ok, err)
		}
		if _, ok, err := r.Meta(fmt.Sprintf("k%03d", 20+40*i)); err != nil || ok {
			return fmt.Errorf("store %d restored a row it never had (%v)", i, err)
		}
		return nil
	}

	garbage := make([]byte, 256<<10)
	for i := range garbage {
		garbage[i] = 0xa5
	}
	snap, err := sts[0].SnapshotTo(garbage)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap) == 0 || len(snap) >= len(garbage) || &snap[0] != &garbage[0] {
		t.Fatalf("snapshot of %d bytes; want one smaller than the buffer of %d, in its storage", len(snap), len(garbage))
	}
	fresh, err := sts[0].Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap, fresh) {
		t.Fatal("a snapshot into a used buffer differs from one into a new buffer")
	}
	if err := restores(0, 0, snap); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	errs := make(chan error, stores)
	for i, st := range sts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := garbage[:0:0]
			if i%2 == 0 {
				buf = make([]byte, 0, 4096) // too small: grows
			}
			for n := range 30 {
				b, err := st.SnapshotTo(buf)
				if err == nil {
					err = restores(i, n+1, b)
				}
				if err != nil {
					errs <- err
					return
				}
				for j := range b {
					b[j] = 0xa5 // the next snapshot must not depend on what is left
				}
				buf = b[:0]
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
