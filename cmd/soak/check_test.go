package main

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
)

// The checker on small histories: a clean one passes, and each rule it
// holds the cluster to is broken once and caught, naming what broke.
func TestCheck(t *testing.T) {
	const t0 = int64(1_000_000)
	bd := bounds{Alarm: 5000, RetryBase: time.Second, RetryMax: 8 * time.Second, Quiet: t0 + 60_000, End: t0 + 120_000}
	rearm := plan{Name: "t/soak/a", Kind: "rearm", Interval: 10_000}
	failing := plan{Name: "t/soak/f", Kind: "failing", Interval: 10_000, Fails: 2}
	oneshot := plan{Name: "t/soak/o", Kind: "oneshot"}
	arm := func(at, id, c int64) record { return record{recArm, at, id, c, at} }
	fire := func(s, r, c, next int64) record { return record{recFire, s, r, c, next} }
	note := func(id, c int64) record { return record{recNote, 0, id, c, -1} }
	durable := func(kind string, id int64) op {
		return op{Kind: kind, Event: "exec-durable", ID: id, Sent: t0, Done: t0 + 10}
	}
	clean := history{Plan: rearm, HasLedger: true,
		Ops:      []op{durable("arm", 1), durable("note", 2)},
		Attempts: []attempt{{Node: "n0", At: t0 + 10_005, Scheduled: t0 + 10_000}},
		Ledger: []record{arm(t0+10_000, 1, t0), note(2, t0+5), fire(t0+10_000, 0, t0+10_005, t0+20_005),
			fire(t0+20_005, 0, t0+20_010, t0+30_010)},
	}
	// Every re-arm up to the end, so nothing is overdue at End.
	for at := t0 + 30_010; at < bd.End-1000; at += 10_000 {
		clean.Ledger = append(clean.Ledger, fire(at, 0, at+3, at+10_003))
		at += 3
	}
	if v := check(clean, bd); len(v.Violations) > 0 || v.LedgerOnly != len(clean.Ledger)-3 {
		t.Fatalf("a clean history: %v (ledger-only %d)", v.Violations, v.LedgerOnly)
	}

	with := func(h history, f func(h *history)) history {
		h.Ledger = append([]record(nil), h.Ledger...)
		h.Ops = append([]op(nil), h.Ops...)
		h.Attempts = append([]attempt(nil), h.Attempts...)
		f(&h)
		return h
	}
	cases := []struct {
		name string
		h    history
		want string
	}{
		{"a firing before its time (ledger)", with(clean, func(h *history) { h.Ledger[2].C = t0 + 9_000 }), "before its time"},
		{"a firing before its time (log)", with(clean, func(h *history) { h.Attempts[0].At = t0 + 9_999 }), "before its time"},
		{"a firing of an alarm not committed", with(clean, func(h *history) { h.Ledger[2].A = t0 + 9_000 }), "the committed alarm was"},
		{"a firing with no alarm set", history{Plan: oneshot, HasLedger: true, Ledger: []record{fire(t0, 0, t0, -1)}}, "no alarm was set"},
		{"an alarm that never fires", history{Plan: oneshot, HasLedger: true, Ledger: []record{arm(t0+1000, 1, t0)}}, "still had not fired"},
		{"an alarm due in the quiet phase fired past its bound", history{Plan: oneshot, HasLedger: true,
			Ledger: []record{arm(bd.Quiet+1000, 1, t0), fire(bd.Quiet+1000, 0, bd.Quiet+1000+bd.Alarm+1, -1)}}, "past its bound"},
		{"a failure count lost", history{Plan: failing, HasLedger: true,
			Ledger: []record{arm(t0, 1, t0), fire(t0+1500, 1, t0+1500, -1)}}, "retry count 1"},
		{"a retry before its committed time", with(history{Plan: failing, HasLedger: true, Ledger: []record{arm(bd.End, 1, t0)}}, func(h *history) {
			h.Attempts = []attempt{{Node: "n0", At: t0, Failed: true, Retry: 0, Next: t0 + 1000}, {Node: "n1", At: t0 + 900, Failed: true, Retry: 1, Next: t0 + 3000}}
		}), "before its committed time"},
		{"an acknowledged exec-durable request lost", with(clean, func(h *history) { h.Ops = append(h.Ops, durable("note", 99)) }), "not in the committed ledger"},
		{"a request's event run twice under its key", with(clean, func(h *history) {
			h.Ops[1].Tries, h.Ops[1].Retried = 2, []string{"no reply"}
			h.Ledger = slices.Insert(h.Ledger, 2, note(2, t0+6))
		}), "request 2 is in the ledger twice"},
		{"a firing after the delete", history{Plan: plan{Name: "t/soak/d", Kind: "deleted"}, DeletedAt: t0, PendingAtEnd: -1,
			Attempts: []attempt{{Node: "n0", At: t0 + 1, Scheduled: t0}}}, "after its delete"},
		{"a deleted actor's alarm left", history{Plan: plan{Name: "t/soak/d", Kind: "deleted"}, DeletedAt: t0, PendingAtEnd: t0 + 5}, "still reports an alarm"},
	}
	for _, c := range cases {
		v := check(c.h, bd)
		if !strings.Contains(strings.Join(v.Violations, "\n"), c.want) {
			t.Errorf("%s: violations %q, want one saying %q", c.name, v.Violations, c.want)
		}
		if rep := c.h.report(v); !strings.Contains(rep, "VIOLATION") || !strings.Contains(rep, c.h.Plan.Name) {
			t.Errorf("%s: the report does not name the actor and the violation:\n%s", c.name, rep)
		}
	}

	// Not violations: an exec request lost with its node (exec replies
	// before it replicates), a firing during the faults later than the
	// quiet bound, a retry that waited its committed time, and a request
	// sent three times under its key whose third try was answered from
	// the record of its first (one ledger row).
	lost := check(with(clean, func(h *history) { h.Ops = append(h.Ops, op{Kind: "note", Event: "exec", ID: 98, Done: t0}) }), bd)
	if v := check(with(clean, func(h *history) { h.Ops[1].Tries, h.Ops[1].Replayed = 3, true }), bd); len(v.Violations) > 0 || v.DupRows != 0 {
		t.Errorf("a request retried under its key, once in the ledger: %v", v.Violations)
	}
	late := check(history{Plan: oneshot, HasLedger: true, Ledger: []record{arm(t0, 1, t0), fire(t0, 0, t0+bd.Alarm+1, -1)}}, bd)
	retry := check(history{Plan: failing, HasLedger: true, Ledger: []record{arm(t0, 1, t0), fire(t0+3000, 2, t0+3000, -1)},
		Attempts: []attempt{{At: t0, Failed: true, Retry: 0, Next: t0 + 1000}, {At: t0 + 1000, Failed: true, Retry: 1, Next: t0 + 3000}, {At: t0 + 3000, Scheduled: t0 + 3000, Retry: 2}}}, bd)
	for name, v := range map[string]verdict{"exec lost": lost, "late in the faults": late, "retries on time": retry} {
		if len(v.Violations) > 0 {
			t.Errorf("%s: %v", name, v.Violations)
		}
	}
	if lost.ExecLost != 1 || late.BeyondQuietBound != 1 {
		t.Errorf("exec lost %d, beyond the quiet bound %d; want 1 and 1", lost.ExecLost, late.BeyondQuietBound)
	}
}

