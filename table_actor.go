package alarms

import (
	"context"
	"errors"
	"os"

	"github.com/ncruces/go-sqlite3"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/hostmod"
)

// TableActor is most of the plugin's view ([Actor]) of an actor whose
// database is one file a host keeps itself, with the alarm table of package
// hostmod in it, on a host that runs as one node ([OneNode]): the hold lasts
// from Open to Close, in generation 1, and the state is uploaded as the
// whole file under the key "state/<tenant>/<class>/<name as hex>". A host
// embeds it in its own actor, calls Open when it opens the actor's
// database and Close when it closes it, and adds RunAlarm and Release.
type TableActor struct {
	// Actor names the actor.
	Actor abi.ActorID
	// Path is the database file. Upload sends it whole, so it must hold
	// the committed state whenever no transaction is open: a rollback
	// journal, or a WAL checkpointed before each upload.
	Path string
	// Bucket is where the state and the alarm index go. A host whose
	// plugin runs alone, without a bucket (Config.SingleNode), leaves it
	// nil: Open then reads nothing, and Upload, which such a plugin never
	// calls, fails with ErrNoBucket.
	Bucket bucket.Bucket
	// Table is the alarm table, set by Open: hostmod.Table.NewEvent and
	// DeliverAlarm run the guest's events on it.
	Table *hostmod.Table

	uploaded, bucketHad bool
}

// ErrNoBucket is wrapped by the error of TableActor.Upload without a
// Bucket: only a plugin that runs alone (Config.SingleNode), which
// uploads nothing, needs none.
var ErrNoBucket = errors.New("no bucket to upload to (only a SingleNode plugin runs without one)")

// Open creates the alarm table in conn's main database (hostmod.NewTable)
// and notes whether the bucket, if any, has the actor's state. The host
// calls it each time it opens the actor's database, before its first
// event; its errors, like the other methods', leave naming the actor to
// the host.
func (t *TableActor) Open(ctx context.Context, conn *sqlite3.Conn) (err error) {
	if t.Table, err = hostmod.NewTable(conn); err != nil || t.Bucket == nil {
		return err
	}
	_, _, err = t.Bucket.Get(ctx, t.stateKey())
	t.bucketHad = err == nil
	if errors.Is(err, bucket.ErrNotFound) {
		err = nil
	}
	return err
}

func (t *TableActor) stateKey() string { return "state/" + TimerKey(t.Actor) }

// Close closes the alarm table (before the host closes the connection):
// the hold is over.
func (t *TableActor) Close() error {
	err := t.Table.Close()
	t.Table = nil
	return err
}

// ID is the actor.
func (t *TableActor) ID() abi.ActorID { return t.Actor }

// Hold is in generation 1 (one node holds every actor for as long as it
// runs) and valid from Open to Close; Uploaded once Upload has succeeded
// since Open, and BucketHad when the bucket had the actor's state as Open
// ran.
func (t *TableActor) Hold() Hold {
	return Hold{Generation: 1, Valid: t.Table != nil, Uploaded: t.uploaded, BucketHad: t.bucketHad}
}

// State reads the committed alarm and alarm_indexed from the table.
// InitRecorded is true: the host calls it only for an actor whose database
// exists.
func (t *TableActor) State(context.Context) (hostmod.State, error) {
	s, err := t.Table.State()
	s.InitRecorded = true
	return s, err
}

// SetMeta commits one meta row of the table.
func (t *TableActor) SetMeta(_ context.Context, key, value string) error {
	return t.Table.SetMeta(key, value)
}

// Upload puts the database file, the committed state, in the bucket.
func (t *TableActor) Upload(ctx context.Context) error {
	if t.Bucket == nil {
		return &abi.ActorError{ID: t.Actor, Op: "upload", Err: ErrNoBucket}
	}
	data, err := os.ReadFile(t.Path)
	if err == nil {
		_, err = t.Bucket.Put(ctx, t.stateKey(), data, bucket.Cond{})
	}
	t.uploaded = t.uploaded || err == nil
	return err
}
