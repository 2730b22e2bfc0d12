package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/format"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/sweeper"
)

// ClusterConfig makes a node one of a cluster that shares a bucket.
type ClusterConfig struct {
	// Bucket holds node leases, holds and replicated actor state.
	Bucket bucket.Bucket
	// Prefix is where the cluster keeps all its objects (default
	// "cluster/"), at most MaxPrefixLen bytes: node leases, holds,
	// replicated state, and the alarm index (<Prefix>alarms/).
	Prefix string
	// NodeID names this node in the cluster (default: "node-" and random
	// hex). It may be stable across restarts: a node started under the
	// name of one that crashed takes it back once that one's lease has
	// expired, and the crashed one's holds are void.
	NodeID string
	// Addr is this node's HTTP address as other nodes reach it (host:port).
	Addr string
	// Lease timing: see cluster.LeaseConfig (defaults 10 s, 1 s, 2 s).
	LeaseTTL, LeaseMargin, LeaseGrace time.Duration
	// LeaseReadPeriod is how often the node reads the other nodes' leases
	// (cluster.LeaseConfig.ObservePeriod; default LeaseTTL/3 while fewer
	// than cluster.LargeCluster nodes are live, 4/5 of LeaseTTL from then
	// on: cluster.LeaseConfig.SlowObservePeriod).
	LeaseReadPeriod time.Duration
	// IdleTimeout, if set, replaces Config.IdleTimeout in cluster mode:
	// an actor no event reached for this long is released.
	IdleTimeout time.Duration
	// Tenants, if not empty, are the only tenants whose alarm index this
	// node sweeps. Empty: every tenant with entries in the index (found by
	// a delimited LIST each sweep).
	Tenants []string
	// SweepPeriod is alarm_sweep (default 10 s).
	SweepPeriod time.Duration
	// SweepConcurrency is how many tenants' indexes a sweep lists at
	// once (default sweeper.DefaultConcurrency, 32).
	SweepConcurrency int
	// SweepMaxDeliveries caps the deliveries one sweep of a tenant
	// offers (default sweeper.DefaultMaxDeliveries, 256); see
	// alarms.Config.SweepMaxDeliveries.
	SweepMaxDeliveries int
	// SweepWalkers is how many nodes walk each tenant's index per class
	// (default sweeper.DefaultWalkers, 2); SweepSafetyPeriod the longest
	// a walker leaves a tenant unlisted (default 360 sweep periods, 1 h
	// at the default period). See
	// alarms.Config.
	SweepWalkers      int
	SweepSafetyPeriod time.Duration
	// FailoverWait is how long a client request waits, inside the node,
	// for the actor to become reachable again when it is not: its holder
	// does not answer (a connection to it cannot be made), or the node
	// that would hold it has no valid lease for now. The node tries the
	// request again every FailoverPoll meanwhile, and answers 503 with
	// Retry-After once the wait is over. Default: LeaseTTL + LeaseGrace +
	// the leases' reading period (cluster.Leases.ReadPeriod), which
	// covers a holder's death (a takeover once its lease is seen unchanged
	// for TTL + grace) and a reading of the leases; negative: no waiting.
	FailoverWait time.Duration
	// DeleteWindow is how long the node gathers the DELETEs of replaced
	// index entries and snapshots before it sends them in one multi-object
	// request (default bucket.DefaultDeleteWindow, 100 ms).
	DeleteWindow time.Duration
}

// MaxPrefixLen is the longest ClusterConfig.Prefix: with the longest actor
// identity abi accepts, a snapshot key is then at most 888 bytes and an
// index entry (under the prefix too) at most 919, within S3's 1,024.
const MaxPrefixLen = 512

// EventKind says when an event's writes reach the bucket.
type EventKind int

const (
	// Exec commits, replies, then replicates (in the background, at once).
	Exec EventKind = iota
	// ExecDurable commits and uploads before it replies: an acknowledged
	// write is in the bucket.
	ExecDurable
)

// ErrClassNotServed is returned for an actor whose class this node does
// not serve.
var ErrClassNotServed = errors.New("not served by this node")

// ErrHeldElsewhere is returned (wrapped in *cluster.HeldElsewhereError) when
// another node holds the actor.
var ErrHeldElsewhere = errors.New("held by another node")

// entry is the node's record of one actor. Its mutex serialises everything
// done to the actor: events, uploads, releases.
type entry struct {
	id abi.ActorID
	mu sync.Mutex

	a    *engine.Actor
	hold cluster.Hold
	held bool

	last      cluster.Snapshot // the snapshot the local database matches (its ETag too)
	hasLast   bool
	bucketHad bool // the bucket had state for the actor when it was taken
	uploaded  bool // this hold has uploaded
	dirty     bool // committed events not yet uploaded
	joining   bool // the next upload is a joining node's first (R4)
	unsynced  bool // this hold uploaded and removed the sidecar (.sync); written again on release
	lastUsed  time.Time
	gone      bool // dropped from the node's map: look the actor up again
	// letterChecked: this opening of the actor has no dead-letter record
	// left to delete when an event sets its alarm (alarmSetAgain).
	letterChecked bool
}

func (n *Node) entry(id abi.ActorID) (*entry, error) {
	if err := id.Validate(); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, &abi.ActorError{ID: id, Err: errors.New("node closed")}
	}
	if _, ok := n.classes[id.Class]; !ok {
		return nil, &abi.ActorError{ID: id, Err: fmt.Errorf("class %q is %w", id.Class, ErrClassNotServed)}
	}
	e, ok := n.entries[id]
	if !ok {
		e = &entry{id: id}
		n.entries[id] = e
	}
	return e, nil
}

func (n *Node) path(id abi.ActorID) string { return Path(n.cfg.DataDir, id) }

// open makes e ready for an event (e.mu held): in cluster mode it takes the
// hold and restores the actor from the bucket when the local database is
// not the newest state.
func (n *Node) open(ctx context.Context, e *entry) error {
	e.lastUsed = n.cfg.Clock.Now()
	callTestHook("open", e.id)
	if n.leases == nil {
		if e.a != nil {
			return nil
		}
		return n.openLocal(ctx, e, "")
	}
	// The hold, not only the lease: after a lapse the lease can be valid
	// again in a new epoch, in which holds of the old one are void (another
	// node may hold the actor now).
	if e.a != nil && e.held && n.holds.Valid(e.hold) {
		return nil
	}
	if e.a != nil && e.held && !n.leases.Valid() {
		// The lease lapsed (a bucket outage, a partition): keep the actor
		// open and its hold, to take it again with one request once the
		// lease is valid again (retake), rather than release it, read it
		// and take it anew; refuse the event meanwhile, as a take would.
		if err := n.bucketDown(e.id); err != nil {
			return err
		}
		return &abi.ActorError{ID: e.id, Op: "take", Err: cluster.ErrLeaseNotValid}
	}
	if e.a != nil && e.held && n.retake(ctx, e) {
		return nil
	}
	if e.a != nil || e.held {
		// Nothing committed here since the last snapshot (none pending, as
		// after a lapse in a bucket outage): the local file is that
		// snapshot, so its sidecar says so and taking the actor again
		// downloads nothing unless the bucket moved on. Without it, every
		// actor touched during an outage was downloaded afresh after it.
		// Only once that file is durable here (Settle; giveUp's close
		// waits as well): an upload does not wait for a delivery's commit.
		keep := e.a != nil && e.hasLast && !e.dirty && e.a.Settle() == nil
		last := e.last
		n.giveUp(ctx, e, errors.New("the hold is no longer valid (the node lease lapsed)"))
		if keep {
			n.vouch(e, last, true)
		}
	}
	if err := n.bucketDown(e.id); err != nil {
		return err
	}
	hold, err := n.holds.Acquire(ctx, e.id)
	if err != nil {
		return err
	}
	fetched, wasFetched := hold.Fetched()
	hold = hold.WithoutFetched()
	unsynced, unchecked, err := n.restore(ctx, e, hold.State, fetched, wasFetched)
	if err != nil {
		n.releaseHold(ctx, hold)
		return err
	}
	e.hold, e.held, e.uploaded, e.dirty, e.unsynced = hold, true, false, false, unsynced
	// The new hold replaced the record conditionally: an earlier hold whose
	// release failed has nothing left to release.
	n.mu.Lock()
	delete(n.unreleased, e.id)
	n.mu.Unlock()
	restored := ""
	if unchecked {
		restored = e.last.Key
	}
	if err := n.openLocal(ctx, e, restored); err != nil {
		n.releaseHold(ctx, hold)
		e.held = false
		return err
	}
	n.log.Debug("took actor", "actor", e.id.String(), "generation", hold.Generation, "restored", e.last.Key, "bucket_had", e.bucketHad)
	// The new holder arms its timer with the committed alarm.
	if st, err := e.a.State(ctx); err == nil && st.Alarm != nil {
		n.timer.Set(timerKey(e.id), *st.Alarm)
	}
	return nil
}

