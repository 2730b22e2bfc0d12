package sweeper

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/alarms/abi"
)

// Defaults of the relisting schedule (docs/design.md#relist).
const (
	// DefaultSafetyPeriod is the longest a walker leaves a tenant's index
	// unlisted when nothing says an entry can be overdue. It is the
	// backstop for what the relisting events miss (a timer that failed to
	// fire, a bug), and each tenant costs each of its walkers a LIST per
	// period: an hour keeps 10,000 idle tenants at 5.6 LISTs a second
	// (docs/cost.md).
	DefaultSafetyPeriod = time.Hour
	// DefaultWalkers is how many live nodes walk each tenant's index.
	DefaultWalkers = 2
	// SafetyPeriods is the safety period a loop takes when given none, in
	// sweep periods: DefaultSafetyPeriod at DefaultPeriod.
	SafetyPeriods = 360
)

// Member is a live node as the sweep sees it: its address (as
// [PlanInput.Self] and [PlanInput.Live] name nodes) and the classes it
// serves.
type Member struct {
	Addr string
	// Classes are the classes the node serves; with All, every class.
	Classes []string
	All     bool
}

func (m Member) serves(class string) bool { return m.All || slices.Contains(m.Classes, class) }

// View is the live nodes as one node sees them.
type View struct {
	Members []Member
	// Epoch grows whenever the host saw the set of live nodes change in a
	// way the members alone may not show: a node that dropped out and came
	// back between two looks, or a node restarted under the same name.
	Epoch uint64
}

// key is the membership the schedule compares: the epoch, and each
// member with its classes, in address order.
func (v View) key() string {
	ms := slices.Clone(v.Members)
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.Addr, b.Addr) })
	var b strings.Builder
	b.WriteString(strconv.FormatUint(v.Epoch, 10))
	for _, m := range ms {
		b.WriteString("\x00")
		b.WriteString(m.Addr)
		if m.All {
			b.WriteString("\x01*")
			continue
		}
		cs := slices.Clone(m.Classes)
		slices.Sort(cs)
		for _, c := range cs {
			b.WriteString("\x01")
			b.WriteString(c)
		}
	}
	return b.String()
}

// Walkers are the nodes that list a tenant's index, chosen from a view
// by rendezvous hashing of the tenant: for each class, the r members that
// serve it and score highest for the tenant. One LIST reads every class of
// a tenant, so a node walks the tenant when it is among the r of any class
// it serves. The classes considered are every class a member names, and
// "any other class" (served by the members that serve every class), so a
// class no node names is walked by nodes that serve all.
//
// When the view holds the nodes that truly live, each tenant has r walkers
// per class, so r live nodes per class with entries; see
// docs/design.md#walkers for what happens when views disagree.
type Walkers struct {
	r       int
	members []Member
	// classes: every class some member names, sorted.
	classes []string
}

// NewWalkers makes the walkers of v, r per class (r <= 0: DefaultWalkers).
func NewWalkers(v View, r int) *Walkers {
	if r <= 0 {
		r = DefaultWalkers
	}
	w := &Walkers{r: r, members: v.Members}
	for _, m := range v.Members {
		for _, c := range m.Classes {
			if !slices.Contains(w.classes, c) {
				w.classes = append(w.classes, c)
			}
		}
	}
	slices.Sort(w.classes)
	return w
}

// anyOther stands for a class no member names.
const anyOther = "\x00any other"

// Of returns the addresses of the walkers of tenant for class, best first.
func (w *Walkers) Of(tenant, class string) []string {
	named := slices.Contains(w.classes, class)
	type cand struct {
		addr  string
		score uint64
	}
	var cs []cand
	for _, m := range w.members {
		if m.All || (named && m.serves(class)) {
			cs = append(cs, cand{m.Addr, tenantScore(m.Addr, tenant)})
		}
	}
	slices.SortFunc(cs, func(a, b cand) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return strings.Compare(a.addr, b.addr)
	})
	out := make([]string, 0, min(w.r, len(cs)))
	for _, c := range cs[:min(w.r, len(cs))] {
		out = append(out, c.addr)
	}
	return out
}

