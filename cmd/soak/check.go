package main

// The checker: pure code over the whole history of one actor (what the
// soak sent and was answered, what the nodes logged, the ledger the actor
// committed), in the style of Jepsen's checkers. It reads no clock: every
// time it uses is in its input.

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
)

// Ledger record kinds, as examples/soak-actor writes them.
const (
	recArm   = 1
	recClear = 2
	recFire  = 3
	recNote  = 4
)

// record is one ledger entry.
type record struct {
	Kind, A, B, C, D int64
}

func (r record) String() string {
	switch r.Kind {
	case recArm:
		return fmt.Sprintf("arm   at %s  (request %d, committed at %s)", ms(r.A), r.B, ms(r.C))
	case recClear:
		return fmt.Sprintf("clear       (request %d, committed at %s)", r.B, ms(r.C))
	case recFire:
		next := "none"
		if r.D >= 0 {
			next = ms(r.D)
		}
		return fmt.Sprintf("FIRE  scheduled %s retry %d  ran at %s (late %dms), next %s", ms(r.A), r.B, ms(r.C), r.C-r.A, next)
	case recNote:
		return fmt.Sprintf("note        (request %d, committed at %s)", r.B, ms(r.C))
	}
	return fmt.Sprintf("kind %d %d %d %d %d", r.Kind, r.A, r.B, r.C, r.D)
}

// parseLedger reads the soak actor's ledger.
func parseLedger(b []byte) ([]record, error) {
	if len(b)%40 != 0 {
		return nil, fmt.Errorf("ledger of %d bytes is not whole 40-byte records", len(b))
	}
	out := make([]record, len(b)/40)
	for i := range out {
		v := func(j int) int64 { return int64(binary.LittleEndian.Uint64(b[i*40+8*j:])) }
		out[i] = record{v(0), v(1), v(2), v(3), v(4)}
	}
	return out, nil
}

// op is one request the soak sent to an actor.
type op struct {
	Kind  string // arm, clear, note, delete
	Event string // exec or exec-durable ("" for delete)
	ID    int64  // request id, in the ledger's records
	At    int64  // arm: the alarm time
	Sent  int64  // ms
	Done  int64  // ms, when the answer (or the error) came
	Node  string
	Err   string // "" when acknowledged
	// Status is the node's HTTP status for a failed request (0: no reply,
	// a transport error), and RetryAfter its Retry-After header: of the
	// last try.
	Status     int    `json:",omitempty"`
	RetryAfter string `json:",omitempty"`
	// Tries is how many times it was sent (under one idempotency key),
	// Retried why each try but the last was sent again (failureCause),
	// Replayed whether the answer was the key's record (the event had run
	// on an earlier try), and FirstMs how long the first try took.
	Tries    int      `json:",omitempty"`
	Retried  []string `json:",omitempty"`
	Replayed bool     `json:",omitempty"`
	FirstMs  int64    `json:",omitempty"`
}

func (o op) String() string {
	s := fmt.Sprintf("%s %s", ms(o.Sent), o.Kind)
	if o.Event != "" {
		s += " (" + o.Event + ")"
	}
	if o.Kind == "arm" {
		s += " at " + ms(o.At)
	}
	s += fmt.Sprintf(" request %d via %s", o.ID, o.Node)
	if o.Tries > 1 {
		s += fmt.Sprintf(" (try %d)", o.Tries)
	}
	if o.Replayed {
		s += " (replayed)"
	}
	s += ": "
	if o.Err == "" {
		s += "acknowledged at " + ms(o.Done)
	} else {
		s += "failed at " + ms(o.Done) + ": " + o.Err
	}
	return s
}

// attempt is an on-alarm run a node logged.
type attempt struct {
	Node      string
	At        int64 // fired_ms, or the log line's time for a failure
	Scheduled int64 // for a success
	Retry     int   // the retry count on-alarm ran with
	Failed    bool
	Next      int64 // failure: the committed retry time
}

func (a attempt) String() string {
	if a.Failed {
		return fmt.Sprintf("%s on-alarm failed on %s (retry %d); the next committed for %s", ms(a.At), a.Node, a.Retry, ms(a.Next))
	}
	return fmt.Sprintf("%s fired on %s: scheduled %s retry %d (late %dms)", ms(a.At), a.Node, ms(a.Scheduled), a.Retry, a.At-a.Scheduled)
}

