package main

// The rolling upgrade (-upgrade-from REV): the nodes start on keepnode as
// it was at REV, then are replaced one at a time by this tree's build (a
// SIGTERM and a start under the same name and data directory, as an
// operator's rollout does), the last old node SIGKILLed while the new ones
// run; then the same backwards (a rollback), the last new node SIGKILLed
// while the old ones run; then forward again, so that a node of this
// build starts on the directory an earlier build ran on after a crash;
// then one more SIGTERM and start on the same build, the control for how
// long a start takes. No S3 faults, no other
// kills: what the check finds is the upgrade's. Every client request is
// sent under an idempotency key, so both builds read the other's record of
// keys. A 5xx answer other than 503 is a violation here.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/faultproxy"
)

// upgradeStart is one step of the rolling upgrade: a node stopped
// (SIGTERM, or SIGKILL) and started again on a build.
type upgradeStart struct {
	Step  string // "upgrade", "rollback" or "restart"
	Node  string
	Build string // the build started
	Kill  bool   // SIGKILL, not SIGTERM
	At    int64  // when the stop was sent (ms)
	// StopMs is how long the SIGTERMed node took to exit; ReadyMs how
	// long from the start of the process until it served (after a
	// SIGKILL, it includes the wait for the killed process's lease).
	StopMs, ReadyMs int64
	// Lease is the build the node's lease names once it serves ("-":
	// none, a build from before leases named theirs).
	Lease string
	Err   string
}

// upgradeBuilds are the two builds the rolling upgrade swaps between.
type upgradeBuilds struct {
	oldBin, newBin   string
	oldName, newName string
	// oldRev and newRev are the commits the builds are stamped with.
	oldRev, newRev string
}

// prepareUpgrade builds keepnode at -upgrade-from into dir and sets the
// run up for the upgrade: the nodes start on that build, and there are no
// faults, cuts or random kills.
func (s *soak) prepareUpgrade(ctx context.Context, dir, newBin, newRev string) error {
	s.say("building keepnode at %s (the earlier build)", s.o.upgradeFrom)
	oldBin, hash, err := clusterproc.BuildRevision(ctx, s.o.upgradeFrom, dir)
	if err != nil {
		return err
	}
	s.up = &upgradeBuilds{oldBin: oldBin, newBin: newBin, oldName: hash[:12], newName: "this tree", oldRev: hash, newRev: newRev}
	for _, sl := range s.slots {
		sl.bin = oldBin
	}
	return nil
}

// noFaults is the soak's options without S3 faults, latency or cuts.
func noFaults(o options) options {
	o.faults = map[faultproxy.FailMode]*float64{}
	for _, m := range faultproxy.Modes {
		z := 0.0
		o.faults[m] = &z
	}
	o.latency, o.partition = 0, 0
	return o
}

// upgradeSteps is how many swaps rollingUpgrade makes with n nodes: each
// node three times, and the control restart.
func upgradeSteps(n int) int { return 3*n + 1 }

// rollingUpgrade runs the swaps, -kill-every apart.
func (s *soak) rollingUpgrade(ctx context.Context) {
	phases := []struct{ step, bin, name, rev string }{
		{"upgrade", s.up.newBin, s.up.newName, s.up.newRev},
		{"rollback", s.up.oldBin, s.up.oldName, s.up.oldRev},
		// Forward again: the node SIGKILLed in the rollback ran the
		// earlier build on the data directory its crash left.
		{"again", s.up.newBin, s.up.newName, s.up.newRev},
	}
	last := len(s.slots) - 1
	for _, ph := range phases {
		s.say("%s: each node in turn to %s, the last one SIGKILLed", ph.step, ph.name)
		for i, sl := range s.slots {
			if !s.upgradePause(ctx) {
				return
			}
			s.swap(ctx, sl, ph.step, ph.bin, ph.name, ph.rev, i == last)
		}
	}
	if s.upgradePause(ctx) {
		s.swap(ctx, s.slots[0], "restart", s.up.newBin, s.up.newName, s.up.newRev, false)
	}
}

func (s *soak) upgradePause(ctx context.Context) bool {
	select {
	case <-time.After(s.o.killEvery):
		return true
	case <-ctx.Done():
		return false
	}
}