// retake takes again a hold of an earlier epoch of the lease (a lapse
// voided it) with one conditional write of its record, keeping the open
// actor (e.mu held): it succeeds only if no node wrote the record since,
// so the hold's state is still the newest and the local database (its
// commits since, uploaded or not) is the actor (docs/design.md#retake).
// The new hold has uploaded nothing: the fence covers an upload of the
// old one that lands late. False: take the actor anew, giving the local
// copy up.
func (n *Node) retake(ctx context.Context, e *entry) bool {
	if !n.leases.Valid() {
		return false
	}
	hold, err := n.holds.Retake(ctx, e.hold)
	if err != nil {
		n.log.Debug("could not take the actor again after a lapse; taking it anew", "actor", e.id.String(), "generation", e.hold.Generation, "error", err)
		return false
	}
	e.hold, e.uploaded = hold, false
	if hold.State.Key != "" {
		// The bucket has the actor (this node's own uploads), as a take
		// that restored would note.
		e.bucketHad, e.joining = true, false
	}
	n.mu.Lock()
	delete(n.unreleased, e.id)
	n.mu.Unlock()
	n.log.Debug("took the actor again after a lapse", "actor", e.id.String(), "generation", hold.Generation)
	return true
}

// ErrBucketUnreachable is wrapped by the errors of events that need the
// bucket while it has not taken this node's lease renewals for longer than
// a failover wait, so the lease lapsed and cannot come back until the
// bucket answers: they fail at once (an HTTP 503 with Retry-After) rather
// than waiting for a renewal that would not come.
var ErrBucketUnreachable = errors.New("the bucket is unreachable")

// bucketDown returns an error wrapping ErrBucketUnreachable, naming the
// renewals' last error, when the node lease is not valid and renewals have
// failed for longer than the failover wait; nil otherwise (the lease
// valid, or lapsed for a reason waiting may cure).
func (n *Node) bucketDown(id abi.ActorID) error {
	if n.leases.Valid() {
		return nil
	}
	since, err := n.leases.RenewalsFailing()
	if err == nil {
		return nil
	}
	wait := n.failoverWait()
	if d := n.cfg.Clock.Now().Sub(since); d > wait+n.leaseTTL() {
		return &abi.ActorError{ID: id, Err: fmt.Errorf("%w: every lease renewal has failed for %v, so the node lease lapsed (the last: %v)", ErrBucketUnreachable, d.Round(time.Second), err)}
	}
	return nil
}

// openLocal opens the actor's local database. restored names the
// snapshot a restore just wrote there unchecked (restore), which the open
// checks (engine.OpenRestored): a bad one is refused as restore refuses
// it, and removed.
func (n *Node) openLocal(ctx context.Context, e *entry, restored string) error {
	p := n.path(e.id)
	if restored != "" {
		a, err := n.engine.OpenRestored(ctx, e.id, n.classes[e.id.Class], p)
		if errors.Is(err, engine.ErrBadSnapshot) {
			return &abi.ActorError{ID: e.id, Op: "restore snapshot " + restored, Err: err}
		}
		if err != nil {
			return err
		}
		e.a, e.letterChecked = a, false
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return &abi.ActorError{ID: e.id, Err: err}
	}
	a, err := n.engine.Open(ctx, e.id, n.classes[e.id.Class], p)
	if err != nil {
		if newer, ok := format.As(err); ok {
			// A later build's database (a rollback onto its data
			// directory): refused retryably (503 newer_format), left as
			// it is for a node that reads it.
			n.noteNewerLocal(e.id, p, newer, "not opened")
		}
		return err
	}
	e.a, e.letterChecked = a, false
	return nil
}

// noteNewerLocal counts and logs a local database whose schema is of a
// format newer than this build reads, which opening actor id, or the
// start-up scan, refused (what: what became of it).
func (n *Node) noteNewerLocal(id abi.ActorID, path string, newer *format.NewerError, what string) {
	n.newerSchemas.Add(1)
	n.log.Warn("the actor's local database is of a schema newer than this build reads (a later build wrote it): "+what+", left as it is for a node that reads it",
		"actor", id.String(), "path", path, "kind", string(newer.Kind), "format", newer.Version, "known", newer.Known)
}

