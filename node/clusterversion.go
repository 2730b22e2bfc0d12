package node

import (
	"context"
	"fmt"

	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/format"
)

// checkClusterVersion reads the cluster version the cluster was finalized
// at (cluster.ReadFinalized), before the node takes its lease: a cluster
// finalized above the version this build supports (format.ClusterVersion)
// is one whose nodes may write data this build cannot read, so the node
// does not start, and says which build to run. The version read is the
// node's from then on (FinalizedClusterVersion).
func (n *Node) checkClusterVersion(ctx context.Context, c *ClusterConfig) error {
	fin, _, err := cluster.ReadFinalized(ctx, c.Bucket, c.Prefix)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if fin.ClusterVersion > format.ClusterVersion {
		return fmt.Errorf("node: the cluster was finalized at cluster version %d (%s); this build supports up to %d: run a build of cluster version %d or later",
			fin.ClusterVersion, cluster.VersionKey(c.Prefix), format.ClusterVersion, fin.ClusterVersion)
	}
	n.finalized = fin.ClusterVersion
	return nil
}

// FinalizedClusterVersion is the cluster version the cluster was finalized
// at, as the node read it when it started (0: never finalized). A node
// running alone has no cluster to finalize: its own build's version
// (format.ClusterVersion).
func (n *Node) FinalizedClusterVersion() int { return n.finalized }

// ClusterAtLeast reports whether the cluster was finalized at version v or
// later (FinalizedClusterVersion), so every node that may join it runs a
// build that supports v: one of an earlier build refuses to start.
//
// A feature whose data the builds before version v cannot read (as the
// table of idempotency keys in an actor's schema was for the builds before
// it) is turned on only when ClusterAtLeast(v) returns true. Until the
// cluster is finalized at v, nodes of the build before may still share
// the bucket, and rolling back to it stays safe; after, it is not (docs/
// upgrading.md#finalizing-an-upgrade). No feature of this build is gated
// so: every format it writes is one the build before reads.
func (n *Node) ClusterAtLeast(v int) bool { return n.finalized >= v }
