package node_test

// Snapshots read back from the bucket that are not a database this host
// wrote: the actor is given up with a clear error, nothing local is
// overwritten, the bucket keeps the snapshot, and other actors go on.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ncruces/go-sqlite3"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/statetest"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// restoreRig is a node on an in-memory bucket serving the oneshot class,
// with one actor known to work.
type restoreRig struct {
	b       *bucket.Mem
	n       *node.Node
	dir     string
	replica *cluster.Replica
	control abi.ActorID
	good    []byte // a snapshot the host wrote
}

// hourAhead is a oneshot request: an alarm an hour from now.
func hourAhead() []byte {
	var req [8]byte
	binary.LittleEndian.PutUint64(req[:], uint64(time.Now().Add(time.Hour).UnixMilli()))
	return req[:]
}

func newRestoreRig(t testing.TB) *restoreRig {
	t.Helper()
	r := &restoreRig{b: bucket.NewMem(), dir: t.TempDir()}
	r.replica = cluster.NewReplica(r.b, "cluster/")
	r.n = startHost(t, r.b, "a", r.dir, map[string][]byte{"oneshot": testguest.Fixture(t, "oneshot_alarm")}, hostConfig{})
	r.control = abi.ActorID{Tenant: "t", Class: "oneshot", Name: "control"}
	ctx := context.Background()
	if _, err := r.n.Request(ctx, r.control, hourAhead()); err != nil {
		t.Fatal(err)
	}
	snap, ok, err := cluster.ReadState(ctx, r.b, "cluster/", r.control)
	if err != nil || !ok {
		t.Fatalf("the control actor's snapshot: %v %v", ok, err)
	}
	if r.good, _, err = r.replica.Download(ctx, r.control, snap); err != nil {
		t.Fatal(err)
	}
	return r
}

// try plants data as the only snapshot of a new actor and sends it a
// request. It fails the test if anything but the actor is affected, and
// returns the request's error.
func (r *restoreRig) try(t testing.TB, id abi.ActorID, data []byte) error {
	t.Helper()
	ctx := context.Background()
	key := statetest.Plant(t, r.b, "cluster/", id, 1, data)
	_, err := r.n.Request(ctx, id, hourAhead())
	if err != nil {
		var ae *abi.ActorError
		if !errors.As(err, &ae) || ae.ID != id {
			t.Fatalf("a request to an actor restored from %d bytes: %v, want an error naming actor %v", len(data), err, id)
		}
		if errors.Is(err, node.ErrInternal) {
			t.Fatalf("a request to an actor restored from %d bytes: a host panic: %v", len(data), err)
		}
		if got, _, gerr := r.b.Get(ctx, key); gerr != nil || !bytes.Equal(got, data) {
			t.Fatalf("after a refused restore the bucket's snapshot changed (%v)", gerr)
		}
	}
	if _, err := r.n.Request(ctx, r.control, hourAhead()); err != nil {
		t.Fatalf("the control actor after actor %v: %v", id, err)
	}
	return err
}

func TestABadSnapshotInTheBucketGivesTheActorUp(t *testing.T) {
	t.Parallel()
	r := newRestoreRig(t)
	foreign := filepath.Join(t.TempDir(), "foreign.db")
	conn, err := sqlite3.Open(foreign)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(`PRAGMA journal_mode=DELETE; CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('x')`); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	foreignBytes, err := os.ReadFile(foreign)
	if err != nil {
		t.Fatal(err)
	}
	h := r.n.Handler()
	for i, tc := range []struct {
		name string
		data []byte
		says string
	}{
		{"bytes that are no database", []byte("definitely not SQLite"), "not a database this host wrote"},
		{"half of a good snapshot", r.good[:len(r.good)/2], "not a database this host wrote"},
		{"another program's database", foreignBytes, `a table "users" the host does not create`},
	} {
		id := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "victim-" + string(rune('a'+i))}
		err := r.try(t, id, tc.data)
		if !errors.Is(err, engine.ErrBadSnapshot) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "restore snapshot") {
			t.Errorf("%s: %v, want ErrBadSnapshot naming the snapshot and saying %q", tc.name, err, tc.says)
		}
		if left, _ := filepath.Glob(node.Path(r.dir, id) + "*"); len(left) != 0 {
			t.Errorf("%s: files left in the data directory: %v", tc.name, left)
		}
		// Over HTTP: a 500 that says so, no Retry-After (a retry cannot help).
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, clusterproc.ActorURL("", id), bytes.NewReader(hourAhead())))
		if rec.Code != 500 || rec.Header().Get("Retry-After") != "" || !strings.Contains(said(t, rec.Header(), rec.Body.Bytes()), tc.says) {
			t.Errorf("%s over HTTP: %d %q (Retry-After %q), want 500 saying %q", tc.name, rec.Code, rec.Body, rec.Header().Get("Retry-After"), tc.says)
		}
	}
	// The good snapshot restores.
	if err := r.try(t, abi.ActorID{Tenant: "t", Class: "oneshot", Name: "copy"}, r.good); err != nil {
		t.Fatalf("a good snapshot: %v", err)
	}
}

// FuzzRestoredSnapshot plants fuzzed bytes as an actor's snapshot: the
// request to it either runs or fails with an error naming the actor (never
// a panic), the bucket keeps the bytes, and another actor is unaffected.
func FuzzRestoredSnapshot(f *testing.F) {
	r := newRestoreRig(f)
	f.Add(r.good)
	f.Add(r.good[:100])
	f.Add([]byte("SQLite format 3\x00"))
	var i atomic.Int64
	f.Fuzz(func(t *testing.T, data []byte) {
		id := abi.ActorID{Tenant: "t", Class: "oneshot", Name: fmt.Sprintf("fuzzed-%d", i.Add(1))}
		_ = r.try(t, id, data)
	})
}

// A node that has the actor's database from an earlier hold, finding a
// newer snapshot in the bucket that is not a host database, leaves its
// local file as it was (not set aside, not overwritten).
func TestABadNewerSnapshotLeavesTheLocalDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := bucket.NewMem()
	dir := t.TempDir()
	classes := map[string][]byte{"oneshot": testguest.Fixture(t, "oneshot_alarm")}
	id := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "kept"}
	n := startHost(t, b, "a", dir, classes, hostConfig{})
	if _, err := n.Request(ctx, id, hourAhead()); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	local, err := os.ReadFile(node.Path(dir, id))
	if err != nil {
		t.Fatal(err)
	}
	bad := statetest.Plant(t, b, "cluster/", id, 1<<40, []byte("not a database"))
	again := startHost(t, b, "a2", dir, classes, hostConfig{})
	if _, err := again.Request(ctx, id, hourAhead()); !errors.Is(err, engine.ErrBadSnapshot) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("with a bad newer snapshot: %v, want ErrBadSnapshot naming %s", err, bad)
	}
	after, err := os.ReadFile(node.Path(dir, id))
	if err != nil || !bytes.Equal(after, local) {
		t.Fatalf("the local database after the refused restore: %d bytes (%v), want the %d it had", len(after), err, len(local))
	}
	if left, _ := filepath.Glob(node.Path(dir, id) + ".replaced*"); len(left) != 0 {
		t.Fatalf("the local database was set aside: %v", left)
	}
}