// The soak actor's ledger is whole 40-byte records.
func TestParseLedger(t *testing.T) {
	b := request(3, 4, 5, 6, 7)
	r, err := parseLedger(b)
	if err != nil || len(r) != 1 || r[0] != (record{3, 4, 5, 6, 7}) {
		t.Fatalf("parseLedger = %v, %v", r, err)
	}
	if _, err := parseLedger(b[:39]); err == nil {
		t.Fatal("a torn record parsed")
	}
}

// Runs as the guest said them: a second run of an attempt is a duplicate,
// its cause read from who ran it and the kills; a run before its time, or
// after a delete, is a violation; a committed firing with no run said is
// counted.
func TestRunsTheGuestSaid(t *testing.T) {
	const t0 = int64(1_000_000)
	bd := bounds{Alarm: 5000, RetryBase: time.Second, RetryMax: 8 * time.Second, Quiet: t0 + 60_000, End: t0 + 120_000}
	s1, s2, s3 := t0+1_000, t0+20_000, t0+40_000
	h := history{Plan: plan{Name: "t/soak/a", Kind: "oneshot"}, HasLedger: true,
		Runs: []guestRun{
			{Node: "n0", At: s1 + 10, Scheduled: s1},
			{Node: "n1", At: s1 + 9_000, Scheduled: s1}, // n0 was killed in between
			{Node: "n1", At: s2 + 10, Scheduled: s2},
			{Node: "n1", At: s2 + 4_000, Scheduled: s2}, // n1 again
			{Node: "n2", At: s3 + 10, Scheduled: s3},
			{Node: "n0", At: s3 + 8_000, Scheduled: s3},           // another node, n2 alive
			{Node: "n0", At: s3 + 9_000, Scheduled: s3, Retry: 1}, // a retry: not a duplicate
		},
		Ledger: []record{{recArm, s1, 1, t0, s1}, {recFire, s1, 0, s1 + 9_000, s2}, {recFire, s2, 0, s2 + 4_000, s3},
			{recFire, s3, 1, s3 + 9_000, -1}},
	}
	h.Plan.Fails = 0
	// n0 dies just after its run of s1; n1's upload of the actor's
	// snapshot after its run of s2 fails; n2 is cut off from the bucket
	// around its run of s3, and dies too, but long after it (by then it
	// had replicated the run or given the actor up).
	const lease = 6_000
	ev := evidence{
		Kills:  []kill{{Node: "n0", At: s1 + 100}, {Node: "n1", At: s3 + 20_000}, {Node: "n2", At: s3 + 7_000}},
		Faults: []fault{{Node: "n1", At: s2 + 200, Path: "/bucket/cluster/state/t/soak/61/x", Kind: "503"}},
		Cuts:   []cut{{Node: "n2", From: s3 - 2_000, To: s3 + 2_000}},
	}
	v := check(h, bd)
	if v.Runs != 7 || len(v.Dups) != 3 {
		t.Fatalf("%d runs, %d duplicates %+v; want 7 and 3", v.Runs, len(v.Dups), v.Dups)
	}
	want := []string{causeKill, causeFault, causeCut}
	for i, d := range v.Dups {
		if got := dupCause(d, ev, actorOf(h.Plan.Name), lease); got != want[i] {
			t.Errorf("duplicate %d (%s then %s): cause %q, want %q", i, d.First, d.Again, got, want[i])
		}
	}
	// n2's lease lapsing around its run of s3 (its renewals answered too
	// slowly, no fault injected) explains the third as the cut did; with
	// neither, nothing does.
	third := v.Dups[2]
	lapse := evidence{Kills: ev.Kills, Faults: ev.Faults, Lapses: []cut{{Node: "n2", From: s3 + 500, To: s3 + 3_000}}}
	if got := dupCause(third, lapse, actorOf(h.Plan.Name), lease); got != causeLapse {
		t.Errorf("duplicate after a lapse of n2's lease: cause %q, want %q", got, causeLapse)
	}
	none := evidence{Kills: ev.Kills, Faults: ev.Faults, Lapses: []cut{{Node: "n1", From: s3 + 500, To: s3 + 3_000}}}
	if got := dupCause(third, none, actorOf(h.Plan.Name), lease); got != "" {
		t.Errorf("duplicate with only another node's lapse: cause %q, want none", got)
	}
	if v.Unseen != 0 {
		t.Errorf("%d committed firings unseen, want 0", v.Unseen)
	}

	early := h
	early.Runs = append([]guestRun{{Node: "n2", At: s1 - 5, Scheduled: s1}}, h.Runs[1:]...)
	if v := check(early, bd); !strings.Contains(strings.Join(v.Violations, "\n"), "before its time") {
		t.Errorf("a run before its time: violations %v", v.Violations)
	}
	unseen := h
	unseen.Runs = h.Runs[2:]
	if v := check(unseen, bd); v.Unseen != 1 {
		t.Errorf("the first firing's runs left out: %d unseen, want 1", v.Unseen)
	}
	deleted := h
	deleted.HasLedger, deleted.Ledger, deleted.DeletedAt, deleted.PendingAtEnd = false, nil, s2, -1
	if v := check(deleted, bd); !strings.Contains(strings.Join(v.Violations, "\n"), "after its delete") {
		t.Errorf("runs after a delete: violations %v", v.Violations)
	}
}

