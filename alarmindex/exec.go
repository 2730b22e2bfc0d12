package alarmindex

import (
	"fmt"
	"strconv"
	"time"

	"github.com/wasmkeep/alarms/abi"
)

// StepKind names one thing an Exec asks its driver to do.
type StepKind int

// Steps of a plan, in the order an Exec hands them out.
const (
	// StepDone: the plan is finished. Err says whether to give the actor
	// up (then nothing more is done, and the driver retries the delivery
	// later).
	StepDone StepKind = iota
	// StepPut: PUT the empty entry Key with If-None-Match: *. Report nil
	// for success and for "precondition failed" (the entry exists: an
	// earlier try of the same PUT landed).
	StepPut
	// StepRecord: write Value into the alarm_indexed meta of the actor's
	// database, in a transaction of its own.
	StepRecord
	// StepFence: write Value into the owner_fence meta of the actor's
	// database, in a transaction of its own.
	StepFence
	// StepUpload: upload the actor's database (one replication).
	StepUpload
	// StepCheckHold: report whether the hold is valid now (ReportHold).
	StepCheckHold
	// StepDelete: DELETE the entry Key. A failure is harmless (an extra
	// entry, removed when it comes due); report it anyway.
	StepDelete
	// StepList: LIST the keys under Prefix (one page of up to 1,000) and
	// report them (ReportList).
	StepList
	// StepRun: run the alarm event (on-alarm, committed, replicated through
	// an AfterEvent plan of its own).
	StepRun
	// StepRetry: deliver the same entry again After from now.
	StepRetry
	// StepRelease: let the hold go at once.
	StepRelease
)

var stepNames = [...]string{"done", "put", "record", "fence", "upload", "check-hold", "delete", "list", "run", "retry", "release"}

// String gives a short name for logs.
func (k StepKind) String() string {
	if k >= 0 && int(k) < len(stepNames) {
		return stepNames[k]
	}
	return fmt.Sprintf("step(%d)", int(k))
}

// Phase says which part of a plan a step belongs to.
type Phase int

// Phases of a plan.
const (
	// PhaseIndex: bringing the index in line around one upload (an
	// IndexPlan, or a DeliveryPlan's Index).
	PhaseIndex Phase = iota
	// PhaseFence: a delivery's fence upload.
	PhaseFence
	// PhaseStale: a delivery's LIST and DELETEs of stale entries.
	PhaseStale
	// PhaseEnd: the delivery's outcome (run, retry, release).
	PhaseEnd
)

// Step is one request or action of a plan.
type Step struct {
	Kind  StepKind
	Phase Phase
	// Key is the entry to PUT or DELETE.
	Key Key
	// Value is the meta value to write (StepRecord, StepFence).
	Value string
	// Prefix is what to LIST.
	Prefix string
	// After is how long until the retry (StepRetry).
	After time.Duration
	// Stale: the DELETE removes a stale entry (rather than the entry an
	// upload replaced).
	Stale bool
}

// Exec carries out one plan: it hands out its steps in order (Next) and is
// told how each went (Report, ReportHold, ReportList), in the manner of
// etcd raft's Ready and Advance. It does no I/O itself, so every host and
// the simulator run the same order: PUT the new entry, record it, upload,
// re-check the hold, and only then DELETE what the upload replaced.
//
// The one rule no plan states is enforced here: an upload counts as done
// only if the hold was still valid when it returned. An upload that landed
// after a takeover is on no chain the new holder built on; the entry it
// replaced may be named by the newer state and must not be deleted.
type Exec struct {
	steps   []Step
	cur     Step
	started bool
	err     error
	actor   abi.ActorID
	plan    *DeliveryPlan
	trust   bool
	deleted []Key
}

// ExecIndex returns the executor of an IndexPlan for actor a around one
// upload.
func (r Rules) ExecIndex(a abi.ActorID, p IndexPlan) *Exec {
	x := &Exec{actor: a, trust: r.variants.TrustLateUploads}
	x.steps = indexSteps(p, r.variants.TrustLateUploads)
	return x
}

func indexSteps(p IndexPlan, trust bool) []Step {
	out := make([]Step, 0, 5) // at most PUT, record, upload, check, DELETE
	add := func(s Step) { s.Phase = PhaseIndex; out = append(out, s) }
	putRecord := func() {
		if p.Put != nil {
			add(Step{Kind: StepPut, Key: *p.Put})
		}
		if p.Record {
			add(Step{Kind: StepRecord, Value: FormatRecorded(p.Recorded)})
		}
	}
	upload := func() {
		add(Step{Kind: StepUpload})
		if !trust {
			add(Step{Kind: StepCheckHold})
		}
	}
	if p.UploadBeforePut {
		upload()
		putRecord()
	} else {
		putRecord()
		upload()
	}
	if p.DeleteAfterReplicate != nil {
		add(Step{Kind: StepDelete, Key: *p.DeleteAfterReplicate})
	}
	return out
}