// restore brings the local database in line with the bucket's newest
// state, latest, which the hold just taken names (cluster.Hold.State: read
// from the ownership records when the hold was taken, never from a
// listing alone). A local
// file that matches it (its sidecar names that snapshot and ETag) is kept;
// another one is set aside as .replaced. When the bucket has nothing, the
// local file (if any) stays: it is this node's own data, to be uploaded.
// unsynced says that no sidecar names latest: a download writes none (the
// release does, once the file is durable: vouch), so a restore costs no
// sync and no sidecar written only to be removed by the first upload.
// unchecked says that the database written has not been checked as a
// snapshot (engine.CheckSnapshot) but for its format: no local file was
// there to keep, and the open that follows checks it (openLocal) on the
// connection the actor then uses, attaching it once rather than twice.
func (n *Node) restore(ctx context.Context, e *entry, latest cluster.Snapshot, fetched []byte, wasFetched bool) (unsynced, unchecked bool, err error) {
	p := n.path(e.id)
	if latest.Key == "" {
		e.hasLast, e.bucketHad, e.last = false, false, cluster.Snapshot{}
		return false, false, nil
	}
	// A tombstone counts as state: no first snapshot of an earlier owner
	// can land above it, so the entries of a deleted actor are removed
	// when delivered rather than kept (OutcomeKeep) for ever. And once the
	// bucket has the actor, no upload of this node is its first, even
	// if this node's own first upload failed earlier.
	e.hasLast, e.last, e.bucketHad, e.joining = true, latest, true, false
	_, statErr := os.Stat(p)
	local := statErr == nil
	noSidecar := false // seen missing just now: nothing to remove below
	if latest.ETag != "" {
		side, err := os.ReadFile(p + ".sync")
		noSidecar = errors.Is(err, fs.ErrNotExist)
		if err == nil {
			switch string(side) {
			case sidecar(latest, true):
				// The database is that snapshot, or ahead of it with
				// commits not yet uploaded (kept, so that a node killed
				// before an upload loses none of them). The sidecar
				// vouches for the file beside it, not for its absence:
				// with the file gone (removed to have it downloaded again,
				// or lost), keeping "it" would open a new, empty actor in
				// the place of the bucket's state, and its next upload
				// would replace that state.
				if statErr == nil {
					return false, false, nil
				}
			case sidecar(latest, false):
				// The snapshot is a tombstone: no database, or one the
				// actor made again since, ahead of it.
				return false, false, nil
			}
		}
	}
	data, etag := fetched, latest.ETag
	if !wasFetched {
		// Not read by the take (its record named it, or no take): read it.
		var err error
		data, etag, err = n.replica.Download(ctx, e.id, latest)
		if err != nil {
			// The records name this snapshot: missing, it is an error
			// (the bucket lost it, or an operator removed it), never "no
			// state".
			return false, false, err
		}
	}
	e.last.ETag = etag
	n.restored.Add(1)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return false, false, &abi.ActorError{ID: e.id, Err: err}
	}
	// A snapshot that is not a database this host wrote is refused before
	// anything local is touched: the actor is given up, the bucket keeps
	// the snapshot for someone to look at. With no local file, nothing is
	// touched either way: the bytes are written and checked by the open
	// (unchecked), which removes a snapshot it refuses.
	if len(data) > 0 {
		check := engine.CheckSnapshot
		if !local {
			check, unchecked = engine.CheckSnapshotFormat, true
		}
		if err := check(data); err != nil {
			if newer, ok := format.As(err); ok {
				// A later build's snapshot: refused retryably (503
				// newer_format), left in the bucket for a node that
				// reads it (docs/design.md#format-versions).
				n.noteNewerSnapshot(e.id, latest.Key, newer)
			}
			return false, false, &abi.ActorError{ID: e.id, Op: "restore snapshot " + latest.Key, Err: err}
		}
	}
	if local {
		if err := engine.MoveDatabase(p, p+".replaced"); err != nil {
			return false, false, &abi.ActorError{ID: e.id, Op: "set the local database aside", Err: err}
		}
		_ = engine.RemoveDatabase(p)
		n.log.Warn("local database differs from the bucket's newest state; set aside", "actor", e.id.String(), "as", p+".replaced", "snapshot", latest.Key)
	}
	if len(data) == 0 { // a tombstone: the actor was deleted
		if err := engine.RemoveDatabase(p); err != nil {
			return false, false, &abi.ActorError{ID: e.id, Err: err}
		}
		n.vouch(e, e.last, false)
		return false, false, nil
	}
	// A sidecar left from before (naming an older snapshot, or this one
	// beside a database that was removed) goes first, and durably: a
	// power cut must not leave it vouching for the file written next,
	// which is not synced until the release.
	// One the read above found missing is not there (the entry's lock is
	// held): nothing to remove.
	if !noSidecar {
		if err := os.Remove(p + ".sync"); err == nil {
			if err := engine.SyncDatabase(p); err != nil {
				return false, false, &abi.ActorError{ID: e.id, Op: "remove the sidecar", Err: err}
			}
		} else if !os.IsNotExist(err) {
			return false, false, &abi.ActorError{ID: e.id, Op: "remove the sidecar", Err: err}
		}
	}
	if err := engine.WriteSnapshot(p, data); err != nil {
		return false, false, &abi.ActorError{ID: e.id, Op: "restore", Err: err}
	}
	return true, unchecked, nil
}

// noteNewerSnapshot counts and logs a snapshot of a format newer than this
// build reads, which a restore of actor id refused.
func (n *Node) noteNewerSnapshot(id abi.ActorID, key string, newer *format.NewerError) {
	if newer.Kind == format.Schema {
		n.newerSchemas.Add(1)
	} else {
		n.newerSnapshots.Add(1)
	}
	n.log.Warn("the actor's snapshot is of a format newer than this build reads; refused, left in the bucket for a node that reads it",
		"actor", id.String(), "snapshot", key, "kind", string(newer.Kind), "format", newer.Version, "known", newer.Known)
}

// sidecar is what the sidecar file (.sync) of a database holds when the
// database is snapshot s: the snapshot's key and ETag (a hold's uploads
// share one key), and " none" when s is a tombstone (data false: written
// where the database file was removed for it). A restore keeps a local
// database its sidecar names, or one ahead of it; for a snapshot with data
// only while the database file is there.
func sidecar(s cluster.Snapshot, data bool) string {
	if !data {
		return s.Key + " " + s.ETag + " none"
	}
	return s.Key + " " + s.ETag
}

// writeSidecar writes the sidecar of the database at p: it is snapshot s,
// which has data (false: a tombstone, for which the file was removed).
// Only vouch calls it.
func writeSidecar(p string, s cluster.Snapshot, data bool) error {
	return os.WriteFile(p+".sync", []byte(sidecar(s, data)), 0o644)
}

// vouch writes the sidecar of e's database naming s (data false: a
// tombstone, the file removed) once the database, its WAL and their
// directory are durable as they stand (engine.SyncDatabase). A restore
// writes the file without a sync, and without the node journal the WAL's
// commits are not synced either: a sidecar a power cut left beside an
// older or emptied file would have the next take keep that file in place
// of the bucket's state, and upload it over that state. The caller has
// waited for the actor's last delivery's commit (Actor.Settle) while it
// was open. A failure leaves no sidecar: the next take downloads.
func (n *Node) vouch(e *entry, s cluster.Snapshot, data bool) {
	p := n.path(e.id)
	if err := engine.SyncDatabase(p); err != nil {
		n.log.Warn("no sidecar: the local database could not be synced", "actor", e.id.String(), "error", err)
		return
	}
	if err := writeSidecar(p, s, data); err != nil {
		n.log.Warn("could not write the sidecar", "actor", e.id.String(), "error", err)
	}
}

// replicate uploads the actor's database when events committed since the
// last upload (e.mu held), through the plugin, which brings the alarm
// index in line around the upload. A failed upload, an index that cannot be
// brought in line, or a hold that lapsed on the way gives the actor up.
func (n *Node) replicate(ctx context.Context, e *entry, kind alarms.UploadKind) error {
	if n.leases == nil || !e.dirty || e.a == nil {
		return nil
	}
	kind, err := n.replicationKind(e, kind)
	if err != nil {
		n.giveUp(ctx, e, err)
		return err
	}
	if err := n.plugin.Replicate(ctx, &nodeActor{n: n, e: e}, kind); err != nil {
		err = &abi.ActorError{ID: e.id, Op: "replicate", Err: err}
		n.giveUp(ctx, e, err)
		return err
	}
	e.dirty, e.joining = false, false
	return nil
}

// replicationKind is the upload kind of e's next replication (a joining
// node's first upload, or kind), or an error naming the actor when the
// node lease lapsed: nothing may be replicated then.
func (n *Node) replicationKind(e *entry, kind alarms.UploadKind) (alarms.UploadKind, error) {
	if !n.leases.Valid() {
		return kind, &abi.ActorError{ID: e.id, Err: errors.New("not replicated: the node lease lapsed")}
	}
	if e.joining {
		kind = alarms.FirstUpload
	}
	return kind, nil
}

