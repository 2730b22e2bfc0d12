package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/format"
)

// clusterVersions is what keepctl cluster version shows, and cluster
// finalize in -o json: the version the cluster was finalized at, the
// newest keepctl's build supports, and the live nodes' leases.
type clusterVersions struct {
	// Finalized is the finalized version (0: never finalized), with when
	// and by what (absent when never).
	Finalized   int    `json:"finalized"`
	FinalizedAt string `json:"finalized_at,omitempty"`
	By          string `json:"by,omitempty"`
	// Supported is the newest cluster version keepctl's build supports.
	Supported int `json:"supported"`
	// Nodes are the live nodes' leases, and the leases that could not be
	// read (Error set).
	Nodes []nodeLease `json:"nodes"`
	// Previous is, after a finalize, the version it replaced.
	Previous *int `json:"previous,omitempty"`
}

// readVersions reads the finalized cluster version, with its ETag, and the
// live nodes' leases (and those that cannot be read).
func readVersions(ctx context.Context, b bucket.Bucket, prefix string) (clusterVersions, string, error) {
	fin, etag, err := cluster.ReadFinalized(ctx, b, prefix)
	if err != nil {
		return clusterVersions{}, "", err
	}
	v := clusterVersions{Finalized: fin.ClusterVersion, By: fin.By, Supported: format.ClusterVersion, Nodes: []nodeLease{}}
	if etag != "" {
		v.FinalizedAt = formatMs(fin.FinalizedMs)
	}
	leases, err := readLeases(ctx, b, prefix, time.Now())
	if err != nil {
		return clusterVersions{}, "", err
	}
	for _, l := range leases {
		if l.Live || l.Error != "" {
			v.Nodes = append(v.Nodes, l)
		}
	}
	return v, etag, nil
}

// behind lists, one line each, the live nodes whose leases name a cluster
// version below to, and the leases that cannot be read (which version
// their nodes support is unknown).
func behind(nodes []nodeLease, to int) []string {
	var out []string
	for _, l := range nodes {
		switch {
		case l.Error != "":
			out = append(out, fmt.Sprintf("%s: unreadable, so its node's cluster version is unknown (%s)", l.Key, l.Error))
		case l.ClusterVersion == 0:
			out = append(out, fmt.Sprintf("node %s (%s) names no cluster version: a build from before cluster versions (0)", l.NodeID, orDash(l.Version)))
		case l.ClusterVersion < to:
			out = append(out, fmt.Sprintf("node %s (%s) names cluster version %d", l.NodeID, orDash(l.Version), l.ClusterVersion))
		}
	}
	return out
}

func clusterVersion(ctx context.Context, b bucket.Bucket, prefix string, args []string, stdout, stderr io.Writer) (int, error) {
	fs := subFlags("cluster version", stderr)
	asJSON := jsonFlag(fs, "one JSON object")
	if err := parseArgs(fs, args, stdout); err != nil {
		return 2, err
	}
	if fs.NArg() > 0 {
		return 2, fmt.Errorf("%w: %q is not a flag", errUsage, fs.Arg(0))
	}
	v, _, err := readVersions(ctx, b, prefix)
	if err != nil {
		return 2, err
	}
	if *asJSON {
		return 0, writeJSON(stdout, v)
	}
	writeVersions(stdout, v)
	return 0, nil
}

// writeVersions writes v as text: the finalized version, then each live
// node's.
func writeVersions(w io.Writer, v clusterVersions) {
	if v.FinalizedAt == "" {
		fmt.Fprintf(w, "finalized: %d (never finalized)\n", v.Finalized)
	} else {
		fmt.Fprintf(w, "finalized: %d (at %s, by %s)\n", v.Finalized, v.FinalizedAt, v.By)
	}
	fmt.Fprintf(w, "this keepctl supports up to: %d\n", v.Supported)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tCLUSTER VERSION\tVERSION\tCOMMIT")
	for _, l := range v.Nodes {
		if l.Error != "" {
			fmt.Fprintf(tw, "?\t?\t\t%s: %s\n", l.Key, l.Error)
			continue
		}
		cv := strconv.Itoa(l.ClusterVersion)
		if l.ClusterVersion == 0 {
			cv = "0 (none)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", l.NodeID, cv, orDash(l.Version), orDash(shortCommit(l.Revision)))
	}
	tw.Flush()
	fmt.Fprintf(w, "%d live nodes\n", len(v.Nodes))
}

