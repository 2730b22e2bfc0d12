package engine_test

import (
	"encoding/binary"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/format"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// userVersion is the schema version in a snapshot's database header.
func userVersion(b []byte) int32 { return int32(binary.BigEndian.Uint32(b[60:])) }

// The snapshot an actor's host uploads is a bare SQLite image (container
// format 1) whose header carries schema version 1, though the database
// was made without one; restored and snapshotted again, it still does,
// and the snapshot check takes it.
func TestASnapshotCarriesSchemaVersion1(t *testing.T) {
	e := newEnv(t)
	c := e.class("oneshot", testguest.Fixture(t, "oneshot_alarm"))
	a := e.open(c, "a")
	e.req(a, "\x00\x00\x00\x00\x00\x00\x00\x00")
	snap, err := a.Snapshot(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(snap), "SQLite format 3\x00") || userVersion(snap) != format.SchemaVersion || format.SchemaVersion != 1 {
		t.Fatalf("the snapshot: %q..., schema version %d; want an SQLite image at schema version 1", snap[:16], userVersion(snap))
	}
	if err := engine.CheckSnapshot(snap); err != nil {
		t.Fatalf("the check refuses the host's own snapshot: %v", err)
	}
	p := filepath.Join(e.dir, "restored.db")
	if err := engine.WriteSnapshot(p, snap); err != nil {
		t.Fatal(err)
	}
	b, err := e.eng.Open(e.ctx, a.ID(), c, p)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(e.ctx)
	again, err := b.Snapshot(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if userVersion(again) != 1 {
		t.Fatalf("the restored copy's snapshot is at schema version %d, want 1", userVersion(again))
	}
}

// A snapshot of a later container, or whose schema is later, is refused
// with a *format.NewerError (not as a bad snapshot: a later build reads
// it), before anything of it is read; a version that is no version is a
// bad snapshot; schema version 0 (a database made before versions) is 1.
func TestCheckSnapshotFormats(t *testing.T) {
	good := hostSnapshot(t)
	withSchema := func(v uint32) []byte {
		b := append([]byte(nil), good...)
		binary.BigEndian.PutUint32(b[60:], v)
		return b
	}
	for _, c := range []struct {
		name  string
		data  []byte
		kind  format.Kind // "": not newer
		newer int
		bad   bool // ErrBadSnapshot
	}{
		{"schema version 0", withSchema(0), "", 0, false},
		{"schema version 1", withSchema(1), "", 0, false},
		{"schema version 2", withSchema(2), format.Schema, 2, false},
		{"schema version -1", withSchema(0xffffffff), "", 0, true},
		{"container version 2", append([]byte("wasmkeep-snapshot/2\n"), good...), format.Snapshot, 2, false},
		{"container version 9 with no SQLite in it", []byte("wasmkeep-snapshot/9\n\x28\xb5\x2f\xfd"), format.Snapshot, 9, false},
		{"container version 1 (written bare)", append([]byte("wasmkeep-snapshot/1\n"), good...), "", 0, true},
		{"container version not a number", []byte("wasmkeep-snapshot/two\n"), "", 0, true},
	} {
		err := engine.CheckSnapshot(c.data)
		ne, isNewer := format.As(err)
		switch {
		case c.kind != "" && (!isNewer || ne.Kind != c.kind || ne.Version != c.newer || errors.Is(err, engine.ErrBadSnapshot)):
			t.Errorf("%s: %v, want a newer %s format %d, not a bad snapshot", c.name, err, c.kind, c.newer)
		case c.kind == "" && isNewer:
			t.Errorf("%s: %v, want no newer format", c.name, err)
		case c.kind == "" && c.bad != errors.Is(err, engine.ErrBadSnapshot):
			t.Errorf("%s: %v, want a bad snapshot %v", c.name, err, c.bad)
		}
		if ferr := engine.CheckSnapshotFormat(c.data); (ferr == nil) != (c.kind == "" && !c.bad) {
			t.Errorf("%s: CheckSnapshotFormat %v", c.name, ferr)
		}
	}
}

// filesIn is every file in dir with its bytes.
func filesIn(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, ent := range ents {
		b, err := os.ReadFile(filepath.Join(dir, ent.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[ent.Name()] = string(b)
	}
	return files
}

// setUserVersion writes v as the schema version in the header of the
// database file at p, as a later build would leave it.
func setUserVersion(t *testing.T, p string, v uint32) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	if _, err := f.WriteAt(b[:], 60); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// A database in the data directory whose schema a later build wrote (a
// node rolled back onto its directory) is refused as a snapshot of that
// schema is: opening the actor, OpenStore and the start-up scan's
// ReadAlarm fail with a *format.NewerError naming the schema and its
// version, and the actor too, and leave the directory byte for byte as it
// was (no WAL made beside the file: SQLite never opened it). At this
// build's version the same file opens, its alarm read.
func TestALocalDatabaseOfANewerSchemaIsRefusedAndLeftAsItIs(t *testing.T) {
	e := newEnv(t)
	c := e.class("oneshot", testguest.Fixture(t, "oneshot_alarm"))
	a := e.open(c, "a")
	var req [8]byte
	binary.LittleEndian.PutUint64(req[:], t0+3_600_000)
	e.req(a, string(req[:]))
	snap, err := a.Snapshot(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The database as a clean stop leaves it, whole in its file.
	dir := filepath.Join(e.dir, "later")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "a.db")
	if err := engine.WriteSnapshot(p, snap); err != nil {
		t.Fatal(err)
	}
	setUserVersion(t, p, format.SchemaVersion+1)
	before := filesIn(t, dir)

	id := abi.ActorID{Tenant: "t1", Class: "oneshot", Name: "later"}
	newer := func(what string, err error) {
		t.Helper()
		ne, ok := format.As(err)
		if !ok || ne.Kind != format.Schema || ne.Version != format.SchemaVersion+1 || ne.Known != format.SchemaVersion ||
			!strings.Contains(err.Error(), "schema format version 2") {
			t.Fatalf("%s: %v; want a newer schema format version %d", what, err, format.SchemaVersion+1)
		}
	}
	b, err := e.eng.Open(e.ctx, id, c, p)
	if err == nil {
		b.Close(e.ctx)
	}
	newer("opening the actor", err)
	var ae *abi.ActorError
	if !errors.As(err, &ae) || ae.ID != id || !strings.Contains(err.Error(), id.String()) {
		t.Fatalf("opening the actor: %v; want an error naming the actor %s", err, id)
	}
	st, err := engine.OpenStore(p)
	if err == nil {
		st.Close()
	}
	newer("OpenStore", err)
	_, _, err = engine.ReadAlarm(p)
	newer("ReadAlarm", err)
	if after := filesIn(t, dir); !maps.Equal(after, before) {
		t.Fatalf("the refused database's directory changed: %d files before, %d after", len(before), len(after))
	}

	// The control: the same file at this build's schema version.
	setUserVersion(t, p, format.SchemaVersion)
	if at, ok, err := engine.ReadAlarm(p); err != nil || !ok || at != t0+3_600_000 {
		t.Fatalf("ReadAlarm at schema version %d: %d, %v, %v", format.SchemaVersion, at, ok, err)
	}
	b, err = e.eng.Open(e.ctx, id, c, p)
	if err != nil {
		t.Fatalf("opening the actor at schema version %d: %v", format.SchemaVersion, err)
	}
	defer b.Close(e.ctx)
	if s := e.state(b); s.Alarm == nil || *s.Alarm != t0+3_600_000 {
		t.Fatalf("the alarm of the database at schema version %d: %v", format.SchemaVersion, s.Alarm)
	}
}
