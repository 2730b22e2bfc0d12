package engine_test

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"testing"

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
	if err := engine.CheckSnapshot(filepath.Join(e.dir, "check.db"), snap); err != nil {
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
		scratch := filepath.Join(t.TempDir(), "s.db.check")
		err := engine.CheckSnapshot(scratch, c.data)
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