// failureCause groups failed requests by what they have in common.
func TestFailureCause(t *testing.T) {
	a := failureCause(`POST http://127.0.0.1:39469/v1/actors/soak/soak/a00103?kind=exec-durable: 503 Service Unavailable: actor soak/soak/a00103: hold on node n2: this node's lease is not valid`)
	b := failureCause(`POST http://127.0.0.1:4001/v1/actors/soak/soak/a00007?kind=exec-durable: 503 Service Unavailable: actor soak/soak/a00007: hold on node n0-4: this node's lease is not valid`)
	if a != b || a != "# Service Unavailable: hold on node N: this node's lease is not valid" {
		t.Fatalf("causes %q and %q; want one, without the URL, the actor and the node", a, b)
	}
}

// The duplicates' classifier on a hand-made history: at least once allows
// a second run of an attempt only from a failure of the node that ran it
// first, within a lease of the run (a SIGKILL after it, a cut from the
// bucket or the outage, a fault injected into its request for the actor
// or its lease). Each kind is explained; one with failures only of the
// wrong node, of another actor, or too early or too late is not, and it is
// a violation that names the actor, both runs and the nearest kill.
func TestADuplicateNoFailureExplainsIsAViolation(t *testing.T) {
	const t0, lease = int64(1_000_000), int64(2_000)
	bd := bounds{Alarm: 5000, RetryBase: time.Second, RetryMax: 8 * time.Second, Quiet: t0 + 200_000, End: t0 + 300_000, Lease: lease}
	id := abi.ActorID{Tenant: "soak", Class: "soak", Name: "a00007"} // name hex 613030303037
	s := []int64{t0 + 10_000, t0 + 30_000, t0 + 50_000, t0 + 70_000, t0 + 90_000, t0 + 110_000}
	twice := func(at int64, first, again string, after int64) []guestRun {
		return []guestRun{{Node: first, At: at + 5, Scheduled: at}, {Node: again, At: at + after, Scheduled: at}}
	}
	var runs []guestRun
	runs = append(runs, twice(s[0], "n0", "n1", 4_000)...) // n0 SIGKILLed after its run
	runs = append(runs, twice(s[1], "n1", "n1", 3_000)...) // n1's renewal of its lease failed
	runs = append(runs, twice(s[2], "n2", "n0", 6_000)...) // n2 cut off from a second before its run
	runs = append(runs, twice(s[3], "n1", "n2", 5_000)...) // the bucket out
	runs = append(runs, twice(s[4], "n0", "n1", 4_000)...) // failures, but none that explains it
	runs = append(runs, twice(s[5], "n2", "n2", 1_000)...) // no failure at all
	h := history{Plan: plan{Name: id.String(), Kind: "oneshot"}, Runs: runs, PendingAtEnd: -1}
	ev := evidence{
		Kills: []kill{
			{Node: "n0", At: s[0] + 500},
			{Node: "n1", At: s[4] + 300},          // not the node that ran it first
			{Node: "n0", At: s[4] + lease + 1000}, // more than a lease after the run
			{Node: "n0", At: s[4] - 50},           // before the run: the run came from the node's next life
		},
		Cuts: []cut{
			{Node: "n2", From: s[2] - 1_000, To: s[2] + 3_000},
			{From: s[3] - 500, To: s[3] + 3_000},                      // the outage
			{Node: "n1", From: s[4], To: s[4] + 3_000},                // not the node that ran it first
			{Node: "n0", From: s[4] - 10_000, To: s[4] - lease - 100}, // healed more than a lease before the run
		},
		Faults: []fault{
			{Node: "n1", At: s[1] + 800, Path: "/wasmkeep-soak/cluster/nodes/n1", Kind: "reset"},
			{Node: "n0", At: s[4] + 100, Path: "/wasmkeep-soak/cluster/state/soak/soak/613030303038/x", Kind: "503"},     // another actor
			{Node: "n0", At: s[4] - lease - 1, Path: "/wasmkeep-soak/cluster/holds/soak/soak/613030303037", Kind: "503"}, // too early
			{Node: "n0", At: s[4] + 100, Path: "/wasmkeep-soak/cluster/nodes/n0-2", Kind: "503"},                         // another node's lease
		},
	}
	bd.Failures = &ev
	v := check(h, bd)
	if len(v.Dups) != 6 {
		t.Fatalf("%d duplicates, want 6: %+v", len(v.Dups), v.Dups)
	}
	want := map[string]int{causeKill: 1, causeFault: 1, causeCut: 2, "": 2}
	if !maps.Equal(v.DupCauses, want) {
		t.Errorf("causes %v, want %v", v.DupCauses, want)
	}
	if len(v.Unexplained) != 2 || len(v.Violations) != 2 {
		t.Fatalf("unexplained %q, violations %q; want two of each", v.Unexplained, v.Violations)
	}
	for i, w := range []string{
		"actor soak/soak/a00007: attempt scheduled " + ms(s[4]) + " retry 0 ran on n0 at " + ms(s[4]+5) + " and again on n1 at " + ms(s[4]+4_000),
		"ran on n2 at " + ms(s[5]+5) + " and again on n2 at " + ms(s[5]+1_000),
	} {
		if !strings.Contains(v.Unexplained[i], w) || !strings.Contains(v.Violations[i], w) {
			t.Errorf("unexplained duplicate %d: %q; want it to say %q", i, v.Unexplained[i], w)
		}
	}
	if w := "the nearest kill n0 at " + ms(s[4]-50); !strings.Contains(v.Unexplained[0], w) {
		t.Errorf("unexplained %q: want it to name %q", v.Unexplained[0], w)
	}
	if rep := h.report(v); !strings.Contains(rep, "VIOLATION: a duplicate run no failure explains") {
		t.Errorf("the actor's report does not show the violation:\n%s", rep)
	}
}