// Walks reports whether self walks tenant: it is among the walkers of a
// class it serves (what [Walkers.Of] says, without sorting). Self counts
// as a member whether or not the view holds it (a node that sweeps is
// alive).
func (w *Walkers) Walks(self Member, tenant string) bool {
	ww := w
	if !slices.ContainsFunc(w.members, func(m Member) bool { return m.Addr == self.Addr }) {
		v := View{Members: append(slices.Clone(w.members), self)}
		ww = NewWalkers(v, w.r)
	}
	classes := self.Classes
	if self.All {
		classes = append(slices.Clone(ww.classes), anyOther)
	}
	mine := tenantScore(self.Addr, tenant)
	scores := make([]uint64, len(ww.members))
	for i, m := range ww.members {
		scores[i] = tenantScore(m.Addr, tenant)
	}
	for _, c := range classes {
		named := slices.Contains(ww.classes, c)
		above := 0 // members serving c that rank above self
		for i, m := range ww.members {
			if m.Addr == self.Addr || !(m.All || (named && m.serves(c))) {
				continue
			}
			if scores[i] > mine || (scores[i] == mine && m.Addr < self.Addr) {
				above++
			}
		}
		if above < ww.r {
			return true
		}
	}
	return false
}

// tenantScore ranks a node for a tenant with the hash that shards actors
// ([Shard]), over the tenant alone.
func tenantScore(node, tenant string) uint64 {
	return score(node, abi.ActorID{Tenant: tenant})
}

// Schedule decides when a node lists each tenant's index
// (docs/design.md#relist): a tenant is listed again only when something in
// it can be overdue. That is:
//
//   - when the earliest entry the last walk met past the cutoff becomes
//     overdue enough (its due time plus the margin): the index is in due
//     order, so no entry the walk saw can be overdue before;
//   - on the next sweep while the last walk met overdue entries of a class
//     this node serves, did not read to the end, or started from a cursor;
//   - when the set of live nodes, or the classes they serve, changed
//     ([Schedule.Members]): a node that died, left or lapsed may hold
//     entries no live timer holds, and the walkers may have changed;
//   - when this node let go of an actor of the tenant ([Schedule.Hint]);
//   - a sweep period after a walk that one of the two above asked for:
//     its listing may have left an orphan's entry out (an erasure-coded
//     store may leave a key out of a LIST), and a second listing finds
//     it;
//   - at the latest a safety period after the last walk.
//
// Schedule does no I/O and reads no clock; the simulator runs it too.
type Schedule struct {
	// Margin is the lease period plus grace; Period the sweep period;
	// Safety the safety period (zero: DefaultSafetyPeriod).
	Margin, Period, Safety time.Duration

	members  string
	seen     bool
	foundAt  int64 // when the tenants were last found (ms); valid with found
	found    bool
	tenants  map[string]*tenantState
	changeAt int64 // when the membership last changed (ms)
}

type tenantState struct {
	next int64 // list at or after this time (ms)
	// nextSweep: list at the next sweep, whenever it comes (a sweep
	// period's timer is no exact clock).
	nextSweep bool
	extra     bool // hinted: walked whether or not this node is a walker
	// confirm: the next walk was asked for by a change of the live nodes
	// or a hint, and the walk after it is read a sweep period later, so
	// one listing that left an orphan's entry out (an erasure-coded store
	// may) delays it by a sweep, not by a safety period.
	confirm bool
}

func (s *Schedule) safety() int64 {
	if s.Safety <= 0 {
		return DefaultSafetyPeriod.Milliseconds()
	}
	return s.Safety.Milliseconds()
}

func (s *Schedule) state(tenant string, nowMs int64) *tenantState {
	if s.tenants == nil {
		s.tenants = map[string]*tenantState{}
	}
	st := s.tenants[tenant]
	if st == nil {
		st = &tenantState{next: nowMs}
		s.tenants[tenant] = st
	}
	return st
}

// Members records the view of a sweep at nowMs and reports whether it
// changed since the last one (the first view counts as a change): then
// every tenant is due at once, and the tenants should be found again.
func (s *Schedule) Members(v View, nowMs int64) (changed bool) {
	k := v.key()
	if s.seen && k == s.members {
		return false
	}
	s.seen, s.members, s.changeAt = true, k, nowMs
	s.found = false
	for _, st := range s.tenants {
		st.next, st.confirm = min(st.next, nowMs), true
	}
	return true
}

