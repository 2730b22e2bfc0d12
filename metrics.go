package alarms

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/sweeper"
)

// Outcomes of a delivery, the outcome label of wasmkeep_alarm_firings_total.
const (
	// FiringOK: on-alarm ran and succeeded.
	FiringOK = "ok"
	// FiringFailed: on-alarm ran and failed (an error, a trap, the
	// deadline); its retry is committed.
	FiringFailed = "failed"
	// FiringStale: on-alarm did not run: the committed alarm was not that
	// time (moved, cleared, not due yet, or the actor has no state); stale
	// index entries were removed as the rules say.
	FiringStale = "stale"
	// FiringNotHere: the actor is not this node's to run (another node
	// holds it, or its class is not served here); the alarm was dropped
	// from this node's timer.
	FiringNotHere = "not_here"
	// FiringGaveUp: the delivery failed on the host's side (the bucket,
	// the database, a hold that lapsed): the actor was given up and the
	// same entry time is tried again after Config.RetryAfterError.
	FiringGaveUp = "gave_up"
)

// Lateness buckets: from the node timer's millisecond to the minutes a
// failover takes (lease, grace and a sweep).
var latenessBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300, 600}

var sweepDurationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// metrics are the plugin's metrics (nil without Config.Registerer: every
// method is then a no-op).
type metrics struct {
	firings                     map[string]prometheus.Counter
	lateness                    prometheus.Histogram
	retries                     prometheus.Counter
	deadLettered                prometheus.Counter
	sweepDuration               prometheus.Histogram
	putsOK, putsErr             prometheus.Counter
	delReplaced, delStale       prometheus.Counter
	delReplacedErr, delStaleErr prometheus.Counter
	unmatched                   map[alarmindex.Outcome]prometheus.Counter
	forwarded                   *prometheus.CounterVec
	// Per tenant label (Plugin.tenantLabel).
	tenantDeliveries, tenantWork, tenantQueued *prometheus.CounterVec
	tenantLateness                             *prometheus.HistogramVec
	// tenants are each label's series of the four above, made once: a
	// delivery looks its label up here rather than hashing it into each.
	tenants    map[string]*tenantSeries
	collectors []prometheus.Collector
}

// tenantSeries is one tenant label's per-tenant series.
type tenantSeries struct {
	deliveries, work, queued prometheus.Counter
	lateness                 prometheus.Observer
}

