// Package format versions what a cluster writes to its bucket, and the
// actor's schema, so that a node meeting a record of a later format than
// it reads refuses it, clearly and retryably, rather than misread it
// (docs/design.md#format-versions).
//
// Every kind is at version 1 in this build, and a record that carries no
// version (written before versions existed) is version 1: the formats of
// then are the formats of now. Where each kind keeps its version:
//
//   - Lease (<prefix>nodes/<node id>) and Hold (<prefix>holds/...): the
//     JSON field "format", read before any other field (CheckJSON), so a
//     later format that changed another field's type is refused, never
//     half read.
//   - IndexEntry: the class folder of the key, <class>.t for version 1
//     (legacy keys, <class> alone, are read by version 1 too) and
//     <class>.v<N> for a version N above 1. Every version keeps the tenant
//     and the due time as the first two segments, so a sweep still stops
//     at the first entry not yet due without reading what it cannot.
//   - Snapshot: a snapshot is an SQLite database image (version 1, or an
//     empty object for a deleted actor); a later container begins with the
//     line "wasmkeep-snapshot/<N>".
//   - Schema: the SQLite header's user_version field of the database (0,
//     as SQLite creates it, is version 1).
//   - DeadLetter (<prefix>dead-letters/...): the JSON field "format", as a
//     lease's.
//   - ClusterRecord (<prefix>cluster/version, the finalized cluster
//     version): the JSON field "format", as a lease's.
//
// Apart from the formats, a cluster has a version: ClusterVersion is the
// newest this build supports, each node's lease names it, and once every
// live node names at least N, keepctl cluster finalize records N in the
// bucket. A node of a build that supports less then refuses to start; a
// feature whose data earlier builds cannot read stays off until the
// cluster is finalized at the version that brought it
// (docs/upgrading.md#finalizing-an-upgrade).
//
// An optional JSON field that readers of earlier builds may ignore (their
// parse skips fields it does not know) takes no new version, as the
// lease's version and revision of its writer's build did not; only a
// change an earlier reader would misread does.
package format

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Kind is a kind of record with a format version.
type Kind string

// The kinds, as the label of wasmkeep_newer_format_total names them.
const (
	Lease      Kind = "lease"
	Hold       Kind = "hold"
	IndexEntry Kind = "index_entry"
	Snapshot   Kind = "snapshot"
	Schema     Kind = "schema"
	DeadLetter Kind = "dead_letter"
	// ClusterRecord is the finalized cluster version's record. A node
	// reads it only as it starts, and one of a later format stops the
	// start: it is not among Kinds.
	ClusterRecord Kind = "cluster_version"
)

// Kinds lists every kind a node reads as it serves, in a fixed order: the
// values of the kind label of wasmkeep_newer_format_total.
var Kinds = []Kind{Lease, Hold, IndexEntry, Snapshot, Schema, DeadLetter}

// The versions this build writes, and the newest it reads, of each kind.
const (
	LeaseVersion         = 1
	HoldVersion          = 1
	IndexVersion         = 1
	SnapshotVersion      = 1
	SchemaVersion        = 1
	DeadLetterVersion    = 1
	ClusterRecordVersion = 1
)

// ClusterVersion is the newest cluster version this build supports, which
// its nodes' leases name (docs/upgrading.md#finalizing-an-upgrade). It is
// raised by a build that brings a feature whose data the builds before it
// cannot read; that feature stays off until the cluster is finalized at
// the new version, which only a cluster whose live nodes all support it
// can be. A lease that names none is of a build from before cluster
// versions: version 0, as is a cluster never finalized.
const ClusterVersion = 1

// Known is the newest version of k this build reads (and the one it
// writes).
func Known(k Kind) int {
	switch k {
	case Lease:
		return LeaseVersion
	case Hold:
		return HoldVersion
	case IndexEntry:
		return IndexVersion
	case Snapshot:
		return SnapshotVersion
	case Schema:
		return SchemaVersion
	case DeadLetter:
		return DeadLetterVersion
	case ClusterRecord:
		return ClusterRecordVersion
	}
	return 0
}

// ErrNewer is matched (errors.Is) by every *NewerError.
var ErrNewer = errors.New("a format newer than this build reads")

// NewerError is a record of a later format than this build reads: it is
// refused, left as it is in the bucket, for a node that reads it. Find it
// with errors.As; errors.Is(err, ErrNewer) tells it too.
type NewerError struct {
	Kind Kind
	// Version is the record's; Known the newest this build reads.
	Version, Known int
}

// Error names the kind and both versions.
func (e *NewerError) Error() string {
	return fmt.Sprintf("%s format version %d is newer than this build reads (up to %d): a node of a later build wrote it", e.Kind, e.Version, e.Known)
}

// Is makes errors.Is(err, ErrNewer) true.
func (e *NewerError) Is(target error) bool { return target == ErrNewer }

// Check reports whether this build reads version v of kind k: nil for 0
// (no version written: 1) up to Known(k), a *NewerError above it, and an
// error for a negative v, which is no version.
func Check(k Kind, v int64) error {
	known := int64(Known(k))
	switch {
	case v < 0:
		return fmt.Errorf("%s format version %d is no version", k, v)
	case v > known:
		return &NewerError{Kind: k, Version: int(min(v, 1<<31-1)), Known: int(known)}
	}
	return nil
}

// CheckJSON reads the "format" field of a JSON record of kind k, and
// nothing else, and checks it (Check): a record that is no JSON object, or
// has no such field, is left for the caller's own parse to judge (no field
// is version 1). Reading the version first means a later format is
// refused whatever else it changed.
func CheckJSON(k Kind, body []byte) error {
	var head struct {
		Format json.RawMessage `json:"format"`
	}
	if json.Unmarshal(body, &head) != nil || head.Format == nil {
		return nil
	}
	var v int64
	if err := json.Unmarshal(head.Format, &v); err != nil {
		return fmt.Errorf("%s format %.20s is no version", k, head.Format)
	}
	return Check(k, v)
}

// As returns the *NewerError in err's chain, if any.
func As(err error) (*NewerError, bool) {
	var ne *NewerError
	ok := errors.As(err, &ne)
	return ne, ok
}
