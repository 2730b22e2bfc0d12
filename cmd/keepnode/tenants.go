package main

import (
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/wasmkeep/alarms/node"
)

// tenantFlag is a per-tenant setting: "V" for every tenant, "TENANT=V" for
// one, comma-separated or repeated (-tenant-weight acme=3,beta=2).
type tenantFlag[T any] struct {
	perClass[T]
	want  string
	parse func(string) (T, bool)
	show  func(T) string
}

func (f *tenantFlag[T]) String() string {
	if f == nil || f.show == nil {
		return ""
	}
	return f.format(f.show)
}

func (f *tenantFlag[T]) Set(v string) error { return f.set(v, f.want, f.parse) }

// get is the setting of one tenant.
func (f *tenantFlag[T]) get(tenant string) T {
	if v, ok := f.classes[tenant]; ok {
		return v
	}
	return f.all
}

func newIntTenantFlag(def, least int, want string) *tenantFlag[int] {
	return &tenantFlag[int]{perClass: perClass[int]{all: def}, want: want, show: strconv.Itoa,
		parse: func(s string) (int, bool) {
			n, err := strconv.Atoi(s)
			return n, err == nil && n >= least
		}}
}

// tenantFlags are the per-tenant settings.
type tenantFlags struct {
	weight, burst, concurrency *tenantFlag[int]
	rate                       *tenantFlag[float64]
}

func newTenantFlags() *tenantFlags {
	return &tenantFlags{
		weight:      newIntTenantFlag(1, 1, "a weight of 1 or more, as W or TENANT=W"),
		burst:       newIntTenantFlag(0, 0, "a count of requests, 0 (the rate, at least 1) or more, as N or TENANT=N"),
		concurrency: newIntTenantFlag(0, 0, "a count of requests, 0 (no limit) or more, as N or TENANT=N"),
		rate: &tenantFlag[float64]{want: "requests a second, 0 (no limit) or more, as R or TENANT=R",
			show: func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) },
			parse: func(s string) (float64, bool) {
				f, err := strconv.ParseFloat(s, 64)
				return f, err == nil && f >= 0 && !math.IsInf(f, 0)
			}},
	}
}

// named is every tenant a per-tenant flag names, in name order: the
// tenants the per-tenant metrics name.
func (t *tenantFlags) named() []string {
	set := map[string]bool{}
	for _, m := range []map[string]int{t.weight.classes, t.burst.classes, t.concurrency.classes} {
		for n := range m {
			set[n] = true
		}
	}
	for n := range t.rate.classes {
		set[n] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// admission is the limits of every tenant and of each one named
// (node.Config.Admission).
func (t *tenantFlags) admission() node.Admission {
	limits := func(name string) node.TenantLimits {
		return node.TenantLimits{Concurrency: t.concurrency.get(name), Rate: t.rate.get(name), Burst: t.burst.get(name)}
	}
	a := node.Admission{Default: node.TenantLimits{Concurrency: t.concurrency.all, Rate: t.rate.all, Burst: t.burst.all}}
	for _, n := range t.named() {
		if l := limits(n); l != a.Default {
			if a.Tenants == nil {
				a.Tenants = map[string]node.TenantLimits{}
			}
			a.Tenants[n] = l
		}
	}
	return a
}

// weights are the weights of the tenants named (node.Config.TenantWeights).
func (t *tenantFlags) weights() map[string]int {
	w := map[string]int{}
	for _, n := range t.named() {
		w[n] = t.weight.get(n)
	}
	return w
}
