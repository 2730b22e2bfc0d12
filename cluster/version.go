package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/format"
)

// Finalized is the cluster version a cluster was finalized at, as the one
// object <prefix>cluster/version records it (keepctl cluster finalize
// writes it; docs/upgrading.md#finalizing-an-upgrade). A node of a build
// that supports a lower version (format.ClusterVersion) refuses to start
// on the cluster, and a feature gated on a version is on once the cluster
// is finalized at it or later. No object is version 0: never finalized.
type Finalized struct {
	// Format is the record's format version (format.ClusterRecordVersion).
	Format int `json:"format"`
	// ClusterVersion is the version the cluster was finalized at.
	ClusterVersion int `json:"cluster_version"`
	// FinalizedMs is when, in Unix milliseconds by the writer's clock, and
	// By what wrote it: for people only.
	FinalizedMs int64  `json:"finalized_ms"`
	By          string `json:"by"`
}

// VersionKey is the key of the finalized cluster version under prefix (""
// means DefaultPrefix).
func VersionKey(prefix string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return prefix + "cluster/version"
}

// ReadFinalized reads the finalized cluster version under prefix with one
// GET: the record and its ETag, or the zero Finalized (version 0) and ""
// when there is none. A record of a format newer than this build reads is
// an error wrapping a *format.NewerError; one that is not a record, or
// names a negative version, is an error too.
func ReadFinalized(ctx context.Context, b bucket.Bucket, prefix string) (f Finalized, etag string, err error) {
	key := VersionKey(prefix)
	body, etag, err := b.Get(ctx, key)
	if errors.Is(err, bucket.ErrNotFound) {
		return Finalized{}, "", nil
	}
	if err != nil {
		return Finalized{}, "", fmt.Errorf("reading the cluster version %s: %w", key, err)
	}
	if err := format.CheckJSON(format.ClusterRecord, body); err != nil {
		return Finalized{}, "", fmt.Errorf("the cluster version %s: %w", key, err)
	}
	if err := json.Unmarshal(body, &f); err != nil || f.ClusterVersion < 0 {
		return Finalized{}, "", fmt.Errorf("the cluster version %s is not a cluster version record (%.80q): %v", key, body, err)
	}
	return f, etag, nil
}

// WriteFinalized writes f (its Format set to this build's) as the
// finalized cluster version under prefix, with a conditional PUT: only if
// the record is still the one read with etag, or, with etag "", only if
// there is none. A write that lost to another is an error wrapping
// bucket.ErrPrecondition: read it again. It returns the new ETag.
func WriteFinalized(ctx context.Context, b bucket.Bucket, prefix string, f Finalized, etag string) (string, error) {
	f.Format = format.ClusterRecordVersion
	body, err := json.Marshal(f)
	if err != nil {
		return "", err
	}
	cond := bucket.Cond{IfMatch: etag, IfNoneMatch: etag == ""}
	return b.Put(ctx, VersionKey(prefix), body, cond)
}