func clusterFinalize(ctx context.Context, b bucket.Bucket, prefix string, args []string, stdout, stderr io.Writer) (int, error) {
	fs := subFlags("cluster finalize", stderr)
	to := fs.Int("to", format.ClusterVersion, "the cluster `version` to finalize at (default: the newest this keepctl supports)")
	asJSON := jsonFlag(fs, "the cluster's versions after it as one JSON object")
	if err := parseArgs(fs, args, stdout); err != nil {
		return 2, err
	}
	if fs.NArg() > 0 {
		return 2, fmt.Errorf("%w: %q is not a flag", errUsage, fs.Arg(0))
	}
	if *to < 1 {
		return 2, fmt.Errorf("%w: -to %d: a cluster version is 1 or more", errUsage, *to)
	}
	v, etag, err := readVersions(ctx, b, prefix)
	if err != nil {
		return 2, err
	}
	switch {
	case *to < v.Finalized:
		fmt.Fprintf(stderr, "keepctl cluster finalize: the cluster was finalized at cluster version %d: it does not go back to %d (nodes of the builds that support only %d refuse to start on it for good)\n", v.Finalized, *to, *to)
		return 1, nil
	case *to == v.Finalized:
		fmt.Fprintf(stdout, "the cluster is already finalized at cluster version %d; nothing written\n", v.Finalized)
		return 0, nil
	}
	// Every live node must support the version, or the features it turns
	// on would write data that node cannot read.
	if lines := behind(v.Nodes, *to); len(lines) > 0 {
		fmt.Fprintf(stderr, "keepctl cluster finalize: not finalized at cluster version %d: %d live nodes do not support it (upgrade them first, and run it again):\n", *to, len(lines))
		for _, l := range lines {
			fmt.Fprintf(stderr, "  %s\n", l)
		}
		return 1, nil
	}
	now := time.Now()
	if _, err := cluster.WriteFinalized(ctx, b, prefix, cluster.Finalized{ClusterVersion: *to, FinalizedMs: now.UnixMilli(), By: "keepctl"}, etag); err != nil {
		if errors.Is(err, bucket.ErrPrecondition) {
			fmt.Fprintf(stderr, "keepctl cluster finalize: the cluster version changed since it was read (another finalize?); nothing written: run it again\n")
			return 1, nil
		}
		return 2, err
	}
	prev := v.Finalized
	v.Finalized, v.FinalizedAt, v.By, v.Previous = *to, formatMs(now.UnixMilli()), "keepctl", &prev
	// A node that started as the leases were read, before the record was
	// written, read no finalized version: it joined, and must be
	// upgraded.
	after, _, err := readVersions(ctx, b, prefix)
	if err != nil {
		return 2, fmt.Errorf("finalized at cluster version %d, but could not read the leases again: %w", *to, err)
	}
	late := behind(after.Nodes, *to)
	if *asJSON {
		v.Nodes = after.Nodes
		if err := writeJSON(stdout, v); err != nil {
			return 2, err
		}
	} else {
		fmt.Fprintf(stdout, "finalized the cluster at cluster version %d (was %d): %d live nodes support it; a node of a build that supports less now refuses to start on this cluster\n", *to, prev, len(v.Nodes))
	}
	if len(late) > 0 {
		fmt.Fprintf(stderr, "keepctl cluster finalize: finalized, but %d nodes that do not support cluster version %d started meanwhile: stop them and start them on a build that does:\n", len(late), *to)
		for _, l := range late {
			fmt.Fprintf(stderr, "  %s\n", l)
		}
		return 1, nil
	}
	return 0, nil
}