// The nodes' log lines of a lease lapse become a lapse of that node: from
// the validity its last failed renewal left to the renewal that began a
// new epoch.
func TestLeaseLapsesAreReadFromTheNodesLogs(t *testing.T) {
	s := &soak{}
	lines := []string{
		`n1: {"@level":"warn","@message":"lease renewal failed; valid until the last confirmed renewal's window ends","@module":"keepnode.lease.lease","@timestamp":"2026-12-05T05:18:55.498474Z","error":"x","node":"n1","valid_until":"2026-12-05T05:18:55.494218Z"}`,
		`n2: {"@level":"info","@message":"lease valid again in a new epoch; earlier holds are void","@module":"keepnode.lease.lease","@timestamp":"2026-12-05T05:18:56.000000Z","epoch":3,"node":"n2"}`,
		`n1: {"@level":"info","@message":"lease valid again in a new epoch; earlier holds are void","@module":"keepnode.lease.lease","@timestamp":"2026-12-05T05:18:57.250000Z","epoch":97,"node":"n1"}`,
	}
	if _, err := s.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
		t.Fatal(err)
	}
	at := func(v string) int64 {
		tm, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	want := []cut{
		{Node: "n2", From: at("2026-12-05T05:18:56Z"), To: at("2026-12-05T05:18:56Z")},
		{Node: "n1", From: at("2026-12-05T05:18:55.494218Z"), To: at("2026-12-05T05:18:57.25Z")},
	}
	if !reflect.DeepEqual(s.lapses, want) {
		t.Fatalf("lapses = %+v, want %+v", s.lapses, want)
	}
}