// upload stores data as the hold's snapshot (its one key, If-Match its
// last upload) and prunes the snapshot it replaces. Only an upload that
// returned while the hold was valid counts: it becomes the hold's state
// (cluster.Holds.Uploaded), which its release names, and only then is the
// snapshot before it deleted. An upload that returned later may have
// landed after another node took the actor and noted that snapshot as
// the state: deleting it would leave the new holder's records naming a
// snapshot that is gone (the plugin gives the actor up then).
func (n *Node) upload(ctx context.Context, e *entry, data []byte) error {
	prevETag := ""
	if e.hasLast && e.last.Generation == e.hold.Generation {
		prevETag = e.last.ETag
	}
	snap, err := n.replica.Upload(ctx, e.id, e.hold.Generation, prevETag, data)
	if err != nil {
		return err
	}
	prev, hadPrev := e.last, e.hasLast
	e.last, e.hasLast, e.uploaded = snap, true, true
	if !e.unsynced {
		// The sidecar, which lets a restore keep a local file that matches
		// the bucket's newest state, is written when the actor is released,
		// not on every upload (an open, a write and a close each time).
		// Until then there is none: after a crash the restore downloads.
		if err := os.Remove(n.path(e.id) + ".sync"); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("actor %s: remove the sidecar: %w", e.id, err)
		}
		e.unsynced = true
	}
	if !n.holds.Valid(e.hold) {
		return nil
	}
	e.hold = n.holds.Uploaded(e.hold, snap)
	if hadPrev && prev.Key != snap.Key {
		// The replaced snapshot can no longer become the state (the
		// records reach this hold's first): prune it off the reply path,
		// with the next batch of deletes.
		n.deletes.Delete(prev.Key)
	}
	return nil
}

// giveUp closes the actor and lets its hold go: the bucket may lack what the
// local database has, so the local copy is no longer trusted.
func (n *Node) giveUp(ctx context.Context, e *entry, why error) {
	n.log.Warn("giving the actor up", "actor", e.id.String(), "generation", e.hold.Generation, "why", why)
	n.givenUp.Add(1)
	if n.plugin != nil {
		n.plugin.LetGo(e.id) // its alarm in the bucket may be in no timer now
	}
	if e.a != nil {
		e.a.Close(ctx)
		e.a = nil
	}
	_ = os.Remove(n.path(e.id) + ".sync")
	if e.held {
		n.releaseHold(ctx, e.hold)
	}
	e.held, e.dirty = false, false
}

// releaseHold lets a hold go (e.mu held). A release that fails for any
// cause but the record having changed since (taken over, or an earlier try
// that landed) is tried again every lease period (releaseAgain): while the
// record names this node and its lease is live, every other node is refused
// the actor and drops its alarm (docs/design.md#delivery), yet this node
// holds nothing, and its timer may lack the bucket's alarm (an event whose
// upload failed changed it here only). Without the retry that alarm waited
// until it was anyone's, three margins overdue.
func (n *Node) releaseHold(ctx context.Context, h cluster.Hold) {
	err := n.holds.Release(ctx, h)
	if err != nil {
		n.log.Debug("could not release a hold", "actor", h.Actor.String(), "generation", h.Generation, "error", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err == nil || errors.Is(err, bucket.ErrPrecondition) {
		if p, ok := n.unreleased[h.Actor]; ok && p == h {
			delete(n.unreleased, h.Actor)
		}
		return
	}
	if n.unreleased == nil {
		n.unreleased = map[abi.ActorID]cluster.Hold{}
	}
	n.unreleased[h.Actor] = h
}

// releaseAgain tries again the releases that failed (releaseHold), each
// with its actor's lock, so that it cannot race this node taking the actor
// anew; an actor busy with an event is left for the next round (the event
// takes a new hold, which replaces the record conditionally anyway).
func (n *Node) releaseAgain(ctx context.Context) {
	n.mu.Lock()
	ids := make([]abi.ActorID, 0, len(n.unreleased))
	for id := range n.unreleased {
		ids = append(ids, id)
	}
	n.mu.Unlock()
	for _, id := range ids {
		e, err := n.entry(id)
		if err != nil {
			return // closed (Close releases what is left)
		}
		if !e.mu.TryLock() {
			continue
		}
		failed := false
		func() {
			defer e.mu.Unlock()
			var err error
			defer n.recoverEvent(ctx, e, "release", &err)
			if e.gone || e.held {
				return // looked up again next round; or held anew (open forgot it)
			}
			n.mu.Lock()
			h, ok := n.unreleased[id]
			n.mu.Unlock()
			if !ok {
				return
			}
			if n.deliveringSoon(id) {
				// The timer delivers the actor within a lease period
				// (its alarm, or the retry of a delivery the lapse
				// failed): that delivery takes it anew, keeping its
				// database here. Released, another node's sweep would
				// take it first and download it (after a bucket outage,
				// most of the actors given up).
				return
			}
			n.releaseHold(ctx, h)
			n.mu.Lock()
			_, still := n.unreleased[id]
			n.mu.Unlock()
			if !still {
				n.log.Info("released a hold whose release had failed", "actor", id.String(), "generation", h.Generation)
			}
			failed = still
		}()
		if failed {
			// The bucket failed this release: the others would fail
			// too. They wait for the next round, so a node cut off from
			// the bucket sends one release a lease period, not one for
			// every actor it gave up.
			return
		}
	}
}

// deliveringSoon reports whether the node timer holds the actor for a
// delivery within a lease period from now.
func (n *Node) deliveringSoon(id abi.ActorID) bool {
	at, ok := n.timer.Get(timerKey(id))
	return ok && at <= n.cfg.Clock.Now().Add(n.leaseTTL()).UnixMilli()
}

// leaseTTL is the lease period in force (cluster mode).
func (n *Node) leaseTTL() time.Duration {
	if c := n.cfg.Cluster; c != nil && c.LeaseTTL > 0 {
		return c.LeaseTTL
	}
	return cluster.DefaultTTL
}

// retryReleases runs releaseAgain every period until ctx ends.
func (n *Node) retryReleases(ctx context.Context, period time.Duration) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.cfg.Clock.After(period):
		}
		n.releaseAgain(ctx)
	}
}

// release uploads what is pending, closes the actor and releases the hold
// (idle timeout, clean shutdown).
func (n *Node) release(ctx context.Context, e *entry) error {
	err := n.replicate(ctx, e, alarms.AfterEvent)
	if err == nil && e.a != nil && e.unsynced && e.hasLast && !e.dirty {
		// The local file is the last snapshot this hold uploaded, once
		// the commits in it are durable here (an upload does not wait for
		// a delivery's: SnapshotForUpload): a sidecar naming an upload
		// the local file may lose after a power cut would have the
		// restore keep the older file in the bucket's state's place.
		if serr := e.a.Settle(); serr != nil {
			n.log.Warn("no sidecar: the local database is not durable", "actor", e.id.String(), "error", serr)
		} else {
			n.vouch(e, e.last, true)
		}
		e.unsynced = false
	}
	if e.a != nil {
		e.a.Close(ctx)
		e.a = nil
	}
	if e.held {
		n.releaseHold(ctx, e.hold)
		e.held = false
		n.log.Debug("released actor", "actor", e.id.String(), "generation", e.hold.Generation)
	}
	return err
}

