// Package inspect reads a cluster's objects in its bucket the way an
// operator needs them, without joining the cluster: the alarm index
// ([Cluster.Alarms]), one actor's committed alarm state and ownership
// ([Cluster.Actor]), the index doctor ([Cluster.Verify]) and its mend
// ([Cluster.Backfill]). Only Backfill writes, and only index entries; no
// call takes a hold. cmd/keepctl is its command line.
//
// Actor state is read from the latest snapshot in the bucket: what the
// cluster has replicated, which for an actor in the middle of an event may
// be a step behind its holder's database.
package inspect

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
)

// Cluster is a cluster's objects in a bucket, under its prefix.
type Cluster struct {
	b       *bucket.Counting
	prefix  string
	index   bucket.Bucket
	replica *cluster.Replica
}

// New reads the cluster under prefix in b ("" means cluster.DefaultPrefix).
func New(b bucket.Bucket, prefix string) *Cluster {
	if prefix == "" {
		prefix = cluster.DefaultPrefix
	}
	c := bucket.NewCounting(b)
	return &Cluster{b: c, prefix: prefix, index: bucket.WithPrefix(c, prefix), replica: cluster.NewReplica(c, prefix)}
}

// Requests returns the requests this Cluster has sent so far.
func (c *Cluster) Requests() bucket.Counts { return c.b.Counts() }

// Entry is one index entry.
type Entry struct {
	// Object is the entry's key in the bucket (the prefix included).
	Object string         `json:"object"`
	Actor  abi.ActorID    `json:"-"`
	Name   string         `json:"actor"`
	DueMs  int64          `json:"due_ms"`
	Legacy bool           `json:"legacy,omitempty"`
	Tag    alarmindex.Tag `json:"-"`
	// Generation and Nonce are the tag's (zero for a legacy entry).
	Generation uint64 `json:"generation,omitempty"`
	Nonce      string `json:"nonce,omitempty"`
}

func (c *Cluster) entry(k alarmindex.Key) Entry {
	return Entry{Object: c.prefix + k.String(), Actor: k.Actor, Name: k.Actor.String(), DueMs: k.DueMs,
		Legacy: k.Legacy, Tag: k.Tag, Generation: k.Tag.Generation, Nonce: k.Tag.Nonce}
}

func (e Entry) key() alarmindex.Key {
	return alarmindex.Key{Actor: e.Actor, DueMs: e.DueMs, Legacy: e.Legacy, Tag: e.Tag}
}

// Filter selects index entries. Zero fields select everything.
type Filter struct {
	Tenant, Class string
	// DueAfter and DueBefore bound the due time (Unix ms, inclusive); 0
	// for no bound.
	DueAfter, DueBefore int64
}

func (f Filter) keep(k alarmindex.Key) bool {
	return (f.Class == "" || k.Actor.Class == f.Class) &&
		(f.DueAfter == 0 || k.DueMs >= f.DueAfter) && (f.DueBefore == 0 || k.DueMs <= f.DueBefore)
}

// Tenants returns the tenants with entries in the index: one delimited
// LIST per 1,000 tenants.
func (c *Cluster) Tenants(ctx context.Context) ([]string, error) {
	folders, err := c.index.ListFolders(ctx, alarmindex.Root, math.MaxInt32)
	if err != nil {
		return nil, fmt.Errorf("listing the index's tenants: %w", err)
	}
	out := make([]string, 0, len(folders))
	for _, f := range folders {
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(f, alarmindex.Root), "/"))
	}
	return out, nil
}

// Alarms lists the index entries f selects, by tenant and then due time.
// Keys under the index that are not entries are returned in malformed.
// It reads one LIST page per 1,000 keys of each tenant it reads, stopping
// at DueBefore.
func (c *Cluster) Alarms(ctx context.Context, f Filter) (entries []Entry, malformed []string, err error) {
	tenants := []string{f.Tenant}
	if f.Tenant == "" {
		if tenants, err = c.Tenants(ctx); err != nil {
			return nil, nil, err
		}
	}
	for _, t := range tenants {
		prefix := alarmindex.TenantPrefix(t)
		after := ""
		if f.DueAfter > 0 {
			// Every key due at DueAfter or later sorts after this one.
			after = strings.TrimSuffix(alarmindex.TimePrefix(t, f.DueAfter-1), "/") + "0"
		}
	pages:
		for {
			keys, err := c.index.List(ctx, prefix, after, bucket.MaxPage)
			if err != nil {
				return nil, nil, fmt.Errorf("listing tenant %q's index: %w", t, err)
			}
			for _, k := range keys {
				pk, err := alarmindex.ParseKey(k)
				if err != nil || pk.Actor.Tenant != t {
					malformed = append(malformed, c.prefix+k)
					continue
				}
				if f.DueBefore > 0 && pk.DueMs > f.DueBefore {
					break pages
				}
				if f.keep(pk) {
					entries = append(entries, c.entry(pk))
				}
			}
			if len(keys) < bucket.MaxPage {
				break
			}
			after = keys[len(keys)-1]
		}
	}
	return entries, malformed, nil
}

