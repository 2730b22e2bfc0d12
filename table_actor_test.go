package alarms_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncruces/go-sqlite3"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/sweeper"
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

// A host that runs alone (a SingleNode plugin) needs no bucket: its
// TableActor opens without one and holds the actor, its events commit on
// the table, the plugin replicates nothing, and an upload, which such a
// plugin never asks for, fails with an error naming the actor rather than
// a nil pointer.
func TestTableActorWithoutABucket(t *testing.T) {
	ctx := context.Background()
	id := abi.ActorID{Tenant: "t", Class: "c", Name: "alone"}
	path := filepath.Join(t.TempDir(), "alone.db")
	conn, err := sqlite3.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ta := &aloneActor{TableActor: alarms.TableActor{Actor: id, Path: path}}
	if err := ta.Open(ctx, conn); err != nil {
		t.Fatalf("Open without a bucket: %v", err)
	}
	defer ta.Close()
	if h := ta.Hold(); !h.Valid || h.BucketHad {
		t.Fatalf("hold %+v; want valid, and no bucket to have had the actor", h)
	}
	if err := conn.Exec(`BEGIN`); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(ta.Table.NewEvent(id).Err(), conn.Exec(`COMMIT`)); err != nil {
		t.Fatal(err)
	}
	p, err := alarms.Register(alarms.Config{SingleNode: true, Host: noTake{alarms.OneNode{Name: "alone"}}, Timer: sweeper.NewTimer(hostmod.DefaultRetryMax)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Replicate(ctx, ta, alarms.AfterEvent); err != nil {
		t.Fatalf("Replicate on a SingleNode plugin: %v", err)
	}
	err = ta.Upload(ctx)
	if err == nil || !strings.Contains(err.Error(), "t/c/alone") || !strings.Contains(err.Error(), "no bucket") {
		t.Fatalf("Upload without a bucket: %v; want an error naming the actor and the missing bucket", err)
	}
}

// aloneActor is a TableActor with the methods its host adds.
type aloneActor struct{ alarms.TableActor }

func (a *aloneActor) Release(context.Context) {}
func (a *aloneActor) RunAlarm(context.Context) (hostmod.Delivery, error) {
	return hostmod.Delivery{}, errors.New("no delivery in this test")
}

type noTake struct{ alarms.OneNode }

func (noTake) Take(context.Context, abi.ActorID) (alarms.Actor, func(error), error) {
	return nil, nil, errors.New("no delivery in this test")
}
