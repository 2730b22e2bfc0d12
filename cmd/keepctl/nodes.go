package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/format"
)

// nodeLease is a node's lease as keepctl nodes shows it, read from the
// lease object the node writes at <prefix>nodes/<node id> (package
// cluster's lease record).
type nodeLease struct {
	NodeID string `json:"node_id"`
	Addr   string `json:"addr"`
	// Classes the node serves; nil: every class.
	Classes   []string `json:"classes"`
	TTLms     int64    `json:"ttl_ms"`
	RenewedMs int64    `json:"renewed_ms"`
	Instance  string   `json:"instance"`
	Seq       uint64   `json:"seq"`
	// Version and Revision are the build of the node's process (its
	// version, and the commit it was built from); "" where its lease
	// names none: a build from before leases named theirs, or (Revision)
	// one that recorded no commit.
	Version  string `json:"version"`
	Revision string `json:"revision"`
	// ClusterVersion is the newest cluster version the node's build
	// supports; 0 where its lease names none (a build from before cluster
	// versions).
	ClusterVersion int `json:"cluster_version"`
	// Renewed is RenewedMs in RFC 3339; Live whether the lease runs past
	// now, both by the clock of the node that wrote it.
	Renewed string `json:"renewed"`
	Live    bool   `json:"live"`
	// Key is the lease object; Error why it could not be read ("" if it
	// was).
	Key   string `json:"key"`
	Error string `json:"error,omitempty"`
}

// maxNodes bounds the leases nodes lists.
const maxNodes = 10000

func nodes(ctx context.Context, b bucket.Bucket, prefix string, args []string, stdout, stderr io.Writer) (int, error) {
	fs := subFlags("nodes", stderr)
	asJSON := jsonFlag(fs, "one JSON array")
	if err := parseArgs(fs, args, stdout); err != nil {
		return 2, err
	}
	if fs.NArg() > 0 {
		return 2, fmt.Errorf("%w: %q is not a flag", errUsage, fs.Arg(0))
	}
	now := time.Now()
	leases, err := readLeases(ctx, b, prefix, now)
	if err != nil {
		return 2, err
	}
	if *asJSON {
		return 0, writeJSON(stdout, leases)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tVERSION\tCOMMIT\tSTATE\tRENEWED\tTTL\tCLASSES")
	live := 0
	for _, l := range leases {
		if l.Error != "" {
			fmt.Fprintf(tw, "?\t\t\t\tunreadable\t\t\t%s: %s\n", l.Key, l.Error)
			continue
		}
		state := "live"
		if l.Live {
			live++
		} else {
			state = fmt.Sprintf("lapsed %v ago", now.Sub(time.UnixMilli(l.RenewedMs+l.TTLms)).Round(time.Second))
		}
		classes := "(all)"
		if l.Classes != nil {
			classes = strings.Join(l.Classes, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s (%v ago)\t%v\t%s\n", l.NodeID, l.Addr, orDash(l.Version), orDash(shortCommit(l.Revision)),
			state, l.Renewed, now.Sub(time.UnixMilli(l.RenewedMs)).Round(time.Second), time.Duration(l.TTLms)*time.Millisecond, classes)
	}
	if err := tw.Flush(); err != nil {
		return 2, err
	}
	fmt.Fprintf(stdout, "%d node leases, %d live (by the clocks of the nodes that wrote them)\n", len(leases), live)
	return 0, nil
}

// readLeases reads every node lease under prefix, each judged live or not
// at now by the clock of the node that wrote it. A lease that cannot be
// read (a later build's format, or no lease) has its Error set.
func readLeases(ctx context.Context, b bucket.Bucket, prefix string, now time.Time) ([]nodeLease, error) {
	keys, err := b.List(ctx, prefix+"nodes/", "", maxNodes)
	if err != nil {
		return nil, err
	}
	leases := []nodeLease{}
	for _, k := range keys {
		l := nodeLease{Key: k}
		body, _, err := b.Get(ctx, k)
		switch {
		case errors.Is(err, bucket.ErrNotFound):
			continue // the node closed since the LIST: its lease is gone
		case err != nil:
			return nil, err
		}
		if err := format.CheckJSON(format.Lease, body); err != nil {
			l.Error = err.Error() // a later build's lease: not read
		} else if err := json.Unmarshal(body, &l); err != nil || l.NodeID == "" {
			l.Error = fmt.Sprintf("not a node lease (%d bytes)", len(body))
			if err != nil {
				l.Error += ": " + err.Error()
			}
		} else {
			l.Renewed = formatMs(l.RenewedMs)
			l.Live = now.Before(time.UnixMilli(l.RenewedMs + l.TTLms))
		}
		leases = append(leases, l)
	}
	return leases, nil
}

// shortCommit is a commit as git's short form: its first 12 characters.
func shortCommit(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

// orDash is s, or "-" where it is empty (unknown).
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