// swap stops the slot's node (SIGTERM, or SIGKILL with sigkill) and starts
// the build bin in its place under the same name and data directory. Once
// it serves, its lease must name the commit rev, as keepctl nodes shows it
// to an operator; a lease naming no build passes only for the earlier
// build (one from before leases named theirs).
func (s *soak) swap(ctx context.Context, sl *slot, step, bin, build, rev string, sigkill bool) {
	sl.mu.Lock()
	nd, name := sl.node, sl.name
	sl.node = nil // stopped by the soak, not exited on its own (watchExit)
	sl.bin = bin
	sl.mu.Unlock()
	st := upgradeStart{Step: step, Node: name, Build: build, Kill: sigkill, At: time.Now().UnixMilli()}
	if nd != nil {
		t0 := time.Now()
		if sigkill {
			_ = nd.Kill()
			s.mu.Lock()
			s.killLog = append(s.killLog, kill{Node: name, At: time.Now().UnixMilli()})
			s.mu.Unlock()
			s.kills.Add(1)
			s.same.Add(1)
		} else if err := nd.Stop(); err != nil {
			st.Err = "SIGTERM: " + err.Error()
		}
		st.StopMs = time.Since(t0).Milliseconds()
	}
	t0 := time.Now()
	if err := s.startNode(ctx, sl, name); err != nil {
		st.Err = strings.TrimSpace(st.Err + " start: " + err.Error())
	}
	st.ReadyMs = time.Since(t0).Milliseconds()
	if st.Err == "" {
		st.Lease = "-"
		info, ok, err := cluster.ReadLease(ctx, s.bucket, "", name)
		switch {
		case err != nil || !ok:
			st.Err = fmt.Sprintf("its lease: %v (found: %v)", err, ok)
		case info.Build.Revision != "":
			st.Lease = info.Build.Revision
			if len(st.Lease) > 12 {
				st.Lease = st.Lease[:12]
			}
		}
		// A build Go stamped itself names its commit without "+dirty".
		clean := func(r string) string { return strings.TrimSuffix(r, "+dirty") }
		if got := info.Build.Revision; clean(got) != clean(rev) && (got != "" || rev == s.up.newRev) {
			st.Err = fmt.Sprintf("its lease names the build %q, want %q", got, rev)
		}
	}
	how := "SIGTERM"
	if sigkill {
		how = "SIGKILL"
	}
	s.say("%s: %s (%s, stopped in %v) on %s, serving in %v, its lease naming %s %s", step, name, how,
		time.Duration(st.StopMs)*time.Millisecond, build, time.Duration(st.ReadyMs)*time.Millisecond, st.Lease, st.Err)
	s.mu.Lock()
	s.upgradeLog = append(s.upgradeLog, st)
	s.mu.Unlock()
}

// upgradeTable prints the rolling upgrade's steps.
func upgradeTable(w io.Writer, up *upgradeBuilds, sum summary, sample, replaySample string) {
	steps := sum.Upgrade
	fmt.Fprintf(w, "  rolling upgrade:       between keepnode at %s and %s; 5xx answers other than 503: %d %s\n", up.oldName, up.newName, sum.ServerErrors, sample)
	fmt.Fprintf(w, "                         acknowledged exec-durable requests sent again under their key through another node: %d, %d of them run again or answered otherwise %s\n", sum.Replays, sum.ReplayBad, replaySample)
	for _, st := range steps {
		how := "SIGTERM"
		if st.Kill {
			how = "SIGKILL"
		}
		fmt.Fprintf(w, "                         %-8s %-4s %s, stopped in %s, serving on %s in %s, its lease naming %s %s\n",
			st.Step, st.Node, how, msText(st.StopMs), st.Build, msText(st.ReadyMs), st.Lease, st.Err)
	}
}

// sigtermWindows are the spans of the rolling upgrade in which nodes were
// swapped with SIGTERM only: in each phase, from its first stop to its
// SIGKILL. An alarm due in one should fire as on time as in the quiet
// phase: a SIGTERM hands the node's alarms over at once.
func sigtermWindows(steps []upgradeStart) [][2]int64 {
	var out [][2]int64
	from := int64(-1)
	for i, st := range steps {
		if from < 0 && !st.Kill {
			from = st.At
		}
		if st.Kill || i == len(steps)-1 || steps[i+1].Step != st.Step {
			if from >= 0 && st.Kill && st.At > from {
				out = append(out, [2]int64{from, st.At})
			}
			from = -1
		}
	}
	return out
}

// onTime counts what the rolling upgrade's SIGTERM swaps did to alarms:
// of the firings due in a SIGTERM window (of actors whose handler does not
// fail, whose lateness includes no backoff), how many ran within the quiet
// phase's lateness p99, the longest SIGTERM's stop (a node draining takes
// no alarm), a third of the lease period (the handover reads the leases
// that often) and a second (bound, ms) of their due time.
type onTime struct {
	Due, OnTime int
	Bound       int64
	// P99 is their lateness p99 (ms).
	P99 int64
}

func (o onTime) ratio() float64 {
	if o.Due == 0 {
		return 0
	}
	return float64(o.OnTime) / float64(o.Due)
}

// sendAgain sends an acknowledged exec-durable request again under its
// idempotency key, through another node than the one that answered (the
// other build, as often as not, during the swaps): the answer must be the
// recorded one, replayed, not a second run. An answer that is no answer
// (a node stopping, a 503) proves nothing and is not counted.
func (s *soak) sendAgain(ctx context.Context, a *actor, first string, body []byte, key string, reply []byte) {
	url, name := s.liveURL(first)
	if url == "" || name == first {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, s.o.requestTimeout)
	defer cancel()
	replayed := false
	again, err := clusterproc.ClientOf(url).ExecDurable(rctx, a.id, body, client.WithIdempotencyKey(key), client.Replayed(&replayed))
	if err != nil {
		return
	}
	s.replays.Add(1)
	if !replayed || !bytes.Equal(again, reply) {
		if s.replayBad.Add(1) == 1 {
			s.replaySample.Store(fmt.Sprintf("(%s under key %s: %s answered %q, replayed %v; %s had answered %q)", a.id, key, name, again, replayed, first, reply))
		}
	}
}
