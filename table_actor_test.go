package alarms_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/ncruces/go-sqlite3"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
)

// TableActor is the plugin's view of a host's own database file: the
// bucket's copy is the file, Hold().BucketHad follows what Open found, the
// hold lasts from Open to Close, and the meta rows it writes are the ones
// Read gives back.
func TestTableActorUploadsTheFileAndKnowsWhatTheBucketHad(t *testing.T) {
	ctx := context.Background()
	b := bucket.NewMem()
	id := abi.ActorID{Tenant: "t", Class: "c", Name: "n"}
	path := filepath.Join(t.TempDir(), "n.db")
	open := func() (*alarms.TableActor, *sqlite3.Conn) {
		conn, err := sqlite3.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		ta := &alarms.TableActor{Actor: id, Path: path, Bucket: b}
		if err := ta.Open(ctx, conn); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ta.Close(); conn.Close() })
		return ta, conn
	}
	ta, _ := open()
	if h := ta.Hold(); h.BucketHad || h.Uploaded || !h.Valid || ta.ID() != id || h.Generation != 1 {
		t.Fatalf("a new actor: %+v, id %v; want a valid hold in generation 1, nothing uploaded, the bucket without it", h, ta.ID())
	}
	if err := ta.SetMeta(ctx, alarmindex.MetaAlarmIndexed, "42"); err != nil {
		t.Fatal(err)
	}
	if st, err := ta.State(ctx); err != nil || st.Indexed != "42" || st.Alarm != nil {
		t.Fatalf("State = %+v, %v; want alarm_indexed 42 and no alarm", st, err)
	}
	if err := ta.Upload(ctx); err != nil || !ta.Hold().Uploaded {
		t.Fatalf("Upload: %v (hold %+v)", err, ta.Hold())
	}
	if _, _, err := b.Get(ctx, "state/"+alarms.TimerKey(id)); err != nil {
		t.Fatalf("the state is not in the bucket: %v", err)
	}
	if again, _ := open(); !again.Hold().BucketHad || again.Hold().Uploaded {
		t.Errorf("reopened after an upload: %+v; want the bucket with it, nothing uploaded", again.Hold())
	}
	if ta.Close(); ta.Hold().Valid {
		t.Error("the hold is valid after Close")
	}
}
