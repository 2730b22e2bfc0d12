package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ncruces/go-sqlite3"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// hostSnapshot returns the snapshot of a database the host wrote, with an
// alarm, a failure count and a guest value.
func hostSnapshot(t testing.TB) []byte {
	t.Helper()
	st, err := engine.OpenStore(filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.SetAlarm(1234); err != nil {
		t.Fatal(err)
	}
	if err := st.SetFailures(2); err != nil {
		t.Fatal(err)
	}
	if err := st.KVPut([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	b, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sqliteSnapshot returns the file of a database made by running sql.
func sqliteSnapshot(t testing.TB, sql string) []byte {
	t.Helper()
	p := filepath.Join(t.TempDir(), "x.db")
	conn, err := sqlite3.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(sql); err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// snapshotCase is a snapshot a restore may read: says is "" for one the
// host accepts, else what the refusal says.
type snapshotCase struct {
	name string
	data []byte
	says string
}

// snapshotCases are the snapshots the checks are tried on: the host's own
// (good), acceptable ones, and bad ones of each kind.
func snapshotCases(t testing.TB, good []byte) []snapshotCase {
	const hostTables = `CREATE TABLE _wasmkeep_alarm (
	id    INTEGER PRIMARY KEY CHECK (id = 1),
	at_ms INTEGER NOT NULL
);`
	corrupt := append([]byte(nil), good...)
	for i := 4096; i < len(corrupt); i += 97 { // leave the header, spoil the pages
		corrupt[i] ^= 0x5a
	}
	return []snapshotCase{
		{"the host's own snapshot", good, ""},
		{"an empty database", sqliteSnapshot(t, "PRAGMA user_version = 0"), ""},
		{"one of the host's tables alone", sqliteSnapshot(t, hostTables), ""},
		{"not a database", []byte("this is not an SQLite database, nor close to one"), "not a database this host wrote"},
		{"a truncated snapshot", good[:len(good)/2], "not a database this host wrote"},
		{"spoiled pages", corrupt, "not a database this host wrote"},
		{"a table the host does not create", sqliteSnapshot(t, "CREATE TABLE users (name TEXT)"), `a table "users" the host does not create`},
		{"kv defined otherwise", sqliteSnapshot(t, "CREATE TABLE kv (key TEXT, value TEXT)"), `its table "kv" is not defined as the host defines it`},
		{"a trigger", sqliteSnapshot(t, hostTables+" CREATE TRIGGER tr AFTER DELETE ON _wasmkeep_alarm BEGIN SELECT 1; END;"), `a trigger "tr"`},
		{"a view", sqliteSnapshot(t, "CREATE VIEW kv AS SELECT 1 AS key, 2 AS value"), `a view "kv"`},
	}
}

func TestCheckSnapshot(t *testing.T) {
	cases := snapshotCases(t, hostSnapshot(t))
	// Twice: the checks share connections, and a check after a bad
	// snapshot judges as a first check would.
	for _, tc := range append(cases, cases...) {
		err := engine.CheckSnapshot(tc.data)
		switch {
		case tc.says == "" && err != nil:
			t.Errorf("%s: %v, want it accepted", tc.name, err)
		case tc.says != "" && (!errors.Is(err, engine.ErrBadSnapshot) || !strings.Contains(err.Error(), tc.says)):
			t.Errorf("%s: %v, want ErrBadSnapshot saying %q", tc.name, err, tc.says)
		}
	}
}

// BenchmarkCheckSnapshot measures the check a takeover's restore runs on
// the snapshot it read (the host's own, 24 KiB): CPU per check.
//
//	go test ./engine -run '^$' -bench CheckSnapshot
func BenchmarkCheckSnapshot(b *testing.B) {
	good := hostSnapshot(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := engine.CheckSnapshot(good); err != nil {
			b.Fatal(err)
		}
	}
}

// A database a restore wrote from a snapshot unchecked is judged by its
// open (OpenRestored) as CheckSnapshot judges the bytes: each bad case is
// refused with an error wrapping ErrBadSnapshot that says the same, and
// nothing of it is left (no database, no WAL); each good one opens and
// reads its state. So for snapshots spoiled at random: the two agree on
// every one, whichever byte was spoiled.
func TestOpenRestoredChecksAsCheckSnapshot(t *testing.T) {
	e := newEnv(t)
	c := e.class("oneshot", testguest.Fixture(t, "oneshot_alarm"))
	good := hostSnapshot(t)
	n := 0
	try := func(tc snapshotCase) {
		t.Helper()
		n++
		id := abi.ActorID{Tenant: "t1", Class: c.Name, Name: fmt.Sprintf("r%d", n)}
		p := filepath.Join(e.dir, id.Name+".db")
		if err := engine.WriteSnapshot(p, tc.data); err != nil {
			t.Fatal(err)
		}
		want := engine.CheckSnapshot(tc.data)
		a, err := e.eng.OpenRestored(e.ctx, id, c, p)
		left, _ := filepath.Glob(p + "*")
		switch {
		case errors.Is(want, engine.ErrBadSnapshot) != errors.Is(err, engine.ErrBadSnapshot):
			t.Fatalf("%s: the open says %v, CheckSnapshot %v", tc.name, err, want)
		case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
			t.Errorf("%s: %v, want ErrBadSnapshot saying %q", tc.name, err, tc.says)
		case err != nil && len(left) != 0:
			t.Errorf("%s: refused (%v), but left %v", tc.name, err, left)
		case err == nil:
			if _, serr := a.State(e.ctx); serr != nil {
				t.Errorf("%s: opened, but its state: %v", tc.name, serr)
			}
			if err := a.Close(e.ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := snapshotCases(t, good)
	for _, tc := range append(cases, cases...) {
		try(tc)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	refused := 0
	for i := range 400 {
		data := append([]byte(nil), good...)
		for range 1 + rng.IntN(3) {
			// In the first pages, where the header, the schema and the
			// rows are.
			data[rng.IntN(min(len(data), 3*4096))] ^= byte(1 + rng.IntN(255))
		}
		if engine.CheckSnapshotFormat(data) != nil {
			continue // refused before anything is written
		}
		tc := snapshotCase{name: fmt.Sprintf("spoiled %d", i), data: data}
		if errors.Is(engine.CheckSnapshot(data), engine.ErrBadSnapshot) {
			refused++
		}
		try(tc)
	}
	if refused == 0 {
		t.Fatal("no spoiled snapshot was refused: the comparison judged nothing")
	}
	t.Logf("%d of the spoiled snapshots refused", refused)
}

// An open that fails for the file rather than for its bytes (here the
// path is a directory: SQLite cannot open it) does not call the snapshot
// bad: the actor is not given up for a fault of the disk.
func TestOpenRestoredKeepsFaultsOfTheFileApart(t *testing.T) {
	e := newEnv(t)
	c := e.class("oneshot", testguest.Fixture(t, "oneshot_alarm"))
	p := filepath.Join(e.dir, "dir.db")
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := e.eng.OpenRestored(e.ctx, abi.ActorID{Tenant: "t1", Class: c.Name, Name: "dir"}, c, p)
	if err == nil || errors.Is(err, engine.ErrBadSnapshot) {
		t.Fatalf("%v, want an error of the file, not ErrBadSnapshot", err)
	}
}

// BenchmarkRestoreOpen measures a takeover's restore of a snapshot (the
// host's own, 24 KiB) into an actor with no local database: the snapshot
// written, checked and opened, its state read, the actor closed.
// apart checks the bytes first (CheckSnapshot, on a connection of its
// own), then opens (Open): what a restore over a local database still
// does; on-open writes them and has the open check them (OpenRestored).
// cpu-us/op is the benchmark thread's CPU time (Linux only); the databases
// go to a new name at each iteration, as a drain's orphans do.
//
//	go test ./engine -run '^$' -bench RestoreOpen -benchtime 2000x
func BenchmarkRestoreOpen(b *testing.B) {
	ctx := context.Background()
	eng, err := engine.NewEngine(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close(ctx)
	wasm, err := os.ReadFile("../testdata/wasm/oneshot_alarm.wasm")
	if err != nil {
		b.Fatal(err)
	}
	c, err := eng.Compile(ctx, "oneshot", wasm)
	if err != nil {
		b.Fatal(err)
	}
	good := hostSnapshot(b)
	for _, mode := range []string{"apart", "on-open"} {
		b.Run(mode, func(b *testing.B) {
			dir := b.TempDir()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ResetTimer()
			cpu := threadCPU()
			for i := 0; i < b.N; i++ {
				id := abi.ActorID{Tenant: "t", Class: "oneshot", Name: fmt.Sprintf("a%d", i)}
				p := filepath.Join(dir, id.Name+".db")
				if err := engine.WriteSnapshot(p, good); err != nil {
					b.Fatal(err)
				}
				open := eng.OpenRestored
				if mode == "apart" {
					if err := engine.CheckSnapshot(good); err != nil {
						b.Fatal(err)
					}
					open = eng.Open
				}
				a, err := open(ctx, id, c, p)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := a.State(ctx); err != nil {
					b.Fatal(err)
				}
				if err := a.Close(ctx); err != nil {
					b.Fatal(err)
				}
			}
			if cpu > 0 {
				b.ReportMetric(float64((threadCPU()-cpu).Microseconds())/float64(b.N), "cpu-us/op")
			}
		})
	}
}
