package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// heldSyncs holds every sync of the node journal's files until release is
// closed, and counts the writes to the actors' database files meanwhile
// (a checkpoint's).
type heldSyncs struct {
	holding  atomic.Bool
	release  chan struct{}
	dbWrites atomic.Int64
}

func holdJournalSyncs(t *testing.T) *heldSyncs {
	h := &heldSyncs{release: make(chan struct{})}
	t.Cleanup(engine.SetIOHook(func(op, name string, off, n int64) {
		if !h.holding.Load() {
			return
		}
		switch {
		case op == "sync" && strings.Contains(name, "journal-"):
			<-h.release
		case op == "write" && strings.HasSuffix(name, ".db"):
			h.dbWrites.Add(1)
		}
	}))
	t.Cleanup(h.let)
	return h
}

func (h *heldSyncs) let() {
	if h.holding.Swap(false) {
		close(h.release)
	}
}

// returns runs f on a goroutine and returns a channel that gets f's
// error once it has returned (a panic as an error).
func returns(f func() error) <-chan error {
	c := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				c <- fmt.Errorf("panicked: %v", r)
			}
		}()
		c <- f()
	}()
	return c
}

// stillRunning fails the test if c has a value within a while: the call
// must wait for the journal, which is held.
func stillRunning(t *testing.T, c <-chan error, what string) {
	t.Helper()
	select {
	case err := <-c:
		t.Fatalf("%s returned (%v) while the journal's sync was held", what, err)
	case <-time.After(300 * time.Millisecond):
	}
}

// waitsForTheJournal checks that the call c waits for the journal's
// syncs: it has not returned while they are held, and returns once they
// are let go.
func (h *heldSyncs) waitsForTheJournal(t *testing.T, c <-chan error, what string) {
	t.Helper()
	stillRunning(t, c, what)
	h.let()
	returned(t, c, what)
}

func returned(t *testing.T, c <-chan error, what string) {
	t.Helper()
	select {
	case err := <-c:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not return", what)
	}
}

