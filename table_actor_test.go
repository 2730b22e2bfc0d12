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
// bucket's copy is the file, BucketHadActor follows what Open found, and
// the meta rows it writes are the ones Read gives back.
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
		t.Cleanup(func() { ta.Table.Close(); conn.Close() })
		return ta, conn
	}
	ta, _ := open()
	if ta.BucketHadActor() || ta.Uploaded() || ta.ID() != id || ta.Generation() != 1 {
		t.Fatalf("a new actor: had %v, uploaded %v, id %v, generation %d", ta.BucketHadActor(), ta.Uploaded(), ta.ID(), ta.Generation())
	}
	if err := ta.WriteMeta(ctx, alarmindex.MetaAlarmIndexed, "42"); err != nil {
		t.Fatal(err)
	}
	if st, err := ta.Read(ctx); err != nil || st.Indexed != "42" || st.Alarm != nil {
		t.Fatalf("Read = %+v, %v; want alarm_indexed 42 and no alarm", st, err)
	}
	if err := ta.Upload(ctx); err != nil || !ta.Uploaded() {
		t.Fatalf("Upload: %v (uploaded %v)", err, ta.Uploaded())
	}
	if _, _, err := b.Get(ctx, "state/"+alarms.TimerKey(id)); err != nil {
		t.Fatalf("the state is not in the bucket: %v", err)
	}
	if again, _ := open(); !again.BucketHadActor() || again.Uploaded() {
		t.Errorf("reopened after an upload: had %v, uploaded %v; want true, false", again.BucketHadActor(), again.Uploaded())
	}
}