// ActorInfo is one actor as the bucket has it.
type ActorInfo struct {
	Actor abi.ActorID `json:"-"`
	Name  string      `json:"actor"`
	// InBucket: the bucket has state for the actor; Snapshot is the
	// latest, uploaded under hold Generation (Seq within it). Deleted: the
	// latest is a tombstone.
	InBucket   bool   `json:"in_bucket"`
	Snapshot   string `json:"snapshot,omitempty"`
	Generation uint64 `json:"generation,omitempty"`
	Seq        uint64 `json:"seq,omitempty"`
	Deleted    bool   `json:"deleted,omitempty"`
	// The committed alarm (nil: none), its failure count, the entry the
	// state names (alarm_indexed), the fence and whether on-init ran.
	AlarmMs      *int64 `json:"alarm_ms"`
	RetryCount   int    `json:"retry_count"`
	AlarmIndexed string `json:"alarm_indexed"`
	OwnerFence   string `json:"owner_fence,omitempty"`
	InitDone     bool   `json:"init_done"`
	// DeadLetter is the last alarm whose retries were given up after its
	// class's last attempt (nil: none).
	DeadLetter *hostmod.DeadLetter `json:"dead_letter,omitempty"`
	// Named is the object key alarm_indexed names ("" for none); NamedExists
	// says whether it is in the bucket.
	Named       string `json:"named_entry,omitempty"`
	NamedExists bool   `json:"named_entry_exists"`
	// Hold is the ownership record (nil: none).
	Hold *cluster.Ownership `json:"hold,omitempty"`
}

// Actor reads one actor: its ownership record, its newest snapshot (the
// one the records name, see cluster.ReadState) and, when the snapshot
// names an entry, that entry (a GET of the record, at most a HEAD of its
// hold's snapshot, a GET of the snapshot and of the entry; a LIST of the
// snapshots only for a record from before records named the state). It
// writes nothing and takes no hold.
func (c *Cluster) Actor(ctx context.Context, id abi.ActorID) (ActorInfo, error) {
	info := ActorInfo{Actor: id, Name: id.String()}
	if err := id.Validate(); err != nil {
		return info, err
	}
	own, ok, err := cluster.ReadOwnership(ctx, c.b, c.prefix, id)
	if err != nil {
		return info, err
	}
	if ok {
		info.Hold = &own
	}
	snap, ok, err := cluster.ReadState(ctx, c.b, c.prefix, id)
	if err != nil || !ok {
		return info, err
	}
	st, err := c.readState(ctx, id, snap)
	if err != nil {
		return info, err
	}
	info.InBucket, info.Snapshot, info.Generation, info.Seq = true, snap.Key, snap.Generation, snap.Seq
	st.fill(&info)
	if st.named != nil {
		info.Named = c.prefix + st.named.String()
		if _, _, err := c.index.Get(ctx, st.named.String()); err == nil {
			info.NamedExists = true
		} else if !isNotFound(err) {
			return info, fmt.Errorf("actor %s: reading its named entry: %w", id, err)
		}
	}
	return info, nil
}

// state is what the doctor reads of a snapshot.
type state struct {
	absent     bool // the records name no state (readLatest)
	deleted    bool
	alarm      *int64
	retries    int
	indexed    string
	fence      string
	initDone   bool
	named      *alarmindex.Key
	generation uint64
	deadLetter *hostmod.DeadLetter
}

func (s state) fill(info *ActorInfo) {
	info.Deleted, info.AlarmMs, info.RetryCount = s.deleted, s.alarm, s.retries
	info.AlarmIndexed, info.OwnerFence, info.InitDone = s.indexed, s.fence, s.initDone
	info.DeadLetter = s.deadLetter
}

