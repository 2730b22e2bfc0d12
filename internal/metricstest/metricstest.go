// Package metricstest reads metric values back in tests, from a registry or
// from a scrape of the text format.
package metricstest

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Families is a set of metric families by name: a registry's, gathered, or
// a scrape's, parsed.
type Families map[string]*dto.MetricFamily

// Gather reads g's families; it panics if g fails, which in a test is a
// defect of the collector under test.
func Gather(g prometheus.Gatherer) Families {
	mfs, err := g.Gather()
	if err != nil {
		panic(err)
	}
	out := make(Families, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// Has reports whether there is a family of that name.
func (f Families) Has(name string) bool { _, ok := f[name]; return ok }

// Value is the sum, over the series of name whose labels include the given
// name/value pairs, of a counter's or gauge's value or a histogram's count
// (0 when no series matches).
func (f Families) Value(name string, labels ...string) float64 {
	mf, ok := f[name]
	if !ok {
		return 0
	}
	sum := 0.0
series:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue series
			}
		}
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		case m.GetUntyped() != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum
}