// Expire makes every tenant due at nowMs, as the safety period does.
func (s *Schedule) Expire(nowMs int64) {
	for _, st := range s.tenants {
		st.next = min(st.next, nowMs)
	}
}

// Known reports whether the schedule was told a view ([Schedule.Members]).
func (s *Schedule) Known() bool { return s.seen }

// FindTenants reports whether the tenants should be found again at nowMs
// (a membership change, or a safety period since they were last found).
func (s *Schedule) FindTenants(nowMs int64) bool {
	return !s.found || nowMs-s.foundAt >= s.safety()
}

// Found records the tenants found at nowMs: a tenant not known before is
// due at once; one no longer found is forgotten.
func (s *Schedule) Found(tenants []string, nowMs int64) {
	s.found, s.foundAt = true, nowMs
	keep := make(map[string]bool, len(tenants))
	for _, t := range tenants {
		keep[t] = true
		s.state(t, nowMs)
	}
	for t := range s.tenants {
		if !keep[t] {
			delete(s.tenants, t)
		}
	}
}

// Hint says this node let go of an actor of tenant, so an entry of the
// tenant may be held by no live timer: the tenant is due at once, and this
// node walks it whether or not it is a walker until a walk finds the
// tenant's index empty.
func (s *Schedule) Hint(tenant string, nowMs int64) {
	st := s.state(tenant, nowMs)
	st.extra, st.confirm = true, true
	st.next = min(st.next, nowMs)
}

// Extra reports whether this node walks tenant because of a hint.
func (s *Schedule) Extra(tenant string) bool {
	st := s.tenants[tenant]
	return st != nil && st.extra
}

// Due reports whether tenant is due for listing at nowMs.
func (s *Schedule) Due(tenant string, nowMs int64) bool {
	st := s.tenants[tenant]
	return st == nil || st.nextSweep || st.next <= nowMs
}

// Tenants returns the tenants the schedule knows, in byte order.
func (s *Schedule) Tenants() []string { return s.DueTenants(0, true) }

// DueTenants returns the tenants due at nowMs (with all, every tenant the
// schedule knows), in byte order.
func (s *Schedule) DueTenants(nowMs int64, all bool) []string {
	var out []string
	for t, st := range s.tenants {
		if all || st.nextSweep || st.next <= nowMs {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// Walked is what a walk of a tenant's index told the schedule.
type Walked struct {
	// FromStart: the walk started at the beginning of the index (no
	// cursor).
	FromStart bool
	// Result is the walk's.
	Result WalkResult
	// Actionable: the walk met an overdue entry of a class this node
	// serves.
	Actionable bool
}

// Walked records a walk of tenant that ran at nowMs and sets when the
// tenant is listed next.
func (s *Schedule) Walked(tenant string, nowMs int64, w Walked) {
	st := s.state(tenant, nowMs)
	r := w.Result
	st.nextSweep = false
	switch {
	case !w.FromStart || !r.ReachedEnd || w.Actionable || r.Cursor != "":
		// Something may still be overdue, or the walk did not see it all:
		// as every sweep did.
		st.next, st.nextSweep = nowMs+s.Period.Milliseconds(), true
	case r.NextDueMs > 0:
		// The earliest entry past the cutoff is overdue enough at its
		// due time plus the margin; nothing the walk saw is before it.
		st.next = min(r.NextDueMs+s.Margin.Milliseconds(), nowMs+s.safety())
	default:
		// The end of the index and nothing actionable.
		st.next = nowMs + s.safety()
		if r.Read == 0 && !st.confirm {
			st.extra = false // empty: nothing this node let go of is left
		}
	}
	if st.confirm {
		// A walk a change of the live nodes or a hint asked for is read
		// again a sweep period later: what it found is only as good as
		// one listing, and a listing may leave a key out
		// (docs/design.md#lists).
		st.confirm = false
		st.next = min(st.next, nowMs+s.Period.Milliseconds())
	}
}