// Request runs a request event on the actor. In cluster mode it takes the
// actor first (a *cluster.HeldElsewhereError says which node holds it) and
// replicates the committed event, before replying for ExecDurable.
func (n *Node) Request(ctx context.Context, id abi.ActorID, body []byte) (hostmod.Result, error) {
	return n.Exec(ctx, id, body, ExecDurable)
}

// Exec runs a request event of the given kind.
func (n *Node) Exec(ctx context.Context, id abi.ActorID, body []byte, kind EventKind) (hostmod.Result, error) {
	res, _, err := n.ExecOnce(ctx, id, body, kind, "")
	return res, err
}

// ExecOnce is Exec under an idempotency key (engine.RequestOnce; "" for
// none): the key and the event's response commit with the event, in the
// actor's database, so they replicate with it. When the actor has the key
// recorded, nothing runs and the recorded response is returned, replayed
// true; for ExecDurable it is returned only once the state that holds the
// key is in the bucket (uploaded now unless this hold has uploaded it
// already). A holder that took the actor over restored the bucket's state,
// which holds the key exactly when the event's upload landed: an
// exec-durable event was acknowledged only after it did, so a key the new
// holder lacks belongs to an event that was never acknowledged, and
// running it is right.
func (n *Node) ExecOnce(ctx context.Context, id abi.ActorID, body []byte, kind EventKind, key string) (res hostmod.Result, replayed bool, err error) {
	if key != "" {
		if err := engine.ValidateIdempotencyKey(key); err != nil {
			return hostmod.Result{}, false, &abi.ActorError{ID: id, Err: err}
		}
	}
	err = n.withActor(ctx, id, "request", func(e *entry) error {
		if key == "" {
			res, err = e.a.Request(ctx, body)
		} else {
			res, replayed, err = e.a.RequestOnce(ctx, key, body)
		}
		if err != nil {
			return err
		}
		if replayed {
			if n.leases == nil || kind != ExecDurable {
				return nil
			}
			// Committed here and not uploaded (dirty), or a hold that
			// has uploaded nothing yet: its local database may hold
			// commits the bucket lacks (the local file of an actor whose
			// first upload failed, kept when the bucket has nothing; or
			// one whose node was killed between a commit and its upload,
			// kept on the restart because its sidecar still names the
			// bucket's newest snapshot). Either way the bucket may lack
			// the key's event: upload before answering.
			if !e.uploaded {
				e.dirty = true
			}
			return n.replicate(ctx, e, alarms.MidEvent)
		}
		e.dirty = true
		if res.AlarmChanged {
			n.plugin.Arm(id, res.Alarm)
		}
		// The dead letter's record goes once the event that set the alarm
		// again counts: in cluster mode, once its upload did (an event
		// whose upload fails is not the actor's state, which still holds
		// the dead letter).
		if n.leases == nil {
			n.alarmSetAgain(ctx, e, res.Alarm)
			return nil
		}
		if kind == ExecDurable {
			if err := n.replicate(ctx, e, alarms.MidEvent); err != nil {
				return err
			}
			n.alarmSetAgain(ctx, e, res.Alarm)
			return nil
		}
		alarm := res.Alarm
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			_ = n.locked(ctx, e, "replicate", func() error {
				if e.gone {
					return nil // released, with its upload, since
				}
				callTestHook("replicate", id)
				if err := n.replicate(context.WithoutCancel(ctx), e, alarms.AfterEvent); err != nil {
					return err
				}
				n.alarmSetAgain(context.WithoutCancel(ctx), e, alarm)
				return nil
			})
		}()
		return nil
	})
	return res, replayed, err
}

// State reads an actor's committed alarm state (taking the actor in
// cluster mode).
func (n *Node) State(ctx context.Context, id abi.ActorID) (st hostmod.State, err error) {
	err = n.withActor(ctx, id, "read state", func(e *entry) error {
		st, err = e.a.State(ctx)
		return err
	})
	return st, err
}

// rememberRefusals is the context key that lets withActor answer from
// the refusals it remembers (serve sets it for a client's request, whose
// forward forgets one that failed).
type rememberRefusals struct{}

// withActor runs fn on the actor's entry, locked and ready for an event
// (taken, in cluster mode): the boundary of every event (see locked).
func (n *Node) withActor(ctx context.Context, id abi.ActorID, op string, fn func(e *entry) error) error {
	if n.leases != nil && ctx.Value(rememberRefusals{}) != nil {
		// A client's request over HTTP for an actor found held by a live
		// node within a lease TTL goes there without reading the record
		// and the holder's lease again (docs/design.md#refusals).
		if held := n.holds.Refused(id); held != nil {
			return held
		}
	}
	for {
		e, err := n.entry(id)
		if err != nil {
			return err
		}
		gone := false
		err = n.locked(ctx, e, op, func() error {
			if gone = e.gone; gone {
				return nil // the reaper dropped it meanwhile: look it up again
			}
			if err := n.open(ctx, e); err != nil {
				return err
			}
			callTestHook(op, id)
			return fn(e)
		})
		if !gone {
			return err
		}
	}
}

// locked runs fn with e.mu held. A panic in fn is recovered here: it is
// logged with the actor and its stack, the actor is given up (its instance
// and database may be in any state), and it is returned as an error
// wrapping ErrInternal. The lock is released whatever happens, so the node
// goes on serving the actor, the others, and its shutdown.
func (n *Node) locked(ctx context.Context, e *entry, op string, fn func() error) (err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return n.guarded(ctx, e, op, fn)
}

// guarded runs fn (e.mu held) with locked's recovery.
func (n *Node) guarded(ctx context.Context, e *entry, op string, fn func() error) (err error) {
	defer n.recoverEvent(ctx, e, op, &err)
	return fn()
}

// ErrInternal is wrapped by the error an event returns when it panicked: a
// bug in the host, recovered at the event's boundary.
var ErrInternal = errors.New("internal error (a recovered panic)")

// recoverEvent is locked's deferred recovery (e.mu held).
func (n *Node) recoverEvent(ctx context.Context, e *entry, op string, err *error) {
	r := recover()
	if r == nil {
		return
	}
	cause := fmt.Errorf("%w: %v", ErrInternal, r)
	n.log.Error("panic in an event; giving the actor up", "actor", e.id.String(), "op", op, "panic", r, "stack", string(debug.Stack()))
	func() {
		defer func() {
			if r := recover(); r != nil {
				n.log.Error("panic while giving the actor up", "actor", e.id.String(), "panic", r)
				e.a, e.held, e.dirty = nil, false, false
			}
		}()
		n.giveUp(context.WithoutCancel(ctx), e, cause)
	}()
	*err = &abi.ActorError{ID: e.id, Op: op, Err: cause}
}

// testHook, set only by this package's tests (export_test.go), is called
// with e.mu held: inside open (op "open"), once the actor is open for an
// event (op as withActor names it), and before a background upload (op
// "replicate"), to provoke panics.
var testHook atomic.Pointer[func(op string, id abi.ActorID)]

func callTestHook(op string, id abi.ActorID) {
	if h := testHook.Load(); h != nil {
		(*h)(op, id)
	}
}

// Delete deletes the actor: its database here and, in cluster mode, its
// state in the bucket (a tombstone snapshot that any restore reads as "no
// state"). Its alarm is gone with it.
func (n *Node) Delete(ctx context.Context, id abi.ActorID) error {
	return n.withActor(ctx, id, "delete", func(e *entry) error { return n.delete(ctx, e) })
}