// newMetrics makes the plugin's metrics; register registers them once the
// plugin exists.
func newMetrics(cfg Config) *metrics {
	if cfg.Registerer == nil {
		return nil
	}
	m := &metrics{firings: map[string]prometheus.Counter{}}
	firings := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmkeep_alarm_firings_total",
		Help: "Alarm deliveries from the node timer, by outcome: ok (on-alarm succeeded), failed (on-alarm failed; retry committed), stale (not run: the committed alarm was elsewhere), not_here (another node's actor), gave_up (a host-side failure; retried after a lease period).",
	}, []string{"outcome"})
	for _, o := range []string{FiringOK, FiringFailed, FiringStale, FiringNotHere, FiringGaveUp} {
		m.firings[o] = firings.WithLabelValues(o)
	}
	m.lateness = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "wasmkeep_alarm_lateness_seconds",
		Help:    "How late on-alarm ran: the time it ran minus the committed alarm time (a retry's time for a retry), or minus when an event committed it if it was already due then.",
		Buckets: latenessBuckets,
	})
	m.retries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wasmkeep_alarm_retries_total",
		Help: "on-alarm runs that were retries (a retry count above zero).",
	})
	m.deadLettered = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wasmkeep_alarms_dead_lettered_total",
		Help: "Alarms whose retries were given up: on-alarm failed on the last attempt its class allows (-max-attempts); the alarm was cleared and the actor keeps a dead letter.",
	})
	m.collectors = append(m.collectors, firings, m.lateness, m.retries, m.deadLettered)
	m.tenantDeliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmkeep_tenant_deliveries_total",
		Help: "The tenant's alarm deliveries from the node timer (every outcome). Tenants not named in the configuration are counted under tenant=\"other\".",
	}, []string{"tenant"})
	m.tenantLateness = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "wasmkeep_tenant_alarm_lateness_seconds",
		Help:    "How late the tenant's on-alarm runs were: when the delivery ended minus the committed alarm time, or minus when an event committed it if it was already due then.",
		Buckets: latenessBuckets,
	}, []string{"tenant"})
	m.tenantWork = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmkeep_tenant_delivery_seconds_total",
		Help: "Time the tenant's deliveries held delivery workers (on-alarm, the actor's take and upload): what the fair scheduler charges the tenant.",
	}, []string{"tenant"})
	m.tenantQueued = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmkeep_tenant_deliveries_queued_total",
		Help: "The tenant's deliveries that waited in its queue for a worker: every worker busy, or the tenant at its cap (throttled).",
	}, []string{"tenant"})
	// Every series the labels allow, from the start: the configuration's
	// tenants and "other".
	m.tenants = map[string]*tenantSeries{}
	for _, l := range append(slices.Collect(maps.Keys(cfg.TenantWeights)), OtherTenants) {
		m.tenants[l] = &tenantSeries{
			deliveries: m.tenantDeliveries.WithLabelValues(l),
			lateness:   m.tenantLateness.WithLabelValues(l),
			work:       m.tenantWork.WithLabelValues(l),
			queued:     m.tenantQueued.WithLabelValues(l),
		}
	}
	m.collectors = append(m.collectors, m.tenantDeliveries, m.tenantLateness, m.tenantWork, m.tenantQueued)
	if cfg.SingleNode {
		return m
	}
	m.sweepDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "wasmkeep_sweep_duration_seconds",
		Help:    "How long a sweep of the alarm index took (every tenant's); its count is the sweeps made.",
		Buckets: sweepDurationBuckets,
	})
	puts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmkeep_index_puts_total",
		Help: "Index entries written (a changed alarm's fresh entry), by result (ok, error).",
	}, []string{"result"})
	m.putsOK, m.putsErr = puts.WithLabelValues("ok"), puts.WithLabelValues("error")
	dels := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmkeep_index_deletes_total",
		Help: "Index entries deleted, by reason: replaced (the entry a newer upload replaced, sent in a batched multi-object delete) or stale (removed by a delivery).",
	}, []string{"reason"})
	m.delReplaced, m.delStale = dels.WithLabelValues("replaced"), dels.WithLabelValues("stale")
	delErrs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmkeep_index_delete_errors_total",
		Help: "Index entries whose DELETE failed, by reason (replaced, stale); each is removed when it comes due.",
	}, []string{"reason"})
	m.delReplacedErr, m.delStaleErr = delErrs.WithLabelValues("replaced"), delErrs.WithLabelValues("stale")
	// Drift between the index and the actors' states, as deliveries find
	// it. Stale and no-state entries are removed as found; an entry whose
	// actor the bucket has no state of is kept (an earlier owner's first
	// snapshot may still land) and tried again every RetryMax, so one that
	// stays is counted again and again: that is the drift no node mends.
	unmatched := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmkeep_index_unmatched_entries_total",
		Help: "Index entries a delivery found that match no committed alarm, by reason: stale (the actor's alarm is at another time or cleared; removed), no_state (the actor has no state; removed), not_in_bucket (the bucket has no state of the actor; kept, tried again after the longest backoff).",
	}, []string{"reason"})
	m.unmatched = map[alarmindex.Outcome]prometheus.Counter{
		alarmindex.OutcomeStale:   unmatched.WithLabelValues("stale"),
		alarmindex.OutcomeNoState: unmatched.WithLabelValues("no_state"),
		alarmindex.OutcomeKeep:    unmatched.WithLabelValues("not_in_bucket"),
	}
	// Overdue entries a sweep listed whose actor another node holds: the
	// node that listed one forwards it to the holder, which removes it if
	// stale (docs/design.md#stale-forward).
	m.forwarded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmkeep_index_forwarded_entries_total",
		Help: "Overdue index entries a sweep listed whose actor another node holds, by result: sent (forwarded to the holder), send_failed (the holder could not be reached or refused), and on the holder removed (stale entries removed, or none left), armed (the committed alarm: timer armed), kept (the rules kept them), skipped (its timer delivers that time, or a delivery is under way), error (the removal failed; tried again).",
	}, []string{"result"})
	for _, r := range []string{"sent", "send_failed", string(OfferRemoved), string(OfferArmed), string(OfferKept), string(OfferSkipped), "error"} {
		m.forwarded.WithLabelValues(r)
	}
	m.collectors = append(m.collectors, m.sweepDuration, puts, dels, delErrs, unmatched, m.forwarded)
	return m
}

