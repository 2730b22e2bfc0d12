package engine

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// WithRegisterer registers the engine's metrics in reg when the engine is
// created (default: none, and nothing is recorded). They are read from the
// residency counters at each scrape, so they cost nothing on the event
// path:
//
//   - wasmkeep_actor_databases_open, wasmkeep_actor_instances_live (gauges):
//     actor databases open and guest instances live now;
//   - wasmkeep_actor_databases_max, wasmkeep_actor_instances_max (gauges):
//     the residency budget;
//   - wasmkeep_actors_slept_total: actors put to sleep to make room
//     (instance and database closed);
//   - wasmkeep_actor_instances_closed_total: instances closed to make room;
//   - wasmkeep_residency_waits_total, wasmkeep_residency_refusals_total:
//     opens that waited for a busy actor, and those that gave up
//     (ErrNoRoom);
//   - wasmkeep_instance_memory_bytes, wasmkeep_instance_memory_max_bytes
//     (gauges): the linear memory live instances hold, and its budget
//     (WithMaxTotalMemory);
//   - wasmkeep_instance_memory_closed_total,
//     wasmkeep_instance_memory_refusals_total: idle instances closed to
//     make room for memory, and instances or growths refused
//     (ErrMemoryBudget);
//   - wasmkeep_instance_memory_pooled_bytes (gauge): the memory of closed
//     instances kept for the next ones (MemoryStats.Pooled);
//   - wasmkeep_instance_memory_image_bytes (gauge): the memory of the
//     pre-initialised images mapped into the instances
//     (MemoryStats.Images).
//
// Two engines in one registry collide (NewEngine fails): give each its own
// registry, or give each a label of its own with
// prometheus.WrapRegistererWith.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(o *config) { o.registerer = reg }
}

// residencyCollector exposes an engine's residency counters.
type residencyCollector struct {
	res                                  *residency
	dbsOpen, instsLive, dbsMax, instsMax *prometheus.Desc
	slept, instsClosed, waits, refused   *prometheus.Desc
}

func newResidencyCollector(res *residency) *residencyCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &residencyCollector{
		res:         res,
		dbsOpen:     d("wasmkeep_actor_databases_open", "Actor databases open now (counted from before the open until after the close)."),
		instsLive:   d("wasmkeep_actor_instances_live", "Guest instances live now."),
		dbsMax:      d("wasmkeep_actor_databases_max", "The residency budget of actor databases open at once."),
		instsMax:    d("wasmkeep_actor_instances_max", "The residency budget of guest instances live at once."),
		slept:       d("wasmkeep_actors_slept_total", "Actors put to sleep (instance and database closed) to make room under the residency budget."),
		instsClosed: d("wasmkeep_actor_instances_closed_total", "Guest instances closed to make room under the residency budget (the database may stay open)."),
		waits:       d("wasmkeep_residency_waits_total", "Opens that waited for a busy actor to make room."),
		refused:     d("wasmkeep_residency_refusals_total", "Opens that gave up after the residency wait (ErrNoRoom)."),
	}
}

func (c *residencyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.dbsOpen, c.instsLive, c.dbsMax, c.instsMax, c.slept, c.instsClosed, c.waits, c.refused} {
		ch <- d
	}
}

func (c *residencyCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.res.stats()
	g := func(d *prometheus.Desc, v int) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	n := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	g(c.dbsOpen, s.OpenDatabases)
	g(c.instsLive, s.LiveInstances)
	g(c.dbsMax, s.MaxOpenDatabases)
	g(c.instsMax, s.MaxInstances)
	n(c.slept, s.Slept)
	n(c.instsClosed, s.InstancesClosed)
	n(c.waits, s.Waits)
	n(c.refused, s.Refused)
}

// register registers the engine's collectors in the configured registerer;
// if one fails, those already registered are taken out again.
func (e *Engine) register() error {
	if e.cfg.registerer == nil {
		return nil
	}
	cs := []prometheus.Collector{newResidencyCollector(e.res), newMemoryCollector(e), newGuestCollector(e.slots)}
	if e.journal != nil {
		cs = append(cs, newJournalCollector(e.journal))
	}
	for _, c := range cs {
		if err := e.cfg.registerer.Register(c); err != nil {
			e.unregister()
			return fmt.Errorf("engine: registering the engine's metrics: %w", err)
		}
		e.collectors = append(e.collectors, c)
	}
	return nil
}

// unregister takes the engine's collectors out of the registerer.
func (e *Engine) unregister() {
	for _, c := range e.collectors {
		e.cfg.registerer.Unregister(c)
	}
	e.collectors = nil
}

// journalCollector exports the node journal's counters (WithJournal).
type journalCollector struct {
	j                             *journal
	syncs, commits, retired, byts *prometheus.Desc
}

func newJournalCollector(j *journal) *journalCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &journalCollector{
		j:       j,
		syncs:   d("wasmkeep_journal_syncs_total", "Syncs of the node journal: each makes a batch of durable commits durable at once."),
		commits: d("wasmkeep_journal_commits_total", "Durable commits (syncs of a WAL, and deliveries' deferred commits) the node journal stood in for: divided by wasmkeep_journal_syncs_total, the commits per sync."),
		retired: d("wasmkeep_journal_files_retired_total", "Node journal files retired: every WAL with a record in the file synced in its own file, so that the file may be used again."),
		byts:    d("wasmkeep_journal_bytes_total", "Bytes of records appended to the node journal."),
	}
}

func (c *journalCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.syncs, c.commits, c.retired, c.byts} {
		ch <- d
	}
}

func (c *journalCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.j.stats()
	for d, v := range map[*prometheus.Desc]int64{c.syncs: s.Syncs, c.commits: s.Waits + s.Deferred, c.retired: s.Retired, c.byts: s.Bytes} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
}