// guestRun is an on-alarm run as the guest itself said it (its "run" line on
// stdout, which the node logs as it is written, before the run commits):
// every run, committed or not, failed or not.
type guestRun struct {
	Node      string
	At        int64 // the log line's time
	Scheduled int64
	Retry     int
}

func (r guestRun) String() string {
	return fmt.Sprintf("%s on-alarm ran on %s: scheduled %s retry %d", ms(r.At), r.Node, ms(r.Scheduled), r.Retry)
}

// dup is a run of an attempt (scheduled time and retry count) that had
// already run.
type dup struct {
	First, Again guestRun
}

// kill is a SIGKILL the soak sent.
type kill struct {
	Node string
	At   int64
}

// cut is a span in which a node could not reach the bucket: a cut of that
// node (-partition), or the bucket outage (-outage; Node "" for every
// node). ms.
type cut struct {
	Node     string
	From, To int64
}

// fault is a request fault a node's proxy injected (faultproxy.Fault): a
// failure, or a delay.
type fault struct {
	Node string // the node behind the proxy then
	At   int64
	Path string // the bucket and key, path-style
	Kind string
}

// evidence is every failure the soak caused, which a duplicate must be
// explained by.
type evidence struct {
	Kills  []kill
	Cuts   []cut
	Faults []fault
	// Lapses are the nodes' lease lapses their logs showed: each from the
	// end of the validity a failed renewal left to the renewal that began
	// a new epoch.
	Lapses []cut
}

// Causes of a duplicate run: each a failure of the node that ran the
// attempt first, within a lease period of the run (a node that outlives
// its run by that much, reaching the bucket, has replicated the run or
// given the actor up, since an upload counts only while the hold is
// valid).
const (
	causeKill  = "the first run's node was SIGKILLed within a lease period after the run, before it ran again"
	causeCut   = "the first run's node was cut off from the bucket (or the bucket was out) within a lease period of the run"
	causeFault = "a request of the first run's node for the actor or its lease failed or was delayed (a fault injected) within a lease period of the run"
	causeLapse = "the first run's node's lease lapsed (the bucket answered its renewals too slowly) within a lease period of the run"
)

// dupCause says which failure explains a duplicate run, "" for none: a
// SIGKILL of the node that ran the attempt first, after its run, within a
// lease of it and before the run again; else a cut of that node (or the
// outage) overlapping the span from a lease before the run to a lease after
// it (or the run again, if sooner), since a node cut off keeps its lease
// until its last confirmed renewal's window ends, so it may run an alarm
// whose upload then fails; else a fault injected into that node's request
// for the actor's objects (its snapshot, hold, index entry) or for its own
// lease, in the same span (a failed upload gives the actor up; a failed
// renewal lets the lease lapse); else a lapse of that node's lease its log
// showed, in the same span (renewals answered too slowly, with no fault
// injected: the holds are void as after a cut). At least once allows a duplicate only
// from such a failure: one that none explains is a violation.
func dupCause(d dup, ev evidence, actor abi.ActorID, lease int64) string {
	end := min(d.Again.At, d.First.At+lease)
	for _, k := range ev.Kills {
		if k.Node == d.First.Node && k.At >= d.First.At && k.At <= end {
			return causeKill
		}
	}
	for _, c := range ev.Cuts {
		to := c.To
		if to < 0 { // not healed
			to = math.MaxInt64
		}
		if (c.Node == "" || c.Node == d.First.Node) && c.From <= end && to >= d.First.At-lease {
			return causeCut
		}
	}
	for _, f := range ev.Faults {
		if f.Node == d.First.Node && f.At >= d.First.At-lease && f.At <= end && concerns(f.Path, actor, d.First.Node) {
			return causeFault
		}
	}
	for _, l := range ev.Lapses {
		if l.Node == d.First.Node && l.From <= end && l.To >= d.First.At-lease {
			return causeLapse
		}
	}
	return ""
}

// concerns says whether a request's path (bucket and key) is for one of
// the actor's objects (a snapshot, its hold, an index entry) or for the
// node's lease.
func concerns(path string, actor abi.ActorID, node string) bool {
	return strings.Contains(path, "/state/"+actor.Path()+"/") ||
		strings.HasSuffix(path, "/holds/"+actor.Path()) ||
		strings.Contains(path, "/"+alarmindex.TenantPrefix(actor.Tenant)) &&
			strings.Contains(path, "/"+actor.Class+alarmindex.TaggedClassSuffix+"/"+actor.NameHex()+"/") ||
		strings.HasSuffix(path, "/nodes/"+node)
}

