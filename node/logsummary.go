package node

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms"
)

// DefaultLogSummaryEvery is how often a node logs the summary of its
// firings at INFO (Config.LogSummaryEvery): each alarm fired is a DEBUG
// line, so a busy node's log at INFO grows by at most one line a minute
// from firings that succeed.
const DefaultLogSummaryEvery = time.Minute

// Results of an on-alarm run, the result label of
// wasmkeep_class_alarm_runs_total.
const (
	runOK           = "ok"
	runFailed       = "failed"
	runDeadLettered = "dead_lettered"
)

// observability is the node's share of its metrics and logs that watch
// the alarms as they fire and the HTTP API: the request metrics, the runs
// by class, and the counts of the periodic summary.
type observability struct {
	http *httpMetrics
	// runs is wasmkeep_class_alarm_runs_total by class, then result; its
	// class label has only the classes the node serves.
	runs map[string]map[string]prometheus.Counter
	// Since the last summary.
	fired, failed, deadLettered, errored atomic.Int64
	// takeovers is the holds' Takeovers count at the last summary.
	takeovers int64
}

// registerObservability registers the HTTP metrics and the runs by class.
func (n *Node) registerObservability(reg prometheus.Registerer) error {
	var err error
	if n.obs.http, err = newHTTPMetrics(reg); err != nil {
		return err
	}
	runs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmkeep_class_alarm_runs_total",
		Help: "on-alarm runs of the node timer's deliveries, by class (the node's classes only) and result: ok, failed (a retry committed), dead_lettered (failed on the class's last attempt).",
	}, []string{"class", "result"})
	if err := reg.Register(runs); err != nil {
		return err
	}
	n.obs.runs = map[string]map[string]prometheus.Counter{}
	for class := range n.classes {
		n.obs.runs[class] = map[string]prometheus.Counter{}
		for _, r := range []string{runOK, runFailed, runDeadLettered} {
			n.obs.runs[class][r] = runs.WithLabelValues(class, r)
		}
	}
	return nil
}

// observeDelivery counts a delivery of the timer loop for the summary and
// the runs by class.
func (n *Node) observeDelivery(d alarms.Delivery) {
	o := &n.obs
	ev := d.Event
	result := ""
	switch {
	case d.Err != nil:
		if !errors.Is(d.Err, alarms.ErrNotHere) {
			o.errored.Add(1)
		}
		return
	case !ev.Ran:
		return
	case ev.GaveUp:
		o.deadLettered.Add(1)
		result = runDeadLettered
	case ev.Err != nil:
		o.failed.Add(1)
		result = runFailed
	default:
		o.fired.Add(1)
		result = runOK
	}
	if c := o.runs[d.Actor.Class][result]; c != nil {
		c.Inc()
	}
}

// summarize logs, every period until ctx ends and once more then, what
// the firings of that period came to, when any happened.
func (n *Node) summarize(ctx context.Context, log hclog.Logger, every time.Duration) {
	if every < 0 {
		return
	}
	if every == 0 {
		every = DefaultLogSummaryEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			n.logSummary(log, every)
			return
		case <-t.C:
			n.logSummary(log, every)
		}
	}
}

func (n *Node) logSummary(log hclog.Logger, every time.Duration) {
	o := &n.obs
	var takenOver int64
	if n.holds != nil {
		// Each takeover is a DEBUG line (a dead node's backlog is
		// thousands): the summary counts them.
		now := n.holds.Stats().Takeovers
		takenOver, o.takeovers = now-o.takeovers, now
	}
	counts := []int64{o.fired.Swap(0), o.failed.Swap(0), o.deadLettered.Swap(0), o.errored.Swap(0), takenOver}
	if !slices.ContainsFunc(counts, func(c int64) bool { return c != 0 }) {
		return
	}
	log.Info("alarms in the last "+every.String(), "fired", counts[0], "failed", counts[1], "dead_lettered", counts[2], "delivery_errors", counts[3], "taken_over", counts[4])
}