func (n *Node) delete(ctx context.Context, e *entry) error {
	id := e.id
	// An actor with a dead letter may have its record listed: it goes too.
	_, lettered, err := e.a.DeadLetter(ctx)
	if err != nil {
		return &abi.ActorError{ID: id, Op: "delete", Err: err}
	}
	e.a.Close(ctx)
	e.a = nil
	n.timer.Remove(timerKey(id))
	p := n.path(id)
	if n.leases != nil {
		if err := n.upload(ctx, e, nil); err != nil {
			n.giveUp(ctx, e, err)
			return &abi.ActorError{ID: id, Op: "delete", Err: err}
		}
		if !n.holds.Valid(e.hold) {
			// The tombstone returned after the hold lapsed: it counts for
			// nothing (another node may have taken the actor meanwhile,
			// with the state before it), so the delete is not done. The
			// caller retries, wherever the actor is held now.
			err := fmt.Errorf("%w: the hold lapsed before the tombstone's upload returned", cluster.ErrLeaseNotValid)
			n.giveUp(ctx, e, err)
			return &abi.ActorError{ID: id, Op: "delete", Err: err}
		}
		e.dirty = false
	}
	if err := engine.RemoveDatabase(p); err != nil {
		return &abi.ActorError{ID: id, Op: "delete", Err: err}
	}
	if e.held {
		// Nothing is left to hold: the next event takes the actor afresh
		// and restores the tombstone. A hold kept with no actor open would
		// read as a lapsed lease there.
		n.releaseHold(ctx, e.hold)
		e.held = false
	}
	if lettered {
		if err := n.dropLetter(ctx, id); err != nil {
			return err
		}
	}
	n.log.Info("deleted actor", "actor", id.String())
	return nil
}

// Take takes an actor for a delivery of the plugin's timer loop
// (alarms.Host). Once the actor is open, the delivery needs a room in its
// tenant's line for the guest slots (engine.Room): when the tenant's
// calls already fill it (its guests hang or spin, and its calls wait
// their turn), the actor is let go while the delivery waits for one, so
// a request or a delete of the actor does not wait behind the tenant's
// other calls.
func (h clusterHost) Take(ctx context.Context, id abi.ActorID) (alarms.Actor, func(error), error) {
	var room *engine.Room
	for {
		e, err := h.n.entry(id)
		for err == nil {
			// Locked until done; a panic while taking it is recovered as
			// in any event.
			e.mu.Lock()
			if !e.gone {
				break
			}
			e.mu.Unlock() // the reaper dropped it meanwhile: look it up again
			e, err = h.n.entry(id)
		}
		if err == nil {
			err = h.n.guarded(ctx, e, "deliver", func() error {
				if err := h.n.open(ctx, e); err != nil {
					return err
				}
				callTestHook("deliver", id)
				return nil
			})
			if err != nil {
				e.mu.Unlock()
			}
		}
		if err != nil {
			room.Release()
			if held := (*cluster.HeldElsewhereError)(nil); errors.Is(err, ErrClassNotServed) || errors.As(err, &held) {
				return nil, nil, alarms.NotHere(err)
			}
			return nil, nil, err
		}
		if room == nil {
			room = h.n.engine.TryRoom(id.Tenant)
		}
		if room == nil {
			e.mu.Unlock()
			alarms.NoteWaitedForShare(ctx) // more workers add no room
			if room, err = h.n.engine.AwaitRoom(ctx, id.Tenant); err != nil {
				return nil, nil, &abi.ActorError{ID: id, Op: "deliver", Err: err}
			}
			continue // take the actor again
		}
		e.a.UseRoom(room)
		// r, not room: a closure captures a variable assigned more than
		// once by reference, which puts it on the heap at every take.
		c, r := &nodeActor{n: h.n, e: e}, room
		return c, func(err error) {
			r.Release() // if no guest call used it
			c.done(ctx, err)
		}, nil
	}
}

// delivered reports a delivery of the plugin's timer loop to OnDelivery.
func (n *Node) delivered(d alarms.Delivery) {
	n.observeDelivery(d)
	if n.cfg.OnDelivery != nil {
		n.cfg.OnDelivery(d)
	}
}

// joinCluster starts the node's lease and uploads, as its first snapshot,
// each local actor the bucket does not have.
func (n *Node) joinCluster(ctx context.Context, local []abi.ActorID) error {
	c := n.cfg.Cluster
	if c.Bucket == nil {
		return errors.New("node: cluster mode needs a bucket")
	}
	if c.Prefix == "" {
		c.Prefix = "cluster/"
	}
	if len(c.Prefix) > MaxPrefixLen {
		return fmt.Errorf("node: the cluster prefix is %d bytes, over the limit of %d bytes", len(c.Prefix), MaxPrefixLen)
	}
	for _, t := range c.Tenants {
		if err := abi.ValidateTenant(t); err != nil {
			return fmt.Errorf("node: cluster tenants: %w", err)
		}
	}
	if c.NodeID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		c.NodeID = "node-" + hex.EncodeToString(b[:])
	}
	// Before the lease: a node that may not join writes nothing.
	if err := n.checkClusterVersion(ctx, c); err != nil {
		return err
	}
	version, revision := buildVersion()
	leases, err := cluster.StartLeases(ctx, cluster.LeaseConfig{
		Bucket: c.Bucket, Prefix: c.Prefix, NodeID: c.NodeID, Addr: c.Addr,
		TTL: c.LeaseTTL, Margin: c.LeaseMargin, Grace: c.LeaseGrace, ObservePeriod: c.LeaseReadPeriod,
		Classes: n.classNames(), // the sweep's walkers serve a tenant's classes
		Logger:  n.log.Named("lease"),
		// What keepctl nodes and the other nodes' consoles show of this one.
		Build: cluster.Build{Version: version, Revision: revision},
	})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.leases = leases
	n.holds = cluster.NewHolds(c.Bucket, c.Prefix, leases, n.log.Named("hold"))
	n.replica = cluster.NewReplica(c.Bucket, c.Prefix)
	n.log = n.log.With("node", c.NodeID)
	dlog := n.log.Named("delete")
	n.deletes = bucket.NewDeleter(c.Bucket, c.DeleteWindow, func(keys []string, err error) {
		// A replaced snapshot left behind is never read: a newer one exists.
		dlog.Debug("could not delete replaced snapshots", "keys", len(keys), "error", err)
	})
	ttl := c.LeaseTTL
	if ttl <= 0 {
		ttl = cluster.DefaultTTL
	}
	grace := c.LeaseGrace
	if grace <= 0 {
		grace = 2 * time.Second
	}
	n.plugin, err = alarms.Register(alarms.Config{
		Bucket:      bucket.WithPrefix(c.Bucket, c.Prefix), // the index under the cluster's root
		Tenants:     c.Tenants,
		Host:        clusterHost{n},
		Timer:       n.timer,
		Margin:      ttl + grace,
		SweepPeriod: c.SweepPeriod,
		RetryMax:    n.cfg.RetryMax,
		Serves:      func(class string) bool { _, ok := n.classes[class]; return ok },
		Logger:      n.log.Named("alarms"),
		// docs/design.md#delivery: a failed delivery is tried again a
		// lease period later.
		RetryAfterError:         ttl,
		SweepConcurrency:        c.SweepConcurrency,
		SweepMaxDeliveries:      c.SweepMaxDeliveries,
		SweepWalkers:            c.SweepWalkers,
		SweepSafetyPeriod:       c.SweepSafetyPeriod,
		MaxConcurrentDeliveries: n.cfg.MaxConcurrentDeliveries,
		DrainTimeout:            n.cfg.DrainTimeout,
		TenantWeights:           n.cfg.TenantWeights,
		OnDelivery:              n.delivered,
		StartDelivery:           n.deliveryTracing(),
		Registerer:              n.cfg.Registerer,
		// Replaced entries and replaced snapshots go out in the same
		// multi-object requests: one per window, not one per kind.
		Deletes: n.deletes.Sub(c.Prefix, nil),
	})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}

	// Each local actor is read (its ownership record) and, if the bucket
	// has no state of it, uploaded: joinWorkers at once, since a node
	// restarted with many actors on a slow store would otherwise serve
	// only after one request round trip per actor, in a row.
	var (
		joined   atomic.Int64
		firstErr error
		errOnce  sync.Once
		work     = make(chan abi.ActorID)
		wg       sync.WaitGroup
	)
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := func(err error) { errOnce.Do(func() { firstErr = err; cancel() }) }
	for range min(joinWorkers, len(local)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				ok, err := n.joinOne(jctx, id)
				if err != nil {
					fail(err)
				} else if ok {
					joined.Add(1)
				}
			}
		}()
	}
	for _, id := range local {
		if _, ok := n.classes[id.Class]; !ok {
			continue
		}
		select {
		case work <- id:
		case <-jctx.Done():
		}
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if joined := joined.Load(); joined > 0 {
		n.log.Info("joined with local data", "actors_uploaded", joined)
	}
	return nil
}