// unexplained describes a duplicate no failure explains: the actor, both
// runs' nodes and times, and the nearest kill.
func unexplained(actor string, d dup, kills []kill) string {
	near := "no kill"
	var best *kill
	for i, k := range kills {
		if best == nil || abs(k.At-d.First.At) < abs(best.At-d.First.At) {
			best = &kills[i]
		}
	}
	if best != nil {
		near = fmt.Sprintf("the nearest kill %s at %s (%+.1fs from the first run)", best.Node, ms(best.At), float64(best.At-d.First.At)/1000)
	}
	return fmt.Sprintf("actor %s: attempt scheduled %s retry %d ran on %s at %s and again on %s at %s, with no kill of %s, cut or fault of its requests within a lease of the run; %s",
		actor, ms(d.First.Scheduled), d.First.Retry, d.First.Node, ms(d.First.At), d.Again.Node, ms(d.Again.At), d.First.Node, near)
}

// actorOf is the actor a plan names (tenant/class/name).
func actorOf(name string) abi.ActorID {
	parts := strings.SplitN(name, "/", 3)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	return abi.ActorID{Tenant: parts[0], Class: parts[1], Name: parts[2]}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// plan is what the soak made of an actor.
type plan struct {
	Name     string
	Kind     string // rearm, oneshot, failing, clearing, deleted
	Interval int64  // ms, 0 for a one-shot
	Fails    int    // on-alarm fails this many times before it succeeds
}

// bounds are the times the checker holds the cluster to.
type bounds struct {
	// Alarm is how late an alarm may fire once the cluster is quiet:
	// lease + grace + two sweeps + one retry after a failed delivery (a
	// lease) + slack for a busy machine.
	Alarm int64
	// RetryBase, RetryMax are the nodes' backoff.
	RetryBase, RetryMax time.Duration
	// Quiet is when faults were off and the cluster settled: from then on
	// every alarm fires within Alarm of its time (or of Quiet).
	Quiet int64
	// End is when the ledgers were read.
	End int64
	// DuringFaults holds firings due while the faults were on to a bound
	// too (a violation past it), not only those due from Quiet on: per
	// attempt FaultAlarm, the design's worst case while nodes die and come
	// back, when an entry whose shard falls to a node that cannot deliver
	// it (dead but not yet judged so, just restarted) waits until it is
	// three margins overdue and anyone's, and the node that takes it may
	// itself have just restarted, so that it must watch the dead holder's
	// lease for lease + grace first: 4 x (lease + grace) + 2 x sweep +
	// slack.
	DuringFaults bool
	FaultAlarm   int64
	// OutageStart and OutageEnd are the bucket outage (-outage; both 0
	// without one), and OutageAlarm how late, per attempt, an alarm it
	// held up may fire after the bucket returned: lease + grace + 2 x
	// sweep + slack. An alarm due during the outage, or due before it but
	// within its bound during the faults of its start, is held to that
	// from the outage's end instead.
	OutageStart, OutageEnd int64
	OutageAlarm            int64
	// OutageBacklog is added once to the bound of an alarm the outage
	// held up: the time the bucket, at the rate the run probed, takes to
	// serve the recovery's own requests (outageReport.backlogMs).
	OutageBacklog int64
	// Failures are the kills, cuts and injected faults of the run, and
	// Lease the nodes' lease period (ms): a duplicate run none of them
	// explains (dupCause) is a violation. nil: duplicates are counted
	// only.
	Failures *evidence
	Lease    int64
	// Stale is how long the index doctor lets an entry that no state
	// names stay once it is Margin (lease + grace) overdue, or once the
	// cluster is quiet, whichever is later (docs/design.md#stale-forward):
	// two margins, two sweeps and a lease period, plus slack.
	Stale, Margin int64
}

// staleTooLong says whether an extra entry due at due is still in the
// index at now past the stale-entry bound.
func (b bounds) staleTooLong(due, now int64) bool {
	return now-max(due+b.Margin, b.Quiet) > b.Stale
}

// heldUp says whether the outage held up an alarm at t that fails `fails`
// times first.
func (b bounds) heldUp(t int64, fails int) bool {
	return b.OutageEnd > 0 && t <= b.OutageEnd && t+b.withinFaults(fails) >= b.OutageStart
}

// afterOutage is the latest an alarm at t that the outage held up may
// fire its successful run: each attempt within OutageAlarm, the first
// also within OutageBacklog, plus the committed backoff between them,
// from the bucket's return (or t).
func (b bounds) afterOutage(t int64, fails int) int64 {
	d := b.OutageAlarm + b.OutageBacklog
	for n := 1; n <= fails; n++ {
		d += b.OutageAlarm + alarmindex.RetryDelay(n, b.RetryBase, b.RetryMax).Milliseconds()
	}
	return max(t, b.OutageEnd) + d
}

// withinFaults is within with the bound of an attempt during the faults.
func (b bounds) withinFaults(fails int) int64 {
	d := b.FaultAlarm
	for n := 1; n <= fails; n++ {
		d += b.FaultAlarm + alarmindex.RetryDelay(n, b.RetryBase, b.RetryMax).Milliseconds()
	}
	return d
}

// within is how long after its time an alarm of an actor that fails
// `fails` times first may fire its successful run in a quiet cluster: each
// attempt within the bound, plus the committed backoff between them.
func (b bounds) within(fails int) int64 {
	d := b.Alarm
	for n := 1; n <= fails; n++ {
		d += b.Alarm + alarmindex.RetryDelay(n, b.RetryBase, b.RetryMax).Milliseconds()
	}
	return d
}

// deadline is the latest the successful run of an alarm at t may come:
// within its bound of t, or of Quiet for an alarm due while faults were
// on.
func (b bounds) deadline(t int64, fails int) int64 {
	return max(t, b.Quiet) + b.within(fails)
}

// history is everything known about one actor.
type history struct {
	Plan      plan
	Ops       []op
	Attempts  []attempt
	Runs      []guestRun // up to the ledger's read
	Ledger    []record
	HasLedger bool  // false for a deleted actor (reading it would create it again)
	DeletedAt int64 // when the delete was acknowledged, 0 if never
	// PendingAtEnd is the alarm the cluster reported (GET .../alarm) at
	// the end for a deleted actor, -1 for none.
	PendingAtEnd int64
}

// verdict is what the checker found for one actor.
type verdict struct {
	Violations []string
	// Fired are the committed firings' lateness in ms (their run time
	// minus the time they were due: for a retry, its committed time), and
	// FiredAt their run times (ms), in the same order.
	Fired, FiredAt []int64
	// BeyondQuietBound counts committed firings during the faults later
	// than the bound (a violation too when bounds.DuringFaults).
	BeyondQuietBound int
	// Duplicates counts successful runs the nodes logged beyond the first
	// for the same scheduled time.
	Duplicates int
	// Runs counts the runs the guest said; Dups are those of an attempt
	// (scheduled time, retry count) that had already run.
	Runs int
	Dups []dup
	// DupCauses counts Dups by cause (dupCause; "" for none), and
	// Unexplained describes those no failure explains (violations), when
	// bounds.Failures is set.
	DupCauses   map[string]int
	Unexplained []string
	// Unseen counts committed firings whose run the guest was not seen to
	// say (its line lost: over the guest output rate limit, say).
	Unseen int
	// Uncommitted counts logged successful runs whose scheduled time no
	// committed firing has (their commit was lost with their node, and a
	// later event replaced the alarm).
	Uncommitted int
	// LedgerOnly counts committed firings no node logged (the node died
	// between the commit and the log line).
	LedgerOnly int
	// ExecLost counts acknowledged exec (not exec-durable) requests the
	// ledger lacks: exec replies before it replicates, so a kill can lose
	// one.
	ExecLost int
	// DupRows counts requests (each sent under its own idempotency key,
	// however many tries) whose record is in the ledger more than once:
	// each a violation.
	DupRows int
	// Lost counts alarms that never fired: still pending past their bound
	// at the end of the run. Late counts firings past their bound (they
	// fired; a violation too, counted apart: a bucket that lost its write
	// quorum makes alarms late, never lost).
	Lost, Late int
	// Pending is the alarm the ledger leaves set (-1 none).
	Pending int64
	// AfterOutage are the committed firings the outage held up: how long
	// after the bucket returned (or after their time, if later) each ran,
	// in ms.
	AfterOutage []int64
	// LateAfterOutage counts those past their bound (a violation; they
	// fired, so they are not counted lost).
	LateAfterOutage int
}

func (v *verdict) fail(format string, args ...any) {
	v.Violations = append(v.Violations, fmt.Sprintf(format, args...))
}

// check runs every check on one actor's history.
func check(h history, b bounds) verdict {
	v := verdict{Pending: -1}
	// The nodes' logs: none fired before its time, none after a delete, no
	// retry before its committed time.
	runs := map[int64]int{}
	lastFail := map[int]int64{} // retry count -> latest committed retry time
	atts := append([]attempt(nil), h.Attempts...)
	sort.SliceStable(atts, func(i, j int) bool { return atts[i].At < atts[j].At })
	for _, a := range atts {
		if h.DeletedAt > 0 && a.At > h.DeletedAt {
			v.fail("ran on-alarm at %s on %s, after its delete was acknowledged at %s", ms(a.At), a.Node, ms(h.DeletedAt))
		}
		if a.Retry > 0 {
			if next, ok := lastFail[a.Retry]; ok && a.At < next {
				v.fail("retry %d ran at %s on %s, before its committed time %s", a.Retry, ms(a.At), a.Node, ms(next))
			}
		}
		if a.Failed {
			lastFail[a.Retry+1] = a.Next
			continue
		}
		runs[a.Scheduled]++
		if a.At < a.Scheduled {
			v.fail("fired at %s on %s, %dms before its time %s", ms(a.At), a.Node, a.Scheduled-a.At, ms(a.Scheduled))
		}
	}
	for _, n := range runs {
		v.Duplicates += n - 1
	}
	// Every run, as the guest said it: none before its time, none after a
	// delete; a second run of the same attempt is a duplicate.
	type attemptKey struct {
		scheduled int64
		retry     int
	}
	said := map[attemptKey]guestRun{}
	rs := append([]guestRun(nil), h.Runs...)
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].At < rs[j].At })
	v.Runs = len(rs)
	for _, r := range rs {
		if r.At < r.Scheduled {
			v.fail("on-alarm ran at %s on %s, %dms before its time %s", ms(r.At), r.Node, r.Scheduled-r.At, ms(r.Scheduled))
		}
		if h.DeletedAt > 0 && r.At > h.DeletedAt {
			v.fail("on-alarm ran at %s on %s, after its delete was acknowledged at %s", ms(r.At), r.Node, ms(h.DeletedAt))
		}
		k := attemptKey{r.Scheduled, r.Retry}
		if first, ok := said[k]; ok {
			v.Dups = append(v.Dups, dup{First: first, Again: r})
			continue
		}
		said[k] = r
	}
	if b.Failures != nil {
		id := actorOf(h.Plan.Name)
		v.DupCauses = map[string]int{}
		for _, d := range v.Dups {
			c := dupCause(d, *b.Failures, id, b.Lease)
			v.DupCauses[c]++
			if c == "" {
				line := unexplained(h.Plan.Name, d, b.Failures.Kills)
				v.Unexplained = append(v.Unexplained, line)
				v.fail("a duplicate run no failure explains: %s", line)
			}
		}
	}
	if !h.HasLedger {
		if h.PendingAtEnd >= 0 {
			v.fail("deleted, but the cluster still reports an alarm at %s", ms(h.PendingAtEnd))
		}
		return v
	}

	// The committed ledger: every firing at its alarm's time, none early,
	// none lost, each within its bound once the cluster is quiet.
	inLedger := map[int64]int{} // request id -> its records
	fired := map[int64]bool{}
	var pending int64 = -1 // the committed alarm as the ledger tells it
	pendingFails := 0
	// overdue: at now, the pending alarm is past its bound and has not
	// fired. It is late if a later firing of it comes, lost if none does
	// by the end of the run.
	overdue := func(now int64, what string) {
		if pending >= 0 && now > b.deadline(pending, pendingFails) {
			v.fail("alarm at %s still had not fired at %s (%s), past its bound %s", ms(pending), ms(now), what, ms(b.deadline(pending, pendingFails)))
			if what == endOfRun {
				v.Lost++
			}
		}
	}
	for i, r := range h.Ledger {
		switch r.Kind {
		case recArm, recClear, recNote:
			if inLedger[r.B]++; inLedger[r.B] == 2 {
				v.DupRows++
				v.fail("record %d: request %d is in the ledger twice: its event ran twice under one idempotency key", i, r.B)
			}
			overdue(r.C, fmt.Sprintf("record %d, a request", i))
			if r.Kind == recArm {
				pending, pendingFails = r.A, h.Plan.Fails
			} else if r.Kind == recClear {
				pending = -1
			}
		case recFire:
			fired[r.A] = true
			switch {
			case pending < 0:
				v.fail("record %d fired for %s, but no alarm was set", i, ms(r.A))
			case r.B == 0 && r.A != pending:
				v.fail("record %d fired for %s, but the committed alarm was %s", i, ms(r.A), ms(pending))
			case r.B > 0 && r.A < pending:
				v.fail("record %d: retry %d for %s, before the alarm's time %s", i, r.B, ms(r.A), ms(pending))
			}
			if int(r.B) != h.Plan.Fails {
				v.fail("record %d fired with retry count %d; the handler fails %d times before it succeeds (a failure count lost or reset)", i, r.B, h.Plan.Fails)
			}
			if r.C < r.A {
				v.fail("record %d ran at %s, before its time %s", i, ms(r.C), ms(r.A))
			}
			late := r.C - r.A
			v.Fired = append(v.Fired, late)
			v.FiredAt = append(v.FiredAt, r.C)
			switch {
			case pending < 0:
			case b.heldUp(pending, h.Plan.Fails):
				v.AfterOutage = append(v.AfterOutage, r.C-max(pending, b.OutageEnd))
				if r.C > b.afterOutage(pending, h.Plan.Fails) {
					v.fail("record %d: the alarm at %s, held up by the bucket outage, fired at %s, past its bound %s after the bucket returned", i, ms(pending), ms(r.C), ms(b.afterOutage(pending, h.Plan.Fails)))
					v.LateAfterOutage++
				}
			case r.C > b.deadline(pending, h.Plan.Fails):
				v.fail("record %d: the alarm at %s fired at %s, past its bound %s", i, ms(pending), ms(r.C), ms(b.deadline(pending, h.Plan.Fails)))
				v.Late++
			case r.C > pending+b.within(h.Plan.Fails):
				v.BeyondQuietBound++ // due while faults were on
				if b.DuringFaults && r.C > pending+b.withinFaults(h.Plan.Fails) {
					v.fail("record %d: the alarm at %s fired at %s during the faults, past their bound %s", i, ms(pending), ms(r.C), ms(pending+b.withinFaults(h.Plan.Fails)))
					v.Late++
				}
			}
			if runs[r.A] == 0 {
				v.LedgerOnly++
			}
			if _, ok := said[attemptKey{r.A, int(r.B)}]; !ok {
				v.Unseen++
			}
			pending, pendingFails = r.D, h.Plan.Fails
		default:
			v.fail("record %d has kind %d", i, r.Kind)
		}
	}
	overdue(b.End, endOfRun)
	v.Pending = pending
	for s := range runs {
		if !fired[s] {
			v.Uncommitted++
		}
	}
	// Every acknowledged exec-durable request is in the committed ledger
	// (once: see DupRows).
	for _, o := range h.Ops {
		if o.Err != "" || o.Kind == "delete" || inLedger[o.ID] > 0 {
			continue
		}
		if o.Event == "exec-durable" {
			v.fail("request %d (%s, exec-durable) was acknowledged at %s but is not in the committed ledger", o.ID, o.Kind, ms(o.Done))
		} else {
			v.ExecLost++
		}
	}
	return v
}

