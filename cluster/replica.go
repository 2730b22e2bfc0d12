package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
)

// Snapshot names an upload of an actor's database: the hold generation it
// was made under and its sequence within that hold (0 for every snapshot
// written since the hold records name the actor's state: a hold's uploads
// overwrite its one key, each If-Match the last; 1, 2, ... for the keys of
// nodes from before, one per upload), and the ETag of the version read or
// written, when known.
type Snapshot struct {
	Key        string
	Generation uint64
	Seq        uint64
	ETag       string
}

// Newer reports whether s sorts after o (by generation, then sequence).
func (s Snapshot) Newer(o Snapshot) bool {
	if s.Generation != o.Generation {
		return s.Generation > o.Generation
	}
	return s.Seq > o.Seq
}

// Replica stores actor databases in the bucket, one object per hold:
//
//	<prefix>state/<tenant>/<class>/<hex name>/<generation, 20 digits>-<seq, 20 digits>
//
// Each hold writes its own key, with sequence 0: its first upload with
// If-None-Match, each later one If-Match the ETag of the one before, so a
// hold's uploads form one chain and none is written twice. Which key holds
// the actor's state is not read from a listing but from its hold record
// (see Holds and ReadState): the newest state is the key of the hold the
// record names if that hold uploaded, else the state the record noted when
// it was taken. An empty object is a tombstone: the actor was deleted.
// Keys with other sequences were written by nodes from before the hold
// records named the state, one key per upload; a hold record from then
// names no state, and the newest key a listing shows is the state, as it
// was then.
type Replica struct {
	b      bucket.Bucket
	prefix string
}

// NewReplica returns a replica store under prefix (for example "cluster/").
func NewReplica(b bucket.Bucket, prefix string) *Replica {
	return &Replica{b: b, prefix: prefix}
}

// ActorPrefix is the folder of an actor's snapshots.
func (r *Replica) ActorPrefix(id abi.ActorID) string {
	return r.prefix + "state/" + id.Path() + "/"
}

// Key names the snapshot of id at (generation, seq).
func (r *Replica) Key(id abi.ActorID, generation, seq uint64) string {
	return fmt.Sprintf("%s%020d-%020d", r.ActorPrefix(id), generation, seq)
}

// Parse reads a snapshot key of id.
func (r *Replica) Parse(id abi.ActorID, key string) (Snapshot, error) {
	rest, ok := strings.CutPrefix(key, r.ActorPrefix(id))
	g, s, ok2 := strings.Cut(rest, "-")
	if !ok || !ok2 || len(g) != 20 || len(s) != 20 {
		return Snapshot{}, &abi.ActorError{ID: id, Err: fmt.Errorf("malformed snapshot key %q", key)}
	}
	gen, err1 := strconv.ParseUint(g, 10, 64)
	seq, err2 := strconv.ParseUint(s, 10, 64)
	if err1 != nil || err2 != nil {
		return Snapshot{}, &abi.ActorError{ID: id, Err: fmt.Errorf("malformed snapshot key %q", key)}
	}
	return Snapshot{Key: key, Generation: gen, Seq: seq}, nil
}

// List returns the actor's snapshots a listing shows, oldest first.
// Malformed keys are skipped. A listing may leave out a key being
// overwritten (an erasure-coded store): decisions read the state from the
// hold record instead (ReadState); List is for tools, and for actors whose
// record was written before records named the state.
func (r *Replica) List(ctx context.Context, id abi.ActorID) ([]Snapshot, error) {
	var out []Snapshot
	after := ""
	for {
		keys, err := r.b.List(ctx, r.ActorPrefix(id), after, bucket.MaxPage)
		if err != nil {
			return nil, &abi.ActorError{ID: id, Op: "list snapshots", Err: err}
		}
		for _, k := range keys {
			if s, err := r.Parse(id, k); err == nil {
				out = append(out, s)
			}
		}
		if len(keys) < bucket.MaxPage {
			return out, nil
		}
		after = keys[len(keys)-1]
	}
}

// ListLatest returns the newest snapshot of id a listing shows; ok is
// false when it shows none. See List for why decisions do not use it.
func (r *Replica) ListLatest(ctx context.Context, id abi.ActorID) (s Snapshot, ok bool, err error) {
	all, err := r.List(ctx, id)
	if err != nil || len(all) == 0 {
		return Snapshot{}, false, err
	}
	return all[len(all)-1], true, nil
}

// Download reads a snapshot's bytes (empty for a tombstone) and the ETag
// of the version read. A snapshot the bucket lacks is an error wrapping
// bucket.ErrNotFound: a state a hold record names is never missing, so
// this is never "no state".
func (r *Replica) Download(ctx context.Context, id abi.ActorID, s Snapshot) ([]byte, string, error) {
	body, etag, err := r.b.Get(ctx, s.Key)
	if err != nil {
		return nil, "", &abi.ActorError{ID: id, Err: fmt.Errorf("download snapshot %s: %w", s.Key, err)}
	}
	return body, etag, nil
}

// Upload stores data as the snapshot of id's hold of generation
// generation: its key with sequence 0, If-None-Match when prev is "" (the
// hold's first upload), else If-Match prev (the ETag of the hold's last
// upload), so a hold's uploads form one chain and nothing else is
// overwritten. A retried PUT that finds its first attempt landed is
// success. The Snapshot returned carries the new ETag.
func (r *Replica) Upload(ctx context.Context, id abi.ActorID, generation uint64, prev string, data []byte) (Snapshot, error) {
	key := r.Key(id, generation, 0)
	if data == nil {
		data = []byte{}
	}
	cond := bucket.Cond{IfNoneMatch: true}
	if prev != "" {
		cond = bucket.Cond{IfMatch: prev}
	}
	etag, err := r.b.Put(ctx, key, data, cond)
	if errors.Is(err, bucket.ErrPrecondition) {
		var oe *bucket.OpError
		if errors.As(err, &oe) && oe.Attempts > 1 {
			if body, getag, gerr := r.b.Get(ctx, key); gerr == nil && string(body) == string(data) {
				etag, err = getag, nil
			}
		}
	}
	if err != nil {
		return Snapshot{}, &abi.ActorError{ID: id, Err: fmt.Errorf("upload snapshot %s: %w", key, err)}
	}
	return Snapshot{Key: key, Generation: generation, ETag: etag}, nil
}
