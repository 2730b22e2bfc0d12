// Package variant holds the unsafe variants of the index rules: each turns
// one safety rule of package alarmindex off, so that the simulator can show
// that its invariant catches the variant, and so that the rule is needed.
// One more, SharedFIFO, turns the fair scheduler (package fair) into one
// queue for every tenant, for the test that shows the fairness is needed.
//
// The switches are not part of any public API. alarmindex keeps them in an
// unexported field of its Rules and registers, when it is initialised, the
// one function that sets that field; only code inside this module can import
// this package and call it. Production code never does: the zero Set is the
// production rules.
package variant

// Set is which safety rules are off. The zero value turns none off.
type Set struct {
	// UntaggedKeys writes every new entry under the legacy key (one key per
	// actor and time, reused), dropping R1.
	UntaggedKeys bool
	// NoGenerationCheck deletes entries whatever their generation,
	// dropping R3.
	NoGenerationCheck bool
	// NoFence removes stale entries without first uploading owner_fence
	// when the hold has uploaded nothing.
	NoFence bool
	// FirstUploadBeforeEntry swaps R4's order: the first snapshot is
	// uploaded before its entry is PUT and recorded.
	FirstUploadBeforeEntry bool
	// ClearWhileBucketEmpty removes stale entries (without a fence) even
	// when the bucket had nothing for the actor and nothing was uploaded
	// since, and neither keeps the entry nor releases the hold.
	ClearWhileBucketEmpty bool
	// TrustLateUploads drops the executor's re-check of the hold after an
	// upload: an upload that returned after the hold lapsed counts as
	// done, and the entry it replaced is deleted.
	TrustLateUploads bool
	// RetryNotDoubled commits every retry one base delay (1 s) after the
	// failure, however many failures came before.
	RetryNotDoubled bool
	// RetryMovesLaterAlarm moves an alarm the failed handler set for after
	// the retry time back to the retry time.
	RetryMovesLaterAlarm bool
	// SharedFIFO makes the fair scheduler one queue in due order for every
	// tenant, with no cap per tenant: a tenant's backlog then delays every
	// other tenant's due alarm (package fair).
	SharedFIFO bool
}

// Any reports whether s turns any rule off.
func (s Set) Any() bool { return s != Set{} }

var apply func(rules any, s Set) any

// Register is called once, by package alarmindex, with the function that
// returns a copy of its Rules with s's rules off.
func Register(f func(rules any, s Set) any) {
	if apply != nil {
		panic("variant: Register called twice")
	}
	apply = f
}

// Rules returns a copy of rules (an alarmindex.Rules) with the safety rules
// in s turned off.
func Rules[R any](rules R, s Set) R {
	if apply == nil {
		panic("variant: package alarmindex is not linked in")
	}
	return apply(rules, s).(R)
}

// LeaseSet is which safety rules of package cluster's node leases are
// off, for the lease simulation (sim.RunLeases) only. The zero value turns
// none off.
type LeaseSet struct {
	// TrustListedAbsence takes a node lease that one listing of the
	// leases left out for removed (a clean shutdown), so that its holds
	// may be taken at once, without reading the lease's own key: an
	// erasure-coded store may leave a key out of a listing while it is
	// being overwritten, which every renewal does.
	TrustListedAbsence bool
}

var applyLeases func(cfg any, s LeaseSet) any

// RegisterLeases is called once, by package cluster, with the function
// that returns a copy of its LeaseConfig with s's rules off.
func RegisterLeases(f func(cfg any, s LeaseSet) any) {
	if applyLeases != nil {
		panic("variant: RegisterLeases called twice")
	}
	applyLeases = f
}

// LeaseConfig returns a copy of cfg (a cluster.LeaseConfig) with the
// safety rules in s turned off.
func LeaseConfig[C any](cfg C, s LeaseSet) C {
	if applyLeases == nil {
		panic("variant: package cluster is not linked in")
	}
	return applyLeases(cfg, s).(C)
}

var applyFair func(cfg any, s Set) any

// RegisterFair is called once, by package fair, with the function that
// returns a copy of its Config with s's variants on.
func RegisterFair(f func(cfg any, s Set) any) {
	if applyFair != nil {
		panic("variant: RegisterFair called twice")
	}
	applyFair = f
}

// Fair returns a copy of cfg (a fair.Config) with the variants in s on.
func Fair[C any](cfg C, s Set) C {
	if applyFair == nil {
		panic("variant: package fair is not linked in")
	}
	return applyFair(cfg, s).(C)
}