// register adds the collectors that read the plugin's state at each scrape
// and registers everything.
func (m *metrics) register(p *Plugin) error {
	if m == nil {
		return nil
	}
	cs := append([]prometheus.Collector{}, m.collectors...)
	cs = append(cs,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wasmkeep_alarms_pending",
			Help: "Alarms in the node timer: actors this node holds or was offered, by the time each is due.",
		}, func() float64 { return float64(p.cfg.Timer.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wasmkeep_alarm_failing_actors",
			Help: "Actors whose latest on-alarm run on this node failed, until one succeeds, an event sets or clears their alarm, or another node has them.",
		}, func() float64 { n, _ := p.failingStats(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wasmkeep_alarm_retry_count_max",
			Help: "The highest committed retry count (an alarm's retry_count) among the failing actors (0 when none fails).",
		}, func() float64 { _, mx := p.failingStats(); return float64(mx) }),
	)
	cs = append(cs,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wasmkeep_delivery_workers",
			Help: "How many deliveries may run at once (Config.MaxConcurrentDeliveries, keepnode -workers).",
		}, func() float64 { return float64(p.cfg.MaxConcurrentDeliveries) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wasmkeep_deliveries_running",
			Help: "Deliveries running on the workers now.",
		}, func() float64 { return float64(p.running.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wasmkeep_deliveries_waiting",
			Help: "Due alarms waiting in their tenants' queues for a worker now.",
		}, func() float64 { return float64(p.waiting.Load()) }),
	)
	if p.loop != nil {
		stat := func(name, help string, f func(s sweeper.Stats) int64) prometheus.Collector {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
				func() float64 { return float64(f(p.loop.Stats())) })
		}
		cs = append(cs,
			stat("wasmkeep_sweep_tenants_total", "Tenant indexes swept (one per tenant per sweep).", func(s sweeper.Stats) int64 { return s.Sweeps }),
			stat("wasmkeep_sweep_lists_total", "LIST calls the sweeps made of tenants' indexes (one per 1,000 entries read).", func(s sweeper.Stats) int64 { return s.Lists }),
			stat("wasmkeep_sweep_entries_total", "Overdue index entries the sweeps read.", func(s sweeper.Stats) int64 { return s.Entries }),
			stat("wasmkeep_sweep_offered_total", "Deliveries the sweeps offered to the node timer.", func(s sweeper.Stats) int64 { return s.Delivered }),
			stat("wasmkeep_sweep_malformed_total", "Keys under the index that are not index entries, skipped.", func(s sweeper.Stats) int64 { return s.Malformed }),
			stat("wasmkeep_sweep_errors_total", "Sweep failures: a LIST, the live nodes, the tenants.", func(s sweeper.Stats) int64 { return s.Errors }),
			stat("wasmkeep_sweep_relists_total", "Sweeps begun before the sweep period was up, of the tenants whose previous plan the per-sweep cap cut short, once the node had delivered most of it (a backlog draining).", func(s sweeper.Stats) int64 { return s.Relists }),
			stat("wasmkeep_sweep_handovers_total", "Walks begun at once, with no margin, when another node left (its lease deleted, or judged expired), handing this node's timer the alarms of the actors it had held.", func(s sweeper.Stats) int64 { return s.Handovers }),
		)
	}
	for _, c := range cs {
		if err := p.cfg.Registerer.Register(c); err != nil {
			return fmt.Errorf("alarms: registering the plugin's metrics: %w", err)
		}
	}
	return nil
}

// delivered records one delivery of the timer loop.
// from, when not 0, is when the alarm became due (dueSince.from).
func (m *metrics) delivered(outcome string, ev hostmod.Delivery, at time.Time, from int64) {
	if m == nil {
		return
	}
	m.firings[outcome].Inc()
	if ev.Ran {
		m.lateness.Observe(float64(at.UnixMilli()-max(ev.Scheduled, from)) / 1000)
		if ev.RetryCount > 0 {
			m.retries.Inc()
		}
		if ev.GaveUp {
			m.deadLettered.Inc()
		}
	}
}

// tenantDelivery records one delivery of the timer loop under its
// tenant's label: it held a worker for work, and waited for it or not.
func (m *metrics) tenantDelivery(label string, d Delivery, work time.Duration, waited bool) {
	if m == nil {
		return
	}
	t := m.tenants[label]
	if t == nil {
		return
	}
	t.deliveries.Inc()
	if d.Event.Ran {
		t.lateness.Observe(float64(d.At.UnixMilli()-max(d.Event.Scheduled, d.dueFrom)) / 1000)
	}
	t.work.Add(work.Seconds())
	if waited {
		t.queued.Inc()
	}
}

