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

// Snapshot names one upload of an actor's database: the hold generation it
// was made under and its sequence within that hold.
type Snapshot struct {
	Key        string
	Generation uint64
	Seq        uint64
}

// Newer reports whether s sorts after o (by generation, then sequence).
func (s Snapshot) Newer(o Snapshot) bool {
	if s.Generation != o.Generation {
		return s.Generation > o.Generation
	}
	return s.Seq > o.Seq
}

// Replica stores actor databases in the bucket, one object per upload:
//
//	<prefix>state/<tenant>/<class>/<hex name>/<generation, 20 digits>-<seq, 20 digits>
//
// S3 lists keys in order, so the last key is the newest state. An upload
// from an earlier holder that lands late sorts below every upload of a later
// generation: it becomes the state if and only if nothing newer exists (the
// late-commit rule). An empty object is a tombstone: the actor was deleted.
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

// List returns the actor's snapshots, oldest first. Malformed keys are
// skipped.
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

// Latest returns the newest snapshot of id; ok is false when the bucket has
// none.
func (r *Replica) Latest(ctx context.Context, id abi.ActorID) (s Snapshot, ok bool, err error) {
	all, err := r.List(ctx, id)
	if err != nil || len(all) == 0 {
		return Snapshot{}, false, err
	}
	return all[len(all)-1], true, nil
}

// Download reads a snapshot's bytes (empty for a tombstone).
func (r *Replica) Download(ctx context.Context, id abi.ActorID, s Snapshot) ([]byte, error) {
	body, _, err := r.b.Get(ctx, s.Key)
	if err != nil {
		return nil, &abi.ActorError{ID: id, Err: fmt.Errorf("download snapshot %s: %w", s.Key, err)}
	}
	return body, nil
}

// Upload stores data as the snapshot (generation, seq) of id. Keys are
// never reused, so the PUT is conditional on the key being new; a retried
// PUT that finds its own first attempt landed is success.
func (r *Replica) Upload(ctx context.Context, id abi.ActorID, generation, seq uint64, data []byte) (Snapshot, error) {
	key := r.Key(id, generation, seq)
	if data == nil {
		data = []byte{}
	}
	_, err := r.b.Put(ctx, key, data, bucket.Cond{IfNoneMatch: true})
	if errors.Is(err, bucket.ErrPrecondition) {
		var oe *bucket.OpError
		if errors.As(err, &oe) && oe.Attempts > 1 {
			if body, _, gerr := r.b.Get(ctx, key); gerr == nil && string(body) == string(data) {
				err = nil
			}
		}
	}
	if err != nil {
		return Snapshot{}, &abi.ActorError{ID: id, Err: fmt.Errorf("upload snapshot %s: %w", key, err)}
	}
	return Snapshot{Key: key, Generation: generation, Seq: seq}, nil
}

// Prune removes the snapshots of id older than keep (best effort): they
// can no longer become the state, since keep is newer and exists.
func (r *Replica) Prune(ctx context.Context, id abi.ActorID, keep Snapshot) error {
	all, err := r.List(ctx, id)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range all {
		if keep.Newer(s) {
			if err := r.b.Delete(ctx, s.Key); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