// readState downloads a snapshot into a temporary file and reads it.
func (c *Cluster) readState(ctx context.Context, id abi.ActorID, snap cluster.Snapshot) (state, error) {
	data, _, err := c.replica.Download(ctx, id, snap)
	if err != nil {
		return state{}, err
	}
	out := state{generation: snap.Generation}
	if len(data) == 0 {
		out.deleted = true
		return out, nil
	}
	// A snapshot of a later build's format is not read at all: what its
	// tables hold may mean something else (docs/design.md#format-versions).
	if err := engine.CheckSnapshotFormat(data); err != nil {
		return state{}, fmt.Errorf("actor %s: snapshot %s: %w", id, snap.Key, err)
	}
	dir, err := os.MkdirTemp("", "keepctl-")
	if err != nil {
		return state{}, err
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "actor.db")
	if err := engine.WriteSnapshot(p, data); err != nil {
		return state{}, fmt.Errorf("actor %s: snapshot %s: %w", id, snap.Key, err)
	}
	// A snapshot that cannot be opened or read is, most likely, not a
	// database the host wrote: CheckSnapshot says so (an error wrapping
	// engine.ErrBadSnapshot, which retrying cannot mend) or else lets the
	// error stand.
	fail := func(err error) (state, error) {
		if cerr := engine.CheckSnapshot(data); errors.Is(cerr, engine.ErrBadSnapshot) {
			err = cerr
		}
		return state{}, fmt.Errorf("actor %s: snapshot %s: %w", id, snap.Key, err)
	}
	st, err := engine.OpenStore(p)
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	at, ok, err := st.Alarm()
	if err != nil {
		return fail(err)
	}
	if ok {
		out.alarm = &at
	}
	if out.retries, err = st.Failures(); err != nil {
		return fail(err)
	}
	if out.indexed, _, err = st.Meta(hostmod.MetaAlarmIndexed); err != nil {
		return fail(err)
	}
	if out.fence, _, err = st.Meta(hostmod.MetaOwnerFence); err != nil {
		return fail(err)
	}
	if _, out.initDone, err = st.Meta(hostmod.MetaInitDone); err != nil {
		return fail(err)
	}
	if out.named, err = alarmindex.ParseRecorded(id, out.indexed); err != nil {
		return fail(err)
	}
	if dl, ok, err := st.DeadLetter(); err != nil {
		return fail(err)
	} else if ok {
		out.deadLetter = &dl
	}
	return out, nil
}

// FailedAlarm is an actor's dead letter: the last alarm whose retries were
// given up.
type FailedAlarm struct {
	Actor abi.ActorID `json:"-"`
	Name  string      `json:"actor"`
	hostmod.DeadLetter
}

// Failed reads the newest state of every actor (a LIST of the snapshots
// finds them; each one's state is read as its ownership record names it)
// and returns the dead letters, in actor order,
// of the actors the filter keeps (Tenant, Class; DueAfter and DueBefore
// bound when the last attempt failed). It writes nothing.
func (c *Cluster) Failed(ctx context.Context, f Filter) ([]FailedAlarm, error) {
	latest, _, err := c.latestStates(ctx)
	if err != nil {
		return nil, err
	}
	var out []FailedAlarm
	for _, id := range sortedActors(latest) {
		if (f.Tenant != "" && id.Tenant != f.Tenant) || (f.Class != "" && id.Class != f.Class) {
			continue
		}
		st, err := c.readLatest(ctx, id)
		if err != nil {
			return out, err
		}
		dl := st.deadLetter
		if dl == nil || (f.DueAfter != 0 && dl.FailedAt < f.DueAfter) || (f.DueBefore != 0 && dl.FailedAt > f.DueBefore) {
			continue
		}
		out = append(out, FailedAlarm{Actor: id, Name: id.String(), DeadLetter: *dl})
	}
	return out, nil
}

func isNotFound(err error) bool { return errors.Is(err, bucket.ErrNotFound) }

// latestStates lists every snapshot key under <prefix>state/ and returns
// the latest per actor. Keys that are not snapshots go to malformed.
func (c *Cluster) latestStates(ctx context.Context) (map[abi.ActorID]cluster.Snapshot, []string, error) {
	root := c.prefix + "state/"
	keys, err := c.b.List(ctx, root, "", math.MaxInt32)
	if err != nil {
		return nil, nil, fmt.Errorf("listing the actors' state: %w", err)
	}
	out := map[abi.ActorID]cluster.Snapshot{}
	var malformed []string
	for _, k := range keys {
		parts := strings.Split(strings.TrimPrefix(k, root), "/")
		if len(parts) != 4 {
			malformed = append(malformed, k)
			continue
		}
		name, err := hex.DecodeString(parts[2])
		id := abi.ActorID{Tenant: parts[0], Class: parts[1], Name: string(name)}
		if err != nil {
			malformed = append(malformed, k)
			continue
		}
		s, err := c.replica.Parse(id, k)
		if err != nil {
			malformed = append(malformed, k)
			continue
		}
		if have, ok := out[id]; !ok || s.Newer(have) {
			out[id] = s
		}
	}
	return out, malformed, nil
}

func sortedActors[V any](m map[abi.ActorID]V) []abi.ActorID {
	ids := make([]abi.ActorID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	return ids
}

func isPrecondition(err error) bool { return errors.Is(err, bucket.ErrPrecondition) }
