package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/internal/fakeclock"
)

// blindLister is a bucket whose listings of snapshots show nothing at
// all: the worst an erasure-coded store's listing could do to a key being
// overwritten. What the actor's state is must not depend on them.
type blindLister struct{ bucket.Bucket }

func (b blindLister) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	keys, err := b.Bucket.List(ctx, prefix, startAfter, limit)
	if strings.Contains(prefix, "state/") {
		return nil, err
	}
	return keys, err
}

func (b blindLister) Head(ctx context.Context, key string) (string, error) {
	return bucket.Head(ctx, b.Bucket, key)
}

// upload uploads body as hold h's snapshot and records it as the hold's
// state, as a node does once the upload returned while the hold was valid.
func upload(t *testing.T, n testNode, h cluster.Hold, b bucket.Bucket, body string) cluster.Hold {
	t.Helper()
	prev := ""
	if h.State.Generation == h.Generation {
		prev = h.State.ETag
	}
	s, err := cluster.NewReplica(b, cluster.DefaultPrefix).Upload(context.Background(), h.Actor, h.Generation, prev, []byte(body))
	if err != nil {
		t.Fatalf("upload %q: %v", body, err)
	}
	return n.holds.Uploaded(h, s)
}

// read downloads the state a hold names.
func read(t *testing.T, b bucket.Bucket, h cluster.Hold) string {
	t.Helper()
	if h.State.Key == "" {
		return "<none>"
	}
	body, _, err := cluster.NewReplica(b, cluster.DefaultPrefix).Download(context.Background(), h.Actor, h.State)
	if err != nil {
		t.Fatalf("download %s: %v", h.State.Key, err)
	}
	return string(body)
}

// TestTheStateComesFromTheRecordsNotAListing: a node taking an actor
// learns its newest state from the ownership record (and a HEAD of the
// last hold's snapshot), so listings that show no snapshot at all change
// nothing: through a first take, uploads, a release, a takeover from a
// node that died after uploading, a takeover from one that died without
// uploading, a delete (a tombstone), and ReadState for a reader that
// takes nothing. Each hold writes one key, overwritten by its uploads.
func TestTheStateComesFromTheRecordsNotAListing(t *testing.T) {
	onBoth(t, func(t *testing.T, raw bucket.Bucket) {
		ctx := context.Background()
		b := blindLister{raw}
		clk := fakeclock.New(t0)
		a, o := startNode(t, b, clk, "a"), startNode(t, b, clk, "o")
		state := func(want string) {
			t.Helper()
			s, ok, err := cluster.ReadState(ctx, b, "", actorX)
			if err != nil {
				t.Fatal(err)
			}
			got := "<none>"
			if ok {
				body, _, err := cluster.NewReplica(b, cluster.DefaultPrefix).Download(ctx, actorX, s)
				if err != nil {
					t.Fatal(err)
				}
				got = string(body)
			}
			if got != want {
				t.Fatalf("ReadState reads %q, want %q", got, want)
			}
		}
		state("<none>")
		h := acquire(t, a, actorX)
		if h.State.Key != "" {
			t.Fatalf("the first hold names state %+v, want none", h.State)
		}
		h = upload(t, a, h, b, "v1")
		h = upload(t, a, h, b, "v2")
		state("v2")
		if err := a.holds.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
		h = acquire(t, o, actorX)
		if got := read(t, b, h); got != "v2" {
			t.Fatalf("after a release the taker restores %q, want v2", got)
		}
		h = upload(t, o, h, b, "v3")
		// o dies holding the actor, after an upload its record does not
		// name: a takes it over once o's lease expired.
		o.Kill()
		expire(t, clk, a, "o")
		h = acquire(t, a, actorX)
		if got := read(t, b, h); got != "v3" {
			t.Fatalf("after a takeover the taker restores %q, want v3 (the dead holder's upload)", got)
		}
		keys, err := raw.List(ctx, "cluster/state/", "", 100)
		if err != nil {
			t.Fatal(err)
		}
		// One key a hold: the first hold's, overwritten, and the second's.
		if len(keys) != 2 || !strings.HasSuffix(keys[0], fmt.Sprintf("%020d-%020d", 1, 0)) || !strings.HasSuffix(keys[1], fmt.Sprintf("%020d-%020d", 2, 0)) {
			t.Fatalf("snapshot keys %q, want one per hold with sequence 0", keys)
		}
		// a dies too, having uploaded nothing: the next taker restores
		// what a found, v3.
		a.Kill()
		n := startNode(t, b, clk, "n")
		expire(t, clk, n, "a")
		h = acquire(t, n, actorX)
		if got := read(t, b, h); got != "v3" {
			t.Fatalf("after a holder that uploaded nothing died, the taker restores %q, want v3", got)
		}
		// n releases the actor having uploaded nothing: its release names
		// what it found, and the next take restores that.
		if err := n.holds.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
		h = acquire(t, n, actorX)
		if got := read(t, b, h); got != "v3" {
			t.Fatalf("after a release with no upload, the taker restores %q, want v3", got)
		}
		// A delete is a tombstone: an empty snapshot.
		h = upload(t, n, h, b, "")
		state("")
		if err := n.holds.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
		m := startNode(t, b, clk, "m")
		if got := read(t, b, acquire(t, m, actorX)); got != "" {
			t.Fatalf("after a delete the taker restores %q, want the tombstone", got)
		}
	})
}