// joinWorkers is how many local actors a joining node reads (and
// uploads) at once.
const joinWorkers = 16

// joinOne uploads local actor id as its first snapshot if the bucket has
// no state of it; uploaded is whether it did. An error ends the join: the
// bucket could not be read.
func (n *Node) joinOne(ctx context.Context, id abi.ActorID) (uploaded bool, err error) {
	c := n.cfg.Cluster
	_, has, err := cluster.ReadState(ctx, c.Bucket, c.Prefix, id)
	if err != nil {
		return false, fmt.Errorf("node: join: %w", err)
	}
	if has {
		return false, nil
	}
	if ok, err := hasState(n.path(id)); err != nil {
		return false, fmt.Errorf("node: join: %w", &abi.ActorError{ID: id, Op: "read the local database", Err: err})
	} else if !ok {
		n.log.Debug("the local database holds nothing of the actor; not uploaded", "actor", id.String())
		return false, nil
	}
	err = n.withActor(ctx, id, "join", func(e *entry) error {
		if e.bucketHad {
			// Another node created the actor since it was read:
			// the take restored the bucket's state, the local
			// file is set aside, and nothing is joined.
			return nil
		}
		e.dirty, e.joining, uploaded = true, true, true
		return n.replicate(ctx, e, alarms.FirstUpload)
	})
	if err != nil {
		n.log.Warn("could not upload a local actor as its first snapshot; it stays on this node only", "actor", id.String(), "error", err)
		return false, nil
	}
	return uploaded, nil
}

// hasState reports whether the local database at p holds anything of its
// actor: an alarm or a recorded on-init. One with neither was opened by a
// delivery or a read of an actor the bucket did not have; uploading it as a
// first snapshot would create the actor in the bucket, empty, which the
// rules avoid (docs/design.md#bucket-empty).
func hasState(p string) (bool, error) {
	st, err := engine.OpenStore(p)
	if err != nil {
		return false, err
	}
	defer st.Close()
	if _, ok, err := st.Alarm(); err != nil || ok {
		return ok, err
	}
	_, ok, err := st.Meta(hostmod.MetaInitDone)
	return ok, err
}

// Leases returns the node's lease (nil outside cluster mode).
func (n *Node) Leases() *cluster.Leases { return n.leases }

// Start runs the timer loop, the idle reaper (and, in cluster mode, the
// sweeps) until Close.
func (n *Node) Start(ctx context.Context) {
	ctx, n.cancel = context.WithCancel(context.WithoutCancel(ctx))
	n.loop = make(chan struct{})
	go func() {
		defer close(n.loop)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); n.reapIdle(ctx) }()
		go func() { defer wg.Done(); n.summarize(ctx, n.log.Named("alarms"), n.cfg.LogSummaryEvery) }()
		if n.leases != nil {
			wg.Add(1)
			go func() { defer wg.Done(); n.retryReleases(ctx, n.leaseTTL()) }()
		}
		stop := n.plugin.Start(ctx) // the timer loop and, in cluster mode, the sweeps
		<-ctx.Done()
		stop()
		wg.Wait()
	}()
}

// StopDeliveries stops the timer loop and the sweeps from starting any
// delivery, as Close does first, without waiting for those under way: a
// host calls it as its shutdown begins, before it stops serving requests
// (which may wait for requests in flight), so that no alarm starts on this
// node while it stops; its alarms are the other nodes' once Close deletes
// its lease (docs/design.md#shutdown).
func (n *Node) StopDeliveries() {
	if n.cancel != nil {
		n.cancel()
	}
}

// Close stops the timer, lets the deliveries in flight finish (for up to
// Config.DrainTimeout), and closes every
// actor and the engine. In cluster mode it uploads what is pending, releases
// every hold and deletes its node lease: a clean shutdown hands its actors
// over at once.
func (n *Node) Close(ctx context.Context) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	if n.cancel != nil {
		n.StopDeliveries()
		<-n.loop
	}
	n.wg.Wait()
	var errs []error
	n.mu.Lock()
	list := n.entries
	n.entries = map[abi.ActorID]*entry{}
	n.mu.Unlock()
	for _, e := range list {
		errs = append(errs, n.locked(ctx, e, "close", func() error {
			if n.leases != nil {
				return n.release(ctx, e)
			}
			if e.a == nil {
				return nil
			}
			err := e.a.Close(ctx)
			e.a = nil
			return err
		}))
	}
	if n.leases != nil {
		// Nothing runs any more: a release that failed is tried once
		// more without the actors' locks.
		n.mu.Lock()
		left := make([]cluster.Hold, 0, len(n.unreleased))
		for _, h := range n.unreleased {
			left = append(left, h)
		}
		n.mu.Unlock()
		for _, h := range left {
			n.releaseHold(ctx, h)
		}
		n.FlushDeletes(ctx)
		errs = append(errs, n.leases.Close(ctx))
	}
	errs = append(errs, n.engine.Close(ctx))
	return errors.Join(errs...)
}

// FlushDeletes sends the DELETEs of replaced index entries and snapshots
// that wait for their batch, and waits for them (cluster mode; Close does
// it too).
func (n *Node) FlushDeletes(ctx context.Context) {
	switch {
	case n.deletes != nil:
		// The plugin's replaced entries share these batches: one Flush
		// (a second would send again at once what the first paused for
		// a retry).
		n.deletes.Flush(ctx)
	case n.plugin != nil:
		n.plugin.FlushDeletes(ctx)
	}
}

// Plugin returns the node's alarm plugin. Outside cluster mode it is a
// SingleNode plugin: it runs the timer loop and committed retries, and has
// no index and no sweeps.
func (n *Node) Plugin() *alarms.Plugin { return n.plugin }