// journalGuest starts an engine with the journal in dir; its function
// opens an actor of guest there with its alarm due.
func journalGuest(t *testing.T, dir, guest string, opts ...engine.Option) (*engine.Engine, func(name string) *engine.Actor) {
	ctx := context.Background()
	eng, err := engine.NewEngine(ctx, append([]engine.Option{engine.WithJournal(dir)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(ctx) })
	cl, err := eng.Compile(ctx, "bench", testguest.Fixture(t, guest))
	if err != nil {
		t.Fatal(err)
	}
	return eng, func(name string) *engine.Actor {
		a, err := eng.Open(ctx, abi.ActorID{Tenant: "g", Class: "bench", Name: name}, cl, filepath.Join(dir, name+".db"))
		if err != nil {
			t.Fatal(err)
		}
		// Due at once; the delivery clears it (a write).
		if _, err := a.Request(ctx, timeReq(1)); err != nil {
			t.Fatal(err)
		}
		return a
	}
}

// A delivery whose handler succeeded returns without waiting for its
// commit's sync, and nothing learns of it before that sync: the actor's
// next call (a read of its state), a call after its database was closed
// to make room for another, and a checkpoint in the delivery's own
// commit all wait for the journal (the output gate; WithSyncedDeliveries),
// unless an upload of an image that holds the delivery is in the bucket
// (Replicated): then the next call does not wait, but Settle, a close and
// a reopening still do.
func TestADeliveryIsReportedOnlyOnceItsCommitIsDurable(t *testing.T) {
	ctx := context.Background()
	deliver := func(a *engine.Actor) func() error {
		return func() error {
			d, err := a.DeliverAlarm(ctx)
			if err == nil && (!d.Ran || d.Err != nil) {
				t.Errorf("delivery: ran %v, error %v", d.Ran, d.Err)
			}
			return err
		}
	}
	fail := func(a *engine.Actor) func() error {
		return func() error {
			d, err := a.DeliverAlarm(ctx)
			if err == nil && (!d.Ran || d.Err == nil) {
				t.Errorf("a failing delivery: ran %v, error %v", d.Ran, d.Err)
			}
			return err
		}
	}
	// start opens actor a of guest with its alarm due, and holds the
	// journal's syncs from then on.
	start := func(t *testing.T, guest string, opts ...engine.Option) (*heldSyncs, *engine.Actor) {
		h := holdJournalSyncs(t)
		_, actor := journalGuest(t, t.TempDir(), guest, opts...)
		a := actor("a")
		h.holding.Store(true)
		return h, a
	}
	state := func(a *engine.Actor) func() error {
		return func() error { _, err := a.State(ctx); return err }
	}

	t.Run("next_call", func(t *testing.T) {
		h, a := start(t, "oneshot_alarm")
		defer h.let()
		returned(t, returns(deliver(a)), "the delivery (its commit deferred)")
		read := returns(state(a))
		h.waitsForTheJournal(t, read, "the read of the delivered actor's state")
	})

	t.Run("reopened", func(t *testing.T) {
		h := holdJournalSyncs(t)
		defer h.let()
		_, actor := journalGuest(t, t.TempDir(), "oneshot_alarm", engine.WithMaxOpenDatabases(1))
		a := actor("a")
		b := actor("b") // a's database closes to make room
		if _, err := a.State(ctx); err != nil {
			t.Fatal(err)
		}
		h.holding.Store(true)
		returned(t, returns(deliver(a)), "the delivery (its commit deferred)")
		// b takes a's room: a's database closes without waiting.
		returned(t, returns(func() error {
			_, err := b.State(hostmod.Unreported(ctx))
			return err
		}), "another actor's call, closing the delivered one's database")
		// Even a read the caller reports to no one (the plugin's, to re-arm
		// its timer) waits, once the database must open again.
		read := returns(func() error { _, err := a.State(hostmod.Unreported(ctx)); return err })
		h.waitsForTheJournal(t, read, "the read of the delivered actor, its database opened again")
	})

	t.Run("upload", func(t *testing.T) {
		h, a := start(t, "oneshot_alarm")
		defer h.let()
		before, err := a.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		returned(t, returns(deliver(a)), "the delivery (its commit deferred)")
		// An image for an upload, which makes it durable in the bucket,
		// does not wait for the local sync, and holds the delivery.
		var image []byte
		returned(t, returns(func() (err error) {
			image, err = a.SnapshotForUpload(ctx, nil)
			return err
		}), "the image for an upload")
		if bytes.Equal(image, before) {
			t.Fatal("the image for an upload is the database before the delivery")
		}
		// What records the local file as matching that upload waits.
		h.waitsForTheJournal(t, returns(a.Settle), "settling the delivered actor")
	})

	// An upload of an image that holds the delivery, reported in the
	// bucket (Replicated), lifts the gate for the actor's next call; what
	// records the local file as matching it (Settle), a close and a
	// reopening still wait.
	replicated := func(t *testing.T, a *engine.Actor) {
		t.Helper()
		returned(t, returns(deliver(a)), "the delivery (its commit deferred)")
		returned(t, returns(func() error { _, err := a.SnapshotForUpload(ctx, nil); return err }), "the image for an upload")
		a.Replicated()
	}
	t.Run("replicated", func(t *testing.T) {
		h, a := start(t, "oneshot_alarm")
		defer h.let()
		replicated(t, a)
		returned(t, returns(state(a)), "the read of the delivered actor's state, its upload in the bucket")
		h.waitsForTheJournal(t, returns(a.Settle), "settling the replicated actor")
	})
	t.Run("replicated_closed", func(t *testing.T) {
		h, a := start(t, "oneshot_alarm")
		defer h.let()
		replicated(t, a)
		h.waitsForTheJournal(t, returns(func() error { return a.Close(ctx) }), "closing the replicated actor")
	})
	t.Run("replicated_reopened", func(t *testing.T) {
		h := holdJournalSyncs(t)
		defer h.let()
		_, actor := journalGuest(t, t.TempDir(), "oneshot_alarm", engine.WithMaxOpenDatabases(1))
		a := actor("a")
		b := actor("b")
		if _, err := a.State(ctx); err != nil {
			t.Fatal(err)
		}
		h.holding.Store(true)
		replicated(t, a)
		returned(t, returns(func() error {
			_, err := b.State(hostmod.Unreported(ctx))
			return err
		}), "another actor's call, closing the replicated one's database")
		h.waitsForTheJournal(t, returns(state(a)), "the read of the replicated actor, its database opened again")
	})
	t.Run("image_before_the_delivery", func(t *testing.T) {
		h, a := start(t, "oneshot_alarm")
		defer h.let()
		// An image made before the delivery does not hold it: reported in
		// the bucket, it lifts nothing.
		returned(t, returns(func() error { _, err := a.SnapshotForUpload(ctx, nil); return err }), "an image before the delivery")
		returned(t, returns(deliver(a)), "the delivery (its commit deferred)")
		a.Replicated()
		h.waitsForTheJournal(t, returns(state(a)), "the read of the delivered actor, an earlier image in the bucket")
	})

	t.Run("closed", func(t *testing.T) {
		h, a := start(t, "oneshot_alarm")
		defer h.let()
		returned(t, returns(deliver(a)), "the delivery (its commit deferred)")
		c := returns(func() error { return a.Close(ctx) })
		h.waitsForTheJournal(t, c, "closing the delivered actor")
	})

	t.Run("checkpoint", func(t *testing.T) {
		t.Cleanup(engine.SetWALCheckpointPages(1)) // every commit checkpoints
		h, a := start(t, "oneshot_alarm")
		defer h.let()
		d := returns(deliver(a))
		stillRunning(t, d, "a delivery whose commit checkpoints")
		if n := h.dbWrites.Load(); n > 0 {
			t.Fatalf("%d writes to the database file before the WAL's frames were durable", n)
		}
		h.let()
		returned(t, d, "the delivery")
		// The checkpoint waited for the commit: the next call has nothing
		// left to wait for.
		returned(t, returns(state(a)), "the next call after a delivery that checkpointed")
	})

	t.Run("failed", func(t *testing.T) {
		h, a := start(t, "fail_on_alarm")
		defer h.let()
		d := returns(fail(a))
		h.waitsForTheJournal(t, d, "a delivery whose handler failed (its retry committed)")
	})

	t.Run("synced", func(t *testing.T) {
		h, a := start(t, "oneshot_alarm", engine.WithSyncedDeliveries(true))
		defer h.let()
		d := returns(deliver(a))
		h.waitsForTheJournal(t, d, "a delivery with WithSyncedDeliveries")
	})
}

// A delivery whose last one's upload was reported in the bucket
// (Replicated) asks the journal for its sync lazily: no sync follows it
// within the deferred delay, and one follows at once when something
// waits for it (Settle) or when a delivery not so reported asks. A
// delivery whose previous upload was not reported asks at once.
func TestAReplicatedDeliveryAsksTheJournalLazily(t *testing.T) {
	t.Cleanup(engine.SetReplicatedDelay(time.Hour))
	ctx := context.Background()
	eng, open := journalGuest(t, t.TempDir(), "oneshot_alarm")
	// deliver sets the alarm due (arm: a request, which waits for its
	// own sync) and delivers it (deliverArmed), and returns the journal's
	// syncs before the delivery.
	var deliverArmed func(a *engine.Actor) int64
	arm := func(a *engine.Actor) {
		t.Helper()
		if _, err := a.Request(ctx, timeReq(1)); err != nil {
			t.Fatal(err)
		}
		// The flusher's turn after the request's batch (its kick left
		// over, the request still counted as waiting) flushes whatever
		// joined meanwhile: let it pass before the delivery.
		time.Sleep(20 * time.Millisecond)
	}
	deliver := func(a *engine.Actor) int64 {
		t.Helper()
		arm(a)
		return deliverArmed(a)
	}
	deliverArmed = func(a *engine.Actor) int64 {
		t.Helper()
		syncs := eng.Journal().Syncs
		d, err := a.DeliverAlarm(ctx)
		if err != nil || !d.Ran || d.Err != nil {
			t.Fatalf("delivery: ran %v, error %v, %v", d.Ran, d.Err, err)
		}
		return syncs
	}
	upload := func(a *engine.Actor, reported bool) {
		t.Helper()
		if _, err := a.SnapshotForUpload(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if reported {
			a.Replicated()
		}
	}
	synced := func(since int64, what string) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); eng.Journal().Syncs == since; {
			if time.Now().After(end) {
				t.Fatalf("%s: the journal was not synced", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	notSynced := func(since int64, what string) {
		t.Helper()
		time.Sleep(100 * time.Millisecond) // a hundred times the deferred delay
		if n := eng.Journal().Syncs; n != since {
			t.Fatalf("%s: the journal was synced %d times", what, n-since)
		}
	}
	a, b := open("a"), open("b")

	s := deliver(a)
	synced(s, "the actor's first delivery")
	upload(a, true)
	s = deliver(a)
	notSynced(s, "a delivery after one whose upload was reported")
	returned(t, returns(a.Settle), "settling the actor") // waits: the batch is written at once
	synced(s, "settled")

	// Another actor's delivery not replicated ends the lazy batch's delay.
	upload(a, true)
	arm(b)
	s = deliver(a)
	notSynced(s, "a replicated delivery")
	s = deliverArmed(b)
	synced(s, "another actor's delivery, not replicated, after a replicated one")

	// An upload not reported (it failed): the next delivery asks at once.
	upload(a, true)
	s = deliver(a)
	upload(a, false)
	notSynced(s, "a replicated delivery")
	s = deliver(a) // its request waited for the batch
	synced(s, "a delivery after one whose upload was not reported")
}
