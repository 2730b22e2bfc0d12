package engine_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ncruces/go-sqlite3"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/diskfault"
)

// quickCheck runs PRAGMA quick_check on the closed database at path with
// a connection of its own, as an operator would after a full disk.
func quickCheck(t *testing.T, path string) {
	t.Helper()
	conn, err := sqlite3.OpenFlags(path, sqlite3.OPEN_READWRITE)
	if err != nil {
		t.Fatalf("open %s: %v", filepath.Base(path), err)
	}
	defer conn.Close()
	st, _, err := conn.Prepare(`PRAGMA quick_check`)
	if err != nil {
		t.Fatalf("quick_check %s: %v", filepath.Base(path), err)
	}
	defer st.Close()
	var got []string
	for st.Step() {
		got = append(got, st.ColumnText(0))
	}
	if err := st.Err(); err != nil || len(got) != 1 || got[0] != "ok" {
		t.Fatalf("quick_check %s: %q, %v; want ok", filepath.Base(path), got, err)
	}
}

// wantFull checks that err is a full disk's, naming the actor.
func wantFull(t *testing.T, what string, err error, id abi.ActorID) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s on a full disk succeeded", what)
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("%s on a full disk: %v; want an error wrapping ENOSPC", what, err)
	}
	t.Logf("%s: %v", what, err)
	if msg := err.Error(); !strings.Contains(msg, id.String()) || !strings.Contains(msg, "no space left on device") {
		t.Fatalf("%s on a full disk: %q; want it to name the actor %s and the cause", what, msg, id)
	}
}

// An event that finds the actor's disk full fails with an error that
// wraps ENOSPC and names the actor, and commits nothing; what committed
// before it stays committed and readable (reads go on while the disk is
// full), and a due alarm whose delivery could not commit stays due. Once
// there is space again, the same actor, still open, takes its next event
// and its alarm fires; reopened, it holds exactly what committed, and
// SQLite finds the database whole. The disk fills at once (the commit's
// WAL write refused) and part way through a commit (a short write,
// leaving a torn commit in the WAL).
func TestAFullDiskFailsTheEventAndKeepsWhatCommitted(t *testing.T) {
	for _, tc := range []struct {
		name string
		free int64 // bytes the disk still takes when it fills
	}{{"full", 0}, {"torn", 5000}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			c := e.scripted()
			a := e.open(c, "a")
			id := a.ID()
			e.req(a, "set 1800000001000")
			e.req(a, "put k committed")

			disk := diskfault.Limit(e.dir, tc.free)
			defer disk.Release()
			big := strings.Repeat("x", 20000) // more than the space left, in any case
			_, err := a.Request(e.ctx, []byte("put k "+big))
			wantFull(t, "a request", err, id)
			_, err = a.Request(e.ctx, []byte("set 1800000009000"))
			wantFull(t, "a request", err, id)
			if got := e.req(a, "getkv k"); got != "committed" {
				t.Fatalf("on a full disk the actor reads k = %.20q, want what committed before", got)
			}
			if st := e.state(a); st.Alarm == nil || *st.Alarm != t0+1000 || st.Failures != 0 {
				t.Fatalf("on a full disk the committed state reads %+v, want the alarm at %d", st, int64(t0+1000))
			}
			e.clock.Set(t0 + 1000)
			_, err = a.DeliverAlarm(e.ctx)
			wantFull(t, "a delivery", err, id)
			if st := e.state(a); st.Alarm == nil || *st.Alarm != t0+1000 || st.Failures != 0 {
				t.Fatalf("after a delivery that could not commit: %+v, want the alarm at %d, still due, no failure", st, int64(t0+1000))
			}
			if disk.Refused() == 0 {
				t.Fatal("no write was refused: the disk was never full")
			}

			disk.Unlimited()
			e.req(a, "put after space")
			d := e.deliver(a)
			if !d.Ran || d.Err != nil || d.Scheduled != t0+1000 || d.RetryCount != 0 {
				t.Fatalf("the delivery once there is space: %+v; want on-alarm run for the alarm at %d", d, int64(t0+1000))
			}
			if got := e.req(a, "getkv log"); got != "1800000001000:0" {
				t.Fatalf("handler log %q, want the one run", got)
			}
			if err := a.Close(e.ctx); err != nil {
				t.Fatal(err)
			}
			quickCheck(t, filepath.Join(e.dir, "a.db"))
			a = e.open(c, "a")
			for k, want := range map[string]string{"k": "committed", "after": "space"} {
				if got := e.req(a, "getkv "+k); got != want {
					t.Errorf("reopened, %s = %.20q, want %q", k, got, want)
				}
			}
			if st := e.state(a); st.Alarm != nil {
				t.Errorf("reopened, the alarm is set (%+v); it fired", st)
			}
		})
	}
}

// A new actor's database cannot be created on a full disk: the open fails
// naming the actor and ENOSPC, leaves no file behind, and succeeds once
// there is space.
func TestANewActorOnAFullDiskIsNotCreated(t *testing.T) {
	e := newEnv(t)
	c := e.scripted()
	disk := diskfault.Limit(e.dir, 1000)
	defer disk.Release()
	id := abi.ActorID{Tenant: "t1", Class: c.Name, Name: "new"}
	p := filepath.Join(e.dir, "new.db")
	_, err := e.eng.Open(e.ctx, id, c, p)
	wantFull(t, "opening a new actor", err, id)
	if ents, _ := os.ReadDir(e.dir); len(ents) != 0 {
		t.Fatalf("the failed open left %d files (%s...)", len(ents), ents[0].Name())
	}
	disk.Unlimited()
	a := e.open(c, "new")
	e.req(a, "set 1800000001000")
	if st := e.state(a); st.Alarm == nil {
		t.Fatalf("state %+v", st)
	}
}

// Writing a snapshot over a database on a full disk fails with ENOSPC and
// leaves the database as it was: its commits in the WAL included.
func TestASnapshotThatDoesNotFitLeavesTheDatabase(t *testing.T) {
	e := newEnv(t)
	c := e.scripted()
	a := e.open(c, "a")
	e.req(a, "put k committed")
	snap, err := a.Snapshot(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.req(a, "put k later")
	if err := a.Close(e.ctx); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(e.dir, "a.db")
	if fi, err := os.Stat(p + "-wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("the WAL: %v; want the commits in it", err)
	}
	disk := diskfault.Limit(e.dir, int64(len(snap)/2))
	defer disk.Release()
	if err := engine.WriteSnapshot(p, snap); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("writing a snapshot on a full disk: %v; want ENOSPC", err)
	}
	if _, err := os.Stat(p + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("the failed write left %s.tmp (%v)", filepath.Base(p), err)
	}
	disk.Unlimited()
	a = e.open(c, "a")
	if got := e.req(a, "getkv k"); got != "later" {
		t.Fatalf("after the failed snapshot write k = %q, want the last commit's", got)
	}
}