// clusterHost is the node as the alarm plugin's Host.
type clusterHost struct{ n *Node }

// Syncing reports how many of the node's commits wait for the disk now
// (alarms.SyncHost): the delivery workers grow past the processors by as
// many, so that durable commits waiting for the journal's sync leave the
// processors to other deliveries, whose commits share it.
func (h clusterHost) Syncing() int { return h.n.engine.Syncing() }

// LeaseValid reports whether the node lease is valid now
// (alarms.LapseHost); always outside cluster mode.
func (h clusterHost) LeaseValid() bool {
	return h.n.leases == nil || h.n.leases.Valid()
}

// ValidAgainSince reports when the node lease became valid again after
// its latest lapse (alarms.LapseHost); the zero time outside cluster mode.
func (h clusterHost) ValidAgainSince() time.Time {
	if h.n.leases == nil {
		return time.Time{}
	}
	return h.n.leases.ValidAgainSince()
}

func (h clusterHost) Now() time.Time                         { return h.n.cfg.Clock.Now() }
func (h clusterHost) After(d time.Duration) <-chan time.Time { return h.n.cfg.Clock.After(d) }
func (h clusterHost) Self() string {
	if h.n.leases == nil {
		return "local"
	}
	return h.n.leases.NodeID()
}

func (h clusterHost) LiveNodes(context.Context) ([]string, error) {
	var ids []string
	for _, ni := range h.n.leases.Live() {
		ids = append(ids, ni.ID)
	}
	return ids, nil
}

// Departures receives the ID of each node whose lease this node saw
// deleted: it shut down cleanly, its holds released (alarms.HandoverHost).
// Nil outside cluster mode: nothing is received.
func (h clusterHost) Departures() <-chan string {
	if h.n.leases == nil {
		return nil
	}
	return h.n.leases.Departures()
}

// Members is the live nodes with the classes their leases name, this node
// always among them (alarms.MembersHost).
func (h clusterHost) Members(context.Context) (sweeper.View, error) {
	v := sweeper.View{Epoch: h.n.leases.MembersEpoch()}
	self := h.n.leases.NodeID()
	v.Members = append(v.Members, sweeper.Member{Addr: self, Classes: h.n.classNames()})
	for _, ni := range h.n.leases.Live() {
		if ni.ID != self {
			v.Members = append(v.Members, sweeper.Member{Addr: ni.ID, Classes: ni.Classes, All: ni.AllClasses})
		}
	}
	return v, nil
}

// classNames are the classes this node serves, sorted.
func (n *Node) classNames() []string {
	out := make([]string, 0, len(n.classes))
	for c := range n.classes {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// nodeActor is an actor this node holds, as the alarm plugin sees it
// (the entry's lock is held throughout). Outside cluster mode the plugin
// only runs its alarm event.
type nodeActor struct {
	n *Node
	e *entry
}

func (c *nodeActor) ID() abi.ActorID { return c.e.id }

func (c *nodeActor) Hold() alarms.Hold {
	e := c.e
	return alarms.Hold{Generation: e.hold.Generation, Valid: e.held && e.a != nil && c.n.holds.Valid(e.hold), Uploaded: e.uploaded, BucketHad: e.bucketHad}
}

func (c *nodeActor) State(ctx context.Context) (hostmod.State, error) {
	if c.e.a == nil {
		return hostmod.State{}, &abi.ActorError{ID: c.e.id, Err: errors.New("not open")}
	}
	return c.e.a.State(ctx)
}

func (c *nodeActor) SetMeta(ctx context.Context, key, value string) error {
	if c.e.a == nil {
		return &abi.ActorError{ID: c.e.id, Err: errors.New("not open")}
	}
	return c.e.a.SetMeta(ctx, key, value)
}

// snapshotBufs are buffers for snapshots on their way to the bucket, each
// reused once its upload succeeded (a Bucket's Put keeps nothing of the
// body once it returns), so a firing does not allocate and clear its
// snapshot anew. Buffers above maxPooledSnapshot are left to the GC.
var snapshotBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledSnapshot = 1 << 20

// Upload uploads a snapshot of the database as the hold's next one.
func (c *nodeActor) Upload(ctx context.Context) error {
	bp := snapshotBufs.Get().(*[]byte)
	// The upload does not wait for the last delivery's commit to be
	// durable here: the bucket holds it once the upload returns, and a
	// restore after a power cut downloads it, as no sidecar names the
	// upload until the local file is durable too (Settle, on release).
	data, err := c.e.a.SnapshotForUpload(ctx, *bp)
	if err == nil {
		err = c.n.upload(ctx, c.e, data)
	}
	if err == nil && c.n.holds.Valid(c.e.hold) {
		// The bucket holds the delivery, under the hold: the actor's next
		// call need not wait for its local sync (the output gate), which
		// the sidecar still waits for.
		c.e.a.Replicated()
	}
	if err == nil && cap(data) <= maxPooledSnapshot {
		// After a failed PUT the transport may still hold the body: that
		// buffer is not reused.
		*bp = data[:0]
		snapshotBufs.Put(bp)
	}
	return err
}

// RunAlarm runs the alarm event and, in cluster mode, replicates it with
// the index entry recorded in the event's own commit (engine.RunAlarm). On
// an error the delivery's Done gives the actor up.
func (c *nodeActor) RunAlarm(ctx context.Context) (hostmod.Delivery, error) {
	n, e := c.n, c.e
	if n.leases == nil {
		d, err := e.a.DeliverAlarm(ctx)
		if err == nil && d.GaveUp {
			n.keepLetter(ctx, e, d)
		}
		return d, err
	}
	kind, err := n.replicationKind(e, alarms.AfterEvent)
	if err != nil {
		return hostmod.Delivery{}, err
	}
	d, err := engine.RunAlarm(ctx, n.plugin, c, e.a, kind)
	if err != nil {
		return d, err
	}
	if d.Ran {
		e.dirty, e.joining = false, false
	}
	if d.GaveUp {
		// Committed and uploaded: the record lists it.
		n.keepLetter(ctx, e, d)
	}
	return d, nil
}

func (c *nodeActor) Release(ctx context.Context) { _ = c.n.release(ctx, c.e) }

// done ends a delivery: one that failed part-way gives the actor up (in
// cluster mode the local copy is no longer trusted).
func (c *nodeActor) done(ctx context.Context, err error) {
	if err != nil && c.n.leases != nil {
		c.n.giveUp(ctx, c.e, err)
	}
	c.e.mu.Unlock()
}

// Crash stops the node the way a killed process stops: no upload, no
// release, its node lease left to expire. Tests of takeovers use it in
// process; the cluster tests kill real processes with SIGKILL.
func (n *Node) Crash() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	n.mu.Unlock()
	if n.leases != nil {
		n.leases.Kill()
	}
	if n.cancel != nil {
		n.StopDeliveries()
		<-n.loop
	}
	n.wg.Wait()
	ctx := context.Background()
	n.mu.Lock()
	list := n.entries
	n.entries = map[abi.ActorID]*entry{}
	n.mu.Unlock()
	for _, e := range list {
		e.mu.Lock()
		if e.a != nil {
			e.a.Close(ctx)
			e.a = nil
		}
		e.mu.Unlock()
	}
	n.engine.Close(ctx)
}