// ExecDelivery returns the executor of a DeliveryPlan; gen is the hold's
// generation (written as the fence).
func (r Rules) ExecDelivery(p DeliveryPlan) *Exec {
	x := &Exec{actor: p.delivered.Actor, plan: &p, trust: r.variants.TrustLateUploads}
	end := func(s Step) { s.Phase = PhaseEnd; x.steps = append(x.steps, s) }
	if p.Outcome == OutcomeRun {
		end(Step{Kind: StepRun})
		return x
	}
	if !p.Index.Empty() {
		x.steps = append(x.steps, indexSteps(p.Index, x.trust)...)
	}
	if p.Fence {
		x.steps = append(x.steps,
			Step{Kind: StepFence, Phase: PhaseFence, Value: strconv.FormatUint(p.gen, 10)},
			Step{Kind: StepUpload, Phase: PhaseFence})
		if !x.trust {
			x.steps = append(x.steps, Step{Kind: StepCheckHold, Phase: PhaseFence})
		}
	}
	if p.List {
		// Stale entries are removed only while the hold is valid.
		x.steps = append(x.steps,
			Step{Kind: StepCheckHold, Phase: PhaseStale},
			Step{Kind: StepList, Phase: PhaseStale, Prefix: TaggedPrefix(p.delivered.Actor, p.delivered.DueMs)})
	}
	if p.RetryAfter > 0 {
		end(Step{Kind: StepRetry, After: p.RetryAfter})
	}
	if p.Release {
		end(Step{Kind: StepRelease})
	}
	return x
}

// Next returns the next step (StepDone when the plan is finished or given
// up). Each step but StepDone must be reported before Next is called
// again.
func (x *Exec) Next() Step {
	if x.started && x.cur.Kind != StepDone {
		panic(fmt.Sprintf("alarmindex: Exec.Next before the %s step was reported", x.cur.Kind))
	}
	x.started = true
	if x.err != nil || len(x.steps) == 0 {
		x.cur = Step{Kind: StepDone}
		return x.cur
	}
	x.cur, x.steps = x.steps[0], x.steps[1:]
	return x.cur
}

// Report tells the executor how the current step went.
func (x *Exec) Report(err error) {
	s := x.take()
	if err == nil {
		if s.Kind == StepDelete && s.Stale {
			x.deleted = append(x.deleted, s.Key)
		}
		return
	}
	switch s.Kind {
	case StepDelete, StepRetry, StepRelease:
		// Harmless: an extra entry is removed when it comes due.
	case StepPut:
		x.failErr(err, "list the alarm in the index")
	case StepRecord:
		x.failErr(err, "record the index entry")
	case StepFence:
		x.failErr(err, "write the fence")
	case StepUpload:
		if s.Phase == PhaseFence {
			x.failErr(err, "upload the fence")
		} else {
			x.failErr(err, "upload")
		}
	default:
		x.failErr(err, "%s", s.Kind)
	}
}

// ReportHold answers a StepCheckHold.
func (x *Exec) ReportHold(valid bool) {
	s := x.take()
	if s.Kind != StepCheckHold {
		panic(fmt.Sprintf("alarmindex: ReportHold for a %s step", s.Kind))
	}
	if valid {
		return
	}
	if s.Phase == PhaseStale {
		x.fail("the hold lapsed before its stale entries were removed")
	} else {
		x.fail("the hold lapsed while its state was uploading; the upload does not count")
	}
}

// ReportList answers a StepList with the listed keys; the stale ones
// become StepDelete steps.
func (x *Exec) ReportList(keys []string, err error) {
	s := x.take()
	if s.Kind != StepList {
		panic(fmt.Sprintf("alarmindex: ReportList for a %s step", s.Kind))
	}
	if err != nil {
		x.failErr(err, "list its entries at %d", x.plan.delivered.DueMs)
		return
	}
	var listed []Key
	for _, k := range keys {
		if pk, err := ParseKey(k); err == nil {
			listed = append(listed, pk)
		}
	}
	var dels []Step
	for _, k := range x.plan.StaleDeletes(listed) {
		dels = append(dels, Step{Kind: StepDelete, Phase: PhaseStale, Key: k, Stale: true})
	}
	x.steps = append(dels, x.steps...)
}

func (x *Exec) take() Step {
	if !x.started || x.cur.Kind == StepDone {
		panic("alarmindex: a report with no step in progress")
	}
	s := x.cur
	x.cur = Step{Kind: StepDone}
	return s
}

func (x *Exec) fail(format string, args ...any) {
	x.err = giveUp(x.actor, format, args...)
	x.steps = nil
}

func (x *Exec) failErr(err error, format string, args ...any) {
	op := fmt.Sprintf(format, args...)
	x.err = &abi.ActorError{ID: x.actor, Op: op, Err: &GiveUpError{Actor: x.actor, Cause: err.Error(), Err: err}}
	x.steps = nil
}

// Err is nil when the plan was carried out, and otherwise a *GiveUpError:
// give the actor up; the driver retries the delivery later.
func (x *Exec) Err() error { return x.err }

// Deleted returns the stale entries whose DELETE succeeded.
func (x *Exec) Deleted() []Key { return x.deleted }