// expire advances the clock until n judges node id's lease expired.
func expire(t *testing.T, clk *fakeclock.Clock, n testNode, id string) {
	t.Helper()
	for range 100 {
		if err := n.RefreshNow(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n.Expired(id) {
			return
		}
		if err := n.RenewNow(context.Background()); err != nil {
			t.Fatal(err)
		}
		clk.Advance(cluster.DefaultTTL / 3)
	}
	t.Fatalf("%s never judged %s expired", n.NodeID(), id)
}

// TestAStateTheRecordsNameIsNeverMissing: a snapshot the records name that
// the bucket lacks (removed by hand) is an error naming the actor, never
// "the bucket has nothing": restoring nothing would create the actor anew.
func TestAStateTheRecordsNameIsNeverMissing(t *testing.T) {
	ctx := context.Background()
	b := bucket.NewMem()
	clk := fakeclock.New(t0)
	a := startNode(t, b, clk, "a")
	h := upload(t, a, acquire(t, a, actorX), b, "v1")
	if err := a.holds.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, h.State.Key); err != nil {
		t.Fatal(err)
	}
	s, ok, err := cluster.ReadState(ctx, b, "", actorX)
	if err != nil || !ok || s.Key != h.State.Key {
		t.Fatalf("ReadState = %+v, %v, %v; want the snapshot the record names", s, ok, err)
	}
	_, _, err = cluster.NewReplica(b, cluster.DefaultPrefix).Download(ctx, actorX, s)
	var ae *abi.ActorError
	if !errors.Is(err, bucket.ErrNotFound) || !errors.As(err, &ae) || ae.ID != actorX {
		t.Fatalf("Download of a missing named snapshot: %v; want ErrNotFound naming the actor", err)
	}
}

// TestARecordFromBeforeIsReadFromAListing: a record written before records
// named the state (no "state" field) is read as then, from the newest key
// a listing shows, keys of one upload each included; the hold taken on it
// names that key, so later takes read no listing.
func TestARecordFromBeforeIsReadFromAListing(t *testing.T) {
	ctx := context.Background()
	b := bucket.NewCounting(bucket.NewMem())
	clk := fakeclock.New(t0)
	r := cluster.NewReplica(b, cluster.DefaultPrefix)
	for seq, body := range []string{"old1", "old2"} {
		if _, err := b.Put(ctx, r.Key(actorX, 3, uint64(seq+1)), []byte(body), bucket.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Put(ctx, cluster.HoldKey("", actorX), []byte(`{"node_id":"","generation":3,"addr":""}`), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	a := startNode(t, b, clk, "a")
	b.Reset()
	h := acquire(t, a, actorX)
	if got := read(t, b, h); got != "old2" || h.Generation != 4 {
		t.Fatalf("the take of a record from before restores %q at generation %d, want old2 at 4", got, h.Generation)
	}
	if c := b.Counts(); c.List != 1 {
		t.Fatalf("the take sent %+v, want one LIST", c)
	}
	if err := a.holds.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	h = acquire(t, a, actorX)
	if got := read(t, b, h); got != "old2" {
		t.Fatalf("the next take restores %q, want old2", got)
	}
	if c := b.Counts(); c.List != 0 {
		t.Fatalf("the next take sent %+v, want no LIST", c)
	}
}

// A takeover from a holder that died after uploading reads that upload
// once: the taker learns it is the state with a GET of the dead hold's
// key, whose body the restore then uses (Hold.Fetched), not a HEAD and a
// download after it. The take is three requests: the ownership record, the
// snapshot, and the conditional write of the record (the holder's lease,
// judged expired, is not read again: the record notes its version).
// A take whose record names its state already fetches nothing.
func TestATakeoverReadsTheDeadHoldersUploadOnce(t *testing.T) {
	onBoth(t, func(t *testing.T, raw bucket.Bucket) {
		ctx := context.Background()
		clk := fakeclock.New(t0)
		counted := bucket.NewCounting(raw)
		a, o := startNode(t, counted, clk, "a"), startNode(t, raw, clk, "o")
		h := acquire(t, o, actorX)
		h = upload(t, o, h, raw, "v1")
		if err := o.holds.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
		// The record names v1, the state: nothing to fetch.
		h = acquire(t, o, actorX)
		if _, ok := h.Fetched(); ok {
			t.Errorf("a take whose record names the state fetched it")
		}
		upload(t, o, h, raw, "v2")
		o.Kill()
		expire(t, clk, a, "o")
		counted.Reset()
		h = acquire(t, a, actorX)
		got := counted.Counts()
		body, ok := h.Fetched()
		if !ok || string(body) != "v2" {
			t.Errorf("the takeover fetched %q (%v), want the dead holder's upload v2", body, ok)
		}
		if h.State.Generation != h.Generation-1 || h.State.ETag == "" {
			t.Errorf("the takeover's state %+v, want the dead hold's own snapshot with its ETag", h.State)
		}
		if got.Get != 2 || got.Put != 1 || got.Head != 0 || got.List != 0 || got.Delete != 0 {
			t.Errorf("the takeover sent %+v; want 2 GETs (record, snapshot) and 1 PUT", got)
		}
		if kept := h.WithoutFetched(); func() bool { _, ok := kept.Fetched(); return ok }() {
			t.Errorf("WithoutFetched kept the body")
		}
	})
}