// An alarm the outage held up is held to lease + grace + two sweeps +
// slack from the bucket's return, plus the time the bucket, at the rate
// the run probed, takes to serve the recovery's own requests: the window's
// requests net of the rate before the outage.
func TestTheOutageBoundAllowsForTheBacklogAtTheProbedRate(t *testing.T) {
	rep := &outageReport{
		Before: span{Requests: 3000, Ms: 10_000},       // 300/s of client load and background
		After:  span{Requests: 7500, Ms: 15_000},       // 4,500 of it that load's, 3,000 the recovery's
		Probe:  probeResult{Requests: 2000, Ms: 2_000}, // 1,000/s
	}
	if got := rep.net(); got != 3000 {
		t.Fatalf("net recovery requests %v, want 3000", got)
	}
	if got := rep.backlogMs(); got != 3000 {
		t.Fatalf("backlog allowance %d ms, want 3000 (3,000 requests at 1,000/s)", got)
	}
	if got := (&outageReport{After: rep.After, Before: rep.Before}).backlogMs(); got != 0 {
		t.Fatalf("backlog allowance without a probe %d ms, want 0", got)
	}

	const end = int64(2_000_000)
	oneshot := plan{Name: "t/soak/o", Kind: "oneshot"}
	bd := bounds{Alarm: 5000, RetryBase: time.Second, RetryMax: 8 * time.Second, Quiet: end + 60_000, End: end + 120_000,
		FaultAlarm: 20_000, OutageStart: end - 60_000, OutageEnd: end, OutageAlarm: 7000, OutageBacklog: rep.backlogMs()}
	firedAt := func(at int64) verdict {
		return check(history{Plan: oneshot, HasLedger: true, Ledger: []record{{recArm, end - 30_000, 1, end - 90_000, end - 30_000}, {recFire, end - 30_000, 0, at, -1}}}, bd)
	}
	if v := firedAt(end + 7000 + 3000); len(v.Violations) > 0 || len(v.AfterOutage) != 1 {
		t.Fatalf("a held-up alarm within the bound and the backlog: %v (held up %d)", v.Violations, len(v.AfterOutage))
	}
	if v := firedAt(end + 7000 + 3001); v.LateAfterOutage != 1 {
		t.Fatalf("a held-up alarm past the bound and the backlog: late %d, violations %v", v.LateAfterOutage, v.Violations)
	}
}