// unmatchedEntry counts an entry a delivery found that matches no
// committed alarm (o is its plan's outcome; OutcomeRun counts nothing).
func (m *metrics) unmatchedEntry(o alarmindex.Outcome) {
	if m == nil {
		return
	}
	if c := m.unmatched[o]; c != nil {
		c.Inc()
	}
}

// forwardSent counts an entry this node forwarded to the actor's holder
// (err: it could not).
func (m *metrics) forwardSent(err error) {
	if m == nil || m.forwarded == nil {
		return
	}
	r := "sent"
	if err != nil {
		r = "send_failed"
	}
	m.forwarded.WithLabelValues(r).Inc()
}

// forwardedEntry counts what this node, the holder, did with an entry
// another node forwarded to it.
func (m *metrics) forwardedEntry(out OfferOutcome, err error) {
	if m == nil || m.forwarded == nil {
		return
	}
	r := string(out)
	if err != nil {
		r = "error"
	}
	m.forwarded.WithLabelValues(r).Inc()
}

func (m *metrics) sweep(took time.Duration, _ error) {
	m.sweepDuration.Observe(took.Seconds())
}

func (m *metrics) put(err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.putsErr.Inc()
	} else {
		m.putsOK.Inc()
	}
}

func (m *metrics) deleteReplaced() {
	if m != nil {
		m.delReplaced.Inc()
	}
}

func (m *metrics) deleteReplacedFailed(n int) {
	if m != nil {
		m.delReplacedErr.Add(float64(n))
	}
}

func (m *metrics) deleteStale(err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.delStaleErr.Inc()
	} else {
		m.delStale.Inc()
	}
}

// failingStats returns how many actors are failing and their highest
// committed retry count.
func (p *Plugin) failingStats() (n, maxFailures int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.failing {
		maxFailures = max(maxFailures, f)
	}
	return len(p.failing), maxFailures
}

// trackFailing records the failure count a run left (metrics only). A
// run that failed its last allowed attempt (a dead letter: the alarm
// cleared, nothing left to retry) leaves the actor failing no more. A
// run drops the actor's dueSince (since, read as the delivery began)
// unless the run itself noted another.
func (p *Plugin) trackFailing(key string, ev hostmod.Delivery, since dueSince) {
	if p.m == nil || !ev.Ran {
		return
	}
	p.mu.Lock()
	if ev.Err != nil && !ev.GaveUp {
		p.failing[key] = ev.RetryCount + 1
	} else {
		delete(p.failing, key)
	}
	if since != (dueSince{}) && p.dueSince[key] == since {
		delete(p.dueSince, key)
	}
	p.mu.Unlock()
}

// dueSince is when an alarm that an event committed already due (its time
// at before the node's now) was committed: the time it became due to the
// node. An alarm set in the past (a guest that sets "now" from a stale
// time, an import of an old export) is not late from the time it names,
// but from then. Kept in memory only: a node that takes such an alarm over
// before it ran counts from its time.
type dueSince struct{ at, since int64 }

// from is when the run ev became due when it ran the alarm s names, 0
// otherwise (its scheduled time).
func (s dueSince) from(ev hostmod.Delivery) int64 {
	if ev.Ran && s.since != 0 && ev.Scheduled == s.at {
		return s.since
	}
	return 0
}

// noteDue records the alarm an event committed at now (p.mu held): due
// since now when it is before now; otherwise the actor has no dueSince.
func (p *Plugin) noteDue(key string, alarm *int64, now int64) {
	if p.m == nil {
		return
	}
	if alarm != nil && *alarm < now {
		p.dueSince[key] = dueSince{at: *alarm, since: now}
	} else if len(p.dueSince) > 0 {
		delete(p.dueSince, key)
	}
}

// dueSinceOf is the actor's dueSince (p.mu held).
func (p *Plugin) dueSinceOf(key string) dueSince {
	if p.m == nil || len(p.dueSince) == 0 {
		return dueSince{}
	}
	return p.dueSince[key]
}

// forgetFailing drops an actor from the failing ones (p.mu held).
func (p *Plugin) forgetFailing(key string) {
	if p.m != nil {
		delete(p.failing, key)
	}
}