// endOfRun is overdue's what at the end of the ledger.
const endOfRun = "the end of the run"

// report prints an actor's full history, for a violation.
func (h history) report(v verdict) string {
	var s strings.Builder
	fmt.Fprintf(&s, "actor %s (%s, interval %dms, fails %d):\n", h.Plan.Name, h.Plan.Kind, h.Plan.Interval, h.Plan.Fails)
	for _, x := range v.Violations {
		fmt.Fprintf(&s, "  VIOLATION: %s\n", x)
	}
	fmt.Fprintf(&s, "  requests:\n")
	for _, o := range h.Ops {
		fmt.Fprintf(&s, "    %s\n", o)
	}
	fmt.Fprintf(&s, "  on-alarm runs the nodes logged:\n")
	for _, a := range h.Attempts {
		fmt.Fprintf(&s, "    %s\n", a)
	}
	fmt.Fprintf(&s, "  on-alarm runs the guest said:\n")
	for _, r := range h.Runs {
		fmt.Fprintf(&s, "    %s\n", r)
	}
	if h.HasLedger {
		fmt.Fprintf(&s, "  committed ledger:\n")
		for i, r := range h.Ledger {
			fmt.Fprintf(&s, "    %3d %s\n", i, r)
		}
	}
	if !h.HasLedger {
		fmt.Fprintf(&s, "  alarm at the end: %s\n", msOrNone(h.PendingAtEnd))
	}
	return s.String()
}

func ms(t int64) string {
	return time.UnixMilli(t).UTC().Format("15:04:05.000")
}

func msOrNone(t int64) string {
	if t < 0 {
		return "none"
	}
	return ms(t)
}
